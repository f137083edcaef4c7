// CPU kernels for every elementwise functor, plus dtype conversion and fill.
#include "backend/common/elementwise_functor_lists.h"
#include "backend/common/elementwise_kernels.h"
#include "backend/common/widening_binary.h"
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
  if constexpr (fn::kWidensOnLoad<Fn>) {
    if (it.dtype(1) != it.dtype(2)) {
      return fn::dispatch_widening(
          it.dtype(0), it.dtype(1), it.dtype(2), Fn::name, [&]<class O, class A, class B>() {
            cpu_kernel(it, [](A a, B b) {
              return static_cast<O>(Fn{}(static_cast<float>(a), static_cast<float>(b)));
            });
          });
    }
  }
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

// A copy whose output runs along rows while the input runs down columns (x.t().contiguous()):
// walking it element by element misses the cache on every input read, so copy square tiles.
// Returns false when the layout is not a transpose.
template <class Dst, class Src>
bool tiled_transpose_copy(const TensorIterator& it) {
  const int nd = it.ndim();
  if (nd < 2) return false;
  const Shape& so = it.byte_strides(0);
  const Shape& si = it.byte_strides(1);
  const int64_t src_item = sizeof(Src), dst_item = sizeof(Dst);
  if (so[nd - 1] != dst_item || si[nd - 2] != src_item || si[nd - 1] == src_item) return false;
  constexpr int64_t kTile = 32;
  const int64_t R = it.shape()[nd - 2], C = it.shape()[nd - 1];
  const int64_t tiles_r = (R + kTile - 1) / kTile, tiles_c = (C + kTile - 1) / kTile;
  const int64_t per_matrix = tiles_r * tiles_c, outer = it.numel() / (R * C);
#pragma omp parallel for schedule(static) if (it.numel() > 32768)
  for (int64_t task = 0; task < outer * per_matrix; ++task) {
    int64_t o = task / per_matrix, t = task % per_matrix;
    char* out = it.data(0);
    const char* in = it.data(1);
    for (int d = nd - 3; d >= 0; --d) {  // position of matrix o among the leading dims
      const int64_t idx = o % it.shape()[d];
      o /= it.shape()[d];
      out += idx * so[d];
      in += idx * si[d];
    }
    const int64_t r0 = (t / tiles_c) * kTile, c0 = (t % tiles_c) * kTile;
    const int64_t r1 = std::min(R, r0 + kTile), c1 = std::min(C, c0 + kTile);
    for (int64_t r = r0; r < r1; ++r) {
      Dst* dst = reinterpret_cast<Dst*>(out + r * so[nd - 2]);
      const char* src = in + r * si[nd - 2];
      for (int64_t c = c0; c < c1; ++c)
        dst[c] = fn::convert<Dst, Src>(*reinterpret_cast<const Src*>(src + c * si[nd - 1]));
    }
  }
  return true;
}

void copy(const TensorIterator& it) {
  dispatch(it.dtype(0), "copy", [&]<class Dst>() {
    dispatch(it.dtype(1), "copy", [&]<class Src>() {
      if (tiled_transpose_copy<Dst, Src>(it)) return;
      if constexpr (std::is_same_v<Dst, Src>) {
        cpu_kernel(it, [](Src x) { return x; });
      } else {
        cpu_kernel(it, [](Src x) { return fn::convert<Dst, Src>(x); });
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
bool register_unary(fn::FunctorList<Fns...>) {
  return (register_kernel<ElementwiseKernel<Fns>>(DeviceType::CPU, &unary<Fns>) && ...);
}
template <class... Fns>
bool register_binary(fn::FunctorList<Fns...>) {
  return (register_kernel<ElementwiseKernel<Fns>>(DeviceType::CPU, &binary<Fns>) && ...);
}

using namespace fn;
[[maybe_unused]] const bool registered =
    register_unary(UnaryFunctors{}) && register_binary(BinaryFunctors{}) &&
    register_kernel<ElementwiseKernel<WhereFn>>(DeviceType::CPU, &where) &&
    register_kernel<ElementwiseKernel<LerpFn>>(DeviceType::CPU, &lerp) &&
    register_kernel<copy_kernel>(DeviceType::CPU, &copy) &&
    register_kernel<fill_kernel>(DeviceType::CPU, &fill);

}  // namespace
}  // namespace tessera::cpu
