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

TEST(GradScaler, RejectsBadOptionsAndASecondUnscale) {
  EXPECT_TESSERA_ERROR(optim::GradScaler({.init_scale = 0.0}), ValueError, "init_scale");
  EXPECT_TESSERA_ERROR(optim::GradScaler({.backoff_factor = 1.5}), ValueError, "backoff_factor");
  Fixture f;
  optim::GradScaler scaler;
  scaler.scale(sum(f.w)).backward();
  scaler.unscale_(f.opt);
  EXPECT_TESSERA_ERROR(scaler.unscale_(f.opt), RuntimeError, "one call per step");
}

}  // namespace
}  // namespace tessera
