// Op cases for gathering, scattering, embedding and masked selection. Index inputs are random
// (so duplicates occur) except for scatter, whose gradient is only well defined when each target
// is written once. References are explicit loops in double.
#include "testing/op_cases.h"
#include "testing/reference.h"

namespace tessera::testing {
namespace {

std::vector<int64_t> ints(const Tensor& t) {
  std::vector<double> v = values(t);
  return std::vector<int64_t>(v.begin(), v.end());
}

Tensor idx64(std::vector<int64_t> v, Shape shape) { return tensor(v, shape); }

// out[c] = x[c with c[d] = index[c[d]]].
Tensor loop_index_select(const Tensor& x, int64_t d, const Tensor& index) {
  std::vector<double> v = values(x);
  std::vector<int64_t> idx = ints(index);
  Shape shape = x.sizes();
  shape[d] = static_cast<int64_t>(idx.size());
  return build(shape, x.dtype(), [&](Shape c) {
    c[d] = idx[c[d]];
    return v[ravel(c, x.sizes())];
  });
}

// out[c] = x[c with c[d] = index[c]], out of index's shape.
Tensor loop_gather(const Tensor& x, int64_t d, const Tensor& index) {
  std::vector<double> v = values(x);
  std::vector<int64_t> idx = ints(index);
  return build(index.sizes(), x.dtype(), [&](Shape c) {
    int64_t i = ravel(c, index.sizes());
    c[d] = idx[i];
    return v[ravel(c, x.sizes())];
  });
}

// x with out[p with p[d] = index[p]] (+)= src[p] for p over index's shape, in row-major order.
Tensor loop_scatter(const Tensor& x, int64_t d, const Tensor& index, const Tensor& src, bool add) {
  std::vector<double> out = values(x), s = values(src);
  std::vector<int64_t> idx = ints(index);
  for (int64_t i = 0; i < index.numel(); ++i) {
    Shape p = unravel(i, index.sizes());
    double value = s[ravel(p, src.sizes())];
    p[d] = idx[i];
    double& target = out[ravel(p, x.sizes())];
    target = add ? target + value : value;
  }
  return from_values(out, x.sizes(), x.dtype());
}

// x with alpha * src[p] added at p with p[d] = index[p[d]].
Tensor loop_index_add(const Tensor& x, int64_t d, const Tensor& index, const Tensor& src,
                      double alpha) {
  std::vector<double> out = values(x), s = values(src);
  std::vector<int64_t> idx = ints(index);
  for (int64_t i = 0; i < src.numel(); ++i) {
    Shape p = unravel(i, src.sizes());
    p[d] = idx[p[d]];
    out[ravel(p, x.sizes())] += alpha * s[i];
  }
  return from_values(out, x.sizes(), x.dtype());
}

std::vector<OpCase> gather_cases() {
  std::vector<OpCase> v;
  v.push_back(one(
      "index_select", "dim0_duplicates", {real({5, 3}), index({4}, 5)},
      [](auto& x) { return index_select(x[0], 0, x[1]); },
      [](auto& x) { return loop_index_select(x[0], 0, x[1]); }));
  v.push_back(one(
      "index_select", "neg_dim_int32_noncontiguous", {real({3, 5}, true), index({6}, 5)},
      [](auto& x) { return index_select(x[0], -1, x[1].to(kInt32)); },
      [](auto& x) { return loop_index_select(x[0], 1, x[1]); }));
  v.push_back(one(
      "index_select", "3d_middle", {real({2, 4, 3}), index({3}, 4)},
      [](auto& x) { return index_select(x[0], 1, x[1]); },
      [](auto& x) { return loop_index_select(x[0], 1, x[1]); }));
  v.push_back(one(
      "gather", "dim1_smaller_index", {real({3, 4}), index({3, 2}, 4)},
      [](auto& x) { return gather(x[0], 1, x[1]); },
      [](auto& x) { return loop_gather(x[0], 1, x[1]); }));
  v.push_back(one(
      "gather", "dim0_int32_noncontiguous", {real({4, 3}, true), index({5, 3}, 4)},
      [](auto& x) { return gather(x[0], 0, x[1].to(kInt32)); },
      [](auto& x) { return loop_gather(x[0], 0, x[1]); }));
  v.push_back(one(
      "gather", "3d_neg_dim", {real({2, 3, 4}), index({2, 2, 6}, 4)},
      [](auto& x) { return gather(x[0], -1, x[1]); },
      [](auto& x) { return loop_gather(x[0], 2, x[1]); }));
  v.push_back(one(
      "take_along_dim", "broadcast_index", {real({2, 4, 3}), index({1, 2, 3}, 4)},
      [](auto& x) { return take_along_dim(x[0], x[1], 1); },
      [](auto& x) {
        return loop_gather(x[0], 1, x[1].expand({2, 2, 3}));
      }));
  v.push_back(one(
      "take_along_dim", "broadcast_input_neg_dim", {real({1, 4, 3}), index({2, 5, 3}, 4)},
      [](auto& x) { return take_along_dim(x[0], x[1], -2); },
      [](auto& x) {
        return loop_gather(x[0].expand({2, 4, 3}), 1, x[1]);
      }));
  v.push_back(one(
      "take_along_dim", "flattened", {real({3, 4}, true), index({5}, 12)},
      [](auto& x) { return take_along_dim(x[0], x[1]); },
      [](auto& x) { return loop_gather(x[0].reshape({12}), 0, x[1]); }));
  return v;
}

std::vector<OpCase> scatter_cases() {
  std::vector<OpCase> v;
  // Distinct targets within each line along dim.
  v.push_back(one(
      "scatter", "dim0", {real({4, 3}), real({2, 3})},
      [](auto& x) {
        return scatter(x[0], 0, idx64({3, 0, 1, 1, 2, 3}, {2, 3}).to(x[0].device()), x[1]);
      },
      [](auto& x) {
        return loop_scatter(x[0], 0, idx64({3, 0, 1, 1, 2, 3}, {2, 3}), x[1], false);
      }));
  v.push_back(one(
      "scatter", "neg_dim_larger_src_int32", {real({3, 5}, true), real({3, 4})},
      [](auto& x) {
        Tensor idx = idx64({4, 0, 1, 3, 0, 2}, {3, 2}).to(kInt32).to(x[0].device());
        return scatter(x[0], -1, idx, x[1]);
      },
      [](auto& x) {
        return loop_scatter(x[0], 1, idx64({4, 0, 1, 3, 0, 2}, {3, 2}), x[1], false);
      }));
  v.push_back(one(
      "scatter", "scalar_value", {real({3, 4})},
      [](auto& x) {
        return scatter(x[0], 1, idx64({0, 2, 1, 3, 3, 0}, {3, 2}).to(x[0].device()), 2.5);
      },
      [](auto& x) {
        return loop_scatter(x[0], 1, idx64({0, 2, 1, 3, 3, 0}, {3, 2}),
                            full({3, 2}, 2.5, x[0].dtype()), false);
      }));
  v.push_back(one(
      "scatter_add", "dim0_duplicates", {real({3, 4}), real({5, 4}), index({5, 4}, 3)},
      [](auto& x) { return scatter_add(x[0], 0, x[2], x[1]); },
      [](auto& x) { return loop_scatter(x[0], 0, x[2], x[1], true); }));
  v.push_back(one(
      "scatter_add", "neg_dim_noncontiguous", {real({2, 5}, true), real({2, 3}), index({2, 3}, 5)},
      [](auto& x) { return scatter_add(x[0], -1, x[2].to(kInt32), x[1]); },
      [](auto& x) { return loop_scatter(x[0], 1, x[2], x[1], true); }));
  v.push_back(one(
      "scatter_add", "larger_src", {real({4, 3}), real({3, 3}), index({2, 2}, 4)},
      [](auto& x) { return scatter_add(x[0], 0, x[2], x[1]); },
      [](auto& x) { return loop_scatter(x[0], 0, x[2], x[1], true); }));
  v.push_back(one(
      "index_add", "dim0_duplicates", {real({4, 3}), real({5, 3})},
      [](auto& x) {
        return index_add(x[0], 0, idx64({1, 3, 1, 0, 1}, {5}).to(x[0].device()), x[1]);
      },
      [](auto& x) {
        return loop_index_add(x[0], 0, idx64({1, 3, 1, 0, 1}, {5}), x[1], 1.0);
      }));
  v.push_back(one(
      "index_add", "neg_dim_alpha_int32", {real({3, 4}, true), real({3, 5}), index({5}, 4)},
      [](auto& x) { return index_add(x[0], -1, x[2].to(kInt32), x[1], -2.0); },
      [](auto& x) { return loop_index_add(x[0], 1, x[2], x[1], -2.0); }));
  return v;
}

std::vector<OpCase> lookup_cases() {
  std::vector<OpCase> v;
  auto loop_embedding = [](const Tensor& w, const Tensor& index, int64_t pad) {
    std::vector<double> vals = values(w);
    std::vector<int64_t> idx = ints(index);
    Shape shape = index.sizes();
    shape.push_back(w.size(1));
    return build(shape, w.dtype(), [&](const Shape& c) {
      int64_t row = idx[ravel(Shape(c.begin(), c.end() - 1), index.sizes())];
      return row == pad ? 0.0 : vals[row * w.size(1) + c.back()];
    });
  };
  v.push_back(one(
      "embedding", "2d_index", {real({5, 3}), index({2, 4}, 5)},
      [](auto& x) { return embedding(x[0], x[1]); },
      [=](auto& x) { return loop_embedding(x[0], x[1], -1); }));
  // The padding row's output is masked out, so its (zero) gradient matches the numeric one.
  for (int64_t pad : {2, -1}) {
    v.push_back(one(
        "embedding", pad < 0 ? "negative_padding_idx" : "padding_idx", {real({6, 3})},
        [pad](auto& x) {
          Tensor idx = idx64({0, 2, 5, 2, 1, 2, 4, 5}, {2, 4}).to(x[0].device());
          Tensor keep = (idx != Scalar(pad < 0 ? pad + 6 : pad)).unsqueeze(-1);
          return embedding(x[0], idx, pad) * keep.to(x[0].dtype());
        },
        [=](auto& x) {
          return loop_embedding(x[0], idx64({0, 2, 5, 2, 1, 2, 4, 5}, {2, 4}),
                                pad < 0 ? pad + 6 : pad);
        }));
  }
  auto loop_masked_select = [](const Tensor& x, const Tensor& mask) {
    Shape shape = broadcast_shapes(x.sizes(), mask.sizes());
    std::vector<double> xv = values(x.expand(shape)), mv = values(mask.expand(shape)), out;
    for (size_t i = 0; i < xv.size(); ++i)
      if (mv[i] != 0) out.push_back(xv[i]);
    return from_values(out, {static_cast<int64_t>(out.size())}, x.dtype());
  };
  v.push_back(one(
      "masked_select", "same_shape", {real({3, 4}), mask({3, 4})},
      [](auto& x) { return masked_select(x[0], x[1]); },
      [=](auto& x) { return loop_masked_select(x[0], x[1]); }));
  v.push_back(one(
      "masked_select", "broadcast_noncontiguous", {real({1, 4}, true), mask({2, 3, 4})},
      [](auto& x) { return masked_select(x[0], x[1]); },
      [=](auto& x) { return loop_masked_select(x[0], x[1]); }));
  auto loop_one_hot = [](const Tensor& index, int64_t classes) {
    std::vector<int64_t> idx = ints(index);
    if (classes < 0) classes = *std::max_element(idx.begin(), idx.end()) + 1;
    Shape shape = index.sizes();
    shape.push_back(classes);
    return build(shape, kInt64, [&](const Shape& c) {
      return idx[ravel(Shape(c.begin(), c.end() - 1), index.sizes())] == c.back() ? 1.0 : 0.0;
    });
  };
  v.push_back(one(
      "one_hot", "num_classes", {index({2, 3}, 4)}, [](auto& x) { return one_hot(x[0], 5); },
      [=](auto& x) { return loop_one_hot(x[0], 5); }));
  v.push_back(one(
      "one_hot", "inferred_int32", {index({6}, 5)},
      [](auto& x) { return one_hot(x[0].to(kInt32)); },
      [=](auto& x) { return loop_one_hot(x[0], -1); }));
  for (auto& c : v) c.gradcheck = c.op != "one_hot";
  return v;
}

// y * y with y = op(x): the first gradient op^T(2 y v) depends on x, so the second derivative
// runs through the backward's own backward (scatter_add -> gather, index_add -> index_select,
// the embedding gradient -> embedding).
std::vector<OpCase> double_backward_cases() {
  std::vector<OpCase> v;
  auto sq = [](std::string op, std::vector<InputSpec> in,
               std::function<Tensor(const TensorList&)> f) {
    OpCase c = one(op, "squared_gradgrad", std::move(in), [f](auto& x) {
      Tensor y = f(x);
      return y * y;
    });
    c.gradgradcheck = true;
    return c;
  };
  v.push_back(sq("gather", {real({3, 4}), index({3, 5}, 4)},
                 [](auto& x) { return gather(x[0], 1, x[1]); }));
  v.push_back(sq("index_select", {real({4, 3}), index({5}, 4)},
                 [](auto& x) { return index_select(x[0], 0, x[1]); }));
  v.push_back(sq("scatter_add", {real({3, 3}), real({4, 3}), index({4, 3}, 3)},
                 [](auto& x) { return scatter_add(x[0], 0, x[2], x[1]); }));
  v.push_back(sq("index_add", {real({3, 4}), real({3, 5}), index({5}, 4)},
                 [](auto& x) { return index_add(x[0], 1, x[2], x[1], 0.5); }));
  v.push_back(sq("embedding", {real({5, 2})}, [](auto& x) {
    Tensor idx = idx64({0, 3, 3, 1, 4, 3}, {3, 2}).to(x[0].device());
    Tensor keep = (idx != Scalar(1)).unsqueeze(-1).to(x[0].dtype());
    return embedding(x[0], idx, 1) * keep;
  }));
  return v;
}

TESSERA_OP_CASES(gather_cases());
TESSERA_OP_CASES(scatter_cases());
TESSERA_OP_CASES(lookup_cases());
TESSERA_OP_CASES(double_backward_cases());

}  // namespace
}  // namespace tessera::testing
