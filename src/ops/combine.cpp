// Ops that combine, split, tile or rearrange tensors: cat/stack, split/chunk (views), repeat,
// tril/triu, flip and roll. cat and flip copy through the elementwise copy kernel; tril/triu use
// a fused kernel (tests keep the arange-mask formulation as the oracle).
#include <algorithm>

#include "backend/common/index_kernels.h"
#include "ops/op_utils.h"
#include "tessera/ops/op_info.h"
#include "tessera/ops/shape.h"
#include "tessera/runtime/op_scope.h"

namespace tessera {

using namespace detail;

namespace {


// out = src (cast to out's dtype) through the elementwise copy kernel.
void copy_into(const Tensor& out, const Tensor& src, std::string_view op) {
  TensorIterator it(op);
  it.add_output(out).add_input(src).build();
  call_kernel<copy_kernel>(out.device(), it);
}

// PyTorch's legacy rule: 1-d empty tensors are skipped by cat whatever the other shapes.
bool skipped_by_cat(const Tensor& t) { return t.dim() == 1 && t.numel() == 0; }

}  // namespace

Tensor cat(const TensorList& tensors, int64_t dim) {
  TESSERA_OP_SCOPE("cat", tensors);
  TESSERA_CHECK(!tensors.empty(), ValueError, "[cat] expected a non-empty list of tensors, got 0");
  for (size_t i = 0; i < tensors.size(); ++i) {
    TESSERA_CHECK(tensors[i].defined(), ValueError, "[cat] expected defined tensors, got an ",
                  "undefined one at position ", i);
    TESSERA_CHECK(tensors[i].dim() > 0, ValueError, "[cat] expected tensors with at least 1 dim, ",
                  "got a 0-d tensor at position ", i);
    TESSERA_CHECK(tensors[i].device() == tensors[0].device(), ValueError,
                  "[cat] expected all tensors on ", tensors[0].device().str(), ", got one on ",
                  tensors[i].device().str(), " at position ", i);
  }
  // The shape comes from the first tensor that is not a legacy 1-d empty one.
  auto ref_it = std::find_if(tensors.begin(), tensors.end(),
                             [](const Tensor& t) { return !skipped_by_cat(t); });
  const Tensor& ref = ref_it == tensors.end() ? tensors[0] : *ref_it;
  const int64_t d = wrap_dim(dim, ref.dim(), "cat");
  DType dtype = tensors[0].dtype();
  for (const Tensor& t : tensors) dtype = promote_types(dtype, t.dtype());
  Shape out_shape = ref.sizes();
  out_shape[d] = 0;
  std::vector<bool> used(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    used[i] = !skipped_by_cat(t) || &t == &ref;
    if (!used[i]) continue;
    bool match = t.dim() == ref.dim();
    for (int64_t k = 0; match && k < t.dim(); ++k) match = k == d || t.size(k) == ref.size(k);
    TESSERA_CHECK(match, ValueError, "[cat] expected sizes ", ref.sizes(), " except in dim ", d,
                  ", got ", t.sizes(), " at position ", i);
    out_shape[d] += t.size(d);
  }
  Tensor out = empty(out_shape, TensorOptions(dtype).with_device(ref.device()));
  // Each input is copied into its slice of out; offsets[i] is its start along d.
  std::vector<int64_t> offsets(tensors.size(), 0);
  int64_t offset = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    offsets[i] = offset;
    if (!used[i]) continue;
    const Tensor& t = tensors[i];
    if (t.numel() > 0) {
      Tensor slot =
          make_view(out, t.sizes(), out.strides(), out.storage_offset() + offset * out.stride(d));
      copy_into(slot, t, "cat");
    }
    offset += t.size(d);
  }
  if (needs_grad(tensors)) {
    std::vector<Shape> shapes;
    std::vector<DType> dtypes;
    for (const Tensor& t : tensors) {
      shapes.push_back(t.sizes());
      dtypes.push_back(t.dtype());
    }
    record("CatBackward", tensors, {out}, {},
           [d, used, offsets, shapes, dtypes](BackwardContext& ctx, const TensorList& g) {
             TensorList r(shapes.size());
             for (size_t i = 0; i < shapes.size(); ++i) {
               if (!ctx.needs_input_grad(i)) continue;
               if (!used[i]) {
                 r[i] = zeros(shapes[i], TensorOptions(dtypes[i]).with_device(g[0].device()));
                 continue;
               }
               Tensor gi = narrow(g[0], d, offsets[i], shapes[i][d]);
               r[i] = gi.dtype() == dtypes[i] ? gi : cast(gi, dtypes[i]);
             }
             return r;
           });
  }
  return out;
}

