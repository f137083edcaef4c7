// Reductions: a plan maps any set of dims onto the kernels' [outer, reduce, inner] layout.
#include <algorithm>
#include <cmath>

#include "backend/common/reduce_kernels.h"
#include "ops/op_utils.h"
#include "tessera/ops/op_info.h"
#include "tessera/ops/shape.h"
#include "tessera/runtime/op_scope.h"

namespace tessera {

using namespace detail;

namespace {

struct ReducePlan {
  Tensor in;  // contiguous
  int64_t outer = 1, n = 1, inner = 1;
  Shape out_shape;   // keepdim = false
  Shape keep_shape;  // keepdim = true
  Shape dims;        // sorted, wrapped
};

Shape normalize_dims(const Tensor& x, const Shape& dims, std::string_view op) {
  Shape out;
  if (dims.empty()) {
    for (int64_t d = 0; d < x.dim(); ++d) out.push_back(d);
    return out;
  }
  for (int64_t d : dims) {
    int64_t w = wrap_dim(d, x.dim(), op);
    TESSERA_CHECK(std::find(out.begin(), out.end(), w) == out.end(), ValueError, "[", op,
                  "] expected each dim once, got ", dims);
    out.push_back(w);
  }
  std::sort(out.begin(), out.end());
  return out;
}

ReducePlan plan(const Tensor& x, const Shape& dims, std::string_view op) {
  ReducePlan p;
  p.dims = x.dim() == 0 ? Shape{} : normalize_dims(x, dims, op);
  std::vector<bool> reduced(x.dim(), false);
  for (int64_t d : p.dims) reduced[d] = true;
  for (int64_t d = 0; d < x.dim(); ++d) {
    p.keep_shape.push_back(reduced[d] ? 1 : x.sizes()[d]);
    if (!reduced[d]) p.out_shape.push_back(x.sizes()[d]);
  }
  if (p.dims.empty()) {
    p.in = contiguous(x.detach());
    p.outer = x.numel();
    return p;
  }
  bool block = p.dims.back() - p.dims.front() + 1 == static_cast<int64_t>(p.dims.size());
  if (x.is_contiguous() && block) {
    p.in = x.detach();
    for (int64_t d = 0; d < x.dim(); ++d) {
      int64_t s = x.sizes()[d];
      if (d < p.dims.front())
        p.outer *= s;
      else if (d > p.dims.back())
        p.inner *= s;
      else
        p.n *= s;
    }
    return p;
  }
  Shape order;
  for (int64_t d = 0; d < x.dim(); ++d)
    if (!reduced[d]) order.push_back(d);
  order.insert(order.end(), p.dims.begin(), p.dims.end());
  autograd::NoGradGuard ng;
  p.in = contiguous(permute(x.detach(), order));
  for (int64_t d = 0; d < x.dim(); ++d) (reduced[d] ? p.n : p.outer) *= x.sizes()[d];
  return p;
}

template <class Reducer>
Tensor run_reduce(const ReducePlan& p, DType out_dtype, bool keepdim) {
  Tensor out = empty(keepdim ? p.keep_shape : p.out_shape,
                     TensorOptions(out_dtype).with_device(p.in.device()));
  call_kernel<ReduceKernel<Reducer>>(p.in.device(), out, p.in, p.outer, p.n, p.inner);
  return out;
}

DType sum_dtype(DType t) { return is_floating(t) ? t : kInt64; }

// g of the reduced shape back to x's shape (broadcast over the reduced dims).
Tensor expand_grad(const Tensor& g, const Shape& keep_shape, const Shape& in_shape) {
  return expand(reshape(g, keep_shape), in_shape);
}

}  // namespace

Tensor sum(const Tensor& x_, const Shape& dims, bool keepdim, std::optional<DType> dtype) {
  TESSERA_OP_SCOPE("sum", x_);
  Tensor x = dtype ? cast(op_scope.arg(0), *dtype) : op_scope.arg(0);
  ReducePlan p = plan(x, dims, "sum");
  Tensor out = run_reduce<fn::SumReducer>(p, sum_dtype(x.dtype()), keepdim);
  if (needs_grad({x})) {
    record("SumBackward", {x}, {out}, {},
           [keep = p.keep_shape, in = x.sizes()](BackwardContext&, const TensorList& g) {
             return TensorList{expand_grad(g[0], keep, in)};
           });
  }
  return out;
}

Tensor mean(const Tensor& x_, const Shape& dims, bool keepdim) {
  TESSERA_OP_SCOPE("mean", x_);
  const Tensor& x = op_scope.arg(0);
  TESSERA_CHECK(is_floating(x.dtype()), TypeError, "[mean] expected a floating-point tensor, got ",
                x.dtype());
  ReducePlan p = plan(x, dims, "mean");
  return sum(x, dims, keepdim) / static_cast<double>(p.n);
}

Tensor prod(const Tensor& x_, const Shape& dims, bool keepdim) {
  TESSERA_OP_SCOPE("prod", x_);
  const Tensor& x = op_scope.arg(0);
  ReducePlan p = plan(x, dims, "prod");
  Tensor out = run_reduce<fn::ProdReducer>(p, sum_dtype(x.dtype()), keepdim);
  if (needs_grad({x})) {
    record("ProdBackward", {x}, {out}, {x},
           [keep = p.keep_shape, d = p.dims, in = x.sizes()](BackwardContext& ctx,
                                                             const TensorList& g) {
             Tensor xs = ctx.saved(0);
             Tensor zero = xs == zeros_like(xs);
             // Product of the other elements: out / x where x != 0; for a zero, the product
             // of the non-zeros when it is the only zero in its slice, else 0.
             Tensor nz = where(zero, ones_like(xs), xs);
             Tensor prod_nz = prod(nz, d, true);
             Tensor zero_count = sum(zero, d, true);
             Tensor others = where(zero, prod_nz * (zero_count == ones_like(zero_count)),
                                   prod_nz * (zero_count == zeros_like(zero_count)) / nz);
             return TensorList{expand_grad(g[0], keep, in) * others};
           });
  }
  return out;
}

namespace {
// amax/amin: the gradient is shared evenly between tied extremes.
template <class Reducer>
Tensor extreme(const Tensor& x, const Shape& dims, bool keepdim, const char* node) {
  ReducePlan p = plan(x, dims, Reducer::name);
  // As torch: an empty result is fine (other dims empty), an empty reduced dim is not.
  TESSERA_CHECK(x.numel() > 0 || p.outer * p.inner == 0, ValueError, "[", Reducer::name,
                "] expected a non-empty dim to reduce, got shape ", x.sizes());
  if (x.numel() == 0) return empty(keepdim ? p.keep_shape : p.out_shape, options_of(x));
  Tensor out = run_reduce<Reducer>(p, x.dtype(), keepdim);
  if (needs_grad({x})) {
    record(node, {x}, {out}, {x, out},
           [keep = p.keep_shape, d = p.dims, in = x.sizes()](BackwardContext& ctx,
                                                             const TensorList& g) {
             Tensor xs = ctx.saved(0);
             Tensor hit = cast(xs == reshape(ctx.saved(1), keep), xs.dtype());
             return TensorList{expand_grad(g[0], keep, in) * hit / sum(hit, d, true)};
           });
  }
  return out;
}

// (values, indices) of the extreme along dim.
std::tuple<Tensor, Tensor> extreme_along(const Tensor& x, int64_t dim, bool keepdim, bool is_max) {
  const char* op = is_max ? "max" : "min";
  ReducePlan p = plan(x, {dim}, op);
  TESSERA_CHECK(x.numel() > 0 || p.outer * p.inner == 0, ValueError, "[", op,
                "] expected a non-empty dim to reduce, got shape ", x.sizes());
  Shape shape = keepdim ? p.keep_shape : p.out_shape;
  Tensor values = empty(shape, TensorOptions(x.dtype()).with_device(x.device()));
  Tensor indices = empty(shape, TensorOptions(kInt64).with_device(x.device()));
  if (x.numel() == 0) return {values, indices};
  call_kernel<argreduce_kernel>(x.device(), values, indices, p.in, p.outer, p.n, p.inner, is_max);
  if (needs_grad({x})) {
    int64_t d = p.dims.empty() ? 0 : p.dims[0];
    record(
        is_max ? "MaxBackward" : "MinBackward", {x}, {values, indices}, {indices},
        [keep = p.keep_shape, in = x.sizes(), d](BackwardContext& ctx, const TensorList& g) {
          Tensor idx = reshape(ctx.saved(0), keep);
          Shape pos_shape(in.size(), 1);
          if (!in.empty()) pos_shape[d] = in[d];
          Tensor pos = reshape(arange(in.empty() ? 1 : in[d]).to(idx.device()), pos_shape);
          Tensor hit = pos == idx;
          return TensorList{where(hit, expand_grad(g[0], keep, in), zeros({}, options_of(g[0])))};
        });
  }
  return {values, indices};
}
}  // namespace

Tensor amax(const Tensor& x, const Shape& dims, bool keepdim) {
  TESSERA_OP_SCOPE("amax", x);
  return extreme<fn::MaxReducer>(x, dims, keepdim, "AmaxBackward");
}
Tensor amin(const Tensor& x, const Shape& dims, bool keepdim) {
  TESSERA_OP_SCOPE("amin", x);
  return extreme<fn::MinReducer>(x, dims, keepdim, "AminBackward");
}
Tensor max(const Tensor& x) {
  TESSERA_OP_SCOPE("max", x);
  return amax(x);
}
Tensor min(const Tensor& x) {
  TESSERA_OP_SCOPE("min", x);
  return amin(x);
}
std::tuple<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim) {
  TESSERA_OP_SCOPE("max", x);
  return extreme_along(x, dim, keepdim, true);
}
std::tuple<Tensor, Tensor> min(const Tensor& x, int64_t dim, bool keepdim) {
  TESSERA_OP_SCOPE("min", x);
  return extreme_along(x, dim, keepdim, false);
}

