#pragma once
// The op case table: each op declares its cases once (input shapes and kinds, tolerances) and the
// same table drives the float64 gradient check, the forward reference checks and, later, the
// cross-backend checks.
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "testing/gradcheck.h"

namespace tessera::testing {

struct InputSpec {
  enum class Kind {
    Real,      // uniform in [-2, 2]
    Positive,  // uniform in [0.5, 2] (log, sqrt, div denominators)
    Unit,      // uniform in (-0.9, 0.9)
    Index,     // int64 in [0, high)
    Mask,      // random bool
  };
  Shape shape;
  Kind kind = Kind::Real;
  int64_t high = 0;
  bool noncontiguous = false;  // materialised transposed (or strided for 1-d)
  bool requires_grad = true;   // only for floating kinds
};

InputSpec real(Shape s, bool noncontiguous = false);
InputSpec positive(Shape s, bool noncontiguous = false);
InputSpec unit(Shape s);
InputSpec index(Shape s, int64_t high);
InputSpec mask(Shape s);
InputSpec constant(Shape s);  // real values that do not require grad

struct OpCase {
  std::string op;     // public op name as in the op registry
  std::string label;  // what the case exercises
  std::vector<InputSpec> inputs;
  OpFn fn;
  // Optional second formulation computing the same outputs (checked in float64 and float32).
  OpFn reference;
  GradcheckOptions tol{};
  bool gradcheck = true;
  bool gradgradcheck = false;
};

std::vector<OpCase>& op_cases();
bool add_op_cases(std::vector<OpCase> cases);

// A case whose op (and optional reference) returns a single tensor.
OpCase one(std::string op, std::string label, std::vector<InputSpec> inputs,
           std::function<Tensor(const TensorList&)> fn,
           std::function<Tensor(const TensorList&)> reference = nullptr);

// 0 .. op_cases().size() - 1, and a gtest name for case i (op, label and index), for suites
// parameterised by the table.
std::vector<size_t> op_case_indices();
std::string op_case_test_name(size_t index);

// x's dtype and device: for cases whose op creates a tensor beside its inputs, so that the case
// runs on whichever device the harness put the inputs.
inline TensorOptions options_like(const Tensor& x) {
  return TensorOptions(x.dtype()).with_device(x.device());
}

// Inputs for a case in dtype (floating kinds) with a fixed seed per case.
TensorList make_inputs(const OpCase& c, DType dtype, uint64_t seed);

}  // namespace tessera::testing

#define TESSERA_CASES_CONCAT_(a, b) a##b
#define TESSERA_CASES_CONCAT(a, b) TESSERA_CASES_CONCAT_(a, b)
#define TESSERA_OP_CASES(...)                                                           \
  [[maybe_unused]] static const bool TESSERA_CASES_CONCAT(tessera_cases_, __LINE__) = \
      ::tessera::testing::add_op_cases(__VA_ARGS__)