Tensor stack(const TensorList& tensors, int64_t dim) {
  TESSERA_OP_SCOPE("stack", tensors);
  TESSERA_CHECK(!tensors.empty(), ValueError,
                "[stack] expected a non-empty list of tensors, got 0");
  for (size_t i = 0; i < tensors.size(); ++i) {
    TESSERA_CHECK(tensors[i].defined(), ValueError,
                  "[stack] expected defined tensors, got an undefined one at position ", i);
    TESSERA_CHECK(tensors[i].sizes() == tensors[0].sizes(), ValueError,
                  "[stack] expected tensors of equal shape, got ", tensors[0].sizes(),
                  " at position 0 and ", tensors[i].sizes(), " at position ", i);
  }
  const int64_t d = wrap_dim(dim, tensors[0].dim() + 1, "stack");
  TensorList parts;
  parts.reserve(tensors.size());
  for (const Tensor& t : tensors) parts.push_back(unsqueeze(t, d));
  return cat(parts, d);
}

TensorList split(const Tensor& x, const Shape& split_sizes, int64_t dim) {
  TESSERA_OP_SCOPE("split", x);
  TESSERA_CHECK(x.dim() > 0, ValueError, "[split] expected a tensor with at least 1 dim, got 0-d");
  const int64_t d = wrap_dim(dim, x.dim(), "split");
  int64_t total = 0;
  for (int64_t s : split_sizes) {
    TESSERA_CHECK(s >= 0, ValueError, "[split] expected non-negative split sizes, got ",
                  split_sizes);
    total += s;
  }
  TESSERA_CHECK(total == x.size(d), ValueError, "[split] expected split sizes summing to ",
                x.size(d), " (dim ", d, "), got ", split_sizes);
  TensorList out;
  int64_t start = 0;
  for (int64_t s : split_sizes) {
    Shape sizes = x.sizes();
    sizes[d] = s;
    out.push_back(make_view(x, sizes, x.strides(), x.storage_offset() + start * x.stride(d)));
    start += s;
  }
  // One node for all pieces, as torch's SplitBackward: the gradient is one cat of the pieces'
  // gradients, not a zero-filled base per piece summed afterwards (the fused q|k|v's backward).
  return record_views(x, std::move(out), "SplitBackward",
                      [d, dtype = x.dtype()](const TensorList& g) {
                        Tensor grad = cat(g, d);
                        return grad.dtype() == dtype ? grad : cast(grad, dtype);
                      });
}

TensorList split(const Tensor& x, int64_t split_size, int64_t dim) {
  TESSERA_CHECK(x.dim() > 0, ValueError, "[split] expected a tensor with at least 1 dim, got 0-d");
  const int64_t d = wrap_dim(dim, x.dim(), "split");
  const int64_t size = x.size(d);
  TESSERA_CHECK(split_size > 0 || (split_size == 0 && size == 0), ValueError,
                "[split] expected split_size > 0 (0 only for an empty dim), got ", split_size,
                " for dim ", d, " of size ", size);
  // At least one piece, the last one possibly smaller.
  const int64_t pieces =
      split_size == 0 ? 1 : std::max<int64_t>((size + split_size - 1) / split_size, 1);
  Shape sizes(pieces, split_size);
  sizes.back() = size - split_size * (pieces - 1);
  return split(x, sizes, d);
}

TensorList chunk(const Tensor& x, int64_t chunks, int64_t dim) {
  TESSERA_OP_SCOPE("chunk", x);
  TESSERA_CHECK(chunks > 0, ValueError, "[chunk] expected chunks > 0, got ", chunks);
  TESSERA_CHECK(x.dim() > 0, ValueError, "[chunk] expected a tensor with at least 1 dim, got 0-d");
  const int64_t d = wrap_dim(dim, x.dim(), "chunk");
  const int64_t size = x.size(d);
  // As torch.chunk: pieces of ceil(size / chunks), so there may be fewer than chunks; an empty
  // dim still gives `chunks` empty pieces.
  if (size == 0) return split(x, Shape(chunks, 0), d);
  return split(x, (size + chunks - 1) / chunks, d);
}

Tensor repeat(const Tensor& x, const Shape& repeats) {
  TESSERA_OP_SCOPE("repeat", x);
  const int64_t n = static_cast<int64_t>(repeats.size());
  TESSERA_CHECK(n >= x.dim(), ValueError, "[repeat] expected at least ", x.dim(),
                " repeats (one per dim), got ", repeats);
  for (int64_t r : repeats)
    TESSERA_CHECK(r >= 0, ValueError, "[repeat] expected non-negative repeats, got ", repeats);
  // x viewed as [1, s0, 1, s1, ...], expanded to [r0, s0, r1, s1, ...] and copied once into
  // [r0 * s0, r1 * s1, ...]; the gradient sums the tiles through expand's backward.
  Shape padded(n - x.dim(), 1);
  padded.insert(padded.end(), x.sizes().begin(), x.sizes().end());
  Shape inter, expanded, final_shape;
  for (int64_t i = 0; i < n; ++i) {
    inter.insert(inter.end(), {1, padded[i]});
    expanded.insert(expanded.end(), {repeats[i], padded[i]});
    final_shape.push_back(repeats[i] * padded[i]);
  }
  return view(clone(expand(reshape(x, inter), expanded)), final_shape);
}

