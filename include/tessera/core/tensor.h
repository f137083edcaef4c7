#pragma once
// Tensor: a cheap, refcounted handle to a TensorImpl. Copying a Tensor aliases the same data; use
// clone() for a deep copy. Op methods forward to the free functions declared in tessera/ops/.
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "tessera/core/device.h"
#include "tessera/core/dtype.h"
#include "tessera/core/error.h"
#include "tessera/core/scalar.h"
#include "tessera/core/tensor_impl.h"

namespace tessera {

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  bool defined() const { return impl_ != nullptr; }
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool is_same(const Tensor& other) const { return impl_ == other.impl_; }

  // ---- metadata ----
  const Shape& sizes() const { return checked()->sizes(); }
  const Shape& shape() const { return sizes(); }
  const Shape& strides() const { return checked()->strides(); }
  int64_t size(int64_t dim) const;
  int64_t stride(int64_t dim) const;
  int64_t dim() const { return checked()->dim(); }
  int64_t numel() const { return checked()->numel(); }
  DType dtype() const { return checked()->dtype(); }
  Device device() const { return checked()->device(); }
  int64_t storage_offset() const { return checked()->storage_offset(); }
  size_t element_size() const { return itemsize(dtype()); }
  bool is_contiguous() const { return checked()->is_contiguous(); }
  bool is_floating_point() const { return is_floating(dtype()); }
  void* data_ptr() const { return checked()->data(); }
  // Typed pointer to element 0; throws TypeError if T does not match dtype().
  template <class T>
  T* data_ptr() const {
    TESSERA_CHECK(dtype_of<std::remove_const_t<T>> == dtype(), TypeError,
                  "[data_ptr] expected a tensor of dtype ", dtype_of<std::remove_const_t<T>>,
                  ", got ", dtype());
    return static_cast<T*>(data_ptr());
  }
  // The single value of a one-element tensor.
  template <class T>
  T item() const;
  Scalar item() const;
  std::string str() const;  // repr-like printout with values
  std::string shape_str() const;

  // ---- autograd ----
  bool requires_grad() const;
  Tensor& requires_grad_(bool requires_grad = true);
  bool is_leaf() const;
  Tensor grad() const;
  void set_grad(const Tensor& grad) const;
  const std::shared_ptr<autograd::Node>& grad_fn() const;
  uint32_t output_nr() const;
  // Backward from this tensor; grad defaults to ones for a scalar output.
  void backward(const Tensor& grad = Tensor(), bool retain_graph = false,
                bool create_graph = false) const;
  Tensor detach() const;
  Tensor& detach_();
  // torch's x.data: the same values without autograd, whose writes autograd does not track (a
  // tensor saved for backward from this one's original still passes the in-place check after
  // them). Caches derived from the storage still see them.
  Tensor variable_data() const;
  void retain_grad() const;
  bool retains_grad() const;
  // Registers a hook on the gradient of this tensor (it may return a replacement gradient).
  void register_hook(TensorHook hook) const;
  // Leaf tensors only: runs after .grad is accumulated.
  void register_post_accumulate_grad_hook(PostAccumulateGradHook hook) const;
  // The write counter autograd checks: the storage's version(), or its generation() for an
  // untracked alias (TensorImpl::untracked_version).
  uint32_t version() const {
    const TensorImpl* t = checked();
    return t->untracked_version ? t->storage()->generation() : t->storage()->version();
  }
  void bump_version() const {
    const TensorImpl* t = checked();
    t->storage()->bump_version(!t->untracked_version);
  }

  // ---- views and copies (tessera/ops/shape.h) ----
  Tensor view(const Shape& shape) const;
  Tensor reshape(const Shape& shape) const;
  Tensor permute(const Shape& dims) const;
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor t() const;
  Tensor mT() const;  // transpose of the last two dims
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor slice(int64_t dim, std::optional<int64_t> start, std::optional<int64_t> end,
               int64_t step = 1) const;
  Tensor select(int64_t dim, int64_t index) const;
  Tensor expand(const Shape& shape) const;
  Tensor expand_as(const Tensor& other) const;
  Tensor squeeze() const;
  Tensor squeeze(int64_t dim) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor as_strided(const Shape& sizes, const Shape& strides,
                    std::optional<int64_t> storage_offset = std::nullopt) const;
  Tensor contiguous() const;
  Tensor clone() const;
  Tensor to(DType dtype) const;
  // non_blocking: a copy between a GPU and pinned host memory returns once queued on the current
  // stream (to the host: the data is there after a synchronize), as torch's non_blocking=True;
  // any other copy completes first.
  Tensor to(Device device, bool non_blocking = false) const;
  // A copy in page-locked host memory (this tensor when it already is), for fast and
  // asynchronous transfers to a GPU; RuntimeError without a CUDA device.
  Tensor pin_memory() const;
  bool is_pinned() const;

