// CUDA softmax, log_softmax and safe softmax along the middle axis of a contiguous
// [outer, n, inner] tensor, and their backward, with the CPU's semantics: opmath arithmetic, a
// nan or +inf in a slice makes it all nan, an all -inf slice gives nan except in the safe
// softmax, where it gives 0.
//
// Rows (inner == 1: attention scores, vocabulary logits) take one of two kernels:
//  - n <= 1024 (512 for double): a group of up to 32 lanes per row keeps the row in registers,
//    so it is read once and every reduction is a warp shuffle;
//  - longer rows: one block per row makes an online max/sum pass and a write pass, whose second
//    read of the row mostly hits L1/L2.
// Both load 16-byte vectors where the pointers allow. Other axes (inner > 1) give each thread a
// column, threadIdx.x along inner so loads coalesce; when there are too few columns to fill the
// GPU, blockDim.y threads split each column's n entries and combine through shared memory.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <utility>

#include "backend/common/nn_kernels.h"
#include "backend/cuda/context.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/online_softmax.cuh"
#include "backend/cuda/row_launch.cuh"
#include "backend/cuda/vectorized.cuh"
#include "backend/cuda/warp.cuh"
#include "tessera/core/dtype_dispatch.h"

namespace tessera::cuda {
namespace {

// The most threads any block of this file is launched with (one such block per SM lets kernels
// bounded by it keep 64 registers).
constexpr int kMaxThreads = 1024;

// One forward output from the slice's max m and exponential sum s (log_s = log s, inv = 1 / s);
// `zero` marks an all -inf slice of the safe softmax.
template <class A>
__device__ A softmax_value(A v, A m, A log_s, A inv, bool log, bool zero) {
  if (log) return v - m - log_s;
  return zero ? A(0) : exp_from(v, m) * inv;
}

// ---- rows (inner == 1), n <= kMaxWarpRow<T>: `width` lanes per row, ELEMS values each ----

template <class T, int ELEMS, int VEC>
__global__ void softmax_warp_kernel(T* __restrict__ y, const T* __restrict__ x, int64_t rows, int n,
                                    int group_width, SoftmaxKind kind) {
  using A = opmath_t<T>;
  // Rows of more than 32 vectors take whole warps: a constant width turns offsets into immediates.
  const int width = ELEMS > kVec<T> ? kWarp : group_width;
  const unsigned mask = group_mask(width);
  const int lane = threadIdx.x & (width - 1);
  const bool log = kind == SoftmaxKind::LogSoftmax, safe = kind == SoftmaxKind::SafeSoftmax;
  for (int64_t row = first_row(width); row < rows; row += row_stride(width)) {
    const T* xr = x + row * n;
    T* yr = y + row * n;
    A v[ELEMS];
    A m = neg_inf<A>();
#pragma unroll
    for (int j = 0; j < ELEMS / VEC; ++j) {
      const int i = (j * width + lane) * VEC;
      if (i < n) {
        load<VEC>(v + j * VEC, xr + i);
      } else {
#pragma unroll
        for (int k = 0; k < VEC; ++k) v[j * VEC + k] = neg_inf<A>();
      }
#pragma unroll
      for (int k = 0; k < VEC; ++k) m = v[j * VEC + k] > m ? v[j * VEC + k] : m;
    }
    m = group_max(m, mask, width);
    A s = 0;
#pragma unroll
    for (int e = 0; e < ELEMS; ++e) {
      const A ex = exp_from(v[e], m);
      s += ex;
      if (!log) v[e] = ex;
    }
    s = group_sum(s, mask, width);
    const A log_s = std::log(s), inv = A(1) / s;
    const bool zero = safe && s == A(0);
#pragma unroll
    for (int e = 0; e < ELEMS; ++e) v[e] = log ? v[e] - m - log_s : zero ? A(0) : v[e] * inv;
#pragma unroll
    for (int j = 0; j < ELEMS / VEC; ++j) {
      const int i = (j * width + lane) * VEC;
      if (i < n) store<VEC>(yr + i, v + j * VEC);
    }
  }
}

template <class T, int ELEMS, int VEC>
__global__ void softmax_backward_warp_kernel(T* __restrict__ dx, const T* __restrict__ g,
                                             const T* __restrict__ y, int64_t rows, int n,
                                             int group_width, bool log) {
  using A = opmath_t<T>;
  // Rows of more than 32 vectors take whole warps: a constant width turns offsets into immediates.
  const int width = ELEMS > kVec<T> ? kWarp : group_width;
  const unsigned mask = group_mask(width);
  const int lane = threadIdx.x & (width - 1);
  for (int64_t row = first_row(width); row < rows; row += row_stride(width)) {
    const int64_t off = row * n;
    A gv[ELEMS], yv[ELEMS];
    A s = 0;
#pragma unroll
    for (int j = 0; j < ELEMS / VEC; ++j) {
      const int i = (j * width + lane) * VEC;
      if (i < n) {
        load<VEC>(gv + j * VEC, g + off + i);
        load<VEC>(yv + j * VEC, y + off + i);
      } else {
#pragma unroll
        for (int k = 0; k < VEC; ++k) gv[j * VEC + k] = yv[j * VEC + k] = A(0);
      }
#pragma unroll
      for (int k = 0; k < VEC; ++k) s += log ? gv[j * VEC + k] : gv[j * VEC + k] * yv[j * VEC + k];
    }
    s = group_sum(s, mask, width);
#pragma unroll
    for (int e = 0; e < ELEMS; ++e) gv[e] = log ? gv[e] - std::exp(yv[e]) * s : yv[e] * (gv[e] - s);
#pragma unroll
    for (int j = 0; j < ELEMS / VEC; ++j) {
      const int i = (j * width + lane) * VEC;
      if (i < n) store<VEC>(dx + off + i, gv + j * VEC);
    }
  }
}

// ---- rows (inner == 1), longer: one block per row ----

template <class T, int VEC>
__global__ void __launch_bounds__(kMaxThreads, 1)
    softmax_block_kernel(T* __restrict__ y, const T* __restrict__ x, int64_t n, SoftmaxKind kind) {
  using A = opmath_t<T>;
  const T* xr = x + int64_t{blockIdx.x} * n;
  T* yr = y + int64_t{blockIdx.x} * n;
  A m = neg_inf<A>(), s = 0;
  for_each_chunk<VEC>(xr, n, [&](int64_t i, auto w) {
    constexpr int W = decltype(w)::value;
    A v[W];
    load<W>(v, xr + i);
    online_add<W>(m, s, v);
  });
  block_max_sum(m, s);
  const bool log = kind == SoftmaxKind::LogSoftmax;
  const bool zero = kind == SoftmaxKind::SafeSoftmax && s == A(0);
  const A log_s = std::log(s), inv = A(1) / s;
  for_each_chunk<VEC>(xr, n, [&](int64_t i, auto w) {
    constexpr int W = decltype(w)::value;
    A v[W];
    load<W>(v, xr + i);
#pragma unroll
    for (int k = 0; k < W; ++k) v[k] = softmax_value(v[k], m, log_s, inv, log, zero);
    store<W>(yr + i, v);
  });
}

template <class T, int VEC>
__global__ void __launch_bounds__(kMaxThreads, 1)
    softmax_backward_block_kernel(T* __restrict__ dx, const T* __restrict__ g,
                                  const T* __restrict__ y, int64_t n, bool log) {
  using A = opmath_t<T>;
  const int64_t off = int64_t{blockIdx.x} * n;
  A s = 0;
  for_each_chunk<VEC>(g + off, n, [&](int64_t i, auto w) {
    constexpr int W = decltype(w)::value;
    A gv[W], yv[W];
    load<W>(gv, g + off + i);
    load<W>(yv, y + off + i);
#pragma unroll
    for (int k = 0; k < W; ++k) s += log ? gv[k] : gv[k] * yv[k];
  });
  s = block_sum(s);
  for_each_chunk<VEC>(g + off, n, [&](int64_t i, auto w) {
    constexpr int W = decltype(w)::value;
    A gv[W], yv[W];
    load<W>(gv, g + off + i);
    load<W>(yv, y + off + i);
#pragma unroll
    for (int k = 0; k < W; ++k) gv[k] = log ? gv[k] - std::exp(yv[k]) * s : yv[k] * (gv[k] - s);
    store<W>(dx + off + i, gv);
  });
}

// ---- other axes (inner > 1): block (nx, ny) per tile of nx columns ----

// Column c of the flattened [outer, inner] columns starts at element base(c); its entries are
// inner apart.
__device__ int64_t column_base(int64_t c, int64_t n, int64_t inner) {
  return c / inner * n * inner + c % inner;
}

template <class T>
__global__ void __launch_bounds__(kMaxThreads, 1)
    softmax_columns_kernel(T* __restrict__ y, const T* __restrict__ x, int64_t outer, int64_t n,
                           int64_t inner, SoftmaxKind kind) {
  using A = opmath_t<T>;
  extern __shared__ __align__(16) unsigned char smem[];
  A* sm = reinterpret_cast<A*>(smem);
  A* ss = sm + blockDim.x * blockDim.y;
  const int64_t cols = outer * inner, tiles = (cols + blockDim.x - 1) / blockDim.x;
  const bool log = kind == SoftmaxKind::LogSoftmax, safe = kind == SoftmaxKind::SafeSoftmax;
  // The tile loop is uniform over the block, so the barriers inside it are safe.
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int64_t c = tile * blockDim.x + threadIdx.x;
    const bool active = c < cols;
    const int64_t base = active ? column_base(c, n, inner) : 0;
    A m = neg_inf<A>(), s = 0;
    if (active) {
#pragma unroll 4
      for (int64_t r = threadIdx.y; r < n; r += blockDim.y) {
        const A v = static_cast<A>(x[base + r * inner]);
        online_add<1>(m, s, &v);
      }
    }
    if (blockDim.y > 1) {
      sm[threadIdx.y * blockDim.x + threadIdx.x] = m;
      ss[threadIdx.y * blockDim.x + threadIdx.x] = s;
      __syncthreads();
      m = neg_inf<A>();
      s = 0;
      for (unsigned k = 0; k < blockDim.y; ++k)
        online_merge(m, s, sm[k * blockDim.x + threadIdx.x], ss[k * blockDim.x + threadIdx.x]);
      __syncthreads();  // the next tile reuses the slots
    }
    if (!active) continue;
    const bool zero = safe && s == A(0);
    const A log_s = std::log(s), inv = A(1) / s;
#pragma unroll 4
    for (int64_t r = threadIdx.y; r < n; r += blockDim.y) {
      const A v = static_cast<A>(x[base + r * inner]);
      y[base + r * inner] = static_cast<T>(softmax_value(v, m, log_s, inv, log, zero));
    }
  }
}

template <class T>
__global__ void __launch_bounds__(kMaxThreads, 1)
    softmax_backward_columns_kernel(T* __restrict__ dx, const T* __restrict__ g,
                                    const T* __restrict__ y, int64_t outer, int64_t n,
                                    int64_t inner, bool log) {
  using A = opmath_t<T>;
  extern __shared__ __align__(16) unsigned char smem[];
  A* part = reinterpret_cast<A*>(smem);
  const int64_t cols = outer * inner, tiles = (cols + blockDim.x - 1) / blockDim.x;
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int64_t c = tile * blockDim.x + threadIdx.x;
    const bool active = c < cols;
    const int64_t base = active ? column_base(c, n, inner) : 0;
    A s = 0;
    if (active) {
#pragma unroll 4
      for (int64_t r = threadIdx.y; r < n; r += blockDim.y) {
        const A gv = static_cast<A>(g[base + r * inner]);
        s += log ? gv : gv * static_cast<A>(y[base + r * inner]);
      }
    }
    if (blockDim.y > 1) {
      part[threadIdx.y * blockDim.x + threadIdx.x] = s;
      __syncthreads();
      s = 0;
      for (unsigned k = 0; k < blockDim.y; ++k) s += part[k * blockDim.x + threadIdx.x];
      __syncthreads();
    }
    if (!active) continue;
#pragma unroll 4
    for (int64_t r = threadIdx.y; r < n; r += blockDim.y) {
      const int64_t at = base + r * inner;
      const A gv = static_cast<A>(g[at]), yv = static_cast<A>(y[at]);
      dx[at] = static_cast<T>(log ? gv - std::exp(yv) * s : yv * (gv - s));
    }
  }
}

