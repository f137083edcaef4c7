// CUDA gathers, scatters and index helpers (index_kernels.h), with cpu/index.cpp's semantics.
//
// Kernels over contiguous rows give each row a power-of-two group of threads sized to it, so a
// warp covers several short rows or part of a long one and accesses stay coalesced. Selecting
// copies elements as raw units of their width (16 bytes where the rows allow), since it never
// looks at values. gather and scatter take any strides: each thread turns its linear position
// into per-operand offsets (32-bit division when the positions fit).
//
// Scatter keeps the CPU's order along dim: one thread walks each line (a position with dim
// removed) in order, so the last duplicate wins and sums add in the CPU's order. With too few
// lines to fill the GPU it runs one thread per element instead: assignment first records the
// last position along dim that targets each slot (atomicMax) and then writes only those, and
// addition uses atomics (like index_add: the order of duplicates, and so float rounding, then
// varies). Atomic adds are native for 32/64-bit types; 8/16-bit ones compare-and-swap the
// containing 32-bit word, computing the CPU's formula on their lane.
#include <cub/device/device_select.cuh>
#include <thrust/iterator/counting_iterator.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "backend/common/index_kernels.h"
#include "backend/cuda/context.h"
#include "backend/cuda/cuda_check.h"
#include "tessera/core/dtype_dispatch.h"
#include "tessera/ops/creation.h"

namespace tessera::cuda {
namespace {

constexpr int kMaxDims = 16;
constexpr int64_t kShortLine = 16;     // scatter lines up to this long are always walked
constexpr int64_t kManyLines = 32768;  // enough lines to walk them one thread each

constexpr int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

template <class F>
decltype(auto) dispatch_index(const Tensor& index, F&& f) {
  return dispatch<kIndexTypes>(index.dtype(), "index", std::forward<F>(f));
}

// Calls f.template operator()<U>() with U a plain type of the given width in bytes (1 to
// kMaxWidth, a power of two up to 16).
template <size_t kMaxWidth = 8, class F>
void dispatch_width(size_t width, F&& f) {
  if constexpr (kMaxWidth >= 16) {
    if (width == 16) return f.template operator()<uint4>();
  }
  switch (width) {
    case 1: return f.template operator()<uint8_t>();
    case 2: return f.template operator()<uint16_t>();
    case 4: return f.template operator()<uint32_t>();
    default: return f.template operator()<uint64_t>();
  }
}

// Calls f.template operator()<Index>() with the narrowest type that holds positions < count.
template <class F>
void dispatch_position(int64_t count, F&& f) {
  if (count <= std::numeric_limits<int32_t>::max()) f.template operator()<uint32_t>();
  else f.template operator()<int64_t>();
}

// The widest of 16, 8, 4, 2 and 1 bytes dividing a row's bytes and both base addresses.
size_t copy_unit(size_t row_bytes, const void* a, const void* b) {
  const uintptr_t bits = row_bytes | reinterpret_cast<uintptr_t>(a) | reinterpret_cast<uintptr_t>(b);
  size_t unit = 16;
  while (bits % unit) unit /= 2;
  return unit;
}

// Threads per row (a power of two up to the block) and blocks for rows of `units` items each.
struct RowLayout {
  int tpr;
  unsigned blocks;
};
RowLayout row_layout(int64_t rows, int64_t units) {
  int tpr = 1;
  while (tpr < kBlockSize && tpr < units) tpr *= 2;
  return {tpr, grid_size(ceil_div(rows, kBlockSize / tpr), 1)};
}

// Sizes and element strides of up to kMaxDims dims for N operands, passed to kernels by value.
template <int N>
struct Indexer {
  int ndim = 0;
  int64_t sizes[kMaxDims];
  int64_t strides[kMaxDims][N];

