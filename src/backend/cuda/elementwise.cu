// CUDA kernels for every elementwise functor of backend/common, plus dtype conversion and fill.
// The functors are the CPU's own (TESSERA_HD), so both backends compute the same formulas.
#include "backend/common/elementwise_functor_lists.h"
#include "backend/common/elementwise_kernels.h"
#include "backend/common/widening_binary.h"
#include "backend/cuda/loops.cuh"

namespace tessera::cuda {
namespace {

// Adapters from a templated functor to the fixed-type call gpu_kernel reads its types from.
template <class Fn, class T>
struct Unary {
  TESSERA_HD auto operator()(T x) const -> decltype(Fn{}(x)) { return Fn{}(x); }
};
template <class Fn, class T>
struct Binary {
  TESSERA_HD auto operator()(T a, T b) const -> decltype(Fn{}(a, b)) { return Fn{}(a, b); }
};
template <class Fn, class O, class A, class B>
struct WideningBinary {
  TESSERA_HD O operator()(A a, B b) const {
    return static_cast<O>(Fn{}(static_cast<float>(a), static_cast<float>(b)));
  }
};
template <class T>
struct Where {
  TESSERA_HD T operator()(bool c, T a, T b) const { return fn::WhereFn{}(c, a, b); }
};
template <class T>
struct Lerp {
  TESSERA_HD T operator()(T a, T b, T w) const { return fn::LerpFn{}(a, b, w); }
};
template <class Dst, class Src>
struct Convert {
  TESSERA_HD Dst operator()(Src x) const { return fn::convert<Dst, Src>(x); }
};
template <class T>
struct Constant {
  T value;
  TESSERA_HD T operator()() const { return value; }
};

template <class Fn>
void unary(const TensorIterator& it) {
  dispatch<Fn::dtypes>(it.dtype(1), Fn::name, [&]<class T>() { gpu_kernel(it, Unary<Fn, T>{}); });
}

template <class Fn>
void binary(const TensorIterator& it) {
  if constexpr (fn::kWidensOnLoad<Fn>) {
    if (it.dtype(1) != it.dtype(2)) {
      return fn::dispatch_widening(
          it.dtype(0), it.dtype(1), it.dtype(2), Fn::name,
          [&]<class O, class A, class B>() { gpu_kernel(it, WideningBinary<Fn, O, A, B>{}); });
    }
  }
  dispatch<Fn::dtypes>(it.dtype(1), Fn::name, [&]<class T>() { gpu_kernel(it, Binary<Fn, T>{}); });
}

void where(const TensorIterator& it) {
  dispatch(it.dtype(2), "where", [&]<class T>() { gpu_kernel(it, Where<T>{}); });
}

void lerp(const TensorIterator& it) {
  dispatch<kFloatingTypes>(it.dtype(1), "lerp", [&]<class T>() { gpu_kernel(it, Lerp<T>{}); });
}

void copy(const TensorIterator& it) {
  dispatch(it.dtype(0), "copy", [&]<class Dst>() {
    dispatch(it.dtype(1), "copy", [&]<class Src>() { gpu_kernel(it, Convert<Dst, Src>{}); });
  });
}

void fill(const Tensor& t, const Scalar& value) {
  TensorIterator it("fill_");
  it.add_output(t).build();
  dispatch(t.dtype(), "fill_", [&]<class T>() { gpu_kernel(it, Constant<T>{value.to<T>()}); });
}

template <class... Fns>
bool register_unary(fn::FunctorList<Fns...>) {
  return (register_kernel<ElementwiseKernel<Fns>>(DeviceType::CUDA, &unary<Fns>) && ...);
}
template <class... Fns>
bool register_binary(fn::FunctorList<Fns...>) {
  return (register_kernel<ElementwiseKernel<Fns>>(DeviceType::CUDA, &binary<Fns>) && ...);
}

using namespace fn;
[[maybe_unused]] const bool registered =
    register_unary(UnaryFunctors{}) && register_binary(BinaryFunctors{}) &&
    register_kernel<ElementwiseKernel<WhereFn>>(DeviceType::CUDA, &where) &&
    register_kernel<ElementwiseKernel<LerpFn>>(DeviceType::CUDA, &lerp) &&
    register_kernel<copy_kernel>(DeviceType::CUDA, &copy) &&
    register_kernel<fill_kernel>(DeviceType::CUDA, &fill);

}  // namespace
}  // namespace tessera::cuda
