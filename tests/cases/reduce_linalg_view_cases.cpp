// Op cases for reductions, matrix products and views.
#include <cmath>

#include "testing/op_cases.h"
#include "testing/reference.h"

namespace tessera::testing {
namespace {

// Sum over dim of a 2-d tensor by explicit loops (reference for the reductions).
Tensor loop_sum_rows(const Tensor& x) {
  std::vector<double> v = values(x), out(x.size(0), 0.0);
  for (int64_t i = 0; i < x.size(0); ++i)
    for (int64_t j = 0; j < x.size(1); ++j) out[i] += v[i * x.size(1) + j];
  return from_values(out, {x.size(0)}, x.dtype());
}

// Running sum along dim 1 of a 2-d tensor.
Tensor loop_cumsum_rows(const Tensor& x) {
  std::vector<double> v = values(x);
  for (int64_t i = 0; i < x.size(0); ++i)
    for (int64_t j = 1; j < x.size(1); ++j) v[i * x.size(1) + j] += v[i * x.size(1) + j - 1];
  return from_values(v, x.sizes(), x.dtype());
}

// Naive triple loop (reference for the GEMMs).
Tensor loop_matmul(const Tensor& a, const Tensor& b) {
  const int64_t M = a.size(0), K = a.size(1), N = b.size(1);
  std::vector<double> va = values(a), vb = values(b), out(M * N, 0.0);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t k = 0; k < K; ++k)
      for (int64_t j = 0; j < N; ++j) out[i * N + j] += va[i * K + k] * vb[k * N + j];
  return from_values(out, {M, N}, a.dtype());
}

std::vector<OpCase> reduction_cases() {
  std::vector<OpCase> v;
  v.push_back(one("sum", "rows", {real({4, 5})}, [](auto& x) { return sum(x[0], {1}); },
                  [](auto& x) { return loop_sum_rows(x[0]); }));
  v.push_back(one("sum", "leading_dims_keepdim", {real({3, 4, 5}, true)},
                  [](auto& x) { return sum(x[0], {0, 2}, true); },
                  [](auto& x) { return sum(sum(x[0], {2}, true), {0}, true); }));
  v.push_back(one("sum", "all", {real({2, 3, 4})}, [](auto& x) { return sum(x[0]); },
                  [](auto& x) { return sum(loop_sum_rows(x[0].reshape({6, 4}))); }));
  v.push_back(one("mean", "dim", {real({4, 6}, true)}, [](auto& x) { return mean(x[0], {0}); },
                  [](auto& x) { return sum(x[0], {0}) / 4.0; }));
  v.push_back(one("prod", "dim", {real({3, 4})}, [](auto& x) { return prod(x[0], {1}); },
                  [](auto& x) {
                    return x[0].select(1, 0) * x[0].select(1, 1) * x[0].select(1, 2) *
                           x[0].select(1, 3);
                  }));
  v.push_back(one("prod", "with_zero", {real({3, 4})},
                  [](auto& x) {
                    Tensor m = ones({3, 4}, TensorOptions(x[0].dtype()).with_device(x[0].device()));
                    m.select(1, 2).fill_(0.0);
                    return prod(x[0] * m, {1});
                  }));
  v.push_back(one("amax", "dims", {real({3, 4, 5})}, [](auto& x) { return amax(x[0], {0, 2}); }));
  v.push_back(one("amin", "keepdim", {real({3, 4})}, [](auto& x) { return amin(x[0], {1}, true); }));
  v.push_back(one("max", "all", {real({3, 4})}, [](auto& x) { return max(x[0]); },
                  [](auto& x) { return amax(x[0]); }));
  v.push_back(one("min", "all", {real({3, 4})}, [](auto& x) { return min(x[0]); },
                  [](auto& x) { return amin(x[0]); }));
  v.push_back(one("max", "dim_values", {real({3, 5}, true)},
                  [](auto& x) { return std::get<0>(max(x[0], 1)); },
                  [](auto& x) { return amax(x[0], {1}); }));
  v.push_back(one("min", "dim_values", {real({4, 3})},
                  [](auto& x) { return std::get<0>(min(x[0], 0, true)); },
                  [](auto& x) { return amin(x[0], {0}, true); }));
  v.push_back(one("var", "dim", {real({4, 5})}, [](auto& x) { return var(x[0], {1}); },
                  [](auto& x) {
                    Tensor d = x[0] - mean(x[0], {1}, true);
                    return sum(d * d, {1}) / 4.0;
                  }));
  v.push_back(one("std", "all_unbiased0", {real({3, 4})}, [](auto& x) { return std(x[0], {}, 0); },
                  [](auto& x) { return sqrt(mean(square(x[0] - mean(x[0])))); }));
  v.push_back(one("norm", "l2", {real({3, 4})}, [](auto& x) { return norm(x[0]); },
                  [](auto& x) { return sqrt(sum(x[0] * x[0])); }));
  v.push_back(one("norm", "l3_dim", {real({3, 4})}, [](auto& x) { return norm(x[0], 3.0, {1}); },
                  [](auto& x) { return pow(sum(pow(abs(x[0]), 3.0), {1}), 1.0 / 3.0); }));
  v.push_back(one("logsumexp", "dim", {real({3, 5})}, [](auto& x) { return logsumexp(x[0], {1}); },
                  [](auto& x) { return log(sum(exp(x[0]), {1})); }));
  v.push_back(one("cumsum", "dim1", {real({3, 4})}, [](auto& x) { return cumsum(x[0], 1); },
                  [](auto& x) { return loop_cumsum_rows(x[0]); }));
  v.push_back(one("sum_to", "broadcast_back", {real({2, 3, 4})},
                  [](auto& x) { return sum_to(x[0], {3, 1}); },
                  [](auto& x) { return sum(x[0], {0, 2}).reshape({3, 1}); }));
  // Index and bool results: value checks only.
  v.push_back(one(
      "argmax", "dim", {real({3, 5})}, [](auto& x) { return argmax(x[0], 1); },
      [](auto& x) { return std::get<1>(max(x[0], 1)); }));
  v.push_back(one(
      "argmin", "flattened", {real({3, 4}, true)}, [](auto& x) { return argmin(x[0]); },
      [](auto& x) { return std::get<1>(min(x[0].reshape({-1}), 0)); }));
  v.push_back(one(
      "all", "dim", {real({3, 4})}, [](auto& x) { return all(x[0] > 0.0, {1}); },
      [](auto& x) { return amin(x[0], {1}) > 0.0; }));
  for (auto& c : v) c.gradcheck = c.op != "argmax" && c.op != "argmin" && c.op != "all";
  return v;
}

std::vector<OpCase> linalg_cases() {
  std::vector<OpCase> v;
  auto mm_ref = [](auto& x) { return loop_matmul(x[0], x[1]); };
  v.push_back(one("mm", "plain", {real({3, 4}), real({4, 5})},
                  [](auto& x) { return mm(x[0], x[1]); }, mm_ref));
  v.push_back(one("mm", "transposed_operands", {real({3, 4}, true), real({4, 5}, true)},
                  [](auto& x) { return mm(x[0], x[1]); }, mm_ref));
  v.push_back(one("matmul", "batched_broadcast", {real({2, 1, 3, 4}), real({3, 4, 2})},
                  [](auto& x) { return matmul(x[0], x[1]); }));
  v.push_back(one("matmul", "nd_by_2d", {real({2, 3, 4}), real({4, 5}, true)},
                  [](auto& x) { return matmul(x[0], x[1]); },
                  [](auto& x) {
                    return loop_matmul(x[0].reshape({6, 4}), x[1]).reshape({2, 3, 5});
                  }));
  v.push_back(one("matmul", "vector_cases", {real({4}), real({4, 3}), real({3})},
                  [](auto& x) { return matmul(matmul(x[0], x[1]), x[2]); },
                  [](auto& x) { return sum(sum(x[0].unsqueeze(1) * x[1], {0}) * x[2]); }));
  v.push_back(one("bmm", "batch", {real({2, 3, 4}), real({2, 4, 2}, true)},
                  [](auto& x) { return bmm(x[0], x[1]); },
                  [](auto& x) {
                    std::vector<double> out;
                    for (int64_t b = 0; b < 2; ++b) {
                      auto part = values(loop_matmul(x[0].select(0, b), x[1].select(0, b)));
                      out.insert(out.end(), part.begin(), part.end());
                    }
                    return from_values(out, {2, 3, 2}, x[0].dtype());
                  }));
  v.push_back(one("addmm", "beta_alpha", {real({5}), real({3, 4}), real({4, 5})},
                  [](auto& x) { return addmm(x[0], x[1], x[2], 0.5, 2.0); },
                  [](auto& x) { return x[0] * 0.5 + loop_matmul(x[1], x[2]) * 2.0; }));
  v.push_back(one("baddbmm", "beta_alpha", {real({2, 3, 2}), real({2, 3, 4}), real({2, 4, 2})},
                  [](auto& x) { return baddbmm(x[0], x[1], x[2], 1.5, -1.0); },
                  [](auto& x) { return x[0] * 1.5 - bmm(x[1], x[2]); }));
  v.push_back(one("linear", "bias", {real({2, 3, 4}), real({5, 4}), real({5})},
                  [](auto& x) { return linear(x[0], x[1], x[2]); },
                  [](auto& x) {
                    return (loop_matmul(x[0].reshape({6, 4}), x[1].t()) + x[2]).reshape({2, 3, 5});
                  }));
  // With a bias and tanh: one kernel call (CUDA's GELU epilogue) and the two recorded nodes.
  v.push_back(one(
      "linear_gelu", "tanh_bias", {real({2, 3, 4}), real({5, 4}), real({5})},
      [](auto& x) { return linear_gelu(x[0], x[1], x[2], "tanh"); },
      [](auto& x) { return gelu(linear(x[0], x[1], x[2]), "tanh"); }));
  v.push_back(one(
      "linear_gelu", "erf_no_bias", {real({3, 4}), real({6, 4})},
      [](auto& x) { return linear_gelu(x[0], x[1]); },
      [](auto& x) { return gelu(linear(x[0], x[1])); }));
  v.push_back(one("outer", "vectors", {real({3}), real({4}, true)},
                  [](auto& x) { return outer(x[0], x[1]); },
                  [](auto& x) { return loop_matmul(x[0].reshape({3, 1}), x[1].reshape({1, 4})); }));
  for (auto& c : v) c.gradgradcheck = c.op == "mm" || c.op == "linear_gelu";
  return v;
}

std::vector<OpCase> view_cases() {
  std::vector<OpCase> v;
  // Each view is followed by a multiply so its gradient is not just ones.
  auto view_case = [&](std::string op, std::string label, InputSpec in,
                       std::function<Tensor(const Tensor&)> f) {
    v.push_back(one(op, label, {in}, [f](auto& x) {
      Tensor y = f(x[0]);
      return y * arange(y.numel()).to(y.dtype()).to(y.device()).reshape(y.sizes());
    }));
  };
  view_case("view", "merge", real({2, 3, 4}), [](auto& x) { return view(x, {6, -1}); });
  view_case("reshape", "noncontiguous_copy", real({3, 4}, true),
            [](auto& x) { return reshape(x, {12}); });
  view_case("permute", "3d", real({2, 3, 4}), [](auto& x) { return permute(x, {2, 0, 1}); });
  view_case("transpose", "neg_dims", real({2, 3, 4}), [](auto& x) { return transpose(x, -1, 0); });
  view_case("narrow", "middle", real({5, 3}), [](auto& x) { return narrow(x, 0, 1, 3); });
  view_case("slice", "step", real({3, 7}), [](auto& x) { return slice(x, 1, 1, -1, 2); });
  view_case("select", "negative_index", real({3, 4, 2}), [](auto& x) { return select(x, 1, -1); });
  view_case("expand", "broadcast", real({3, 1}), [](auto& x) { return expand(x, {2, 3, 4}); });
  view_case("squeeze", "all", real({3, 1, 4, 1}), [](auto& x) { return squeeze(x); });
  view_case("unsqueeze", "middle", real({3, 4}), [](auto& x) { return unsqueeze(x, 1); });
  view_case("flatten", "partial", real({2, 3, 4}), [](auto& x) { return flatten(x, 1); });
  view_case("unflatten", "split_dim", real({2, 12}), [](auto& x) { return unflatten(x, 1, {3, -1}); });
  view_case("as_strided", "overlapping_windows", real({10}),
            [](auto& x) { return as_strided(x, {4, 3}, {2, 1}); });
  // Storage geometry of a transposed input: its gradient lands where its elements sit.
  view_case("as_strided", "noncontiguous_input", real({3, 4}, true), [](auto& x) {
    return as_strided(x, {2, 4}, {4, 1}, x.storage_offset() + 2);
  });
  for (auto& c : v) c.gradgradcheck = c.op == "as_strided";
  return v;
}

TESSERA_OP_CASES(reduction_cases());
TESSERA_OP_CASES(linalg_cases());
TESSERA_OP_CASES(view_cases());

}  // namespace
}  // namespace tessera::testing
