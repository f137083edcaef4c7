// Gathering and scattering along a dim, embedding lookup and masked selection. Forward passes run
// the index kernels; each gradient is written with these same public ops (gather <-> scatter_add,
// index_select <-> index_add), so double backward works.
#include "tessera/ops/index.h"

#include <algorithm>

#include "backend/common/index_kernels.h"
#include "ops/op_utils.h"
#include "tessera/ops/op_info.h"
#include "tessera/ops/shape.h"
#include "tessera/runtime/op_scope.h"

namespace tessera {

using namespace detail;

namespace {

void check_index_dtype(const Tensor& index, std::string_view op) {
  TESSERA_CHECK(index.dtype() == kInt64 || index.dtype() == kInt32, TypeError, "[", op,
                "] expected an int64 or int32 index tensor, got ", index.dtype());
}

// index made contiguous, with every value checked to lie in [0, size).
Tensor checked_index(const Tensor& index, int64_t size, std::string_view op) {
  Tensor c = contiguous(index);
  if (c.numel() == 0) return c;
  auto [lo, hi] = call_kernel<index_range_kernel>(c.device(), c);
  TESSERA_CHECK(lo >= 0 && hi < size, IndexError, "[", op, "] expected index in [0, ", size,
                "), got ", lo < 0 ? lo : hi);
  return c;
}

// A 0-d tensor seen as shape [1] (a raw view), so kernels always have a dim to index.
Tensor at_least_1d(const Tensor& t) {
  return t.dim() == 0 ? make_view(t, {1}, {1}, t.storage_offset()) : t;
}
Shape at_least_1d(const Shape& s) { return s.empty() ? Shape{1} : s; }

// The gather family compares ranks with 0-d counted as 1-d (as PyTorch does).
int64_t nonempty_dim(const Tensor& t) { return std::max<int64_t>(t.dim(), 1); }

// (prod(sizes[:d]), prod(sizes[d+1:])).
std::pair<int64_t, int64_t> outer_inner(const Shape& sizes, int64_t d) {
  int64_t outer = 1, inner = 1;
  for (int64_t k = 0; k < static_cast<int64_t>(sizes.size()); ++k) {
    if (k < d) outer *= sizes[k];
    if (k > d) inner *= sizes[k];
  }
  return {outer, inner};
}

// g (index's shape) placed at the front of zeros of shape: the gradient of a src that is larger
// than index in some dims (only its leading block is scattered).
Tensor pad_grad(Tensor g, const Shape& shape) {
  if (g.sizes() == shape) return g;
  if (g.dim() < static_cast<int64_t>(shape.size())) g = reshape(g, Shape(shape.size(), 1));
  Shape sizes = g.sizes();
  return view_backward_scatter(g, shape, [sizes](const Tensor& t) {
    Tensor v = t;
    for (size_t d = 0; d < sizes.size(); ++d) v = narrow(v, static_cast<int64_t>(d), 0, sizes[d]);
    return v;
  });
}

Tensor gather_impl(const Tensor& x, int64_t dim, const Tensor& index, std::string_view op) {
  check_index_dtype(index, op);
  TESSERA_CHECK(nonempty_dim(index) == nonempty_dim(x), ValueError, "[", op,
                "] expected index with as many dims as the input (", x.dim(), "), got ",
                index.dim());
  const int64_t d = wrap_dim(dim, x.dim(), op);
  Tensor xv = at_least_1d(x.detach()), iv = at_least_1d(index);
  for (int64_t k = 0; k < xv.dim(); ++k)
    TESSERA_CHECK(k == d || iv.sizes()[k] <= xv.sizes()[k], ValueError, "[", op,
                  "] expected index no larger than the input outside dim ", d, ", got index shape ",
                  index.sizes(), " for input shape ", x.sizes());
  Tensor idx = checked_index(iv, xv.sizes()[d], op);
  Tensor out = empty(index.sizes(), options_of(x));
  call_kernel<gather_kernel>(x.device(), at_least_1d(out), xv, idx, d);
  if (needs_grad({x})) {
    record("GatherBackward", {x}, {out}, {index},
           [d, xs = x.sizes()](BackwardContext& ctx, const TensorList& g) {
             return TensorList{scatter_add(zeros(xs, options_of(g[0])), d, ctx.saved(0), g[0])};
           });
  }
  return out;
}

// A copy of x with src scattered into it (no autograd); src is already x's dtype.
Tensor scatter_raw(const Tensor& x, int64_t d, const Tensor& index, const Tensor& src,
                   ScatterMode mode, std::string_view op) {
  TESSERA_CHECK(nonempty_dim(index) == nonempty_dim(x) && nonempty_dim(src) == nonempty_dim(x),
                ValueError, "[", op,
                "] expected input, index and src with the same number of dims, got ", x.dim(), ", ",
                index.dim(), " and ", src.dim());
  Tensor xv = at_least_1d(x), iv = at_least_1d(index), sv = at_least_1d(src.detach());
  for (int64_t k = 0; k < xv.dim(); ++k)
    TESSERA_CHECK(iv.sizes()[k] <= sv.sizes()[k] && (k == d || iv.sizes()[k] <= xv.sizes()[k]),
                  ValueError, "[", op, "] expected index no larger than src, and than the input ",
                  "outside dim ", d, ", got index shape ", index.sizes(), " for src shape ",
                  src.sizes(), " and input shape ", x.sizes());
  Tensor idx = checked_index(iv, xv.sizes()[d], op);
  Tensor out = clone(x.detach());
  call_kernel<scatter_kernel>(x.device(), at_least_1d(out), idx, sv, d, mode);
  return out;
}

void check_src_dtype(const Tensor& x, const Tensor& src, std::string_view op) {
  TESSERA_CHECK(src.dtype() == x.dtype(), TypeError, "[", op, "] expected src of dtype ", x.dtype(),
                " (the input's), got ", src.dtype());
}

// grad_weight [V, C]: row v sums the rows of grad [..., C] whose index is v, except padding_idx
// (-1: none). One pass: the backend's embedding_backward kernel where it has one (CUDA: sorted
// runs instead of atomics on repeated rows), else index_add. Its own gradient is an embedding
// lookup with padding rows zeroed.
Tensor embedding_backward(const Tensor& grad, const Tensor& index, int64_t num_weights,
                          int64_t padding_idx) {
  const int64_t C = grad.size(-1);
  Tensor out = zeros({num_weights, C}, options_of(grad));
  const Tensor rows = contiguous(grad.detach());
  if (has_kernel<embedding_backward_kernel>(grad.device().type))
    call_kernel<embedding_backward_kernel>(grad.device(), out, rows, index, padding_idx);
  else
    call_kernel<index_add_kernel>(grad.device(), out, rows, index, 1, C, Scalar(1), padding_idx);
  if (needs_grad({grad})) {
    record("EmbeddingBackwardBackward", {grad}, {out}, {index},
           [padding_idx](BackwardContext& ctx, const TensorList& g) {
             Tensor idx = ctx.saved(0);
             Tensor rows = embedding(g[0], idx);
             if (padding_idx >= 0)
               rows = where(unsqueeze(idx == Scalar(padding_idx), -1), zeros_like(rows), rows);
             return TensorList{rows};
           });
  }
  return out;
}

}  // namespace

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  TESSERA_OP_SCOPE("gather", x, index);
  return gather_impl(x, dim, index, "gather");
}

