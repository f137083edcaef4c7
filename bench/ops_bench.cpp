// Times a fixed set of op workloads (median of repeated runs after warm-up) and prints one
// "name milliseconds" line each. bench/torch_ops.py runs the same workloads in PyTorch;
// scripts/bench.sh puts the two side by side in BENCHMARKS.md.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "tessera/tessera.h"

using namespace tessera;

namespace {

double median_ms(const std::function<void()>& fn, int repeats) {
  for (int i = 0; i < 2; ++i) fn();  // warm-up (primitive caches, page faults)
  std::vector<double> t;
  for (int i = 0; i < repeats; ++i) {
    auto start = std::chrono::steady_clock::now();
    fn();
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

void report(const std::string& name, const std::function<void()>& fn, int repeats = 15) {
  std::printf("%s %.4f\n", name.c_str(), median_ms(fn, repeats));
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  std::string filter = argc > 1 ? argv[1] : "";
  auto run = [&](const std::string& name, const std::function<void()>& fn, int repeats = 15) {
    if (filter.empty() || name.find(filter) != std::string::npos) report(name, fn, repeats);
  };
  manual_seed(0);
  std::fprintf(stderr, "threads: %d\n", omp_get_max_threads());
  autograd::NoGradGuard no_grad;

  Tensor a = randn({1 << 20}), b = randn({1 << 20});
  run("add_1m", [&] { add(a, b); });
  run("exp_1m", [&] { exp(a); });
  run("gelu_tanh_1m", [&] { gelu(a, "tanh"); });
  Tensor m = randn({1024, 1024}), row = randn({1024});
  run("mul_broadcast_1024x1024", [&] { mul(m, row); });
  run("sum_lastdim_1024x1024", [&] { sum(m, {1}); });
  run("sum_dim0_1024x1024", [&] { sum(m, {0}); });
  Tensor big = randn({2048, 2048});
  run("transpose_contiguous_2048", [&] { big.t().contiguous(); });

  Tensor s = randn({4096, 1024});
  run("softmax_4096x1024", [&] { softmax(s, -1); });
  Tensor ln = randn({4096, 768}), w = randn({768}), bias = randn({768});
  run("layer_norm_4096x768", [&] { layer_norm(ln, {768}, w, bias); });
  run("rms_norm_4096x768", [&] { rms_norm(ln, w); });
  Tensor logits = randn({1024, 8192});
  Tensor target = randint(0, 8192, {1024});
  run("cross_entropy_1024x8192", [&] { cross_entropy(logits, target); });

  Tensor x = randn({1024, 1024}), y = randn({1024, 1024});
  run("matmul_f32_1024", [&] { matmul(x, y); }, 9);
  run("matmul_f32_1024_nt", [&] { matmul(x, y.t()); }, 9);
  Tensor xb = x.to(kBFloat16), yb = y.to(kBFloat16);
  run("matmul_bf16_1024", [&] { matmul(xb, yb); }, 9);
  Tensor q = randn({4, 12, 256, 64}), k = randn({4, 12, 256, 64}), v = randn({4, 12, 256, 64});
  run("sdpa_causal_4x12x256x64", [&] { scaled_dot_product_attention(q, k, v, std::nullopt, true); }, 9);

  {
    autograd::GradModeGuard grad(true);
    Tensor inp = randn({2048, 768}).requires_grad_();
    Tensor weight = (randn({3072, 768}) * 0.02).requires_grad_();
    Tensor lb = zeros({3072}, TensorOptions().with_requires_grad());
    run("linear_fwd_bwd_2048x768x3072", [&] {
      Tensor out = linear(inp, weight, lb);
      sum(out).backward();
    }, 7);
  }
  return 0;
}
