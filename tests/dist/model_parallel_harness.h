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
#include "tessera/dist/parallel_gradients.h"
#include "tessera/dist/pipeline.h"
#include "tessera/models/pipeline_stage.h"
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
  std::shared_ptr<nn::ModuleList> chunks;  // of models::PipelineStage (pipelines only)
  std::vector<std::unique_ptr<DistributedDataParallel>> ddps;
  std::unique_ptr<PipelineExecutor> executor;
  std::unique_ptr<ParallelGradients> grads;
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
    const Layout layout = Layout::from_world(world()->size(), o.tp, o.pp);
    const LayoutGroups groups = make_layout_groups(*world(), layout);
    auto tp = groups.tp, dp = groups.dp, pp = groups.pp, embedding = groups.embedding;
    dp_rank = dp->rank();
    dp_size = dp->size();
    model = make();
    model->shard_tensor_parallel(tp, o.sequence_parallel);
    train::TrainerOptions options{.grad_accum = accum, .grad_clip = 0.5};
    ParallelGradientsOptions grad_options{
        .tp = tp, .sequence_parallel = o.sequence_parallel, .pp = pp};
    nn::Module* trained = model.get();
    if (o.pp == 1) {
      if (dp_size > 1) ddps.push_back(std::make_unique<DistributedDataParallel>(*model, dp));
      options.ddp = ddps.empty() ? nullptr : ddps[0].get();
    } else {
      chunks = models::pipeline_chunks(
          model, models::split_layers(model->n_layers(), o.pp * o.virtual_stages, o.layer_sizes),
          o.pp, pp->rank());
      trained = chunks.get();
      if (embedding) {
        grad_options.tied = models::tied_across_stages(model);
        grad_options.tied_group = embedding;
        grad_options.count_tied_in_norm = pp->rank() == 0;
      }
      executor = std::make_unique<PipelineExecutor>(pp, o.schedule, o.virtual_stages);
      options.pipeline.executor = executor.get();
      options.pipeline.forward = train::causal_lm_pipeline_forward(*chunks);
      if (dp_size > 1)
        for (const auto& chunk : *chunks) {
          ddps.push_back(std::make_unique<DistributedDataParallel>(*chunk, dp));
          options.pipeline.chunk_ddps.push_back(ddps.back().get());
        }
    }
    grads = std::make_unique<ParallelGradients>(*trained, grad_options);
    options.model_parallel = grads.get();
    optimizer = make_adamw(optim::weight_decay_param_groups(trained->parameters(), 0.1));
    auto unused = [](const data::Batch&) -> Tensor { throw std::logic_error("pipeline loss"); };
    trainer = std::make_unique<train::Trainer>(
        *trained, o.pp == 1 ? train::causal_lm_loss(*model) : train::LossFn(unused), *optimizer,
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