Tensor scatter(const Tensor& x_, int64_t dim, const Tensor& index_, const Tensor& src_) {
  TESSERA_OP_SCOPE("scatter", x_, index_, src_);
  const Tensor& x = op_scope.arg(0);
  const Tensor& index = op_scope.arg(1);
  const Tensor& src = op_scope.arg(2);
  check_index_dtype(index, "scatter");
  check_src_dtype(x, src, "scatter");
  const int64_t d = wrap_dim(dim, x.dim(), "scatter");
  Tensor out = scatter_raw(x, d, index, src, ScatterMode::Assign, "scatter");
  if (needs_grad({x, src})) {
    record("ScatterBackward", {x, src}, {out}, {index},
           [d, ss = src.sizes()](BackwardContext& ctx, const TensorList& g) {
             TensorList r(2);
             Tensor idx = ctx.saved(0);
             // Overwritten elements of x get no gradient; src gets what its targets received.
             if (ctx.needs_input_grad(0)) r[0] = scatter(g[0], d, idx, Scalar(0));
             if (ctx.needs_input_grad(1)) r[1] = pad_grad(gather(g[0], d, idx), ss);
             return r;
           });
  }
  return out;
}

Tensor scatter(const Tensor& x_, int64_t dim, const Tensor& index_, const Scalar& value) {
  TESSERA_OP_SCOPE("scatter", x_, index_);
  const Tensor& x = op_scope.arg(0);
  const Tensor& index = op_scope.arg(1);
  check_index_dtype(index, "scatter");
  const int64_t d = wrap_dim(dim, x.dim(), "scatter");
  // value broadcast over index's shape with zero strides.
  Tensor v = full({}, value, options_of(x));
  Tensor src = make_view(v, index.sizes(), Shape(index.dim(), 0), v.storage_offset());
  Tensor out = scatter_raw(x, d, index, src, ScatterMode::Assign, "scatter");
  if (needs_grad({x})) {
    record("ScatterBackward", {x}, {out}, {index}, [d](BackwardContext& ctx, const TensorList& g) {
      return TensorList{scatter(g[0], d, ctx.saved(0), Scalar(0))};
    });
  }
  return out;
}

