// masked_fill: where(mask, value, x).
#include "ops/op_utils.h"
#include "tessera/ops/index.h"
#include "tessera/ops/op_info.h"
#include "tessera/runtime/op_scope.h"

namespace tessera {

using namespace detail;

Tensor masked_fill(const Tensor& x, const Tensor& mask, const Scalar& value) {
  TESSERA_OP_SCOPE("masked_fill", x, mask);
  TESSERA_CHECK(mask.dtype() == kBool, TypeError, "[masked_fill] expected a bool mask, got ",
                mask.dtype());
  TESSERA_CHECK(is_floating(x.dtype()) || !value.is_floating(), TypeError,
                "[masked_fill] expected a value representable in ", x.dtype(), ", got ", value);
  Tensor fill = full({}, value, TensorOptions(x.dtype()).with_device(x.device()));
  Tensor out = where(mask, fill, x);
  TESSERA_CHECK(out.sizes() == x.sizes(), ValueError, "[masked_fill] expected a mask of shape ",
                mask.sizes(), " to broadcast to ", x.sizes());
  return out;
}

Tensor& masked_fill_(Tensor& x, const Tensor& mask, const Scalar& value) {
  TESSERA_OP_SCOPE("masked_fill_", x, mask);
  Tensor filled = masked_fill(needs_grad({x}) ? clone(x) : x, mask, value);
  return copy_(x, filled);
}

TESSERA_REGISTER_OPS({"masked_fill", "indexing", kAllTypes, true},
                    {"masked_fill_", "inplace", kAllTypes, true});

}  // namespace tessera