// ---- launch configuration ----

template <class... P>
bool all_aligned(const P*... p) {
  return ((reinterpret_cast<uintptr_t>(p) % kVecBytes == 0) && ...);
}

template <class P0, class... P>
bool same_residue(const P0* p0, const P*... p) {
  const uintptr_t r = reinterpret_cast<uintptr_t>(p0) % kVecBytes;
  return ((reinterpret_cast<uintptr_t>(p) % kVecBytes == r) && ...);
}

// Threads of a one-block-per-row kernel: about 8 vectors each, 128 to 1024.
int row_block_threads(int64_t n, int vec) {
  return std::clamp(pow2_ceil((n / vec + 7) / 8), 128, kMaxThreads);
}

// One block per row (rows this long cannot be numerous enough to pass the grid's 2^31 limit).
unsigned rows_grid(int64_t rows) { return static_cast<unsigned>(rows); }

// Column kernels: blockDim.x adjacent columns (32, fewer when there are fewer), and rows of the
// block split each column only while there are too few columns to give every SM a couple of
// thousand threads.
dim3 column_block(int64_t cols, int64_t n) {
  const unsigned nx = std::min(pow2_ceil(cols), kWarp);
  const int64_t tiles = (cols + nx - 1) / nx;
  const int64_t target = int64_t{device_properties().multiProcessorCount} * 2048;
  unsigned ny = 1;
  while (nx * ny < kMaxThreads && 2 * ny <= n && tiles * ny * nx < target) ny *= 2;
  return dim3(nx, ny);
}

