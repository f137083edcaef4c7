#pragma once
// CPU elementwise loops over a TensorIterator. cpu_kernel(iter, f) calls f on each element:
// f's parameter types are the input element types and its return type the output's. Contiguous
// runs get a plain indexed loop the compiler vectorises; other runs use byte strides.
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <tuple>
#include <utility>

#include "backend/common/tensor_iterator.h"

namespace tessera::cpu {

template <class F>
struct function_traits : function_traits<decltype(&F::operator())> {};
template <class C, class R, class... A>
struct function_traits<R (C::*)(A...) const> {
  using result_type = R;
  using args = std::tuple<A...>;
  static constexpr size_t arity = sizeof...(A);
};
template <class R, class... A>
struct function_traits<R (*)(A...)> {
  using result_type = R;
  using args = std::tuple<A...>;
  static constexpr size_t arity = sizeof...(A);
};

namespace detail {
template <class F, size_t... I>
inline void elementwise_run(char** data, const int64_t* strides, int64_t n, const F& f,
                            std::index_sequence<I...>) {
  using traits = function_traits<F>;
  using R = typename traits::result_type;
  bool contiguous = strides[0] == static_cast<int64_t>(sizeof(R)) &&
                    ((strides[I + 1] ==
                      static_cast<int64_t>(sizeof(std::tuple_element_t<I, typename traits::args>))) &&
                     ...);
  if constexpr (sizeof...(I) == 2) {
    // A contiguous operand against a broadcast scalar (x * 2, x + bias value).
    using A0 = std::tuple_element_t<0, typename traits::args>;
    using A1 = std::tuple_element_t<1, typename traits::args>;
    if (strides[0] == static_cast<int64_t>(sizeof(R))) {
      R* out = reinterpret_cast<R*>(data[0]);
      if (strides[1] == static_cast<int64_t>(sizeof(A0)) && strides[2] == 0) {
        const A0* a = reinterpret_cast<const A0*>(data[1]);
        const A1 b = *reinterpret_cast<const A1*>(data[2]);
        for (int64_t i = 0; i < n; ++i) out[i] = f(a[i], b);
        return;
      }
      if (strides[1] == 0 && strides[2] == static_cast<int64_t>(sizeof(A1))) {
        const A0 a = *reinterpret_cast<const A0*>(data[1]);
        const A1* b = reinterpret_cast<const A1*>(data[2]);
        for (int64_t i = 0; i < n; ++i) out[i] = f(a, b[i]);
        return;
      }
    }
  }
  if (contiguous) {
    R* out = reinterpret_cast<R*>(data[0]);
    std::tuple<std::tuple_element_t<I, typename traits::args>*...> in{
        reinterpret_cast<std::tuple_element_t<I, typename traits::args>*>(data[I + 1])...};
    for (int64_t i = 0; i < n; ++i) out[i] = f(std::get<I>(in)[i]...);
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    *reinterpret_cast<R*>(data[0] + i * strides[0]) =
        f(*reinterpret_cast<std::tuple_element_t<I, typename traits::args>*>(
            data[I + 1] + i * strides[I + 1])...);
  }
}
}  // namespace detail

// iter.serial_for_each over all elements, split into one contiguous range per OpenMP thread
// when there are at least grain elements.
template <class Loop>
void parallel_for_each(const TensorIterator& iter, Loop&& loop, int64_t grain = 32768) {
  const int64_t n = iter.numel();
  if (n == 0) return;
  if (n < grain) return iter.serial_for_each(loop, 0, n);
#pragma omp parallel
  {
    const int64_t nthreads = omp_get_num_threads(), tid = omp_get_thread_num();
    const int64_t chunk = (n + nthreads - 1) / nthreads;
    const int64_t b = tid * chunk, e = std::min(n, b + chunk);
    if (b < e) iter.serial_for_each(loop, b, e);
  }
}

// Applies f elementwise: output 0 = f(input 0, input 1, ...).
template <class F>
void cpu_kernel(const TensorIterator& iter, const F& f) {
  constexpr size_t arity = function_traits<F>::arity;
  TESSERA_ASSERT(static_cast<size_t>(iter.ntensors()) == arity + 1);
  parallel_for_each(iter, [&](char** data, const int64_t* strides, int64_t n) {
    detail::elementwise_run(data, strides, n, f, std::make_index_sequence<arity>{});
  });
}

}  // namespace tessera::cpu
