// CUDA reductions over [outer, reduce, inner] layouts: sum/prod/amax/amin and max/min with
// indices, with the CPU's accumulator types (double for floating sums and products, int64 for
// integer ones), output dtypes and NaN rules. Cumsum is in cumsum.cu.
//
// Rows (inner == 1): a power-of-two group of threads per row, sized to the row, reads it with
// 16-byte vector loads and combines through warp shuffles (and shared memory when the group spans
// warps), so short rows share a warp and long ones get a block. Columns (inner > 1): threads run
// along inner so that loads are coalesced, a few threads per column split the reduce axis and
// combine in shared memory, and a block covers several outer rows when the axis is short. When
// there are too few outputs to fill the GPU the reduce axis is split across blocks into partial
// accumulators, which a second pass of the same kernels combines; the split depends only on the
// shape and the GPU, so results do not change from run to run.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "backend/common/reduce_kernels.h"
#include "backend/cuda/context.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/reduce_common.cuh"

namespace tessera::cuda {
namespace {

constexpr int kWarp = 32;
constexpr unsigned kFullMask = 0xffffffffu;
constexpr int64_t kMinSplitElems = 4096;    // elements per block of a split row
constexpr int64_t kMinSplitRows = 16;       // rows per thread of a split column

// The smallest power of two >= v, at most the largest power of two <= cap.
int pow2_at_least(int64_t v, int cap) {
  int p = 1;
  while (p * 2 <= cap && p < v) p *= 2;
  return p;
}

// The reducers' combine for device code (theirs are host functions): the same formulas.
template <class R>
struct Combine;
template <>
struct Combine<fn::SumReducer> {
  template <class A>
  __device__ static A apply(A a, A b) { return a + b; }
};
template <>
struct Combine<fn::ProdReducer> {
  template <class A>
  __device__ static A apply(A a, A b) { return a * b; }
};
template <>
struct Combine<fn::MaxReducer> {
  template <class A>
  __device__ static A apply(A a, A b) { return fn::is_nan(a) || a > b ? a : b; }
};
template <>
struct Combine<fn::MinReducer> {
  template <class A>
  __device__ static A apply(A a, A b) { return fn::is_nan(a) || a < b ? a : b; }
};

// An op turns an input element at reduce position r into an accumulator (load) and merges two
// accumulators (combine); the kernels only ever combine through these.
template <class R, class T>
struct ValueOp {
  using acc_t = typename R::template acc_t<T>;
  __device__ static acc_t load(T v, int64_t) { return to_acc<acc_t>(v); }
  __device__ static acc_t combine(acc_t a, acc_t b) { return Combine<R>::apply(a, b); }
};

// Value and position of an extreme; i < 0 marks "nothing seen yet".
template <class A>
struct ArgAcc {
  A v;
  int64_t i;
};

// The CPU's rule, made order-independent: the first NaN wins, else the extreme value, and the
// first position among equal values.
template <class T, bool kMax>
struct ArgOp {
  using acc_t = ArgAcc<opmath_t<T>>;
  __device__ static acc_t load(T v, int64_t r) { return {to_acc<opmath_t<T>>(v), r}; }
  __device__ static acc_t combine(acc_t a, acc_t b) {
    if (a.i < 0) return b;
    if (b.i < 0) return a;
    const bool a_nan = fn::is_nan(a.v), b_nan = fn::is_nan(b.v);
    if (a_nan != b_nan) return a_nan ? a : b;
    if (!a_nan) {
      if (kMax ? a.v > b.v : a.v < b.v) return a;
      if (kMax ? b.v > a.v : b.v < a.v) return b;
    }
    return a.i < b.i ? a : b;
  }
};

// Second pass of a split reduction: its inputs are the first pass's accumulators.
template <class Op>
struct PartialOp {
  using acc_t = typename Op::acc_t;
  __device__ static acc_t load(acc_t v, int64_t) { return v; }
  __device__ static acc_t combine(acc_t a, acc_t b) { return Op::combine(a, b); }
};

// Result writers: out[q] for output (or partial) index q.
template <class O>
struct StoreCast {
  O* out;
  template <class A>
  __device__ void operator()(int64_t q, A a) const { out[q] = cast_out<O>(a); }
};
template <class A>
struct StorePartial {
  A* out;
  __device__ void operator()(int64_t q, A a) const { out[q] = a; }
};
template <class T>
struct StoreArg {
  T* values;
  int64_t* indices;
  template <class A>
  __device__ void operator()(int64_t q, ArgAcc<A> a) const {
    values[q] = cast_out<T>(a.v);
    indices[q] = a.i;
  }
};

template <class A>
__device__ A shfl_down(A v, int offset, int width) {
  if constexpr (sizeof(A) < sizeof(int)) {
    return static_cast<A>(__shfl_down_sync(kFullMask, static_cast<int>(v), offset, width));
  } else {
    return __shfl_down_sync(kFullMask, v, offset, width);
  }
}
template <class A>
__device__ ArgAcc<A> shfl_down(ArgAcc<A> a, int offset, int width) {
  return {shfl_down(a.v, offset, width), shfl_down(a.i, offset, width)};
}

// Combines acc over each group of tpr consecutive threads (a power of two <= kBlockSize); the
// group's first thread gets the result. Every thread of the block calls it (it may synchronise).
template <class Op, class A>
__device__ A group_reduce(A acc, int tpr) {
  const int width = tpr < kWarp ? tpr : kWarp;
  for (int offset = width / 2; offset > 0; offset /= 2)
    acc = Op::combine(acc, shfl_down(acc, offset, width));
  if (tpr <= kWarp) return acc;
  __shared__ A warp_acc[kBlockSize / kWarp];
  const int warp = threadIdx.x / kWarp;
  if (threadIdx.x % kWarp == 0) warp_acc[warp] = acc;
  __syncthreads();
  if (threadIdx.x % tpr == 0)
    for (int w = 1; w < tpr / kWarp; ++w) acc = Op::combine(acc, warp_acc[warp + w]);
  __syncthreads();  // warp_acc is reused by the next row
  return acc;
}

template <class In>
inline constexpr int kVec = sizeof(In) < 16 ? static_cast<int>(16 / sizeof(In)) : 1;
template <class In>
struct alignas(16) Vec {
  In v[kVec<In>];
};

// Folds row[begin, end) into acc, thread tx of tpr taking every tpr-th element: scalar up to the
// first 16-byte boundary, then 16-byte vectors two at a time (loads in flight), then the tail.
template <class Op, class In, class A>
__device__ A thread_reduce(const In* __restrict__ row, int64_t begin, int64_t end, int tx, int tpr,
                           A acc) {
  int64_t r = begin;
  if constexpr (kVec<In> > 1) {
    constexpr int V = kVec<In>;
    const auto misalign = static_cast<int64_t>(reinterpret_cast<uintptr_t>(row + begin) % 16);
    const int64_t head =
        std::min<int64_t>(end - begin, misalign ? (16 - misalign) / int64_t{sizeof(In)} : 0);
    for (int64_t k = begin + tx; k < begin + head; k += tpr) acc = Op::combine(acc, Op::load(row[k], k));
    r = begin + head;
    const int64_t nvec = (end - r) / V;
    const auto* vp = reinterpret_cast<const Vec<In>*>(row + r);
    int64_t j = tx;
    for (; j + tpr < nvec; j += 2 * tpr) {
      const Vec<In> a = vp[j], b = vp[j + tpr];
#pragma unroll
      for (int e = 0; e < V; ++e) acc = Op::combine(acc, Op::load(a.v[e], r + j * V + e));
#pragma unroll
      for (int e = 0; e < V; ++e) acc = Op::combine(acc, Op::load(b.v[e], r + (j + tpr) * V + e));
    }
    if (j < nvec) {
      const Vec<In> a = vp[j];
#pragma unroll
      for (int e = 0; e < V; ++e) acc = Op::combine(acc, Op::load(a.v[e], r + j * V + e));
    }
    r += nvec * V;
  }
  for (r += tx; r < end; r += tpr) acc = Op::combine(acc, Op::load(row[r], r));
  return acc;
}

// x [rows, n]: groups of tpr threads per row; block y reduces the chunk [y * chunk, + chunk) and
// writes output row * gridDim.y + y (a partial when the axis is split).
template <class Op, class In, class W>
__global__ void __launch_bounds__(kBlockSize)
    reduce_rows(const In* __restrict__ x, W w, int64_t rows, int64_t n, int64_t chunk, int tpr,
                typename Op::acc_t identity) {
  using A = typename Op::acc_t;
  const int tx = threadIdx.x % tpr, rows_per_block = kBlockSize / tpr;
  const int64_t begin = blockIdx.y * chunk, end = std::min(n, begin + chunk);
  for (int64_t row0 = int64_t{blockIdx.x} * rows_per_block; row0 < rows;
       row0 += int64_t{gridDim.x} * rows_per_block) {
    const int64_t row = row0 + threadIdx.x / tpr;
    A acc = identity;
    if (row < rows) acc = thread_reduce<Op>(x + row * n, begin, end, tx, tpr, acc);
    acc = group_reduce<Op>(acc, tpr);
    if (tx == 0 && row < rows) w(row * gridDim.y + blockIdx.y, acc);
  }
}

// x [outer, n, inner]: the block is bx columns x by reduce lanes x bz column tiles; a tile is bx
// consecutive columns of one outer row. Lanes combine in shared memory; block y reduces the chunk
// [y * chunk, + chunk) and writes output (o * gridDim.y + y) * inner + i.
template <class Op, class In, class W>
__global__ void __launch_bounds__(kBlockSize)
    reduce_cols(const In* __restrict__ x, W w, int64_t outer, int64_t n, int64_t inner,
                int64_t chunk, int bx, int by, typename Op::acc_t identity) {
  using A = typename Op::acc_t;
  __shared__ A partial[kBlockSize];
  const int t = threadIdx.x, tx = t % bx, ty = t / bx % by, tz = t / (bx * by);
  const int bz = blockDim.x / (bx * by);
  const int64_t tiles_per_row = ceil_div(inner, bx), tiles = outer * tiles_per_row;
  const int64_t begin = blockIdx.y * chunk, end = std::min(n, begin + chunk);
  for (int64_t tile0 = int64_t{blockIdx.x} * bz; tile0 < tiles; tile0 += int64_t{gridDim.x} * bz) {
    const int64_t tile = tile0 + tz, o = tile / tiles_per_row, i = tile % tiles_per_row * bx + tx;
    const bool valid = tile < tiles && i < inner;
    A acc = identity;
    if (valid) {
      const In* p = x + o * n * inner + i;
      int64_t r = begin + ty;
      for (; r + 3 * by < end; r += 4 * by) {  // four loads in flight
        const In v0 = p[r * inner], v1 = p[(r + by) * inner], v2 = p[(r + 2 * by) * inner],
                 v3 = p[(r + 3 * by) * inner];
        acc = Op::combine(acc, Op::load(v0, r));
        acc = Op::combine(acc, Op::load(v1, r + by));
        acc = Op::combine(acc, Op::load(v2, r + 2 * by));
        acc = Op::combine(acc, Op::load(v3, r + 3 * by));
      }
      for (; r < end; r += by) acc = Op::combine(acc, Op::load(p[r * inner], r));
    }
    partial[t] = acc;
    __syncthreads();
    for (int s = by / 2; s > 0; s /= 2) {
      if (ty < s) partial[t] = Op::combine(partial[t], partial[t + s * bx]);
      __syncthreads();
    }
    if (ty == 0 && valid) w((o * gridDim.y + blockIdx.y) * inner + i, partial[t]);
    __syncthreads();  // partial is reused by the next tiles
  }
}

// Reduces x viewed as [outer, n, inner] with Op, handing each output index and accumulator to w.
// With kSplit, a reduce axis too long for the number of outputs is split into partials (kept in a
// workspace) that a second, unsplit pass combines.
template <class Op, class In, class W, bool kSplit = true>
void launch_reduce(const In* x, W w, int64_t outer, int64_t n, int64_t inner,
                   typename Op::acc_t identity, Device device) {
  using A = typename Op::acc_t;
  const cudaStream_t stream = current_stream();
  const int64_t target = wave_blocks();
  if (inner == 1) {
    const int tpr = pow2_at_least(ceil_div(n, 4 * kVec<In>), kBlockSize);
    const int64_t groups = ceil_div(outer, kBlockSize / tpr);
    if constexpr (kSplit) {
      const int64_t splits = tpr == kBlockSize && groups < target
                                 ? std::min({ceil_div(target, groups), n / kMinSplitElems, kMaxSplits})
                                 : 1;
      if (splits > 1) {
        const int64_t chunk = ceil_div(n, splits), used = ceil_div(n, chunk);
        Tensor holder;
        A* ws = workspace<A>(holder, outer * used, device);
        reduce_rows<Op><<<dim3(grid_size(groups, 1), static_cast<unsigned>(used)), kBlockSize, 0,
                          stream>>>(x, StorePartial<A>{ws}, outer, n, chunk, tpr, identity);
        TESSERA_CUDA_CHECK_LAUNCH();
        launch_reduce<PartialOp<Op>, A, W, false>(ws, w, outer, used, 1, identity, device);
        return;
      }
    }
    reduce_rows<Op><<<grid_size(groups, 1), kBlockSize, 0, stream>>>(x, w, outer, n, n, tpr,
                                                                      identity);
    TESSERA_CUDA_CHECK_LAUNCH();
    return;
  }
  const int bx = static_cast<int>(std::min<int64_t>(inner, kWarp));
  const int by = pow2_at_least(ceil_div(n, 4), kBlockSize / bx);
  const int bz = kBlockSize / (bx * by);
  const int threads = bx * by * bz;
  const int64_t groups = ceil_div(outer * ceil_div(inner, bx), bz);
  if constexpr (kSplit) {
    const int64_t splits =
        groups < target ? std::min({ceil_div(target, groups), n / (by * kMinSplitRows), kMaxSplits})
                        : 1;
    if (splits > 1) {
      const int64_t chunk = ceil_div(n, splits), used = ceil_div(n, chunk);
      Tensor holder;
      A* ws = workspace<A>(holder, outer * used * inner, device);
      reduce_cols<Op><<<dim3(grid_size(groups, 1), static_cast<unsigned>(used)), threads, 0,
                        stream>>>(x, StorePartial<A>{ws}, outer, n, inner, chunk, bx, by, identity);
      TESSERA_CUDA_CHECK_LAUNCH();
      launch_reduce<PartialOp<Op>, A, W, false>(ws, w, outer, used, inner, identity, device);
      return;
    }
  }
  reduce_cols<Op><<<grid_size(groups, 1), threads, 0, stream>>>(x, w, outer, n, inner, n, bx, by,
                                                                 identity);
  TESSERA_CUDA_CHECK_LAUNCH();
}

template <class R>
void reduce(const Tensor& out, const Tensor& in, int64_t outer, int64_t n, int64_t inner) {
  if (outer * inner == 0) return;
  dispatch<R::dtypes>(in.dtype(), R::name, [&]<class T>() {
    using O = typename R::template out_t<T>;
    launch_reduce<ValueOp<R, T>>(in.data_ptr<T>(), StoreCast<O>{out.data_ptr<O>()}, outer, n,
                                 inner, R::template identity<T>(), in.device());
  });
}

void argreduce(const Tensor& values, const Tensor& indices, const Tensor& in, int64_t outer,
               int64_t n, int64_t inner, bool is_max) {
  if (outer * inner == 0) return;
  dispatch(in.dtype(), is_max ? "max" : "min", [&]<class T>() {
    const StoreArg<T> store{values.data_ptr<T>(), indices.data_ptr<int64_t>()};
    const ArgAcc<opmath_t<T>> identity{opmath_t<T>{}, -1};
    if (is_max) {
      launch_reduce<ArgOp<T, true>>(in.data_ptr<T>(), store, outer, n, inner, identity, in.device());
    } else {
      launch_reduce<ArgOp<T, false>>(in.data_ptr<T>(), store, outer, n, inner, identity,
                                     in.device());
    }
  });
}

using namespace fn;
[[maybe_unused]] const bool registered =
    register_kernel<ReduceKernel<SumReducer>>(DeviceType::CUDA, &reduce<SumReducer>) &&
    register_kernel<ReduceKernel<ProdReducer>>(DeviceType::CUDA, &reduce<ProdReducer>) &&
    register_kernel<ReduceKernel<MaxReducer>>(DeviceType::CUDA, &reduce<MaxReducer>) &&
    register_kernel<ReduceKernel<MinReducer>>(DeviceType::CUDA, &reduce<MinReducer>) &&
    register_kernel<argreduce_kernel>(DeviceType::CUDA, &argreduce);

}  // namespace
}  // namespace tessera::cuda
