// CPU softmax / log_softmax along the middle axis of a contiguous [outer, n, inner] tensor, and
// their backward. The last-dim case (inner == 1) runs one row per iteration; other axes run
// blocks of inner columns so every inner loop stays unit-stride and vectorises.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "backend/common/nn_kernels.h"
#include "tessera/core/dtype_dispatch.h"

namespace tessera::cpu {
namespace {

using detail::vexp;
using detail::vmax;

constexpr int64_t kParallelGrain = 32768;  // elements below which threads cost more than they save
constexpr int64_t kColumnBlock = 64;       // inner columns per task on the strided path

template <class A>
constexpr A neg_inf() {
  return -std::numeric_limits<A>::infinity();
}

// Whether every element of a slice whose max came out -inf is -inf, i.e. none is nan (the max
// reductions skip nan). Only reached for such slices, so it stays off the hot path.
template <class T>
bool all_neg_inf(const T* x, int64_t n, int64_t stride) {
  for (int64_t r = 0; r < n; ++r)
    if (std::isnan(static_cast<opmath_t<T>>(x[r * stride]))) return false;
  return true;
}

// Where a row's exponentials go before normalising: the output itself for float/double, the
// float buffer for 16-bit types (rounding them early would cost accuracy).
template <class T, class A>
A* exp_buffer(T* y, std::vector<A>& buf) {
  if constexpr (std::is_same_v<T, A>)
    return y;
  else
    return buf.data();
}

// Softmax of each row of x [rows, n] (16-bit types keep the exponentials in a float buffer).
template <class T>
void softmax_rows(const T* x, T* y, int64_t rows, int64_t n, SoftmaxKind kind) {
  using A = opmath_t<T>;
#pragma omp parallel if (rows * n > kParallelGrain && rows > 1)
  {
    std::vector<A> buf(std::is_same_v<T, A> ? 0 : n);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const T* xr = x + r * n;
      T* yr = y + r * n;
      const A m = detail::simd_max<A>(xr, n);
      if (kind == SoftmaxKind::SafeSoftmax && m == neg_inf<A>() && all_neg_inf(xr, n, 1)) {
        std::fill(yr, yr + n, static_cast<T>(0));
        continue;
      }
      A s = 0;
      if (kind == SoftmaxKind::LogSoftmax) {
#pragma omp simd reduction(+ : s)
        for (int64_t i = 0; i < n; ++i) s += vexp(static_cast<A>(xr[i]) - m);
        const A log_s = std::log(s);
#pragma omp simd
        for (int64_t i = 0; i < n; ++i) yr[i] = static_cast<T>(static_cast<A>(xr[i]) - m - log_s);
        continue;
      }
      A* e = exp_buffer(yr, buf);
#pragma omp simd reduction(+ : s)
      for (int64_t i = 0; i < n; ++i) {
        const A v = vexp(static_cast<A>(xr[i]) - m);
        e[i] = v;
        s += v;
      }
      const A inv = A(1) / s;
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) yr[i] = static_cast<T>(e[i] * inv);
    }
  }
}

// Softmax along the middle axis of [outer, n, inner], inner > 1: each task owns a block of
// columns and makes three passes (max, sum of exponentials, write).
template <class T>
void softmax_columns(const T* x, T* y, int64_t outer, int64_t n, int64_t inner, SoftmaxKind kind) {
  using A = opmath_t<T>;
  const int64_t blocks = (inner + kColumnBlock - 1) / kColumnBlock;
#pragma omp parallel for schedule(static) if (outer * n * inner > kParallelGrain)
  for (int64_t task = 0; task < outer * blocks; ++task) {
    const int64_t o = task / blocks, i0 = (task % blocks) * kColumnBlock;
    const int64_t len = std::min(kColumnBlock, inner - i0);
    const T* xb = x + o * n * inner + i0;
    T* yb = y + o * n * inner + i0;
    A m[kColumnBlock], s[kColumnBlock];
    for (int64_t i = 0; i < len; ++i) {
      m[i] = neg_inf<A>();
      s[i] = 0;
    }
    for (int64_t r = 0; r < n; ++r)
      for (int64_t i = 0; i < len; ++i) m[i] = vmax(m[i], static_cast<A>(xb[r * inner + i]));
    for (int64_t r = 0; r < n; ++r)
      for (int64_t i = 0; i < len; ++i) s[i] += vexp(static_cast<A>(xb[r * inner + i]) - m[i]);
    for (int64_t i = 0; i < len; ++i) {
      if (kind == SoftmaxKind::LogSoftmax)
        s[i] = std::log(s[i]);
      else if (kind == SoftmaxKind::SafeSoftmax && m[i] == neg_inf<A>() &&
               all_neg_inf(xb + i, n, inner))
        s[i] = 0;  // marks a column of zeros
      else
        s[i] = A(1) / s[i];
    }
    for (int64_t r = 0; r < n; ++r) {
      const T* xr = xb + r * inner;
      T* yr = yb + r * inner;
      if (kind == SoftmaxKind::LogSoftmax) {
        for (int64_t i = 0; i < len; ++i)
          yr[i] = static_cast<T>(static_cast<A>(xr[i]) - m[i] - s[i]);
      } else {
        // A fully masked column of the safe softmax has s = 0 and m = -inf (exp gives nan).
        const bool safe = kind == SoftmaxKind::SafeSoftmax;
        for (int64_t i = 0; i < len; ++i) {
          const A v = vexp(static_cast<A>(xr[i]) - m[i]) * s[i];
          yr[i] = static_cast<T>(safe && s[i] == A(0) ? A(0) : v);
        }
      }
    }
  }
}

