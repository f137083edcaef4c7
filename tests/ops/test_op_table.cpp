// Runs every case of the op table: float64 gradient checks, reference values, and forward
// smoke runs in float32/bfloat16. Also checks the table covers the registry.
#include <gtest/gtest.h>

#include <set>

#include "tessera/ops/op_info.h"
#include "testing/op_cases.h"

namespace tessera::testing {
namespace {

class OpCaseTest : public ::testing::TestWithParam<size_t> {
 protected:
  const OpCase& c() const { return op_cases()[GetParam()]; }
};

TEST_P(OpCaseTest, GradcheckFloat64) {
  if (!c().gradcheck)
    GTEST_SKIP() << c().op << " / " << c().label << " has no gradient check (its case says why)";
  TensorList in = make_inputs(c(), kFloat64, 1000 + GetParam());
  EXPECT_EQ(gradcheck(c().fn, in, c().tol), "") << c().op << " / " << c().label;
  if (c().gradgradcheck) {
    EXPECT_EQ(gradgradcheck(c().fn, in, c().tol), "") << c().op << " second derivative";
  }
}

TEST_P(OpCaseTest, MatchesReference) {
  if (!c().reference) GTEST_SKIP() << "no second formulation for " << c().op;
  for (DType dt : {kFloat64, kFloat32}) {
    TensorList in = make_inputs(c(), dt, 2000 + GetParam());
    TensorList got = c().fn(in);
    TensorList want = c().reference(in);
    ASSERT_EQ(got.size(), want.size());
    double tol = dt == kFloat64 ? 1e-10 : 1e-5;
    for (size_t k = 0; k < got.size(); ++k) {
      ASSERT_EQ(got[k].sizes(), want[k].sizes()) << c().op << " output " << k;
      EXPECT_TRUE(allclose(got[k], want[k], tol, tol))
          << c().op << " / " << c().label << " output " << k << " in " << dt << "\n got "
          << got[k] << "\nwant " << want[k];
    }
  }
}

TEST_P(OpCaseTest, ForwardInLowPrecisionIsClose) {
  // bfloat16 results stay within bf16 rounding of the float32 results.
  TensorList in32 = make_inputs(c(), kFloat32, 3000 + GetParam());
  TensorList in16;
  for (const Tensor& t : in32) in16.push_back(t.is_floating_point() ? t.detach().to(kBFloat16) : t);
  TensorList ref, got;
  {
    autograd::NoGradGuard ng;
    // Inputs rounded to bf16 first, so only the op's own error is measured.
    TensorList rounded;
    for (const Tensor& t : in16) rounded.push_back(t.is_floating_point() ? t.to(kFloat32) : t);
    ref = c().fn(rounded);
    got = c().fn(in16);
  }
  ASSERT_EQ(ref.size(), got.size());
  for (size_t k = 0; k < got.size(); ++k) {
    if (!got[k].is_floating_point()) continue;
    EXPECT_EQ(got[k].dtype(), kBFloat16) << c().op;
    EXPECT_TRUE(allclose(got[k].to(kFloat32), ref[k], 0.05, 0.05))
        << c().op << " / " << c().label << "\n got " << got[k] << "\nwant " << ref[k];
  }
}

INSTANTIATE_TEST_SUITE_P(Table, OpCaseTest, ::testing::ValuesIn(op_case_indices()),
                         [](const auto& info) { return op_case_test_name(info.param); });

TEST(OpTable, EveryDifferentiableOpIsGradchecked) {
  std::set<std::string> checked;
  for (const auto& c : op_cases())
    if (c.gradcheck) checked.insert(c.op);
  for (const OpInfo& op : op_registry()) {
    if (op.differentiable)
      EXPECT_TRUE(checked.count(std::string(op.name))) << op.name << " has no gradcheck case";
  }
}

TEST(OpTable, EveryCaseNamesARegisteredOp) {
  std::set<std::string> names;
  for (const OpInfo& op : op_registry()) names.insert(std::string(op.name));
  for (const auto& c : op_cases()) EXPECT_TRUE(names.count(c.op)) << c.op << " is not registered";
}

TEST(OpTable, RegistryHasAtLeast80Ops) { EXPECT_GE(op_registry().size(), 80u); }

}  // namespace
}  // namespace tessera::testing
