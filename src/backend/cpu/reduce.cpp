// CPU reductions over [outer, reduce, inner] layouts.
#include <algorithm>
#include <type_traits>
#include <vector>

#include "backend/common/reduce_kernels.h"

namespace tessera::cpu {
namespace {

constexpr int64_t kInnerBlock = 256;
// Float sums run in float over chunks this long (vectorised) and add the chunk totals in
// double: close to pairwise-summation accuracy at full SIMD width.
constexpr int64_t kChunk = 2048;

template <class T>
constexpr bool float_sum = std::is_same_v<opmath_t<T>, float>;

// Sum of n contiguous values of a float-like type: 16 float lanes per chunk (the compiler
// vectorises the fixed-size lane loop), so the rounding is the same at every optimisation level.
template <class T>
double chunked_sum(const T* x, int64_t n) {
  constexpr int64_t kLanes = 16;
  double total = 0;
  for (int64_t c = 0; c < n; c += kChunk) {
    const int64_t e = std::min(n, c + kChunk);
    float lanes[kLanes] = {};
    int64_t r = c;
    for (; r + kLanes <= e; r += kLanes)
      for (int64_t l = 0; l < kLanes; ++l) lanes[l] += static_cast<float>(x[r + l]);
    float part = 0;
    for (int64_t l = 0; l < kLanes; ++l) part += lanes[l];
    for (; r < e; ++r) part += static_cast<float>(x[r]);
    total += part;
  }
  return total;
}

// Column sums of a [n, inner] float-like block into acc[0, len) (len <= kInnerBlock).
template <class T>
void chunked_column_sum(const T* x, int64_t n, int64_t inner, int64_t len, double* acc) {
  float part[kInnerBlock];
  for (int64_t c = 0; c < n; c += kChunk / 8) {
    const int64_t e = std::min(n, c + kChunk / 8);
    for (int64_t i = 0; i < len; ++i) part[i] = 0;
    for (int64_t r = c; r < e; ++r) {
      const T* row = x + r * inner;
#pragma omp simd
      for (int64_t i = 0; i < len; ++i) part[i] += static_cast<float>(row[i]);
    }
    for (int64_t i = 0; i < len; ++i) acc[i] += part[i];
  }
}

template <class R>
void reduce(const Tensor& out, const Tensor& in, int64_t outer, int64_t n, int64_t inner) {
  dispatch<R::dtypes>(in.dtype(), R::name, [&]<class T>() {
    using A = typename R::template acc_t<T>;
    using O = typename R::template out_t<T>;
    const T* x = in.data_ptr<T>();
    O* y = out.data_ptr<O>();
    const bool parallel = outer * n * inner > 32768;
    constexpr bool fast_sum = std::is_same_v<R, fn::SumReducer> && float_sum<T>;
    if (inner == 1 && outer == 1 && fast_sum && n > 4 * kChunk) {
      // One long row: split its chunks across threads.
      double total = 0;
      const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) reduction(+ : total)
      for (int64_t c = 0; c < chunks; ++c)
        total += chunked_sum(x + c * kChunk, std::min(kChunk, n - c * kChunk));
      y[0] = static_cast<O>(total);
      return;
    }
    if (inner == 1) {
#pragma omp parallel for schedule(static) if (parallel && outer > 1)
      for (int64_t o = 0; o < outer; ++o) {
        const T* row = x + o * n;
        A acc = R::template identity<T>();
        if constexpr (fast_sum) {
          acc = chunked_sum(row, n);
        } else if constexpr (std::is_same_v<R, fn::SumReducer>) {
#pragma omp simd reduction(+ : acc)
          for (int64_t r = 0; r < n; ++r) acc += static_cast<A>(static_cast<opmath_t<T>>(row[r]));
        } else {
          for (int64_t r = 0; r < n; ++r) acc = R::combine(acc, static_cast<A>(row[r]));
        }
        y[o] = static_cast<O>(acc);
      }
      return;
    }
    // Columns: each task accumulates a block of inner positions across the reduce axis.
    const int64_t blocks = (inner + kInnerBlock - 1) / kInnerBlock;
#pragma omp parallel for schedule(static) if (parallel)
    for (int64_t task = 0; task < outer * blocks; ++task) {
      const int64_t o = task / blocks, i0 = (task % blocks) * kInnerBlock;
      const int64_t len = std::min(kInnerBlock, inner - i0);
      A acc[kInnerBlock];
      for (int64_t i = 0; i < len; ++i) acc[i] = R::template identity<T>();
      if constexpr (fast_sum) {
        chunked_column_sum(x + o * n * inner + i0, n, inner, len, acc);
      } else {
        for (int64_t r = 0; r < n; ++r) {
          const T* row = x + (o * n + r) * inner + i0;
          for (int64_t i = 0; i < len; ++i) acc[i] = R::combine(acc[i], static_cast<A>(row[i]));
        }
      }
      for (int64_t i = 0; i < len; ++i) y[o * inner + i0 + i] = static_cast<O>(acc[i]);
    }
  });
}

void argreduce(const Tensor& values, const Tensor& indices, const Tensor& in, int64_t outer,
               int64_t n, int64_t inner, bool is_max) {
  dispatch(in.dtype(), is_max ? "max" : "min", [&]<class T>() {
    using A = opmath_t<T>;
    const T* x = in.data_ptr<T>();
    T* v = values.data_ptr<T>();
    int64_t* idx = indices.data_ptr<int64_t>();
#pragma omp parallel for schedule(static) if (outer * n * inner > 32768)
    for (int64_t line = 0; line < outer * inner; ++line) {
      const int64_t o = line / inner, i = line % inner;
      const T* p = x + o * n * inner + i;
      A best = static_cast<A>(p[0]);
      int64_t best_r = 0;
      for (int64_t r = 1; r < n && !fn::is_nan(best); ++r) {
        A cur = static_cast<A>(p[r * inner]);
        if (fn::is_nan(cur) || (is_max ? cur > best : cur < best)) {
          best = cur;
          best_r = r;
        }
      }
      v[line] = static_cast<T>(best);
      idx[line] = best_r;
    }
  });
}

void cumsum(const Tensor& out, const Tensor& in, int64_t outer, int64_t n, int64_t inner) {
  dispatch<kNumericTypes>(in.dtype(), "cumsum", [&]<class T>() {
    using A = fn::sum_acc_t<T>;
    const T* x = in.data_ptr<T>();
    T* y = out.data_ptr<T>();
#pragma omp parallel for schedule(static) if (outer * n * inner > 32768)
    for (int64_t line = 0; line < outer * inner; ++line) {
      const int64_t o = line / inner, i = line % inner;
      A acc = 0;
      for (int64_t r = 0; r < n; ++r) {
        const int64_t k = (o * n + r) * inner + i;
        acc += static_cast<A>(static_cast<opmath_t<T>>(x[k]));
        y[k] = static_cast<T>(acc);
      }
    }
  });
}

using namespace fn;
[[maybe_unused]] const bool registered =
    register_kernel<ReduceKernel<SumReducer>>(DeviceType::CPU, &reduce<SumReducer>) &&
    register_kernel<ReduceKernel<ProdReducer>>(DeviceType::CPU, &reduce<ProdReducer>) &&
    register_kernel<ReduceKernel<MaxReducer>>(DeviceType::CPU, &reduce<MaxReducer>) &&
    register_kernel<ReduceKernel<MinReducer>>(DeviceType::CPU, &reduce<MinReducer>) &&
    register_kernel<argreduce_kernel>(DeviceType::CPU, &argreduce) &&
    register_kernel<cumsum_kernel>(DeviceType::CPU, &cumsum);

}  // namespace
}  // namespace tessera::cpu
