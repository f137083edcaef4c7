// Composite nn ops: dropout, swiglu, rotary embeddings. Their gradients come from the public
// ops they are written in.
#include <cmath>
#include <vector>

#include "ops/op_utils.h"
#include "tessera/ops/nn.h"
#include "tessera/ops/op_info.h"
#include "tessera/ops/shape.h"
#include "tessera/runtime/op_scope.h"

namespace tessera {

using namespace detail;

Tensor dropout(const Tensor& x, double p, bool training, Generator* gen) {
  TESSERA_OP_SCOPE("dropout", x);
  TESSERA_CHECK(p >= 0.0 && p <= 1.0, ValueError, "[dropout] expected p in [0, 1], got ", p);
  TESSERA_CHECK(is_floating(x.dtype()), TypeError,
                "[dropout] expected a floating-point tensor, got ", x.dtype());
  if (!training || p == 0.0 || x.numel() == 0) return x;
  if (p == 1.0) return x * zeros({}, TensorOptions(x.dtype()).with_device(x.device()));
  // One Philox draw per element decides keep (probability 1 - p, compared in double so the mask
  // does not depend on x's dtype); 16-bit inputs are scaled in float and rounded once.
  const DType ct = x.dtype() == kFloat64 ? kFloat64 : kFloat32;
  Tensor scaled_keep;
  {
    autograd::NoGradGuard ng;
    Tensor keep =
        bernoulli(full(x.sizes(), 1.0 - p, TensorOptions(kFloat64).with_device(x.device())), gen);
    scaled_keep = cast_raw(keep, ct) * (1.0 / (1.0 - p));
  }
  return cast(cast(x, ct) * scaled_keep, x.dtype());
}

Tensor swiglu(const Tensor& gate, const Tensor& up) {
  TESSERA_OP_SCOPE("swiglu", gate, up);
  TESSERA_CHECK(is_floating(gate.dtype()) && is_floating(up.dtype()), TypeError,
                "[swiglu] expected floating-point gate and up, got ", gate.dtype(), " and ",
                up.dtype());
  broadcast_shapes(gate.sizes(), up.sizes(), "swiglu");
  return silu(gate) * up;
}

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
  const int64_t half = x.size(-1) / 2;
  Shape rows(x.sizes().begin(), x.sizes().end() - 1);  // [..., T]
  Shape table_shape = rows;
  table_shape.push_back(half);
  TESSERA_CHECK(cos.dim() >= 1 && cos.size(-1) == half &&
                    broadcast_shapes(cos.sizes(), table_shape, "rope") == table_shape,
                ValueError, "[rope] expected cos/sin tables broadcastable to ", table_shape,
                " (e.g. [T, D/2]), got ", cos.sizes());
  const DType dt = x.dtype();
  Tensor c = cast(cos, dt), s = cast(sin, dt);
  // rot = J pair with J = [[0, -1], [1, 0]]: (a, b) -> (-b, a). Written as a broadcast product and
  // a sum (exact: one term is zero) since it needs no cat or flip.
  Tensor J =
      reshape(tensor({0.0, -1.0, 1.0, 0.0}, TensorOptions(dt).with_device(x.device())), {2, 2});
  Shape pairs = rows;
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

TESSERA_REGISTER_OPS({"dropout", "nn", kFloatingTypes, true},
                     {"swiglu", "nn", kFloatingTypes, true}, {"rope", "nn", kFloatingTypes, true},
                     {"rope_tables", "nn", kFloatingTypes, false});

}  // namespace tessera