void softmax(const Tensor& out, const Tensor& in, int64_t outer, int64_t n, int64_t inner,
             SoftmaxKind kind) {
  dispatch<kFloatingTypes>(in.dtype(), "softmax", [&]<class T>() {
    using A = opmath_t<T>;
    const T* x = in.data_ptr<T>();
    T* y = out.data_ptr<T>();
    cudaStream_t stream = current_stream();
    if (inner > 1) {
      const dim3 block = column_block(outer * inner, n);
      const size_t smem = block.y > 1 ? 2 * sizeof(A) * block.x * block.y : 0;
      softmax_columns_kernel<T>
          <<<grid_size(outer * inner, block.x), block, smem, stream>>>(y, x, outer, n, inner, kind);
    } else if (n <= kMaxWarpRow<T>) {
      with_warp_config<T>(n, all_aligned(x, y), [&]<int ELEMS, int VEC>(int width) {
        softmax_warp_kernel<T, ELEMS, VEC>
            <<<grid_size(outer * width, kRowsBlock), kRowsBlock, 0, stream>>>(
                y, x, outer, static_cast<int>(n), width, kind);
      });
    } else if (same_residue(x, y)) {
      softmax_block_kernel<T, kVec<T>>
          <<<rows_grid(outer), row_block_threads(n, kVec<T>), 0, stream>>>(y, x, n, kind);
    } else {
      softmax_block_kernel<T, 1>
          <<<rows_grid(outer), row_block_threads(n, 1), 0, stream>>>(y, x, n, kind);
    }
    TESSERA_CUDA_CHECK_LAUNCH();
  });
}