namespace {
Tensor triangle(const Tensor& x, int64_t k, bool lower) {
  const char* op = lower ? "tril" : "triu";
  TESSERA_CHECK(x.dim() >= 2, ValueError, "[", op, "] expected a tensor with at least 2 dims, got ",
                x.dim(), "-d");
  Tensor out = empty(x.sizes(), options_of(x));
  call_kernel<triangle_kernel>(x.device(), out, contiguous(x.detach()), k, lower);
  if (needs_grad({x})) {
    record(lower ? "TrilBackward" : "TriuBackward", {x}, {out}, {},
           [k, lower](BackwardContext&, const TensorList& g) {
             return TensorList{lower ? tril(g[0], k) : triu(g[0], k)};
           });
  }
  return out;
}
}  // namespace

Tensor tril(const Tensor& x, int64_t k) {
  TESSERA_OP_SCOPE("tril", x);
  return triangle(x, k, true);
}
Tensor triu(const Tensor& x, int64_t k) {
  TESSERA_OP_SCOPE("triu", x);
  return triangle(x, k, false);
}

Tensor flip(const Tensor& x, const Shape& dims) {
  TESSERA_OP_SCOPE("flip", x);
  Shape wrapped;
  for (int64_t dm : dims) {
    int64_t d = wrap_dim(dm, x.dim(), "flip");
    TESSERA_CHECK(std::find(wrapped.begin(), wrapped.end(), d) == wrapped.end(), ValueError,
                  "[flip] expected each dim once, got ", dims);
    wrapped.push_back(d);
  }
  // Read x through a view with negated strides on the flipped dims, copying once.
  Shape strides = x.strides();
  int64_t offset = x.storage_offset();
  if (x.dim() > 0) {
    for (int64_t d : wrapped) {
      if (x.size(d) == 0) continue;
      offset += (x.size(d) - 1) * strides[d];
      strides[d] = -strides[d];
    }
  }
  Tensor out = empty(x.sizes(), options_of(x));
  copy_into(out, make_view(x, x.sizes(), strides, offset), "flip");
  if (needs_grad({x})) {
    record("FlipBackward", {x}, {out}, {},
           [dims](BackwardContext&, const TensorList& g) { return TensorList{flip(g[0], dims)}; });
  }
  return out;
}

Tensor roll(const Tensor& x, const Shape& shifts, const Shape& dims) {
  TESSERA_OP_SCOPE("roll", x);
  TESSERA_CHECK(!shifts.empty(), ValueError, "[roll] expected at least one shift, got none");
  if (dims.empty()) {
    TESSERA_CHECK(shifts.size() == 1, ValueError,
                  "[roll] expected one shift when no dims are given (the flattened tensor is "
                  "rolled), got ",
                  shifts);
    return reshape(roll(flatten(x), shifts, {0}), x.sizes());
  }
  TESSERA_CHECK(shifts.size() == dims.size(), ValueError,
                "[roll] expected as many shifts as dims, got shifts ", shifts, " and dims ", dims);
  Tensor out = x;
  for (size_t i = 0; i < dims.size(); ++i) {
    const int64_t d = wrap_dim(dims[i], x.dim(), "roll");
    const int64_t n = x.dim() == 0 ? 1 : x.size(d);
    if (n == 0 || x.numel() == 0) continue;
    const int64_t s = ((shifts[i] % n) + n) % n;
    if (s == 0) continue;
    // Element j moves to (j + s) mod n: the last s elements come first.
    out = cat({narrow(out, d, n - s, s), narrow(out, d, 0, n - s)}, d);
  }
  return out.is_same(x) ? clone(x) : out;
}

TESSERA_REGISTER_OPS({"cat", "shape", kAllTypes, true}, {"stack", "shape", kAllTypes, true},
                     {"split", "shape", kAllTypes, true}, {"chunk", "shape", kAllTypes, true},
                     {"repeat", "shape", kAllTypes, true}, {"tril", "shape", kAllTypes, true},
                     {"triu", "shape", kAllTypes, true}, {"flip", "shape", kAllTypes, true},
                     {"roll", "shape", kAllTypes, true});

}  // namespace tessera
