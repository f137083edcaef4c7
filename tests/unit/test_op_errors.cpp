// Bad inputs to the core ops raise the typed exception naming the op; empty and 0-d tensors work.
#include <gtest/gtest.h>

#include "tessera/tessera.h"
#include "testing/expect_error.h"

namespace tessera {
namespace {

TEST(OpErrors, ShapeMismatch) {
  EXPECT_TESSERA_ERROR(add(zeros({2, 3}), zeros({4})), ValueError, "[add] expected shapes that broadcast");
  EXPECT_TESSERA_ERROR(mul(zeros({2}), zeros({3})), ValueError, "[mul]");
  EXPECT_TESSERA_ERROR(matmul(zeros({2, 3}), zeros({4, 5})), ValueError, "[matmul]");
  EXPECT_TESSERA_ERROR(expand(zeros({2, 3}), {4, 3}), ValueError, "[expand]");
  EXPECT_TESSERA_ERROR(view(zeros({2, 3}), {4}), ValueError, "[view]");
  EXPECT_TESSERA_ERROR(linear(zeros({2, 3}), zeros({4, 5})), ValueError, "[linear]");
  Tensor s = zeros({3});
  EXPECT_TESSERA_ERROR(s.add_(zeros({2, 3})), ValueError, "[add_]");
  EXPECT_TESSERA_ERROR(sum_to(zeros({2, 3}), {4}), ValueError, "[sum_to]");
}

TEST(OpErrors, DTypeMismatch) {
  EXPECT_TESSERA_ERROR(matmul(zeros({2, 2}), zeros({2, 2}, kFloat64)), TypeError, "[matmul]");
  EXPECT_TESSERA_ERROR(where(zeros({2}), zeros({2}), zeros({2})), TypeError, "[where]");
  EXPECT_TESSERA_ERROR(mean(arange(4)), TypeError, "[mean]");
  Tensor i = arange(3);
  EXPECT_TESSERA_ERROR(i.add_(ones({3})), TypeError, "[add_]");
  EXPECT_TESSERA_ERROR(sub(ones({2}, kBool), ones({2}, kBool)), TypeError, "[sub]");
  EXPECT_TESSERA_ERROR(neg(ones({2}, kBool)), TypeError, "[neg]");
  EXPECT_TESSERA_ERROR(lerp(zeros({2}), zeros({2}, kFloat64), 0.5), TypeError, "[lerp]");
  EXPECT_TESSERA_ERROR(masked_fill(zeros({2}), zeros({2}), 1.0), TypeError, "[masked_fill]");
  EXPECT_TESSERA_ERROR(arange(3).data_ptr<float>(), TypeError, "[data_ptr]");
}

TEST(OpErrors, IndexOutOfRange) {
  Tensor t = zeros({2, 3});
  EXPECT_TESSERA_ERROR(sum(t, {2}), IndexError, "[sum] expected dim in [-2, 1], got 2");
  EXPECT_TESSERA_ERROR(t.select(1, 3), IndexError, "[select]");
  EXPECT_TESSERA_ERROR(t.narrow(0, 1, 2), IndexError, "[narrow]");
  EXPECT_TESSERA_ERROR(t.transpose(0, 5), IndexError, "[transpose]");
  EXPECT_TESSERA_ERROR(t.unsqueeze(4), IndexError, "[unsqueeze]");
  EXPECT_TESSERA_ERROR(t.size(2), IndexError, "[size]");
  EXPECT_TESSERA_ERROR(std::get<0>(max(t, -3)), IndexError, "[max]");
}

TEST(OpErrors, WrongRank) {
  EXPECT_TESSERA_ERROR(mm(zeros({2, 3, 4}), zeros({4, 2})), ValueError, "[mm]");
  EXPECT_TESSERA_ERROR(bmm(zeros({2, 3}), zeros({3, 2})), ValueError, "[bmm]");
  EXPECT_TESSERA_ERROR(matmul(zeros({}), zeros({2})), ValueError, "[matmul]");
  EXPECT_TESSERA_ERROR(outer(zeros({2, 2}), zeros({2})), ValueError, "[outer]");
  EXPECT_TESSERA_ERROR(permute(zeros({2, 3}), {0}), ValueError, "[permute]");
  EXPECT_TESSERA_ERROR(permute(zeros({2, 3}), {0, 0}), ValueError, "[permute]");
  EXPECT_TESSERA_ERROR(zeros({2, 3, 4}).t(), ValueError, "[t]");
  EXPECT_TESSERA_ERROR(slice(zeros({}), 0, 0, 1), IndexError, "[slice]");
}

TEST(OpErrors, EmptyReductionsWithoutIdentity) {
  EXPECT_TESSERA_ERROR(amax(zeros({0, 3})), ValueError, "[amax]");
  EXPECT_TESSERA_ERROR(max(zeros({0}), 0), ValueError, "[max]");
  EXPECT_TESSERA_ERROR(argmin(zeros({0})), ValueError, "[min]");
}

TEST(EmptyAndScalarTensors, BehaveLikeTorch) {
  Tensor e = zeros({0, 3});
  EXPECT_EQ((e + 1.0).sizes(), (Shape{0, 3}));
  EXPECT_EQ(sum(e).item<float>(), 0.0f);
  EXPECT_EQ(sum(e, {0}).sizes(), (Shape{3}));
  EXPECT_EQ(prod(e).item<float>(), 1.0f);
  EXPECT_TRUE(all(e).item<bool>());
  EXPECT_FALSE(any(e).item<bool>());
  Tensor k0 = matmul(zeros({2, 0}), zeros({0, 3}));
  EXPECT_EQ(k0.sizes(), (Shape{2, 3}));
  EXPECT_EQ(sum(abs(k0)).item<float>(), 0.0f);
  Tensor s = full({}, 2.0, kFloat64).requires_grad_();
  Tensor y = s * s;
  EXPECT_EQ(y.dim(), 0);
  y.backward();
  EXPECT_EQ(s.grad().item<double>(), 4.0);
  EXPECT_EQ(sum(zeros({})).dim(), 0);
  EXPECT_TRUE(isnan(mean(zeros({0}))).item<bool>());
}

TEST(OpValues, Float32SumsAreAccurateOnLongRowsAndColumns) {
  // 1M values of mean ~0.5: float32 accumulation in one lane would lose ~3 digits.
  Tensor x = rand({1 << 20}, kFloat64);
  double want = sum(x).item<double>();
  Tensor x32 = x.to(kFloat32);
  EXPECT_NEAR(sum(x32).item<double>(), want, 1e-6 * want);
  Tensor cols = sum(x32.reshape({4096, 256}), {0});
  Tensor cols64 = sum(x.reshape({4096, 256}), {0});
  EXPECT_TRUE(allclose(cols.to(kFloat64), cols64, 1e-6, 0));
  Tensor rows = sum(x32.reshape({256, 4096}), {1});
  EXPECT_TRUE(allclose(rows.to(kFloat64), sum(x.reshape({256, 4096}), {1}), 1e-6, 0));
}

TEST(OpValues, KnownResults) {
  Tensor a = tensor({1.0, -2.0, 3.0});
  EXPECT_TRUE(allclose(abs(a), tensor({1.0, 2.0, 3.0})));
  EXPECT_TRUE(allclose(relu(a), tensor({1.0, 0.0, 3.0})));
  EXPECT_TRUE(allclose(clamp(a, -1.0, 2.0), tensor({1.0, -1.0, 2.0})));
  EXPECT_TRUE(allclose(cumsum(a, 0), tensor({1.0, -1.0, 2.0})));
  EXPECT_EQ(argmax(a).item<int64_t>(), 2);
  EXPECT_EQ(argmin(a).item<int64_t>(), 1);
  auto [v, i] = max(tensor({1.0, 5.0, 5.0, 2.0}).reshape({2, 2}), 1);
  EXPECT_TRUE(allclose(v, tensor({5.0, 5.0})));
  EXPECT_EQ(i.select(0, 0).item<int64_t>(), 1);
  EXPECT_EQ(i.select(0, 1).item<int64_t>(), 0);  // first of ties
  EXPECT_TRUE(isnan(maximum(tensor({NAN}), tensor({1.0}))).item<bool>());
  EXPECT_TRUE(isnan(amax(tensor({1.0, NAN, 3.0}))).item<bool>());
  EXPECT_TRUE(allclose(var(tensor({1.0, 2.0, 3.0, 4.0})), tensor({5.0 / 3.0}).reshape({})));
  EXPECT_TRUE(allclose(logsumexp(tensor({1000.0, 1000.0}), {0}),
                       full({}, 1000.0 + std::log(2.0))));
  EXPECT_TRUE(isinf(logsumexp(tensor({-INFINITY, -INFINITY}), {0})).item<bool>());
  EXPECT_EQ(div(arange(3), full({}, 2, kInt64)).dtype(), kFloat32);
  EXPECT_TRUE(allclose(pow(arange(4), 2), tensor({0.0, 1.0, 4.0, 9.0}).to(kInt64)));
  EXPECT_EQ(sum(ones({3}, kBool)).item<int64_t>(), 3);
  EXPECT_EQ(sum(ones({3}, kInt32)).dtype(), kInt64);
  EXPECT_TRUE(allclose(softplus(tensor({100.0, -100.0, 0.0})),
                       tensor({100.0, 0.0, std::log(2.0)})));
  Tensor m = matmul(arange(6).reshape({2, 3}), arange(6).reshape({3, 2}));
  EXPECT_EQ(m.dtype(), kInt64);
  EXPECT_TRUE(allclose(m, tensor({10.0, 13.0, 28.0, 40.0}).reshape({2, 2})));
  Tensor bf = matmul(ones({4, 8}, kBFloat16), ones({8, 2}, kBFloat16));
  EXPECT_EQ(bf.dtype(), kBFloat16);
  EXPECT_EQ(bf.select(0, 0).select(0, 0).item<float>(), 8.0f);
  Tensor hf = matmul(ones({4, 8}, kFloat16), ones({8, 2}, kFloat16));
  EXPECT_EQ(hf.select(0, 3).select(0, 1).item<float>(), 8.0f);
}

}  // namespace
}  // namespace tessera