Tensor argmax(const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  TESSERA_OP_SCOPE("argmax", x);
  autograd::NoGradGuard ng;
  if (!dim) return std::get<1>(extreme_along(reshape(x, {-1}), 0, false, true));
  return std::get<1>(extreme_along(x, *dim, keepdim, true));
}
Tensor argmin(const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  TESSERA_OP_SCOPE("argmin", x);
  autograd::NoGradGuard ng;
  if (!dim) return std::get<1>(extreme_along(reshape(x, {-1}), 0, false, false));
  return std::get<1>(extreme_along(x, *dim, keepdim, false));
}

Tensor var(const Tensor& x_, const Shape& dims, int64_t correction, bool keepdim) {
  TESSERA_OP_SCOPE("var", x_);
  const Tensor& x = op_scope.arg(0);
  TESSERA_CHECK(is_floating(x.dtype()), TypeError, "[var] expected a floating-point tensor, got ",
                x.dtype());
  ReducePlan p = plan(x, dims, "var");
  Tensor d = x - mean(x, dims, true);
  double denom = std::max<double>(static_cast<double>(p.n - correction), 0.0);
  return sum(d * d, dims, keepdim) / denom;
}

Tensor std(const Tensor& x_, const Shape& dims, int64_t correction, bool keepdim) {
  TESSERA_OP_SCOPE("std", x_);
  return sqrt(var(op_scope.arg(0), dims, correction, keepdim));
}

