// CUDA fused optimizer updates (the counterpart of cpu/optim.cpp): one grid-stride kernel per
// parameter, or for Adam one launch over a list (a block per chunk of a parameter), reading p, g
// and the state once and writing p and the state once, with the CPU's formulas and constants
// (computed on the host in double, rounded to the state dtype) and the arithmetic in the state
// dtype, so both backends step alike up to float rounding. Every tensor is contiguous; when all
// pointers allow it, elements move in 16-byte state vectors.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "backend/common/optim_kernels.h"
#include "backend/cuda/context.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/vectorized.cuh"
#include "backend/cuda/warp.cuh"
#include "tessera/core/dtype_dispatch.h"
#include "tessera/ops/creation.h"
#include "tessera/ops/elementwise.h"

namespace tessera::cuda {
namespace {

template <class S>
S* state_ptr(const Tensor& t) {
  return t.defined() ? t.data_ptr<S>() : nullptr;
}

// Runs body(i, integral_constant<W>) over [0, n) grid-stride: vectors of W elements, then the
// n % W tail one by one.
template <int W, class Body>
__device__ void for_each_vector(int64_t n, const Body& body) {
  const int64_t n_vec = n / W, stride = int64_t{gridDim.x} * blockDim.x;
  const int64_t first = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  for (int64_t k = first; k < n_vec; k += stride) body(k * W, std::integral_constant<int, W>{});
  for (int64_t i = n_vec * W + first; i < n; i += stride) body(i, std::integral_constant<int, 1>{});
}

template <class S>
struct SgdConstants {
  S lr, wd, momentum, keep;
  bool use_momentum, nesterov, first, maximize;

