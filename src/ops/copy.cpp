// Casts, copies, fills and in-place clamps.
#include "ops/op_utils.h"
#include "tessera/ops/op_info.h"
#include "tessera/runtime/op_scope.h"

namespace tessera {

using namespace detail;

Tensor cast(const Tensor& x, DType dtype) {
  // A cast to the tensor's own dtype is no op (and not one in the profile).
  if (x.defined() && x.dtype() == dtype) return x;
  TESSERA_OP_SCOPE("cast", x);
  Tensor out = cast_raw(x, dtype);
  if (is_floating(dtype) && needs_grad({x})) {
    record("CastBackward", {x}, {out}, {}, [dx = x.dtype()](BackwardContext&, const TensorList& g) {
      return TensorList{cast(g[0], dx)};
    });
  }
  return out;
}

Tensor clone(const Tensor& x) {
  TESSERA_OP_SCOPE("clone", x);
  Tensor out = empty(x.sizes(), TensorOptions(x.dtype()).with_device(x.device()));
  TensorIterator it("clone");
  it.add_output(out).add_input(x).build();
  call_kernel<copy_kernel>(x.device(), it);
  if (needs_grad({x})) {
    record("CloneBackward", {x}, {out}, {},
           [](BackwardContext&, const TensorList& g) { return TensorList{g[0]}; });
  }
  return out;
}

namespace {
// A copy of x into a fresh tensor made with options; its gradient goes back to x's device.
Tensor copy_into_new(const Tensor& x, const TensorOptions& options, bool non_blocking,
                     const char* node) {
  Tensor out = empty(x.sizes(), options.with_dtype(x.dtype()));
  {
    autograd::NoGradGuard no_grad;
    tessera::copy_(out, x, non_blocking);
  }
  if (needs_grad({x})) {
    record(node, {x}, {out}, {}, [from = x.device()](BackwardContext&, const TensorList& g) {
      return TensorList{g[0].to(from)};
    });
  }
  return out;
}
}  // namespace

Tensor Tensor::to(Device d, bool non_blocking) const {
  if (d == device()) return *this;
  return copy_into_new(*this, TensorOptions(d), non_blocking, "ToDeviceBackward");
}

Tensor Tensor::pin_memory() const {
  TESSERA_CHECK(device().is_cpu(), ValueError, "[pin_memory] expected a CPU tensor, got one on ",
                device());
  if (is_pinned()) return *this;
  return copy_into_new(*this, TensorOptions(kCPU).with_pinned_memory(), false, "PinMemoryBackward");
}

bool Tensor::is_pinned() const { return checked()->storage()->pinned(); }

Tensor contiguous(const Tensor& x) {
  TESSERA_OP_SCOPE("contiguous", x);
  return x.is_contiguous() ? x : clone(x);
}

namespace {
// src is first brought into dst's shape and dtype, contiguous, on its own device; one transfer
// then moves it, into dst itself when dst is contiguous. The transfer may stay queued
// (non_blocking) only when its host end is the caller's own pinned tensor: a temporary staged
// here would be read (or freed) before it completed.
void copy_across_devices(const Tensor& dst, const Tensor& src, bool non_blocking) {
  autograd::NoGradGuard no_grad;
  Tensor staged = contiguous(cast_raw(src.expand(dst.sizes()), dst.dtype()));
  Device backend = dst.device().is_cpu() ? src.device() : dst.device();
  Tensor landing = dst.is_contiguous()
                       ? dst
                       : empty(dst.sizes(), TensorOptions(dst.dtype()).with_device(dst.device()));
  // Temporaries come from the pageable allocator, so a pinned host end is the caller's tensor.
  const bool host_pinned = (dst.device().is_cpu() ? landing : staged).is_pinned();
  call_kernel<device_copy_kernel>(backend, landing.data_ptr(), dst.device(), staged.data_ptr(),
                                  src.device(),
                                  static_cast<size_t>(staged.numel()) * itemsize(staged.dtype()),
                                  host_pinned, non_blocking && host_pinned);
  if (!dst.is_contiguous()) {
    TensorIterator it("copy_");
    it.add_output(dst).add_input(landing).build();
    call_kernel<copy_kernel>(dst.device(), it);
  }
}
}  // namespace

Tensor& copy_(Tensor& self, const Tensor& src, bool non_blocking) {
  TESSERA_OP_SCOPE("copy_", self, src);
  const bool grad = needs_grad({self, src});
  autograd::check_inplace(self, "copy_", grad);
  check_no_internal_overlap(self, "copy_");
  TensorIterator it("copy_");
  // A source overlapping the target (a[1:] = a[:-1]) is read from a copy.
  if (self.device() == src.device())
    it.add_output(self).add_input(shares_storage(self, src) ? clone(src.detach()) : src).build();
  if (self.device() == src.device())
    call_kernel<copy_kernel>(self.device(), it);
  else
    copy_across_devices(self, src, non_blocking);
  if (grad) {
    record("CopyBackward", {self, src}, {self}, {},
           [ss = src.sizes(), ds = src.dtype(), sd = src.device()](BackwardContext& ctx,
                                                                   const TensorList& g) {
             TensorList r(2);  // self's old value was overwritten: no gradient
             if (ctx.needs_input_grad(1)) r[1] = reduce_grad(g[0].to(sd), ss, ds);
             return r;
           },
           {.inplace = true});
  }
  return self;
}

Tensor& fill_(Tensor& self, const Scalar& value) {
  TESSERA_OP_SCOPE("fill_", self);
  autograd::check_inplace(self, "fill_");
  call_kernel<fill_kernel>(self.device(), self, value);
  record_overwritten(self, "FillBackward");
  return self;
}

Tensor& zero_(Tensor& self) {
  TESSERA_OP_SCOPE("zero_", self);
  return fill_(self, 0);
}

Tensor& clamp_(Tensor& self, std::optional<Scalar> min, std::optional<Scalar> max) {
  TESSERA_OP_SCOPE("clamp_", self);
  // Clamp a copy when recording, so the saved input is not the tensor we overwrite.
  Tensor clamped = clamp(needs_grad({self}) ? clone(self) : self, min, max);
  TESSERA_CHECK(can_cast(clamped.dtype(), self.dtype()), TypeError,
                "[clamp_] expected a result castable to ", self.dtype(), ", got result type ",
                clamped.dtype());
  return copy_(self, clamped);
}

TESSERA_REGISTER_OPS({"cast", "copy", kAllTypes, true}, {"clone", "copy", kAllTypes, true},
                     {"contiguous", "copy", kAllTypes, true}, {"copy_", "inplace", kAllTypes, true},
                     {"fill_", "inplace", kAllTypes, false}, {"zero_", "inplace", kAllTypes, false},
                     {"clamp_", "inplace", kNumericTypes, true});

}  // namespace tessera
