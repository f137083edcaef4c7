// Ops whose operands share memory, and gradients that more than one place can see: results and
// gradients as PyTorch gives them (values from torch 1.13 in the comments), or a clear error where
// torch refuses.
#include <gtest/gtest.h>

#include <cmath>

#include "tessera/tessera.h"
#include "testing/expect_error.h"
#include "testing/reference.h"

namespace tessera {
namespace {

using testing::values;

TEST(Aliasing, GradOfACreateGraphBackwardIsNotSharedWithLaterBackwards) {
  // torch: x.grad == z.grad == [2, 2, 2] after the two backwards.
  Tensor x = ones({3}).requires_grad_(true), z = ones({3}).requires_grad_(true);
  autograd::backward({sum(x + z)}, {}, /*retain_graph=*/false, /*create_graph=*/true);
  sum(x + z).backward();
  EXPECT_EQ(values(x.grad()), (std::vector<double>{2, 2, 2}));
  EXPECT_EQ(values(z.grad()), (std::vector<double>{2, 2, 2}));
  // The first gradient was a stride-0 broadcast of sum's: adding into it once must add once.
  Tensor y = ones({3}).requires_grad_(true);
  autograd::backward({sum(y)}, {}, /*retain_graph=*/false, /*create_graph=*/true);
  sum(y).backward();
  EXPECT_EQ(values(y.grad()), (std::vector<double>{2, 2, 2}));
}

TEST(Aliasing, InPlaceMulByItselfDifferentiatesTheSquare) {
  // a.mul_(a) with a = x * 1: d(sum a^2)/dx = 2x.
  Tensor x = tensor(std::vector<float>{1, 2, 3}).requires_grad_(true);
  Tensor a = x * 1.0;
  a.mul_(a);
  EXPECT_EQ(values(a), (std::vector<double>{1, 4, 9}));
  sum(a).backward();
  EXPECT_EQ(values(x.grad()), (std::vector<double>{2, 4, 6}));

  Tensor w = tensor(std::vector<float>{1, 2, 4}).requires_grad_(true);
  Tensor b = w * 1.0;
  b.div_(b);  // 1 everywhere; its gradient is 0
  sum(b).backward();
  EXPECT_EQ(values(w.grad()), (std::vector<double>{0, 0, 0}));
}

TEST(Aliasing, OverlappingInPlaceSourcesAreReadBeforeTheWrite) {
  // numpy's buffered semantics (torch refuses these): the source is read as it was.
  Tensor a = arange(6, kFloat32);
  Tensor tail = a.narrow(0, 1, 5);
  tail.add_(a.narrow(0, 0, 5));
  EXPECT_EQ(values(a), (std::vector<double>{0, 1, 3, 5, 7, 9}));
  Tensor b = arange(5, kFloat32);
  Tensor right = b.narrow(0, 1, 4);
  right.copy_(b.narrow(0, 0, 4));
  EXPECT_EQ(values(b), (std::vector<double>{0, 0, 1, 2, 3}));
}

TEST(Aliasing, WritingIntoABroadcastViewIsRefused) {
  Tensor e = zeros({1}).expand({3});
  EXPECT_TESSERA_ERROR(e.add_(ones({3})), RuntimeError, "[add_] expected an in-place target");
  EXPECT_TESSERA_ERROR(e.copy_(ones({3})), RuntimeError, "[copy_] expected an in-place target");
  Tensor one = zeros({1}).expand({1});  // a size-1 broadcast dim is its own memory
  one.add_(ones({1}));
  EXPECT_EQ(values(one), (std::vector<double>{1}));
}

TEST(Aliasing, ShapesPastInt64AreRefusedNotWrapped) {
  EXPECT_TESSERA_ERROR(zeros({int64_t{1} << 62, 4}), ValueError, "fewer than 2^63 elements");
  EXPECT_TESSERA_ERROR(empty_strided({int64_t{1} << 61, 2}, {8, 1}), ValueError, "[empty]");
  EXPECT_EQ(zeros({0, int64_t{1} << 40}).numel(), 0);  // empty: no bytes, whatever the rest
  EXPECT_TESSERA_ERROR(as_strided(zeros({4}), {int64_t{1} << 62, 4}, {4, int64_t{1} << 62}),
                       ValueError, "[as_strided]");
}

TEST(Aliasing, ReductionEdgeCasesFollowTorch) {
  // cumsum's gradient is a reverse cumulative sum: torch gives [1e8, 2, 1] in float32 for
  // g = [1e8, 1, 1] (1e8 + 2 rounds to 1e8); total - prefix + g cancels the 1s away.
  Tensor x = zeros({3}).requires_grad_(true);
  Tensor g = tensor(std::vector<float>{1e8f, 1, 1});
  sum(cumsum(x, 0) * g).backward();
  EXPECT_EQ(values(x.grad()), (std::vector<double>{1e8, 2, 1}));
  // Empty tensors: keepdim is honoured, and reducing a non-empty dim of one gives an empty result.
  EXPECT_EQ(all(zeros({0, 3}, kBool), {0}, /*keepdim=*/true).sizes(), (Shape{1, 3}));
  EXPECT_EQ(any(zeros({0, 3}, kBool), {0}, /*keepdim=*/true).sizes(), (Shape{1, 3}));
  EXPECT_EQ(amax(zeros({0, 3}), {1}).sizes(), (Shape{0}));
  EXPECT_TESSERA_ERROR(amax(zeros({0, 3}), {0}), ValueError, "[amax] expected a non-empty dim");
}

}  // namespace
}  // namespace tessera
