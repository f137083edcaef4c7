#include "tessera/train/model_parallel.h"

#include <stdexcept>

#include "tessera/core/error.h"
#include "tessera/models/pipeline_stage.h"

namespace tessera::train {

namespace {

int size_of(const dist::GroupPtr& group) { return group ? group->size() : 1; }

}  // namespace

ModelParallel::ModelParallel(std::shared_ptr<models::CausalLM> model, ModelParallelGroups groups,
                             ModelParallelOptions options)
    : model_(std::move(model)) {
  const int tp = size_of(groups.tp), pp = size_of(groups.pp), dp = size_of(groups.dp);
  const int v = options.virtual_stages;
  TESSERA_CHECK(v == 1 || pp > 1, ValueError,
                "[ModelParallel] expected virtual stages only with 2 or more pipeline stages, got ",
                v, " virtual stages on ", pp);
  if (tp * pp > 1) {
    model_->shard_tensor_parallel(groups.tp, options.sequence_parallel);
    dist::ParallelGradientsOptions grads;
    grads.tp = groups.tp;
    grads.sequence_parallel = options.sequence_parallel;
    grads.pp = groups.pp;
    if (pp > 1) {
      const int stage = groups.pp->rank();
      chunks_ = models::pipeline_chunks(
          model_, models::split_layers(model_->n_layers(), pp * v, options.layer_sizes), pp, stage);
      const dist::PipelineScheduleKind kind =
          v > 1 ? dist::PipelineScheduleKind::Interleaved1F1B : options.schedule;
      executor_ = std::make_unique<dist::PipelineExecutor>(groups.pp, kind, v, options.device);
      if (groups.embedding) {
        grads.tied = models::tied_across_stages(model_);
        grads.tied_group = groups.embedding;
        grads.count_tied_in_norm = stage == 0;
      }
    }
    grads_ = std::make_unique<dist::ParallelGradients>(trained(), grads);
  }
  if (dp == 1) return;
  // One DDP per pipeline chunk (each synchronises on its own last backward), else the model's.
  std::vector<nn::Module*> replicated{model_.get()};
  if (chunks_) {
    replicated.clear();
    for (const auto& chunk : *chunks_) replicated.push_back(chunk.get());
  }
  for (nn::Module* m : replicated)
    ddps_.push_back(std::make_unique<dist::DistributedDataParallel>(*m, groups.dp, options.ddp));
}

LossFn ModelParallel::loss() const {
  if (!executor_) return causal_lm_loss(*model_);
  return [](const data::Batch&) -> Tensor {
    throw std::logic_error("[ModelParallel] a pipeline computes the loss on its last chunk");
  };
}

void ModelParallel::configure(TrainerOptions& options) const {
  options.ddp = ddp();
  options.model_parallel = grads_.get();
  options.pipeline = {};
  if (!executor_) return;
  options.pipeline.executor = executor_.get();
  options.pipeline.forward = causal_lm_pipeline_forward(*chunks_);
  for (const auto& ddp : ddps_) options.pipeline.chunk_ddps.push_back(ddp.get());
}

}  // namespace tessera::train
