// ZeRO stages 1 and 2 against plain data parallelism (ZeRO-0), through a save and resume, and
// their checkpoints in the unsharded optimizer's format.
#include <gtest/gtest.h>

#include "dist_test_util.h"
#include "training_harness.h"

namespace tessera::dist::testing {
namespace {

RunOptions zero(int stage) {
  return {.accum = 2, .group = world(), .ddp = {.reduce_scatter = stage == 2}, .zero_stage = stage};
}

class Zero : public ::testing::TestWithParam<int> {};

TEST_P(Zero, MatchesZeroStageZeroOverTwentyStepsWithClipping) {
  DataParallelRun plain({.accum = 2, .group = world()});
  const std::vector<double> want = plain.train(20);
  DataParallelRun sharded(zero(GetParam()));
  expect_close(sharded.train(20), want, 1e-6, "ZeRO losses");
  EXPECT_LT(max_param_diff(*sharded.model, *plain.model), 1e-4);  // as DDP vs one process
  // Each rank keeps about 1/W of the optimizer state.
  auto* opt = dynamic_cast<ZeroOptimizer*>(sharded.optimizer.get());
  const int64_t total = sharded.model->num_parameters();
  EXPECT_LE(opt->shard_numel(), total / world()->size() + 64 * 1024);
}

// Loss scaling unscaled the parameters' .grad, which ZeRO does not step (it reads DDP's buckets):
// the steps ran on gradients still scaled by 65536. New groups were accepted and never stepped.
TEST_P(Zero, RefusesLossScalingAndNewGroups) {
  DataParallelRun sharded(zero(GetParam()));
  optim::GradScaler scaler;
  try {
    scaler.unscale_(*sharded.optimizer);
    FAIL() << "unscaled a ZeRO optimizer";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("got ZeroOptimizer"), std::string::npos) << e.what();
  }
  EXPECT_THROW(sharded.optimizer->add_param_group({{ones({2})}}), NotImplementedError);
}

TEST_P(Zero, StateDictIsTheUnshardedOptimizersAndResumesExactly) {
  DataParallelRun plain({.accum = 2, .group = world()});
  plain.train(10);
  DataParallelRun sharded(zero(GetParam()));
  sharded.train(10);
  // Same keys and values as ZeRO-0's optimizer.
  const optim::StateDict got = sharded.optimizer->state_dict();
  const optim::StateDict want = plain.optimizer->state_dict();
  ASSERT_EQ(got.tensors.keys(), want.tensors.keys());
  for (const auto& [key, t] : want.tensors)
    EXPECT_TRUE(allclose(*got.tensors.find(key), t, 1e-4, 1e-7)) << key;
  for (const auto& [key, v] : want.scalars) EXPECT_EQ(*got.scalars.find(key), v) << key;

  // Resume the sharded run in fresh objects from its model and optimizer state.
  nn::TensorDict model_state;
  for (const auto& [key, t] : sharded.model->state_dict()) model_state.insert(key, t.clone());
  optim::StateDict saved = got;
  const std::vector<double> want_rest = sharded.train(10);
  DataParallelRun resumed(zero(GetParam()));
  resumed.model->load_state_dict(model_state);
  resumed.optimizer->load_state_dict(saved);
  resumed.micro = 20;  // 10 steps x 2 micro-batches already taken
  expect_close(resumed.train(10), want_rest, 1e-12, "resumed losses");

  // And the checkpoint loads into plain data parallelism too (any world size could read it).
  DataParallelRun unsharded({.accum = 2, .group = world()});
  unsharded.model->load_state_dict(model_state);
  unsharded.optimizer->load_state_dict(saved);
  unsharded.micro = 20;
  expect_close(unsharded.train(10), want_rest, 1e-6, "ZeRO checkpoint in ZeRO-0");
}

INSTANTIATE_TEST_SUITE_P(Stages, Zero, ::testing::Values(1, 2),
                         [](const auto& info) { return "stage" + std::to_string(info.param); });

}  // namespace
}  // namespace tessera::dist::testing
