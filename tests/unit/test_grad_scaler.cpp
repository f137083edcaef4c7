// GradScaler: loss scaling, unscaling, skipped steps on inf/nan and the dynamic scale.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "tessera/optim/grad_scaler.h"
#include "tessera/optim/sgd.h"
#include "tessera/tessera.h"
#include "testing/expect_error.h"

namespace tessera {
namespace {

struct Fixture {
  Tensor w = tensor(std::vector<float>{1.0f, 2.0f}).requires_grad_();
  optim::SGD opt{TensorList{w}, optim::SGDOptions{.lr = 0.1}};
};

TEST(GradScaler, ScalesTheLossAndUnscalesGradientsBeforeTheStep) {
  Fixture f;
  optim::GradScaler scaler({.init_scale = 1024.0});
  Tensor loss = sum(f.w * f.w);  // d/dw = 2w
  Tensor scaled = scaler.scale(loss);
  EXPECT_FLOAT_EQ(scaled.item<float>(), 5.0f * 1024.0f);
  scaled.backward();
  EXPECT_FLOAT_EQ(f.w.grad().data_ptr<float>()[1], 4.0f * 1024.0f);
  EXPECT_TRUE(scaler.step(f.opt));
  // The step saw the true gradient: w - 0.1 * 2w.
  EXPECT_FLOAT_EQ(f.w.data_ptr<float>()[0], 0.8f);
  EXPECT_FLOAT_EQ(f.w.data_ptr<float>()[1], 1.6f);
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 1024.0);
  EXPECT_EQ(scaler.growth_tracker(), 1);
}

TEST(GradScaler, OverflowSkipsTheStepAndBacksOff) {
  for (float bad : {std::numeric_limits<float>::infinity(), std::nanf("")}) {
    Fixture f;
    optim::GradScaler scaler({.init_scale = 256.0});
    scaler.scale(sum(f.w * bad)).backward();
    EXPECT_FALSE(scaler.step(f.opt));
    EXPECT_TRUE(scaler.found_inf());
    EXPECT_FLOAT_EQ(f.w.data_ptr<float>()[0], 1.0f) << "weights untouched by a skipped step";
    scaler.update();
    EXPECT_EQ(scaler.get_scale(), 128.0);
    EXPECT_EQ(scaler.growth_tracker(), 0);
  }
}

TEST(GradScaler, GrowsAfterGrowthIntervalGoodStepsAndResetsOnOverflow) {
  Fixture f;
  optim::GradScaler scaler({.init_scale = 8.0, .growth_interval = 3});
  auto good_step = [&] {
    f.opt.zero_grad();
    scaler.scale(sum(f.w)).backward();
    EXPECT_TRUE(scaler.step(f.opt));
    scaler.update();
  };
  good_step();
  good_step();
  EXPECT_EQ(scaler.get_scale(), 8.0);
  good_step();
  EXPECT_EQ(scaler.get_scale(), 16.0);
  f.opt.zero_grad();
  scaler.scale(sum(f.w) * std::numeric_limits<float>::infinity()).backward();
  EXPECT_FALSE(scaler.step(f.opt));
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 8.0);
  good_step();
  good_step();
  EXPECT_EQ(scaler.get_scale(), 8.0) << "the count of good steps restarts after an overflow";
}

TEST(GradScaler, StateDictRoundTripsAndDisabledIsTransparent) {
  optim::GradScaler a({.init_scale = 4.0, .growth_interval = 10});
  Fixture f;
  a.scale(sum(f.w)).backward();
  a.step(f.opt);
  a.update();
  optim::GradScaler b;
  b.load_state_dict(a.state_dict());
  EXPECT_EQ(b.get_scale(), 4.0);
  EXPECT_EQ(b.growth_tracker(), 1);

  optim::GradScaler off({.enabled = false});
  Tensor loss = sum(f.w);
  EXPECT_TRUE(off.scale(loss).is_same(loss));
}

// Gradients of every floating dtype, one spanning several of the CUDA kernel's chunks, so
// unscale_ runs one list kernel per dtype group.
TEST(GradScaler, UnscalesEveryDtypeGroupAndFindsOneBadElementAmongMany) {
  Generator gen(7);
  TensorList params;
  for (DType dtype : {kFloat32, kBFloat16, kFloat64, kFloat16, kFloat32}) {
    Tensor w = zeros({70000}, dtype).requires_grad_();
    w.set_grad((randn({70000}, TensorOptions(kFloat32), &gen) * 64.0).to(dtype));
    params.push_back(w);
  }
  TensorList before;
  for (const Tensor& p : params) before.push_back(p.grad().clone());
  optim::SGD opt(params, optim::SGDOptions{.lr = 0.1});
  optim::GradScaler scaler({.init_scale = 64.0});
  scaler.unscale_(opt);
  EXPECT_FALSE(scaler.found_inf());
  for (size_t i = 0; i < params.size(); ++i)
    EXPECT_TRUE(
        allclose(params[i].grad(), (before[i].to(kFloat64) / 64.0).to(before[i].dtype()), 0, 0))
        << "group " << i << " is divided by the scale";
  scaler.update();

  for (double bad : {std::numeric_limits<double>::infinity(), std::nan("")}) {
    params[2].grad().data_ptr<double>()[65537] = bad;
    scaler.unscale_(opt);
    EXPECT_TRUE(scaler.found_inf()) << bad;
    EXPECT_FALSE(scaler.step(opt));
    scaler.update();
    params[2].grad().data_ptr<double>()[65537] = 0.0;
  }
}

