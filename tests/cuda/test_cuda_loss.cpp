// Cross entropy at training shapes: rows enough, and rows wide enough, that the CUDA kernels take
// their many-rows launch (256-thread row blocks where a row alone would take more; the op
// table's small cases take one block per SM), with ignored rows and label smoothing, forward and
// backward against the CPU.
#include <gtest/gtest.h>

#include "tessera/tessera.h"
#include "testing/cuda_test.h"

namespace tessera {
namespace {

using testing::CudaTest;
using testing::kCuda;

TEST_F(CudaTest, CrossEntropyOverManyRowsMatchesTheCpu) {
  // 4096 rows (above 16 per SM) of 20011 classes (a row alone would take 512 threads or more;
  // an odd width, so each row's vectors start at another offset).
  const int64_t M = 4096, C = 20011;
  for (DType dtype : {kBFloat16, kFloat32}) {
    for (double smoothing : {0.0, 0.1}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(dtype) << " smoothing " << smoothing);
      Generator gen(7);
      const Tensor logits = (randn({M, C}, TensorOptions(kFloat32), &gen) * 3.0).to(dtype);
      Tensor target = randint(0, C, {M}, TensorOptions(kInt64), &gen);
      target.narrow(0, 100, 50).fill_(-100);  // ignored rows
      auto loss_and_grad = [&](Device device) {
        Tensor x = logits.to(device).detach().requires_grad_(true);
        Tensor loss = cross_entropy(x, target.to(device), -100, smoothing);
        loss.backward();
        return std::pair{loss.to(kCPU).to(kFloat64), x.grad().to(kCPU).to(kFloat64)};
      };
      const auto [want_loss, want_grad] = loss_and_grad(kCPU);
      const auto [got_loss, got_grad] = loss_and_grad(kCuda);
      const double tol = dtype == kFloat32 ? 1e-5 : 1e-2;
      EXPECT_TRUE(allclose(got_loss, want_loss, tol, tol)) << got_loss << " vs " << want_loss;
      // Per-element gradients are ~1 / (M C): compare relative to the largest.
      const double scale = max(abs(want_grad)).item<double>();
      EXPECT_LE(max(abs(got_grad - want_grad)).item<double>(), tol * scale);
    }
  }
}

}  // namespace
}  // namespace tessera