Tensor scatter_add(const Tensor& x_, int64_t dim, const Tensor& index_, const Tensor& src_) {
  TESSERA_OP_SCOPE("scatter_add", x_, index_, src_);
  const Tensor& x = op_scope.arg(0);
  const Tensor& index = op_scope.arg(1);
  const Tensor& src = op_scope.arg(2);
  check_index_dtype(index, "scatter_add");
  check_src_dtype(x, src, "scatter_add");
  const int64_t d = wrap_dim(dim, x.dim(), "scatter_add");
  Tensor out = scatter_raw(x, d, index, src, ScatterMode::Add, "scatter_add");
  if (needs_grad({x, src})) {
    record("ScatterAddBackward", {x, src}, {out}, {index},
           [d, ss = src.sizes()](BackwardContext& ctx, const TensorList& g) {
             TensorList r(2);
             if (ctx.needs_input_grad(0)) r[0] = g[0];
             if (ctx.needs_input_grad(1)) r[1] = pad_grad(gather(g[0], d, ctx.saved(0)), ss);
             return r;
           });
  }
  return out;
}

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  TESSERA_OP_SCOPE("index_select", x, index);
  check_index_dtype(index, "index_select");
  TESSERA_CHECK(index.dim() <= 1, ValueError,
                "[index_select] expected a 0-d or 1-d index, got shape ", index.sizes());
  TESSERA_CHECK(x.dim() > 0 || index.numel() == 1, ValueError,
                "[index_select] expected one index for a 0-d input, got ", index.numel());
  const int64_t d = wrap_dim(dim, x.dim(), "index_select");
  Tensor xv = contiguous(at_least_1d(x.detach()));
  Tensor idx = checked_index(index, xv.sizes()[d], "index_select");
  Shape out_shape = x.sizes();
  if (x.dim() > 0) out_shape[d] = index.numel();
  Tensor out = empty(out_shape, options_of(x));
  auto [outer, inner] = outer_inner(xv.sizes(), d);
  call_kernel<index_select_kernel>(x.device(), out, xv, idx, outer, inner);
  if (needs_grad({x})) {
    record("IndexSelectBackward", {x}, {out}, {idx},
           [d, xs = x.sizes()](BackwardContext& ctx, const TensorList& g) {
             return TensorList{index_add(zeros(xs, options_of(g[0])), d, ctx.saved(0), g[0])};
           });
  }
  return out;
}

