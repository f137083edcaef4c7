// CPU layer norm and RMS norm, forward and backward, one row per iteration. The weight/bias
// gradients are summed over rows in a fixed number of row blocks (chosen from the shape only)
// and the block partials added in order, so results do not depend on the thread count.
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "backend/common/nn_kernels.h"
#include "tessera/core/dtype_dispatch.h"

namespace tessera::cpu {
namespace {

constexpr int64_t kParallelGrain = 32768;
constexpr int64_t kMaxRowBlocks = 32;
constexpr int64_t kPartialBudget = int64_t{1} << 22;  // elements of per-block partial sums

template <class T>
const T* ptr_or_null(const Tensor& t) {
  return t.defined() ? t.data_ptr<T>() : nullptr;
}
template <class T>
T* mut_ptr_or_null(const Tensor& t) {
  return t.defined() ? t.data_ptr<T>() : nullptr;
}

// The weight's data, or ones (kept in `ones`) when it is absent, so the loops stay branch-free.
template <class T>
const T* weight_or_ones(const Tensor& weight, int64_t n, std::vector<T>& ones) {
  if (weight.defined()) return weight.data_ptr<T>();
  ones.assign(n, static_cast<T>(1));
  return ones.data();
}

// Row blocks for a backward that sums parameter gradients over rows.
int64_t row_blocks(int64_t rows, int64_t n, bool partials) {
  if (rows == 0) return 0;
  if (!partials) return std::min<int64_t>(rows, 4 * kMaxRowBlocks);
  return std::max<int64_t>(
      1, std::min({rows, kMaxRowBlocks, kPartialBudget / std::max<int64_t>(n, 1)}));
}

// Adds the block partials [blocks, n] in block order into out [n] (cast to T).
template <class T, class A>
void reduce_partials(T* out, const std::vector<A>& partial, int64_t blocks, int64_t n) {
#pragma omp parallel for schedule(static) if (blocks * n > kParallelGrain)
  for (int64_t i = 0; i < n; ++i) {
    A s = 0;
    for (int64_t b = 0; b < blocks; ++b) s += partial[b * n + i];
    out[i] = static_cast<T>(s);
  }
}

// ---- layer norm ----

template <class T, bool HasW, bool HasB>
void layer_norm_affine(T* y, const T* x, const T* w, const T* b, opmath_t<T> mu, opmath_t<T> rs,
                       int64_t n) {
  using A = opmath_t<T>;
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    A v = (static_cast<A>(x[i]) - mu) * rs;
    if constexpr (HasW) v *= static_cast<A>(w[i]);
    if constexpr (HasB) v += static_cast<A>(b[i]);
    y[i] = static_cast<T>(v);
  }
}

void layer_norm(const Tensor& y, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                const Tensor& weight, const Tensor& bias, double eps) {
  dispatch<kFloatingTypes>(x.dtype(), "layer_norm", [&]<class T>() {
    using A = opmath_t<T>;
    const int64_t rows = x.size(0), n = x.size(1);
    const T* xp = x.data_ptr<T>();
    const T* w = ptr_or_null<T>(weight);
    const T* b = ptr_or_null<T>(bias);
    T* yp = y.data_ptr<T>();
    A* mp = mean.data_ptr<A>();
    A* rp = rstd.data_ptr<A>();
    const A inv_n = A(1) / static_cast<A>(n);
#pragma omp parallel for schedule(static) if (rows * n > kParallelGrain && rows > 1)
    for (int64_t r = 0; r < rows; ++r) {
      const T* xr = xp + r * n;
      T* yr = yp + r * n;
      // Two passes over the (cached) row: mean, then the centred sum of squares.
      A s = 0;
#pragma omp simd reduction(+ : s)
      for (int64_t i = 0; i < n; ++i) s += static_cast<A>(xr[i]);
      const A mu = s * inv_n;
      A ss = 0;
#pragma omp simd reduction(+ : ss)
      for (int64_t i = 0; i < n; ++i) {
        const A d = static_cast<A>(xr[i]) - mu;
        ss += d * d;
      }
      const A rs = A(1) / std::sqrt(ss * inv_n + static_cast<A>(eps));
      if (w && b)
        layer_norm_affine<T, true, true>(yr, xr, w, b, mu, rs, n);
      else if (w)
        layer_norm_affine<T, true, false>(yr, xr, w, b, mu, rs, n);
      else if (b)
        layer_norm_affine<T, false, true>(yr, xr, w, b, mu, rs, n);
      else
        layer_norm_affine<T, false, false>(yr, xr, w, b, mu, rs, n);
      mp[r] = mu;
      rp[r] = rs;
    }
  });
}

void layer_norm_backward(const Tensor& dx, const Tensor& dweight, const Tensor& dbias,
                         const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                         const Tensor& weight) {
  dispatch<kFloatingTypes>(x.dtype(), "layer_norm_backward", [&]<class T>() {
    using A = opmath_t<T>;
    const int64_t rows = x.size(0), n = x.size(1);
    const T* xp = x.data_ptr<T>();
    const T* gp = dy.data_ptr<T>();
    std::vector<T> ones;
    const T* w = weight_or_ones(weight, n, ones);
    const A* mp = mean.data_ptr<A>();
    const A* rp = rstd.data_ptr<A>();
    T* dxp = mut_ptr_or_null<T>(dx);
    const bool want_w = dweight.defined(), want_b = dbias.defined();
    const int64_t blocks = row_blocks(rows, n, want_w || want_b);
    std::vector<A> pw(want_w ? blocks * n : 0, A(0)), pb(want_b ? blocks * n : 0, A(0));
    const A inv_n = A(1) / static_cast<A>(n);
#pragma omp parallel for schedule(static) if (rows * n > kParallelGrain && blocks > 1)
    for (int64_t blk = 0; blk < blocks; ++blk) {
      const int64_t r0 = rows * blk / blocks, r1 = rows * (blk + 1) / blocks;
      A* pwb = want_w ? pw.data() + blk * n : nullptr;
      A* pbb = want_b ? pb.data() + blk * n : nullptr;
      for (int64_t r = r0; r < r1; ++r) {
        const T* xr = xp + r * n;
        const T* gr = gp + r * n;
        const A mu = mp[r], rs = rp[r];
        if (dxp) {
          A sg = 0, sgx = 0;
#pragma omp simd reduction(+ : sg, sgx)
          for (int64_t i = 0; i < n; ++i) {
            const A gw = static_cast<A>(gr[i]) * static_cast<A>(w[i]);
            sg += gw;
            sgx += gw * (static_cast<A>(xr[i]) - mu) * rs;
          }
          sg *= inv_n;
          sgx *= inv_n;
          T* dr = dxp + r * n;
#pragma omp simd
          for (int64_t i = 0; i < n; ++i) {
            const A gw = static_cast<A>(gr[i]) * static_cast<A>(w[i]);
            const A xhat = (static_cast<A>(xr[i]) - mu) * rs;
            dr[i] = static_cast<T>(rs * (gw - sg - xhat * sgx));
          }
        }
        if (pwb) {
#pragma omp simd
          for (int64_t i = 0; i < n; ++i)
            pwb[i] += static_cast<A>(gr[i]) * (static_cast<A>(xr[i]) - mu) * rs;
        }
        if (pbb) {
#pragma omp simd
          for (int64_t i = 0; i < n; ++i) pbb[i] += static_cast<A>(gr[i]);
        }
      }
    }
    if (want_w) reduce_partials(dweight.data_ptr<T>(), pw, blocks, n);
    if (want_b) reduce_partials(dbias.data_ptr<T>(), pb, blocks, n);
  });
}

// ---- RMS norm ----

void rms_norm(const Tensor& y, const Tensor& rstd, const Tensor& h_out, const Tensor& x,
              const Tensor& residual, const Tensor& weight, double eps) {
  dispatch<kFloatingTypes>(x.dtype(), "rms_norm", [&]<class T>() {
    using A = opmath_t<T>;
    const int64_t rows = x.size(0), n = x.size(1);
    const T* xp = x.data_ptr<T>();
    const T* res = ptr_or_null<T>(residual);
    T* hp = mut_ptr_or_null<T>(h_out);
    const T* w = ptr_or_null<T>(weight);
    T* yp = y.data_ptr<T>();
    A* rp = rstd.data_ptr<A>();
    const A inv_n = A(1) / static_cast<A>(n);
#pragma omp parallel for schedule(static) if (rows * n > kParallelGrain && rows > 1)
    for (int64_t r = 0; r < rows; ++r) {
      const T* hr = xp + r * n;
      if (res) {
        // The sum is rounded to T before normalising, as the unfused ops would.
        T* hw = hp + r * n;
        const T* xr = xp + r * n;
        const T* rr = res + r * n;
#pragma omp simd
        for (int64_t i = 0; i < n; ++i)
          hw[i] = static_cast<T>(static_cast<A>(xr[i]) + static_cast<A>(rr[i]));
        hr = hw;
      }
      A ss = 0;
#pragma omp simd reduction(+ : ss)
      for (int64_t i = 0; i < n; ++i) ss += static_cast<A>(hr[i]) * static_cast<A>(hr[i]);
      const A rs = A(1) / std::sqrt(ss * inv_n + static_cast<A>(eps));
      T* yr = yp + r * n;
      if (w) {
#pragma omp simd
        for (int64_t i = 0; i < n; ++i)
          yr[i] = static_cast<T>(static_cast<A>(hr[i]) * rs * static_cast<A>(w[i]));
      } else {
#pragma omp simd
        for (int64_t i = 0; i < n; ++i) yr[i] = static_cast<T>(static_cast<A>(hr[i]) * rs);
      }
      rp[r] = rs;
    }
  });
}

void rms_norm_backward(const Tensor& dx, const Tensor& dweight, const Tensor& dy, const Tensor& dh,
                       const Tensor& h, const Tensor& rstd, const Tensor& weight) {
  dispatch<kFloatingTypes>(h.dtype(), "rms_norm_backward", [&]<class T>() {
    using A = opmath_t<T>;
    const int64_t rows = h.size(0), n = h.size(1);
    const T* hp = h.data_ptr<T>();
    const T* gp = dy.data_ptr<T>();
    const T* ghp = ptr_or_null<T>(dh);
    std::vector<T> ones;
    const T* w = weight_or_ones(weight, n, ones);
    const A* rp = rstd.data_ptr<A>();
    T* dxp = mut_ptr_or_null<T>(dx);
    const bool want_w = dweight.defined();
    const int64_t blocks = row_blocks(rows, n, want_w);
    std::vector<A> pw(want_w ? blocks * n : 0, A(0));
    const A inv_n = A(1) / static_cast<A>(n);
#pragma omp parallel for schedule(static) if (rows * n > kParallelGrain && blocks > 1)
    for (int64_t blk = 0; blk < blocks; ++blk) {
      const int64_t r0 = rows * blk / blocks, r1 = rows * (blk + 1) / blocks;
      A* pwb = want_w ? pw.data() + blk * n : nullptr;
      for (int64_t r = r0; r < r1; ++r) {
        const T* hr = hp + r * n;
        const T* gr = gp + r * n;
        const A rs = rp[r];
        if (dxp) {
          A sgx = 0;
#pragma omp simd reduction(+ : sgx)
          for (int64_t i = 0; i < n; ++i) {
            const A gw = static_cast<A>(gr[i]) * static_cast<A>(w[i]);
            sgx += gw * static_cast<A>(hr[i]) * rs;
          }
          sgx *= inv_n;
          T* dr = dxp + r * n;
          const T* ghr = ghp ? ghp + r * n : nullptr;
#pragma omp simd
          for (int64_t i = 0; i < n; ++i) {
            const A gw = static_cast<A>(gr[i]) * static_cast<A>(w[i]);
            dr[i] = static_cast<T>(rs * (gw - static_cast<A>(hr[i]) * rs * sgx));
          }
          if (ghr) {
#pragma omp simd
            for (int64_t i = 0; i < n; ++i)
              dr[i] = static_cast<T>(static_cast<A>(dr[i]) + static_cast<A>(ghr[i]));
          }
        }
        if (pwb) {
#pragma omp simd
          for (int64_t i = 0; i < n; ++i)
            pwb[i] += static_cast<A>(gr[i]) * static_cast<A>(hr[i]) * rs;
        }
      }
    }
    if (want_w) reduce_partials(dweight.data_ptr<T>(), pw, blocks, n);
  });
}

TESSERA_REGISTER_KERNEL(layer_norm_kernel, DeviceType::CPU, &layer_norm);
TESSERA_REGISTER_KERNEL(layer_norm_backward_kernel, DeviceType::CPU, &layer_norm_backward);
TESSERA_REGISTER_KERNEL(rms_norm_kernel, DeviceType::CPU, &rms_norm);
TESSERA_REGISTER_KERNEL(rms_norm_backward_kernel, DeviceType::CPU, &rms_norm_backward);

}  // namespace
}  // namespace tessera::cpu
