// Rotary embeddings: rope and its cos/sin tables. rope runs one kernel forward and one backward
// (rope_kernel; the backward rotates by -sin). When cos or sin require grad, and for the backward
// under create_graph, it is the composite of public ops, whose gradients reach the tables and
// differentiate again; the composite is also the fused kernel's test oracle.
#include <cmath>
#include <vector>

#include "backend/common/rope_kernels.h"
#include "ops/op_utils.h"
#include "tessera/ops/nn.h"
#include "tessera/ops/op_info.h"
#include "tessera/ops/shape.h"
#include "tessera/runtime/op_scope.h"

namespace tessera {

using namespace detail;

namespace {

// rope in public ops; the tables are cast to x's dtype.
Tensor rope_composite(const Tensor& x, const Tensor& cos, const Tensor& sin, bool interleaved) {
  const DType dt = x.dtype();
  const int64_t half = x.size(-1) / 2;
  Shape pairs(x.sizes().begin(), x.sizes().end() - 1);  // [..., T]
  Tensor c = cast(cos, dt), s = cast(sin, dt);
  // rot = J pair with J = [[0, -1], [1, 0]]: (a, b) -> (-b, a). Written as a broadcast product and
  // a sum (exact: one term is zero) since it needs no cat or flip.
  Tensor J =
      reshape(tensor({0.0, -1.0, 1.0, 0.0}, TensorOptions(dt).with_device(x.device())), {2, 2});
  Tensor out;
  if (interleaved) {
    // Pairs (x[2i], x[2i+1]): x as [..., T, D/2, 2].
    pairs.insert(pairs.end(), {half, 2});
    Tensor xp = reshape(x, pairs);
    Tensor rot = sum(unsqueeze(xp, -2) * J, {-1});
    out = xp * unsqueeze(c, -1) + rot * unsqueeze(s, -1);
  } else {
    // Pairs (x[i], x[i + D/2]): x as [..., T, 2, D/2].
    pairs.insert(pairs.end(), {2, half});
    Tensor xp = reshape(x, pairs);
    Tensor rot = sum(unsqueeze(xp, -3) * reshape(J, {2, 2, 1}), {-2});
    out = xp * unsqueeze(c, -2) + rot * unsqueeze(s, -2);
  }
  return reshape(out, x.sizes());
}

// t itself when its last dim is contiguous (what rope_kernel reads), else a contiguous copy.
Tensor last_dim_contiguous(const Tensor& t) {
  return t.size(-1) <= 1 || t.stride(-1) == 1 ? t : contiguous(t);
}

// [..., n] -> [...]: the first element of each row, where rope_kernel starts reading it.
Tensor row_starts(const Tensor& t) {
  return make_view(t, Shape(t.sizes().begin(), t.sizes().end() - 1),
                   Shape(t.strides().begin(), t.strides().end() - 1), t.storage_offset());
}

// rope_kernel on x with tables already in x's dtype (transpose: by -sin); records nothing.
Tensor rope_fused(const Tensor& x_in, const Tensor& cos, const Tensor& sin, bool interleaved,
                  bool transpose) {
  autograd::NoGradGuard no_grad;
  const Tensor x = last_dim_contiguous(x_in);
  Tensor out = empty(x.sizes(), options_of(x));
  if (x.numel() == 0) return out;
  TensorIterator rows("rope");
  rows.add_output(row_starts(out))
      .add_input(row_starts(x))
      .add_input(row_starts(last_dim_contiguous(cos)))
      .add_input(row_starts(last_dim_contiguous(sin)))
      .build();
  call_kernel<rope_kernel>(x.device(), rows, x.size(-1) / 2, interleaved, transpose);
  return out;
}

}  // namespace

Tensor rope(const Tensor& x, const Tensor& cos, const Tensor& sin, bool interleaved) {
  TESSERA_OP_SCOPE("rope", x, cos, sin);
  TESSERA_CHECK(is_floating(x.dtype()) && is_floating(cos.dtype()) && is_floating(sin.dtype()),
                TypeError, "[rope] expected floating-point x, cos and sin, got ", x.dtype(), ", ",
                cos.dtype(), " and ", sin.dtype());
  TESSERA_CHECK(x.dim() >= 2 && x.size(-1) % 2 == 0, ValueError,
                "[rope] expected x [..., T, D] with an even D, got shape ", x.sizes());
  TESSERA_CHECK(cos.sizes() == sin.sizes(), ValueError,
                "[rope] expected cos and sin of one shape, got ", cos.sizes(), " and ",
                sin.sizes());
  Shape table_shape(x.sizes().begin(), x.sizes().end() - 1);  // [..., T, D/2]
  table_shape.push_back(x.size(-1) / 2);
  TESSERA_CHECK(cos.dim() >= 1 && cos.size(-1) == table_shape.back() &&
                    broadcast_shapes(cos.sizes(), table_shape, "rope") == table_shape,
                ValueError, "[rope] expected cos/sin tables broadcastable to ", table_shape,
                " (e.g. [T, D/2]), got ", cos.sizes());
  if (needs_grad({cos, sin})) return rope_composite(x, cos, sin, interleaved);
  const Tensor c = cast_raw(cos, x.dtype()), s = cast_raw(sin, x.dtype());
  Tensor out = rope_fused(x, c, s, interleaved, /*transpose=*/false);
  if (needs_grad({x})) {
    record("RopeBackward", {x}, {out}, {c, s},
           [interleaved](BackwardContext& ctx, const TensorList& g) {
             const Tensor c = ctx.saved(0), s = ctx.saved(1);
             // dx = R^T g: the rotation by -sin.
             if (autograd::GradMode::is_enabled())
               return TensorList{rope_composite(g[0], c, neg(s), interleaved)};
             return TensorList{rope_fused(cast(g[0], c.dtype()), c, s, interleaved, true)};
           });
  }
  return out;
}

std::tuple<Tensor, Tensor> rope_tables(int64_t seq_len, int64_t head_dim, double theta,
                                       TensorOptions options) {
  TESSERA_OP_SCOPE("rope_tables");
  const DType dtype = options.dtype;
  TESSERA_CHECK(seq_len >= 0, ValueError, "[rope_tables] expected seq_len >= 0, got ", seq_len);
  TESSERA_CHECK(head_dim > 0 && head_dim % 2 == 0, ValueError,
                "[rope_tables] expected a positive even head_dim, got ", head_dim);
  TESSERA_CHECK(theta > 0, ValueError, "[rope_tables] expected theta > 0, got ", theta);
  TESSERA_CHECK(is_floating(dtype), TypeError, "[rope_tables] expected a floating dtype, got ",
                dtype);
  // angle[t, i] = t * theta^(-2i / D), computed in double.
  const int64_t half = head_dim / 2;
  std::vector<double> c(seq_len * half), s(seq_len * half);
  for (int64_t i = 0; i < half; ++i) {
    const double inv_freq = std::pow(theta, -2.0 * static_cast<double>(i) / head_dim);
    for (int64_t t = 0; t < seq_len; ++t) {
      const double a = static_cast<double>(t) * inv_freq;
      c[t * half + i] = std::cos(a);
      s[t * half + i] = std::sin(a);
    }
  }
  // Computed on the host in double, then rounded and moved once.
  return {cast_raw(tensor(c, Shape{seq_len, half}), dtype).to(options.device),
          cast_raw(tensor(s, Shape{seq_len, half}), dtype).to(options.device)};
}

TESSERA_REGISTER_OPS({"rope", "nn", kFloatingTypes, true},
                     {"rope_tables", "nn", kFloatingTypes, false});

}  // namespace tessera