  // Every operand's offset at a row-major linear position.
  template <class Index>
  __device__ void get(Index linear, int64_t (&off)[N]) const {
#pragma unroll
    for (int k = 0; k < N; ++k) off[k] = 0;
    for (int d = ndim - 1; d >= 0; --d) {
      const auto size = static_cast<Index>(sizes[d]);
      const Index c = linear % size;
      linear /= size;
#pragma unroll
      for (int k = 0; k < N; ++k) off[k] += static_cast<int64_t>(c) * strides[d][k];
    }
  }
};

// The indexer over shape without dim `skip` (-1: none): size-1 dims dropped, and a dim merged
// into the one before it where every operand steps through both as one.
template <int N>
Indexer<N> make_indexer(const Shape& shape, int64_t skip, const std::array<Shape, N>& strides,
                        std::string_view op) {
  Indexer<N> ix;
  for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d) {
    if (d == skip || shape[d] == 1) continue;
    if (ix.ndim > 0) {
      const int p = ix.ndim - 1;
      bool merge = true;
      for (int k = 0; k < N; ++k) merge = merge && ix.strides[p][k] == strides[k][d] * shape[d];
      if (merge) {
        ix.sizes[p] *= shape[d];
        for (int k = 0; k < N; ++k) ix.strides[p][k] = strides[k][d];
        continue;
      }
    }
    TESSERA_CHECK(ix.ndim < kMaxDims, NotImplementedError, "[", op, "] expected at most ",
                  kMaxDims, " dims after merging on CUDA, got more");
    ix.sizes[ix.ndim] = shape[d];
    for (int k = 0; k < N; ++k) ix.strides[ix.ndim][k] = strides[k][d];
    ++ix.ndim;
  }
  return ix;
}

// ---- atomics ----

// Replaces *word with f(*word) atomically.
template <class F>
__device__ void atomic_update_word(unsigned* word, const F& f) {
  unsigned old = *word, assumed;
  do {
    assumed = old;
    old = atomicCAS(word, assumed, f(assumed));
  } while (old != assumed);
}

// Lane `lane` of a 32-bit word holding 4 / sizeof(T) elements (little-endian: lane 0 lowest).
template <class T>
using LaneBits = std::conditional_t<sizeof(T) == 1, uint8_t, uint16_t>;
template <class T>
__device__ T get_lane(unsigned word, int lane) {
  const auto bits = static_cast<LaneBits<T>>(word >> (lane * 8 * sizeof(T)));
  T v;
  std::memcpy(&v, &bits, sizeof(T));
  return v;
}
template <class T>
__device__ unsigned set_lane(unsigned word, int lane, T v) {
  LaneBits<T> bits;
  std::memcpy(&bits, &v, sizeof(T));
  const int shift = lane * 8 * static_cast<int>(sizeof(T));
  const unsigned mask = ((1u << (8 * sizeof(T))) - 1) << shift;
  return (word & ~mask) | (static_cast<unsigned>(bits) << shift);
}

// *p += v for 32/64-bit types: native float/double adds; integers as unsigned, whose
// wrap-around is the CPU's.
template <class T>
__device__ void atomic_add(T* p, T v) {
  if constexpr (std::is_floating_point_v<T>) {
    atomicAdd(p, v);
  } else if constexpr (sizeof(T) == 4) {
    atomicAdd(reinterpret_cast<unsigned*>(p), static_cast<unsigned>(v));
  } else {
    atomicAdd(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v));
  }
}

// scatter's Add on one element: OR for bool, else the sum in opmath.
template <class T>
__device__ T add_values(T d, T s) {
  if constexpr (std::is_same_v<T, bool>) return d || s;
  else return static_cast<T>(static_cast<opmath_t<T>>(d) + static_cast<opmath_t<T>>(s));
}

template <class T>
__device__ void atomic_add_values(T* p, T s) {
  if constexpr (sizeof(T) >= 4) {
    atomic_add(p, s);
  } else {
    const auto addr = reinterpret_cast<uintptr_t>(p);
    const int lane = static_cast<int>(addr % 4 / sizeof(T));
    atomic_update_word(reinterpret_cast<unsigned*>(addr - addr % 4), [&](unsigned word) {
      return set_lane(word, lane, add_values(get_lane<T>(word, lane), s));
    });
  }
}

// ---- index_range ----

// Block-wide min and max, valid in thread 0; every thread calls it.
__device__ void block_min_max(int64_t& lo, int64_t& hi) {
  __shared__ int64_t warp_lo[kBlockSize / 32], warp_hi[kBlockSize / 32];
  for (int offset = 16; offset > 0; offset /= 2) {
    lo = std::min(lo, static_cast<int64_t>(__shfl_down_sync(0xffffffffu, lo, offset)));
    hi = std::max(hi, static_cast<int64_t>(__shfl_down_sync(0xffffffffu, hi, offset)));
  }
  if (threadIdx.x % 32 == 0) {
    warp_lo[threadIdx.x / 32] = lo;
    warp_hi[threadIdx.x / 32] = hi;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kBlockSize / 32; ++w) {
      lo = std::min(lo, warp_lo[w]);
      hi = std::max(hi, warp_hi[w]);
    }
  }
}