  // ---- arithmetic (tessera/ops/elementwise.h) ----
  Tensor add(const Tensor& other, const Scalar& alpha = 1) const;
  Tensor sub(const Tensor& other, const Scalar& alpha = 1) const;
  Tensor mul(const Tensor& other) const;
  Tensor div(const Tensor& other) const;
  Tensor pow(const Tensor& exponent) const;
  Tensor pow(const Scalar& exponent) const;
  Tensor neg() const;
  Tensor abs() const;
  Tensor exp() const;
  Tensor log() const;
  Tensor sqrt() const;
  Tensor rsqrt() const;
  Tensor tanh() const;
  Tensor sigmoid() const;
  Tensor relu() const;
  Tensor square() const;
  Tensor clamp(std::optional<Scalar> min, std::optional<Scalar> max) const;
  Tensor eq(const Tensor& other) const;
  Tensor ne(const Tensor& other) const;
  Tensor lt(const Tensor& other) const;
  Tensor le(const Tensor& other) const;
  Tensor gt(const Tensor& other) const;
  Tensor ge(const Tensor& other) const;
  Tensor masked_fill(const Tensor& mask, const Scalar& value) const;

  // ---- in place (bump the version counter) ----
  Tensor& add_(const Tensor& other, const Scalar& alpha = 1);
  Tensor& sub_(const Tensor& other, const Scalar& alpha = 1);
  Tensor& mul_(const Tensor& other);
  Tensor& div_(const Tensor& other);
  Tensor& add_(const Scalar& other);
  Tensor& mul_(const Scalar& other);
  Tensor& zero_();
  Tensor& fill_(const Scalar& value);
  Tensor& copy_(const Tensor& src, bool non_blocking = false);
  Tensor& clamp_(std::optional<Scalar> min, std::optional<Scalar> max);
  Tensor& masked_fill_(const Tensor& mask, const Scalar& value);

  // ---- reductions (tessera/ops/reduce.h) ----
  Tensor sum(const Shape& dims = {}, bool keepdim = false) const;
  Tensor mean(const Shape& dims = {}, bool keepdim = false) const;
  Tensor max() const;
  Tensor min() const;
  Tensor argmax(std::optional<int64_t> dim = std::nullopt, bool keepdim = false) const;

  // ---- linear algebra (tessera/ops/linalg.h) ----
  Tensor matmul(const Tensor& other) const;
  Tensor mm(const Tensor& other) const;

 private:
  TensorImpl* checked() const {
    TESSERA_CHECK(impl_ != nullptr, RuntimeError,
                  "[tensor] expected a defined tensor, got an undefined (empty) handle");
    return impl_.get();
  }
  std::shared_ptr<TensorImpl> impl_;
};

using TensorList = std::vector<Tensor>;

std::ostream& operator<<(std::ostream& os, const Tensor& t);

// Arithmetic and comparison operators with tensors and scalars.
Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, const Scalar& b);
Tensor operator-(const Tensor& a, const Scalar& b);
Tensor operator*(const Tensor& a, const Scalar& b);
Tensor operator/(const Tensor& a, const Scalar& b);
Tensor operator+(const Scalar& a, const Tensor& b);
Tensor operator-(const Scalar& a, const Tensor& b);
Tensor operator*(const Scalar& a, const Tensor& b);
Tensor operator/(const Scalar& a, const Tensor& b);
Tensor operator-(const Tensor& a);
Tensor& operator+=(Tensor& a, const Tensor& b);
Tensor& operator-=(Tensor& a, const Tensor& b);
Tensor& operator*=(Tensor& a, const Tensor& b);
Tensor& operator/=(Tensor& a, const Tensor& b);
Tensor operator==(const Tensor& a, const Tensor& b);
Tensor operator!=(const Tensor& a, const Tensor& b);
Tensor operator<(const Tensor& a, const Tensor& b);
Tensor operator<=(const Tensor& a, const Tensor& b);
Tensor operator>(const Tensor& a, const Tensor& b);
Tensor operator>=(const Tensor& a, const Tensor& b);
Tensor operator==(const Tensor& a, const Scalar& b);
Tensor operator!=(const Tensor& a, const Scalar& b);
Tensor operator<(const Tensor& a, const Scalar& b);
Tensor operator<=(const Tensor& a, const Scalar& b);
Tensor operator>(const Tensor& a, const Scalar& b);
Tensor operator>=(const Tensor& a, const Scalar& b);

// Normalises a possibly negative dim into [0, ndim); throws IndexError naming op otherwise.
int64_t wrap_dim(int64_t dim, int64_t ndim, std::string_view op);

// t as an op's optional tensor argument (a bias, a norm's weight): nullopt when undefined.
inline std::optional<Tensor> if_defined(const Tensor& t) {
  return t.defined() ? std::optional<Tensor>(t) : std::nullopt;
}

}  // namespace tessera
