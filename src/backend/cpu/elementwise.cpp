// CPU kernels for every elementwise functor, plus dtype conversion and fill.
#include "backend/common/elementwise_kernels.h"
#include "backend/cpu/loops.h"

namespace tessera::cpu {
namespace {

template <class Fn>
void unary(const TensorIterator& it) {
  dispatch<Fn::dtypes>(it.dtype(1), Fn::name,
                       [&]<class T>() { cpu_kernel(it, [](T x) { return Fn{}(x); }); });
}

template <class Fn>
void binary(const TensorIterator& it) {
  dispatch<Fn::dtypes>(it.dtype(1), Fn::name,
                       [&]<class T>() { cpu_kernel(it, [](T a, T b) { return Fn{}(a, b); }); });
}

void where(const TensorIterator& it) {
  dispatch(it.dtype(2), "where", [&]<class T>() {
    cpu_kernel(it, [](bool c, T a, T b) { return fn::WhereFn{}(c, a, b); });
  });
}

void lerp(const TensorIterator& it) {
  dispatch<kFloatingTypes>(it.dtype(1), "lerp", [&]<class T>() {
    cpu_kernel(it, [](T a, T b, T w) { return fn::LerpFn{}(a, b, w); });
  });
}

template <class Dst, class Src>
Dst convert(Src x) {
  if constexpr (std::is_same_v<Dst, bool>) return static_cast<opmath_t<Src>>(x) != opmath_t<Src>(0);
  else return static_cast<Dst>(static_cast<opmath_t<Src>>(x));
}

void copy(const TensorIterator& it) {
  dispatch(it.dtype(0), "copy", [&]<class Dst>() {
    dispatch(it.dtype(1), "copy", [&]<class Src>() {
      if constexpr (std::is_same_v<Dst, Src>) {
        cpu_kernel(it, [](Src x) { return x; });
      } else {
        cpu_kernel(it, [](Src x) { return convert<Dst, Src>(x); });
      }
    });
  });
}

void fill(const Tensor& t, const Scalar& value) {
  TensorIterator it("fill_");
  it.add_output(t).build();
  dispatch(t.dtype(), "fill_", [&]<class T>() {
    const T v = value.to<T>();
    cpu_kernel(it, [v]() { return v; });
  });
}

template <class... Fns>
bool register_unary() {
  return (register_kernel<ElementwiseKernel<Fns>>(DeviceType::CPU, &unary<Fns>) && ...);
}
template <class... Fns>
bool register_binary() {
  return (register_kernel<ElementwiseKernel<Fns>>(DeviceType::CPU, &binary<Fns>) && ...);
}

using namespace fn;
[[maybe_unused]] const bool registered =
    register_unary<NegFn, AbsFn, SignFn, SquareFn, ExpFn, LogFn, Log1pFn, SqrtFn, RsqrtFn,
                   ReciprocalFn, SinFn, CosFn, TanhFn, SigmoidFn, ReluFn, GeluFn, GeluTanhFn,
                   SiluFn, ErfFn, LogicalNotFn, IsnanFn, IsinfFn, IsfiniteFn>() &&
    register_binary<AddFn, SubFn, MulFn, DivFn, PowFn, MaximumFn, MinimumFn, EqFn, NeFn, LtFn,
                    LeFn, GtFn, GeFn, LogicalAndFn, LogicalOrFn, LogicalXorFn>() &&
    register_kernel<ElementwiseKernel<WhereFn>>(DeviceType::CPU, &where) &&
    register_kernel<ElementwiseKernel<LerpFn>>(DeviceType::CPU, &lerp) &&
    register_kernel<copy_kernel>(DeviceType::CPU, &copy) &&
    register_kernel<fill_kernel>(DeviceType::CPU, &fill);

}  // namespace
}  // namespace tessera::cpu
