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
#include "backend/cuda/online_softmax.cuh"
#include "backend/cuda/row_launch.cuh"
#include "backend/cuda/vectorized.cuh"
#include "backend/cuda/warp.cuh"
#include "tessera/core/dtype_dispatch.h"
#include "tessera/ops/creation.h"

namespace tessera::cuda {
namespace {

// The most threads any block of this file is launched with (one such block per SM lets kernels
// bounded by it keep 64 registers).
constexpr int kMaxThreads = 1024;

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

// Threads per row block: about 8 vectors each, 32 to 1024. With rows enough for 16 blocks per
// SM, at most 256: then an SM holds four rows at once (registers allow 1024 threads), so one
// row's loads overlap another's block reduction and final store, where a lone 1024-thread row
// left the SM idle between them (GPT-2's 8192 x 50257 bf16 logits: 1.1 ms forward, ~4x off
// the H100's bandwidth, 0.84 ms backward).
int row_threads(int64_t C, int vec, int64_t M) {
  const int threads = std::clamp(pow2_ceil((C / vec + 7) / 8), kWarp, kMaxThreads);
  const bool many_rows = M >= int64_t{device_properties().multiProcessorCount} * 16;
  return many_rows ? std::min(threads, 256) : threads;
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
    loss_forward_kernel<T, kVec<T>>
        <<<rows_grid(M), row_threads(C, kVec<T>, M), 0, current_stream()>>>(
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
      loss_backward_kernel<T, VEC><<<rows_grid(M), row_threads(C, VEC, M), 0, stream>>>(
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
