#pragma once
// The one strided/broadcasting elementwise iterator. An op adds its output(s) (already allocated
// with the broadcast shape) and inputs; build() aligns every operand to the output shape (stride
// 0 on broadcast dims), drops size-1 dims and merges dims that are contiguous for all operands.
// Backends then walk the result in runs along the innermost dim (cpu/loops.h splits the runs
// across threads).
#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "tessera/core/broadcast.h"
#include "tessera/core/kernel_capture.h"
#include "tessera/core/tensor.h"

namespace tessera {


class TensorIterator {
 public:
  static constexpr int kMaxOperands = 8;

  explicit TensorIterator(std::string_view op) : op_(op) {}
  TensorIterator& add_output(const Tensor& t);
  TensorIterator& add_input(const Tensor& t);
  // Lays out the operands; inputs must broadcast to the first output's shape.
  TensorIterator& build();

  std::string_view op() const { return op_; }
  int ntensors() const { return static_cast<int>(tensors_.size()); }
  int noutputs() const { return noutputs_; }
  int64_t numel() const { return numel_; }
  int ndim() const { return static_cast<int>(shape_.size()); }
  const Shape& shape() const { return shape_; }
  const Shape& byte_strides(int arg) const { return strides_[arg]; }
  char* data(int arg) const { return static_cast<char*>(tensors_[arg].data_ptr()); }
  DType dtype(int arg) const { return tensors_[arg].dtype(); }
  const Tensor& tensor(int arg) const { return tensors_[arg]; }
  Device device() const { return tensors_[0].device(); }

  // Calls loop(char** ptrs, const int64_t* inner_byte_strides, int64_t n) on runs covering the
  // linear range [begin, end).
  template <class Loop>
  void serial_for_each(Loop&& loop, int64_t begin, int64_t end) const {
    const int nd = ndim(), nt = ntensors();
    std::array<int64_t, 16> idx{};
    std::array<char*, kMaxOperands> ptrs{};
    std::array<int64_t, kMaxOperands> inner{};
    for (int k = 0; k < nt; ++k) inner[k] = strides_[k][nd - 1];
    int64_t rem = begin;
    for (int d = nd - 1; d >= 0; --d) {
      idx[d] = rem % shape_[d];
      rem /= shape_[d];
    }
    int64_t pos = begin;
    while (pos < end) {
      for (int k = 0; k < nt; ++k) {
        char* p = data(k);
        for (int d = 0; d < nd; ++d) p += idx[d] * strides_[k][d];
        ptrs[k] = p;
      }
      int64_t n = std::min(shape_[nd - 1] - idx[nd - 1], end - pos);
      loop(ptrs.data(), inner.data(), n);
      pos += n;
      idx[nd - 1] += n;
      for (int d = nd - 1; d > 0 && idx[d] == shape_[d]; --d) {
        idx[d] = 0;
        ++idx[d - 1];
      }
    }
  }

 private:
  std::string_view op_;
  std::vector<Tensor> tensors_;
  int noutputs_ = 0;
  Shape shape_;
  std::vector<Shape> strides_;  // bytes, per operand, aligned to shape_
  int64_t numel_ = 0;
};

// The iterator's operands for graph capture (core/kernel_capture.h): outputs are written.
inline void capture_tensors(const TensorIterator& it, std::vector<detail::CapturedTensor>& out,
                            bool&) {
  for (int k = 0; k < it.ntensors(); ++k) out.push_back({it.tensor(k), k < it.noutputs()});
}

}  // namespace tessera
