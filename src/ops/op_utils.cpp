#include "ops/op_utils.h"

namespace tessera::detail {

void check_no_internal_overlap(const Tensor& self, std::string_view op) {
  for (int64_t d = 0; d < self.dim(); ++d)
    TESSERA_CHECK(self.stride(d) != 0 || self.size(d) <= 1, RuntimeError, "[", op,
                  "] expected an in-place target whose elements have memory of their own, got a "
                  "broadcast view (stride 0 on dim ",
                  d, " of shape ", self.sizes(), "); clone() it first");
}

void record_overwritten(Tensor& self, const char* node) {
  // The old values get a zero gradient (as in torch); self is also the node's input, so an
  // overwritten view zeroes its region of the base's gradient.
  if (needs_grad({self}))
    record(node, {self}, {self}, {},
           [](BackwardContext&, const TensorList& g) { return TensorList{zeros_like(g[0])}; },
           {.inplace = true});
}

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
