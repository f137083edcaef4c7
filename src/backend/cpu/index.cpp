// CPU gather/scatter/index kernels. Parallel loops only split work whose writes are disjoint:
// rows of the output for gathers, (outer row, column block) or index lines for scatters, so
// duplicate indices accumulate without atomics.
#include <omp.h>

#include <algorithm>
#include <limits>

#include "backend/common/index_kernels.h"
#include "tessera/core/dtype_dispatch.h"

namespace tessera::cpu {
namespace {

constexpr int64_t kGrain = 32768;  // elements below which loops stay serial

template <class F>
decltype(auto) dispatch_index(const Tensor& index, F&& f) {
  return dispatch<kIndexTypes>(index.dtype(), "index", std::forward<F>(f));
}

std::array<int64_t, 2> index_range(const Tensor& index) {
  return dispatch_index(index, [&]<class I>() {
    const I* p = index.data_ptr<I>();
    const int64_t n = index.numel();
    int64_t lo = std::numeric_limits<int64_t>::max(), hi = std::numeric_limits<int64_t>::min();
#pragma omp parallel for reduction(min : lo) reduction(max : hi) if (n > kGrain)
    for (int64_t i = 0; i < n; ++i) {
      lo = std::min<int64_t>(lo, p[i]);
      hi = std::max<int64_t>(hi, p[i]);
    }
    return std::array<int64_t, 2>{lo, hi};
  });
}

void index_select(const Tensor& out, const Tensor& x, const Tensor& index, int64_t outer,
                  int64_t inner) {
  const int64_t m = index.numel();
  if (out.numel() == 0) return;
  const int64_t n = x.numel() / (outer * inner);
  dispatch(x.dtype(), "index_select", [&]<class T>() {
    dispatch_index(index, [&]<class I>() {
      const T* src = x.data_ptr<T>();
      const I* idx = index.data_ptr<I>();
      T* dst = out.data_ptr<T>();
      // One task per output row [o, i, :].
#pragma omp parallel for schedule(static) if (out.numel() > kGrain)
      for (int64_t row = 0; row < outer * m; ++row) {
        const int64_t o = row / m;
        const T* from = src + (o * n + static_cast<int64_t>(idx[row % m])) * inner;
        std::copy(from, from + inner, dst + row * inner);
      }
    });
  });
}

void index_add(const Tensor& out, const Tensor& src, const Tensor& index, int64_t outer,
               int64_t inner, const Scalar& alpha, int64_t skip) {
  const int64_t m = index.numel();
  if (src.numel() == 0) return;
  const int64_t n = out.numel() / (outer * inner);
  // Split inner into column blocks so that outer * blocks tasks keep every thread busy; each
  // task walks all of index for its own columns, so duplicates never race.
  const int64_t threads = src.numel() > kGrain ? omp_get_max_threads() : 1;
  const int64_t want = outer >= threads ? 1 : (threads + outer - 1) / outer;
  const int64_t blocks0 = std::clamp<int64_t>(want, 1, std::max<int64_t>(1, inner / 16));
  const int64_t block = (inner + blocks0 - 1) / blocks0;
  const int64_t blocks = (inner + block - 1) / block;
  dispatch<kNumericTypes>(out.dtype(), "index_add", [&]<class T>() {
    dispatch_index(index, [&]<class I>() {
      using A = opmath_t<T>;
      const A a = alpha.to<A>();
      const T* from = src.data_ptr<T>();
      const I* idx = index.data_ptr<I>();
      T* dst = out.data_ptr<T>();
#pragma omp parallel for schedule(static) if (threads > 1)
      for (int64_t task = 0; task < outer * blocks; ++task) {
        const int64_t o = task / blocks, r0 = (task % blocks) * block;
        const int64_t len = std::min(block, inner - r0);
        for (int64_t i = 0; i < m; ++i) {
          const int64_t v = idx[i];
          if (v == skip) continue;
          T* d = dst + (o * n + v) * inner + r0;
          const T* s = from + (o * m + i) * inner + r0;
          for (int64_t r = 0; r < len; ++r)
            d[r] = static_cast<T>(static_cast<A>(d[r]) + a * static_cast<A>(s[r]));
        }
      }
    });
  });
}

// Calls body(line_offsets) for every line of `shape` along dim: line_offsets[k] is the element
// offset of tensor k (strides[k]) at the line's first position. Lines run in parallel.
template <size_t N, class Body>
void for_each_line(const Shape& shape, int64_t dim, const std::array<const Shape*, N>& strides,
                   const Body& body) {
  const int64_t total = shape_numel(shape);
  if (total == 0) return;
  Shape sizes;
  std::array<Shape, N> st;
  for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d) {
    if (d == dim) continue;
    sizes.push_back(shape[d]);
    for (size_t k = 0; k < N; ++k) st[k].push_back((*strides[k])[d]);
  }
  const int64_t lines = total / shape[dim];
  const int64_t nd = static_cast<int64_t>(sizes.size());
#pragma omp parallel for schedule(static) if (total > kGrain && lines > 1)
  for (int64_t line = 0; line < lines; ++line) {
    std::array<int64_t, N> off{};
    int64_t rem = line;
    for (int64_t d = nd - 1; d >= 0; --d) {
      const int64_t c = rem % sizes[d];
      rem /= sizes[d];
      for (size_t k = 0; k < N; ++k) off[k] += c * st[k][d];
    }
    body(off);
  }
}

void gather(const Tensor& out, const Tensor& x, const Tensor& index, int64_t dim) {
  dispatch(x.dtype(), "gather", [&]<class T>() {
    dispatch_index(index, [&]<class I>() {
      const T* src = x.data_ptr<T>();
      const I* idx = index.data_ptr<I>();
      T* dst = out.data_ptr<T>();
      const int64_t n = index.sizes()[dim], xs = x.strides()[dim], is = index.strides()[dim],
                    os = out.strides()[dim];
      for_each_line<3>(index.sizes(), dim, {&out.strides(), &x.strides(), &index.strides()},
                       [&](const std::array<int64_t, 3>& off) {
                         for (int64_t k = 0; k < n; ++k)
                           dst[off[0] + k * os] =
                               src[off[1] + static_cast<int64_t>(idx[off[2] + k * is]) * xs];
                       });
    });
  });
}

void scatter(const Tensor& out, const Tensor& index, const Tensor& src, int64_t dim,
             ScatterMode mode) {
  dispatch(out.dtype(), mode == ScatterMode::Add ? "scatter_add" : "scatter", [&]<class T>() {
    dispatch_index(index, [&]<class I>() {
      using A = opmath_t<T>;
      const T* from = src.data_ptr<T>();
      const I* idx = index.data_ptr<I>();
      T* dst = out.data_ptr<T>();
      const int64_t n = index.sizes()[dim], os = out.strides()[dim], is = index.strides()[dim],
                    ss = src.strides()[dim];
      // Lines differ in some coordinate other than dim, so they write disjoint elements.
      for_each_line<3>(index.sizes(), dim, {&out.strides(), &index.strides(), &src.strides()},
                       [&](const std::array<int64_t, 3>& off) {
                         for (int64_t k = 0; k < n; ++k) {
                           T& d = dst[off[0] + static_cast<int64_t>(idx[off[1] + k * is]) * os];
                           const T s = from[off[2] + k * ss];
                           if constexpr (std::is_same_v<T, bool>) {
                             d = mode == ScatterMode::Add ? (d || s) : s;
                           } else {
                             d = mode == ScatterMode::Add
                                     ? static_cast<T>(static_cast<A>(d) + static_cast<A>(s))
                                     : s;
                           }
                         }
                       });
    });
  });
}

void mask_positions(const Tensor& positions, const Tensor& mask) {
  const bool* m = mask.data_ptr<bool>();
  int64_t* p = positions.data_ptr<int64_t>();
  const int64_t n = mask.numel();
  int64_t k = 0;
  for (int64_t i = 0; i < n; ++i)
    if (m[i]) p[k++] = i;
}

void triangle(const Tensor& out, const Tensor& x, int64_t k, bool lower) {
  const int64_t R = out.sizes()[out.dim() - 2], C = out.sizes()[out.dim() - 1];
  if (out.numel() == 0) return;
  const int64_t rows = out.numel() / C;
  dispatch(x.dtype(), lower ? "tril" : "triu", [&]<class T>() {
    const T* src = x.data_ptr<T>();
    T* dst = out.data_ptr<T>();
#pragma omp parallel for schedule(static) if (out.numel() > kGrain)
    for (int64_t row = 0; row < rows; ++row) {
      const int64_t r = row % R;
      // Columns [begin, end) are kept.
      const int64_t cut = std::clamp<int64_t>(r + k + (lower ? 1 : 0), 0, C);
      const int64_t begin = lower ? 0 : cut, end = lower ? cut : C;
      const T* s = src + row * C;
      T* d = dst + row * C;
      for (int64_t c = 0; c < C; ++c) d[c] = c >= begin && c < end ? s[c] : T(0);
    }
  });
}

TESSERA_REGISTER_KERNEL(index_range_kernel, DeviceType::CPU, &index_range);
TESSERA_REGISTER_KERNEL(index_select_kernel, DeviceType::CPU, &index_select);
TESSERA_REGISTER_KERNEL(index_add_kernel, DeviceType::CPU, &index_add);
TESSERA_REGISTER_KERNEL(gather_kernel, DeviceType::CPU, &gather);
TESSERA_REGISTER_KERNEL(scatter_kernel, DeviceType::CPU, &scatter);
TESSERA_REGISTER_KERNEL(mask_positions_kernel, DeviceType::CPU, &mask_positions);
TESSERA_REGISTER_KERNEL(triangle_kernel, DeviceType::CPU, &triangle);

}  // namespace
}  // namespace tessera::cpu
