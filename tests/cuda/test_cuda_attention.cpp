// Flash attention on the GPU (bfloat16 and float16) against the composite on the CPU in float32
// from the same rounded inputs: the output and dq, dk, dv at realistic shapes (causal, GQA, tails
// that are not a multiple of the tile, Tq != Tk, T = 1, strided inputs), and the create_graph
// fallback. Without a GPU every test skips with a message.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "tessera/autograd/engine.h"
#include "tessera/runtime/cuda.h"
#include "tessera/tessera.h"
#include "testing/cuda_test.h"

namespace tessera {
namespace {

using testing::kCuda;
using CudaAttention = testing::CudaTest;

struct Case {
  int64_t B, Hq, Hkv, Tq, Tk, D;
  bool causal;
  bool strided = false;  // q, k, v, dout as [B, T, H, D] transposed to [B, H, T, D]
};

std::string name(const Case& c, DType dt) {
  return detail::str(dt, " B", c.B, " Hq", c.Hq, " Hkv", c.Hkv, " Tq", c.Tq, " Tk", c.Tk, " D", c.D,
                     c.causal ? " causal" : "", c.strided ? " strided" : "");
}

// max |got - ref| / max |ref| and mean |got - ref| / mean |ref|; the denominators are at least
// 1e-3, so a gradient that is exactly 0 (dq, dk with one key: softmax of one score is constant)
// compares absolutely.
struct Err {
  double max, mean;
};

Err rel_err(const Tensor& got, const Tensor& ref) {
  Tensor g = got.to(kCPU).to(kFloat64), r = ref.to(kFloat64);
  Tensor d = abs(g - r);
  return {amax(d).item<double>() / std::max(amax(abs(r)).item<double>(), 1e-3),
          mean(d).item<double>() / std::max(mean(abs(r)).item<double>(), 1e-3)};
}

// Tolerances of a 16-bit kernel against float32: p, ds and the output rounded to 16 bits.
struct Tol {
  double max, mean;
};
Tol tolerance(DType dt) { return dt == kBFloat16 ? Tol{2e-2, 6e-3} : Tol{4e-3, 1e-3}; }

// [B, H, T, D] values, rounded to dt; strided: a transposed [B, T, H, D] tensor.
Tensor make(int64_t B, int64_t H, int64_t T, int64_t D, DType dt, bool strided) {
  if (strided) return randn({B, T, H, D}).to(dt).transpose(1, 2);
  return randn({B, H, T, D}).to(dt);
}

void check(const Case& c, DType dt) {
  SCOPED_TRACE(name(c, dt));
  manual_seed(1234);
  Tensor q = make(c.B, c.Hq, c.Tq, c.D, dt, c.strided);
  Tensor k = make(c.B, c.Hkv, c.Tk, c.D, dt, c.strided);
  Tensor v = make(c.B, c.Hkv, c.Tk, c.D, dt, c.strided);
  Tensor dout = make(c.B, c.Hq, c.Tq, c.D, dt, c.strided);

  // Reference: float32 composite on the CPU from the rounded values.
  Tensor qr = q.to(kFloat32).detach().requires_grad_(),
         kr = k.to(kFloat32).detach().requires_grad_(),
         vr = v.to(kFloat32).detach().requires_grad_();
  Tensor ref = scaled_dot_product_attention(qr, kr, vr, std::nullopt, c.causal);
  ref.backward(dout.to(kFloat32));

  auto to_gpu = [&](const Tensor& t) {
    if (!c.strided) return t.to(kCuda).detach();
    return t.transpose(1, 2).contiguous().to(kCuda).transpose(1, 2).detach();
  };
  Tensor qg = to_gpu(q).requires_grad_(), kg = to_gpu(k).requires_grad_(),
         vg = to_gpu(v).requires_grad_();
  Tensor out = scaled_dot_product_attention(qg, kg, vg, std::nullopt, c.causal);
  ASSERT_TRUE(out.grad_fn());
  EXPECT_EQ(out.grad_fn()->name(), "FlashAttentionBackward");
  EXPECT_EQ(out.dtype(), dt);
  out.backward(to_gpu(dout));

  const Tol tol = tolerance(dt);
  const std::pair<const char*, std::pair<Tensor, Tensor>> results[] = {
      {"out", {out, ref}},
      {"dq", {qg.grad(), qr.grad()}},
      {"dk", {kg.grad(), kr.grad()}},
      {"dv", {vg.grad(), vr.grad()}}};
  for (const auto& [what, pair] : results) {
    ASSERT_TRUE(pair.first.defined()) << what;
    EXPECT_EQ(pair.first.sizes(), pair.second.sizes()) << what;
    const Err e = rel_err(pair.first, pair.second);
    std::printf("  %-44s %-3s max %.2e mean %.2e\n", name(c, dt).c_str(), what, e.max, e.mean);
    EXPECT_LE(e.max, tol.max) << what;
    EXPECT_LE(e.mean, tol.mean) << what;
  }
}

void check_both(const Case& c) {
  check(c, kBFloat16);
  check(c, kFloat16);
}

TEST_F(CudaAttention, CausalGpt2Shape) { check_both({2, 12, 12, 1024, 1024, 64, true}); }

TEST_F(CudaAttention, GqaTailHeadDim128Causal) { check_both({2, 8, 2, 300, 300, 128, true}); }

TEST_F(CudaAttention, GqaTailHeadDim128) { check_both({2, 8, 2, 300, 300, 128, false}); }

TEST_F(CudaAttention, FewerQueriesThanKeys) {
  check_both({2, 4, 4, 100, 257, 64, false});
  check_both({2, 4, 4, 100, 257, 64, true});
}

TEST_F(CudaAttention, MoreQueriesThanKeysCausal) { check_both({1, 4, 2, 257, 100, 128, true}); }

TEST_F(CudaAttention, SingleToken) {
  check_both({2, 12, 12, 1, 1, 64, true});
  check_both({2, 12, 12, 1, 1, 64, false});
}

TEST_F(CudaAttention, HeadDims32And96) {
  check_both({2, 4, 4, 200, 200, 32, true});
  check_both({2, 4, 1, 200, 200, 96, false});
}

TEST_F(CudaAttention, StridedInputsAreReadInPlace) {
  check_both({2, 6, 3, 177, 177, 64, true, /*strided=*/true});
}

// create_graph: the gradient is rebuilt from the composite, so it has a graph and equals the
// kernel's gradient up to rounding.
TEST_F(CudaAttention, CreateGraphFallsBackToTheComposite) {
  manual_seed(7);
  Tensor q = randn({1, 4, 70, 64}).to(kBFloat16).to(kCuda).requires_grad_();
  Tensor k = randn({1, 2, 70, 64}).to(kBFloat16).to(kCuda).requires_grad_();
  Tensor v = randn({1, 2, 70, 64}).to(kBFloat16).to(kCuda).requires_grad_();
  Tensor g = randn({1, 4, 70, 64}).to(kBFloat16).to(kCuda);
  Tensor out = scaled_dot_product_attention(q, k, v, std::nullopt, true);
  TensorList fast = autograd::grad({out}, {q, k, v}, {g}, true, false);
  TensorList graph = autograd::grad({out}, {q, k, v}, {g}, true, true);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_TRUE(graph[i].requires_grad()) << i;
    const Err e = rel_err(graph[i].detach(), fast[i].to(kCPU).to(kFloat32));
    EXPECT_LE(e.max, 2e-2) << i;
  }
  // And it differentiates again.
  Tensor gg = autograd::grad({sum(graph[0].to(kFloat32) * graph[0].to(kFloat32))}, {k})[0];
  EXPECT_TRUE(gg.defined());
  EXPECT_TRUE(all(isfinite(gg.to(kCPU).to(kFloat32))).item<bool>());
}

// A float mask keeps the composite (no flash kernel takes one).
TEST_F(CudaAttention, MaskedAttentionKeepsTheComposite) {
  Tensor q = randn({1, 2, 16, 64}).to(kBFloat16).to(kCuda).requires_grad_();
  Tensor m = zeros({16, 16}).to(kBFloat16).to(kCuda);
  Tensor out = scaled_dot_product_attention(q, q, q, m, false);
  ASSERT_TRUE(out.grad_fn());
  EXPECT_NE(out.grad_fn()->name(), "FlashAttentionBackward");
}

}  // namespace
}  // namespace tessera
