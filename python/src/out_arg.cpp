// torch's out= for the module functions def_op binds (see bind.h).
#include "bind.h"

namespace tessera::python::bind_detail {

void write_out(const Tensor& result, Tensor& out, const char* op) {
  TESSERA_CHECK(!autograd::GradMode::is_enabled() || (!result.requires_grad() && !out.requires_grad()),
                RuntimeError, "[", op,
                "] expected no argument that requires grad with out= (out= ops are not "
                "differentiable); use no_grad() or drop out=");
  TESSERA_CHECK(out.device() == result.device(), ValueError, "[", op, "] expected out on ",
                result.device().str(), ", got ", out.device().str());
  TESSERA_CHECK(can_cast(result.dtype(), out.dtype()), TypeError, "[", op, "] result type ",
                result.dtype(), " can't be cast to the desired output type ", out.dtype());
  if (out.sizes() != result.sizes()) {  // resized, as torch does (fresh storage)
    Tensor fresh = empty(result.sizes(), TensorOptions(out.dtype()).with_device(out.device()));
    out.impl()->set_data(fresh.impl()->storage(), fresh.sizes(), fresh.strides(), 0, out.dtype());
  }
  autograd::NoGradGuard no_grad;
  out.copy_(result);
}

}  // namespace tessera::python::bind_detail
