// CUDA layer norm and RMS norm backward: dx by row kernels of the forward's two shapes (see
// norm.cu), and the weight and bias gradients.
//
// dweight/dbias are a column reduction of their own: blocks of 32 columns x 8 row-threads each
// sum one chunk of rows into a [chunks, n] buffer (no atomics), and a second kernel of the same
// block shape adds the chunks in a fixed order, so results are deterministic on a given device
// (the chunk count follows the shape and the SM count).
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
#include "tessera/ops/creation.h"

namespace tessera::cuda {
namespace {

constexpr int kRowThreads = 8;  // threads along rows per block of the parameter-gradient kernel

// ---- backward dx, both norms ----
// With xhat = (x - mean) rstd (mean null: RMS norm, xhat = h rstd) and gw = dy weight:
//   dx = rstd (gw - mean(gw) - xhat mean(gw xhat)) (+ dh), the mean(gw) term for layer norm only.

template <class T, int ELEMS, int VEC>
__global__ void norm_backward_warp_kernel(T* __restrict__ dx, const T* __restrict__ dy,
                                          const T* __restrict__ x, const T* __restrict__ dh,
                                          const opmath_t<T>* __restrict__ mean,
                                          const opmath_t<T>* __restrict__ rstd,
                                          const T* __restrict__ w, int64_t rows, int n,
                                          int group_width) {
  using A = opmath_t<T>;
  // Rows of more than 32 vectors take whole warps: a constant width turns offsets into immediates.
  const int width = ELEMS > kVec<T> ? kWarp : group_width;
  const unsigned mask = group_mask(width);
  const int lane = threadIdx.x & (width - 1);
  const A inv_n = A(1) / static_cast<A>(n);
  for (int64_t row = first_row(width); row < rows; row += row_stride(width)) {
    const int64_t off = row * n;
    const A mu = mean ? mean[row] : A(0), rs = rstd[row];
    A gw[ELEMS], xh[ELEMS];
    A sg = 0, sgx = 0;
#pragma unroll
    for (int j = 0; j < ELEMS / VEC; ++j) {
      const int i = (j * width + lane) * VEC;
      if (i >= n) continue;
      A* g = gw + j * VEC;
      A* h = xh + j * VEC;
      load<VEC>(g, dy + off + i);
      load<VEC>(h, x + off + i);
      if (w) {
        A p[VEC];
        load<VEC>(p, w + i);
#pragma unroll
        for (int k = 0; k < VEC; ++k) g[k] *= p[k];
      }
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        h[k] = (h[k] - mu) * rs;
        sg += g[k];
        sgx += g[k] * h[k];
      }
    }
    sg = mean ? group_sum(sg, mask, width) * inv_n : A(0);
    sgx = group_sum(sgx, mask, width) * inv_n;
#pragma unroll
    for (int j = 0; j < ELEMS / VEC; ++j) {
      const int i = (j * width + lane) * VEC;
      if (i >= n) continue;
      A o[VEC];
#pragma unroll
      for (int k = 0; k < VEC; ++k) o[k] = rs * (gw[j * VEC + k] - sg - xh[j * VEC + k] * sgx);
      if (dh) {
        A p[VEC];
        load<VEC>(p, dh + off + i);
#pragma unroll
        for (int k = 0; k < VEC; ++k) o[k] += p[k];
      }
      store<VEC>(dx + off + i, o);
    }
  }
}

template <class T, int VEC>
__global__ void __launch_bounds__(kMaxThreads, 1)
    norm_backward_block_kernel(T* __restrict__ dx, const T* __restrict__ dy,
                               const T* __restrict__ x, const T* __restrict__ dh,
                               const opmath_t<T>* __restrict__ mean,
                               const opmath_t<T>* __restrict__ rstd, const T* __restrict__ w,
                               int64_t n) {
  using A = opmath_t<T>;
  const int64_t off = int64_t{blockIdx.x} * n;
  const A mu = mean ? mean[blockIdx.x] : A(0), rs = rstd[blockIdx.x];
  const A inv_n = A(1) / static_cast<A>(n);
  // gw and xhat of the chunk at i, recomputed by both passes.
  auto terms = [&]<int W>(int64_t i, A* g, A* h) {
    load<W>(g, dy + off + i);
    load<W>(h, x + off + i);
    if (w) {
      A p[W];
      load<W>(p, w + i);
#pragma unroll
      for (int k = 0; k < W; ++k) g[k] *= p[k];
    }
#pragma unroll
    for (int k = 0; k < W; ++k) h[k] = (h[k] - mu) * rs;
  };
  A sums[2] = {A(0), A(0)};  // sum gw, sum gw xhat
  for_each_chunk<VEC>(dy + off, n, [&](int64_t i, auto c) {
    constexpr int W = decltype(c)::value;
    A g[W], h[W];
    terms.template operator()<W>(i, g, h);
#pragma unroll
    for (int k = 0; k < W; ++k) {
      sums[0] += g[k];
      sums[1] += g[k] * h[k];
    }
  });
  block_sum(sums);
  const A sg = mean ? sums[0] * inv_n : A(0), sgx = sums[1] * inv_n;
  for_each_chunk<VEC>(dy + off, n, [&](int64_t i, auto c) {
    constexpr int W = decltype(c)::value;
    A g[W], h[W];
    terms.template operator()<W>(i, g, h);
#pragma unroll
    for (int k = 0; k < W; ++k) g[k] = rs * (g[k] - sg - h[k] * sgx);
    if (dh) {
      A p[W];
      load<W>(p, dh + off + i);
#pragma unroll
      for (int k = 0; k < W; ++k) g[k] += p[k];
    }
    store<W>(dx + off + i, g);
  });
}

// ---- backward dweight / dbias ----

// Adds the (aw, ab) of a block's kRowThreads row threads column by column, in row-thread order
// (deterministic); the row-0 thread of each column then holds the block's sums.
template <class A>
__device__ void sum_row_threads(A& aw, A& ab) {
  __shared__ A sw[kRowThreads][kWarp], sb[kRowThreads][kWarp];
  const int tx = threadIdx.x, ty = threadIdx.y;
  sw[ty][tx] = aw;
  sb[ty][tx] = ab;
  __syncthreads();
  if (ty != 0) return;
  for (int k = 1; k < kRowThreads; ++k) {
    aw += sw[k][tx];
    ab += sb[k][tx];
  }
}

// Block (32, 8) sums rows [r0, r1) of chunk blockIdx.y for 32 columns: dweight += dy xhat,
// dbias += dy (either pointer null when not wanted). With one chunk the sums are the gradients
// and go to dw/db as T; otherwise they go to the partial buffers pw/pb [chunks, n]. (Vector
// loads of several columns per lane measured slower here: fewer, shorter blocks.)
template <class T>
__global__ void norm_param_grad_kernel(T* __restrict__ dw, T* __restrict__ db,
                                       opmath_t<T>* __restrict__ pw, opmath_t<T>* __restrict__ pb,
                                       const T* __restrict__ dy, const T* __restrict__ x,
                                       const opmath_t<T>* __restrict__ mean,
                                       const opmath_t<T>* __restrict__ rstd, int64_t rows,
                                       int64_t n) {
  using A = opmath_t<T>;
  const int64_t c = int64_t{blockIdx.x} * kWarp + threadIdx.x;
  const int64_t r0 = rows * blockIdx.y / gridDim.y, r1 = rows * (blockIdx.y + 1) / gridDim.y;
  A aw = 0, ab = 0;
  if (c < n) {
#pragma unroll 4
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kRowThreads) {
      const A g = static_cast<A>(dy[r * n + c]);
      const A xv = static_cast<A>(x[r * n + c]);
      aw += g * ((mean ? xv - mean[r] : xv) * rstd[r]);
      ab += g;
    }
  }
  sum_row_threads(aw, ab);
  if (threadIdx.y != 0 || c >= n) return;
  if (gridDim.y == 1) {
    if (dw) dw[c] = static_cast<T>(aw);
    if (db) db[c] = static_cast<T>(ab);
  } else {
    if (pw) pw[blockIdx.y * n + c] = aw;
    if (pb) pb[blockIdx.y * n + c] = ab;
  }
}

