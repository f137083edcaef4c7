#pragma once
// Training runs for the data-parallel tests: a small GPT-2 trained by the library Trainer on a
// stream of global micro-batches. Rank r of a group of W takes micro-batches r, r + W, ..., so
// W ranks with accumulation A see, step for step, exactly what one process sees with
// accumulation A * W, and the two runs must agree.
#include <memory>
#include <vector>

#include "tessera/dist/ddp.h"
#include "tessera/dist/zero.h"
#include "tessera/optim/adam.h"
#include "tessera/tessera.h"
#include "tessera/train/trainer.h"
#include "testing/small_models.h"

namespace tessera::dist::testing {

inline constexpr int64_t kVocab = 70;  // small_gpt2's

// Global micro-batch k: 2 rows of 16 tokens whose targets are a fixed function of the input
// (something to learn), from a generator seeded with k.
inline data::Batch global_batch(int64_t k) {
  Generator gen(1000 + static_cast<uint64_t>(k));
  Tensor x = randint(0, kVocab, {2, 16}, {kInt64}, &gen);
  Tensor y = empty_like(x);
  for (int64_t i = 0; i < x.numel(); ++i)
    y.data_ptr<int64_t>()[i] = (3 * x.data_ptr<int64_t>()[i] + 1) % kVocab;
  return {x, y};
}

inline optim::AdamOptions adam_options() {
  return {.lr = 3e-3, .beta1 = 0.9, .beta2 = 0.95, .weight_decay = 0.1};
}

inline std::unique_ptr<optim::Optimizer> make_adamw(std::vector<optim::ParamGroup> groups) {
  return std::make_unique<optim::AdamW>(std::move(groups), adam_options());
}

struct RunOptions {
  int64_t accum = 1;
  std::shared_ptr<ProcessGroup> group;  // null: a single process
  DDPOptions ddp;
  int zero_stage = 0;             // with a group
  uint64_t seed = 12;             // of the model's initialisation
  bool trainer_knows_ddp = true;  // false: the Trainer leaves DDP's sync flag alone
};

// A model, its DDP wrapper (with a group) and optimizer, and the Trainer over them.
struct DataParallelRun {
  std::shared_ptr<models::CausalLM> model;
  std::unique_ptr<DistributedDataParallel> ddp;
  std::unique_ptr<optim::Optimizer> optimizer;
  std::unique_ptr<train::Trainer> trainer;
  int world = 1, rank = 0;
  int64_t micro = 0;  // micro-batches this rank has taken

  explicit DataParallelRun(const RunOptions& o) {
    manual_seed(o.seed);
    model = tessera::testing::small_gpt2();
    if (o.group) {
      ddp = std::make_unique<DistributedDataParallel>(*model, o.group, o.ddp);
      world = o.group->size();
      rank = o.group->rank();
    }
    auto groups = optim::weight_decay_param_groups(model->parameters(), 0.1);
    if (o.zero_stage > 0)
      optimizer = std::make_unique<ZeroOptimizer>(*ddp, std::move(groups), make_adamw);
    else
      optimizer = make_adamw(std::move(groups));
    trainer = std::make_unique<train::Trainer>(
        *model, train::causal_lm_loss(*model), *optimizer, nullptr, nullptr,
        train::TrainerOptions{.grad_accum = o.accum,
                              .grad_clip = 1.0,
                              .ddp = o.trainer_knows_ddp ? ddp.get() : nullptr});
  }

  std::vector<double> train(int64_t steps) {
    std::vector<double> losses;
    for (int64_t s = 0; s < steps; ++s)
      losses.push_back(trainer->step([&] { return global_batch(micro++ * world + rank); }).loss);
    return losses;
  }
};

inline void expect_close(const std::vector<double>& got, const std::vector<double>& want,
                         double rel, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], rel * std::abs(want[i])) << what << " at step " << i;
}

// Largest |a - b| over the two models' parameters.
inline double max_param_diff(const nn::Module& a, const nn::Module& b) {
  TensorList pa = a.parameters(), pb = b.parameters();
  double worst = 0;
  for (size_t i = 0; i < pa.size(); ++i)
    worst = std::max(worst, max(abs(pa[i] - pb[i])).item<double>());
  return worst;
}

}  // namespace tessera::dist::testing
