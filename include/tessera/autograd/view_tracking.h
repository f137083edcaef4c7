#pragma once
// Autograd for views that are written in place (torch's view tracking and CopySlices).
//
// A view op's output remembers its base, the tensor that owns the memory. When an in-place op
// writes through such a view, the base's history is rewritten (CopySlices): the base's gradient
// passes through the op's backward on the view's region and unchanged elsewhere. Any view whose
// memory was written since its grad_fn was set (through the base, itself or a sibling view)
// rebuilds grad_fn as an as_strided view of the base, so gradients always follow the values.
#include <memory>
#include <string_view>

#include "tessera/autograd/function.h"

namespace tessera::autograd {

// Marks out, the output of a view op on x, as a view of x's base. Views made in no-grad mode are
// marked as such: tracked when x requires grad, otherwise only their origin is kept (values that
// require grad may not be written through them later). Views made in inference mode, and
// integer views, are not tracked (nothing to follow, nothing to pay).
void track_view(const Tensor& x, const Tensor& out);

// Marks out as an alias of x made by a function with its own backward: writing through it in
// place is refused while x requires grad.
void track_opaque_view(const Tensor& x, const Tensor& out);

// Whether t is a tracked view that still shares its base's memory.
bool is_tracked_view(const Tensor& t);

// The base of a tracked view, or an undefined tensor.
Tensor view_base(const Tensor& t);

// Brings a tracked view's grad_fn up to date when its memory was written since it was set.
void refresh_view_grad_fn(const std::shared_ptr<TensorImpl>& view);

// Checks an in-place op on self with grad mode on: RuntimeError naming op when
// self is a view of a leaf that requires grad, or a view that may not be written (ViewOrigin).
void check_view_write(const Tensor& self, std::string_view op);

// Bumps self's version for a write; a tracked view whose grad_fn was current stays current (the
// op that writes records itself).
void bump_version_for_write(const Tensor& self);

// RuntimeError naming op (an in-place op on self that will be recorded) when self is a view that
// may not be written with grad: made in no-grad mode or by a function with its own backward. As
// in torch, values that require grad written into such a view would leave its base without their
// history. check_inplace runs it before the write; record() again, for ops that did not.
void check_recorded_write(const Tensor& self, std::string_view op);

// Makes node (recorded for an in-place op on the tracked view) part of the base's history, and
// rebuilds the view's grad_fn from the base.
void record_inplace_on_view(const Tensor& view, const std::shared_ptr<FunctionNode>& node);

}  // namespace tessera::autograd
