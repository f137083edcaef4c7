// In-place writes through views, and views whose memory is written after they were taken:
// gradients follow the values as in PyTorch (values from torch 1.13 in the comments).
#include <gtest/gtest.h>

#include <memory>

#include "tessera/autograd/view_tracking.h"
#include "tessera/tessera.h"
#include "testing/expect_error.h"
#include "testing/gradcheck.h"
#include "testing/reference.h"

namespace tessera {
namespace {

using testing::values;

Tensor vec(std::vector<float> v) { return tensor(v); }

TEST(InplaceViews, AViewTakenBeforeItsBaseIsWrittenFollowsTheWrite) {
  // torch: v == [2, 6], x.grad == [8, 36, 0], v.grad_fn AsStridedBackward0.
  Tensor x = vec({1, 2, 3}).requires_grad_(true);
  Tensor y = x * 1.0;
  Tensor v = slice(y, 0, 0, 2);
  y.mul_(vec({2, 3, 4}));
  sum(v * v).backward();
  EXPECT_EQ(values(v), (std::vector<double>{2, 6}));
  EXPECT_EQ(values(x.grad()), (std::vector<double>{8, 36, 0}));
  EXPECT_EQ(v.grad_fn()->name(), "AsStridedBackward");
}

TEST(InplaceViews, WritingThroughAViewRewritesTheBasesHistory) {
  // torch: y == [1, 6, 15, 4], x.grad == [2, 36, 150, 8], y.grad_fn CopySlices.
  Tensor x = vec({1, 2, 3, 4}).requires_grad_(true);
  Tensor y = x * 1.0;
  Tensor middle = narrow(y, 0, 1, 2);
  middle.mul_(vec({3, 5}));
  EXPECT_EQ(y.grad_fn()->name(), "CopySlices");
  sum(y * y).backward();
  EXPECT_EQ(values(y), (std::vector<double>{1, 6, 15, 4}));
  EXPECT_EQ(values(x.grad()), (std::vector<double>{2, 36, 150, 8}));
}

TEST(InplaceViews, CopyIntoAViewOfAPlainTensorMakesItRequireGrad) {
  // torch: b.requires_grad, b.grad_fn CopySlices, the earlier view v1 requires grad too,
  // a.grad == [4, 6] for sum(b * [1, 2, 3, 4]).
  Tensor a = vec({5, 7}).requires_grad_(true);
  Tensor b = zeros({4});
  Tensor v1 = slice(b, 0, 0, 2);
  Tensor target = narrow(b, 0, 1, 2);
  target.copy_(a * 2.0);
  ASSERT_TRUE(b.requires_grad());
  EXPECT_EQ(b.grad_fn()->name(), "CopySlices");
  EXPECT_TRUE(v1.requires_grad());
  sum(b * vec({1, 2, 3, 4})).backward();
  EXPECT_EQ(values(a.grad()), (std::vector<double>{4, 6}));
}

TEST(InplaceViews, ASiblingViewSeesTheWrite) {
  // torch: b = zeros(4); v1 = b[1:3]; b[2:].copy_(a); sum(v1 * 10) gives a.grad == [10, 0].
  Tensor a = vec({5, 7}).requires_grad_(true);
  Tensor b = zeros({4});
  Tensor v1 = slice(b, 0, 1, 3);
  Tensor tail = slice(b, 0, 2, 4);
  tail.copy_(a);
  sum(v1 * 10.0).backward();
  EXPECT_EQ(values(a.grad()), (std::vector<double>{10, 0}));
}

TEST(InplaceViews, FillingAViewCutsItsRegionOffTheGradient) {
  // torch: y = x * 2; y[1:3].fill_(0); sum(y) gives x.grad == [2, 0, 0, 2].
  Tensor x = vec({1, 2, 3, 4}).requires_grad_(true);
  Tensor y = x * 2.0;
  Tensor middle = slice(y, 0, 1, 3);
  middle.fill_(0);
  sum(y).backward();
  EXPECT_EQ(values(x.grad()), (std::vector<double>{2, 0, 0, 2}));
}

TEST(InplaceViews, AViewOfAViewWritesIntoTheRootBase) {
  // torch: y = x * 1 (x = arange(6) as 2x3); y.t()[1].mul_(w); sum(y * arange(6)) gives
  // y == x.grad == [[0, 2, 2], [3, -4, 5]] and w.grad == [1, 16].
  Tensor x = arange(6).to(kFloat32).reshape({2, 3}).requires_grad_(true);
  Tensor w = vec({2, -1}).requires_grad_(true);
  Tensor y = x * 1.0;
  Tensor column = select(y.t(), 0, 1);
  column.mul_(w);
  sum(y * arange(6).to(kFloat32).reshape({2, 3})).backward();
  const std::vector<double> expected{0, 2, 2, 3, -4, 5};
  EXPECT_EQ(values(y), expected);
  EXPECT_EQ(values(x.grad()), expected);
  EXPECT_EQ(values(w.grad()), (std::vector<double>{1, 16}));
}

TEST(InplaceViews, ABaseWithPermutedStridesMapsTheViewsRegion) {
  // y's memory is column-major; writing its row 0 must reach the row's elements, wherever they
  // sit in memory: d/dx sum(y * [[1, 2, 3], [4, 5, 6]]) after y[0] *= 10.
  Tensor x = arange(6).to(kFloat32).reshape({2, 3}).requires_grad_(true);
  Tensor y = empty_strided({2, 3}, {1, 2});
  y.copy_(x);
  Tensor row = select(y, 0, 0);
  row.mul_(10.0);
  sum(y * arange(1, 7).to(kFloat32).reshape({2, 3})).backward();
  EXPECT_EQ(values(y), (std::vector<double>{0, 10, 20, 3, 4, 5}));
  EXPECT_EQ(values(x.grad()), (std::vector<double>{10, 20, 30, 4, 5, 6}));
}

TEST(InplaceViews, OverwritingRandomlyCutsTheHistory) {
  // torch: y = x * 2; y.normal_(); sum(y) gives x.grad == [0, 0].
  Tensor x = vec({1, 2}).requires_grad_(true);
  Tensor y = x * 2.0;
  normal_(y);
  sum(y).backward();
  EXPECT_EQ(values(x.grad()), (std::vector<double>{0, 0}));
}

TEST(InplaceViews, AViewOfALeafThatRequiresGradIsNotWritable) {
  Tensor x = ones({3}).requires_grad_(true);
  Tensor head = slice(x, 0, 0, 2);
  EXPECT_TESSERA_ERROR(head.mul_(2.0), RuntimeError, "view of a leaf tensor that requires grad");
  autograd::NoGradGuard ng;
  head.mul_(2.0);  // allowed without grad, as an optimizer step would
  EXPECT_EQ(values(x), (std::vector<double>{2, 2, 1}));
}

TEST(InplaceViews, GradientsAndSecondDerivativesMatchFiniteDifferences) {
  const testing::OpFn write_through_view = [](const TensorList& in) {
    Tensor y = in[0] * in[0];
    Tensor block = narrow(y.t(), 0, 1, 2);  // a non-contiguous region of y
    block.mul_(in[1]);
    return TensorList{y};
  };
  const testing::OpFn view_before_write = [](const TensorList& in) {
    Tensor y = in[0] * 1.0;
    Tensor v = select(y, 1, 2);
    y.mul_(in[0]);
    return TensorList{v * v};
  };
  Generator gen(7);
  TensorList in{randn({3, 4}, TensorOptions(kFloat64), &gen).requires_grad_(true),
                randn({2, 3}, TensorOptions(kFloat64), &gen).requires_grad_(true)};
  EXPECT_EQ(testing::gradcheck(write_through_view, in), "");
  EXPECT_EQ(testing::gradgradcheck(write_through_view, in), "");
  EXPECT_EQ(testing::gradcheck(view_before_write, {in[0]}), "");
  EXPECT_EQ(testing::gradgradcheck(view_before_write, {in[0]}), "");
}

TEST(InplaceViews, ASavedViewDoesNotKeepItsGraphAlive) {
  // exp saves v, a view of b; b's history later runs through exp. Were the saved v to hold b,
  // the graph would hold itself and never be freed.
  std::weak_ptr<autograd::Node> history;
  {
    Tensor x = vec({1, 2, 3, 4}).requires_grad_(true);
    Tensor b = x * 1.0;
    Tensor head = slice(b, 0, 0, 2);
    Tensor e = exp(head);
    Tensor tail = slice(b, 0, 2, 4);
    tail.copy_(e);
    history = b.grad_fn();
    ASSERT_FALSE(history.expired());
  }
  EXPECT_TRUE(history.expired());
}

TEST(InplaceViews, AViewMadeInNoGradModeIsNotWritableWithGrad) {
  // torch: "A view was created in no_grad mode and is being modified inplace with grad mode
  // enabled".
  Tensor x = vec({1, 2, 3, 4}).requires_grad_(true);
  Tensor b = x * 1.0;
  Tensor head;
  {
    autograd::NoGradGuard ng;
    head = slice(b, 0, 0, 2);
  }
  EXPECT_TESSERA_ERROR(head.mul_(2.0), RuntimeError, "made in no-grad mode");
  Tensor view_of_it = head.t();  // inherits where its base view came from
  EXPECT_TESSERA_ERROR(view_of_it.mul_(2.0), RuntimeError, "made in no-grad mode");
}

TEST(InplaceViews, ValuesThatRequireGradAreNotWrittenIntoANoGradView) {
  // torch raises the same for a base that does not require grad: its history would miss a.
  Tensor x = zeros({4});
  Tensor v;
  {
    autograd::NoGradGuard ng;
    v = slice(x, 0, 1, 3);
  }
  Tensor a = vec({5, 7}).requires_grad_(true);
  EXPECT_TESSERA_ERROR(v.copy_(a * 2.0), RuntimeError, "[copy_] expected a view made by a view op");
  EXPECT_TESSERA_ERROR(v.add_(a), RuntimeError, "[add_] expected a view made by a view op");
  // Refused before the kernel ran: nothing was written.
  EXPECT_EQ(values(x), (std::vector<double>{0, 0, 0, 0}));
  EXPECT_FALSE(x.requires_grad());
  v.copy_(vec({1, 2}));  // nothing to follow: allowed, as in torch
  EXPECT_EQ(values(x), (std::vector<double>{0, 1, 2, 0}));
}

TEST(InplaceViews, ANoGradViewOfAParameterStaysAConstantAcrossSteps) {
  Tensor w = vec({1, 2, 3}).requires_grad_(true);
  Tensor v;
  {
    autograd::NoGradGuard ng;
    v = slice(w, 0, 0, 2);
    w.mul_(2.0);  // an optimizer step
  }
  EXPECT_FALSE(v.requires_grad());
  EXPECT_EQ(values(v), (std::vector<double>{2, 4}));
}

TEST(InplaceViews, ASavedLeafViewDoesNotKeepItsBasesGraphAlive) {
  // v is a leaf of its own; its base's history later runs through the node that saved v.
  std::weak_ptr<autograd::Node> history;
  {
    Tensor buf = zeros({4});
    Tensor v = slice(buf, 0, 0, 2);
    v.requires_grad_(true);
    Tensor tail = slice(buf, 0, 2, 4);
    tail.copy_(v * v);
    history = buf.grad_fn();
    ASSERT_FALSE(history.expired());
    EXPECT_TRUE(v.is_leaf());
  }
  EXPECT_TRUE(history.expired());
}

TEST(InplaceViews, AViewOfABaseThatLeftTheGraphLeavesItToo) {
  // torch: h = x * 2; v = h[:2]; h.detach_(); with no_grad: h.fill_(1) -> v.grad_fn is None.
  Tensor x = vec({1, 2, 3, 4}).requires_grad_(true);
  Tensor h = x * 2.0;
  Tensor v = slice(h, 0, 0, 2);
  h.detach_();
  {
    autograd::NoGradGuard ng;
    h.fill_(1);
  }
  EXPECT_FALSE(v.requires_grad());
  EXPECT_EQ(v.grad_fn(), nullptr);
}

TEST(InplaceViews, RetainedGradientsFollowInPlaceWrites) {
  // torch: y = x * 2; y.retain_grad(); y.mul_(3); sum(y) gives y.grad == 1 (the written y's).
  Tensor x = vec({1, 2}).requires_grad_(true);
  Tensor y = x * 2.0;
  y.retain_grad();
  y.mul_(3.0);
  sum(y).backward();
  EXPECT_EQ(values(y.grad()), (std::vector<double>{1, 1}));
  // torch: b = x * 1; v = b[:2]; v.retain_grad(); b.mul_(2); sum(v * 1) gives v.grad == [1, 1].
  Tensor x4 = vec({1, 2, 3, 4}).requires_grad_(true);
  Tensor b = x4 * 1.0;
  Tensor v = slice(b, 0, 0, 2);
  v.retain_grad();
  b.mul_(2.0);
  sum(v * 1.0).backward();
  EXPECT_EQ(values(v.grad()), (std::vector<double>{1, 1}));
}

TEST(InplaceViews, ATensorSavedBeforeItIsWrittenDoesNotKeepItsGraphAlive) {
  // b.add_(b * w): mul saves b, and b's new history runs through mul.
  std::weak_ptr<autograd::Node> history;
  {
    Tensor x = vec({1, 2}).requires_grad_(true), w = vec({3, 4}).requires_grad_(true);
    Tensor b = x * 1.0;
    b.add_(b * w);
    history = b.grad_fn();
    ASSERT_FALSE(history.expired());
  }
  EXPECT_TRUE(history.expired());
}

TEST(InplaceViews, SplitPiecesShareOneNodeWhoseGradientIsOneCat) {
  // torch: the pieces' grad_fn is one SplitBackward0; x.grad == [2, 4, 0, 0, 3, 3].
  Tensor x = vec({1, 2, 3, 4, 5, 6}).requires_grad_(true);
  TensorList pieces = split(x * 1.0, 2);
  ASSERT_EQ(pieces.size(), 3u);
  EXPECT_EQ(pieces[0].grad_fn()->name(), "SplitBackward");
  EXPECT_EQ(pieces[0].grad_fn(), pieces[2].grad_fn());
  EXPECT_TRUE(autograd::is_tracked_view(pieces[1]));
  sum(pieces[0] * pieces[0] + pieces[2] * 3.0).backward();
  EXPECT_EQ(values(x.grad()), (std::vector<double>{2, 4, 0, 0, 3, 3}));
}

TEST(InplaceViews, WritingIntoASplitPieceFollowsTheValues) {
  // torch refuses in-place writes to the outputs of multi-view functions; Tessera follows them as
  // for any view: y == [1, 2, 30, 400, 5, 6], x.grad == 2 * y * [1, 1, 10, 100, 1, 1].
  Tensor x = vec({1, 2, 3, 4, 5, 6}).requires_grad_(true);
  Tensor y = x * 1.0;
  TensorList pieces = split(y, 2);
  pieces[1].mul_(vec({10, 100}));
  EXPECT_EQ(y.grad_fn()->name(), "CopySlices");
  EXPECT_EQ(pieces[0].grad_fn()->name(), "AsStridedBackward");  // its memory was written since
  (sum(y * y) + sum(pieces[0])).backward();
  EXPECT_EQ(values(y), (std::vector<double>{1, 2, 30, 400, 5, 6}));
  EXPECT_EQ(values(x.grad()), (std::vector<double>{3, 5, 600, 80000, 10, 12}));
}

}  // namespace
}  // namespace tessera
