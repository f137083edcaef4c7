// Autograd engine: accumulation, retain/create graph, autograd::grad, hooks, version counters,
// anomaly mode, no_grad / inference mode, and freeing of saved tensors.
#include <gtest/gtest.h>

#include "tessera/autograd/node.h"
#include "tessera/tessera.h"

namespace tessera {
namespace {

Tensor leaf(std::initializer_list<double> v) {
  return tensor(v, TensorOptions(kFloat64)).requires_grad_();
}

TEST(Autograd, AccumulatesIntoLeavesAcrossBackwardCalls) {
  Tensor x = leaf({1, 2, 3});
  Tensor y = sum(x * x);
  y.backward(Tensor(), /*retain_graph=*/true);
  EXPECT_TRUE(allclose(x.grad(), tensor({2, 4, 6}, kFloat64)));
  y.backward();
  EXPECT_TRUE(allclose(x.grad(), tensor({4, 8, 12}, kFloat64)));
  EXPECT_THROW(y.backward(), RuntimeError);  // saved tensors were freed
}

TEST(Autograd, DiamondGraphSumsBothPaths) {
  Tensor x = leaf({0.5, -1.0});
  Tensor a = exp(x), b = a * 3.0, c = a * a;
  sum(b + c).backward();
  Tensor want = exp(x.detach()) * 3.0 + exp(x.detach() * 2.0) * 2.0;
  EXPECT_TRUE(allclose(x.grad(), want));
}

TEST(Autograd, DeepChainDoesNotRecurse) {
  Tensor x = leaf({1.0});
  Tensor y = x;
  for (int i = 0; i < 20000; ++i) y = y * 1.0;
  sum(y).backward();
  EXPECT_EQ(x.grad().item<double>(), 1.0);
  // Destroying a deep graph that never ran (its nodes still hold saved tensors) must not
  // recurse either.
  Tensor z = x;
  for (int i = 0; i < 100000; ++i) z = z * x;
  z = Tensor();
}

TEST(Autograd, GradFunctionDoesNotTouchDotGrad) {
  Tensor x = leaf({1, 2}), w = leaf({3, 4});
  Tensor y = sum(x * w);
  TensorList g = autograd::grad({y}, {x});
  EXPECT_TRUE(allclose(g[0], tensor({3, 4}, kFloat64)));
  EXPECT_FALSE(x.grad().defined());
  EXPECT_FALSE(w.grad().defined());
  Tensor unused = leaf({1});
  Tensor y2 = sum(x * 2.0);
  EXPECT_THROW(autograd::grad({y2}, {unused}), RuntimeError);
  Tensor y3 = sum(x * 2.0);
  TensorList g3 = autograd::grad({y3}, {x, unused}, {}, std::nullopt, false, true);
  EXPECT_FALSE(g3[1].defined());
}

TEST(Autograd, CreateGraphGivesSecondDerivatives) {
  Tensor x = leaf({2.0});
  Tensor y = x * x * x;  // y = x^3
  TensorList g = autograd::grad({sum(y)}, {x}, {}, std::nullopt, /*create_graph=*/true);
  EXPECT_DOUBLE_EQ(g[0].item<double>(), 12.0);  // 3x^2
  TensorList gg = autograd::grad({sum(g[0])}, {x});
  EXPECT_DOUBLE_EQ(gg[0].item<double>(), 12.0);  // 6x
  Tensor z = leaf({0.3});
  Tensor t = tanh(z);
  TensorList d1 = autograd::grad({sum(t)}, {z}, {}, std::nullopt, true);
  TensorList d2 = autograd::grad({sum(d1[0])}, {z});
  double th = std::tanh(0.3);
  EXPECT_NEAR(d2[0].item<double>(), -2 * th * (1 - th * th), 1e-12);
}

TEST(Autograd, NonLeafRetainGradAndHooks) {
  Tensor x = leaf({1, 2});
  Tensor h = x * 2.0;
  h.retain_grad();
  int calls = 0;
  h.register_hook([&](const Tensor& g) {
    ++calls;
    return g * 10.0;  // replaces the gradient flowing on
  });
  sum(h * h).backward();
  EXPECT_EQ(calls, 1);
  // retain_grad was registered first, so it sees the gradient before the hook scales it.
  EXPECT_TRUE(allclose(h.grad(), tensor({4, 8}, kFloat64)));
  EXPECT_TRUE(allclose(x.grad(), tensor({80, 160}, kFloat64)));
}

TEST(Autograd, LeafHooksAndPostAccumulateHooks) {
  Tensor x = leaf({1, 1});
  x.register_hook([](const Tensor& g) { return g * 2.0; });
  std::vector<double> seen;
  x.register_post_accumulate_grad_hook(
      [&](const Tensor& p) { seen.push_back(sum(p.grad()).item<double>()); });
  sum(x * 3.0).backward();
  EXPECT_TRUE(allclose(x.grad(), tensor({6, 6}, kFloat64)));
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0], 12.0);
}