Tensor norm(const Tensor& x_, double p, const Shape& dims, bool keepdim) {
  TESSERA_OP_SCOPE("norm", x_);
  const Tensor& x = op_scope.arg(0);
  TESSERA_CHECK(is_floating(x.dtype()), TypeError, "[norm] expected a floating-point tensor, got ",
                x.dtype());
  if (std::isinf(p)) return p > 0 ? amax(abs(x), dims, keepdim) : amin(abs(x), dims, keepdim);
  if (p == 1.0) return sum(abs(x), dims, keepdim);
  TESSERA_CHECK(p > 0, ValueError, "[norm] expected p > 0 or inf, got ", p);
  Tensor out;
  {
    autograd::NoGradGuard ng;
    out = p == 2.0 ? sqrt(sum(x * x, dims, keepdim))
                   : pow(sum(pow(abs(x), p), dims, keepdim), 1.0 / p);
  }
  if (needs_grad({x})) {
    // d|x|_p/dx = sign(x) |x|^(p-1) / |x|_p^(p-1); where the norm is 0 its gradient is taken
    // as 0, as in torch (the composite formula gave 0 * inf = nan there).
    record("NormBackward", {x}, {out}, {x, out},
           [p, keep = plan(x, dims, "norm").keep_shape, in = x.sizes()](BackwardContext& ctx,
                                                                        const TensorList& g) {
             Tensor xs = ctx.saved(0), n = reshape(ctx.saved(1), keep);
             Tensor at_zero = n == zeros_like(n);
             Tensor safe_n = where(at_zero, ones_like(n), n);
             // |x|^(p-1) read as 1 where x == 0 (sign(x) zeroes it): inf there for p < 1.
             Tensor safe_abs = where(xs == zeros_like(xs), ones_like(xs), abs(xs));
             Tensor scale =
                 p == 2.0 ? xs / safe_n : sign(xs) * pow(safe_abs, p - 1.0) / pow(safe_n, p - 1.0);
             Tensor grad = expand_grad(g[0], keep, in) * scale;
             return TensorList{where(at_zero, zeros_like(grad), grad)};
           });
  }
  return out;
}