TEST(GradScaler, ChecksGradientsBeforeUnscalingAsTorch) {
  // A scale below 1 multiplies: float max / 0.5 overflows, but the gradient was finite (torch's
  // _amp_foreach_non_finite_check_and_unscale_ checks the value it reads).
  Fixture f;
  f.w.set_grad(full({2}, std::numeric_limits<float>::max()));
  optim::GradScaler scaler({.init_scale = 0.5});
  scaler.unscale_(f.opt);
  EXPECT_FALSE(scaler.found_inf());
  EXPECT_TRUE(std::isinf(f.w.grad().data_ptr<float>()[0]));
}

TEST(GradScaler, StridedGradientsTakeThePerTensorPath) {
  Tensor w = zeros({3, 2}).requires_grad_();
  Tensor g = tensor(std::vector<float>{2, 4, 6, 8, 10, std::nanf("")}).reshape({2, 3}).t();
  ASSERT_FALSE(g.is_contiguous());
  w.set_grad(g);
  optim::SGD opt(TensorList{w}, optim::SGDOptions{.lr = 0.1});
  optim::GradScaler scaler({.init_scale = 2.0});
  scaler.unscale_(opt);
  EXPECT_TRUE(scaler.found_inf());
  EXPECT_FLOAT_EQ(w.grad().select(0, 1).select(0, 0).item<float>(), 2.0f);  // 4, halved
}

// torch's two-optimizer pattern: each optimizer is unscaled and checked on its own (the second
// stepped on gradients still scaled, and its inf went unseen); update() backs off when either
// found one.
TEST(GradScaler, EachOptimizerIsUnscaledAndCheckedOnItsOwn) {
  Fixture a, b;
  optim::GradScaler scaler({.init_scale = 1024.0});
  scaler.scale(sum(a.w * a.w) + sum(b.w * b.w)).backward();
  EXPECT_TRUE(scaler.step(a.opt));
  EXPECT_TRUE(scaler.step(b.opt));
  for (Fixture* f : {&a, &b}) {
    EXPECT_FLOAT_EQ(f->w.data_ptr<float>()[0], 0.8f) << "stepped on the true gradient";
    EXPECT_FLOAT_EQ(f->w.data_ptr<float>()[1], 1.6f);
  }
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 1024.0);

  a.opt.zero_grad();
  b.opt.zero_grad();
  scaler.scale(sum(a.w) + sum(b.w) * std::numeric_limits<float>::infinity()).backward();
  EXPECT_TRUE(scaler.step(a.opt));
  EXPECT_FALSE(scaler.step(b.opt)) << "b's own gradient is not finite";
  EXPECT_FLOAT_EQ(b.w.data_ptr<float>()[0], 0.8f) << "b untouched";
  EXPECT_TRUE(scaler.found_inf());
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 512.0);
  EXPECT_FALSE(scaler.found_inf());
}

TEST(GradScaler, AFloat16LossIsScaledInFloat32) {
  Fixture f;
  optim::GradScaler scaler;  // 65536 is beyond float16's largest, 65504
  const Tensor scaled = scaler.scale(sum(f.w * f.w).to(kFloat16));
  EXPECT_EQ(scaled.dtype(), kFloat32);
  EXPECT_FLOAT_EQ(scaled.item<float>(), 5.0f * 65536.0f);
}

TEST(GradScaler, RejectsBadOptionsAndASecondUnscale) {
  EXPECT_TESSERA_ERROR(optim::GradScaler({.init_scale = 0.0}), ValueError, "init_scale");
  EXPECT_TESSERA_ERROR(optim::GradScaler({.backoff_factor = 1.5}), ValueError, "backoff_factor");
  Fixture f;
  optim::GradScaler scaler;
  scaler.scale(sum(f.w)).backward();
  scaler.unscale_(f.opt);
  EXPECT_TESSERA_ERROR(scaler.unscale_(f.opt), RuntimeError, "one call per optimizer and step");
  scaler.step(f.opt);
  EXPECT_TESSERA_ERROR(scaler.step(f.opt), RuntimeError, "one call per optimizer and step");
  scaler.update();
  EXPECT_TESSERA_ERROR(scaler.update(), RuntimeError, "no inf checks were recorded");
  scaler.scale(sum(f.w)).backward();
  scaler.step(f.opt);
  EXPECT_TESSERA_ERROR(scaler.unscale_(f.opt), RuntimeError, "before step()");
}

}  // namespace
}  // namespace tessera
