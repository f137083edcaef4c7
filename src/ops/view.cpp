// View ops: outputs share the input's storage. Their gradients route back through
// view_backward_scatter, which is itself differentiable, so double backward works.
#include <algorithm>
#include <numeric>

#include "ops/op_utils.h"
#include "tessera/autograd/view_tracking.h"
#include "tessera/ops/creation.h"
#include "tessera/ops/index.h"
#include "tessera/ops/op_info.h"
#include "tessera/ops/shape.h"
#include "tessera/runtime/op_scope.h"

namespace tessera {

using namespace detail;

namespace detail {

Tensor make_view(const Tensor& x, Shape sizes, Shape strides, int64_t offset) {
  auto impl = std::make_shared<TensorImpl>(x.impl()->storage(), std::move(sizes),
                                           std::move(strides), offset, x.dtype());
  impl->is_inference = x.impl()->is_inference;
  impl->untracked_version = x.impl()->untracked_version;
  return Tensor(std::move(impl));
}

// Records a view node whose backward maps g through backward_fn, and marks out as a view of x
// so that in-place writes through either reach the other's history.
Tensor record_view(const Tensor& x, Tensor out, const char* name,
                   std::function<Tensor(const Tensor&)> backward_fn) {
  if (needs_grad({x})) {
    record(name, {x}, {out}, {},
           [backward_fn = std::move(backward_fn)](BackwardContext&, const TensorList& g) {
             return TensorList{backward_fn(g[0])};
           });
  }
  autograd::track_view(x, out);
  return out;
}

TensorList record_views(const Tensor& x, TensorList outs, const char* name,
                        std::function<Tensor(const TensorList&)> backward_fn) {
  if (needs_grad({x})) {
    record(name, {x}, outs, {},
           [backward_fn = std::move(backward_fn)](BackwardContext&, const TensorList& g) {
             return TensorList{backward_fn(g)};
           });
  }
  for (const Tensor& out : outs) autograd::track_view(x, out);
  return outs;
}

// zeros(shape) with src added into view_fn(zeros): the gradient of a view op. Its own gradient
// is view_fn(g), so it stays differentiable.
Tensor view_backward_scatter(const Tensor& src, const Shape& shape,
                             std::function<Tensor(const Tensor&)> view_fn) {
  Tensor out = zeros(shape, TensorOptions(src.dtype()).with_device(src.device()));
  {
    autograd::NoGradGuard ng;
    Tensor target = view_fn(out);
    add_(target, src);
  }
  if (needs_grad({src})) {
    record("ViewScatterBackward", {src}, {out}, {},
           [view_fn](BackwardContext&, const TensorList& g) { return TensorList{view_fn(g[0])}; });
  }
  return out;
}

}  // namespace detail

namespace {

// False only when no two elements of the geometry share memory: each dim, in stride order, steps
// past everything the smaller-stride dims reach.
bool may_overlap(const Shape& sizes, const Shape& strides) {
  std::vector<std::pair<int64_t, int64_t>> dims;  // (stride, size) of dims with several elements
  for (size_t i = 0; i < sizes.size(); ++i)
    if (sizes[i] > 1) dims.emplace_back(strides[i], sizes[i]);
  std::sort(dims.begin(), dims.end());
  int64_t reach = 0;  // the largest offset the dims so far reach
  for (auto [stride, size] : dims) {
    if (stride <= reach) return true;
    reach += stride * (size - 1);
  }
  return false;
}

// Strides for viewing (sizes, strides) as new_sizes without copying, if possible.
std::optional<Shape> view_strides(const Shape& sizes, const Shape& strides,
                                  const Shape& new_sizes) {
  if (sizes.empty() || shape_numel(sizes) == 0) return contiguous_strides(new_sizes);
  Shape out(new_sizes.size());
  int64_t view_d = static_cast<int64_t>(new_sizes.size()) - 1;
  int64_t chunk_base_stride = strides.back(), tensor_numel = 1, view_numel = 1;
  for (int64_t d = static_cast<int64_t>(sizes.size()) - 1; d >= 0; --d) {
    tensor_numel *= sizes[d];
    if (d == 0 || (sizes[d - 1] != 1 && strides[d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || new_sizes[view_d] == 1)) {
        out[view_d] = view_numel * chunk_base_stride;
        view_numel *= new_sizes[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (d > 0) {
        chunk_base_stride = strides[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return out;
}

// Resolves a single -1 in shape against numel.
Shape infer_shape(const Shape& shape, int64_t numel, std::string_view op) {
  Shape out = shape;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      TESSERA_CHECK(infer < 0, ValueError, "[", op, "] expected at most one -1 in shape, got ",
                    shape);
      infer = static_cast<int64_t>(i);
    } else {
      TESSERA_CHECK(out[i] >= 0, ValueError, "[", op, "] expected non-negative sizes, got ", shape);
      known *= out[i];
    }
  }
  if (infer >= 0) {
    TESSERA_CHECK(known != 0 && numel % known == 0, ValueError, "[", op, "] expected shape ", shape,
                  " to fit ", numel, " elements");
    out[infer] = numel / known;
  }
  TESSERA_CHECK(shape_numel(out) == numel, ValueError, "[", op, "] expected a shape with ", numel,
                " elements, got ", shape);
  return out;
}

}  // namespace

Tensor view(const Tensor& x, const Shape& shape) {
  TESSERA_OP_SCOPE("view", x);
  Shape s = infer_shape(shape, x.numel(), "view");
  auto st = view_strides(x.sizes(), x.strides(), s);
  TESSERA_CHECK(st.has_value(), ValueError, "[view] expected a shape compatible with the input's ",
                "size and stride, got shape ", shape, " for sizes ", x.sizes(), " and strides ",
                x.strides(), "; use reshape()");
  return record_view(x, make_view(x, s, *st, x.storage_offset()), "ViewBackward",
                     [in = x.sizes()](const Tensor& g) { return reshape(g, in); });
}

Tensor reshape(const Tensor& x, const Shape& shape) {
  TESSERA_OP_SCOPE("reshape", x);
  Shape s = infer_shape(shape, x.numel(), "reshape");
  if (view_strides(x.sizes(), x.strides(), s)) return view(x, s);
  return view(clone(x), s);
}

Tensor permute(const Tensor& x, const Shape& dims) {
  TESSERA_OP_SCOPE("permute", x);
  const int64_t n = x.dim();
  TESSERA_CHECK(static_cast<int64_t>(dims.size()) == n, ValueError, "[permute] expected ", n,
                " dims, got ", dims);
  Shape sizes(n), strides(n), inverse(n, -1);
  for (int64_t i = 0; i < n; ++i) {
    int64_t d = wrap_dim(dims[i], n, "permute");
    TESSERA_CHECK(inverse[d] < 0, ValueError, "[permute] expected each dim once, got ", dims);
    inverse[d] = i;
    sizes[i] = x.sizes()[d];
    strides[i] = x.strides()[d];
  }
  return record_view(x, make_view(x, sizes, strides, x.storage_offset()), "PermuteBackward",
                     [inverse](const Tensor& g) { return permute(g, inverse); });
}

Tensor transpose(const Tensor& x, int64_t d0, int64_t d1) {
  TESSERA_OP_SCOPE("transpose", x);
  const int64_t n = x.dim();
  if (n == 0) return view(x, {});
  Shape dims(n);
  std::iota(dims.begin(), dims.end(), 0);
  std::swap(dims[wrap_dim(d0, n, "transpose")], dims[wrap_dim(d1, n, "transpose")]);
  return permute(x, dims);
}

Tensor slice(const Tensor& x, int64_t dim, std::optional<int64_t> start, std::optional<int64_t> end,
             int64_t step) {
  TESSERA_OP_SCOPE("slice", x);
  TESSERA_CHECK(x.dim() > 0, IndexError, "[slice] expected a tensor with at least 1 dim, got 0-d");
  TESSERA_CHECK(step > 0, ValueError, "[slice] expected step > 0, got ", step);
  int64_t d = wrap_dim(dim, x.dim(), "slice");
  const int64_t size = x.sizes()[d];
  auto clampi = [size](int64_t v) {
    if (v < 0) v += size;
    return std::clamp<int64_t>(v, 0, size);
  };
  int64_t b = start ? clampi(*start) : 0, e = end ? clampi(*end) : size;
  // Written so a huge step (x[::sys.maxsize]) overflows neither the length nor the stride.
  const int64_t len = e > b ? (e - b - 1) / step + 1 : 0;
  Shape sizes = x.sizes(), strides = x.strides();
  sizes[d] = len;
  if (len > 1) strides[d] *= step;  // below size * stride then
  Tensor out = make_view(x, sizes, strides, x.storage_offset() + b * x.strides()[d]);
  return record_view(x, out, "SliceBackward", [in = x.sizes(), d, b, e, step](const Tensor& g) {
    return view_backward_scatter(g, in, [=](const Tensor& t) { return slice(t, d, b, e, step); });
  });
}

Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length) {
  TESSERA_OP_SCOPE("narrow", x);
  TESSERA_CHECK(x.dim() > 0, IndexError, "[narrow] expected a tensor with at least 1 dim, got 0-d");
  int64_t d = wrap_dim(dim, x.dim(), "narrow");
  int64_t size = x.sizes()[d];
  if (start < 0) start += size;
  TESSERA_CHECK(start >= 0 && length >= 0 && start + length <= size, IndexError,
                "[narrow] expected start and length within dim ", d, " of size ", size,
                ", got start ", start, " and length ", length);
  return slice(x, d, start, start + length, 1);
}

Tensor select(const Tensor& x, int64_t dim, int64_t index) {
  TESSERA_OP_SCOPE("select", x);
  TESSERA_CHECK(x.dim() > 0, IndexError, "[select] expected a tensor with at least 1 dim, got 0-d");
  int64_t d = wrap_dim(dim, x.dim(), "select");
  int64_t size = x.sizes()[d];
  TESSERA_CHECK(index >= -size && index < size, IndexError, "[select] expected index in [", -size,
                ", ", size - 1, "] for dim ", d, ", got ", index);
  if (index < 0) index += size;
  Shape sizes = x.sizes(), strides = x.strides();
  int64_t offset = x.storage_offset() + index * strides[d];
  sizes.erase(sizes.begin() + d);
  strides.erase(strides.begin() + d);
  return record_view(x, make_view(x, sizes, strides, offset), "SelectBackward",
                     [in = x.sizes(), d, index](const Tensor& g) {
                       return view_backward_scatter(
                           g, in, [=](const Tensor& t) { return select(t, d, index); });
                     });
}

Tensor expand(const Tensor& x, const Shape& shape) {
  TESSERA_OP_SCOPE("expand", x);
  const int64_t n = static_cast<int64_t>(shape.size());
  TESSERA_CHECK(n >= x.dim(), ValueError, "[expand] expected at least ", x.dim(),
                " dims in the target shape, got ", shape);
  Shape sizes(n), strides(n);
  for (int64_t i = n - 1; i >= 0; --i) {
    int64_t j = i - (n - x.dim());
    int64_t want = shape[i];
    if (j >= 0) {
      int64_t have = x.sizes()[j];
      if (want == -1) want = have;
      TESSERA_CHECK(have == want || have == 1, ValueError, "[expand] expected shape ", x.sizes(),
                    " to expand to ", shape);
      sizes[i] = want;
      strides[i] = have == want ? x.strides()[j] : 0;
    } else {
      TESSERA_CHECK(want >= 0, ValueError, "[expand] expected a size for new leading dim ", i,
                    ", got ", want);
      sizes[i] = want;
      strides[i] = 0;
    }
  }
  return record_view(x, make_view(x, sizes, strides, x.storage_offset()), "ExpandBackward",
                     [in = x.sizes()](const Tensor& g) { return sum_to(g, in); });
}

Tensor squeeze(const Tensor& x, std::optional<int64_t> dim) {
  TESSERA_OP_SCOPE("squeeze", x);
  Shape sizes, strides;
  std::optional<int64_t> d;
  if (dim) d = wrap_dim(*dim, x.dim(), "squeeze");
  for (int64_t i = 0; i < x.dim(); ++i) {
    bool drop = x.sizes()[i] == 1 && (!d || *d == i);
    if (drop) continue;
    sizes.push_back(x.sizes()[i]);
    strides.push_back(x.strides()[i]);
  }
  return record_view(x, make_view(x, sizes, strides, x.storage_offset()), "SqueezeBackward",
                     [in = x.sizes()](const Tensor& g) { return reshape(g, in); });
}

Tensor unsqueeze(const Tensor& x, int64_t dim) {
  TESSERA_OP_SCOPE("unsqueeze", x);
  int64_t d = wrap_dim(dim, x.dim() + 1, "unsqueeze");
  Shape sizes = x.sizes(), strides = x.strides();
  int64_t st = d < x.dim() ? sizes[d] * strides[d] : 1;
  sizes.insert(sizes.begin() + d, 1);
  strides.insert(strides.begin() + d, st);
  return record_view(x, make_view(x, sizes, strides, x.storage_offset()), "UnsqueezeBackward",
                     [in = x.sizes()](const Tensor& g) { return reshape(g, in); });
}

Tensor flatten(const Tensor& x, int64_t start_dim, int64_t end_dim) {
  TESSERA_OP_SCOPE("flatten", x);
  if (x.dim() == 0) return reshape(x, {1});
  int64_t s = wrap_dim(start_dim, x.dim(), "flatten"), e = wrap_dim(end_dim, x.dim(), "flatten");
  TESSERA_CHECK(s <= e, ValueError, "[flatten] expected start_dim <= end_dim, got ", start_dim,
                " and ", end_dim);
  Shape shape(x.sizes().begin(), x.sizes().begin() + s);
  int64_t prod = 1;
  for (int64_t i = s; i <= e; ++i) prod *= x.sizes()[i];
  shape.push_back(prod);
  shape.insert(shape.end(), x.sizes().begin() + e + 1, x.sizes().end());
  return reshape(x, shape);
}

Tensor unflatten(const Tensor& x, int64_t dim, const Shape& sizes) {
  TESSERA_OP_SCOPE("unflatten", x);
  int64_t d = wrap_dim(dim, x.dim(), "unflatten");
  Shape inner = infer_shape(sizes, x.sizes()[d], "unflatten");
  Shape shape(x.sizes().begin(), x.sizes().begin() + d);
  shape.insert(shape.end(), inner.begin(), inner.end());
  shape.insert(shape.end(), x.sizes().begin() + d + 1, x.sizes().end());
  return view(x, shape);
}

Tensor as_strided(const Tensor& x, const Shape& sizes, const Shape& strides,
                  std::optional<int64_t> storage_offset) {
  TESSERA_OP_SCOPE("as_strided", x);
  TESSERA_CHECK(sizes.size() == strides.size(), ValueError,
                "[as_strided] expected as many strides as sizes, got ", sizes, " and ", strides);
  int64_t offset = storage_offset.value_or(x.storage_offset());
  for (size_t i = 0; i < sizes.size(); ++i)
    TESSERA_CHECK(sizes[i] >= 0 && strides[i] >= 0, ValueError,
                  "[as_strided] expected non-negative sizes and strides, got ", sizes, " and ",
                  strides);
  const int64_t extent = view_extent(sizes, strides, "as_strided");
  int64_t capacity = static_cast<int64_t>(x.impl()->storage()->nbytes() / x.element_size());
  // offset + extent <= capacity, compared without overflowing.
  TESSERA_CHECK(offset >= 0 && (extent == 0 || extent <= capacity - offset), IndexError,
                "[as_strided] expected a view inside the storage of ", capacity,
                " elements, got one spanning ", extent, " elements from offset ", offset);
  // The gradient maps through the same geometry relative to the input's own memory, which is
  // unambiguous when no two input elements share memory.
  const Shape in = x.sizes(), in_strides = x.strides();
  const int64_t rel = offset - x.storage_offset();
  TESSERA_CHECK(!needs_grad({x}) || (rel >= 0 && !may_overlap(in, in_strides)), NotImplementedError,
                "[as_strided] expected, when differentiating, an input whose elements do not share "
                "memory and a view from at or after its first element, got input strides ",
                in_strides, " for sizes ", in, " and a view offset ", rel, " from it");
  const bool view_overlaps = may_overlap(sizes, strides);
  return record_view(
      x, make_view(x, sizes, strides, offset), "AsStridedBackward",
      [in, in_strides, sizes, strides, rel, view_overlaps](const Tensor& g) {
        // The input's memory as a flat buffer holding each view element's gradient at its place.
        const int64_t span = std::max(view_extent(in, in_strides, "as_strided"),
                                      rel + view_extent(sizes, strides, "as_strided"));
        Tensor memory;
        if (view_overlaps) {
          // Summed by element position with index_add: an in-place add through the
          // overlapping view would race on parallel backends.
          Tensor positions = as_strided(arange(span).to(g.device()), sizes, strides, rel);
          memory =
              index_add(zeros({span}, options_of(g)), 0, positions.reshape({-1}), g.reshape({-1}));
        } else {
          memory = view_backward_scatter(
              g, {span}, [=](const Tensor& t) { return as_strided(t, sizes, strides, rel); });
        }
        return as_strided(memory, in, in_strides, 0);
      });
}

// ---- Tensor methods for views ----
Tensor Tensor::view(const Shape& s) const { return tessera::view(*this, s); }
Tensor Tensor::reshape(const Shape& s) const { return tessera::reshape(*this, s); }
Tensor Tensor::permute(const Shape& d) const { return tessera::permute(*this, d); }
Tensor Tensor::transpose(int64_t a, int64_t b) const { return tessera::transpose(*this, a, b); }
Tensor Tensor::t() const {
  TESSERA_CHECK(dim() <= 2, ValueError, "[t] expected a tensor with at most 2 dims, got ", dim());
  return dim() < 2 ? *this : tessera::transpose(*this, 0, 1);
}
Tensor Tensor::mT() const {
  TESSERA_CHECK(dim() >= 2, ValueError, "[mT] expected at least 2 dims, got ", dim());
  return tessera::transpose(*this, -2, -1);
}
Tensor Tensor::narrow(int64_t d, int64_t s, int64_t l) const {
  return tessera::narrow(*this, d, s, l);
}
Tensor Tensor::slice(int64_t d, std::optional<int64_t> s, std::optional<int64_t> e,
                     int64_t step) const {
  return tessera::slice(*this, d, s, e, step);
}
Tensor Tensor::select(int64_t d, int64_t i) const { return tessera::select(*this, d, i); }
Tensor Tensor::expand(const Shape& s) const { return tessera::expand(*this, s); }
Tensor Tensor::expand_as(const Tensor& o) const { return tessera::expand(*this, o.sizes()); }
Tensor Tensor::squeeze() const { return tessera::squeeze(*this); }
Tensor Tensor::squeeze(int64_t d) const { return tessera::squeeze(*this, d); }
Tensor Tensor::unsqueeze(int64_t d) const { return tessera::unsqueeze(*this, d); }
Tensor Tensor::flatten(int64_t s, int64_t e) const { return tessera::flatten(*this, s, e); }
Tensor Tensor::as_strided(const Shape& sz, const Shape& st, std::optional<int64_t> off) const {
  return tessera::as_strided(*this, sz, st, off);
}
Tensor Tensor::contiguous() const { return tessera::contiguous(*this); }
Tensor Tensor::clone() const { return tessera::clone(*this); }
Tensor Tensor::to(DType d) const { return cast(*this, d); }

TESSERA_REGISTER_OPS({"view", "view", kAllTypes, true}, {"reshape", "view", kAllTypes, true},
                     {"permute", "view", kAllTypes, true}, {"transpose", "view", kAllTypes, true},
                     {"narrow", "view", kAllTypes, true}, {"slice", "view", kAllTypes, true},
                     {"select", "view", kAllTypes, true}, {"expand", "view", kAllTypes, true},
                     {"squeeze", "view", kAllTypes, true}, {"unsqueeze", "view", kAllTypes, true},
                     {"flatten", "view", kAllTypes, true}, {"unflatten", "view", kAllTypes, true},
                     {"as_strided", "view", kAllTypes, true});

}  // namespace tessera
