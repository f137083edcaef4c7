#include "tessera/train/trainer.h"

#include "tessera/autograd/grad_mode.h"
#include "tessera/core/error.h"
#include "tessera/optim/clip_grad.h"
#include "tessera/runtime/autocast.h"

namespace tessera::train {

namespace {

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
    TESSERA_CHECK(*options_.autocast_dtype == kBFloat16 || *options_.autocast_dtype == kFloat16,
                  ValueError, "[Trainer] expected autocast dtype bfloat16 or float16, got ",
                  *options_.autocast_dtype);
  for (const Tensor& p : model_.parameters())
    if (p.requires_grad()) params_.push_back(p);
  if (!options_.grad_scaler && options_.autocast_dtype == kFloat16)
    options_.grad_scaler = optim::GradScalerOptions{};
  if (options_.grad_scaler) scaler_ = std::make_unique<optim::GradScaler>(*options_.grad_scaler);
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
  StepResult result;
  result.lr = optimizer_.param_groups()[0].options.at("lr");
  optim::GradAccumulator accumulator(options_.grad_accum);
  double loss_sum = 0.0;
  for (int64_t micro = 0; micro < options_.grad_accum; ++micro) {
    const data::Batch batch = next_batch();
    Tensor loss;
    {
      std::optional<AutocastGuard> autocast;
      maybe_autocast(autocast, options_);
      loss = loss_(batch);
    }
    if (hooks_.before_backward) hooks_.before_backward(micro, accumulator.is_last_micro_step());
    accumulator.backward(scaler_ ? scaler_->scale(loss) : loss);
    loss_sum += loss.item<double>();
  }
  if (hooks_.after_backward) hooks_.after_backward();
  if (scaler_) scaler_->unscale_(optimizer_);
  result.grad_norm = options_.grad_clip > 0
                         ? optim::clip_grad_norm_(params_, options_.grad_clip).item<double>()
                         : optim::grad_norm(params_).item<double>();
  if (scaler_) {
    result.skipped = !scaler_->step(optimizer_);
    scaler_->update();
  } else {
    optimizer_.step();
  }
  optimizer_.zero_grad();
  if (scheduler_) scheduler_->step();
  ++step_;
  result.loss = loss_sum / static_cast<double>(options_.grad_accum);
  return result;
}

double Trainer::evaluate(data::DataLoader& loader, int64_t max_batches) {
  const bool was_training = model_.is_training();
  model_.eval();
  double sum = 0.0;
  int64_t rows = 0;
  {
    autograd::NoGradGuard no_grad;
    std::optional<AutocastGuard> autocast;
    maybe_autocast(autocast, options_);
    loader.set_epoch(0);
    const int64_t n =
        max_batches < 0 ? loader.num_batches() : std::min(max_batches, loader.num_batches());
    for (int64_t i = 0; i < n; ++i) {
      std::optional<data::Batch> batch = loader.next();
      if (!batch) break;
      const int64_t b = (*batch)[0].size(0);
      sum += loss_(*batch).item<double>() * static_cast<double>(b);
      rows += b;
    }
  }
  if (was_training) model_.train();
  TESSERA_CHECK(rows > 0, ValueError, "[Trainer.evaluate] expected at least one batch, got none");
  return sum / static_cast<double>(rows);
}

io::TrainingObjects Trainer::objects() const {
  return {&model_, &optimizer_, scheduler_, loader_, nullptr};
}

io::Checkpoint Trainer::checkpoint(std::string config) const {
  return io::capture_checkpoint(step_, objects(), std::move(config));
}

void Trainer::restore(const io::Checkpoint& checkpoint) {
  step_ = io::restore_checkpoint(checkpoint, objects());
}

}  // namespace tessera::train
