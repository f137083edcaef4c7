// CUDA layer norm and RMS norm forward (with the fused residual add); the backward is in
// norm_backward.cu. The CPU's semantics: opmath arithmetic, two-pass statistics (mean, then the
// centred sum of squares), float statistics (double for float64).
//
// Row kernels (forward, and the backward's dx) come in two shapes:
//  - n <= 1024 (512 for double): a group of up to 32 lanes per row keeps the row in registers,
//    so it is read once and every reduction is a warp shuffle;
//  - longer rows: one block per row, each pass re-reading the row, which then mostly hits L1/L2.
// Both load 16-byte vectors when every operand is aligned and n is a multiple of the width.
#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "backend/common/nn_kernels.h"
#include "backend/cuda/context.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/norm_common.cuh"
#include "backend/cuda/row_launch.cuh"
#include "backend/cuda/vectorized.cuh"
#include "backend/cuda/warp.cuh"
#include "tessera/core/dtype_dispatch.h"

namespace tessera::cuda {
namespace {

// ---- forward, short rows: `width` lanes per row, ELEMS values each ----

template <class T, int ELEMS, int VEC>
__global__ void layer_norm_warp_kernel(T* __restrict__ y, opmath_t<T>* __restrict__ mean,
                                       opmath_t<T>* __restrict__ rstd, const T* __restrict__ x,
                                       const T* __restrict__ w, const T* __restrict__ b,
                                       int64_t rows, int n, int group_width, opmath_t<T> eps) {
  using A = opmath_t<T>;
  // Rows of more than 32 vectors take whole warps: a constant width turns offsets into immediates.
  const int width = ELEMS > kVec<T> ? kWarp : group_width;
  const unsigned mask = group_mask(width);
  const int lane = threadIdx.x & (width - 1);
  const A inv_n = A(1) / static_cast<A>(n);
  for (int64_t row = first_row(width); row < rows; row += row_stride(width)) {
    const int64_t off = row * n;
    A v[ELEMS];
    A s = 0;
#pragma unroll
    for (int j = 0; j < ELEMS / VEC; ++j) {
      const int i = (j * width + lane) * VEC;
      if (i < n) {
        load<VEC>(v + j * VEC, x + off + i);
#pragma unroll
        for (int k = 0; k < VEC; ++k) s += v[j * VEC + k];
      }
    }
    const A mu = group_sum(s, mask, width) * inv_n;
    A ss = 0;
#pragma unroll
    for (int j = 0; j < ELEMS / VEC; ++j)
      if ((j * width + lane) * VEC < n) {
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
          const A d = v[j * VEC + k] - mu;
          ss += d * d;
        }
      }
    const A rs = A(1) / std::sqrt(group_sum(ss, mask, width) * inv_n + eps);
#pragma unroll
    for (int j = 0; j < ELEMS / VEC; ++j) {
      const int i = (j * width + lane) * VEC;
      if (i >= n) continue;
      A o[VEC], p[VEC];
#pragma unroll
      for (int k = 0; k < VEC; ++k) o[k] = (v[j * VEC + k] - mu) * rs;
      if (w) {
        load<VEC>(p, w + i);
#pragma unroll
        for (int k = 0; k < VEC; ++k) o[k] *= p[k];
      }
      if (b) {
        load<VEC>(p, b + i);
#pragma unroll
        for (int k = 0; k < VEC; ++k) o[k] += p[k];
      }
      store<VEC>(y + off + i, o);
    }
    if (lane == 0) {
      mean[row] = mu;
      rstd[row] = rs;
    }
  }
}

// h = x (+ residual, rounded to T and written to h_out), y = h rstd weight.
template <class T, int ELEMS, int VEC>
__global__ void rms_norm_warp_kernel(T* __restrict__ y, opmath_t<T>* __restrict__ rstd,
                                     T* __restrict__ h_out, const T* __restrict__ x,
                                     const T* __restrict__ res, const T* __restrict__ w,
                                     int64_t rows, int n, int group_width, opmath_t<T> eps) {
  using A = opmath_t<T>;
  // Rows of more than 32 vectors take whole warps: a constant width turns offsets into immediates.
  const int width = ELEMS > kVec<T> ? kWarp : group_width;
  const unsigned mask = group_mask(width);
  const int lane = threadIdx.x & (width - 1);
  const A inv_n = A(1) / static_cast<A>(n);
  for (int64_t row = first_row(width); row < rows; row += row_stride(width)) {
    const int64_t off = row * n;
    A v[ELEMS];
    A ss = 0;
#pragma unroll
    for (int j = 0; j < ELEMS / VEC; ++j) {
      const int i = (j * width + lane) * VEC;
      if (i >= n) continue;
      A* h = v + j * VEC;
      load<VEC>(h, x + off + i);
      if (res) {
        A r[VEC];
        load<VEC>(r, res + off + i);
        // Rounded before normalising, as the unfused add then rms_norm would.
#pragma unroll
        for (int k = 0; k < VEC; ++k) h[k] = static_cast<A>(static_cast<T>(h[k] + r[k]));
        store<VEC>(h_out + off + i, h);
      }
#pragma unroll
      for (int k = 0; k < VEC; ++k) ss += h[k] * h[k];
    }
    const A rs = A(1) / std::sqrt(group_sum(ss, mask, width) * inv_n + eps);
#pragma unroll
    for (int j = 0; j < ELEMS / VEC; ++j) {
      const int i = (j * width + lane) * VEC;
      if (i >= n) continue;
      A o[VEC];
#pragma unroll
      for (int k = 0; k < VEC; ++k) o[k] = v[j * VEC + k] * rs;
      if (w) {
        A p[VEC];
        load<VEC>(p, w + i);
#pragma unroll
        for (int k = 0; k < VEC; ++k) o[k] *= p[k];
      }
      store<VEC>(y + off + i, o);
    }
    if (lane == 0) rstd[row] = rs;
  }
}

// ---- forward, long rows: one block per row ----

template <class T, int VEC>
__global__ void __launch_bounds__(kMaxThreads, 1)
    layer_norm_block_kernel(T* __restrict__ y, opmath_t<T>* __restrict__ mean,
                            opmath_t<T>* __restrict__ rstd, const T* __restrict__ x,
                            const T* __restrict__ w, const T* __restrict__ b, int64_t n,
                            opmath_t<T> eps) {
  using A = opmath_t<T>;
  const int64_t off = int64_t{blockIdx.x} * n;
  const T* xr = x + off;
  const A inv_n = A(1) / static_cast<A>(n);
  A s = 0;
  for_each_chunk<VEC>(xr, n, [&](int64_t i, auto c) {
    constexpr int W = decltype(c)::value;
    A v[W];
    load<W>(v, xr + i);
#pragma unroll
    for (int k = 0; k < W; ++k) s += v[k];
  });
  const A mu = block_sum(s) * inv_n;
  A ss = 0;
  for_each_chunk<VEC>(xr, n, [&](int64_t i, auto c) {
    constexpr int W = decltype(c)::value;
    A v[W];
    load<W>(v, xr + i);
#pragma unroll
    for (int k = 0; k < W; ++k) ss += (v[k] - mu) * (v[k] - mu);
  });
  const A rs = A(1) / std::sqrt(block_sum(ss) * inv_n + eps);
  for_each_chunk<VEC>(xr, n, [&](int64_t i, auto c) {
    constexpr int W = decltype(c)::value;
    A v[W], p[W];
    load<W>(v, xr + i);
#pragma unroll
    for (int k = 0; k < W; ++k) v[k] = (v[k] - mu) * rs;
    if (w) {
      load<W>(p, w + i);
#pragma unroll
      for (int k = 0; k < W; ++k) v[k] *= p[k];
    }
    if (b) {
      load<W>(p, b + i);
#pragma unroll
      for (int k = 0; k < W; ++k) v[k] += p[k];
    }
    store<W>(y + off + i, v);
  });
  if (threadIdx.x == 0) {
    mean[blockIdx.x] = mu;
    rstd[blockIdx.x] = rs;
  }
}

// The second pass reads h back from h_out when there is a residual (each thread re-reads what
// it wrote), so no operand is __restrict__ here.
template <class T, int VEC>
__global__ void __launch_bounds__(kMaxThreads, 1)
    rms_norm_block_kernel(T* y, opmath_t<T>* rstd, T* h_out, const T* x, const T* res, const T* w,
                          int64_t n, opmath_t<T> eps) {
  using A = opmath_t<T>;
  const int64_t off = int64_t{blockIdx.x} * n;
  const A inv_n = A(1) / static_cast<A>(n);
  A ss = 0;
  for_each_chunk<VEC>(x + off, n, [&](int64_t i, auto c) {
    constexpr int W = decltype(c)::value;
    A h[W];
    load<W>(h, x + off + i);
    if (res) {
      A r[W];
      load<W>(r, res + off + i);
      // Rounded before normalising, as the unfused add then rms_norm would.
#pragma unroll
      for (int k = 0; k < W; ++k) h[k] = static_cast<A>(static_cast<T>(h[k] + r[k]));
      store<W>(h_out + off + i, h);
    }
#pragma unroll
    for (int k = 0; k < W; ++k) ss += h[k] * h[k];
  });
  const A rs = A(1) / std::sqrt(block_sum(ss) * inv_n + eps);
  const T* hr = (res ? h_out : x) + off;
  for_each_chunk<VEC>(hr, n, [&](int64_t i, auto c) {
    constexpr int W = decltype(c)::value;
    A v[W];
    load<W>(v, hr + i);
#pragma unroll
    for (int k = 0; k < W; ++k) v[k] *= rs;
    if (w) {
      A p[W];
      load<W>(p, w + i);
#pragma unroll
      for (int k = 0; k < W; ++k) v[k] *= p[k];
    }
    store<W>(y + off + i, v);
  });
  if (threadIdx.x == 0) rstd[blockIdx.x] = rs;
}

// ---- launch configuration ----

void layer_norm(const Tensor& y, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                const Tensor& weight, const Tensor& bias, double eps) {
  dispatch<kFloatingTypes>(x.dtype(), "layer_norm", [&]<class T>() {
    using A = opmath_t<T>;
    const int64_t rows = x.size(0), n = x.size(1);
    if (rows == 0) return;
    const T* xp = x.data_ptr<T>();
    const T* w = ptr_or_null<T>(weight);
    const T* b = ptr_or_null<T>(bias);
    T* yp = y.data_ptr<T>();
    A* mp = mean.data_ptr<A>();
    A* rp = rstd.data_ptr<A>();
    const A e = static_cast<A>(eps);
    cudaStream_t stream = current_stream();
    const bool vec = vectorizable<T>(n, xp, yp, w, b);
    if (n <= kMaxWarpRow<T>) {
      with_warp_config<T>(n, vec, [&]<int ELEMS, int VEC>(int width) {
        layer_norm_warp_kernel<T, ELEMS, VEC>
            <<<grid_size(rows * width, kRowsBlock), kRowsBlock, 0, stream>>>(
                yp, mp, rp, xp, w, b, rows, static_cast<int>(n), width, e);
      });
    } else {
      with_block_config<T>(n, vec, [&]<int VEC>(int threads) {
        layer_norm_block_kernel<T, VEC>
            <<<rows_grid(rows), threads, 0, stream>>>(yp, mp, rp, xp, w, b, n, e);
      });
    }
    TESSERA_CUDA_CHECK_LAUNCH();
  });
}

void rms_norm(const Tensor& y, const Tensor& rstd, const Tensor& h_out, const Tensor& x,
              const Tensor& residual, const Tensor& weight, double eps) {
  dispatch<kFloatingTypes>(x.dtype(), "rms_norm", [&]<class T>() {
    using A = opmath_t<T>;
    const int64_t rows = x.size(0), n = x.size(1);
    if (rows == 0) return;
    const T* xp = x.data_ptr<T>();
    const T* res = ptr_or_null<T>(residual);
    T* hp = res ? h_out.data_ptr<T>() : nullptr;  // h_out is written only with a residual
    const T* w = ptr_or_null<T>(weight);
    T* yp = y.data_ptr<T>();
    A* rp = rstd.data_ptr<A>();
    const A e = static_cast<A>(eps);
    cudaStream_t stream = current_stream();
    const bool vec = vectorizable<T>(n, xp, yp, hp, res, w);
    if (n <= kMaxWarpRow<T>) {
      with_warp_config<T>(n, vec, [&]<int ELEMS, int VEC>(int width) {
        rms_norm_warp_kernel<T, ELEMS, VEC>
            <<<grid_size(rows * width, kRowsBlock), kRowsBlock, 0, stream>>>(
                yp, rp, hp, xp, res, w, rows, static_cast<int>(n), width, e);
      });
    } else {
      with_block_config<T>(n, vec, [&]<int VEC>(int threads) {
        rms_norm_block_kernel<T, VEC>
            <<<rows_grid(rows), threads, 0, stream>>>(yp, rp, hp, xp, res, w, n, e);
      });
    }
    TESSERA_CUDA_CHECK_LAUNCH();
  });
}

TESSERA_REGISTER_KERNEL(layer_norm_kernel, DeviceType::CUDA, &layer_norm);
TESSERA_REGISTER_KERNEL(rms_norm_kernel, DeviceType::CUDA, &rms_norm);

}  // namespace
}  // namespace tessera::cuda
