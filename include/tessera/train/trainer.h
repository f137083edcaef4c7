#pragma once
// The training step and the loop's state, as a library (the CLI adds options, logging, plots):
// gradient accumulation over micro-batches, autocast with float32 master weights, loss scaling
// for float16, clipping, the optimizer and scheduler step, and hooks where data parallelism
// synchronises gradients. Checkpoints capture and restore the step, model, optimizer, scheduler,
// RNG and data position together.
//
//   train::Trainer trainer(model, train::causal_lm_loss(model), optimizer, &scheduler, &loader,
//                          {.grad_accum = 4, .grad_clip = 1.0, .autocast_dtype = kBFloat16});
//   while (trainer.step_count() < 1000) {
//     train::StepResult r = trainer.step();
//     std::printf("%lld %.4f\n", (long long)trainer.step_count(), r.loss);
//   }
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>

#include "tessera/data/dataloader.h"
#include "tessera/dist/ddp.h"
#include "tessera/dist/parallel_gradients.h"
#include "tessera/dist/pipeline.h"
#include "tessera/io/checkpoint.h"
#include "tessera/models/transformer.h"
#include "tessera/nn/layers.h"
#include "tessera/nn/module.h"
#include "tessera/optim/grad_scaler.h"
#include "tessera/optim/lr_scheduler.h"
#include "tessera/optim/optimizer.h"

namespace tessera::train {

// The loss of one micro-batch.
using LossFn = std::function<Tensor(const data::Batch&)>;
// model.loss(batch[0], batch[1]): next-token cross-entropy of a (inputs, targets) batch.
LossFn causal_lm_loss(models::CausalLM& model);
// How many terms a micro-batch's mean loss averages (see TrainerOptions::count_loss_tokens).
using TokenCountFn = std::function<int64_t(const data::Batch&)>;
// The targets of batch[1] that are not ignore_index.
TokenCountFn causal_lm_tokens(int64_t ignore_index = -1);

// Runs local pipeline chunk `chunk` on its micro-batch: input is the previous chunk's activation
// (undefined on the first global chunk); returns the activation, or the loss on the last.
using PipelineForwardFn =
    std::function<Tensor(int chunk, const data::Batch& batch, const Tensor& input)>;
// For chunks of models::PipelineStage: the first takes batch[0] (moved to the model's device),
// the last returns the loss against batch[1]. chunks must outlive the function.
PipelineForwardFn causal_lm_pipeline_forward(const nn::ModuleList& chunks);

// Pipeline parallelism: a step's micro-batches run through the executor's schedule instead of
// one after another.
struct PipelineOptions {
  dist::PipelineExecutor* executor = nullptr;  // null: no pipeline
  PipelineForwardFn forward;
  // With data parallelism, chunk c's DDP (each chunk synchronises on its own last backward).
  std::vector<dist::DistributedDataParallel*> chunk_ddps;
};

struct TrainerOptions {
  int64_t grad_accum = 1;  // micro-batches per optimizer step; their gradients are averaged
  double grad_clip = 1.0;  // max global gradient norm; 0 measures the norm without clipping
  // bfloat16 or float16: forward passes run under autocast (parameters and optimizer stay in
  // their own dtype, float32 master weights).
  std::optional<DType> autocast_dtype;
  DeviceType device = DeviceType::CPU;  // the device autocast applies to
  // Loss scaling. Off by default; on for float16 autocast unless set explicitly.
  std::optional<optim::GradScalerOptions> grad_scaler;
  // Data parallelism: gradients are reduced over ddp's group on each step's last micro-batch
  // only, the reported loss is the group's mean, evaluate() covers every rank's batches.
  dist::DistributedDataParallel* ddp = nullptr;
  // Unset: a step's gradient is the mean of its micro-batches' (and ranks') mean losses. Set:
  // every micro-batch loss is weighted by its share of the loss tokens of the whole step over
  // all ranks, so the gradient is that of the mean over all tokens even when micro-batches or
  // ranks hold different numbers of non-ignored targets (all micro-batches are loaded first).
  TokenCountFn count_loss_tokens;
  // Tensor (and pipeline) parallelism: gradients are synchronised across the model's parts after
  // backward and clipped by the whole model's norm. Not with float16 loss scaling or ZeRO.
  dist::ParallelGradients* model_parallel = nullptr;
  // Runs steps through a pipeline schedule (the ddp option stays null; see chunk_ddps).
  PipelineOptions pipeline;
};

struct StepResult {
  double loss = 0.0;       // mean of the micro-batch losses
  double grad_norm = 0.0;  // global gradient norm before clipping (unscaled)
  double lr = 0.0;         // the learning rate of the first group during the step
  bool skipped = false;    // the loss scaler found inf or nan and skipped the update
};

// Where data parallelism plugs in.
struct TrainerHooks {
  // Before micro-batch `micro`'s backward; `last` on the window's final one (DDP synchronises
  // gradients only then). Under a pipeline: before each chunk's backward, `last` on that
  // chunk's final one.
  std::function<void(int64_t micro, bool last)> before_backward;
  // After the last backward, before unscaling and clipping (DDP waits for its reductions).
  std::function<void()> after_backward;
};

class Trainer {
 public:
  // loader may be null when every step() is given its batches. The optimizer's parameters are
  // the ones clipped and stepped.
  Trainer(nn::Module& model, LossFn loss, optim::Optimizer& optimizer,
          optim::LRScheduler* scheduler, data::DataLoader* loader, TrainerOptions options = {});