  // One element: returns the new parameter, updating the momentum buffer value b.
  __device__ S operator()(S p, S d, S& b) const {
    if (maximize) d = -d;
    d += wd * p;
    if (use_momentum) {
      b = first ? d : b * momentum + keep * d;
      d = nesterov ? d + momentum * b : b;
    }
    return p - lr * d;
  }
};

template <int W, class T, class S>
__global__ void sgd_kernel(T* p, const T* g, S* buf, int64_t n, SgdConstants<S> c) {
  for_each_vector<W>(n, [&]<int V>(int64_t i, std::integral_constant<int, V>) {
    Pack<T, V> pv = load<V>(p + i);
    const Pack<T, V> gv = load<V>(g + i);
    Pack<S, V> bv{};
    if (c.use_momentum && !c.first) bv = load<V>(buf + i);  // the first step only writes it
#pragma unroll
    for (int j = 0; j < V; ++j)
      pv.v[j] = static_cast<T>(c(static_cast<S>(pv.v[j]), static_cast<S>(gv.v[j]), bv.v[j]));
    store<V>(p + i, pv);
    if (c.use_momentum) store<V>(buf + i, bv);
  });
}

void sgd_step(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer,
              const SgdStepParams& h) {
  dispatch<kFloatingTypes>(param.dtype(), "sgd_step", [&]<class T>() {
    using S = opmath_t<T>;
    constexpr int W = kVec<S>;
    const int64_t n = param.numel();
    if (n == 0) return;
    T* p = param.data_ptr<T>();
    const T* g = grad.data_ptr<T>();
    S* buf = state_ptr<S>(momentum_buffer);
    const SgdConstants<S> c{static_cast<S>(h.lr),
                            static_cast<S>(h.weight_decay),
                            static_cast<S>(h.momentum),
                            static_cast<S>(1.0 - h.dampening),
                            h.momentum != 0.0,
                            h.nesterov,
                            h.first_step,
                            h.maximize};
    if (aligned<W>(p) && aligned<W>(g) && aligned<W>(buf))
      sgd_kernel<W>
          <<<grid_size((n + W - 1) / W), kBlockSize, 0, current_stream()>>>(p, g, buf, n, c);
    else
      sgd_kernel<1><<<grid_size(n), kBlockSize, 0, current_stream()>>>(p, g, buf, n, c);
    TESSERA_CUDA_CHECK_LAUNCH();
  });
}

// maximize and the two weight-decay forms are folded into constants as on the CPU (sign = -1
// negates exactly, decay = 1 and l2 = 0 leave values unchanged).
template <class S>
struct AdamConstants {
  S beta1, beta2, one_minus_beta1, one_minus_beta2, step_size, bias_correction2_sqrt, eps, sign,
      decay, l2;
};

// One vector of V elements at p, g, m, v (vmax with amsgrad) updated in place.
template <bool Amsgrad, int V, class T, class S>
__device__ void adam_vector(T* p, const T* g, S* m, S* v, S* vmax, const AdamConstants<S>& c) {
  Pack<T, V> pv = load<V>(p);
  const Pack<T, V> gv = load<V>(g);
  Pack<S, V> mv = load<V>(m), vv = load<V>(v), vmaxv{};
  if constexpr (Amsgrad) vmaxv = load<V>(vmax);
#pragma unroll
  for (int j = 0; j < V; ++j) {
    const S pi = static_cast<S>(pv.v[j]) * c.decay;             // AdamW: p *= 1 - lr * wd
    const S gi = c.sign * static_cast<S>(gv.v[j]) + c.l2 * pi;  // Adam: g += wd * p
    const S mi = mv.v[j] * c.beta1 + c.one_minus_beta1 * gi;
    S vi = vv.v[j] * c.beta2 + c.one_minus_beta2 * gi * gi;
    mv.v[j] = mi;
    vv.v[j] = vi;
    // std::max's choice: the old maximum unless the new value is larger (a nan keeps it).
    if constexpr (Amsgrad) vi = vmaxv.v[j] = vmaxv.v[j] < vi ? vi : vmaxv.v[j];
    const S denom = std::sqrt(vi) / c.bias_correction2_sqrt + c.eps;
    pv.v[j] = static_cast<T>(pi - c.step_size * (mi / denom));
  }
  store<V>(p, pv);
  store<V>(m, mv);
  store<V>(v, vv);
  if constexpr (Amsgrad) store<V>(vmax, vmaxv);
}

template <bool Amsgrad, int W, class T, class S>
__global__ void adam_kernel(T* p, const T* g, S* m, S* v, S* vmax, int64_t n, AdamConstants<S> c) {
  for_each_vector<W>(n, [&]<int V>(int64_t i, std::integral_constant<int, V>) {
    adam_vector<Amsgrad, V>(p + i, g + i, m + i, v + i, Amsgrad ? vmax + i : vmax, c);
  });
}

template <bool Amsgrad, class T, class S>
void launch_adam(T* p, const T* g, S* m, S* v, S* vmax, int64_t n, const AdamConstants<S>& c) {
  constexpr int W = kVec<S>;
  if (aligned<W>(p) && aligned<W>(g) && aligned<W>(m) && aligned<W>(v) && aligned<W>(vmax))
    adam_kernel<Amsgrad, W>
        <<<grid_size((n + W - 1) / W), kBlockSize, 0, current_stream()>>>(p, g, m, v, vmax, n, c);
  else
    adam_kernel<Amsgrad, 1>
        <<<grid_size(n), kBlockSize, 0, current_stream()>>>(p, g, m, v, vmax, n, c);
  TESSERA_CUDA_CHECK_LAUNCH();
}

// Scalars as torch computes them (in double, then rounded to the state dtype).
template <class S>
AdamConstants<S> adam_constants(const AdamStepParams& h) {
  const double t = static_cast<double>(h.step);
  const bool decoupled = h.decoupled_weight_decay;
  return {static_cast<S>(h.beta1),
          static_cast<S>(h.beta2),
          static_cast<S>(1.0 - h.beta1),
          static_cast<S>(1.0 - h.beta2),
          static_cast<S>(h.lr / (1.0 - std::pow(h.beta1, t))),
          static_cast<S>(std::sqrt(1.0 - std::pow(h.beta2, t))),
          static_cast<S>(h.eps),
          static_cast<S>(h.maximize ? -1.0 : 1.0),
          static_cast<S>(decoupled ? 1.0 - h.lr * h.weight_decay : 1.0),
          static_cast<S>(decoupled ? 0.0 : h.weight_decay)};
}

void adam_step(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
               const Tensor& exp_avg_sq, const Tensor& max_exp_avg_sq, const AdamStepParams& h) {
  dispatch<kFloatingTypes>(param.dtype(), "adam_step", [&]<class T>() {
    using S = opmath_t<T>;
    const int64_t n = param.numel();
    if (n == 0) return;
    auto* launch = h.amsgrad ? &launch_adam<true, T, S> : &launch_adam<false, T, S>;
    launch(param.data_ptr<T>(), grad.data_ptr<T>(), exp_avg.data_ptr<S>(), exp_avg_sq.data_ptr<S>(),
           state_ptr<S>(max_exp_avg_sq), n, adam_constants<S>(h));
  });
}

// A host vector of plain records copied to the device (a tensor that lives until the launches
// that read it are done: the caching allocator reuses it only after the stream gets there).
template <class Record>
Tensor device_table(const std::vector<Record>& records, Device device) {
  const auto bytes = static_cast<int64_t>(records.size() * sizeof(Record));
  Tensor host = empty({bytes}, kUInt8);
  std::memcpy(host.data_ptr(), records.data(), static_cast<size_t>(bytes));
  return host.to(device);
}

// ---- Adam over a list: one launch, one block per chunk of a parameter ----

// Elements per chunk of the list kernels (a multiple of every vector width).
constexpr int64_t kChunk = 65536;

template <class T, class S>
struct AdamChunk {
  T* p;
  const T* g;
  S *m, *v, *vmax;
  int64_t n;  // elements in this chunk (<= kChunk)
};

template <bool Amsgrad, int W, class T, class S>
__global__ void adam_chunks_kernel(const AdamChunk<T, S>* chunks, AdamConstants<S> c) {
  const AdamChunk<T, S> k = chunks[blockIdx.x];
  const int64_t n_vec = k.n / W;
  for (int64_t j = threadIdx.x; j < n_vec; j += blockDim.x) {
    const int64_t i = j * W;
    adam_vector<Amsgrad, W>(k.p + i, k.g + i, k.m + i, k.v + i, Amsgrad ? k.vmax + i : k.vmax, c);
  }
  for (int64_t i = n_vec * W + threadIdx.x; i < k.n; i += blockDim.x)
    adam_vector<Amsgrad, 1>(k.p + i, k.g + i, k.m + i, k.v + i, Amsgrad ? k.vmax + i : k.vmax, c);
}

// Launches adam_chunks_kernel<Amsgrad, W> over chunks (one block each), if any.
template <int W, class T, class S>
void launch_adam_chunks(const std::vector<AdamChunk<T, S>>& chunks, bool amsgrad,
                        const AdamConstants<S>& k, Device device) {
  if (chunks.empty()) return;
  const Tensor table = device_table(chunks, device);
  const auto* c = static_cast<const AdamChunk<T, S>*>(table.data_ptr());
  const auto blocks = static_cast<unsigned>(chunks.size());
  if (amsgrad)
    adam_chunks_kernel<true, W><<<blocks, kBlockSize, 0, current_stream()>>>(c, k);
  else
    adam_chunks_kernel<false, W><<<blocks, kBlockSize, 0, current_stream()>>>(c, k);
  TESSERA_CUDA_CHECK_LAUNCH();
}

void adam_step_list(const TensorList& params, const TensorList& grads, const TensorList& exp_avgs,
                    const TensorList& exp_avg_sqs, const TensorList& max_exp_avg_sqs,
                    const AdamStepParams& h) {
  dispatch<kFloatingTypes>(params[0].dtype(), "adam_step_list", [&]<class T>() {
    using S = opmath_t<T>;
    constexpr int W = kVec<S>;
    // Parameters whose pointers all allow W-element vectors go in one launch, the others
    // (ZeRO's shards start anywhere) in a second, element by element. Chunks are multiples of W
    // elements from their parameter's start, so they stay aligned.
    std::vector<AdamChunk<T, S>> vector_chunks, scalar_chunks;
    for (size_t t = 0; t < params.size(); ++t) {
      AdamChunk<T, S> whole{params[t].data_ptr<T>(), grads[t].data_ptr<T>(),
                            exp_avgs[t].data_ptr<S>(), exp_avg_sqs[t].data_ptr<S>(),
                            h.amsgrad ? max_exp_avg_sqs[t].data_ptr<S>() : nullptr,
                            params[t].numel()};
      const bool vectors = aligned<W>(whole.p) && aligned<W>(whole.g) && aligned<W>(whole.m) &&
                           aligned<W>(whole.v) && aligned<W>(whole.vmax);
      for (int64_t start = 0; start < whole.n; start += kChunk)
        (vectors ? vector_chunks : scalar_chunks)
            .push_back({whole.p + start, whole.g + start, whole.m + start, whole.v + start,
                        whole.vmax ? whole.vmax + start : nullptr,
                        std::min(kChunk, whole.n - start)});
    }
    const AdamConstants<S> k = adam_constants<S>(h);
    launch_adam_chunks<W>(vector_chunks, h.amsgrad, k, params[0].device());
    launch_adam_chunks<1>(scalar_chunks, h.amsgrad, k, params[0].device());
  });
}

// ---- clipping and unscaling over a list: one launch, one block per chunk of a tensor ----

struct Chunk {
  void* data;
  int64_t n;  // elements in this chunk (<= kChunk)
  int64_t tensor;
};

// The chunk table of a list on the list's device.
Tensor chunk_table(const TensorList& tensors, int64_t* count) {
  std::vector<Chunk> chunks;
  for (size_t k = 0; k < tensors.size(); ++k) {
    char* base = static_cast<char*>(tensors[k].data_ptr());
    const int64_t n = tensors[k].numel(), item = tensors[k].element_size();
    for (int64_t start = 0; start < n; start += kChunk)
      chunks.push_back({base + start * item, std::min(kChunk, n - start), static_cast<int64_t>(k)});
  }
  *count = static_cast<int64_t>(chunks.size());
  return device_table(chunks, tensors[0].device());
}

// Each chunk's sum of squares into partials[chunk] (a fixed-order block reduction).
template <class T, class S>
__global__ void sum_squares_chunks(const Chunk* chunks, S* partials) {
  const Chunk c = chunks[blockIdx.x];
  const T* x = static_cast<const T*>(c.data);
  S acc = 0;
  for (int64_t i = threadIdx.x; i < c.n; i += blockDim.x)
    acc += static_cast<S>(x[i]) * static_cast<S>(x[i]);
  acc = block_sum(acc);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

// Each tensor's sum of its chunks' partials in chunk order, by the thread of its first chunk (a
// tensor's chunks are consecutive): the same bits every run, which atomics across blocks were
// not, so clipped steps and resumed runs repeat exactly.
template <class S>
__global__ void add_chunk_partials(const Chunk* chunks, int64_t count, const S* partials,
                                   S* sums) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= count || (i > 0 && chunks[i - 1].tensor == chunks[i].tensor)) return;
  S total = 0;
  for (int64_t j = i; j < count && chunks[j].tensor == chunks[i].tensor; ++j) total += partials[j];
  sums[chunks[i].tensor] = total;
}

template <class T, class S>
__global__ void scale_chunks(const Chunk* chunks, const S* scale) {
  const Chunk c = chunks[blockIdx.x];
  T* x = static_cast<T*>(c.data);
  const S s = *scale;
  for (int64_t i = threadIdx.x; i < c.n; i += blockDim.x)
    x[i] = static_cast<T>(static_cast<S>(x[i]) * s);
}

template <class T, class S>
__global__ void unscale_chunks(const Chunk* chunks, const S* inv_scale, float* found_inf) {
  const Chunk c = chunks[blockIdx.x];
  T* x = static_cast<T*>(c.data);
  const S s = *inv_scale;
  bool bad = false;
  for (int64_t i = threadIdx.x; i < c.n; i += blockDim.x) {
    const S v = static_cast<S>(x[i]);
    bad |= !::isfinite(v);  // CUDA's, not the tensor op
    x[i] = static_cast<T>(v * s);
  }
  // Every writer stores the same 1, so the race between blocks is benign.
  if (__syncthreads_or(bad) && threadIdx.x == 0) *found_inf = 1.0f;
}

// Calls launch.operator()<T, opmath_t<T>>(blocks, chunks) for the chunk table of tensors (one
// block per chunk), unless the list holds no elements.
template <class Launch>
void launch_over_chunks(const TensorList& tensors, const char* op, Launch launch) {
  int64_t count = 0;
  const Tensor table = chunk_table(tensors, &count);
  if (count == 0) return;
  dispatch<kFloatingTypes>(tensors[0].dtype(), op, [&]<class T>() {
    launch.template operator()<T, opmath_t<T>>(count, static_cast<const Chunk*>(table.data_ptr()));
  });
  TESSERA_CUDA_CHECK_LAUNCH();
}

void sum_squares(const TensorList& tensors, const Tensor& sums) {
  Tensor zeroed = sums;  // empty tensors have no chunk to write theirs
  fill_(zeroed, 0);
  launch_over_chunks(tensors, "sum_squares", [&]<class T, class S>(int64_t blocks, const Chunk* c) {
    const Tensor partials = empty({blocks}, TensorOptions(sums.dtype()).with_device(sums.device()));
    sum_squares_chunks<T, S>
        <<<blocks, kBlockSize, 0, current_stream()>>>(c, partials.data_ptr<S>());
    add_chunk_partials<S><<<grid_size(blocks), kBlockSize, 0, current_stream()>>>(
        c, blocks, partials.data_ptr<S>(), sums.data_ptr<S>());
  });
}

void scale_by(const TensorList& tensors, const Tensor& scale) {
  launch_over_chunks(tensors, "scale_by", [&]<class T, class S>(int64_t blocks, const Chunk* c) {
    scale_chunks<T, S><<<blocks, kBlockSize, 0, current_stream()>>>(c, scale.data_ptr<S>());
  });
}

void unscale(const TensorList& tensors, const Tensor& inv_scale, const Tensor& found_inf) {
  launch_over_chunks(tensors, "unscale", [&]<class T, class S>(int64_t blocks, const Chunk* c) {
    unscale_chunks<T, S><<<blocks, kBlockSize, 0, current_stream()>>>(c, inv_scale.data_ptr<S>(),
                                                                      found_inf.data_ptr<float>());
  });
}

TESSERA_REGISTER_KERNEL(sgd_step_kernel, DeviceType::CUDA, &sgd_step);
TESSERA_REGISTER_KERNEL(sum_squares_kernel, DeviceType::CUDA, &sum_squares);
TESSERA_REGISTER_KERNEL(scale_by_kernel, DeviceType::CUDA, &scale_by);
TESSERA_REGISTER_KERNEL(unscale_kernel, DeviceType::CUDA, &unscale);
TESSERA_REGISTER_KERNEL(adam_step_kernel, DeviceType::CUDA, &adam_step);
TESSERA_REGISTER_KERNEL(adam_step_list_kernel, DeviceType::CUDA, &adam_step_list);

}  // namespace
}  // namespace tessera::cuda