// Adds the chunk partials [chunks, n] into dw/db [n], laid out as the kernel above: each row
// thread takes every kRowThreads-th chunk, so a column's loads are in flight together (one
// thread walking all ~44 chunks in a dependent chain took ~19 us for GPT-2's 768 columns).
template <class T>
__global__ void sum_partials_kernel(T* __restrict__ dw, T* __restrict__ db,
                                    const opmath_t<T>* __restrict__ pw,
                                    const opmath_t<T>* __restrict__ pb, int64_t chunks, int64_t n) {
  using A = opmath_t<T>;
  const int64_t c = int64_t{blockIdx.x} * kWarp + threadIdx.x;
  A aw = 0, ab = 0;
  if (c < n) {
#pragma unroll 4
    for (int64_t k = threadIdx.y; k < chunks; k += kRowThreads) {
      if (pw) aw += pw[k * n + c];
      if (pb) ab += pb[k * n + c];
    }
  }
  sum_row_threads(aw, ab);
  if (threadIdx.y != 0 || c >= n) return;
  if (dw) dw[c] = static_cast<T>(aw);
  if (db) db[c] = static_cast<T>(ab);
}

// ---- launch configuration ----

template <class T>
T* mut_ptr_or_null(const Tensor& t) {
  return t.defined() ? t.data_ptr<T>() : nullptr;
}

