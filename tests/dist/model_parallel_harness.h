#pragma once
// Training runs for the model-parallel tests: a GPT-2 or LLaMA laid out over DP x TP x PP ranks
// of the world (Megatron order), trained by the library Trainer on the same stream of global
// micro-batches as the data-parallel harness, so every layout must reproduce the single-process
// run with accumulation DP x micro-batches.
#include <chrono>
#include <memory>
#include <vector>

#include "dist_test_util.h"
#include "tessera/dist/layout_groups.h"
#include "tessera/train/model_parallel.h"
#include "training_harness.h"

namespace tessera::dist::testing {

// 71 tokens: padded to 72 at TP 2 and 4, so the padding is always exercised.
inline constexpr int64_t kModelVocab = 71;

inline std::shared_ptr<models::CausalLM> gpt2(int64_t layers = 3) {
  models::GPT2Config c;
  c.vocab_size = kModelVocab;
  c.block_size = 32;
  c.n_layer = layers;
  c.n_head = 4;
  c.n_embd = 32;
  manual_seed(21);
  return std::make_shared<models::GPT2>(c);
}

inline std::shared_ptr<models::CausalLM> llama(int64_t layers = 3, bool tied = false) {
  models::LlamaConfig c;
  c.vocab_size = kModelVocab;
  c.dim = 32;
  c.n_layers = layers;
  c.n_heads = 8;
  c.n_kv_heads = 4;  // grouped-query attention, still divisible by TP 4
  c.hidden_dim = 48;
  c.max_seq_len = 32;
  c.tie_embeddings = tied;
  manual_seed(22);
  return std::make_shared<models::Llama>(c);
}

using ModelFactory = std::function<std::shared_ptr<models::CausalLM>()>;

struct LayoutOptions {
  int tp = 1, pp = 1;  // dp = world / (tp * pp)
  bool sequence_parallel = false;
  PipelineScheduleKind schedule = PipelineScheduleKind::OneFOneB;
  int virtual_stages = 1;
  std::vector<int64_t> layer_sizes;  // per global chunk; empty: even
};

// One rank's part of a model-parallel run (or the whole model alone, with `alone`).
struct ModelParallelRun {
  std::shared_ptr<models::CausalLM> model;
  std::unique_ptr<train::ModelParallel> parallel;
  std::unique_ptr<optim::Optimizer> optimizer;
  std::unique_ptr<train::Trainer> trainer;
  int dp_rank = 0, dp_size = 1;
  int64_t micro = 0;

  // The whole model in one process, accumulating `accum` micro-batches.
  ModelParallelRun(const ModelFactory& make, int64_t accum) {
    model = make();
    optimizer = make_adamw(optim::weight_decay_param_groups(model->parameters(), 0.1));
    trainer = std::make_unique<train::Trainer>(
        *model, train::causal_lm_loss(*model), *optimizer, nullptr, nullptr,
        train::TrainerOptions{.grad_accum = accum, .grad_clip = 0.5});
  }

  // This rank's part of the layout; `accum` micro-batches per data-parallel rank.
  ModelParallelRun(const ModelFactory& make, int64_t accum, const LayoutOptions& o) {
    const LayoutGroups groups =
        make_layout_groups(*world(), Layout::from_world(world()->size(), o.tp, o.pp));
    dp_rank = groups.dp->rank();
    dp_size = groups.dp->size();
    model = make();
    parallel = std::make_unique<train::ModelParallel>(
        model,
        train::ModelParallelGroups{
            .dp = groups.dp, .tp = groups.tp, .pp = groups.pp, .embedding = groups.embedding},
        train::ModelParallelOptions{.sequence_parallel = o.sequence_parallel,
                                    .schedule = o.schedule,
                                    .virtual_stages = o.virtual_stages,
                                    .layer_sizes = o.layer_sizes});
    train::TrainerOptions options{.grad_accum = accum, .grad_clip = 0.5};
    parallel->configure(options);
    optimizer = make_adamw(optim::weight_decay_param_groups(parallel->trained().parameters(), 0.1));
    trainer = std::make_unique<train::Trainer>(parallel->trained(), parallel->loss(), *optimizer,
                                               nullptr, nullptr, options);
  }

  std::vector<double> train(int64_t steps) {
    std::vector<double> losses;
    for (int64_t s = 0; s < steps; ++s)
      losses.push_back(
          trainer->step([&] { return global_batch(micro++ * dp_size + dp_rank); }).loss);
    return losses;
  }
};

// 20 steps of the layout against the whole model with the same global batch. Every rank ends
// with the same losses, so rank 0 alone runs the reference and compares; the others wait in a
// barrier that sleeps between polls, leaving the cores to it.
inline void expect_layout_matches_one_process(const ModelFactory& make, const LayoutOptions& o,
                                              int64_t accum, const char* what) {
  const int dp = world()->size() / (o.tp * o.pp);
  std::vector<double> want;
  if (world()->rank() == 0) want = ModelParallelRun(make, accum * dp).train(20);
  {
    // The reference may outlast the suite's short deadline (sanitizer builds).
    const auto deadline = world()->timeout();
    world()->set_timeout(std::chrono::minutes(10));
    world()->barrier()->wait();
    world()->set_timeout(deadline);
  }
  ModelParallelRun run(make, accum, o);
  const std::vector<double> got = run.train(20);
  if (world()->rank() != 0) return;
  expect_close(got, want, 1e-5, what);
  EXPECT_LT(want.back(), want.front()) << what;
}

}  // namespace tessera::dist::testing
