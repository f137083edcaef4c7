// Optimizer steps, gradient clipping and loss-scaler unscaling on CUDA against the same calls on
// the CPU: the fused AdamW / SGD kernels and the one-launch list kernels behind clip_grad_norm_
// and GradScaler::unscale_. Skipped without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "tessera/optim/adam.h"
#include "tessera/optim/clip_grad.h"
#include "tessera/optim/grad_scaler.h"
#include "tessera/optim/sgd.h"
#include "tessera/runtime/cuda.h"
#include "tessera/tessera.h"
#include "testing/cuda_test.h"

namespace tessera {
namespace {

using testing::kCuda;
using CudaOptimTest = testing::CudaTest;

// Parameters of several sizes (one spans several 65536-element chunks, one is empty, the last
// starts one element into its memory, so no vector load is aligned) with gradients, in dtype,
// on the CPU and the same values on the GPU.
struct Params {
  TensorList cpu, gpu;
};

Params make_params(DType dtype, uint64_t seed) {
  Generator gen(seed);
  Params p;
  for (int64_t n : {1, 7, 300, 70000, 0, 131073, 301}) {
    Tensor w = randn({n}, TensorOptions(kFloat32), &gen).to(dtype);
    Tensor g = (randn({n}, TensorOptions(kFloat32), &gen) * 3.0).to(dtype);
    Tensor wc = w.clone().requires_grad_(true), wg = w.to(kCuda).requires_grad_(true);
    if (n == 301) {
      wc = w.narrow(0, 1, 300).clone().requires_grad_(true);
      wg = w.to(kCuda).narrow(0, 1, 300).detach().requires_grad_(true);
      g = g.narrow(0, 1, 300);
    }
    wc.set_grad(g.clone());
    wg.set_grad(g.to(kCuda));
    p.cpu.push_back(wc);
    p.gpu.push_back(wg);
  }
  return p;
}

void expect_close(const TensorList& gpu, const TensorList& cpu, double tol, const char* what) {
  for (size_t i = 0; i < cpu.size(); ++i)
    EXPECT_TRUE(
        allclose(gpu[i].detach().to(kCPU).to(kFloat64), cpu[i].detach().to(kFloat64), tol, tol))
        << what << " tensor " << i;
}

TEST_F(CudaOptimTest, ClipGradNormMatchesTheCpu) {
  for (DType dtype : {kFloat32, kBFloat16, kFloat64}) {
    Params p = make_params(dtype, 3);
    const double cpu_norm = optim::clip_grad_norm_(p.cpu, 1.0).item<double>();
    const double gpu_norm = optim::clip_grad_norm_(p.gpu, 1.0).item<double>();
    EXPECT_NEAR(gpu_norm, cpu_norm, 1e-5 * cpu_norm) << dtype;
    EXPECT_GT(cpu_norm, 1.0) << "the case must clip";
    TensorList cpu_grads, gpu_grads;
    for (size_t i = 0; i < p.cpu.size(); ++i) {
      cpu_grads.push_back(p.cpu[i].grad());
      gpu_grads.push_back(p.gpu[i].grad());
    }
    expect_close(gpu_grads, cpu_grads, dtype == kBFloat16 ? 1e-2 : 1e-6, "clipped grad");
    // The clipped norm is max_norm, the same bits every time (no atomics across blocks).
    const double norm = optim::grad_norm(p.gpu).item<double>();
    EXPECT_NEAR(norm, 1.0, dtype == kBFloat16 ? 1e-2 : 1e-5);
    for (int i = 0; i < 20; ++i) EXPECT_EQ(optim::grad_norm(p.gpu).item<double>(), norm);
  }
}

// Gradients on the CPU and the GPU at once: the per-tensor norms are gathered on the first one's
// device (stack refused mixed devices) and each is scaled on its own.
TEST_F(CudaOptimTest, ClipGradNormAcrossDevicesMatchesTheCpu) {
  Params p = make_params(kFloat32, 5);
  TensorList mixed{p.cpu[2], p.gpu[3], p.cpu[5]},
      cpu{p.cpu[2].detach().clone().requires_grad_(), p.cpu[3], p.cpu[5].detach().clone()};
  cpu[0].set_grad(p.cpu[2].grad().clone());
  cpu[2].requires_grad_(true).set_grad(p.cpu[5].grad().clone());
  const double want = optim::clip_grad_norm_(cpu, 1.0).item<double>();
  EXPECT_NEAR(optim::clip_grad_norm_(mixed, 1.0).item<double>(), want, 1e-5 * want);
  TensorList mixed_grads, cpu_grads;
  for (size_t i = 0; i < cpu.size(); ++i) {
    mixed_grads.push_back(mixed[i].grad());
    cpu_grads.push_back(cpu[i].grad());
  }
  expect_close(mixed_grads, cpu_grads, 1e-6, "clipped grad");
}

TEST_F(CudaOptimTest, GradScalerUnscalesLikeTheCpuInOneLaunchPerDtype) {
  for (DType dtype : {kFloat32, kBFloat16, kFloat16, kFloat64}) {
    Params p = make_params(dtype, 4);
    optim::SGD cpu_opt(p.cpu, optim::SGDOptions{.lr = 0.1}), gpu_opt(p.gpu, {.lr = 0.1});
    optim::GradScaler cpu_scaler({.init_scale = 8.0}), gpu_scaler({.init_scale = 8.0});
    cpu_scaler.unscale_(cpu_opt);
    gpu_scaler.unscale_(gpu_opt);
    EXPECT_FALSE(gpu_scaler.found_inf()) << dtype;
    TensorList cpu_grads, gpu_grads;
    for (size_t i = 0; i < p.cpu.size(); ++i) {
      cpu_grads.push_back(p.cpu[i].grad());
      gpu_grads.push_back(p.gpu[i].grad());
    }
    expect_close(gpu_grads, cpu_grads, 0.0, "unscaled grad");  // a power-of-two scale is exact
    gpu_scaler.update();
    // One nan deep in the second chunk of the largest gradient.
    Tensor g = p.gpu[5].grad();
    g.narrow(0, 65540, 1).fill_(std::nan(""));
    gpu_scaler.unscale_(gpu_opt);
    EXPECT_TRUE(gpu_scaler.found_inf()) << dtype;
  }
}

// Three steps of an optimizer built by make on both devices, the gradients set anew each step.
// The second parameter has no gradient in the first step, so its step count lags the others'
// (a list kernel call of its own for Adam).
void expect_steps_match(const std::function<std::unique_ptr<optim::Optimizer>(TensorList)>& make,
                        DType dtype, double tol) {
  Params p = make_params(dtype, 5);
  p.cpu[1].set_grad(Tensor());
  p.gpu[1].set_grad(Tensor());
  auto cpu = make(p.cpu), gpu = make(p.gpu);
  for (int step = 0; step < 3; ++step) {
    cpu->step();
    gpu->step();
    Params next = make_params(dtype, 10 + step);
    for (size_t i = 0; i < p.cpu.size(); ++i) {
      p.cpu[i].set_grad(next.cpu[i].grad());
      p.gpu[i].set_grad(next.gpu[i].grad());
    }
  }
  expect_close(p.gpu, p.cpu, tol, "parameter");
}

TEST_F(CudaOptimTest, AdamWAndSgdStepLikeTheCpu) {
  for (DType dtype : {kFloat32, kBFloat16}) {
    const double tol = dtype == kBFloat16 ? 1e-2 : 1e-5;
    for (bool amsgrad : {false, true}) {
      // The misaligned last parameter goes element by element, the others in vectors.
      expect_steps_match(
          [&](TensorList ps) {
            return std::make_unique<optim::AdamW>(
                ps, optim::AdamOptions{.lr = 1e-2, .weight_decay = 0.1, .amsgrad = amsgrad});
          },
          dtype, tol);
    }
    expect_steps_match(
        [](TensorList ps) {
          return std::make_unique<optim::SGD>(
              ps, optim::SGDOptions{
                      .lr = 1e-2, .momentum = 0.9, .weight_decay = 1e-3, .nesterov = true});
        },
        dtype, tol);
  }
}

}  // namespace
}  // namespace tessera
