// The library Trainer: accumulation equals one large batch, autocast trains float32 masters,
// hooks fire where data parallelism synchronises, and checkpoints restore the loop exactly.
#include <gtest/gtest.h>

#include "tessera/models/gpt2.h"
#include "tessera/tessera.h"
#include "testing/temp_dir.h"

namespace tessera {
namespace {

models::GPT2Config tiny_config() {
  models::GPT2Config c;
  c.vocab_size = 32;
  c.block_size = 16;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 32;
  return c;
}

struct TinyRun {
  std::shared_ptr<models::GPT2> model;
  std::unique_ptr<optim::AdamW> opt;
  std::unique_ptr<optim::WarmupCosineLR> sched;
  Tensor x, y;  // [steps * 2, 4, 16]
  explicit TinyRun(uint64_t seed = 9) {
    manual_seed(seed);
    model = std::make_shared<models::GPT2>(tiny_config());
    opt = std::make_unique<optim::AdamW>(model->parameters(), optim::AdamOptions{.lr = 3e-3});
    sched = std::make_unique<optim::WarmupCosineLR>(*opt, 2, 20, 3e-4);
    x = randint(0, 32, {40, 4, 16});
    y = empty_like(x);  // targets a fixed function of the token, so there is something to learn
    for (int64_t i = 0; i < x.numel(); ++i)
      y.data_ptr<int64_t>()[i] = (5 * x.data_ptr<int64_t>()[i] + 1) % 32;
  }
};

std::vector<double> run(TinyRun& s, train::TrainerOptions options, int64_t rows_per_micro) {
  train::Trainer trainer(*s.model, train::causal_lm_loss(*s.model), *s.opt, s.sched.get(), nullptr,
                         options);
  std::vector<double> losses;
  int64_t next = 0;
  for (int step = 0; step < 6; ++step) {
    losses.push_back(
        trainer
            .step([&] {
              // Micro-batches are consecutive row slices of the step's [8, 16] batch.
              Tensor xb = s.x.narrow(0, step * 2, 2).reshape({8, 16});
              Tensor yb = s.y.narrow(0, step * 2, 2).reshape({8, 16});
              const int64_t r = next;
              next = (next + rows_per_micro) % 8;
              return data::Batch{xb.narrow(0, r, rows_per_micro), yb.narrow(0, r, rows_per_micro)};
            })
            .loss);
  }
  return losses;
}

// With token-weighted losses a micro-batch whose targets are all ignored has weight 0 and a NaN
// mean loss (0 / 0): it adds nothing, so the step's loss and gradients are the other one's (the
// logged loss was NaN).
TEST(Trainer, AMicroBatchWithoutLossTokensAddsNothing) {
  TinyRun ref, s;
  const Tensor x = s.x.select(0, 0), y = s.y.select(0, 0);
  const Tensor want = ref.model->loss(x, y);
  want.backward();
  optim::SGD sgd(s.model->parameters(), {.lr = 0.0});
  train::Trainer trainer(
      *s.model, train::causal_lm_loss(*s.model), sgd, nullptr, nullptr,
      {.grad_accum = 2, .grad_clip = 0.0, .count_loss_tokens = train::causal_lm_tokens()});
  const TensorList want_grads = ref.model->parameters();
  trainer.hooks().after_backward = [&] {
    const TensorList params = s.model->parameters();
    for (size_t i = 0; i < params.size(); ++i)
      EXPECT_TRUE(allclose(params[i].grad(), want_grads[i].grad(), 1e-5, 1e-7)) << i;
  };
  int micro = 0;
  const double loss =
      trainer
          .step([&] {
            return micro++ == 0 ? data::Batch{x, full_like(y, -1)} : data::Batch{x, y};
          })
          .loss;
  EXPECT_NEAR(loss, want.item<double>(), 1e-6);
}

TEST(Trainer, AccumulatedMicroBatchesMatchOneLargeBatch) {
  TinyRun a, b;
  const std::vector<double> whole = run(a, {.grad_accum = 1}, 8);
  const std::vector<double> accumulated = run(b, {.grad_accum = 4}, 2);
  for (size_t i = 0; i < whole.size(); ++i) EXPECT_NEAR(whole[i], accumulated[i], 1e-4) << i;
  EXPECT_LT(whole.back(), whole.front());
}

TEST(Trainer, AutocastTrainsFloat32MastersCloseToFloat32) {
  TinyRun a, b;
  const std::vector<double> fp32 = run(a, {}, 8);
  const std::vector<double> bf16 = run(b, {.autocast_dtype = kBFloat16}, 8);
  for (const Tensor& p : b.model->parameters()) EXPECT_EQ(p.dtype(), kFloat32);
  for (size_t i = 0; i < fp32.size(); ++i) EXPECT_NEAR(fp32[i], bf16[i], 0.05) << i;
  EXPECT_LT(bf16.back(), bf16.front());
}

TEST(Trainer, Float16UsesLossScalingAndHooksFire) {
  TinyRun s;
  train::Trainer trainer(*s.model, train::causal_lm_loss(*s.model), *s.opt, s.sched.get(), nullptr,
                         {.grad_accum = 2, .autocast_dtype = kFloat16});
  ASSERT_NE(trainer.grad_scaler(), nullptr);
  std::vector<std::pair<int64_t, bool>> before;
  int after = 0;
  trainer.hooks().before_backward = [&](int64_t micro, bool last) {
    before.emplace_back(micro, last);
  };
  trainer.hooks().after_backward = [&] { ++after; };
  const train::StepResult r = trainer.step([&] {
    return data::Batch{s.x.select(0, 0), s.y.select(0, 0)};
  });
  EXPECT_FALSE(r.skipped);
  EXPECT_TRUE(std::isfinite(r.loss));
  EXPECT_EQ(before, (std::vector<std::pair<int64_t, bool>>{{0, false}, {1, true}}));
  EXPECT_EQ(after, 1);
}

// A step abandoned by an exception left its micro-batches' gradients for the next step and the
// loss scaler refusing every later unscale_; an evaluate that threw left the model in eval mode;
// a trainable parameter outside the optimizer accumulated gradients forever.
TEST(Trainer, AFailedStepOrEvaluateLeavesNothingBehind) {
  TinyRun s;
  TensorList params = s.model->parameters();
  const Tensor outside = params.back();  // trainable, left out of the optimizer
  params.pop_back();
  optim::SGD sgd(params, {.lr = 0.0});
  bool fail = false;
  const train::LossFn lm_loss = train::causal_lm_loss(*s.model);
  train::Trainer trainer(*s.model,
                         [&](const data::Batch& b) {
                           if (fail) throw ValueError("[test] a bad batch");
                           return lm_loss(b);
                         },
                         sgd, nullptr, nullptr, {.grad_accum = 2, .autocast_dtype = kFloat16});
  int micro = 0;
  auto batches = [&] {
    fail = micro++ % 2 == 1;  // the second micro-batch of each step fails
    return data::Batch{s.x.select(0, 0), s.y.select(0, 0)};
  };
  trainer.grad_scaler()->unscale_(sgd);  // as a hook that clips would, before the failure
  EXPECT_THROW(trainer.step(batches), ValueError);
  for (const Tensor& p : s.model->parameters()) EXPECT_FALSE(p.grad().defined());

  fail = false;
  const train::StepResult ok = trainer.step([&] {
    return data::Batch{s.x.select(0, 0), s.y.select(0, 0)};
  });
  EXPECT_TRUE(std::isfinite(ok.loss));
  EXPECT_FALSE(outside.grad().defined());

  fail = true;
  data::DataLoader loader(std::make_shared<data::TensorDataset>(
                              std::vector<Tensor>{s.x.select(0, 0), s.y.select(0, 0)}),
                          {.batch_size = 2});
  s.model->train();
  EXPECT_THROW(trainer.evaluate(loader), ValueError);
  EXPECT_TRUE(s.model->is_training());
  // evaluate reads from the first batch and leaves the loader where it stood (it reset it).
  fail = false;
  ASSERT_TRUE(loader.next().has_value());
  EXPECT_TRUE(std::isfinite(trainer.evaluate(loader)));
  EXPECT_EQ(loader.state().batch, 1);
}

TEST(Trainer, CheckpointRestoresTheLoopExactly) {
  auto loader_for = [](const Tensor& x, const Tensor& y) {
    auto ds =
        std::make_shared<data::TensorDataset>(TensorList{x.reshape({-1, 16}), y.reshape({-1, 16})});
    return std::make_unique<data::DataLoader>(
        ds, data::DataLoaderOptions{.batch_size = 4, .shuffle = true, .seed = 3});
  };
  TinyRun a;
  auto loader_a = loader_for(a.x, a.y);
  train::Trainer ta(*a.model, train::causal_lm_loss(*a.model), *a.opt, a.sched.get(),
                    loader_a.get(), {});
  for (int i = 0; i < 3; ++i) ta.step();
  testing::TempDir dir;
  const std::string folder = io::save_checkpoint(dir.path.string(), ta.checkpoint());
  std::vector<double> expected;
  for (int i = 0; i < 3; ++i) expected.push_back(ta.step().loss);

  TinyRun b(/*seed=*/123);  // other initial weights: the checkpoint replaces them
  b.x = a.x;
  b.y = a.y;
  auto loader_b = loader_for(b.x, b.y);
  train::Trainer tb(*b.model, train::causal_lm_loss(*b.model), *b.opt, b.sched.get(),
                    loader_b.get(), {});
  tb.restore(io::load_checkpoint(folder));
  EXPECT_EQ(tb.step_count(), 3);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(tb.step().loss, expected[i]) << i;
}

TEST(Trainer, CheckpointKeepsTheLossScale) {
  const train::TrainerOptions options{
      .autocast_dtype = kFloat16,
      .grad_scaler = optim::GradScalerOptions{.init_scale = 1024.0, .growth_interval = 1}};
  auto batch = [](const TinyRun& s) {
    return [&s] { return data::Batch{s.x.select(0, 0), s.y.select(0, 0)}; };
  };
  TinyRun a;
  train::Trainer ta(*a.model, train::causal_lm_loss(*a.model), *a.opt, a.sched.get(), nullptr,
                    options);
  for (int i = 0; i < 3; ++i) ta.step(batch(a));
  const double scale = ta.grad_scaler()->get_scale();
  ASSERT_NE(scale, 1024.0);  // it grew, so a restored initial scale would differ
  testing::TempDir dir;
  const io::Checkpoint loaded =
      io::load_checkpoint(io::save_checkpoint(dir.path.string(), ta.checkpoint()));
  EXPECT_EQ(loaded.grad_scaler.scalars.at("scale"), scale);
  const double next_loss = ta.step(batch(a)).loss;

  TinyRun b;
  train::Trainer tb(*b.model, train::causal_lm_loss(*b.model), *b.opt, b.sched.get(), nullptr,
                    options);
  tb.restore(loaded);
  EXPECT_EQ(tb.grad_scaler()->get_scale(), scale);
  EXPECT_EQ(tb.step(batch(b)).loss, next_loss);

  io::Checkpoint without = loaded;  // as saved by a run without a scaler
  without.grad_scaler = {};
  TinyRun c;
  train::Trainer tc(*c.model, train::causal_lm_loss(*c.model), *c.opt, c.sched.get(), nullptr,
                    options);
  tc.restore(without);
  EXPECT_EQ(tc.grad_scaler()->get_scale(), 1024.0);
}

}  // namespace
}  // namespace tessera
