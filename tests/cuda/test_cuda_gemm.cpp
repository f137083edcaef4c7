// GEMMs whose contiguous dims are not multiples of 16 bytes, large enough that the CUDA GEMM
// runs on zero-padded copies (GPT-2's 50257-wide logits; here 1001, 513, 333 or 250 wide): every
// layout that path handles, against float64 on the CPU from the same values.
#include <gtest/gtest.h>

#include "tessera/runtime/cuda.h"
#include "tessera/tessera.h"
#include "testing/cuda_test.h"

namespace tessera {
namespace {

using testing::CudaTest;
using testing::kCuda;

Tensor random(const Shape& shape, DType dtype, uint64_t seed) {
  Generator gen(seed);
  return randn(shape, TensorOptions(kFloat32), &gen).to(dtype);
}

// got (on the GPU) against want (float64 on the CPU): within a fraction of want's largest
// magnitude, since a GEMM's error grows with its sums, not with each element.
void expect_close(const Tensor& got, const Tensor& want, double tol, const char* what) {
  ASSERT_EQ(got.device(), kCuda) << what;
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  const double scale = max(abs(want)).item<double>();
  const double err = max(abs(got.to(kCPU).to(kFloat64) - want)).item<double>();
  EXPECT_LE(err, tol * scale) << what << ": largest error " << err << " of " << scale;
}

double tolerance(DType dtype) { return dtype == kFloat32 ? 1e-5 : 1e-2; }

TEST_F(CudaTest, GemmsWithUnalignedLeadingDimsMatchTheCpu) {
  for (DType dtype : {kBFloat16, kFloat32}) {
    SCOPED_TRACE(dtype_name(dtype));
    const double tol = tolerance(dtype);
    // A linear layer 1001 wide: the result padded, with the bias epilogue.
    Tensor x = random({512, 768}, dtype, 1), w = random({1001, 768}, dtype, 2);
    Tensor bias = random({1001}, dtype, 3), g = random({512, 1001}, dtype, 4);
    auto f64 = [](const Tensor& t) { return t.to(kFloat64); };
    const int64_t padded_before = cuda::gemm_stats().padded;
    expect_close(linear(x.to(kCuda), w.to(kCuda), bias.to(kCuda)),
                 linear(f64(x), f64(w), f64(bias)), tol, "linear, 1001 outputs");
    EXPECT_EQ(cuda::gemm_stats().padded, padded_before + 1) << "the linear ran unpadded";
    // Its input gradient (g read with leading dim 1001) and weight gradient (g transposed).
    expect_close(matmul(g.to(kCuda), w.to(kCuda)), matmul(f64(g), f64(w)), tol, "g @ w");
    expect_close(matmul(g.to(kCuda).t(), x.to(kCuda)), matmul(f64(g).t(), f64(x)), tol, "g^T @ x");
    // Batched with an odd inner dim (both operands padded); a broadcast right side whose width
    // is odd (it and the result padded), as a matrix and as a batch of one; a batch of
    // transposed left sides with an odd M (the result copied back batch by batch).
    Tensor a = random({2, 512, 333}, dtype, 5), b = random({2, 333, 512}, dtype, 6);
    Tensor shared = random({333, 513}, dtype, 7), at = random({2, 1024, 250}, dtype, 8);
    Tensor c = random({2, 1024, 512}, dtype, 9);
    expect_close(matmul(a.to(kCuda), b.to(kCuda)), matmul(f64(a), f64(b)), tol, "batched");
    expect_close(matmul(a.to(kCuda), shared.to(kCuda)), matmul(f64(a), f64(shared)), tol,
                 "broadcast right side");
    expect_close(matmul(a.to(kCuda), shared.unsqueeze(0).to(kCuda)),
                 matmul(f64(a), f64(shared).unsqueeze(0)), tol, "broadcast batch of one");
    expect_close(matmul(at.to(kCuda).transpose(1, 2), c.to(kCuda)),
                 matmul(f64(at).transpose(1, 2), f64(c)), tol, "transposed batch, odd M");
  }
}

TEST_F(CudaTest, LinearWeightAndBiasGradientsMatchTheCpu) {
  // [2, 512, 768] -> 2304 takes the GEMM whose epilogue sums the bias gradient; 45 outputs of 30
  // features are misaligned and take the GEMM and a separate sum. With create_graph the
  // gradients are ops of their own (the fused GEMM has no backward) and must agree too.
  for (DType dtype : {kBFloat16, kFloat32}) {
    for (auto [in, out] : {std::pair<int64_t, int64_t>{768, 2304}, {30, 45}}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(dtype) << " " << in << " -> " << out);
      const double tol = tolerance(dtype);
      const Tensor x = random({2, 512, in}, dtype, 10), w = random({out, in}, dtype, 11);
      const Tensor bias = random({out}, dtype, 12), g = random({2, 512, out}, dtype, 13);
      for (bool create_graph : {false, true}) {
        Tensor wd = w.to(kCuda).detach().requires_grad_(true);
        Tensor bd = bias.to(kCuda).detach().requires_grad_(true);
        const int64_t fused_before = cuda::gemm_stats().fused_row_sums;
        TensorList grads = autograd::grad({linear(x.to(kCuda), wd, bd)}, {wd, bd}, {g.to(kCuda)},
                                          /*retain_graph=*/false, create_graph);
        const Tensor g2 = g.to(kFloat64).reshape({-1, out});
        expect_close(grads[0], matmul(g2.t(), x.to(kFloat64).reshape({-1, in})), tol, "dweight");
        expect_close(grads[1], sum(g2, {0}), tol, "dbias");
        // The epilogue where it applies: bf16 at aligned widths (float32 may have no algorithm
        // and fall back), never for misaligned widths or under create_graph.
        const int64_t fused = cuda::gemm_stats().fused_row_sums - fused_before;
        if (dtype == kBFloat16 && in == 768 && !create_graph)
          EXPECT_EQ(fused, 1) << "cuBLASLt took no BGRADB algorithm";
        else if (in != 768 || create_graph)
          EXPECT_EQ(fused, 0);
      }
    }
  }
}

TEST_F(CudaTest, LinearGeluTakesTheGeluEpilogueAndMatchesTheCpu) {
  // GPT-2's MLP shape, smaller: 768 -> 3072 takes cuBLASLt's GELU epilogue (with the GELU's input
  // written for the backward when a gradient is taken); 30 -> 45 is misaligned and falls back to
  // the bias GEMM and a GELU pass. Values and gradients against float64 on the CPU.
  for (DType dtype : {kBFloat16, kFloat32}) {
    for (auto [in, out] : {std::pair<int64_t, int64_t>{768, 3072}, {30, 45}}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(dtype) << " " << in << " -> " << out);
      const double tol = tolerance(dtype);
      const Tensor x = random({2, 256, in}, dtype, 20), w = random({out, in}, dtype, 21);
      const Tensor bias = random({out}, dtype, 22), g = random({2, 256, out}, dtype, 23);
      const Tensor x64 = x.to(kFloat64).requires_grad_(true);
      const Tensor w64 = w.to(kFloat64).requires_grad_(true);
      const Tensor b64 = bias.to(kFloat64).requires_grad_(true);
      const Tensor want = gelu(linear(x64, w64, b64), "tanh");
      const TensorList want_grads = autograd::grad({want}, {x64, w64, b64}, {g.to(kFloat64)});
      for (bool with_grad : {false, true}) {
        Tensor xd = x.to(kCuda).detach().requires_grad_(with_grad);
        Tensor wd = w.to(kCuda).detach().requires_grad_(with_grad);
        Tensor bd = bias.to(kCuda).detach().requires_grad_(with_grad);
        const int64_t fused_before = cuda::gemm_stats().fused_gelus;
        const Tensor y = linear_gelu(xd, wd, bd, "tanh");
        expect_close(y, want.detach(), tol, "output");
        const int64_t fused = cuda::gemm_stats().fused_gelus - fused_before;
        // The epilogue where it applies: bf16 at aligned widths (float32 may have no algorithm
        // and fall back), never for misaligned widths.
        if (dtype == kBFloat16 && in == 768)
          EXPECT_EQ(fused, 1) << "cuBLASLt took no GELU epilogue algorithm";
        else if (in != 768)
          EXPECT_EQ(fused, 0);
        if (!with_grad) continue;
        const TensorList got = autograd::grad({y}, {xd, wd, bd}, {g.to(kCuda)});
        expect_close(got[0], want_grads[0], tol, "dx");
        expect_close(got[1], want_grads[1], tol, "dweight");
        expect_close(got[2], want_grads[2], tol, "dbias");
      }
    }
  }
}

}  // namespace
}  // namespace tessera