  // One optimizer step over grad_accum micro-batches from the loader (a new epoch starts when
  // one runs out).
  StepResult step();
  // The same with micro-batches from next_batch. A step that throws (a bad batch, an OOM the
  // caller catches) leaves nothing behind: the next starts from cleared gradients and loss-scaler
  // records.
  StepResult step(const std::function<data::Batch()>& next_batch);
  // Mean loss of up to max_batches batches of loader (all when < 0, from its first), weighted by
  // their rows, in eval mode without gradients, under the training autocast state. The loader is
  // left where it stood.
  double evaluate(data::DataLoader& loader, int64_t max_batches = -1);

  int64_t step_count() const { return step_; }
  TrainerHooks& hooks() { return hooks_; }
  const TrainerOptions& options() const { return options_; }
  // The loss scaler, or null when loss scaling is off.
  optim::GradScaler* grad_scaler() { return scaler_.get(); }

  // The loop's state at the current step (the tensors alias the live ones; save before
  // training on). config: the run's JSON configuration to store with it.
  io::Checkpoint checkpoint(std::string config = "{}") const;
  // Restores a checkpoint() (model, optimizer, scheduler, RNG, data position, step).
  void restore(const io::Checkpoint& checkpoint);

 private:
  io::TrainingObjects objects() const;
  // The data-parallel group the step's losses are averaged over (null without one).
  dist::ProcessGroup* data_parallel_group() const;
  // Forward and backward of the step's micro-batches, one after another; returns the sum of the
  // (weighted) micro-batch losses.
  double run_micro_batches(const std::function<data::Batch()>& next_batch,
                           std::vector<data::Batch>& batches, const std::vector<double>& weights);
  // The same through the pipeline schedule.
  double run_pipeline(const std::function<data::Batch()>& next_batch,
                      std::vector<data::Batch>& batches, const std::vector<double>& weights);
  data::Batch next_loader_batch();
  StepResult run_step(const std::function<data::Batch()>& next_batch);
  // Drops the gradients of every trainable parameter, the optimizer's or not (one left out of
  // it to freeze it would otherwise accumulate forever).
  void clear_gradients();

  nn::Module& model_;
  LossFn loss_;
  optim::Optimizer& optimizer_;
  optim::LRScheduler* scheduler_;
  data::DataLoader* loader_;
  TrainerOptions options_;
  TensorList params_;  // every parameter of the model that requires grad
  std::unique_ptr<optim::GradScaler> scaler_;
  TrainerHooks hooks_;
  int64_t step_ = 0;
};

}  // namespace tessera::train