// Per block {min, max} of p[0, n) into out[2 * blockIdx.x + {0, 1}].
template <class I>
__global__ void __launch_bounds__(kBlockSize) index_min_max(const I* __restrict__ p, int64_t n,
                                                            int64_t* __restrict__ out) {
  int64_t lo = std::numeric_limits<int64_t>::max(), hi = std::numeric_limits<int64_t>::min();
  for (int64_t i = blockIdx.x * int64_t{kBlockSize} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * kBlockSize) {
    const auto v = static_cast<int64_t>(p[i]);
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  block_min_max(lo, hi);
  if (threadIdx.x == 0) {
    out[2 * blockIdx.x] = lo;
    out[2 * blockIdx.x + 1] = hi;
  }
}

// {min, max} over count per-block pairs, by one block.
__global__ void __launch_bounds__(kBlockSize) merge_min_max(const int64_t* __restrict__ pairs,
                                                            int count, int64_t* __restrict__ out) {
  int64_t lo = std::numeric_limits<int64_t>::max(), hi = std::numeric_limits<int64_t>::min();
  for (int i = threadIdx.x; i < count; i += kBlockSize) {
    lo = std::min(lo, pairs[2 * i]);
    hi = std::max(hi, pairs[2 * i + 1]);
  }
  block_min_max(lo, hi);
  if (threadIdx.x == 0) {
    out[0] = lo;
    out[1] = hi;
  }
}

std::array<int64_t, 2> index_range(const Tensor& index) {
  const int64_t n = index.numel();
  const cudaStream_t stream = current_stream();
  const unsigned blocks = grid_size(n);
  Tensor buffer = empty({2 * int64_t{blocks} + 2}, TensorOptions(kInt64).with_device(index.device()));
  int64_t* pairs = buffer.data_ptr<int64_t>();
  dispatch_index(index, [&]<class I>() {
    index_min_max<<<blocks, kBlockSize, 0, stream>>>(index.data_ptr<I>(), n, pairs);
    TESSERA_CUDA_CHECK_LAUNCH();
  });
  const int64_t* result = pairs;
  if (blocks > 1) {
    merge_min_max<<<1, kBlockSize, 0, stream>>>(pairs, static_cast<int>(blocks), pairs + 2 * blocks);
    TESSERA_CUDA_CHECK_LAUNCH();
    result = pairs + 2 * blocks;
  }
  std::array<int64_t, 2> range;
  TESSERA_CUDA_CHECK(cudaMemcpyAsync(range.data(), result, sizeof(range), cudaMemcpyDeviceToHost,
                                     stream));
  TESSERA_CUDA_CHECK(cudaStreamSynchronize(stream));
  return range;
}

// ---- index_select / index_add ----

// out row (o, i) = x row (o, index[i]) for rows of `units` copy units; x is [outer, n, units].
template <class U, class I>
__global__ void __launch_bounds__(kBlockSize)
    index_select_rows(U* __restrict__ out, const U* __restrict__ x, const I* __restrict__ index,
                      int64_t rows, int64_t m, int64_t n, int64_t units, int tpr) {
  const int rows_per_block = kBlockSize / tpr;
  for (int64_t row = int64_t{blockIdx.x} * rows_per_block + threadIdx.x / tpr; row < rows;
       row += int64_t{gridDim.x} * rows_per_block) {
    const int64_t o = row / m;
    const U* from = x + (o * n + static_cast<int64_t>(index[row - o * m])) * units;
    U* to = out + row * units;
    for (int64_t k = threadIdx.x % tpr; k < units; k += tpr) to[k] = from[k];
  }
}

void index_select(const Tensor& out, const Tensor& x, const Tensor& index, int64_t outer,
                  int64_t inner) {
  const int64_t m = index.numel();
  if (out.numel() == 0) return;
  const int64_t n = x.numel() / (outer * inner);
  const size_t row_bytes = static_cast<size_t>(inner) * itemsize(x.dtype());
  const size_t unit = copy_unit(row_bytes, x.data_ptr(), out.data_ptr());
  const int64_t units = static_cast<int64_t>(row_bytes / unit);
  const RowLayout layout = row_layout(outer * m, units);
  dispatch_width<16>(unit, [&]<class U>() {
    dispatch_index(index, [&]<class I>() {
      index_select_rows<<<layout.blocks, kBlockSize, 0, current_stream()>>>(
          static_cast<U*>(out.data_ptr()), static_cast<const U*>(x.data_ptr()),
          index.data_ptr<I>(), outer * m, m, n, units, layout.tpr);
      TESSERA_CUDA_CHECK_LAUNCH();
    });
  });
}

// out row (o, index[i]) += alpha * src row (o, i), skipping index == skip; out is [outer, n,
// inner]. 32/64-bit elements add natively; narrower ones update whole 32-bit words, one thread
// per word the out row touches, with the CPU's formula on each lane inside the row.
template <class T, class I>
__global__ void __launch_bounds__(kBlockSize)
    index_add_rows(T* out, const T* __restrict__ src, const I* __restrict__ index, int64_t rows,
                   int64_t m, int64_t n, int64_t inner, opmath_t<T> alpha, int64_t skip, int tpr) {
  using A = opmath_t<T>;
  const int rows_per_block = kBlockSize / tpr, tx = threadIdx.x % tpr;
  for (int64_t row = int64_t{blockIdx.x} * rows_per_block + threadIdx.x / tpr; row < rows;
       row += int64_t{gridDim.x} * rows_per_block) {
    const int64_t o = row / m, v = static_cast<int64_t>(index[row - o * m]);
    if (v == skip) continue;
    T* d = out + (o * n + v) * inner;
    const T* s = src + row * inner;
    if constexpr (sizeof(T) >= 4) {
      for (int64_t k = tx; k < inner; k += tpr) {
        if constexpr (std::is_floating_point_v<T>) {
          atomic_add(d + k, alpha * s[k]);
        } else {  // wrap-around product, as the CPU's integer arithmetic
          using Bits = std::make_unsigned_t<T>;
          atomic_add(d + k, static_cast<T>(static_cast<Bits>(alpha) * static_cast<Bits>(s[k])));
        }
      }
    } else {
      constexpr int kLanes = 4 / sizeof(T);
      const auto addr = reinterpret_cast<uintptr_t>(d);
      const int head = static_cast<int>(addr % 4 / sizeof(T));  // lane of d[0] in its word
      auto* words = reinterpret_cast<unsigned*>(addr - addr % 4);
      for (int64_t w = tx; w < (head + inner + kLanes - 1) / kLanes; w += tpr) {
        decltype(alpha * A(s[0])) add[kLanes];
#pragma unroll
        for (int lane = 0; lane < kLanes; ++lane) {
          const int64_t k = w * kLanes + lane - head;
          add[lane] = k >= 0 && k < inner ? alpha * static_cast<A>(s[k]) : 0;
        }
        atomic_update_word(words + w, [&](unsigned word) {
#pragma unroll
          for (int lane = 0; lane < kLanes; ++lane) {
            const int64_t k = w * kLanes + lane - head;
            if (k >= 0 && k < inner)
              word = set_lane(word, lane,
                              static_cast<T>(static_cast<A>(get_lane<T>(word, lane)) + add[lane]));
          }
          return word;
        });
      }
    }
  }
}

void index_add(const Tensor& out, const Tensor& src, const Tensor& index, int64_t outer,
               int64_t inner, const Scalar& alpha, int64_t skip) {
  const int64_t m = index.numel();
  if (src.numel() == 0) return;
  const int64_t n = out.numel() / (outer * inner);
  dispatch<kNumericTypes>(out.dtype(), "index_add", [&]<class T>() {
    const int64_t units = sizeof(T) >= 4 ? inner : inner / (4 / sizeof(T)) + 1;
    const RowLayout layout = row_layout(outer * m, units);
    dispatch_index(index, [&]<class I>() {
      index_add_rows<<<layout.blocks, kBlockSize, 0, current_stream()>>>(
          out.data_ptr<T>(), src.data_ptr<T>(), index.data_ptr<I>(), outer * m, m, n, inner,
          alpha.to<opmath_t<T>>(), skip, layout.tpr);
      TESSERA_CUDA_CHECK_LAUNCH();
    });
  });
}

// ---- gather / scatter ----

// out[p] = x[p with p[dim] = index[p]]; the indexer runs over index's shape with operands
// {out, x with stride 0 along dim, index}.
template <class U, class I, class Index>
__global__ void __launch_bounds__(kBlockSize)
    gather_elements(U* __restrict__ out, const U* __restrict__ x, const I* __restrict__ index,
                    Indexer<3> ix, int64_t x_dim_stride, Index count) {
  for (Index e = blockIdx.x * Index{kBlockSize} + threadIdx.x; e < count;
       e += Index{gridDim.x} * kBlockSize) {
    int64_t off[3];
    ix.get(e, off);
    out[off[0]] = x[off[1] + static_cast<int64_t>(index[off[2]]) * x_dim_stride];
  }
}

void gather(const Tensor& out, const Tensor& x, const Tensor& index, int64_t dim) {
  const int64_t count = index.numel();
  if (count == 0) return;
  Shape x_strides = x.strides();
  x_strides[dim] = 0;
  const Indexer<3> ix =
      make_indexer<3>(index.sizes(), -1, {out.strides(), x_strides, index.strides()}, "gather");
  dispatch_width(itemsize(x.dtype()), [&]<class U>() {
    dispatch_index(index, [&]<class I>() {
      dispatch_position(count, [&]<class Index>() {
        gather_elements<<<grid_size(count), kBlockSize, 0, current_stream()>>>(
            static_cast<U*>(out.data_ptr()), static_cast<const U*>(x.data_ptr()),
            index.data_ptr<I>(), ix, x.strides()[dim], static_cast<Index>(count));
        TESSERA_CUDA_CHECK_LAUNCH();
      });
    });
  });
}

struct AssignTo {
  template <class T>
  __device__ void operator()(T& d, T s) const { d = s; }
};
struct AddTo {
  template <class T>
  __device__ void operator()(T& d, T s) const { d = add_values(d, s); }
};

// One thread per line (index's shape without dim; operands {out, index, src}) walking it in
// order, so later positions along dim land last.
template <class Update, class T, class I, class Index>
__global__ void __launch_bounds__(kBlockSize)
    scatter_lines(T* out, const I* __restrict__ index, const T* src, Indexer<3> ix, int64_t n,
                  int64_t os, int64_t is, int64_t ss, Index lines) {
  for (Index line = blockIdx.x * Index{kBlockSize} + threadIdx.x; line < lines;
       line += Index{gridDim.x} * kBlockSize) {
    int64_t off[3];
    ix.get(line, off);
    int64_t k = 0;
    for (; k + 4 <= n; k += 4) {  // four positions' loads in flight before their updates
      int64_t slot[4];
      T value[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        slot[j] = off[0] + static_cast<int64_t>(index[off[1] + (k + j) * is]) * os;
        value[j] = src[off[2] + (k + j) * ss];
      }
#pragma unroll
      for (int j = 0; j < 4; ++j) Update{}(out[slot[j]], value[j]);
    }
    for (; k < n; ++k)
      Update{}(out[off[0] + static_cast<int64_t>(index[off[1] + k * is]) * os], src[off[2] + k * ss]);
  }
}

// The element-parallel passes run over index's whole shape with operands {out with stride 0 along
// dim, index, src, position along dim}. The out slot of an element is off[0] + index * os.
using ElementIndexer = Indexer<4>;

// last[slot] = the greatest position along dim that targets slot.
template <class I, class Index>
__global__ void __launch_bounds__(kBlockSize)
    scatter_claim(int* __restrict__ last, const I* __restrict__ index, ElementIndexer ix,
                  int64_t os, Index count) {
  for (Index e = blockIdx.x * Index{kBlockSize} + threadIdx.x; e < count;
       e += Index{gridDim.x} * kBlockSize) {
    int64_t off[4];
    ix.get(e, off);
    atomicMax(last + off[0] + static_cast<int64_t>(index[off[1]]) * os, static_cast<int>(off[3]));
  }
}

// Writes the elements that scatter_claim found last for their slot.
template <class U, class I, class Index>
__global__ void __launch_bounds__(kBlockSize)
    scatter_winners(U* __restrict__ out, const I* __restrict__ index, const U* __restrict__ src,
                    const int* __restrict__ last, ElementIndexer ix, int64_t os, Index count) {
  for (Index e = blockIdx.x * Index{kBlockSize} + threadIdx.x; e < count;
       e += Index{gridDim.x} * kBlockSize) {
    int64_t off[4];
    ix.get(e, off);
    const int64_t slot = off[0] + static_cast<int64_t>(index[off[1]]) * os;
    if (last[slot] == static_cast<int>(off[3])) out[slot] = src[off[2]];
  }
}

template <class T, class I, class Index>
__global__ void __launch_bounds__(kBlockSize)
    scatter_add_elements(T* out, const I* __restrict__ index, const T* __restrict__ src,
                         ElementIndexer ix, int64_t os, Index count) {
  for (Index e = blockIdx.x * Index{kBlockSize} + threadIdx.x; e < count;
       e += Index{gridDim.x} * kBlockSize) {
    int64_t off[4];
    ix.get(e, off);
    atomic_add_values(out + off[0] + static_cast<int64_t>(index[off[1]]) * os, src[off[2]]);
  }
}

void scatter(const Tensor& out, const Tensor& index, const Tensor& src, int64_t dim,
             ScatterMode mode) {
  const int64_t count = index.numel();
  if (count == 0) return;
  const std::string_view op = mode == ScatterMode::Add ? "scatter_add" : "scatter";
  const int64_t n = index.sizes()[dim], lines = count / n;
  const int64_t os = out.strides()[dim], is = index.strides()[dim], ss = src.strides()[dim];
  const cudaStream_t stream = current_stream();
  if (n <= kShortLine || lines >= kManyLines || n > std::numeric_limits<int32_t>::max()) {
    const Indexer<3> ix =
        make_indexer<3>(index.sizes(), dim, {out.strides(), index.strides(), src.strides()}, op);
    auto walk = [&]<class Update, class T>() {
      dispatch_index(index, [&]<class I>() {
        dispatch_position(lines, [&]<class Index>() {
          scatter_lines<Update><<<grid_size(lines), kBlockSize, 0, stream>>>(
              static_cast<T*>(out.data_ptr()), index.data_ptr<I>(),
              static_cast<const T*>(src.data_ptr()), ix, n, os, is, ss, static_cast<Index>(lines));
          TESSERA_CUDA_CHECK_LAUNCH();
        });
      });
    };
    if (mode == ScatterMode::Assign) {
      dispatch_width(itemsize(out.dtype()), [&]<class U>() { walk.template operator()<AssignTo, U>(); });
    } else {
      dispatch(out.dtype(), op, [&]<class T>() { walk.template operator()<AddTo, T>(); });
    }
    return;
  }
  Shape out_strides = out.strides(), position(index.dim(), 0);
  out_strides[dim] = 0;
  position[dim] = 1;
  const ElementIndexer ix = make_indexer<4>(
      index.sizes(), -1, {out_strides, index.strides(), src.strides(), position}, op);
  const unsigned blocks = grid_size(count);
  if (mode == ScatterMode::Add) {
    dispatch(out.dtype(), op, [&]<class T>() {
      dispatch_index(index, [&]<class I>() {
        dispatch_position(count, [&]<class Index>() {
          scatter_add_elements<<<blocks, kBlockSize, 0, stream>>>(
              out.data_ptr<T>(), index.data_ptr<I>(), src.data_ptr<T>(), ix, os,
              static_cast<Index>(count));
          TESSERA_CUDA_CHECK_LAUNCH();
        });
      });
    });
    return;
  }
  // last[] covers every element offset of out, starting at -1 (all bytes 0xff).
  int64_t extent = 1;
  for (int64_t d = 0; d < out.dim(); ++d) extent += (out.sizes()[d] - 1) * out.strides()[d];
  Tensor last = empty({extent}, TensorOptions(kInt32).with_device(out.device()));
  TESSERA_CUDA_CHECK(cudaMemsetAsync(last.data_ptr(), 0xff, extent * sizeof(int32_t), stream));
  dispatch_width(itemsize(out.dtype()), [&]<class U>() {
    dispatch_index(index, [&]<class I>() {
      dispatch_position(count, [&]<class Index>() {
        scatter_claim<<<blocks, kBlockSize, 0, stream>>>(last.data_ptr<int32_t>(),
                                                         index.data_ptr<I>(), ix, os,
                                                         static_cast<Index>(count));
        TESSERA_CUDA_CHECK_LAUNCH();
        scatter_winners<<<blocks, kBlockSize, 0, stream>>>(
            static_cast<U*>(out.data_ptr()), index.data_ptr<I>(),
            static_cast<const U*>(src.data_ptr()), last.data_ptr<int32_t>(), ix, os,
            static_cast<Index>(count));
        TESSERA_CUDA_CHECK_LAUNCH();
      });
    });
  });
}

// ---- masked positions and triangles ----

// cub's stream compaction of the positions 0..n-1 flagged by the mask.
void mask_positions(const Tensor& positions, const Tensor& mask) {
  if (positions.numel() == 0) return;
  const int64_t n = mask.numel();
  const cudaStream_t stream = current_stream();
  const thrust::counting_iterator<int64_t> first(0);
  const bool* flags = mask.data_ptr<bool>();
  int64_t* out = positions.data_ptr<int64_t>();
  size_t temp_bytes = 0;
  TESSERA_CUDA_CHECK(cub::DeviceSelect::Flagged(nullptr, temp_bytes, first, flags, out,
                                                static_cast<int64_t*>(nullptr), n, stream));
  // The selected count (which the op already knows) goes to the first 256 bytes.
  constexpr int64_t kCountBytes = 256;
  Tensor temp = empty({kCountBytes + static_cast<int64_t>(temp_bytes)},
                      TensorOptions(kUInt8).with_device(mask.device()));
  auto* base = static_cast<unsigned char*>(temp.data_ptr());
  TESSERA_CUDA_CHECK(cub::DeviceSelect::Flagged(base + kCountBytes, temp_bytes, first, flags, out,
                                                reinterpret_cast<int64_t*>(base), n, stream));
}

// Rows of C elements of a [.., R, C] tensor; keeps columns [begin, end) of row r and zeroes the
// rest (zero is all-zero bits in every dtype).
template <class U>
__global__ void __launch_bounds__(kBlockSize)
    triangle_rows(U* out, const U* x, int64_t rows, int64_t R, int64_t C, int64_t k, bool lower,
                  int tpr) {
  const int rows_per_block = kBlockSize / tpr;
  for (int64_t row = int64_t{blockIdx.x} * rows_per_block + threadIdx.x / tpr; row < rows;
       row += int64_t{gridDim.x} * rows_per_block) {
    const int64_t cut = std::clamp<int64_t>(row % R + k + (lower ? 1 : 0), 0, C);
    const int64_t begin = lower ? 0 : cut, end = lower ? cut : C;
    for (int64_t c = threadIdx.x % tpr; c < C; c += tpr)
      out[row * C + c] = c >= begin && c < end ? x[row * C + c] : U{};
  }
}

void triangle(const Tensor& out, const Tensor& x, int64_t k, bool lower) {
  const int64_t R = out.sizes()[out.dim() - 2], C = out.sizes()[out.dim() - 1];
  if (out.numel() == 0) return;
  const int64_t rows = out.numel() / C;
  const RowLayout layout = row_layout(rows, C);
  dispatch_width(itemsize(x.dtype()), [&]<class U>() {
    triangle_rows<<<layout.blocks, kBlockSize, 0, current_stream()>>>(
        static_cast<U*>(out.data_ptr()), static_cast<const U*>(x.data_ptr()), rows, R, C, k, lower,
        layout.tpr);
    TESSERA_CUDA_CHECK_LAUNCH();
  });
}

TESSERA_REGISTER_KERNEL(index_range_kernel, DeviceType::CUDA, &index_range);
TESSERA_REGISTER_KERNEL(index_select_kernel, DeviceType::CUDA, &index_select);
TESSERA_REGISTER_KERNEL(index_add_kernel, DeviceType::CUDA, &index_add);
TESSERA_REGISTER_KERNEL(gather_kernel, DeviceType::CUDA, &gather);
TESSERA_REGISTER_KERNEL(scatter_kernel, DeviceType::CUDA, &scatter);
TESSERA_REGISTER_KERNEL(mask_positions_kernel, DeviceType::CUDA, &mask_positions);
TESSERA_REGISTER_KERNEL(triangle_kernel, DeviceType::CUDA, &triangle);

}  // namespace
}  // namespace tessera::cuda
