#pragma once
// Autograd for views that are written in place (torch's view tracking and CopySlices).
//
// A view op's output remembers its base, the tensor that owns the memory. When an in-place op
// writes through such a view, the base's history is rewritten (CopySlices): the base's gradient
// passes through the op's backward on the view's region and unchanged elsewhere. Any view whose
// memory was written since its grad_fn was set (through the base, itself or a sibling view)
// rebuilds grad_fn as an as_strided view of the base, so gradients always follow the values.
#include <memory>

#include "tessera/autograd/function.h"

namespace tessera::autograd {

// Marks out as a view of x (x's base when x is itself a view). Grad mode must be on.
void track_view(const Tensor& x, const Tensor& out);

// Whether t is a tracked view that still shares its base's memory.
bool is_tracked_view(const Tensor& t);

// Brings a tracked view's grad_fn up to date when its memory was written since it was set.
void refresh_view_grad_fn(const TensorImpl& view);

// Makes node (recorded for an in-place op on the tracked view) part of the base's history, and
// rebuilds the view's grad_fn from the base.
void record_inplace_on_view(const Tensor& view, const std::shared_ptr<FunctionNode>& node);

// The base of a tracked view, or an undefined tensor.
Tensor view_base(const Tensor& t);

// An alias of t with its history but without view tracking: a saved tensor holding its base
// would keep alive, through the base's later history, the node that saved it.
Tensor untracked_alias(const Tensor& t);

}  // namespace tessera::autograd