TEST(Autograd, InPlaceChangeOfSavedTensorIsAnError) {
  Tensor x = leaf({1, 2});
  Tensor a = x * 1.0;
  Tensor y = a * a;  // saves a
  a.add_(ones({2}, kFloat64));
  try {
    sum(y).backward();
    FAIL() << "expected an error";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("modified by an in-place operation"), std::string::npos)
        << e.what();
  }
}

TEST(Autograd, InPlaceOnLeafRequiringGradIsRejected) {
  Tensor x = leaf({1, 2});
  EXPECT_THROW(x.add_(ones({2}, kFloat64)), RuntimeError);
  {
    autograd::NoGradGuard ng;
    x.add_(ones({2}, kFloat64));  // allowed without grad recording
  }
  EXPECT_TRUE(allclose(x.detach(), tensor({2, 3}, kFloat64)));
  Tensor leaf_view = x.select(0, 0);
  EXPECT_THROW(leaf_view.mul_(wrap_scalar(2.0)), RuntimeError);
}

TEST(Autograd, InPlaceOnNonLeafRebasesHistory) {
  Tensor x = leaf({1, 2, 3});
  Tensor y = x * 2.0;
  y.mul_(x);       // y = 2x * x
  y.add_(x, 3.0);  // y = 2x^2 + 3x
  sum(y).backward();
  EXPECT_TRUE(allclose(x.grad(), tensor({7, 11, 15}, kFloat64)));
}

TEST(Autograd, NoGradAndInferenceMode) {
  Tensor x = leaf({1, 2});
  {
    autograd::NoGradGuard ng;
    Tensor y = x * 2.0;
    EXPECT_FALSE(y.requires_grad());
  }
  Tensor inf;
  {
    autograd::InferenceMode im;
    inf = ones({2}, kFloat64) * 2.0;
    EXPECT_FALSE((x * 2.0).requires_grad());
  }
  EXPECT_TRUE(inf.impl()->is_inference);
  EXPECT_THROW(x * inf, RuntimeError);     // an inference tensor cannot be saved for backward
  EXPECT_TRUE((x + inf).requires_grad());  // add saves nothing
}

TEST(Autograd, AnomalyModeNamesTheFailingBackward) {
  Tensor x = leaf({0.0, 1.0});
  Tensor y = sum(sqrt(x));  // d sqrt at 0 is inf
  autograd::DetectAnomalyGuard anomaly;
  try {
    y.backward();
    FAIL() << "expected anomaly";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("SqrtBackward"), std::string::npos) << e.what();
  }
}

TEST(Autograd, SavedTensorsAreReleasedAfterTheirNodeRuns) {
  Allocator* alloc = cpu_allocator();
  Tensor x = randn({256, 256}, kFloat64).requires_grad_();
  int64_t base = alloc->stats().live_bytes;
  Tensor loss;
  {
    Tensor h = tanh(x);  // saves its output (512 KiB)
    loss = sum(h * 2.0);
  }
  EXPECT_GT(alloc->stats().live_bytes, base);
  loss.backward();
  loss = Tensor();
  x.set_grad(Tensor());
  EXPECT_EQ(alloc->stats().live_bytes, base);
}

