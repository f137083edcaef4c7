// The op entry (OpScope): every case of the op table is recorded by the profiler under its op's
// name and every registered op is reached by some case; autocast applies each cast policy to the
// outermost op only, and gradients flow back to float32 leaves.
#include <gtest/gtest.h>

#include <set>

#include "tessera/ops/op_info.h"
#include "tessera/runtime/autocast.h"
#include "tessera/runtime/profiler.h"
#include "tessera/tessera.h"
#include "testing/op_cases.h"

namespace tessera {
namespace {

using profiler::EventKind;

TEST(OpScope, EveryCaseRecordsItsOpAndEveryRegisteredOpIsReached) {
  std::set<std::string> reached;
  for (size_t i = 0; i < testing::op_cases().size(); ++i) {
    const testing::OpCase& c = testing::op_cases()[i];
    TensorList in = testing::make_inputs(c, kFloat32, 4000 + i);
    profiler::Profile profile;
    {
      profiler::Profiler prof;
      c.fn(in);
      profile = prof.stop();
    }
    std::set<std::string> ops;
    for (const profiler::Event& e : profile.events())
      if (e.kind == EventKind::kOp) ops.insert(e.name);
    EXPECT_TRUE(ops.count(c.op)) << c.op << " / " << c.label << " recorded no '" << c.op
                                 << "' event";
    reached.insert(ops.begin(), ops.end());
  }
  for (const OpInfo& op : op_registry())
    EXPECT_TRUE(reached.count(std::string(op.name))) << op.name << " is reached by no op case";
}

// Inputs of a fixed seed: uniform in [-1, 1).
Tensor input(const Shape& shape, DType dtype = kFloat32, uint64_t seed = 1) {
  Generator gen(seed);
  return cast(rand(shape, kFloat32, &gen) * 2.0 - 1.0, dtype);
}

TEST(Autocast, GemmsAndAttentionRunInTheLowerPrecision) {
  Tensor x = input({4, 8}), w = input({8, 8}, kFloat32, 2), b = input({8}, kFloat32, 3);
  Tensor xb = input({2, 4, 8}), wb = input({2, 8, 4}, kFloat32, 4);
  Tensor q = input({1, 2, 4, 8}), k = input({1, 2, 4, 8}, kFloat32, 5);
  AutocastGuard autocast(DeviceType::CPU, kBFloat16);
  EXPECT_EQ(matmul(x, w).dtype(), kBFloat16);
  EXPECT_EQ(mm(x, w).dtype(), kBFloat16);
  EXPECT_EQ(linear(x, w, b).dtype(), kBFloat16);
  EXPECT_EQ(addmm(b, x, w).dtype(), kBFloat16);
  EXPECT_EQ(bmm(xb, wb).dtype(), kBFloat16);
  EXPECT_EQ(baddbmm(input({2, 4, 4}), xb, wb).dtype(), kBFloat16);
  EXPECT_EQ(scaled_dot_product_attention(q, k, k, std::nullopt, true).dtype(), kBFloat16);
}

TEST(Autocast, NormsSoftmaxLossesAndSumsRunInFloat32) {
  Tensor x = input({4, 8}, kBFloat16), w = input({8}, kBFloat16, 2);
  Tensor target = tensor(std::vector<int64_t>{0, 3, 7, 1});
  AutocastGuard autocast(DeviceType::CPU, kBFloat16);
  EXPECT_EQ(softmax(x, -1).dtype(), kFloat32);
  EXPECT_EQ(log_softmax(x, -1).dtype(), kFloat32);
  EXPECT_EQ(layer_norm(x, {8}, w, w).dtype(), kFloat32);
  EXPECT_EQ(rms_norm(x, w).dtype(), kFloat32);
  EXPECT_EQ(std::get<1>(add_rms_norm(x, x, w)).dtype(), kFloat32);
  EXPECT_EQ(cross_entropy(x, target).dtype(), kFloat32);
  EXPECT_EQ(nll_loss(x, target).dtype(), kFloat32);
  EXPECT_EQ(mse_loss(x, x).dtype(), kFloat32);
  EXPECT_EQ(sum(x).dtype(), kFloat32);
  EXPECT_EQ(mean(x).dtype(), kFloat32);
  EXPECT_EQ(var(x).dtype(), kFloat32);
  EXPECT_EQ(norm(x).dtype(), kFloat32);
  EXPECT_EQ(logsumexp(x, {1}).dtype(), kFloat32);
  EXPECT_EQ(cumsum(x, 1).dtype(), kFloat32);
  // Values match the op run outside autocast on the inputs cast to float32 by hand.
  Tensor want;
  {
    AutocastGuard off(DeviceType::CPU, kBFloat16, false);
    want = softmax(x.to(kFloat32), -1);
  }
  EXPECT_TRUE(allclose(softmax(x, -1), want, 0, 0));
}

TEST(Autocast, CrossEntropyWidensBf16LogitsItselfWithTheValuesOfAFloat32Copy) {
  const Tensor target = tensor(std::vector<int64_t>{0, 3, 49, 1, 7, 7});
  Tensor logits = (input({6, 50}, kBFloat16) * 8.0).detach().requires_grad_(true);
  Tensor copy = logits.detach().to(kFloat32).requires_grad_(true);
  const Tensor want = cross_entropy(copy, target);
  want.backward();
  Tensor got;
  profiler::Profile profile;
  {
    AutocastGuard autocast(DeviceType::CPU, kBFloat16);
    profiler::Profiler prof;
    got = cross_entropy(logits, target);
    profile = prof.stop();
  }
  EXPECT_EQ(got.dtype(), kFloat32);
  EXPECT_TRUE(allclose(got, want, 0, 0));
  for (const profiler::Event& e : profile.events())
    EXPECT_NE(e.name, "cast") << "the logits were copied to float32";
  got.backward();
  // The gradient rounds once from float32 into the logits' dtype, as the copy's cast would.
  EXPECT_EQ(logits.grad().dtype(), kBFloat16);
  EXPECT_TRUE(allclose(logits.grad(), copy.grad().to(kBFloat16), 0, 0));
  // With class weights (a second floating input) it casts as the float32 policy does.
  AutocastGuard autocast(DeviceType::CPU, kBFloat16);
  const Tensor w = input({50}, kFloat32, 3).abs();
  EXPECT_EQ(cross_entropy(logits, target, std::nullopt, 0.0, Reduction::Mean, w).dtype(),
            kFloat32);
}

TEST(Autocast, PromoteOpsRunInTheWidestInputDtype) {
  Tensor a = input({3, 4}, kBFloat16), b = input({3, 4}, kFloat32, 2);
  Tensor index = tensor(std::vector<int64_t>{2, 0}, Shape{2, 1});
  {
    AutocastGuard autocast(DeviceType::CPU, kBFloat16);
    EXPECT_EQ(lerp(a, b, 0.5).dtype(), kFloat32);
    EXPECT_EQ(lerp(a, b, input({4}, kBFloat16, 3)).dtype(), kFloat32);
    EXPECT_EQ(scatter_add(a, 0, expand(index, {2, 4}), input({2, 4})).dtype(), kFloat32);
    EXPECT_EQ(scatter(a, 0, expand(index, {2, 4}), input({2, 4})).dtype(), kFloat32);
    EXPECT_EQ(index_add(a, 0, tensor(std::vector<int64_t>{1}), input({1, 4})).dtype(), kFloat32);
  }
  // Outside autocast they still demand equal dtypes.
  EXPECT_THROW(lerp(a, b, 0.5), TypeError);
}

TEST(Autocast, OpsWithoutPolicyAndOpsOutsideTheGuardKeepTheirDtypes) {
  Tensor x = input({4, 8}), w = input({8, 8}, kFloat32, 2), h = input({4, 8}, kBFloat16);
  {
    AutocastGuard autocast(DeviceType::CPU, kBFloat16);
    EXPECT_EQ(relu(x).dtype(), kFloat32);
    EXPECT_EQ(add(x, x).dtype(), kFloat32);
    EXPECT_EQ(gelu(h).dtype(), kBFloat16);
    {
      AutocastGuard off(DeviceType::CPU, kBFloat16, false);
      EXPECT_EQ(matmul(x, w).dtype(), kFloat32);
    }
  }
  EXPECT_EQ(matmul(x, w).dtype(), kFloat32);
  EXPECT_EQ(softmax(h, -1).dtype(), kBFloat16);
}

TEST(Autocast, GradientsFlowBackToFloat32Leaves) {
  Tensor x = input({4, 8}), w = input({8, 3}, kFloat32, 2).requires_grad_();
  Tensor y, loss;
  {
    AutocastGuard autocast(DeviceType::CPU, kBFloat16);
    y = matmul(x, w);
    loss = sum(y * y);
  }
  EXPECT_EQ(y.dtype(), kBFloat16);
  EXPECT_EQ(loss.dtype(), kFloat32);
  loss.backward();
  ASSERT_TRUE(w.grad().defined());
  EXPECT_EQ(w.grad().dtype(), kFloat32);
  // d/dw sum((x w)^2) = 2 x^T (x w), in float32.
  Tensor want = matmul(x.mT(), matmul(x, w.detach())) * 2.0;
  EXPECT_TRUE(allclose(w.grad(), want, 0.05, 0.05)) << w.grad() << "\n" << want;
}

TEST(Autocast, OnlyTheOutermostOpCasts) {
  Tensor x = input({4, 8}), w = input({6, 8}, kFloat32, 2), b = input({6}, kFloat32, 3);
  auto bf16 = [](const Tensor& t) { return t.to(kBFloat16); };
  Tensor q = input({1, 2, 4, 8}), k = input({1, 2, 4, 8}, kFloat32, 4);
  Tensor h = input({1, 4, 8}, kBFloat16), cos = input({4, 4}), sin = input({4, 4}, kFloat32, 5);
  Tensor got_linear, got_sdpa, got_rope;
  {
    AutocastGuard autocast(DeviceType::CPU, kBFloat16);
    got_linear = linear(x, w, b);
    got_sdpa = scaled_dot_product_attention(q, k, k);
    got_rope = rope(h, cos, sin);  // no policy: its inner sum is not moved to float32
  }
  // linear's matmul and add, and sdpa's float32 matmuls, run in the dtypes their op chose.
  EXPECT_TRUE(allclose(got_linear, linear(bf16(x), bf16(w), bf16(b)), 0, 0));
  EXPECT_TRUE(allclose(got_sdpa, scaled_dot_product_attention(bf16(q), bf16(k), bf16(k)), 0, 0));
  EXPECT_EQ(got_rope.dtype(), kBFloat16);
  EXPECT_TRUE(allclose(got_rope, rope(h, cos, sin), 0, 0));
}

}  // namespace
}  // namespace tessera
