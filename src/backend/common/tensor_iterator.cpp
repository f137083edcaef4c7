#include "backend/common/tensor_iterator.h"

namespace tessera {

TensorIterator& TensorIterator::add_output(const Tensor& t) {
  TESSERA_ASSERT(noutputs_ == ntensors(), "outputs must be added before inputs");
  tensors_.push_back(t);
  ++noutputs_;
  return *this;
}

TensorIterator& TensorIterator::add_input(const Tensor& t) {
  tensors_.push_back(t);
  return *this;
}

TensorIterator& TensorIterator::build() {
  TESSERA_ASSERT(noutputs_ > 0 && ntensors() <= kMaxOperands);
  const Shape& full = tensors_[0].sizes();
  TESSERA_CHECK(full.size() <= 16, ValueError, "[", op_, "] expected at most 16 dims, got ",
                full.size());
  for (const Tensor& t : tensors_) {
    TESSERA_CHECK(t.device() == tensors_[0].device(), ValueError, "[", op_,
                  "] expected all tensors on ", tensors_[0].device().str(), ", got one on ",
                  t.device().str());
  }
  numel_ = shape_numel(full);
  const int nd = static_cast<int>(full.size());
  // Aligned byte strides, outermost dim first.
  std::vector<Shape> strides(ntensors(), Shape(nd, 0));
  for (int k = 0; k < ntensors(); ++k) {
    const Tensor& t = tensors_[k];
    const int64_t off = nd - t.dim();
    TESSERA_CHECK(off >= 0, ValueError, "[", op_, "] expected an input of at most ", nd,
                  " dims for output shape ", full, ", got shape ", t.sizes());
    const int64_t item = static_cast<int64_t>(t.element_size());
    for (int d = 0; d < t.dim(); ++d) {
      int64_t s = t.sizes()[d];
      TESSERA_CHECK(s == full[off + d] || s == 1, ValueError, "[", op_, "] expected shape ",
                    t.sizes(), " to broadcast to ", full);
      if (k < noutputs_)
        TESSERA_CHECK(s == full[off + d], ValueError, "[", op_, "] expected output shape ", full,
                      ", got ", t.sizes());
      // An empty tensor's strides are never stepped and may be huge (as_strided allows any):
      // in bytes they could overflow.
      strides[k][off + d] = s == 1 || numel_ == 0 ? 0 : t.strides()[d] * item;
    }
  }
  // Drop size-1 dims, then merge neighbours that are contiguous in every operand.
  shape_.clear();
  strides_.assign(ntensors(), Shape{});
  for (int d = 0; d < nd; ++d) {
    if (full[d] == 1) continue;
    bool merge = !shape_.empty();
    for (int k = 0; k < ntensors() && merge; ++k)
      merge = strides_[k].back() == strides[k][d] * full[d];
    if (merge) {
      shape_.back() *= full[d];
      for (int k = 0; k < ntensors(); ++k) strides_[k].back() = strides[k][d];
    } else {
      shape_.push_back(full[d]);
      for (int k = 0; k < ntensors(); ++k) strides_[k].push_back(strides[k][d]);
    }
  }
  if (shape_.empty() || numel_ == 0) {  // a single element (0-d tensors), or nothing to do
    shape_.assign(1, numel_ == 0 ? 0 : 1);
    for (auto& s : strides_) s.assign(1, 0);
  }
  return *this;
}

}  // namespace tessera
