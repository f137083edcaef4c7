#include "ops/op_utils.h"

namespace tessera::detail {

Tensor cast_raw(const Tensor& x, DType dtype) {
  if (x.dtype() == dtype) return x;
  Tensor out = empty(x.sizes(), TensorOptions(dtype).with_device(x.device()));
  TensorIterator it("cast");
  it.add_output(out).add_input(x).build();
  call_kernel<copy_kernel>(x.device(), it);
  return out;
}

Tensor reduce_grad(const Tensor& g, const Shape& shape, DType dtype) {
  Tensor r = g.sizes() == shape ? g : sum_to(g, shape);
  return r.dtype() == dtype ? r : cast(r, dtype);
}

}  // namespace tessera::detail