// dx (when defined) for either norm (mean null: RMS norm, x is h), then dweight/dbias (when
// defined) as a column reduction.
template <class T>
void norm_backward(const Tensor& dx, const Tensor& dweight, const Tensor& dbias, const Tensor& dy,
                   const Tensor& x, const Tensor& dh, const opmath_t<T>* mean, const Tensor& rstd,
                   const Tensor& weight) {
  using A = opmath_t<T>;
  const int64_t rows = x.size(0), n = x.size(1);
  if (n == 0) return;
  const T* xp = x.data_ptr<T>();
  const T* gp = dy.data_ptr<T>();
  const A* rp = rstd.data_ptr<A>();
  cudaStream_t stream = current_stream();
  if (dx.defined() && rows > 0) {
    T* dxp = dx.data_ptr<T>();
    const T* dhp = ptr_or_null<T>(dh);
    const T* w = ptr_or_null<T>(weight);
    const bool vec = vectorizable<T>(n, dxp, gp, xp, dhp, w);
    if (n <= kMaxWarpRow<T>) {
      with_warp_config<T>(n, vec, [&]<int ELEMS, int VEC>(int width) {
        norm_backward_warp_kernel<T, ELEMS, VEC>
            <<<grid_size(rows * width, kRowsBlock), kRowsBlock, 0, stream>>>(
                dxp, gp, xp, dhp, mean, rp, w, rows, static_cast<int>(n), width);
      });
    } else {
      with_block_config<T>(n, vec, [&]<int VEC>(int threads) {
        norm_backward_block_kernel<T, VEC>
            <<<rows_grid(rows), threads, 0, stream>>>(dxp, gp, xp, dhp, mean, rp, w, n);
      });
    }
    TESSERA_CUDA_CHECK_LAUNCH();
  }
  T* dw = mut_ptr_or_null<T>(dweight);
  T* db = mut_ptr_or_null<T>(dbias);
  if (!dw && !db) return;
  // Enough chunks of rows for ~8 blocks per SM, each chunk at least 64 rows.
  const int64_t tiles = (n + kWarp - 1) / kWarp;
  const int64_t target = int64_t{device_properties().multiProcessorCount} * 8;
  const int64_t chunks =
      std::max<int64_t>(1, std::min({(target + tiles - 1) / tiles, rows / 64, int64_t{65535}}));
  Tensor part;
  A *pw = nullptr, *pb = nullptr;
  if (chunks > 1) {
    const int64_t wanted = (dw ? 1 : 0) + (db ? 1 : 0);
    part = empty({wanted * chunks, n}, TensorOptions(dtype_of<A>).with_device(x.device()));
    pw = dw ? part.data_ptr<A>() : nullptr;
    pb = db ? part.data_ptr<A>() + (dw ? chunks * n : 0) : nullptr;
  }
  const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(chunks));
  norm_param_grad_kernel<T>
      <<<grid, dim3(kWarp, kRowThreads), 0, stream>>>(dw, db, pw, pb, gp, xp, mean, rp, rows, n);
  TESSERA_CUDA_CHECK_LAUNCH();
  if (chunks == 1) return;
  sum_partials_kernel<T>
      <<<grid.x, dim3(kWarp, kRowThreads), 0, stream>>>(dw, db, pw, pb, chunks, n);
  TESSERA_CUDA_CHECK_LAUNCH();
}

void layer_norm_backward(const Tensor& dx, const Tensor& dweight, const Tensor& dbias,
                         const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                         const Tensor& weight) {
  dispatch<kFloatingTypes>(x.dtype(), "layer_norm_backward", [&]<class T>() {
    norm_backward<T>(dx, dweight, dbias, dy, x, Tensor(), mean.data_ptr<opmath_t<T>>(), rstd,
                     weight);
  });
}

void rms_norm_backward(const Tensor& dx, const Tensor& dweight, const Tensor& dy, const Tensor& dh,
                       const Tensor& h, const Tensor& rstd, const Tensor& weight) {
  dispatch<kFloatingTypes>(h.dtype(), "rms_norm_backward", [&]<class T>() {
    norm_backward<T>(dx, dweight, Tensor(), dy, h, dh, nullptr, rstd, weight);
  });
}

TESSERA_REGISTER_KERNEL(layer_norm_backward_kernel, DeviceType::CUDA, &layer_norm_backward);
TESSERA_REGISTER_KERNEL(rms_norm_backward_kernel, DeviceType::CUDA, &rms_norm_backward);

}  // namespace
}  // namespace tessera::cuda
