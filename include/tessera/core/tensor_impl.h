#pragma once
// The object behind a Tensor handle: a strided view (sizes, strides, offset) of a Storage, plus
// autograd metadata for tensors that take part in differentiation.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/core/dtype.h"
#include "tessera/core/storage.h"

namespace tessera {

class Tensor;
class TensorImpl;
namespace autograd {
class Node;
}

using Shape = std::vector<int64_t>;
// A hook sees the gradient flowing into a tensor; returning a defined tensor replaces it.
using TensorHook = std::function<Tensor(const Tensor&)>;
// Runs after a leaf's .grad has been accumulated (DDP uses it to launch all-reduce).
using PostAccumulateGradHook = std::function<void(const Tensor&)>;

// How a view was made. Writing in place through a view of a tensor that requires grad is refused,
// with grad mode on, unless a view op made it with grad mode on: a view made in no-grad mode has
// no history to rewrite, and one made by a function with its own backward (an opaque alias) has a
// backward that a write cannot go through.
enum class ViewOrigin : uint8_t { ViewOp, NoGradMode, OpaqueFunction };

struct AutogradMeta {
  bool requires_grad = false;
  bool retains_grad = false;
  std::shared_ptr<TensorImpl> grad;
  std::shared_ptr<autograd::Node> grad_fn;  // null for leaves
  uint32_t output_nr = 0;                   // which output of grad_fn this tensor is
  std::weak_ptr<autograd::Node> grad_accumulator;
  std::vector<TensorHook> hooks;  // leaves only: non-leaf hooks live on grad_fn
  std::vector<PostAccumulateGradHook> post_accumulate_grad_hooks;
  // Set on floating-point views (see autograd/view_tracking.h): the tensor that owns the memory
  // (never itself a view) and the storage version grad_fn belongs to. A write through the base or
  // any other view moves the version on, and grad_fn is then rebuilt from the base's history.
  std::shared_ptr<TensorImpl> view_base;
  uint32_t view_version = 0;
  ViewOrigin view_origin = ViewOrigin::ViewOp;
};

class TensorImpl {
 public:
  TensorImpl(Storage storage, Shape sizes, Shape strides, int64_t offset, DType dtype);

  const Shape& sizes() const { return sizes_; }
  const Shape& strides() const { return strides_; }
  int64_t storage_offset() const { return offset_; }
  int64_t numel() const { return numel_; }
  int64_t dim() const { return static_cast<int64_t>(sizes_.size()); }
  DType dtype() const { return dtype_; }
  Device device() const { return storage_->device(); }
  const Storage& storage() const { return storage_; }
  // Pointer to element 0 of this view (storage base + offset * itemsize).
  void* data() const {
    return static_cast<char*>(storage_->data()) + offset_ * static_cast<int64_t>(itemsize(dtype_));
  }
  bool is_contiguous() const { return contiguous_; }

  // Re-points this impl at new data (used by in-place setters and Module::to); keeps autograd.
  void set_data(Storage storage, Shape sizes, Shape strides, int64_t offset, DType dtype);

  AutogradMeta* autograd_meta() const { return autograd_.get(); }
  AutogradMeta& ensure_autograd_meta();

  // Python-number tensors take part in type promotion with the lowest priority.
  bool is_wrapped_number = false;
  // Created under InferenceMode: may not be saved for backward.
  bool is_inference = false;
  // An untracked alias (Tensor::variable_data(), Python's x.data) or a view or detach of one: its
  // writes leave the storage's autograd version alone, and its own version is the storage's
  // generation (so tensors saved from it still see every write).
  bool untracked_version = false;

 private:
  void refresh();

  Storage storage_;
  Shape sizes_, strides_;
  int64_t offset_ = 0;
  int64_t numel_ = 0;
  DType dtype_;
  bool contiguous_ = true;
  std::unique_ptr<AutogradMeta> autograd_;
};

// Contiguous (row-major) strides for sizes.
Shape contiguous_strides(const Shape& sizes);
// Product of sizes; throws ValueError on negative sizes or a product past int64.
int64_t shape_numel(const Shape& sizes);
// 1 + the largest element index a view of sizes and strides (non-negative) reaches, 0 when it is
// empty; ValueError naming op when that passes int64.
int64_t view_extent(const Shape& sizes, const Shape& strides, std::string_view op);

}  // namespace tessera
