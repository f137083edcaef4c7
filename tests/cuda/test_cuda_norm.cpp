// Layer norm and RMS norm gradients at training shapes: enough rows that the weight and bias
// gradients are summed in many row chunks and then across chunks (the op table's small cases
// take one chunk), against the CPU in float32.
#include <gtest/gtest.h>

#include "tessera/tessera.h"
#include "testing/cuda_test.h"

namespace tessera {
namespace {

using testing::CudaTest;
using testing::kCuda;

struct NormGrads {
  Tensor dx, dweight, dbias;
};

// Gradients of sum(norm(x) * probe) on `device`; bias only for layer norm.
NormGrads norm_grads(bool layer, const Tensor& x, const Tensor& w, const Tensor& b,
                     const Tensor& probe, Device device) {
  // Leaves of their own on each device (to() of a tensor already there returns it).
  auto leaf = [&](const Tensor& t) { return t.to(device).detach().requires_grad_(true); };
  Tensor xd = leaf(x), wd = leaf(w), bd = leaf(b);
  Tensor y = layer ? layer_norm(xd, {x.size(-1)}, wd, bd) : rms_norm(xd, wd);
  sum(y * probe.to(device)).backward();
  return {xd.grad().to(kCPU), wd.grad().to(kCPU), layer ? bd.grad().to(kCPU) : Tensor()};
}

TEST_F(CudaTest, NormParameterGradientsAcrossManyRowChunksMatchTheCpu) {
  // 4096 x 768 is GPT-2's width at batch 4 x 1024 (tens of chunks); 1000 x 300 leaves a partial
  // 32-column tile and rows that do not divide into the chunks.
  for (auto [rows, n] : {std::pair<int64_t, int64_t>{4096, 768}, {1000, 300}}) {
    for (bool layer : {true, false}) {
      SCOPED_TRACE(::testing::Message() << rows << " x " << n << (layer ? " layer" : " rms"));
      Generator gen(rows + n);
      const Tensor x = randn({rows, n}, TensorOptions(kFloat32), &gen);
      const Tensor w = randn({n}, TensorOptions(kFloat32), &gen);
      const Tensor b = randn({n}, TensorOptions(kFloat32), &gen);
      const Tensor probe = randn({rows, n}, TensorOptions(kFloat32), &gen);
      const NormGrads want = norm_grads(layer, x, w, b, probe, kCPU);
      const NormGrads got = norm_grads(layer, x, w, b, probe, kCuda);
      EXPECT_TRUE(allclose(got.dx, want.dx, 1e-4, 1e-4));
      // Sums of thousands of terms in another order: relative to their size.
      EXPECT_TRUE(allclose(got.dweight, want.dweight, 1e-4, 1e-3));
      if (layer) EXPECT_TRUE(allclose(got.dbias, want.dbias, 1e-4, 1e-3));
    }
  }
}

}  // namespace
}  // namespace tessera
