// The op table on CUDA: every case runs on the GPU and on the CPU from the same inputs, and the
// outputs and input gradients must agree (float32 tightly, bfloat16 within its rounding).
// Without a GPU every test skips with a message.
#include <gtest/gtest.h>

#include "tessera/runtime/cuda.h"
#include "testing/cuda_test.h"
#include "testing/op_cases.h"

namespace tessera::testing {
namespace {


// t on device with the same kind of layout: transposed inputs stay transposed, strided 1-d
// inputs stay strided, so the CUDA kernels see the strides the CPU ones saw.
Tensor to_device_keeping_layout(const Tensor& t, Device device) {
  autograd::NoGradGuard no_grad;
  Tensor moved;
  if (t.is_contiguous() || t.dim() == 0) {
    moved = t.to(device);
  } else if (t.dim() >= 2 && t.transpose(-1, -2).is_contiguous()) {
    moved = t.transpose(-1, -2).to(device).transpose(-1, -2);
  } else if (t.dim() == 1) {
    moved = empty({t.size(0) * t.stride(0)}, TensorOptions(t.dtype()).with_device(device))
                .slice(0, 0, std::nullopt, t.stride(0));
    moved.copy_(t);
  } else {
    moved = t.to(device);
  }
  moved = moved.detach();
  if (t.requires_grad()) moved.requires_grad_(true);
  return moved;
}

// Gradients of sum_k sum(out_k * w_k) with respect to the inputs that require grad; w_k are
// fixed random weights (the same on both devices).
TensorList input_grads(const TensorList& outs, const TensorList& weights, const TensorList& in) {
  Tensor loss;
  for (size_t k = 0; k < outs.size(); ++k) {
    if (!outs[k].requires_grad()) continue;
    Tensor term = (outs[k].to(kFloat32) * weights[k].to(outs[k].device())).sum();
    loss = loss.defined() ? loss + term : term;
  }
  TensorList diff;
  for (const Tensor& t : in)
    if (t.defined() && t.requires_grad()) diff.push_back(t);
  if (!loss.defined() || diff.empty()) return {};
  return autograd::grad({loss}, diff, {}, false, false, /*allow_unused=*/true);
}

class CudaOpCaseTest : public ::testing::TestWithParam<size_t> {
 protected:
  const OpCase& c() const { return op_cases()[GetParam()]; }

  void expect_matches_cpu(DType dtype, double tol) {
    TensorList cpu_in = make_inputs(c(), dtype, 4000 + GetParam());
    TensorList gpu_in;
    for (const Tensor& t : cpu_in) gpu_in.push_back(to_device_keeping_layout(t, kCuda));
    TensorList want = c().fn(cpu_in);
    TensorList got = c().fn(gpu_in);
    ASSERT_EQ(got.size(), want.size());
    TensorList weights;
    Generator gen(5000 + GetParam());
    for (size_t k = 0; k < got.size(); ++k) {
      ASSERT_EQ(got[k].device(), kCuda) << c().op << " output " << k;
      ASSERT_EQ(got[k].sizes(), want[k].sizes()) << c().op << " output " << k;
      ASSERT_EQ(got[k].dtype(), want[k].dtype()) << c().op << " output " << k;
      Tensor host = got[k].to(kCPU);
      if (is_floating(want[k].dtype())) {
        EXPECT_TRUE(allclose(host.to(kFloat64), want[k].to(kFloat64), tol, tol))
            << c().op << " / " << c().label << " output " << k << " in " << dtype << "\n cuda "
            << host << "\n  cpu " << want[k];
      } else {
        EXPECT_TRUE(allclose(host.to(kFloat64), want[k].to(kFloat64), 0, 0))
            << c().op << " / " << c().label << " output " << k << "\n cuda " << host << "\n  cpu "
            << want[k];
      }
      weights.push_back(randn(want[k].sizes(), TensorOptions(kFloat32), &gen));
    }
    if (!c().gradcheck) return;
    TensorList want_grads = input_grads(want, weights, cpu_in);
    TensorList got_grads = input_grads(got, weights, gpu_in);
    ASSERT_EQ(got_grads.size(), want_grads.size());
    for (size_t i = 0; i < got_grads.size(); ++i) {
      if (!want_grads[i].defined()) continue;
      ASSERT_TRUE(got_grads[i].defined()) << c().op << " gradient " << i;
      Tensor host = got_grads[i].to(kCPU).to(kFloat64);
      EXPECT_TRUE(allclose(host, want_grads[i].to(kFloat64), tol, tol))
          << c().op << " / " << c().label << " gradient " << i << " in " << dtype << "\n cuda "
          << host << "\n  cpu " << want_grads[i];
    }
  }
};

TEST_P(CudaOpCaseTest, Float32MatchesCpu) { expect_matches_cpu(kFloat32, 1e-4); }
TEST_P(CudaOpCaseTest, BFloat16MatchesCpu) { expect_matches_cpu(kBFloat16, 0.06); }

// Without a GPU the table is not instantiated (hundreds of skipped cases would only slow the
// suite); one test says why.
std::vector<size_t> cases_to_run() {
  return cuda::is_available() ? op_case_indices() : std::vector<size_t>{};
}

TEST(CudaOpTable, RunsWhereAGpuIsPresent) {
  if (!cuda::is_available())
    GTEST_SKIP() << "no CUDA device here: the op table runs on CUDA only where a GPU is present";
  EXPECT_FALSE(cases_to_run().empty());
}

GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(CudaOpCaseTest);
INSTANTIATE_TEST_SUITE_P(Table, CudaOpCaseTest, ::testing::ValuesIn(cases_to_run()),
                         [](const auto& info) { return op_case_test_name(info.param); });

}  // namespace
}  // namespace tessera::testing