Tensor index_add(const Tensor& x_, int64_t dim, const Tensor& index_, const Tensor& source_,
                 const Scalar& alpha) {
  TESSERA_OP_SCOPE("index_add", x_, index_, source_);
  const Tensor& x = op_scope.arg(0);
  const Tensor& index = op_scope.arg(1);
  const Tensor& source = op_scope.arg(2);
  check_index_dtype(index, "index_add");
  TESSERA_CHECK(index.dim() <= 1, ValueError, "[index_add] expected a 0-d or 1-d index, got shape ",
                index.sizes());
  TESSERA_CHECK(source.dtype() == x.dtype(), TypeError, "[index_add] expected source of dtype ",
                x.dtype(), " (the input's), got ", source.dtype());
  const int64_t d = wrap_dim(dim, x.dim(), "index_add");
  Shape xs = at_least_1d(x.sizes()), want = xs;
  want[d] = index.numel();
  TESSERA_CHECK(at_least_1d(source.sizes()) == want && nonempty_dim(source) == nonempty_dim(x),
                ValueError, "[index_add] expected source of shape ", want, ", got ",
                source.sizes());
  Tensor idx = checked_index(index, xs[d], "index_add");
  Tensor out = clone(x.detach());
  auto [outer, inner] = outer_inner(xs, d);
  call_kernel<index_add_kernel>(x.device(), out, contiguous(source.detach()), idx, outer, inner,
                                alpha, -1);
  if (needs_grad({x, source})) {
    const bool unit = alpha.to_double() == 1.0;
    record("IndexAddBackward", {x, source}, {out}, {idx},
           [d, alpha, unit, ss = source.sizes()](BackwardContext& ctx, const TensorList& g) {
             TensorList r(2);
             if (ctx.needs_input_grad(0)) r[0] = g[0];
             if (ctx.needs_input_grad(1)) {
               Tensor s = reshape(index_select(g[0], d, ctx.saved(0)), ss);
               r[1] = unit ? s : s * alpha;
             }
             return r;
           });
  }
  return out;
}

Tensor masked_select(const Tensor& x, const Tensor& mask) {
  TESSERA_OP_SCOPE("masked_select", x, mask);
  TESSERA_CHECK(mask.dtype() == kBool, TypeError, "[masked_select] expected a bool mask, got ",
                mask.dtype());
  Shape shape = broadcast_shapes(x.sizes(), mask.sizes(), "masked_select");
  Tensor m = contiguous(expand(mask, shape));
  const int64_t count = sum(m).item<int64_t>();
  Tensor positions = empty({count}, TensorOptions(kInt64).with_device(x.device()));
  call_kernel<mask_positions_kernel>(x.device(), positions, m);
  // The selection is an index_select of the flattened (broadcast) input, so it differentiates
  // through index_select and expand.
  return index_select(reshape(expand(x, shape), {-1}), 0, positions);
}

Tensor one_hot(const Tensor& index, int64_t num_classes) {
  TESSERA_OP_SCOPE("one_hot", index);
  check_index_dtype(index, "one_hot");
  Tensor idx = contiguous(index);
  if (idx.numel() > 0) {
    auto [lo, hi] = call_kernel<index_range_kernel>(idx.device(), idx);
    if (num_classes < 0) num_classes = std::max<int64_t>(hi + 1, 0);
    TESSERA_CHECK(lo >= 0 && hi < num_classes, IndexError, "[one_hot] expected index in [0, ",
                  num_classes, "), got ", lo < 0 ? lo : hi);
  }
  TESSERA_CHECK(num_classes >= 0, ValueError,
                "[one_hot] expected num_classes for an empty index (it cannot be inferred), got ",
                num_classes);
  Shape out_shape = index.sizes();
  out_shape.push_back(num_classes);
  Tensor out = zeros(out_shape, TensorOptions(kInt64).with_device(index.device()));
  if (out.numel() == 0) return out;
  // out.scatter_(-1, index.unsqueeze(-1), 1) with raw views.
  Shape is = idx.sizes(), st = idx.strides();
  is.push_back(1);
  st.push_back(1);
  Tensor iv = make_view(idx, is, st, idx.storage_offset());
  Tensor one = ones({}, TensorOptions(kInt64).with_device(index.device()));
  Tensor src = make_view(one, is, Shape(is.size(), 0), one.storage_offset());
  call_kernel<scatter_kernel>(index.device(), out, iv, src, out.dim() - 1, ScatterMode::Assign);
  return out;
}

