// DistributedDataParallel against single-process training with accumulation, and its parts:
// wrap-time broadcast, buckets, no_sync, unused parameters, progress modes, bucket views and
// token-weighted losses.
#include <gtest/gtest.h>

#include <optional>

#include "dist_test_util.h"
#include "training_harness.h"

namespace tessera::dist::testing {
namespace {

constexpr int64_t kSteps = 20;

// The tolerance of the DP-vs-accumulation comparisons: the ranks' sums run in another order.
double tolerance(int world) { return world <= 2 ? 1e-6 : 1e-5; }

TEST(DDP, MatchesOneProcessAccumulatingEveryRanksMicroBatches) {
  auto group = world();
  // The ranks end with the same losses and weights, so rank 0 alone runs the reference (the
  // others wait in DDP's first broadcast meanwhile).
  std::optional<DataParallelRun> reference;
  std::vector<double> want;
  if (group->rank() == 0) {
    reference.emplace(RunOptions{.accum = 2 * group->size()});
    want = reference->train(kSteps);
  }
  DataParallelRun ddp({.accum = 2, .group = group});
  const std::vector<double> got = ddp.train(kSteps);
  if (!reference) return;
  expect_close(got, want, tolerance(group->size()), "DP losses");
  EXPECT_LT(want.back(), want.front());  // it did learn
  EXPECT_LT(max_param_diff(*ddp.model, *reference->model), 1e-4);
}

TEST(DDP, DifferentlySeededRanksStartFromRankZerosWeights) {
  auto group = world();
  manual_seed(100 + static_cast<uint64_t>(group->rank()));
  models::GPT2Config c;
  c.vocab_size = 20;
  c.block_size = 8;
  c.n_layer = 1;
  c.n_head = 2;
  c.n_embd = 8;
  models::GPT2 model(c);
  DistributedDataParallel ddp(model, group);
  for (const Tensor& p : model.parameters()) {
    Tensor from_root = p.clone();
    group->broadcast(from_root, 0)->wait();
    EXPECT_TRUE(allclose(p, from_root, 0.0, 0.0)) << "rank " << group->rank();
  }
}

TEST(DDP, NoSyncAccumulationEqualsSynchronisingEveryMicroBatch) {
  auto group = world();
  // The Trainer skips the reduction on all but the last micro-batch; a Trainer that is not told
  // about DDP leaves sync on, so every micro-batch is reduced.
  DataParallelRun deferred({.accum = 3, .group = group});
  DataParallelRun every({.accum = 3, .group = group, .trainer_knows_ddp = false});
  deferred.train(4);
  every.train(4);
  // Sums in another order: float32 rounding, amplified a little by AdamW's normalisation.
  EXPECT_LT(max_param_diff(*deferred.model, *every.model), 1e-5);
}

TEST(DDP, BucketsFollowArrivalOrderAfterTheFirstBackward) {
  auto group = world();
  DataParallelRun run(
      {.group = group, .ddp = {.bucket_cap_mb = 0.01, .first_bucket_cap_mb = 0.001}});
  const auto& before = run.ddp->buckets();
  ASSERT_GT(before.size(), 2u);
  // Reverse parameter order: the last parameter is in bucket 0.
  EXPECT_EQ(before[0].params[0], static_cast<int64_t>(run.ddp->parameters().size()) - 1);
  for (const GradBucket& b : before) EXPECT_EQ(b.padded_numel() % group->size(), 0);
  EXPECT_EQ(run.ddp->bucket_layout_version(), 0);
  run.train(2);
  EXPECT_EQ(run.ddp->bucket_layout_version(), 1);
  int64_t covered = 0;
  for (const GradBucket& b : run.ddp->buckets()) covered += static_cast<int64_t>(b.params.size());
  EXPECT_EQ(covered, static_cast<int64_t>(run.ddp->parameters().size()));
}

TEST(DDP, ProgressModesAndBucketViewsGiveTheSameTraining) {
  auto group = world();
  DataParallelRun poll({.accum = 2, .group = group});
  const std::vector<double> want = poll.train(5);
  for (Progress progress : {Progress::Thread, Progress::None}) {
    for (bool view : {false, true}) {
      DataParallelRun run({.accum = 2,
                           .group = group,
                           .ddp = {.gradient_as_bucket_view = view, .progress = progress}});
      expect_close(run.train(5), want, 1e-12, "progress mode / bucket view");
    }
  }
}

TEST(DDP, GradientsAsBucketViewsAliasTheBuckets) {
  auto group = world();
  DataParallelRun run({.group = group, .ddp = {.gradient_as_bucket_view = true}});
  Tensor loss = run.model->loss(global_batch(0)[0], global_batch(0)[1]);
  loss.backward();
  const auto& buckets = run.ddp->buckets();
  const TensorList& params = run.ddp->parameters();
  for (const GradBucket& b : buckets) {
    for (size_t k = 0; k < b.params.size(); ++k) {
      const char* base = static_cast<const char*>(b.buffer.data_ptr());
      EXPECT_EQ(params[b.params[k]].grad().data_ptr(),
                base + b.offsets[k] * static_cast<int64_t>(itemsize(b.buffer.dtype())));
    }
  }
}

// A model with a parameter the loss never reaches.
struct WithUnused : nn::Module {
  Tensor used, unused;
  WithUnused() {
    used = register_parameter("used", ones({3}));
    unused = register_parameter("unused", ones({2}));
  }
};

TEST(DDP, AnUnusedParameterIsNamedOrReducedAsZero) {
  auto group = world();
  {
    WithUnused m;
    DistributedDataParallel ddp(m, group);
    try {
      sum(m.used * 2.0).backward();
      FAIL() << "expected an error naming the unused parameter";
    } catch (const RuntimeError& e) {
      EXPECT_NE(std::string(e.what()).find("'unused'"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("find_unused_parameters"), std::string::npos);
    }
  }
  WithUnused m;
  DistributedDataParallel ddp(m, group, {.find_unused_parameters = true});
  sum(m.used * static_cast<double>(group->rank() + 1)).backward();
  const double mean_scale = (group->size() + 1) / 2.0;  // the ranks' factors averaged
  EXPECT_TRUE(allclose(m.used.grad(), full({3}, mean_scale)));
  EXPECT_TRUE(allclose(m.unused.grad(), zeros({2}), 0.0, 0.0));
}

// A backward that threw midway (an OOM the loop skips, here a failing hook on every rank) dropped
// DDP's end-of-pass callback: every later backward failed with "got 'a' twice".
TEST(DDP, ABackwardThatThrewLeavesTheNextOneWorking) {
  auto group = world();
  struct TwoParams : nn::Module {
    Tensor a = register_parameter("a", ones({3}));
    Tensor b = register_parameter("b", ones({3}));
  } m;
  DistributedDataParallel ddp(m, group);
  bool fail = true;
  const double scale = group->rank() + 1.0;
  auto backward = [&] {
    Tensor y = m.b * 2.0;
    y.register_hook([&](const Tensor&) -> Tensor {
      if (fail) throw RuntimeError("[test] a failing hook");
      return Tensor();
    });
    sum(y * m.a * scale).backward();  // a's gradient arrives, then the hook throws
  };
  EXPECT_THROW(backward(), RuntimeError);
  m.zero_grad();
  fail = false;
  backward();
  const double mean_scale = (group->size() + 1) / 2.0;
  EXPECT_TRUE(allclose(m.a.grad(), full({3}, 2.0 * mean_scale)));
  EXPECT_TRUE(allclose(m.b.grad(), full({3}, 2.0 * mean_scale)));
}

TEST(DDP, TokenWeightedLossesAverageOverAllRanksTokens) {
  // Rank r ignores the first r targets of each row, so ranks hold different token counts; the
  // gradient must be that of the mean over every rank's tokens (one process, one batch).
  auto group = world();
  const int world_size = group->size();
  auto batch_of = [](int r) {
    data::Batch b = global_batch(r);
    for (int64_t row = 0; row < 2; ++row)
      for (int64_t t = 0; t < r && t < 16; ++t) b[1].data_ptr<int64_t>()[row * 16 + t] = -1;
    return b;
  };
  manual_seed(12);
  auto reference = tessera::testing::small_gpt2();
  Tensor xs = cat({batch_of(0)[0]}, 0), ys = cat({batch_of(0)[1]}, 0);
  for (int r = 1; r < world_size; ++r) {
    xs = cat({xs, batch_of(r)[0]}, 0);
    ys = cat({ys, batch_of(r)[1]}, 0);
  }
  reference->loss(xs, ys).backward();

  auto model = tessera::testing::small_gpt2();
  DistributedDataParallel ddp(*model, group);
  optim::SGD sgd(model->parameters(), {.lr = 0.0});
  train::Trainer trainer(
      *model, train::causal_lm_loss(*model), sgd, nullptr, nullptr,
      {.grad_clip = 0.0, .ddp = &ddp, .count_loss_tokens = train::causal_lm_tokens()});
  const TensorList ref_params = reference->parameters();
  trainer.hooks().after_backward = [&] {
    const TensorList params = model->parameters();
    for (size_t i = 0; i < params.size(); ++i)
      EXPECT_TRUE(allclose(params[i].grad(), ref_params[i].grad(), 1e-4, 1e-6)) << i;
  };
  const double loss = trainer.step([&] { return batch_of(group->rank()); }).loss;
  EXPECT_NEAR(loss, reference->loss(xs, ys).item<double>(), 1e-5);
}

}  // namespace
}  // namespace tessera::dist::testing