Tensor logsumexp(const Tensor& x_, const Shape& dims, bool keepdim) {
  TESSERA_OP_SCOPE("logsumexp", x_);
  const Tensor& x = op_scope.arg(0);
  TESSERA_CHECK(is_floating(x.dtype()), TypeError,
                "[logsumexp] expected a floating-point tensor, got ", x.dtype());
  Tensor m;
  {
    autograd::NoGradGuard ng;
    m = amax(x.detach(), dims, true);
    m = where(isinf(m), zeros_like(m), m);  // all -inf slices stay -inf, without nan
  }
  Tensor out = log(sum(exp(x - m), dims, true)) + m;
  if (keepdim) return out;
  ReducePlan p = plan(x, dims, "logsumexp");
  return reshape(out, p.out_shape);
}

Tensor cumsum(const Tensor& x_, int64_t dim) {
  TESSERA_OP_SCOPE("cumsum", x_);
  const Tensor& x_in = op_scope.arg(0);
  Tensor x = is_floating(x_in.dtype()) ? x_in : cast(x_in, kInt64);
  int64_t d = wrap_dim(dim, x.dim(), "cumsum");
  ReducePlan p = plan(x, x.dim() == 0 ? Shape{} : Shape{d}, "cumsum");
  Tensor out;
  if (x.dim() == 0) {
    out = clone(x.detach());
  } else {
    Tensor in = contiguous(x.detach());
    out = empty(x.sizes(), TensorOptions(x.dtype()).with_device(x.device()));
    int64_t outer = 1, inner = 1;
    for (int64_t i = 0; i < x.dim(); ++i) {
      if (i < d) outer *= x.sizes()[i];
      if (i > d) inner *= x.sizes()[i];
    }
    call_kernel<cumsum_kernel>(x.device(), out, in, outer, x.sizes()[d], inner);
  }
  if (needs_grad({x})) {
    record("CumsumBackward", {x}, {out}, {}, [d](BackwardContext&, const TensorList& g) {
      // Reverse cumulative sum, summed from the end (total - prefix + self cancels: a large
      // early gradient would swamp the small later ones).
      if (g[0].dim() == 0) return TensorList{g[0]};
      return TensorList{flip(cumsum(flip(g[0], {d}), d), {d})};
    });
  }
  return out;
}

