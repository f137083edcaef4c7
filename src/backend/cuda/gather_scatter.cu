// CUDA gather and scatter (index_kernels.h) over any strides, with cpu/index.cpp's semantics; the
// other index kernels are in index.cu.
//
// gather and scatter take any strides: each thread turns its linear position into per-operand
// offsets (32-bit division when the positions fit).
//
// Scatter keeps the CPU's order along dim: one thread walks each line (a position with dim
// removed) in order, so the last duplicate wins and sums add in the CPU's order. With too few
// lines to fill the GPU it runs one thread per element instead: assignment first records the
// last position along dim that targets each slot (atomicMax) and then writes only those, and
// addition uses atomics (like index_add: the order of duplicates, and so float rounding, then
// varies). Atomic adds are native for 32/64-bit types; 8/16-bit ones compare-and-swap the
// containing 32-bit word, computing the CPU's formula on their lane.
#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <string_view>
#include <type_traits>

#include "backend/common/index_kernels.h"
#include "backend/cuda/context.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/index_common.cuh"
#include "tessera/core/dtype_dispatch.h"
#include "tessera/ops/creation.h"

namespace tessera::cuda {
namespace {

constexpr int kMaxDims = 16;
constexpr int64_t kShortLine = 16;     // scatter lines up to this long are always walked
constexpr int64_t kManyLines = 32768;  // enough lines to walk them one thread each

// Calls f.template operator()<Index>() with the narrowest type that holds positions < count.
template <class F>
void dispatch_position(int64_t count, F&& f) {
  if (count <= std::numeric_limits<int32_t>::max()) f.template operator()<uint32_t>();
  else f.template operator()<int64_t>();
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

TESSERA_REGISTER_KERNEL(gather_kernel, DeviceType::CUDA, &gather);
TESSERA_REGISTER_KERNEL(scatter_kernel, DeviceType::CUDA, &scatter);

}  // namespace
}  // namespace tessera::cuda
