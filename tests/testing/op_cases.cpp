#include "testing/op_cases.h"

#include <cctype>
#include <numeric>

namespace tessera::testing {

InputSpec real(Shape s, bool nc) { return {std::move(s), InputSpec::Kind::Real, 0, nc, true}; }
InputSpec positive(Shape s, bool nc) {
  return {std::move(s), InputSpec::Kind::Positive, 0, nc, true};
}
InputSpec unit(Shape s) { return {std::move(s), InputSpec::Kind::Unit, 0, false, true}; }
InputSpec index(Shape s, int64_t high) {
  return {std::move(s), InputSpec::Kind::Index, high, false, false};
}
InputSpec mask(Shape s) { return {std::move(s), InputSpec::Kind::Mask, 0, false, false}; }
InputSpec constant(Shape s) { return {std::move(s), InputSpec::Kind::Real, 0, false, false}; }

std::vector<OpCase>& op_cases() {
  static std::vector<OpCase> cases;
  return cases;
}

bool add_op_cases(std::vector<OpCase> cases) {
  for (auto& c : cases) op_cases().push_back(std::move(c));
  return true;
}

OpCase one(std::string op, std::string label, std::vector<InputSpec> inputs,
           std::function<Tensor(const TensorList&)> fn,
           std::function<Tensor(const TensorList&)> reference) {
  OpCase c{std::move(op), std::move(label), std::move(inputs),
           [fn](const TensorList& x) { return TensorList{fn(x)}; }};
  if (reference) c.reference = [reference](const TensorList& x) { return TensorList{reference(x)}; };
  return c;
}

namespace {
Tensor sample(const InputSpec& s, const Shape& shape, DType dtype, Generator& gen) {
  using K = InputSpec::Kind;
  switch (s.kind) {
    case K::Index: return randint(0, std::max<int64_t>(s.high, 1), shape, kInt64, &gen);
    case K::Mask: return lt(rand(shape, kFloat64, &gen), wrap_scalar(0.5));
    case K::Positive: return cast(rand(shape, kFloat64, &gen) * 1.5 + 0.5, dtype);
    case K::Unit: return cast(rand(shape, kFloat64, &gen) * 1.8 - 0.9, dtype);
    case K::Real: return cast(rand(shape, kFloat64, &gen) * 4.0 - 2.0, dtype);
  }
  return Tensor();
}
}  // namespace

std::vector<size_t> op_case_indices() {
  std::vector<size_t> idx(op_cases().size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  return idx;
}

std::string op_case_test_name(size_t index) {
  const OpCase& c = op_cases()[index];
  std::string s = c.op + "_" + c.label + "_" + std::to_string(index);
  for (char& ch : s)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return s;
}

TensorList make_inputs(const OpCase& c, DType dtype, uint64_t seed) {
  Generator gen(seed);
  autograd::NoGradGuard ng;
  TensorList out;
  for (const InputSpec& s : c.inputs) {
    Tensor t;
    if (s.noncontiguous && s.shape.size() >= 2) {
      // Sample the transposed layout and transpose back: same shape, non-unit inner stride.
      Shape swapped = s.shape;
      std::swap(swapped[swapped.size() - 1], swapped[swapped.size() - 2]);
      t = sample(s, swapped, dtype, gen).transpose(-1, -2);
    } else if (s.noncontiguous && s.shape.size() == 1) {
      t = sample(s, {s.shape[0] * 2}, dtype, gen).slice(0, 0, std::nullopt, 2);
    } else {
      t = sample(s, s.shape, dtype, gen);
    }
    t = t.detach();
    bool floating = s.kind != InputSpec::Kind::Index && s.kind != InputSpec::Kind::Mask;
    if (floating && s.requires_grad) t.requires_grad_(true);
    out.push_back(t);
  }
  return out;
}

}  // namespace tessera::testing