Tensor all(const Tensor& x, const Shape& dims, bool keepdim) {
  TESSERA_OP_SCOPE("all", x);
  Tensor b = x.dtype() == kBool ? x : ne(x, zeros({}, options_of(x)));
  if (b.numel() == 0) {
    const auto p = plan(b, dims, "all");
    return full(keepdim ? p.keep_shape : p.out_shape, true, options_of(b));
  }
  return run_reduce<fn::MinReducer>(plan(b, dims, "all"), kBool, keepdim);
}

Tensor any(const Tensor& x, const Shape& dims, bool keepdim) {
  TESSERA_OP_SCOPE("any", x);
  Tensor b = x.dtype() == kBool ? x : ne(x, zeros({}, options_of(x)));
  if (b.numel() == 0) {
    const auto p = plan(b, dims, "any");
    return full(keepdim ? p.keep_shape : p.out_shape, false, options_of(b));
  }
  return run_reduce<fn::MaxReducer>(plan(b, dims, "any"), kBool, keepdim);
}

Tensor sum_to(const Tensor& x, const Shape& shape) {
  TESSERA_OP_SCOPE("sum_to", x);
  if (x.sizes() == shape) return x;
  const int64_t lead = x.dim() - static_cast<int64_t>(shape.size());
  TESSERA_CHECK(lead >= 0, ValueError, "[sum_to] expected a target shape with at most ", x.dim(),
                " dims, got ", shape);
  Shape dims;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (d < lead)
      dims.push_back(d);
    else if (shape[d - lead] == 1 && x.sizes()[d] != 1)
      dims.push_back(d);
    else
      TESSERA_CHECK(shape[d - lead] == x.sizes()[d], ValueError, "[sum_to] expected shape ",
                    x.sizes(), " to reduce to ", shape);
  }
  if (dims.empty()) return reshape(x, shape);
  return reshape(sum(x, dims, true), shape);
}

// ---- Tensor methods ----
Tensor Tensor::sum(const Shape& d, bool k) const { return tessera::sum(*this, d, k); }
Tensor Tensor::mean(const Shape& d, bool k) const { return tessera::mean(*this, d, k); }
Tensor Tensor::max() const { return tessera::max(*this); }
Tensor Tensor::min() const { return tessera::min(*this); }
Tensor Tensor::argmax(std::optional<int64_t> d, bool k) const {
  return tessera::argmax(*this, d, k);
}

// Sums, products and statistics compute in float32 under autocast (max/min/arg* need not).
TESSERA_REGISTER_OPS({"sum", "reduction", kAllTypes, true, CastPolicy::kFloat32},
                     {"mean", "reduction", kFloatingTypes, true, CastPolicy::kFloat32},
                     {"prod", "reduction", kAllTypes, true, CastPolicy::kFloat32},
                     {"amax", "reduction", kAllTypes, true}, {"amin", "reduction", kAllTypes, true},
                     {"max", "reduction", kAllTypes, true}, {"min", "reduction", kAllTypes, true},
                     {"argmax", "reduction", kAllTypes, false},
                     {"argmin", "reduction", kAllTypes, false},
                     {"var", "reduction", kFloatingTypes, true, CastPolicy::kFloat32},
                     {"std", "reduction", kFloatingTypes, true, CastPolicy::kFloat32},
                     {"norm", "reduction", kFloatingTypes, true, CastPolicy::kFloat32},
                     {"logsumexp", "reduction", kFloatingTypes, true, CastPolicy::kFloat32},
                     {"cumsum", "reduction", kNumericTypes, true, CastPolicy::kFloat32},
                     {"all", "reduction", kAllTypes, false}, {"any", "reduction", kAllTypes, false},
                     {"sum_to", "reduction", kAllTypes, true});

}  // namespace tessera
