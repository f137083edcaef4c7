// Op cases for cat/stack, split/chunk, repeat, tril/triu, flip and roll. References are explicit
// loops over output coordinates in double; tril/triu use the arange-mask composite.
#include "testing/op_cases.h"
#include "testing/reference.h"

namespace tessera::testing {
namespace {

OpCase many(std::string op, std::string label, std::vector<InputSpec> in, OpFn f, OpFn ref) {
  return OpCase{op, label, std::move(in), std::move(f), std::move(ref)};
}

// cat along d by loops: each output coordinate reads the input whose slab covers c[d].
Tensor loop_cat(const TensorList& xs, int64_t d) {
  Shape shape;
  DType dtype = xs[0].dtype();
  std::vector<std::vector<double>> vals;
  for (const Tensor& t : xs) {
    dtype = promote_types(dtype, t.dtype());
    vals.push_back(values(t));
    if (t.dim() == 1 && t.numel() == 0) continue;
    if (shape.empty()) {
      shape = t.sizes();
      shape[d] = 0;
    }
    shape[d] += t.size(d);
  }
  return build(shape, dtype, [&](Shape c) {
    for (size_t k = 0; k < xs.size(); ++k) {
      if (xs[k].dim() == 1 && xs[k].numel() == 0) continue;
      if (c[d] < xs[k].size(d)) return vals[k][ravel(c, xs[k].sizes())];
      c[d] -= xs[k].size(d);
    }
    return 0.0;
  });
}

// Pieces of x along d with the given sizes, by loops.
TensorList loop_split(const Tensor& x, int64_t d, const Shape& sizes) {
  std::vector<double> v = values(x);
  TensorList out;
  int64_t start = 0;
  for (int64_t s : sizes) {
    Shape shape = x.sizes();
    shape[d] = s;
    out.push_back(build(shape, x.dtype(), [&](Shape c) {
      c[d] += start;
      return v[ravel(c, x.sizes())];
    }));
    start += s;
  }
  return out;
}

// Element at coordinates c of x after mapping each coordinate through f(dim, coordinate).
Tensor loop_remap(const Tensor& x, const std::function<int64_t(int64_t, int64_t)>& f) {
  std::vector<double> v = values(x);
  return build(x.sizes(), x.dtype(), [&](Shape c) {
    for (size_t d = 0; d < c.size(); ++d) c[d] = f(static_cast<int64_t>(d), c[d]);
    return v[ravel(c, x.sizes())];
  });
}

// The composite formulation of tril/triu: where(col - row <= k (or >= k), x, 0).
Tensor mask_triangle(const Tensor& x, int64_t k, bool lower) {
  const int64_t R = x.size(-2), C = x.size(-1);
  Tensor diff = arange(C).reshape({1, C}) - arange(R).reshape({R, 1});
  Tensor keep = lower ? diff <= Scalar(k) : diff >= Scalar(k);
  return where(keep, x, zeros_like(x));
}

std::vector<OpCase> cat_stack_cases() {
  std::vector<OpCase> v;
  v.push_back(one(
      "cat", "dim0", {real({2, 3}), real({4, 3})},
      [](auto& x) {
        return cat({x[0], x[1]}, 0);
      },
      [](auto& x) {
        return loop_cat({x[0], x[1]}, 0);
      }));
  v.push_back(one(
      "cat", "neg_dim_noncontiguous", {real({3, 2}, true), real({3, 4})},
      [](auto& x) {
        return cat({x[0], x[1]}, -1);
      },
      [](auto& x) {
        return loop_cat({x[0], x[1]}, 1);
      }));
  v.push_back(one(
      "cat", "three_inputs_3d", {real({2, 1, 3}), real({2, 2, 3}), real({2, 3, 3}, true)},
      [](auto& x) {
        return cat({x[0], x[1], x[2]}, 1);
      },
      [](auto& x) {
        return loop_cat({x[0], x[1], x[2]}, 1);
      }));
  v.push_back(one(
      "cat", "promotes_int_input", {real({2, 3}), index({1, 3}, 5)},
      [](auto& x) {
        return cat({x[0], x[1]}, 0);
      },
      [](auto& x) {
        return loop_cat({x[0], x[1]}, 0);
      }));
  v.push_back(one(
      "cat", "skips_legacy_1d_empty", {real({2, 3}), real({2, 2})},
      [](auto& x) {
        return cat({x[0], zeros({0}, TensorOptions(x[0].dtype()).with_device(x[0].device())), x[1]}, 1);
      },
      [](auto& x) {
        return loop_cat({x[0], x[1]}, 1);
      }));
  v.push_back(one("cat", "squared_gradgrad", {real({2, 2}), real({1, 2})}, [](auto& x) {
    Tensor y = cat({x[0], x[1]}, 0);
    return y * y;
  }));
  v.back().gradgradcheck = true;
  v.push_back(one(
      "stack", "dim0", {real({2, 3}), real({2, 3}, true)},
      [](auto& x) {
        return stack({x[0], x[1]});
      },
      [](auto& x) {
        return loop_cat({x[0].reshape({1, 2, 3}), x[1].reshape({1, 2, 3})}, 0);
      }));
  v.push_back(one(
      "stack", "neg_dim", {real({3}), real({3}), real({3})},
      [](auto& x) {
        return stack({x[0], x[1], x[2]}, -1);
      },
      [](auto& x) {
        std::vector<std::vector<double>> vals{values(x[0]), values(x[1]), values(x[2])};
        return build({3, 3}, x[0].dtype(), [&](const Shape& c) { return vals[c[1]][c[0]]; });
      }));
  return v;
}

std::vector<OpCase> split_cases() {
  std::vector<OpCase> v;
  v.push_back(many(
      "split", "uneven_size", {real({7, 2})}, [](auto& x) { return split(x[0], 3); },
      [](auto& x) {
        return loop_split(x[0], 0, {3, 3, 1});
      }));
  v.push_back(many(
      "split", "sizes_neg_dim", {real({2, 6}, true)},
      [](auto& x) {
        return split(x[0], Shape{1, 3, 2}, -1);
      },
      [](auto& x) {
        return loop_split(x[0], 1, {1, 3, 2});
      }));
  v.push_back(many(
      "chunk", "even", {real({6, 2})}, [](auto& x) { return chunk(x[0], 3); },
      [](auto& x) {
        return loop_split(x[0], 0, {2, 2, 2});
      }));
  v.push_back(many(
      "chunk", "uneven_neg_dim", {real({2, 5}, true)}, [](auto& x) { return chunk(x[0], 3, -1); },
      [](auto& x) {
        return loop_split(x[0], 1, {2, 2, 1});
      }));
  return v;
}

std::vector<OpCase> rearrange_cases() {
  std::vector<OpCase> v;
  auto loop_repeat = [](const Tensor& x, const Shape& reps) {
    std::vector<double> vals = values(x);
    const int64_t lead = static_cast<int64_t>(reps.size()) - x.dim();
    Shape shape;
    for (size_t d = 0; d < reps.size(); ++d)
      shape.push_back(reps[d] * (static_cast<int64_t>(d) < lead ? 1 : x.size(d - lead)));
    return build(shape, x.dtype(), [&](const Shape& c) {
      Shape src(c.begin() + lead, c.end());
      for (int64_t d = 0; d < x.dim(); ++d) src[d] %= x.size(d);
      return vals[ravel(src, x.sizes())];
    });
  };
  v.push_back(one(
      "repeat", "2d", {real({2, 3})},
      [](auto& x) {
        return repeat(x[0], {2, 3});
      },
      [=](auto& x) {
        return loop_repeat(x[0], {2, 3});
      }));
  v.push_back(one(
      "repeat", "extra_leading_noncontiguous", {real({2, 3}, true)},
      [](auto& x) {
        return repeat(x[0], {2, 1, 2});
      },
      [=](auto& x) {
        return loop_repeat(x[0], {2, 1, 2});
      }));
  v.push_back(one(
      "repeat", "1d", {real({3})}, [](auto& x) { return repeat(x[0], {3}); },
      [=](auto& x) { return loop_repeat(x[0], {3}); }));
  for (int64_t k : {0, 1, -2}) {
    std::string label = "k" + std::to_string(k);
    v.push_back(one(
        "tril", label, {real({4, 4})}, [k](auto& x) { return tril(x[0], k); },
        [k](auto& x) { return mask_triangle(x[0], k, true); }));
    v.push_back(one(
        "triu", label, {real({4, 4})}, [k](auto& x) { return triu(x[0], k); },
        [k](auto& x) { return mask_triangle(x[0], k, false); }));
  }
  v.push_back(one(
      "tril", "batched_wide_noncontiguous", {real({2, 3, 5}, true)},
      [](auto& x) { return tril(x[0], 1); }, [](auto& x) { return mask_triangle(x[0], 1, true); }));
  v.push_back(one(
      "triu", "batched_tall", {real({2, 5, 3})}, [](auto& x) { return triu(x[0], -1); },
      [](auto& x) { return mask_triangle(x[0], -1, false); }));
  v.push_back(one(
      "flip", "dim0", {real({3, 4})}, [](auto& x) { return flip(x[0], {0}); },
      [](auto& x) {
        return loop_remap(x[0], [](int64_t d, int64_t c) { return d == 0 ? 2 - c : c; });
      }));
  v.push_back(one(
      "flip", "two_dims_noncontiguous", {real({2, 3, 4}, true)},
      [](auto& x) {
        return flip(x[0], {0, -1});
      },
      [](auto& x) {
        return loop_remap(x[0], [](int64_t d, int64_t c) {
          return d == 0 ? 1 - c : d == 2 ? 3 - c : c;
        });
      }));
  v.push_back(one(
      "roll", "dim0", {real({5, 3})}, [](auto& x) { return roll(x[0], {2}, {0}); },
      [](auto& x) {
        return loop_remap(x[0], [](int64_t d, int64_t c) { return d == 0 ? (c - 2 + 5) % 5 : c; });
      }));
  v.push_back(one(
      "roll", "two_dims_negative_shift", {real({3, 4}, true)},
      [](auto& x) {
        return roll(x[0], {-1, 5}, {1, 0});
      },
      [](auto& x) {
        // Shifts -1 on dim 1 (size 4) and 5 = 2 on dim 0 (size 3).
        return loop_remap(
            x[0], [](int64_t d, int64_t c) { return d == 1 ? (c + 1) % 4 : (c - 2 + 3) % 3; });
      }));
  v.push_back(one(
      "roll", "flattened", {real({2, 3})}, [](auto& x) { return roll(x[0], {4}, {}); },
      [](auto& x) {
        std::vector<double> vals = values(x[0]);
        return build({2, 3}, x[0].dtype(), [&](const Shape& c) {
          return vals[(ravel(c, {2, 3}) - 4 + 6) % 6];
        });
      }));
  return v;
}

TESSERA_OP_CASES(cat_stack_cases());
TESSERA_OP_CASES(split_cases());
TESSERA_OP_CASES(rearrange_cases());

}  // namespace
}  // namespace tessera::testing
