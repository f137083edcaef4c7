// Op cases for tensor factories, fills and random sampling: value checks (none of them is
// differentiable; zero_ is gradient-checked too, as it cuts the history). The dtype comes from a
// constant input; random ops draw from a seeded generator, or, when they take none, the case
// checks a property every draw has.
#include "testing/op_cases.h"
#include "testing/reference.h"

namespace tessera::testing {
namespace {

std::vector<OpCase> creation_cases() {
  std::vector<OpCase> v;
  v.push_back(one(
      "ones_like", "dtype", {constant({3, 4})}, [](auto& x) { return ones_like(x[0]); },
      [](auto& x) { return map1(x[0], [](double) { return 1.0; }); }));
  v.push_back(one(
      "empty_like", "filled", {constant({2, 3})},
      [](auto& x) {
        Tensor e = empty_like(x[0]);
        e.fill_(1.5);
        return e;
      },
      [](auto& x) { return full_like(x[0], 1.5); }));
  v.push_back(one(
      "scalar_tensor", "dtype", {constant({1})},
      [](auto& x) { return scalar_tensor(2.5, options_like(x[0])); },
      [](auto& x) { return full({}, 2.5, x[0].dtype()); }));
  v.push_back(one(
      "eye", "rectangular", {constant({1})}, [](auto& x) { return eye(3, 4, options_like(x[0])); },
      [](auto& x) {
        return build({3, 4}, x[0].dtype(), [](const Shape& c) { return c[0] == c[1]; });
      }));
  v.push_back(one(
      "linspace", "endpoints", {constant({1})},
      [](auto& x) { return linspace(-1.0, 2.0, 7, options_like(x[0])); },
      [](auto& x) {
        return build({7}, x[0].dtype(), [](const Shape& c) { return -1.0 + 0.5 * c[0]; });
      }));
  for (auto& c : v) c.gradcheck = false;
  // zero_ on a copy of a leaf: the leaf gets a zero gradient (the old values are overwritten).
  v.push_back(one(
      "zero_", "inplace", {real({3, 4})},
      [](auto& x) {
        Tensor s = x[0] * 1.0;
        return s.zero_();
      },
      [](auto& x) { return zeros_like(x[0]); }));
  return v;
}

std::vector<OpCase> random_cases() {
  std::vector<OpCase> v;
  // rand/randn with a generator draw what uniform_/normal_ draw into an empty tensor.
  using Draw = std::function<Tensor(const Tensor& like, Generator* gen)>;
  auto seeded = [](const Draw& draw) {
    return [draw](const TensorList& x) {
      Generator gen(7);
      return draw(x[0], &gen);
    };
  };
  auto seeded_case = [&](std::string op, Draw draw, Draw fill) {
    v.push_back(one(std::move(op), "seeded", {constant({3, 4})}, seeded(draw), seeded(fill)));
  };
  seeded_case(
      "rand", [](const Tensor& t, Generator* gen) { return rand(t.sizes(), options_like(t), gen); },
      [](const Tensor& t, Generator* gen) {
        Tensor e = empty_like(t);
        return uniform_(e, 0.0, 1.0, gen);
      });
  seeded_case(
      "randn", [](const Tensor& t, Generator* gen) { return randn(t.sizes(), options_like(t), gen); },
      [](const Tensor& t, Generator* gen) {
        Tensor e = empty_like(t);
        return normal_(e, 0.0, 1.0, gen);
      });
  v.push_back(one(
      "rand_like", "in_unit_interval", {constant({4, 5})},
      [](auto& x) {
        Tensor r = rand_like(x[0]);
        return logical_and(r >= 0.0, r <= 1.0);
      },
      [](auto& x) { return ones_like(x[0], kBool); }));
  v.push_back(one(
      "randn_like", "finite", {constant({4, 5})},
      [](auto& x) { return isfinite(randn_like(x[0])); },
      [](auto& x) { return ones_like(x[0], kBool); }));
  v.push_back(one(
      "randint", "in_range", {constant({4, 5})},
      [](auto& x) {
        Generator gen(7);
        Tensor r = randint(2, 5, x[0].sizes(), TensorOptions(kInt64).with_device(x[0].device()), &gen);
        return logical_and(r >= 2, r < 5);
      },
      [](auto& x) { return ones_like(x[0], kBool); }));
  // Each of 0..n-1 exactly once.
  v.push_back(one(
      "randperm", "permutation", {constant({1})},
      [](auto& x) {
        Generator gen(7);
        return sum(one_hot(randperm(6, &gen).to(x[0].device()), 6), {0});
      },
      [](auto&) { return ones({6}, kInt64); }));
  // Without replacement, drawing every category of positive weights is a permutation.
  v.push_back(one(
      "multinomial", "all_without_replacement", {constant({6})},
      [](auto& x) {
        Generator gen(7);
        return sum(one_hot(multinomial(abs(x[0]) + 0.5, 6, false, &gen), 6), {0});
      },
      [](auto&) { return ones({6}, kInt64); }));
  for (auto& c : v) c.gradcheck = false;
  return v;
}

TESSERA_OP_CASES(creation_cases());
TESSERA_OP_CASES(random_cases());

}  // namespace
}  // namespace tessera::testing
