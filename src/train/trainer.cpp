#include "tessera/train/trainer.h"

#include "tessera/autograd/grad_mode.h"
#include "tessera/core/error.h"
#include "tessera/dist/zero.h"
#include "tessera/models/pipeline_stage.h"
#include "tessera/ops/creation.h"
#include "tessera/ops/elementwise.h"
#include "tessera/ops/reduce.h"
#include "tessera/optim/clip_grad.h"
#include "tessera/runtime/autocast.h"

namespace tessera::train {

namespace {

// loss * weight, exactly 0 for a weight of 0: a micro-batch without loss tokens has a NaN mean
// loss (0 / 0) that must reach neither the logged loss nor the gradients, while its backward
// still runs (data parallelism synchronises in it).
Tensor weighted_loss(const Tensor& loss, double weight) {
  if (weight != 0.0) return loss * weight;
  return where(isfinite(loss), loss, zeros_like(loss)) * 0.0;
}

// Opens an autocast guard in `guard` when the options ask for one.
void maybe_autocast(std::optional<AutocastGuard>& guard, const TrainerOptions& options) {
  if (options.autocast_dtype) guard.emplace(options.device, *options.autocast_dtype);
}

}  // namespace

LossFn causal_lm_loss(models::CausalLM& model) {
  return [&model](const data::Batch& batch) {
    TESSERA_CHECK(batch.size() >= 2, ValueError,
                  "[Trainer] expected (inputs, targets) batches, got ", batch.size(), " tensors");
    const Device device = model.device();  // batches are loaded on the host
    return model.loss(batch[0].to(device), batch[1].to(device));
  };
}

PipelineForwardFn causal_lm_pipeline_forward(const nn::ModuleList& chunks) {
  return [&chunks](int chunk, const data::Batch& batch, const Tensor& input) {
    auto& stage = *chunks.at<models::PipelineStage>(static_cast<size_t>(chunk));
    const Device device = stage.model().device();  // batches are loaded on the host
    return stage.forward(stage.is_first() ? batch[0].to(device) : input, batch[1].to(device));
  };
}

TokenCountFn causal_lm_tokens(int64_t ignore_index) {
  return [ignore_index](const data::Batch& batch) {
    TESSERA_CHECK(batch.size() >= 2, ValueError,
                  "[Trainer] expected (inputs, targets) batches, got ", batch.size(), " tensors");
    return sum(batch[1] != ignore_index).item<int64_t>();
  };
}

namespace {

// The sum of `values` over the data-parallel group (unchanged without one).
std::vector<double> sum_over_ranks(dist::ProcessGroup* group, std::vector<double> values) {
  if (!group || group->size() == 1) return values;
  Tensor t = tensor(values);
  group->all_reduce(t, dist::ReduceOp::Sum)->wait();
  const double* p = t.data_ptr<double>();
  return std::vector<double>(p, p + values.size());
}

int group_size(dist::ProcessGroup* group) { return group ? group->size() : 1; }

}  // namespace

Trainer::Trainer(nn::Module& model, LossFn loss, optim::Optimizer& optimizer,
                 optim::LRScheduler* scheduler, data::DataLoader* loader, TrainerOptions options)
    : model_(model),
      loss_(std::move(loss)),
      optimizer_(optimizer),
      scheduler_(scheduler),
      loader_(loader),
      options_(std::move(options)) {
  TESSERA_CHECK(options_.grad_accum >= 1, ValueError, "[Trainer] expected grad_accum >= 1, got ",
                options_.grad_accum);
  TESSERA_CHECK(options_.grad_clip >= 0, ValueError, "[Trainer] expected grad_clip >= 0, got ",
                options_.grad_clip);
  if (options_.autocast_dtype)
    TESSERA_CHECK(is_16bit_float(*options_.autocast_dtype), ValueError,
                  "[Trainer] expected autocast dtype bfloat16 or float16, got ",
                  *options_.autocast_dtype);
  for (const Tensor& p : model_.parameters())
    if (p.requires_grad()) params_.push_back(p);
  if (!options_.grad_scaler && options_.autocast_dtype == kFloat16)
    options_.grad_scaler = optim::GradScalerOptions{};
  if (options_.grad_scaler) scaler_ = std::make_unique<optim::GradScaler>(*options_.grad_scaler);
  TESSERA_CHECK(!scaler_ || !dynamic_cast<dist::ZeroOptimizer*>(&optimizer_), ValueError,
                "[Trainer] expected no loss scaling (float16) with a ZeRO optimizer, got both: "
                "use bfloat16 autocast");
  if (options_.pipeline.executor)
    TESSERA_CHECK(!options_.ddp && options_.pipeline.forward, ValueError,
                  "[Trainer] expected a pipeline forward and DDP per chunk (pipeline.chunk_ddps), "
                  "got ",
                  options_.ddp ? "the ddp option set" : "no forward");
  if (options_.model_parallel) {
    TESSERA_CHECK(!scaler_, ValueError,
                  "[Trainer] expected no loss scaling (float16) with model parallelism, got both: "
                  "use bfloat16 autocast");
    TESSERA_CHECK(!dynamic_cast<dist::ZeroOptimizer*>(&optimizer_), ValueError,
                  "[Trainer] expected a plain optimizer with model parallelism, got a ZeRO one "
                  "(ZeRO shards data-parallel replicas only)");
  }
}

data::Batch Trainer::next_loader_batch() {
  TESSERA_CHECK(loader_ != nullptr, ValueError,
                "[Trainer.step] expected a data loader (or batches passed to step), got none");
  std::optional<data::Batch> batch = loader_->next();
  if (!batch) batch = loader_->next();  // the call after an epoch's end starts the next
  TESSERA_CHECK(batch.has_value(), ValueError,
                "[Trainer.step] expected a data loader with at least one batch, got an empty one");
  return std::move(*batch);
}

StepResult Trainer::step() {
  return step([this] { return next_loader_batch(); });
}

StepResult Trainer::step(const std::function<data::Batch()>& next_batch) {
  try {
    return run_step(next_batch);
  } catch (...) {
    clear_gradients();
    if (scaler_) scaler_->discard_step();
    throw;
  }
}

void Trainer::clear_gradients() {
  optimizer_.zero_grad();
  for (Tensor& p : params_) p.set_grad(Tensor());
}

StepResult Trainer::run_step(const std::function<data::Batch()>& next_batch) {
  StepResult result;
  result.lr = optimizer_.param_groups()[0].options.at("lr");
  const int64_t micro_steps = options_.grad_accum;
  dist::ProcessGroup* const dp_group = data_parallel_group();
  std::vector<data::Batch> batches;
  std::vector<double> weights;  // of each micro-batch loss, with token counting
  if (options_.count_loss_tokens) {
    for (int64_t m = 0; m < micro_steps; ++m) {
      batches.push_back(next_batch());
      weights.push_back(static_cast<double>(options_.count_loss_tokens(batches.back())));
    }
    double local = 0.0;
    for (double w : weights) local += w;
    const double total_tokens = sum_over_ranks(dp_group, {local})[0];
    TESSERA_CHECK(total_tokens > 0, ValueError,
                  "[Trainer.step] expected at least one loss token in the step, got none");
    // The reduction averages over ranks, so each rank scales its losses up by the group size.
    for (double& w : weights) w *= group_size(dp_group) / total_tokens;
  }
  const double loss_sum = options_.pipeline.executor
                              ? run_pipeline(next_batch, batches, weights)
                              : run_micro_batches(next_batch, batches, weights);
  if (hooks_.after_backward) hooks_.after_backward();
  if (options_.model_parallel) options_.model_parallel->synchronize();
  if (scaler_) scaler_->unscale_(optimizer_);
  result.grad_norm =
      (options_.model_parallel ? options_.model_parallel->clip_grad_norm_(options_.grad_clip)
                               : optimizer_.clip_grad_norm_(options_.grad_clip))
          .item<double>();
  if (scaler_) {
    result.skipped = !scaler_->step(optimizer_);
    scaler_->update();
  } else {
    optimizer_.step();
  }
  clear_gradients();
  if (scheduler_) scheduler_->step();
  ++step_;
  // The mean over micro-batches and ranks; token-weighted losses already sum to group size times
  // the token mean.
  const double ranks = group_size(dp_group);
  result.loss = sum_over_ranks(dp_group, {loss_sum})[0] /
                (weights.empty() ? static_cast<double>(micro_steps) * ranks : ranks);
  return result;
}

double Trainer::run_micro_batches(const std::function<data::Batch()>& next_batch,
                                  std::vector<data::Batch>& batches,
                                  const std::vector<double>& weights) {
  const int64_t micro_steps = options_.grad_accum;
  optim::GradAccumulator accumulator(micro_steps);
  double loss_sum = 0.0;  // of the micro-batch losses, token-weighted when counting
  for (int64_t micro = 0; micro < micro_steps; ++micro) {
    const data::Batch batch = batches.empty() ? next_batch() : std::move(batches[micro]);
    Tensor loss;
    {
      std::optional<AutocastGuard> autocast;
      maybe_autocast(autocast, options_);
      loss = loss_(batch);
    }
    const bool last = micro + 1 == micro_steps;
    if (hooks_.before_backward) hooks_.before_backward(micro, last);
    if (options_.ddp) options_.ddp->set_require_gradient_sync(last);
    if (weights.empty()) {
      accumulator.backward(scaler_ ? scaler_->scale(loss) : loss);
      loss_sum += loss.item<double>();
    } else {
      const Tensor weighted = weighted_loss(loss, weights[micro]);
      (scaler_ ? scaler_->scale(weighted) : weighted).backward();
      loss_sum += weighted.item<double>();
    }
  }
  return loss_sum;
}

double Trainer::run_pipeline(const std::function<data::Batch()>& next_batch,
                             std::vector<data::Batch>& batches,
                             const std::vector<double>& weights) {
  const int64_t m = options_.grad_accum;
  if (batches.empty())
    for (int64_t i = 0; i < m; ++i) batches.push_back(next_batch());
  const PipelineOptions& pipeline = options_.pipeline;
  dist::PipelineCallbacks callbacks;
  callbacks.forward = [&](int chunk, int64_t micro, const Tensor& input) {
    std::optional<AutocastGuard> autocast;
    maybe_autocast(autocast, options_);
    Tensor out = pipeline.forward(chunk, batches[micro], input);
    // The executor scales losses by 1 / m; token weights replace that factor.
    return pipeline.executor->is_last_chunk(chunk) && !weights.empty()
               ? weighted_loss(out, weights[micro] * static_cast<double>(m))
               : out;
  };
  callbacks.before_backward = [&](int chunk, int64_t micro, bool last) {
    if (hooks_.before_backward) hooks_.before_backward(micro, last);
    if (!pipeline.chunk_ddps.empty())
      pipeline.chunk_ddps.at(chunk)->set_require_gradient_sync(last);
  };
  const double sum = pipeline.executor->run(m, callbacks);
  return weights.empty() ? sum : sum / static_cast<double>(m);
}

double Trainer::evaluate(data::DataLoader& loader, int64_t max_batches) {
  double sum = 0.0;
  int64_t rows = 0;
  {
    nn::EvalModeGuard eval_mode(model_);
    // Reads from the start, and leaves the loader where it stood (it may be the training one).
    struct PositionGuard {
      data::DataLoader& loader;
      data::DataLoaderState before = loader.state();
      ~PositionGuard() { loader.load_state(before); }
    } position{loader};
    autograd::NoGradGuard no_grad;
    std::optional<AutocastGuard> autocast;
    maybe_autocast(autocast, options_);
    loader.set_epoch(0);
    const int64_t n =
        max_batches < 0 ? loader.num_batches() : std::min(max_batches, loader.num_batches());
    std::vector<data::Batch> batches;
    for (int64_t i = 0; i < n; ++i) {
      std::optional<data::Batch> batch = loader.next();
      if (!batch) break;
      rows += (*batch)[0].size(0);
      if (options_.pipeline.executor)
        batches.push_back(std::move(*batch));
      else
        sum += loss_(*batch).item<double>() * static_cast<double>((*batch)[0].size(0));
    }
    if (options_.pipeline.executor && !batches.empty()) {
      const PipelineOptions& pipeline = options_.pipeline;
      dist::PipelineCallbacks callbacks;
      callbacks.forward_only = true;
      callbacks.forward = [&](int chunk, int64_t micro, const Tensor& input) {
        Tensor out = pipeline.forward(chunk, batches[micro], input);
        return pipeline.executor->is_last_chunk(chunk)
                   ? out * static_cast<double>(batches[micro][0].size(0))
                   : out;
      };
      sum = pipeline.executor->run(static_cast<int64_t>(batches.size()), callbacks);
    }
  }
  const std::vector<double> totals =
      sum_over_ranks(data_parallel_group(), {sum, static_cast<double>(rows)});
  sum = totals[0];
  rows = static_cast<int64_t>(totals[1]);
  TESSERA_CHECK(rows > 0, ValueError, "[Trainer.evaluate] expected at least one batch, got none");
  return sum / static_cast<double>(rows);
}

dist::ProcessGroup* Trainer::data_parallel_group() const {
  if (options_.ddp) return &options_.ddp->group();
  if (!options_.pipeline.chunk_ddps.empty()) return &options_.pipeline.chunk_ddps[0]->group();
  return nullptr;
}

io::TrainingObjects Trainer::objects() const {
  return {&model_, &optimizer_, scheduler_, loader_, nullptr, scaler_.get()};
}

io::Checkpoint Trainer::checkpoint(std::string config) const {
  return io::capture_checkpoint(step_, objects(), std::move(config));
}

void Trainer::restore(const io::Checkpoint& checkpoint) {
  step_ = io::restore_checkpoint(checkpoint, objects());
}

}  // namespace tessera::train
