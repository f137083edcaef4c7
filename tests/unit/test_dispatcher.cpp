// The dispatcher rejects kernels of the wrong signature at compile time; the iterator broadcasts
// and coalesces dims; the dtype dispatch helper names the op on unsupported dtypes.
#include <gtest/gtest.h>

#include "backend/common/elementwise_kernels.h"
#include "backend/common/linalg_kernels.h"
#include "backend/common/tensor_iterator.h"
#include "tessera/tessera.h"
#include "testing/expect_error.h"

namespace tessera {
namespace {

template <class Key, class Fn>
concept Registrable = requires(Fn f) { register_kernel<Key>(DeviceType::CPU, f); };

void good_gemm(const Tensor&, const Tensor&, const Tensor&) {}
void bad_gemm(const Tensor&, const Tensor&) {}
void bad_types(Tensor&, int, float) {}

static_assert(Registrable<gemm_kernel, decltype(&good_gemm)>);
static_assert(!Registrable<gemm_kernel, decltype(&bad_gemm)>);
static_assert(!Registrable<gemm_kernel, decltype(&bad_types)>);
static_assert(!Registrable<copy_kernel, decltype(&good_gemm)>);

TEST(Dispatcher, KernelsAreRegisteredPerDevice) {
  EXPECT_TRUE(has_kernel<gemm_kernel>(DeviceType::CPU));
  EXPECT_TRUE(has_kernel<ElementwiseKernel<fn::ExpFn>>(DeviceType::CPU));
  EXPECT_FALSE(has_kernel<gemm_kernel>(DeviceType::CUDA) && device_count(DeviceType::CUDA) == 0);
  Tensor t = zeros({2});
  EXPECT_TESSERA_ERROR(call_kernel<fill_kernel>(Device(DeviceType::CUDA), t, Scalar(1)),
                       NotImplementedError, "[fill_kernel] expected a kernel for cuda:0");
}

TEST(DtypeDispatch, UnsupportedDtypeNamesTheOp) {
  EXPECT_TESSERA_ERROR(dispatch<kFloatingTypes>(kInt32, "myop", []<class T>() {}), TypeError,
                       "[myop] expected dtype in {float16, bfloat16, float32, float64}, got int32");
  int size = dispatch(kBFloat16, "size", []<class T>() { return static_cast<int>(sizeof(T)); });
  EXPECT_EQ(size, 2);
}

TEST(TensorIterator, BroadcastsAndCoalesces) {
  Tensor out = empty({4, 5, 6});
  Tensor a = zeros({4, 5, 6}), b = zeros({6});
  TensorIterator it("test");
  it.add_output(out).add_input(a).add_input(b).build();
  EXPECT_EQ(it.numel(), 120);
  // b repeats every 6 elements, so only the last dim stays separate from the merged rest.
  EXPECT_EQ(it.shape(), (Shape{20, 6}));
  EXPECT_EQ(it.byte_strides(2), (Shape{0, 4}));
  TensorIterator all_contig("test");
  all_contig.add_output(out).add_input(a).build();
  EXPECT_EQ(all_contig.shape(), (Shape{120}));
  TensorIterator bad("test");
  EXPECT_TESSERA_ERROR(bad.add_output(out).add_input(zeros({5})).build(), ValueError,
                       "[test] expected shape [5] to broadcast to [4, 5, 6]");
}

TEST(TensorIterator, WalksNoncontiguousOperandsInLogicalOrder) {
  Tensor src = arange(12, kFloat32).reshape({3, 4}).t();  // [4, 3], strides (1, 4)
  Tensor out = empty({4, 3});
  TensorIterator it("copy");
  it.add_output(out).add_input(src).build();
  call_kernel<copy_kernel>(kCPU, it);
  const float* p = out.data_ptr<float>();
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 3; ++j) EXPECT_EQ(p[i * 3 + j], static_cast<float>(j * 4 + i));
}

TEST(TensorIterator, ParallelRunsMatchSerial) {
  // Large enough to split across threads, with a broadcast operand and a transposed one.
  Tensor a = randn({300, 400}), b = randn({400}), c = randn({400, 300}).t();
  Tensor got = a * b + c;
  Tensor want = empty({300, 400});
  const float *pa = a.data_ptr<float>(), *pb = b.data_ptr<float>();
  Tensor cc = c.contiguous();
  const float* pc = cc.data_ptr<float>();
  float* pw = want.data_ptr<float>();
  for (int i = 0; i < 300; ++i)
    for (int j = 0; j < 400; ++j) pw[i * 400 + j] = pa[i * 400 + j] * pb[j] + pc[i * 400 + j];
  EXPECT_TRUE(allclose(got, want, 0, 0));
}

}  // namespace
}  // namespace tessera
