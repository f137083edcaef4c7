// The CPU's float32 flash attention (forward and backward) against the composite run in float64
// on the same values: outputs and the gradients of q, k and v, over causal and full attention,
// grouped-query heads, Tq != Tk, several query blocks, strided [B, T, H, D] views and head dims
// the CUDA kernels do not take.
#include <gtest/gtest.h>

#include "tessera/tessera.h"
#include "testing/torch_reference.h"

using namespace tessera;

namespace {

struct Shapes {
  int64_t B, Hq, Hkv, Tq, Tk, D;
  bool causal;
};

// q, k, v as [B, T, H, D] tensors transposed to [B, H, T, D] (what attention layers pass).
Tensor heads(int64_t B, int64_t H, int64_t T, int64_t D, DType dtype) {
  return randn({B, T, H, D}, TensorOptions(dtype)).transpose(1, 2);
}

// Output and gradients of sum(out * w) for a fixed random w.
TensorList run(const Tensor& q0, const Tensor& k0, const Tensor& v0, const Tensor& w, bool causal,
               DType dtype) {
  Tensor q = q0.to(dtype).detach().requires_grad_();
  Tensor k = k0.to(dtype).detach().requires_grad_();
  Tensor v = v0.to(dtype).detach().requires_grad_();
  Tensor out = scaled_dot_product_attention(q, k, v, std::nullopt, causal);
  sum(out * w.to(dtype)).backward();
  return {out, q.grad(), k.grad(), v.grad()};
}

class CpuFlashAttention : public ::testing::TestWithParam<Shapes> {};

TEST_P(CpuFlashAttention, MatchesTheFloat64Composite) {
  const Shapes s = GetParam();
  manual_seed(7);
  Tensor q = heads(s.B, s.Hq, s.Tq, s.D, kFloat64), k = heads(s.B, s.Hkv, s.Tk, s.D, kFloat64);
  Tensor v = heads(s.B, s.Hkv, s.Tk, s.D, kFloat64);
  Tensor w = randn({s.B, s.Hq, s.Tq, s.D}, TensorOptions(kFloat64));
  // float64 takes the composite (the oracle); float32 takes the flash kernels.
  const TensorList want = run(q, k, v, w, s.causal, kFloat64);
  const TensorList got = run(q, k, v, w, s.causal, kFloat32);
  const char* names[] = {"out", "dq", "dk", "dv"};
  for (int i = 0; i < 4; ++i) tessera::testing::expect_close(got[i], want[i], names[i], 2e-4);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CpuFlashAttention,
    ::testing::Values(Shapes{2, 4, 4, 33, 33, 16, true}, Shapes{1, 6, 2, 17, 17, 64, true},  // GQA
                      Shapes{2, 2, 1, 5, 12, 8, true},  // Tq < Tk
                      Shapes{1, 2, 2, 12, 5, 8, true},  // Tq > Tk
                      Shapes{2, 3, 3, 9, 14, 24, false}, Shapes{1, 1, 1, 1, 1, 4, true},
                      // several 64-row query blocks
                      Shapes{1, 4, 2, 150, 150, 16, true}, Shapes{1, 2, 2, 70, 140, 8, true},
                      Shapes{1, 2, 1, 130, 65, 8, false}));

TEST(CpuFlashAttentionGraph, DoubleBackwardStillWorks) {
  // create_graph: the backward runs the composite gradient, which differentiates again.
  manual_seed(3);
  Tensor q = heads(1, 2, 6, 8, kFloat32).detach().requires_grad_();
  Tensor k = heads(1, 2, 6, 8, kFloat32).detach().requires_grad_();
  Tensor v = heads(1, 2, 6, 8, kFloat32).detach().requires_grad_();
  Tensor out = scaled_dot_product_attention(q, k, v, std::nullopt, true);
  TensorList g = autograd::grad({sum(out * out)}, {q}, {}, /*retain_graph=*/true,
                                /*create_graph=*/true);
  sum(g[0] * g[0]).backward();
  ASSERT_TRUE(k.grad().defined());
  EXPECT_TRUE(std::isfinite(sum(abs(k.grad())).item<double>()));
}

}  // namespace
