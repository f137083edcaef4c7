#pragma once
// One rank's part of a DP x TP x PP training run of a CausalLM, as `tessera train`, the
// model-parallel tests and the benchmark build it: the model's tensor-parallel slices, its
// pipeline chunks (local chunk c is global chunk c * pp + stage), one DDP per trained module
// over the DP group, ParallelGradients, the pipeline executor, and the TrainerOptions wiring.
//
//   auto g = dist::make_layout_groups(*world, dist::Layout(dp, tp, pp));
//   train::ModelParallel mp(model, {.dp = g.dp, .tp = g.tp, .pp = g.pp, .embedding = g.embedding},
//                           {.sequence_parallel = true});
//   train::TrainerOptions options{.grad_accum = 4};
//   mp.configure(options);
//   auto opt = make_adamw(mp.trained().parameters());
//   train::Trainer trainer(mp.trained(), mp.loss(), *opt, nullptr, nullptr, options);
#include <memory>
#include <vector>

#include "tessera/dist/ddp.h"
#include "tessera/dist/parallel_gradients.h"
#include "tessera/dist/pipeline.h"
#include "tessera/models/transformer.h"
#include "tessera/train/trainer.h"

namespace tessera::train {

// This rank's group along each axis; null (or size 1) for an axis of size 1. embedding: the
// first and last stage's group of a tied embedding (dist::LayoutGroups::embedding).
struct ModelParallelGroups {
  dist::GroupPtr dp, tp, pp, embedding;
};

struct ModelParallelOptions {
  bool sequence_parallel = false;
  dist::PipelineScheduleKind schedule = dist::PipelineScheduleKind::OneFOneB;
  int virtual_stages = 1;            // > 1: interleaved 1F1B
  std::vector<int64_t> layer_sizes;  // layers per global chunk; empty: an even split
  dist::DDPOptions ddp;
  Device device = kCPU;  // where the pipeline's received tensors go
};

class ModelParallel {
 public:
  // Shards `model` in place (ValueError for virtual stages without PP). Sequence parallelism
  // over one TP rank changes nothing.
  ModelParallel(std::shared_ptr<models::CausalLM> model, ModelParallelGroups groups,
                ModelParallelOptions options);

  // What this rank trains (its optimizer's parameters): the model, or its pipeline chunks.
  nn::Module& trained() const {
    if (chunks_) return *chunks_;
    return *model_;
  }
  const std::shared_ptr<nn::ModuleList>& chunks() const { return chunks_; }
  dist::PipelineExecutor* executor() const { return executor_.get(); }
  // The whole model's DDP (data parallelism without a pipeline), else null.
  dist::DistributedDataParallel* ddp() const {
    return chunks_ || ddps_.empty() ? nullptr : ddps_[0].get();
  }
  // Tensor or pipeline parallelism: each rank holds a part of the model.
  bool model_parallel() const { return grads_ != nullptr; }
  // The loss of a micro-batch without a pipeline (a pipeline computes it on its last chunk).
  LossFn loss() const;
  // Sets options' ddp, model_parallel and pipeline for this layout.
  void configure(TrainerOptions& options) const;

 private:
  std::shared_ptr<models::CausalLM> model_;
  std::shared_ptr<nn::ModuleList> chunks_;  // of models::PipelineStage, with PP > 1
  std::vector<std::unique_ptr<dist::DistributedDataParallel>> ddps_;
  std::unique_ptr<dist::PipelineExecutor> executor_;
  std::unique_ptr<dist::ParallelGradients> grads_;
};

}  // namespace tessera::train
