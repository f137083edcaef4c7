// CUDA class-index losses: cross entropy fused with log-softmax (the [M, C] log-probabilities are
// never materialised) and nll_loss on log-probabilities, forward and backward, with the CPU's
// semantics (ignore_index, label smoothing, class weights; reduction is the caller's).
//
// One block per row (grid-stride, so any M fits the grid). The forward makes a single pass over
// the row: an online max/sum for the logsumexp, plus sum_c w[c] x[c] and sum(w) when label
// smoothing needs them. The backward writes the row in one pass from the saved logsumexp; the
// sum of the class weights it needs is computed once by a small kernel instead of per row.
// Rows load 16-byte vectors over their aligned body, so any C vectorises.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "backend/common/nn_kernels.h"
#include "backend/cuda/context.h"
#include "backend/cuda/cuda_check.h"
#include "tessera/core/dispatch.h"
#include "tessera/ops/creation.h"

namespace tessera::cuda {
namespace {

constexpr int kWarp = 32;
// The most threads any block of this file is launched with (one such block per SM lets kernels
// bounded by it keep 64 registers).
constexpr int kMaxThreads = 1024;
constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kVecBytes = 16;

template <class T>
constexpr int kVec = kVecBytes / sizeof(T);

template <class A>
__device__ A neg_inf() {
  return -std::numeric_limits<A>::infinity();
}

// W consecutive elements moved by one load or store.
template <class T, int W>
struct alignas(sizeof(T) * W) Pack {
  T v[W];
};

template <int W, class T, class A>
__device__ void load(A* out, const T* p) {
  const Pack<T, W> pk = *reinterpret_cast<const Pack<T, W>*>(p);
#pragma unroll
  for (int k = 0; k < W; ++k) out[k] = static_cast<A>(pk.v[k]);
}

template <int W, class T, class A>
__device__ void store(T* p, const A* in) {
  Pack<T, W> pk;
#pragma unroll
  for (int k = 0; k < W; ++k) pk.v[k] = static_cast<T>(in[k]);
  *reinterpret_cast<Pack<T, W>*>(p) = pk;
}

// Calls f(i, integral_constant<int, W>) on chunks [i, i + W) that cover a row of n elements,
// spread over the block: W = VEC over the 16-byte aligned body, 1 over the head before it and
// the tail after it. Operands indexed alongside `row` need the same address residue mod 16.
template <int VEC, class T, class F>
__device__ void for_each_chunk(const T* row, int64_t n, F&& f) {
  int64_t head = 0;
  if constexpr (VEC > 1)
    head = std::min<int64_t>(n, (0 - reinterpret_cast<uintptr_t>(row) / sizeof(T)) & (VEC - 1));
  const int64_t body = (n - head) / VEC, tail = head + body * VEC;
  for (int64_t i = threadIdx.x; i < head; i += blockDim.x) f(i, std::integral_constant<int, 1>{});
#pragma unroll 4
  for (int64_t k = threadIdx.x; k < body; k += blockDim.x)
    f(head + k * VEC, std::integral_constant<int, VEC>{});
  for (int64_t i = tail + threadIdx.x; i < n; i += blockDim.x)
    f(i, std::integral_constant<int, 1>{});
}

template <class A>
__device__ A warp_sum(A v) {
  for (int o = kWarp / 2; o > 0; o /= 2) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}

// Block-wide sums of K values (blockDim.x a multiple of 32); every thread gets the results.
template <int K, class A>
__device__ void block_sum(A (&v)[K]) {
  __shared__ A part[K][kWarp];
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
#pragma unroll
  for (int k = 0; k < K; ++k) v[k] = warp_sum(v[k]);
  __syncthreads();  // a previous call's readers are done with the slots
  if (lane == 0)
    for (int k = 0; k < K; ++k) part[k][warp] = v[k];
  __syncthreads();
  // Every warp adds the per-warp parts itself, so no broadcast round is needed.
  const bool has = lane < static_cast<int>(blockDim.x / kWarp);
#pragma unroll
  for (int k = 0; k < K; ++k) v[k] = warp_sum(has ? part[k][lane] : A(0));
}

// exp(x - m), with -inf giving 0 even when m is -inf (so an all -inf row sums to 0, not nan).
template <class A>
__device__ A exp_from(A x, A m) {
  return x == neg_inf<A>() ? A(0) : std::exp(x - m);
}

// Online max/sum: folds W values into (m, s), s = sum exp(x - m) over the values seen and m
// their max (nan skipped, as the CPU's max does; it reaches s through exp instead, and so does
// the nan of exp(inf - inf) when m is +inf, as on the CPU).
template <int W, class A>
__device__ void online_add(A& m, A& s, const A* v) {
  A vm = m;
#pragma unroll
  for (int k = 0; k < W; ++k) vm = v[k] > vm ? v[k] : vm;
  if (vm > m) {
    s *= std::exp(m - vm);  // 0 while m is -inf, so s keeps only a nan
    m = vm;
  }
#pragma unroll
  for (int k = 0; k < W; ++k) s += exp_from(v[k], m);
}

template <class A>
__device__ void online_merge(A& m, A& s, A m2, A s2) {
  const A mx = m2 > m ? m2 : m;
  // A part whose max is -inf holds 0 (or nan): it adds as is rather than through exp(nan).
  s = (m == neg_inf<A>() ? s : s * std::exp(m - mx)) +
      (m2 == neg_inf<A>() ? s2 : s2 * std::exp(m2 - mx));
  m = mx;
}

// Block-wide online max/sum (blockDim.x a multiple of 32); every thread gets the result.
template <class A>
__device__ void block_max_sum(A& m, A& s) {
  __shared__ A pm[kWarp], ps[kWarp];
  for (int o = kWarp / 2; o > 0; o /= 2)
    online_merge(m, s, __shfl_xor_sync(kFullMask, m, o), __shfl_xor_sync(kFullMask, s, o));
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  __syncthreads();  // a previous call's readers are done with the slots
  if (lane == 0) {
    pm[warp] = m;
    ps[warp] = s;
  }
  __syncthreads();
  m = neg_inf<A>();
  s = 0;
  for (int w = 0; w < static_cast<int>(blockDim.x / kWarp); ++w) online_merge(m, s, pm[w], ps[w]);
}

// The options every kernel reads, in the row's arithmetic type.
template <class A>
struct LossArgs {
  int64_t C;
  int64_t ignore_index;
  A eps;  // label smoothing
  bool from_logits;
};

// Per row i with target t (see class_loss_kernel in nn_kernels.h): loss, lse and row weight, all
// 0 on ignored rows. w (class weights) may be null: all ones.
template <class T, int VEC>
__global__ void __launch_bounds__(kMaxThreads, 1)
    loss_forward_kernel(opmath_t<T>* __restrict__ loss, opmath_t<T>* __restrict__ lse,
                        opmath_t<T>* __restrict__ row_weight, const T* __restrict__ x,
                        const int64_t* __restrict__ target, const T* __restrict__ w, int64_t M,
                        LossArgs<opmath_t<T>> a) {
  using A = opmath_t<T>;
  const bool smoothing = a.eps != A(0);
  // Row-uniform control flow: the block's barriers stay matched.
  for (int64_t i = blockIdx.x; i < M; i += gridDim.x) {
    const int64_t t = target[i];
    if (t == a.ignore_index) {
      if (threadIdx.x == 0) loss[i] = lse[i] = row_weight[i] = A(0);
      continue;
    }
    const T* xr = x + i * a.C;
    A m = neg_inf<A>(), s = 0;
    A sums[2] = {A(0), A(0)};  // sum_c w[c] x[c], sum_c w[c]
    if (a.from_logits || smoothing) {
      for_each_chunk<VEC>(xr, a.C, [&](int64_t c, auto chunk) {
        constexpr int W = decltype(chunk)::value;
        A v[W];
        load<W>(v, xr + c);
        if (a.from_logits) online_add<W>(m, s, v);
        if (smoothing) {
#pragma unroll
          for (int k = 0; k < W; ++k) {
            const A wc = w ? static_cast<A>(w[c + k]) : A(1);
            sums[0] += wc * v[k];
            sums[1] += wc;
          }
        }
      });
    }
    if (a.from_logits) block_max_sum(m, s);
    if (smoothing) block_sum(sums);
    if (threadIdx.x != 0) continue;
    const A l = a.from_logits ? m + std::log(s) : A(0);
    const A wt = w ? static_cast<A>(w[t]) : A(1);
    A out = (A(1) - a.eps) * wt * (l - static_cast<A>(xr[t]));
    // sum_c w[c] (l - x[c]) = l sum(w) - sum_c w[c] x[c]
    if (smoothing) out += a.eps / static_cast<A>(a.C) * (l * sums[1] - sums[0]);
    loss[i] = out;
    lse[i] = l;
    row_weight[i] = wt;
  }
}

// Row i of dinput: g ((hard + smooth sum(w)) p[c] - smooth w[c]) minus g hard at the target,
// with hard = (1 - eps) w[t], smooth = eps / C, p = exp(x - lse) (0 for nll); 0 on ignored rows.
// w_sum points at sum(w); null stands for C (no class weights, or sum(w) is not needed).
template <class T, int VEC>
__global__ void __launch_bounds__(kMaxThreads, 1)
    loss_backward_kernel(T* __restrict__ dx, const opmath_t<T>* __restrict__ grad_rows,
                         const T* __restrict__ x, const opmath_t<T>* __restrict__ lse,
                         const int64_t* __restrict__ target, const T* __restrict__ w,
                         const opmath_t<T>* __restrict__ w_sum, int64_t M,
                         LossArgs<opmath_t<T>> a) {
  using A = opmath_t<T>;
  const bool smoothing = a.eps != A(0);
  const A smooth = a.eps / static_cast<A>(a.C);
  const A ws = w_sum ? *w_sum : static_cast<A>(a.C);
  for (int64_t i = blockIdx.x; i < M; i += gridDim.x) {
    const int64_t t = target[i];
    const T* xr = x + i * a.C;
    T* dr = dx + i * a.C;
    if (t == a.ignore_index) {
      for_each_chunk<VEC>(dr, a.C, [&](int64_t c, auto chunk) {
        constexpr int W = decltype(chunk)::value;
        const A zero[W] = {};
        store<W>(dr + c, zero);
      });
      continue;
    }
    const A g = grad_rows[i];
    const A hard = (A(1) - a.eps) * (w ? static_cast<A>(w[t]) : A(1));
    const A cp = g * (hard + smooth * ws), cw = g * smooth, at_t = g * hard;
    const A l = a.from_logits ? lse[i] : A(0);
    for_each_chunk<VEC>(dr, a.C, [&](int64_t c, auto chunk) {
      constexpr int W = decltype(chunk)::value;
      A v[W];
      if (a.from_logits) {
        load<W>(v, xr + c);
#pragma unroll
        for (int k = 0; k < W; ++k) v[k] = cp * std::exp(v[k] - l);
      } else {
#pragma unroll
        for (int k = 0; k < W; ++k) v[k] = A(0);
      }
#pragma unroll
      for (int k = 0; k < W; ++k) {
        if (smoothing) v[k] -= cw * (w ? static_cast<A>(w[c + k]) : A(1));
        if (c + k == t) v[k] -= at_t;
      }
      store<W>(dr + c, v);
    });
  }
}

// sum(w) in the arithmetic type, by one block.
template <class T>
__global__ void __launch_bounds__(kMaxThreads, 1)
    weight_sum_kernel(opmath_t<T>* __restrict__ out, const T* __restrict__ w, int64_t C) {
  using A = opmath_t<T>;
  A s[1] = {A(0)};
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) s[0] += static_cast<A>(w[c]);
  block_sum(s);
  if (threadIdx.x == 0) *out = s[0];
}

// ---- launch configuration ----

int pow2_ceil(int64_t v) {
  int p = 1;
  while (p < v) p *= 2;
  return p;
}

// Threads per row block: about 8 vectors each, 32 to 1024.
int row_threads(int64_t C, int vec) {
  return std::clamp(pow2_ceil((C / vec + 7) / 8), kWarp, kMaxThreads);
}

unsigned rows_grid(int64_t M) {
  return static_cast<unsigned>(
      std::min<int64_t>(M, int64_t{device_properties().multiProcessorCount} * 64));
}

template <class A>
LossArgs<A> loss_args(int64_t C, const ClassLossParams& p) {
  return {C, p.ignore_index, static_cast<A>(p.label_smoothing), p.from_logits};
}

void class_loss(const Tensor& loss, const Tensor& lse, const Tensor& row_weight,
                const Tensor& input, const Tensor& target, const Tensor& weight,
                const ClassLossParams& p) {
  dispatch<kFloatingTypes>(input.dtype(), "cross_entropy", [&]<class T>() {
    using A = opmath_t<T>;
    const int64_t M = input.size(0), C = input.size(1);
    if (M == 0) return;
    const T* w = weight.defined() ? weight.data_ptr<T>() : nullptr;
    // Only x is loaded as vectors, and each row finds its own aligned body.
    loss_forward_kernel<T, kVec<T>><<<rows_grid(M), row_threads(C, kVec<T>), 0, current_stream()>>>(
        loss.data_ptr<A>(), lse.data_ptr<A>(), row_weight.data_ptr<A>(), input.data_ptr<T>(),
        target.data_ptr<int64_t>(), w, M, loss_args<A>(C, p));
    TESSERA_CUDA_CHECK_LAUNCH();
  });
}

void class_loss_backward(const Tensor& dinput, const Tensor& grad_rows, const Tensor& input,
                         const Tensor& lse, const Tensor& target, const Tensor& weight,
                         const ClassLossParams& p) {
  dispatch<kFloatingTypes>(input.dtype(), "cross_entropy_backward", [&]<class T>() {
    using A = opmath_t<T>;
    const int64_t M = input.size(0), C = input.size(1);
    if (M == 0) return;
    cudaStream_t stream = current_stream();
    const T* w = weight.defined() ? weight.data_ptr<T>() : nullptr;
    // sum(w) matters only through the smoothed softmax term.
    Tensor w_sum;
    if (w && p.label_smoothing != 0.0 && p.from_logits) {
      w_sum = empty({1}, TensorOptions(dtype_of<A>).with_device(input.device()));
      weight_sum_kernel<T><<<1, kMaxThreads, 0, stream>>>(w_sum.data_ptr<A>(), w, C);
      TESSERA_CUDA_CHECK_LAUNCH();
    }
    T* dx = dinput.data_ptr<T>();
    const T* x = input.data_ptr<T>();
    const A* ws = w_sum.defined() ? w_sum.data_ptr<A>() : nullptr;
    auto launch = [&]<int VEC>() {
      loss_backward_kernel<T, VEC><<<rows_grid(M), row_threads(C, VEC), 0, stream>>>(
          dx, grad_rows.data_ptr<A>(), x, lse.data_ptr<A>(), target.data_ptr<int64_t>(), w, ws, M,
          loss_args<A>(C, p));
    };
    // dx and x share the row offsets, so one aligned body serves both when their bases agree.
    if (reinterpret_cast<uintptr_t>(dx) % kVecBytes == reinterpret_cast<uintptr_t>(x) % kVecBytes)
      launch.template operator()<kVec<T>>();
    else
      launch.template operator()<1>();
    TESSERA_CUDA_CHECK_LAUNCH();
  });
}

TESSERA_REGISTER_KERNEL(class_loss_kernel, DeviceType::CUDA, &class_loss);
TESSERA_REGISTER_KERNEL(class_loss_backward_kernel, DeviceType::CUDA, &class_loss_backward);

}  // namespace
}  // namespace tessera::cuda