void softmax(const Tensor& out, const Tensor& in, int64_t outer, int64_t n, int64_t inner,
             SoftmaxKind kind) {
  dispatch<kFloatingTypes>(in.dtype(), "softmax", [&]<class T>() {
    const T* x = in.data_ptr<T>();
    T* y = out.data_ptr<T>();
    if (inner == 1)
      softmax_rows(x, y, outer, n, kind);
    else
      softmax_columns(x, y, outer, n, inner, kind);
  });
}

// Row backward: softmax dx = y (g - <g, y>); log_softmax dx = g - exp(y) sum(g).
template <class T>
void softmax_backward_rows(T* dx, const T* g, const T* y, int64_t rows, int64_t n, bool log) {
  using A = opmath_t<T>;
#pragma omp parallel for schedule(static) if (rows * n > kParallelGrain && rows > 1)
  for (int64_t r = 0; r < rows; ++r) {
    const T* gr = g + r * n;
    const T* yr = y + r * n;
    T* dr = dx + r * n;
    A s = 0;
    if (log) {
#pragma omp simd reduction(+ : s)
      for (int64_t i = 0; i < n; ++i) s += static_cast<A>(gr[i]);
#pragma omp simd
      for (int64_t i = 0; i < n; ++i)
        dr[i] = static_cast<T>(static_cast<A>(gr[i]) - vexp(static_cast<A>(yr[i])) * s);
    } else {
#pragma omp simd reduction(+ : s)
      for (int64_t i = 0; i < n; ++i) s += static_cast<A>(gr[i]) * static_cast<A>(yr[i]);
#pragma omp simd
      for (int64_t i = 0; i < n; ++i)
        dr[i] = static_cast<T>(static_cast<A>(yr[i]) * (static_cast<A>(gr[i]) - s));
    }
  }
}

template <class T>
void softmax_backward_columns(T* dx, const T* g, const T* y, int64_t outer, int64_t n,
                              int64_t inner, bool log) {
  using A = opmath_t<T>;
  const int64_t blocks = (inner + kColumnBlock - 1) / kColumnBlock;
#pragma omp parallel for schedule(static) if (outer * n * inner > kParallelGrain)
  for (int64_t task = 0; task < outer * blocks; ++task) {
    const int64_t o = task / blocks, i0 = (task % blocks) * kColumnBlock;
    const int64_t len = std::min(kColumnBlock, inner - i0);
    const int64_t base = o * n * inner + i0;
    A s[kColumnBlock];
    for (int64_t i = 0; i < len; ++i) s[i] = 0;
    for (int64_t r = 0; r < n; ++r) {
      const T* gr = g + base + r * inner;
      const T* yr = y + base + r * inner;
      for (int64_t i = 0; i < len; ++i)
        s[i] += log ? static_cast<A>(gr[i]) : static_cast<A>(gr[i]) * static_cast<A>(yr[i]);
    }
    for (int64_t r = 0; r < n; ++r) {
      const T* gr = g + base + r * inner;
      const T* yr = y + base + r * inner;
      T* dr = dx + base + r * inner;
      for (int64_t i = 0; i < len; ++i) {
        const A gi = static_cast<A>(gr[i]), yi = static_cast<A>(yr[i]);
        dr[i] = static_cast<T>(log ? gi - vexp(yi) * s[i] : yi * (gi - s[i]));
      }
    }
  }
}

void softmax_backward(const Tensor& grad_in, const Tensor& grad_out, const Tensor& out,
                      int64_t outer, int64_t n, int64_t inner, SoftmaxKind kind) {
  dispatch<kFloatingTypes>(out.dtype(), "softmax_backward", [&]<class T>() {
    T* dx = grad_in.data_ptr<T>();
    const T* g = grad_out.data_ptr<T>();
    const T* y = out.data_ptr<T>();
    const bool log = kind == SoftmaxKind::LogSoftmax;
    if (inner == 1)
      softmax_backward_rows(dx, g, y, outer, n, log);
    else
      softmax_backward_columns(dx, g, y, outer, n, inner, log);
  });
}

TESSERA_REGISTER_KERNEL(softmax_kernel, DeviceType::CPU, &softmax);
TESSERA_REGISTER_KERNEL(softmax_backward_kernel, DeviceType::CPU, &softmax_backward);

}  // namespace
}  // namespace tessera::cpu