Tensor embedding(const Tensor& weight, const Tensor& index, std::optional<int64_t> padding_idx) {
  TESSERA_OP_SCOPE("embedding", weight, index);
  check_index_dtype(index, "embedding");
  TESSERA_CHECK(weight.dim() == 2, ValueError,
                "[embedding] expected a 2-d weight [V, C], got shape ", weight.sizes());
  const int64_t V = weight.size(0), C = weight.size(1);
  int64_t pad = -1;
  if (padding_idx) {
    TESSERA_CHECK(*padding_idx >= -V && *padding_idx < V, ValueError,
                  "[embedding] expected padding_idx in [", -V, ", ", V, "), got ", *padding_idx);
    pad = *padding_idx < 0 ? *padding_idx + V : *padding_idx;
  }
  Tensor idx = checked_index(index, V, "embedding");
  Shape out_shape = index.sizes();
  out_shape.push_back(C);
  Tensor out = empty(out_shape, options_of(weight));
  call_kernel<index_select_kernel>(weight.device(), out, contiguous(weight.detach()), idx, 1, C);
  if (needs_grad({weight})) {
    record("EmbeddingBackward", {weight}, {out}, {idx},
           [V, pad](BackwardContext& ctx, const TensorList& g) {
             return TensorList{embedding_backward(g[0], ctx.saved(0), V, pad)};
           });
  }
  return out;
}

Tensor take_along_dim(const Tensor& x, const Tensor& index, std::optional<int64_t> dim) {
  TESSERA_OP_SCOPE("take_along_dim", x, index);
  check_index_dtype(index, "take_along_dim");
  if (!dim) return gather_impl(reshape(x, {-1}), 0, reshape(index, {-1}), "take_along_dim");
  TESSERA_CHECK(x.dim() == index.dim(), ValueError,
                "[take_along_dim] expected input and index with the same number of dims, got ",
                x.dim(), " and ", index.dim());
  const int64_t d = wrap_dim(*dim, x.dim(), "take_along_dim");
  if (x.dim() == 0) return gather_impl(x, d, index, "take_along_dim");
  // Broadcast every dim but d, which keeps the input's and the index's own sizes.
  Shape xs = x.sizes(), is = index.sizes();
  xs[d] = 1;
  is[d] = 1;
  Shape bx = broadcast_shapes(xs, is, "take_along_dim"), bi = bx;
  bx[d] = x.size(d);
  bi[d] = index.size(d);
  return gather_impl(expand(x, bx), d, expand(index, bi), "take_along_dim");
}

TESSERA_REGISTER_OPS({"index_select", "indexing", kAllTypes, true},
                     {"gather", "indexing", kAllTypes, true},
                     {"scatter", "indexing", kAllTypes, true, CastPolicy::kPromote},
                     {"scatter_add", "indexing", kAllTypes, true, CastPolicy::kPromote},
                     {"index_add", "indexing", kNumericTypes, true, CastPolicy::kPromote},
                     {"masked_select", "indexing", kAllTypes, true},
                     {"one_hot", "indexing", kIndexTypes, false},
                     {"embedding", "indexing", kAllTypes, true},
                     {"take_along_dim", "indexing", kAllTypes, true});

}  // namespace tessera