void softmax_backward(const Tensor& grad_in, const Tensor& grad_out, const Tensor& out,
                      int64_t outer, int64_t n, int64_t inner, SoftmaxKind kind) {
  dispatch<kFloatingTypes>(out.dtype(), "softmax_backward", [&]<class T>() {
    using A = opmath_t<T>;
    T* dx = grad_in.data_ptr<T>();
    const T* g = grad_out.data_ptr<T>();
    const T* y = out.data_ptr<T>();
    const bool log = kind == SoftmaxKind::LogSoftmax;
    cudaStream_t stream = current_stream();
    if (inner > 1) {
      const dim3 block = column_block(outer * inner, n);
      const size_t smem = block.y > 1 ? sizeof(A) * block.x * block.y : 0;
      softmax_backward_columns_kernel<T>
          <<<grid_size(outer * inner, block.x), block, smem, stream>>>(dx, g, y, outer, n, inner,
                                                                       log);
    } else if (n <= kMaxWarpRow<T>) {
      with_warp_config<T>(n, all_aligned(dx, g, y), [&]<int ELEMS, int VEC>(int width) {
        softmax_backward_warp_kernel<T, ELEMS, VEC>
            <<<grid_size(outer * width, kRowsBlock), kRowsBlock, 0, stream>>>(
                dx, g, y, outer, static_cast<int>(n), width, log);
      });
    } else if (same_residue(dx, g, y)) {
      softmax_backward_block_kernel<T, kVec<T>>
          <<<rows_grid(outer), row_block_threads(n, kVec<T>), 0, stream>>>(dx, g, y, n, log);
    } else {
      softmax_backward_block_kernel<T, 1>
          <<<rows_grid(outer), row_block_threads(n, 1), 0, stream>>>(dx, g, y, n, log);
    }
    TESSERA_CUDA_CHECK_LAUNCH();
  });
}

TESSERA_REGISTER_KERNEL(softmax_kernel, DeviceType::CUDA, &softmax);
TESSERA_REGISTER_KERNEL(softmax_backward_kernel, DeviceType::CUDA, &softmax_backward);

}  // namespace
}  // namespace tessera::cuda
