#pragma once
// Reductions over a contiguous input viewed as [outer, reduce, inner] into out [outer, inner].
// Reducers are shared by every backend; each backend registers ReduceKernel<R> per reducer.
#include <cmath>
#include <cstdint>
#include <limits>
#include <string_view>
#include <type_traits>

#include "backend/common/elementwise_functors.h"
#include "tessera/core/dispatcher.h"
#include "tessera/core/tensor.h"

namespace tessera {

namespace fn {
// Accumulates floats in double and integers in int64 (bool sums count).
template <class T>
using sum_acc_t = std::conditional_t<std::is_floating_point_v<opmath_t<T>>, double, int64_t>;

// Result element type of a sum/prod: the input type for floats, int64 for integers and bool.
template <class T>
using sum_out_t = std::conditional_t<std::is_floating_point_v<opmath_t<T>>, T, int64_t>;

struct SumReducer {
  static constexpr std::string_view name = "sum";
  static constexpr uint32_t dtypes = kAllTypes;
  template <class T>
  using out_t = sum_out_t<T>;
  template <class T>
  using acc_t = sum_acc_t<T>;
  template <class T>
  static acc_t<T> identity() { return 0; }
  template <class A>
  static A combine(A a, A b) { return a + b; }
};
struct ProdReducer {
  static constexpr std::string_view name = "prod";
  static constexpr uint32_t dtypes = kAllTypes;
  template <class T>
  using out_t = sum_out_t<T>;
  template <class T>
  using acc_t = sum_acc_t<T>;
  template <class T>
  static acc_t<T> identity() { return 1; }
  template <class A>
  static A combine(A a, A b) { return a * b; }
};
// Max/min propagate NaN like torch.amax.
struct MaxReducer {
  static constexpr std::string_view name = "amax";
  static constexpr uint32_t dtypes = kAllTypes;
  template <class T>
  using out_t = T;
  template <class T>
  using acc_t = opmath_t<T>;
  template <class T>
  static acc_t<T> identity() {
    if constexpr (std::is_floating_point_v<acc_t<T>>) return -std::numeric_limits<acc_t<T>>::infinity();
    else return std::numeric_limits<acc_t<T>>::lowest();
  }
  template <class A>
  static A combine(A a, A b) { return is_nan(a) || a > b ? a : b; }
};
struct MinReducer {
  static constexpr std::string_view name = "amin";
  static constexpr uint32_t dtypes = kAllTypes;
  template <class T>
  using out_t = T;
  template <class T>
  using acc_t = opmath_t<T>;
  template <class T>
  static acc_t<T> identity() {
    if constexpr (std::is_floating_point_v<acc_t<T>>) return std::numeric_limits<acc_t<T>>::infinity();
    else return std::numeric_limits<acc_t<T>>::max();
  }
  template <class A>
  static A combine(A a, A b) { return is_nan(a) || a < b ? a : b; }
};
}  // namespace fn

template <class Reducer>
struct ReduceKernel {
  // out [outer, inner] of dtype Reducer::out_t<in type>, in contiguous.
  using Signature = void(const Tensor& out, const Tensor& in, int64_t outer, int64_t reduce,
                         int64_t inner);
  static constexpr std::string_view name = Reducer::name;
};

// Values and int64 indices of the max (is_max) or min along the reduce axis; first wins on ties,
// NaN counts as the extreme.
TESSERA_DECLARE_KERNEL(argreduce_kernel, void(const Tensor& values, const Tensor& indices,
                                              const Tensor& in, int64_t outer, int64_t reduce,
                                              int64_t inner, bool is_max));
// Inclusive prefix sum along the reduce axis (out has in's shape).
TESSERA_DECLARE_KERNEL(cumsum_kernel, void(const Tensor& out, const Tensor& in, int64_t outer,
                                           int64_t reduce, int64_t inner));

}  // namespace tessera
