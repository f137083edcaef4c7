// Single-op throughput on one CUDA GPU, printed one line per case in the format of its PyTorch
// peer (bench/torch_cuda_ops.py), so the two outputs line up:
//   GEMM (matmul, and linear with bias as the transformer uses it) in TFLOP/s, float32 (with and
//   without TF32) and bfloat16; copy, layer norm, RMS norm and softmax forward in GB/s of the
//   bytes they must move (read the input, write the output).
// Each case is warmed up, then timed with CUDA events over enough repetitions to run ~50 ms; the
// median of 5 such timings is printed.
//
//   cuda_ops_bench [--only gemm|norm]
#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "tessera/runtime/cuda.h"
#include "tessera/tessera.h"

using namespace tessera;

namespace {

const Device kGpu{DeviceType::CUDA, 0};

// Median milliseconds of one call of fn.
double time_ms(const std::function<void()>& fn) {
  autograd::NoGradGuard no_grad;
  for (int i = 0; i < 3; ++i) fn();
  cuda::Event start, stop;
  start.record();
  fn();
  stop.record();
  stop.synchronize();
  const int reps = std::clamp(static_cast<int>(50.0 / std::max(start.elapsed_ms(stop), 1e-3f)), 1,
                              1000);
  std::vector<double> per_call;
  for (int round = 0; round < 5; ++round) {
    start.record();
    for (int i = 0; i < reps; ++i) fn();
    stop.record();
    stop.synchronize();
    per_call.push_back(start.elapsed_ms(stop) / reps);
  }
  std::sort(per_call.begin(), per_call.end());
  return per_call[per_call.size() / 2];
}

Tensor random_on_gpu(const Shape& shape, DType dtype) {
  return randn(shape, TensorOptions(kFloat32).with_device(kGpu)).to(dtype);
}

const char* name_of(DType dtype, bool tf32) {
  if (dtype == kBFloat16) return "bf16";
  return tf32 ? "tf32" : "fp32";
}

void gemm_cases() {
  struct Mnk {
    int64_t m, n, k;
  };
  // Squares, then GPT-2 124M's training GEMMs at batch 8 x 1024 (qkv, attention out, MLP up and
  // down, lm_head).
  const std::vector<Mnk> shapes{{1024, 1024, 1024}, {2048, 2048, 2048}, {4096, 4096, 4096},
                                {8192, 8192, 8192}, {8192, 2304, 768},  {8192, 768, 768},
                                {8192, 3072, 768},  {8192, 768, 3072},  {8192, 50304, 768}};
  for (auto [dtype, tf32] : {std::pair{kFloat32, false}, {kFloat32, true}, {kBFloat16, false}}) {
    cuda::set_allow_tf32(tf32);
    for (const Mnk& s : shapes) {
      const Tensor a = random_on_gpu({s.m, s.k}, dtype), b = random_on_gpu({s.k, s.n}, dtype);
      const double ms = time_ms([&] { matmul(a, b); });
      std::printf("matmul %s %lldx%lldx%lld: %.1f TFLOP/s\n", name_of(dtype, tf32),
                  static_cast<long long>(s.m), static_cast<long long>(s.n),
                  static_cast<long long>(s.k), 2.0 * s.m * s.n * s.k / (ms * 1e9));
    }
  }
  cuda::set_allow_tf32(false);
  // linear(x, W, b): x [M, K] @ W[N, K]^T + b, the layout of nn.Linear.
  for (const Mnk& s : {Mnk{8192, 2304, 768}, Mnk{8192, 3072, 768}, Mnk{8192, 768, 3072}}) {
    const Tensor x = random_on_gpu({s.m, s.k}, kBFloat16), w = random_on_gpu({s.n, s.k}, kBFloat16),
                 bias = random_on_gpu({s.n}, kBFloat16);
    const double ms = time_ms([&] { linear(x, w, bias); });
    std::printf("linear bf16 %lldx%lldx%lld: %.1f TFLOP/s\n", static_cast<long long>(s.m),
                static_cast<long long>(s.n), static_cast<long long>(s.k),
                2.0 * s.m * s.n * s.k / (ms * 1e9));
  }
}

void bandwidth_case(const char* op, DType dtype, int64_t rows, int64_t cols,
                    const std::function<void(const Tensor&)>& fn) {
  const Tensor x = random_on_gpu({rows, cols}, dtype);
  const double ms = time_ms([&] { fn(x); });
  const double bytes = 2.0 * static_cast<double>(x.numel()) * x.element_size();
  std::printf("%s %s %lldx%lld: %.0f GB/s\n", op, name_of(dtype, false),
              static_cast<long long>(rows), static_cast<long long>(cols), bytes / (ms * 1e6));
}

void norm_cases() {
  struct Rc {
    int64_t rows, cols;
  };
  // GPT-2's activations at batch 8 x 1024 (768 wide), a LLaMA-7B-wide row, attention scores.
  for (DType dtype : {kFloat32, kBFloat16}) {
    for (Rc s : {Rc{8192, 768}, Rc{8192, 4096}, Rc{32768, 1024}}) {
      const Tensor w = ones({s.cols}, TensorOptions(dtype).with_device(kGpu));
      const Tensor b = zeros({s.cols}, TensorOptions(dtype).with_device(kGpu));
      bandwidth_case("copy", dtype, s.rows, s.cols, [](const Tensor& x) { x.clone(); });
      bandwidth_case("layer_norm", dtype, s.rows, s.cols,
                     [&](const Tensor& x) { layer_norm(x, {s.cols}, w, b); });
      bandwidth_case("rms_norm", dtype, s.rows, s.cols,
                     [&](const Tensor& x) { rms_norm(x, w); });
      bandwidth_case("softmax", dtype, s.rows, s.cols,
                     [](const Tensor& x) { softmax(x, -1); });
    }
  }
}

}  // namespace

int main(int argc, char** argv) try {
  const std::string only = argc == 3 && std::string(argv[1]) == "--only" ? argv[2] : "";
  if (!cuda::is_available()) throw RuntimeError("[cuda_ops_bench] expected a CUDA device");
  if (only.empty() || only == "gemm") gemm_cases();
  if (only.empty() || only == "norm") norm_cases();
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "%s\n", e.what());
  return 1;
}