TEST(Autograd, QueuedCallbacksRunOnceAfterTheOutermostPass) {
  // w is used inside a checkpointed segment, so its gradient arrives during the segment's nested
  // backward; x's arrives in the outer pass, after it. The callback must wait for x.
  Tensor x = leaf({1, 2}), w = leaf({3, 4});
  std::vector<std::string> events;
  w.register_post_accumulate_grad_hook([&](const Tensor&) {
    events.push_back("w");
    autograd::queue_callback([&] { events.push_back("callback"); });
  });
  x.register_post_accumulate_grad_hook([&](const Tensor&) { events.push_back("x"); });
  Tensor y =
      autograd::checkpoint([&](const TensorList& in) { return TensorList{in[0] * w}; }, {x})[0];
  sum(y * y).backward();
  EXPECT_EQ(events, (std::vector<std::string>{"w", "x", "callback"}));
  EXPECT_THROW(autograd::queue_callback([] {}), RuntimeError);  // outside a backward
}

TEST(Autograd, DetachAndRequiresGradFlags) {
  Tensor x = leaf({1, 2});
  Tensor y = x * 2.0;
  EXPECT_FALSE(y.is_leaf());
  EXPECT_TRUE(y.requires_grad());
  Tensor d = y.detach();
  EXPECT_TRUE(d.is_leaf());
  EXPECT_FALSE(d.requires_grad());
  EXPECT_EQ(d.data_ptr(), y.data_ptr());
  EXPECT_THROW(y.requires_grad_(), RuntimeError);
  EXPECT_THROW(arange(3).requires_grad_(), TypeError);
  EXPECT_THROW(sum(x * 2.0).backward(ones({2})), ValueError);
  EXPECT_THROW((x * 2.0).backward(), RuntimeError);   // non-scalar without grad
  EXPECT_THROW(zeros({1}).backward(), RuntimeError);  // does not require grad
  Tensor i = arange(3);
  EXPECT_FALSE((i * 2).requires_grad());
}

TEST(Autograd, GradientsFollowDtypePromotion) {
  Tensor a = ones({2}, TensorOptions(kFloat32).with_requires_grad());
  Tensor b = ones({2}, TensorOptions(kFloat64).with_requires_grad());
  Tensor y = sum(a * b);
  EXPECT_EQ(y.dtype(), kFloat64);
  y.backward();
  EXPECT_EQ(a.grad().dtype(), kFloat32);
  EXPECT_EQ(b.grad().dtype(), kFloat64);
}

}  // namespace
}  // namespace tessera

namespace tessera {
namespace {

// Two gradients for one input are summed into the first one's buffer only when nobody else holds
// it: backward functions that return tensors their caller also keeps must see them unchanged.
TEST(Autograd, SummingGradientsNeverWritesIntoABufferSomeoneElseHolds) {
  Tensor x = ones({4}).requires_grad_(true);
  Tensor y = x * 1.0;
  TensorList kept(2);  // each branch's gradient buffer, also held here
  Tensor loss = zeros({});
  for (int i = 0; i < 2; ++i) {
    Tensor branch = zeros({4});
    autograd::record("KeepBackward", {y}, {branch}, {},
                     [&kept, i](autograd::BackwardContext&, const TensorList&) {
                       kept[i] = full({4}, 2.0 + i);
                       return TensorList{kept[i]};
                     });
    loss = loss + sum(branch);
  }
  loss.backward();
  EXPECT_TRUE(allclose(kept[0], full({4}, 2.0)));
  EXPECT_TRUE(allclose(kept[1], full({4}, 3.0)));
  EXPECT_TRUE(allclose(x.grad(), full({4}, 5.0)));
  // Buffers nobody else holds are summed in place, to the same result.
  Tensor z = ones({4}).requires_grad_(true);
  (sum(z * 2.0) + sum(z * 3.0)).backward();
  EXPECT_TRUE(allclose(z.grad(), full({4}, 5.0)));
}

}  // namespace
}  // namespace tessera
