#include "tessera/core/tensor.h"

#include <cmath>
#include <iomanip>
#include <sstream>

#include "tessera/core/dtype_dispatch.h"

namespace tessera {

Shape contiguous_strides(const Shape& sizes) {
  Shape strides(sizes.size());
  int64_t s = 1;
  for (int64_t i = static_cast<int64_t>(sizes.size()) - 1; i >= 0; --i) {
    strides[i] = s;
    s *= std::max<int64_t>(sizes[i], 1);
  }
  return strides;
}

int64_t shape_numel(const Shape& sizes) {
  for (int64_t s : sizes)
    TESSERA_CHECK(s >= 0, ValueError, "[shape] expected non-negative sizes, got ", sizes);
  int64_t n = 1;
  for (int64_t s : sizes) {
    if (s == 0) return 0;
    TESSERA_CHECK(!__builtin_mul_overflow(n, s, &n), ValueError,
                  "[shape] expected fewer than 2^63 elements, got shape ", sizes);
  }
  return n;
}

int64_t view_extent(const Shape& sizes, const Shape& strides, std::string_view op) {
  int64_t extent = 1;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] == 0) return 0;
    int64_t span = 0;
    TESSERA_CHECK(!__builtin_mul_overflow(sizes[i] - 1, strides[i], &span) &&
                      !__builtin_add_overflow(extent, span, &extent),
                  ValueError, "[", op, "] expected a view of fewer than 2^63 elements, got sizes ",
                  sizes, " and strides ", strides);
  }
  return extent;
}

TensorImpl::TensorImpl(Storage storage, Shape sizes, Shape strides, int64_t offset, DType dtype)
    : storage_(std::move(storage)),
      sizes_(std::move(sizes)),
      strides_(std::move(strides)),
      offset_(offset),
      dtype_(dtype) {
  TESSERA_ASSERT(sizes_.size() == strides_.size());
  refresh();
}

void TensorImpl::set_data(Storage storage, Shape sizes, Shape strides, int64_t offset,
                          DType dtype) {
  storage_ = std::move(storage);
  sizes_ = std::move(sizes);
  strides_ = std::move(strides);
  offset_ = offset;
  dtype_ = dtype;
  refresh();
  if (autograd_) autograd_->view_base.reset();  // no longer aliases its base
}

void TensorImpl::refresh() {
  numel_ = shape_numel(sizes_);
  contiguous_ = true;
  if (numel_ == 0) return;  // an empty tensor is contiguous whatever its strides (torch's rule)
  int64_t expected = 1;
  for (int64_t i = dim() - 1; i >= 0; --i) {
    if (sizes_[i] == 1) continue;
    if (strides_[i] != expected) {
      contiguous_ = false;
      break;
    }
    expected *= sizes_[i];
  }
}

AutogradMeta& TensorImpl::ensure_autograd_meta() {
  if (!autograd_) autograd_ = std::make_unique<AutogradMeta>();
  return *autograd_;
}

int64_t wrap_dim(int64_t dim, int64_t ndim, std::string_view op) {
  int64_t n = std::max<int64_t>(ndim, 1);  // a 0-d tensor accepts dim 0 and -1
  TESSERA_CHECK(dim >= -n && dim < n, IndexError, "[", op, "] expected dim in [", -n, ", ", n - 1,
                "], got ", dim);
  return dim < 0 ? dim + n : dim;
}

int64_t Tensor::size(int64_t d) const { return sizes()[wrap_dim(d, dim(), "size")]; }
int64_t Tensor::stride(int64_t d) const { return strides()[wrap_dim(d, dim(), "stride")]; }

namespace {
// Byte offset of the element with linear (row-major) index i in a strided view.
int64_t strided_offset(const Shape& sizes, const Shape& strides, int64_t i) {
  int64_t off = 0;
  for (int64_t d = static_cast<int64_t>(sizes.size()) - 1; d >= 0; --d) {
    off += (i % sizes[d]) * strides[d];
    i /= sizes[d];
  }
  return off;
}
}  // namespace

template <class T>
T Tensor::item() const {
  TESSERA_CHECK(numel() == 1, ValueError, "[item] expected a tensor with one element, got shape ",
                sizes());
  if (!device().is_cpu()) return to(kCPU).item<T>();
  return dispatch(dtype(), "item", [&]<class S>() -> T {
    S v = *static_cast<const S*>(data_ptr());
    if constexpr (std::is_same_v<S, Half> || std::is_same_v<S, BFloat16>)
      return static_cast<T>(static_cast<float>(v));
    else
      return static_cast<T>(v);
  });
}
template float Tensor::item<float>() const;
template double Tensor::item<double>() const;
template int64_t Tensor::item<int64_t>() const;
template int32_t Tensor::item<int32_t>() const;
template bool Tensor::item<bool>() const;

Scalar Tensor::item() const {
  if (is_floating(dtype())) return Scalar(item<double>());
  if (dtype() == kBool) return Scalar(item<bool>());
  return Scalar(item<int64_t>());
}

std::string Tensor::shape_str() const { return detail::str(sizes()); }

std::string Tensor::str() const {
  if (!defined()) return "tensor(undefined)";
  if (!device().is_cpu()) {  // printed from a host copy, with its device named
    std::string s = to(kCPU).detach().str();
    s.pop_back();
    s += ", device=" + device().str();
    if (requires_grad()) s += ", requires_grad=True";
    return s + ")";
  }
  std::ostringstream os;
  os << "tensor(";
  {
    const int64_t n = numel(), limit = 64;
    const Shape& sz = sizes();
    auto* base = static_cast<const char*>(data_ptr());
    os << std::setprecision(6);
    // Prints nested brackets; for large tensors only the first `limit` values. A bracket opens
    // (closes) for every trailing dim whose index wraps at element i (i + 1).
    auto wraps = [&](int64_t idx) {
      int64_t k = 0;
      for (int64_t d = dim() - 1; d >= 0 && idx % sz[d] == 0; --d) {
        ++k;
        idx /= sz[d];
      }
      return k;
    };
    for (int64_t i = 0; i < std::min(n, limit); ++i) {
      int64_t open = wraps(i);
      if (i > 0) os << (open ? "," : ", ");
      if (i > 0 && open) os << "\n" << std::string(7 + dim() - open, ' ');
      os << std::string(open, '[');
      int64_t off = strided_offset(sz, strides(), i) * static_cast<int64_t>(element_size());
      dispatch(dtype(), "print", [&]<class T>() {
        T v = *reinterpret_cast<const T*>(base + off);
        if constexpr (std::is_same_v<T, bool>)
          os << (v ? "True" : "False");
        else if constexpr (std::is_integral_v<T>)
          os << static_cast<int64_t>(v);
        else
          os << static_cast<double>(v);
      });
      os << std::string(wraps(i + 1), ']');
    }
    if (n > limit) os << ", ...";
  }
  os << ", shape=" << detail::str(sizes()) << ", dtype=" << dtype();
  if (requires_grad()) os << ", requires_grad=True";
  os << ")";
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.str(); }

}  // namespace tessera
