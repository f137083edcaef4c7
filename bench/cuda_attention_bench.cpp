// scaled_dot_product_attention on one CUDA GPU (the flash kernels for bfloat16/float16): median
// forward and forward+backward times and TFLOP/s over a grid of shapes, the peer of
// bench/torch_cuda_attention.py. FLOPs as FlashAttention counts them: forward 4 B H Tq Tk D
// (halved when causal), backward 2.5 times that.
//
//   cuda_attention_bench [--dtype bfloat16|float16] [--bh 128] [--iters 20]
//                        [--seqs 1024,2048,4096] [--dims 64,128]
#include <algorithm>
#include <cstdio>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "tessera/autograd/engine.h"
#include "tessera/runtime/cuda.h"
#include "tessera/tessera.h"

using namespace tessera;

namespace {

struct Args {
  std::string dtype = "bfloat16";
  int64_t bh = 128, iters = 20;
  std::vector<int64_t> seqs{1024, 2048, 4096}, dims{64, 128};
};

std::vector<int64_t> parse_list(const std::string& s) {
  std::vector<int64_t> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) out.push_back(std::stoll(item));
  return out;
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--dtype")
      a.dtype = v;
    else if (k == "--bh")
      a.bh = std::stoll(v);
    else if (k == "--iters")
      a.iters = std::stoll(v);
    else if (k == "--seqs")
      a.seqs = parse_list(v);
    else if (k == "--dims")
      a.dims = parse_list(v);
    else
      throw ValueError("[cuda_attention_bench] unknown option " + k);
  }
  return a;
}

// Median milliseconds of fn over iters runs, after two warm-up runs.
double median_ms(int64_t iters, const std::function<void()>& fn) {
  for (int i = 0; i < 2; ++i) fn();
  std::vector<float> ms;
  for (int64_t i = 0; i < iters; ++i) {
    cuda::Event start, end;
    start.record();
    fn();
    end.record();
    end.synchronize();
    ms.push_back(start.elapsed_ms(end));
  }
  std::nth_element(ms.begin(), ms.begin() + ms.size() / 2, ms.end());
  return ms[ms.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  if (!cuda::is_available()) {
    std::printf("no CUDA device here\n");
    return 0;
  }
  const Device dev{DeviceType::CUDA, 0};
  const DType dt = dtype_from_string(a.dtype);
  // B H = bh with B = 8 where it divides (the heads of a small model), else B = 1.
  const int64_t B = a.bh % 8 == 0 ? 8 : 1, H = a.bh / B;
  std::printf("%-6s %-9s %5s %4s %3s %-6s %9s %8s %9s %8s\n", "what", "dtype", "T", "D", "BH",
              "mask", "fwd ms", "TFLOP/s", "f+b ms", "TFLOP/s");
  for (int64_t D : a.dims)
    for (int64_t T : a.seqs)
      for (bool causal : {false, true}) {
        manual_seed(0);
        auto make = [&] { return randn({B, H, T, D}).to(dt).to(dev).requires_grad_(); };
        Tensor q = make(), k = make(), v = make();
        Tensor dout = randn({B, H, T, D}).to(dt).to(dev);
        const double fwd = median_ms(a.iters, [&] {
          autograd::NoGradGuard no_grad;
          (void)scaled_dot_product_attention(q, k, v, std::nullopt, causal);
        });
        const double both = median_ms(a.iters, [&] {
          Tensor out = scaled_dot_product_attention(q, k, v, std::nullopt, causal);
          (void)autograd::grad({out}, {q, k, v}, {dout});
        });
        const double flops = 4.0 * B * H * T * T * D * (causal ? 0.5 : 1.0);
        std::printf("%-6s %-9s %5lld %4lld %3lld %-6s %9.3f %8.1f %9.3f %8.1f\n", "tessera",
                    a.dtype.c_str(), static_cast<long long>(T), static_cast<long long>(D),
                    static_cast<long long>(B * H), causal ? "causal" : "full", fwd,
                    flops / fwd * 1e-9, both, 3.5 * flops / both * 1e-9);
        std::fflush(stdout);
      }
  return 0;
}
