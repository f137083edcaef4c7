// Corner cases where an op's result, dtype or gradient follows torch's definition rather than
// the obvious formula (values from torch 1.13 in the comments).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "tessera/tessera.h"
#include "testing/expect_error.h"
#include "testing/reference.h"

namespace tessera {
namespace {

using testing::values;

TEST(OpSemantics, NormHasAZeroGradientWhereTheNormIsZero) {
  // torch: x = zeros(2, 3); x.norm(dim=1).sum().backward() gives zeros (not nan); also p = 3.
  for (double p : {2.0, 3.0}) {
    Tensor x = zeros({2, 3}).requires_grad_(true);
    sum(norm(x, p, {1})).backward();
    EXPECT_EQ(values(x.grad()), std::vector<double>(6, 0.0)) << "p = " << p;
  }
  // torch: norm([0, 1, 2], 0.5) gives x.grad == [0, 2.414..., 1.707...] (0 * inf masked).
  Tensor h = tensor(std::vector<double>{0, 1, 2}).requires_grad_(true);
  norm(h, 0.5, {0}).backward();
  const std::vector<double> g = values(h.grad());
  EXPECT_EQ(g[0], 0.0);
  EXPECT_NEAR(g[1], 1.0 + std::sqrt(2.0), 1e-12);
  EXPECT_NEAR(g[2], (1.0 + std::sqrt(2.0)) / std::sqrt(2.0), 1e-12);
  // Elsewhere the gradient is x / |x| (p = 2), here of the row [3, 4] and the zero row.
  Tensor x = tensor(std::vector<double>{3, 4, 0, 0}).reshape({2, 2}).requires_grad_(true);
  sum(norm(x, 2.0, {1})).backward();
  EXPECT_EQ(values(x.grad()), (std::vector<double>{0.6, 0.8, 0, 0}));
}

TEST(OpSemantics, EmptyTensorsWithHugeStridesTakeElementwiseOps) {
  // Strides of an empty view are never stepped, so any are allowed; in bytes they would overflow
  // (UBSan, the debug preset, reported it before the iterator ignored them).
  const int64_t huge = std::numeric_limits<int64_t>::max() / 2;
  Tensor x = empty_strided({0, 4}, {huge, 1}, TensorOptions(kFloat32));
  Tensor y = x + x;
  EXPECT_EQ(y.sizes(), (Shape{0, 4}));
  EXPECT_EQ(sum(y).item<float>(), 0.0f);
}

TEST(OpSemantics, Float32WithA16BitOperandGivesTheCastFirstResult) {
  // torch: randn(3, 4) + randn(4).bfloat16() is float32 and equals adding the operand's float
  // copy (the kernels widen it as they load: no cast pass, the same bits).
  Tensor wide = randn({5, 3, 8});
  Tensor row = randn({8});
  Tensor strided = randn({5, 8, 3}).transpose(1, 2);  // not contiguous
  using Op = Tensor (*)(const Tensor&, const Tensor&);
  const std::vector<std::pair<const char*, Op>> ops{
      {"add", [](const Tensor& a, const Tensor& b) { return add(a, b); }},
      {"sub", [](const Tensor& a, const Tensor& b) { return sub(a, b); }},
      {"mul", [](const Tensor& a, const Tensor& b) { return mul(a, b); }},
      {"div", [](const Tensor& a, const Tensor& b) { return div(a, b); }}};
  for (DType half : {kBFloat16, kFloat16}) {
    for (const Tensor& other : {row, strided, wide + 3.0}) {
      const Tensor h = other.to(half), hf = h.to(kFloat32);
      for (const auto& [name, op] : ops) {
        SCOPED_TRACE(::testing::Message()
                     << name << " with " << half << " of " << other.dim() << " dims");
        const Tensor left = op(wide, h), right = op(h, wide);
        EXPECT_EQ(left.dtype(), kFloat32);
        EXPECT_EQ(right.dtype(), kFloat32);
        EXPECT_EQ(values(left), values(op(wide, hf)));
        EXPECT_EQ(values(right), values(op(hf, wide)));
      }
    }
  }
  // In place into the float32 tensor likewise; a float32 operand into a bfloat16 target still
  // rounds to bfloat16.
  Tensor target = wide.clone();
  target.add_(row.to(kBFloat16));
  EXPECT_EQ(values(target), values(wide + row.to(kBFloat16).to(kFloat32)));
  Tensor narrow_target = wide.to(kBFloat16);
  narrow_target.mul_(row);
  EXPECT_EQ(narrow_target.dtype(), kBFloat16);
  EXPECT_EQ(values(narrow_target), values((wide.to(kBFloat16).to(kFloat32) * row).to(kBFloat16)));
}

TEST(OpSemantics, A16BitOperandOfAFloat32OpGetsA16BitGradient) {
  // torch: for a float32 x and bfloat16 y, (x * y + y).sum().backward() gives x.grad = y in
  // float32 and y.grad in bfloat16, its two parts each rounded to bfloat16 before they add.
  Tensor x = randn({4, 6}).requires_grad_(true);
  Tensor y = randn({6}).to(kBFloat16).requires_grad_(true);
  sum(x * y + y).backward();
  EXPECT_EQ(x.grad().dtype(), kFloat32);
  EXPECT_EQ(y.grad().dtype(), kBFloat16);
  EXPECT_EQ(values(x.grad()), values(expand(y.to(kFloat32), {4, 6})));
  EXPECT_EQ(values(y.grad()), values(sum(x.detach(), {0}).to(kBFloat16) + 4.0));
}

TEST(OpSemantics, IntegerPowIsExactAndWrapsAsTorch) {
  // torch: 3 ** 39 == 4052555153018976267 (a double rounds it to ...256); 7 ** 22 exact;
  // int8 3 ** 5 == -13; uint8 3 ** 7 == 139; negative exponents give 0 except for 1 and -1.
  Tensor big = pow(tensor(std::vector<int64_t>{3, 7}), tensor(std::vector<int64_t>{39, 22}));
  EXPECT_EQ(big.select(0, 0).item<int64_t>(), 4052555153018976267LL);
  EXPECT_EQ(big.select(0, 1).item<int64_t>(), 3909821048582988049LL);
  EXPECT_EQ(
      pow(tensor(std::vector<int64_t>{3}).to(kInt8), Scalar(5)).to(kInt64).sum().item<int64_t>(),
      -13);
  EXPECT_EQ(
      pow(tensor(std::vector<int64_t>{3}).to(kUInt8), Scalar(7)).to(kInt64).sum().item<int64_t>(),
      139);
  Tensor negative = pow(tensor(std::vector<int64_t>{2, 1, -1, -1, 0}),
                        tensor(std::vector<int64_t>{-1, -2, -3, -2, -1}));
  EXPECT_EQ(values(negative), (std::vector<double>{0, 1, -1, 1, 0}));
  // torch: tensor([2]) ** -1 raises "Integers to negative integer powers are not allowed."
  EXPECT_TESSERA_ERROR(pow(tensor(std::vector<int64_t>{2}), Scalar(-1)), ValueError, "[pow]");
}

TEST(OpSemantics, InPlaceResultsMustCastToTheTarget) {
  // torch: b = tensor([True]); b += tensor([2]) raises "result type Long can't be cast to the
  // desired output type Bool"; clamp_ of an int tensor with a float bound likewise.
  Tensor b = tensor(std::vector<int64_t>{1, 0}).to(kBool);
  EXPECT_TESSERA_ERROR(b.add_(tensor(std::vector<int64_t>{2, 0})), TypeError, "castable to bool");
  b.add_(tensor(std::vector<int64_t>{0, 1}).to(kBool));  // bool into bool is fine
  EXPECT_EQ(values(b), (std::vector<double>{1, 1}));
  Tensor i = tensor(std::vector<int64_t>{1, 2, 3});
  EXPECT_TESSERA_ERROR(i.clamp_(Scalar(1.5), std::nullopt), TypeError, "[clamp_]");
}

TEST(OpSemantics, AFloatBoundMakesClampOfIntegersFloat) {
  // torch: clamp(tensor([1, 2, 3]), min=1.5) is float32 [1.5, 2, 3]; integer bounds keep int64.
  Tensor i = tensor(std::vector<int64_t>{1, 2, 3});
  Tensor f = clamp(i, Scalar(1.5), std::nullopt);
  EXPECT_EQ(f.dtype(), kFloat32);
  EXPECT_EQ(values(f), (std::vector<double>{1.5, 2, 3}));
  EXPECT_EQ(clamp(i, Scalar(2), Scalar(2)).dtype(), kInt64);
}

TEST(OpSemantics, MaximumAndMinimumGiveANanBothGradients) {
  // torch: maximum([1, 2, nan], [1, 3, 1]) gives a.grad [0.5, 0, 1] and b.grad [0.5, 1, 1];
  // minimum([1, nan, 2], [1, 3, nan]) gives [0.5, 1, 1] to both.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Tensor a = tensor(std::vector<float>{1, 2, nan}).requires_grad_(true);
  Tensor b = tensor(std::vector<float>{1, 3, 1}).requires_grad_(true);
  sum(maximum(a, b)).backward();
  EXPECT_EQ(values(a.grad()), (std::vector<double>{0.5, 0, 1}));
  EXPECT_EQ(values(b.grad()), (std::vector<double>{0.5, 1, 1}));
  Tensor c = tensor(std::vector<float>{1, nan, 2}).requires_grad_(true);
  Tensor d = tensor(std::vector<float>{1, 3, nan}).requires_grad_(true);
  sum(minimum(c, d)).backward();
  EXPECT_EQ(values(c.grad()), (std::vector<double>{0.5, 1, 1}));
  EXPECT_EQ(values(d.grad()), (std::vector<double>{0.5, 1, 1}));
}

TEST(OpSemantics, UnaryOpsSaveOnlyWhatTheirBackwardReads) {
  // torch: exp saves its result, sin its input, so writing the other in place is fine:
  // d/dx sum(exp(h)) with h = x * 1 later written is exp(x); d/dx sum(sin(h)) is cos(x).
  Tensor x = tensor(std::vector<double>{0.5, -1}).requires_grad_(true);
  Tensor h = x * 1.0;
  Tensor e = exp(h);
  h.add_(1.0);
  sum(e).backward();
  EXPECT_NEAR(values(x.grad())[0], std::exp(0.5), 1e-12);
  Tensor z = tensor(std::vector<double>{0.5, -1}).requires_grad_(true);
  Tensor s = sin(z * 1.0);
  s.add_(1.0);
  sum(s).backward();
  EXPECT_NEAR(values(z.grad())[1], std::cos(-1.0), 1e-12);
}

}  // namespace
}  // namespace tessera
