#pragma once
// Helpers shared by the op implementations (not public API).
#include <functional>
#include <string_view>

#include "backend/common/elementwise_kernels.h"
#include "backend/common/widening_binary.h"
#include "tessera/autograd/function.h"
#include "tessera/autograd/grad_mode.h"
#include "tessera/ops/creation.h"
#include "tessera/ops/elementwise.h"
#include "tessera/ops/reduce.h"

namespace tessera::detail {

using autograd::BackwardContext;
using autograd::needs_grad;
using autograd::record;

// x converted to dtype without recording autograd (x itself when it already has it).
Tensor cast_raw(const Tensor& x, DType dtype);

// The gradient of a broadcast input: g summed back to shape and cast to dtype.
Tensor reduce_grad(const Tensor& g, const Shape& shape, DType dtype);

// Runs the kernel for functor Fn on inputs already in the compute dtype; out has out_dtype.
template <class Fn>
Tensor run_elementwise(std::string_view op, DType out_dtype, std::initializer_list<Tensor> inputs) {
  Shape shape;
  for (const Tensor& t : inputs) shape = broadcast_shapes(shape, t.sizes(), op);
  Tensor out = empty(shape, TensorOptions(out_dtype).with_device(inputs.begin()->device()));
  TensorIterator it(op);
  it.add_output(out);
  for (const Tensor& t : inputs) it.add_input(t);
  it.build();
  call_kernel<ElementwiseKernel<Fn>>(out.device(), it);
  return out;
}

// Whether a and b are views of one storage.
inline bool shares_storage(const Tensor& a, const Tensor& b) {
  return a.impl()->storage().get() == b.impl()->storage().get();
}

// RuntimeError when an element of the in-place target self is memory another element also
// uses (a broadcast dim of stride 0): the result would depend on the write order
// (torch's assert_no_internal_overlap).
void check_no_internal_overlap(const Tensor& self, std::string_view op);

// Writes Fn(self, other) into self (other broadcast to self's shape and cast to its dtype; for
// widening functors, float32 math on a 16-bit and a float32 operand as they load). An other
// sharing self's memory is read from a copy, so the writes never feed the reads.
template <class Fn>
void run_elementwise_inplace(std::string_view op, const Tensor& self, const Tensor& other) {
  DType common = result_type(self, other);
  TESSERA_CHECK(can_cast(common, self.dtype()), TypeError, "[", op,
                "] expected a result castable to ", self.dtype(), ", got result type ", common);
  check_no_internal_overlap(self, op);
  const Tensor source = shares_storage(self, other) ? clone(other.detach()) : other;
  bool widen = false;
  if constexpr (fn::kWidensOnLoad<Fn>)
    widen = common == kFloat32 && fn::widens_on_load(self.dtype(), self.dtype(), source.dtype());
  TensorIterator it(op);
  it.add_output(self).add_input(self).add_input(widen ? source : cast_raw(source, self.dtype()));
  it.build();
  call_kernel<ElementwiseKernel<Fn>>(self.device(), it);
}

// After self was overwritten with values that depend on no tensor (fill_, normal_), records that
// its old history no longer matters.
void record_overwritten(Tensor& self, const char* node);

// A view of x's storage with the given geometry (no autograd).
Tensor make_view(const Tensor& x, Shape sizes, Shape strides, int64_t offset);
// Records a view op (out aliases x) whose gradient is backward_fn(g).
Tensor record_view(const Tensor& x, Tensor out, const char* name,
                   std::function<Tensor(const Tensor&)> backward_fn);
// Records a view op with several outputs (all alias x) as one node whose gradient is
// backward_fn(g), g holding one gradient per output (zeros for those that got none).
TensorList record_views(const Tensor& x, TensorList outs, const char* name,
                        std::function<Tensor(const TensorList&)> backward_fn);
// zeros(shape) with src added into view_fn(zeros); differentiable (its gradient is view_fn(g)).
Tensor view_backward_scatter(const Tensor& src, const Shape& shape,
                             std::function<Tensor(const Tensor&)> view_fn);

// Records out = gelu(x, "tanh") computed by another kernel (linear_gelu's fused GEMM), as gelu
// itself records it.
void record_gelu_tanh(const Tensor& x, const Tensor& out);

// t's dtype on t's device: for tensors an op makes beside its input.
inline TensorOptions options_of(const Tensor& t) {
  return TensorOptions(t.dtype()).with_device(t.device());
}

// Floating dtype a float-only function computes in (ints and bool promote to float32).
inline DType float_compute_dtype(DType t) { return is_floating(t) ? t : kFloat32; }

}  // namespace tessera::detail
