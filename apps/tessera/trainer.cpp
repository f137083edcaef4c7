// `tessera train` around the library Trainer (tessera/train): setup (new run, --init-from or
// --resume), the loop with its stop conditions, evaluation, samples, checkpoints, metrics, the
// plot and --profile.
#include <omp.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>

#include "data_parallel.h"
#include "loss_plot.h"
#include "metrics_log.h"
#include "progress_bar.h"
#include "tessera/core/error.h"
#include "tessera/data/dataloader.h"
#include "tessera/data/lm_dataset.h"
#include "tessera/dist/zero.h"
#include "tessera/io/atomic_file.h"
#include "tessera/io/checkpoint.h"
#include "tessera/io/lora_adapter.h"
#include "tessera/llm/model_files.h"
#include "tessera/models/registry.h"
#include "tessera/models/sampling.h"
#include "tessera/optim/adam.h"
#include "tessera/optim/lr_scheduler.h"
#include "tessera/runtime/profiler.h"
#include "tessera/tokenizers/char_tokenizer.h"
#include "tessera/train/model_parallel.h"
#include "tessera/train/trainer.h"
#include "train_options.h"
#include "train_setup.h"

namespace tessera::cli {

using namespace llm;  // model files and their tokenizers

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using Json = nlohmann::json;
using tessera::detail::str;

// Ctrl-C asks the loop to stop after the current step (then evaluate and save); a second one
// kills the process as usual.
std::atomic<bool> g_stop_requested{false};
extern "C" void on_interrupt(int) {
  if (g_stop_requested.exchange(true)) {
    std::signal(SIGINT, SIG_DFL);
    std::raise(SIGINT);
  }
}

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

std::string fmt(const char* format, auto... args) {
  char buf[256];
  std::snprintf(buf, sizeof buf, format, args...);
  return buf;
}

// Options that shape the model (fixed by --init-from's model file or a resumed checkpoint), and
// those that fix how data becomes tokens (fixed by a resumed checkpoint too).
constexpr std::array<const char*, 12> kModelKeys = {"model",
                                                    "preset",
                                                    "n_layer",
                                                    "n_head",
                                                    "n_kv_head",
                                                    "n_embd",
                                                    "dropout",
                                                    "n_experts",
                                                    "experts_per_token",
                                                    "router_aux_loss_coef",
                                                    "head_dim",
                                                    "qk_norm"};
constexpr std::array<const char*, 3> kTokenKeys = {"seq_len", "tokenizer", "data_dir"};
// Options of one invocation, never taken from a checkpoint (a data-parallel checkpoint holds the
// unsharded state, so any data-parallel layout may resume it).
constexpr std::array<const char*, 9> kInvocationKeys = {"out",        "resume",       "threads",
                                                        "time_limit", "profile",      "dp",
                                                        "zero_stage", "dist_timeout", "bucket_mb"};
// The model-parallel layout: each rank's checkpoint holds its part of the model, so a resumed
// run must be launched with the layout that wrote it.
constexpr std::array<const char*, 6> kLayoutKeys = {"tp", "pp",        "vpp",
                                                    "sp", "pp_layers", "pp_schedule"};
// The LoRA branches a run trains (fixed by a resumed checkpoint, which holds them).
constexpr std::array<const char*, 4> kLoraKeys = {"lora_rank", "lora_alpha", "lora_dropout",
                                                  "lora_targets"};

// The command-line flag of an option's JSON key ("n_layer" -> "--n-layer").
std::string flag(std::string key) {
  std::replace(key.begin(), key.end(), '_', '-');
  return "--" + key;
}

// The items of a comma-separated option ("3,5" -> {"3", "5"}; "" -> {}; a trailing comma adds
// nothing, an inner empty item stays for the caller to judge).
std::vector<std::string> comma_items(const std::string& text) {
  std::vector<std::string> items;
  for (size_t start = 0; start < text.size();) {
    const size_t comma = std::min(text.find(',', start), text.size());
    items.push_back(text.substr(start, comma - start));
    start = comma + 1;
  }
  return items;
}

// The LoRA of the --lora-* options, or nullopt without --lora-rank.
std::optional<nn::LoraConfig> lora_config(const TrainOptions& o, const std::string& arch) {
  if (o.lora_rank == 0) return std::nullopt;
  nn::LoraConfig c{.r = o.lora_rank,
                   .lora_alpha = o.lora_alpha > 0 ? o.lora_alpha : 2.0 * o.lora_rank,
                   .lora_dropout = o.lora_dropout};
  c.target_modules = models::model_family(arch, "train").lora_targets;
  if (!o.lora_targets.empty()) {
    c.target_modules.clear();
    for (std::string name : comma_items(o.lora_targets)) {
      std::erase(name, ' ');  // "c_attn, c_fc" as typed
      if (!name.empty()) c.target_modules.push_back(std::move(name));
    }
  }
  return c;
}

// --pp-layers "3,5" -> {3, 5}; empty -> {}.
std::vector<int64_t> layer_counts(const std::string& text) {
  std::vector<int64_t> counts;
  for (const std::string& item : comma_items(text)) {
    char* end = nullptr;
    const long long n = std::strtoll(item.c_str(), &end, 10);
    TESSERA_CHECK(!item.empty() && *end == '\0', ValueError,
                  "[train] expected --pp-layers as comma-separated layer counts (\"3,5\"), got '",
                  text, "'");
    counts.push_back(n);
  }
  return counts;
}

// The run's saved options name the data absolutely, so a resume from another folder finds it.
void absolute_data_paths(TrainOptions& o) {
  o.data = fs::absolute(o.data).lexically_normal().string();
  if (!o.val_data.empty()) o.val_data = fs::absolute(o.val_data).lexically_normal().string();
}

// A short description of the architecture for the log and the plot title.
std::string describe(const ModelSpec& spec, int64_t params) {
  const Json& c = spec.config;
  const bool gpt2 = spec.arch == "gpt2";
  std::string s = str(spec.arch, " ", c[gpt2 ? "n_layer" : "n_layers"].get<int64_t>(), "L ",
                      c[gpt2 ? "n_head" : "n_heads"].get<int64_t>(), "H ",
                      c[gpt2 ? "n_embd" : "dim"].get<int64_t>(), "C");
  if (!gpt2 && c["n_kv_heads"] != c["n_heads"]) s += str(" ", c["n_kv_heads"].get<int64_t>(), "KV");
  if (!gpt2 && c.value("n_experts", int64_t{0}) > 0)
    s += str(" ", c["n_experts"].get<int64_t>(), "E top-", c["n_experts_per_token"].get<int64_t>());
  return s + fmt(", vocab %lld, %.2fM params",
                 static_cast<long long>(c["vocab_size"].get<int64_t>()),
                 static_cast<double>(params) / 1e6);
}

class TrainingRun {
 public:
  TrainingRun(TrainOptions options, const std::set<std::string>& explicit_keys,
              const DataParallel& dp);
  int run();

 private:
  void setup_resume(const std::set<std::string>& explicit_keys);
  void setup_new_run(const std::set<std::string>& explicit_keys);
  void setup_training();
  void setup_data(const Corpus& corpus);
  void setup_parallel(const Device& device);
  void setup_optimizer();
  // Where this rank's checkpoints go: --out, or under model parallelism a folder per rank.
  std::string checkpoint_dir() const;
  // Under model parallelism: this rank's checkpoint of the newest step every rank saved.
  std::string common_checkpoint() const;
  void rescale_data_position(io::Checkpoint& checkpoint);
  void restore(const io::Checkpoint& checkpoint);
  // --warmup-steps, shortened to end before --max-steps.
  int64_t warmup_steps() const { return std::min(o_.warmup_steps, o_.max_steps - 1); }
  double evaluate(int64_t step);
  void sample(int64_t step);
  void save(int64_t step);
  void replot();
  void write_profile(const profiler::Profile& profile);

  TrainOptions o_;
  const DataParallel& dp_;
  std::string out_;
  std::optional<io::Checkpoint> resume_from_;
  std::optional<LoadedModel> init_from_;
  std::unique_ptr<tokenizers::Tokenizer> tokenizer_;
  ModelSpec spec_;
  Json run_config_;
  int64_t seq_len_ = 0;
  // --dp and --batch-size of the run that wrote the checkpoint resumed from
  int resumed_dp_ = 1;
  int64_t resumed_batch_size_ = 0;
  double last_val_loss_ = NAN;

  std::shared_ptr<models::CausalLM> model_;  // float32 (the master weights under autocast)
  int64_t model_params_ = 0;                 // of the whole model (without LoRA branches)
  std::optional<nn::LoraConfig> lora_;       // the branches trained instead of the weights
  // This rank's part of the model, its DDP and pipeline (the whole model alone on one process).
  std::unique_ptr<train::ModelParallel> parallel_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  std::unique_ptr<optim::WarmupCosineLR> scheduler_;
  std::unique_ptr<data::DataLoader> train_loader_, val_loader_;
  std::unique_ptr<train::Trainer> trainer_;
  std::unique_ptr<MetricsLog> metrics_;
  std::unique_ptr<ProgressBar> bar_;
  std::string title_;
};

TrainingRun::TrainingRun(TrainOptions options, const std::set<std::string>& explicit_keys,
                         const DataParallel& dp)
    : o_(std::move(options)), dp_(dp), out_(o_.out) {
  if (o_.threads > 0) omp_set_num_threads(o_.threads);
  bar_ = std::make_unique<ProgressBar>(o_.max_steps, ProgressBar::stderr_is_terminal());
  if (!dp_.is_root()) bar_->mute();
  if (o_.resume)
    setup_resume(explicit_keys);
  else
    setup_new_run(explicit_keys);
  bar_->set_total(o_.max_steps);  // a resumed run may have changed it
  setup_training();
}

// Continues a run: the saved options, with those given on the command line replacing them.
void TrainingRun::setup_resume(const std::set<std::string>& explicit_keys) {
  TESSERA_CHECK(o_.init_from.empty(), ValueError,
                "[train] expected --init-from only for a new run, got it with --resume");
  for (const auto& keys :
       {std::span<const char* const>(kModelKeys), std::span<const char* const>(kTokenKeys),
        std::span<const char* const>(kLoraKeys)})
    for (const char* key : keys)
      TESSERA_CHECK(!explicit_keys.count(key), ValueError, "[train] expected no ", flag(key),
                    " with --resume (the run's checkpoint fixes it), got ", flag(key));
  io::remove_interrupted_writes(checkpoint_dir());
  const std::string folder =
      dp_.model_parallel() ? common_checkpoint() : io::resolve_checkpoint(checkpoint_dir());
  TESSERA_CHECK(folder != checkpoint_dir(), ValueError,
                "[train] expected --out to be the run's folder (the one holding its ckpt_<step> "
                "checkpoints), got the checkpoint '",
                out_, "' itself; use --out ", fs::path(out_).parent_path().string());
  resume_from_ = io::load_checkpoint(folder);
  const Json saved = Json::parse(resume_from_->config);
  const Json given_layout = o_;
  for (const char* key : kLayoutKeys)
    TESSERA_CHECK(!saved.contains("train") ||
                      saved["train"].value(key, given_layout[key]) == given_layout[key],
                  ValueError, "[train] expected --", key, " ", saved["train"][key].dump(),
                  " as in the run being resumed (each rank's checkpoint holds its part of the "
                  "model), got ",
                  given_layout[key].dump());
  TESSERA_CHECK(saved.contains("train") && saved.contains("arch"), ValueError,
                "[train] expected a checkpoint written by tessera train in '", folder,
                "', got one without its run options");
  resumed_dp_ = saved["train"].value("dp", 1);
  resumed_batch_size_ = saved["train"].value("batch_size", o_.batch_size);
  Json merged = saved["train"];
  const Json given = o_;
  for (const std::string& key : explicit_keys) merged[key] = given[key];
  for (const char* key : kInvocationKeys) merged[key] = given[key];
  for (const char* key : kLayoutKeys) merged[key] = given[key];
  o_ = merged.get<TrainOptions>();
  absolute_data_paths(o_);
  spec_ = {saved["arch"].get<std::string>(), saved["model"]};
  const TokenizerRef ref{saved.value("tokenizer", std::string()),
                         saved.value("tokenizer_data_dir", std::string()), out_};
  tokenizer_ = load_tokenizer(ref);
  run_config_ = saved;
  run_config_["train"] = o_;
  bar_->log(str("resuming from ", folder, " (step ", resume_from_->step, ")"));
}

void TrainingRun::setup_new_run(const std::set<std::string>& explicit_keys) {
  TESSERA_CHECK(!o_.data.empty(), ValueError,
                "[train] expected --data PATH (a text file or an llm.c .bin token file), got none");
  // A model-parallel run keeps each rank's checkpoints in a rank folder: look there too.
  for (const std::string& dir : {out_, checkpoint_dir()})
    if (auto existing = io::latest_checkpoint(dir))
      throw ValueError(str("[train] expected an output folder without checkpoints (or --resume to ",
                           "continue its run), got '", out_, "' holding ", *existing));
  std::optional<TokenizerRef> inherited;
  if (!o_.init_from.empty()) {
    for (const char* key : kModelKeys)
      TESSERA_CHECK(!explicit_keys.count(key), ValueError, "[train] expected no ", flag(key),
                    " with --init-from (the model file fixes the architecture), got ", flag(key));
    init_from_ = load_model(o_.init_from);
    inherited = init_from_->tokenizer;
  }
  ChosenTokenizer chosen = choose_tokenizer(o_, inherited);
  tokenizer_ = std::move(chosen.tokenizer);
  if (init_from_) {
    spec_ = init_from_->spec;
    TESSERA_CHECK(init_from_->model->vocab_size() == tokenizer_->vocab_size(), ValueError,
                  "[train] expected a tokenizer with the vocabulary of --init-from's model (",
                  init_from_->model->vocab_size(), " tokens), got ", tokenizer_->vocab_size());
  } else {
    spec_ = spec_from_options(o_, tokenizer_->vocab_size());
  }
  fs::create_directories(out_);
  // A character vocabulary lives beside the checkpoints, so the folder is self-contained.
  if (auto* chars = dynamic_cast<tokenizers::CharTokenizer*>(tokenizer_.get())) {
    if (dp_.is_root()) chars->save((fs::path(out_) / "tokenizer.chars").string());
    chosen.spec = "tokenizer.chars";
  }
  absolute_data_paths(o_);
  run_config_ = {{"arch", spec_.arch},
                 {"model", spec_.config},
                 {"tokenizer", chosen.spec},
                 {"tokenizer_data_dir", chosen.data_dir},
                 {"train", o_}};
  // The checkpoints hold the branches apart from the weights: loaders merge them by this.
  if (auto lora = lora_config(o_, spec_.arch))
    run_config_["lora"] = Json::parse(io::lora_config_json(*lora));
}

void TrainingRun::setup_training() {
  if (dp_.is_root())
    io::write_file_atomic((fs::path(out_) / "config.json").string(), run_config_.dump(2) + "\n",
                          "train");
  manual_seed(o_.seed);
  model_ = init_from_ ? init_from_->model : build_model(spec_, &default_generator(), "train");
  init_from_.reset();
  model_params_ = model_->num_parameters();
  if ((lora_ = lora_config(o_, spec_.arch))) {
    TESSERA_CHECK(!dp_.model_parallel(), ValueError,
                  "[train] expected --lora-rank without --tp or --pp (adapters of whole layers), "
                  "got --tp ",
                  dp_.tp, " --pp ", dp_.pp);
    const std::vector<std::string> layers = nn::apply_lora(*model_, *lora_, &default_generator());
    int64_t trainable = 0;
    for (const Tensor& p : model_->parameters()) trainable += p.requires_grad() ? p.numel() : 0;
    bar_->log(
        fmt("LoRA: rank %lld, alpha %g, dropout %g on %zu layers (%s); %.3fM of %.2fM "
            "parameters train",
            static_cast<long long>(lora_->r), lora_->lora_alpha, lora_->lora_dropout, layers.size(),
            str(lora_->target_modules).c_str(), static_cast<double>(trainable) / 1e6,
            static_cast<double>(model_params_) / 1e6));
  }
  const Device device = device_option(o_.device, "train");
  model_->to(device);
  model_->train();
  setup_parallel(device);
  seq_len_ = o_.seq_len > 0 ? o_.seq_len : model_->max_seq_len();
  TESSERA_CHECK(seq_len_ <= model_->max_seq_len(), ValueError,
                "[train] expected --seq-len <= ", "the model's context of ", model_->max_seq_len(),
                ", got ", seq_len_);
  if (o_.sample_tokens > 0)  // fails now rather than at the end of the run, before its save
    (void)prompt_ids(*tokenizer_, o_.sample_prompt);
  setup_data(load_corpus(o_, *tokenizer_, seq_len_));
  setup_optimizer();
  model_->set_activation_checkpointing(o_.activation_checkpointing);
  train::TrainerOptions options;
  options.grad_accum = o_.grad_accum;
  options.grad_clip = o_.grad_clip;
  options.device = device.type;
  parallel_->configure(options);
  if (o_.dtype != "float32") options.autocast_dtype = dtype_from_string(o_.dtype);
  trainer_ = std::make_unique<train::Trainer>(parallel_->trained(), parallel_->loss(), *optimizer_,
                                              scheduler_.get(), train_loader_.get(), options);
  if (resume_from_) {
    rescale_data_position(*resume_from_);
    restore(*resume_from_);
    resume_from_.reset();  // drop the mapped checkpoint files
  }
  if (dp_.is_root())
    metrics_ = std::make_unique<MetricsLog>(
        (fs::path(out_) / "metrics.jsonl").string(),
        o_.resume ? std::optional<int64_t>(trainer_->step_count()) : std::nullopt);

  title_ = str(describe(spec_, model_params_), " on ", fs::path(o_.data).filename().string());
  bar_->log("model: " + describe(spec_, model_params_) + str(", context ", model_->max_seq_len()));
  const int64_t per_step = o_.batch_size * o_.grad_accum * dp_.dp_size;
  bar_->log(
      fmt("batch %lld x %lld tokens x %lld accum x %d ranks = %lld tokens/step | AdamW lr %g -> "
          "%g, warmup %lld, weight decay %g, clip %g | %s, %d threads",
          static_cast<long long>(o_.batch_size), static_cast<long long>(seq_len_),
          static_cast<long long>(o_.grad_accum), dp_.dp_size,
          static_cast<long long>(per_step * seq_len_), o_.lr, o_.min_lr,
          static_cast<long long>(warmup_steps()), o_.weight_decay, o_.grad_clip, o_.dtype.c_str(),
          omp_get_max_threads()));
  if (dp_.model_parallel())
    bar_->log(str("model parallel: tp ", dp_.tp, o_.sp ? " (sequence parallel)" : "", ", pp ",
                  dp_.pp, dp_.pp > 1 ? str(" x ", o_.vpp, " chunks (", o_.pp_schedule, ")") : "",
                  ", dp ", dp_.dp_size, "; checkpoints per rank in ", out_, "/rank_*; ",
                  "no samples (they need the whole model)"));
  if (dp_.dp_size > 1)
    bar_->log(str("data parallel: ", dp_.dp_size, " ranks, ZeRO stage ", o_.zero_stage,
                  ", buckets of ", o_.bucket_mb, " MiB, collectives time out after ",
                  o_.dist_timeout, " s"));
}

// Training windows start at random positions (nanoGPT's get_batch), reproducibly from the seed
// and the epoch; an epoch has at least one optimizer step's worth of windows. Each data-parallel
// rank takes every dp-th batch of that order (and of validation's).
void TrainingRun::setup_data(const Corpus& corpus) {
  const int64_t per_step = o_.batch_size * o_.grad_accum * dp_.dp_size;
  data::LanguageModelOptions train_windows{
      seq_len_, data::WindowSampling::Random, o_.seed,
      std::max((corpus.train.size() - 1) / seq_len_, per_step)};
  auto train_set = std::make_shared<data::LanguageModelDataset>(corpus.train, train_windows);
  auto shard = [&](int64_t n) -> std::shared_ptr<data::Sampler> {
    if (dp_.dp_size == 1) return nullptr;
    return std::make_shared<data::BatchShardSampler>(std::make_shared<data::SequentialSampler>(n),
                                                     o_.batch_size, dp_.dp_rank, dp_.dp_size);
  };
  train_loader_ = std::make_unique<data::DataLoader>(
      train_set,
      data::DataLoaderOptions{.batch_size = o_.batch_size, .drop_last = true, .prefetch = 2},
      shard(train_set->size()));
  // Validation reads the same consecutive windows every time, so evaluations compare.
  auto val_set = std::make_shared<data::LanguageModelDataset>(
      corpus.val, data::LanguageModelOptions{seq_len_, data::WindowSampling::Sequential});
  val_loader_ = std::make_unique<data::DataLoader>(
      val_set, data::DataLoaderOptions{.batch_size = o_.batch_size, .prefetch = 0},
      val_set->size() >= o_.batch_size * dp_.dp_size ? shard(val_set->size()) : nullptr);
  TESSERA_CHECK(train_loader_->num_batches() >= o_.grad_accum, ValueError,
                "[train] expected at least ", o_.grad_accum, " training batches per rank, got ",
                train_loader_->num_batches());
}

void TrainingRun::setup_optimizer() {
  const optim::AdamOptions adam{
      .lr = o_.lr, .beta1 = 0.9, .beta2 = 0.95, .weight_decay = o_.weight_decay};
  auto make_adamw = [adam](std::vector<optim::ParamGroup> groups) {
    return std::unique_ptr<optim::Optimizer>(new optim::AdamW(std::move(groups), adam));
  };
  auto groups =
      optim::weight_decay_param_groups(parallel_->trained().parameters(), o_.weight_decay);
  if (o_.zero_stage > 0)
    optimizer_ =
        std::make_unique<dist::ZeroOptimizer>(*parallel_->ddp(), std::move(groups), make_adamw);
  else
    optimizer_ = make_adamw(std::move(groups));
  // Short trial runs would otherwise trip over the default warmup (which must end before the
  // decay does).
  const int64_t warmup = warmup_steps();
  if (warmup < o_.warmup_steps)
    bar_->log(str("note: warmup shortened to ", warmup, " steps to end before --max-steps"));
  scheduler_ =
      std::make_unique<optim::WarmupCosineLR>(*optimizer_, warmup, o_.max_steps, o_.min_lr);
}

// A checkpoint's data position counts one rank's batches of its --batch-size; resuming with
// another --dp or --batch-size than the saving run's continues at the same window of the epoch
// (batch x batch size x dp), which must fall on a batch boundary of the new layout.
void TrainingRun::rescale_data_position(io::Checkpoint& checkpoint) {
  if (resumed_dp_ == dp_.dp_size && resumed_batch_size_ == o_.batch_size) return;
  const int64_t windows = checkpoint.data.batch * resumed_batch_size_ * resumed_dp_;
  const int64_t per_batch = o_.batch_size * dp_.dp_size;  // windows one batch of every rank takes
  TESSERA_CHECK(windows % per_batch == 0, ValueError,
                "[train] expected a data position --batch-size ", o_.batch_size, " --dp ",
                dp_.dp_size, " can continue exactly, got ", windows,
                " windows of the epoch read (batch ", checkpoint.data.batch, " of a --batch-size ",
                resumed_batch_size_, " --dp ", resumed_dp_,
                " run; resume with a batch size x dp dividing it)");
  checkpoint.data.batch = windows / per_batch;
  bar_->log(str("note: continuing a --batch-size ", resumed_batch_size_, " --dp ", resumed_dp_,
                " run with --batch-size ", o_.batch_size, " --dp ", dp_.dp_size, " at window ",
                windows, " of the epoch; later epochs may end at another batch"));
}

// Restores the checkpoint, then puts back the hyperparameters the optimizer and scheduler were
// built with (the run's saved options, with those given on the command line replacing them):
// the checkpoint's copies would silently override a new --lr, --min-lr or --weight-decay.
void TrainingRun::restore(const io::Checkpoint& checkpoint) {
  const std::vector<double> base_lrs = scheduler_->base_lrs();
  std::vector<optim::Options> built;
  for (const optim::ParamGroup& g : optimizer_->param_groups()) built.push_back(g.options);
  trainer_->restore(checkpoint);
  for (size_t g = 0; g < built.size(); ++g)
    for (const auto& [key, value] : built[g])
      if (key != "lr") optimizer_->param_groups()[g].options.insert_or_assign(key, value);
  scheduler_->set_base_lrs(base_lrs);  // and the restored step's lr from them
}

std::string TrainingRun::common_checkpoint() const {
  const std::vector<int64_t> steps = io::checkpoint_steps(checkpoint_dir());
  const int64_t step = dp_.newest_common_step(steps);
  TESSERA_CHECK(step >= 0, ValueError,
                "[train] expected a checkpoint step that every rank saved in ", out_,
                "/rank_*, got none in common (this rank's folder ", checkpoint_dir(), " holds ",
                steps.size(), ")");
  if (step != steps.back()) {  // said by the rank that holds more (only rank 0 prints otherwise)
    std::fprintf(stderr,
                 "tessera: rank %d: not every rank finished saving step %lld; resuming from step "
                 "%lld, which all hold\n",
                 dp_.rank, static_cast<long long>(steps.back()), static_cast<long long>(step));
    // Else a later crash could find every rank at that step again, this rank's part stale.
    io::remove_checkpoints_after(checkpoint_dir(), step);
  }
  return *io::latest_checkpoint(checkpoint_dir());  // the agreed step's, now the newest
}

std::string TrainingRun::checkpoint_dir() const {
  if (!dp_.model_parallel()) return out_;
  return (fs::path(out_) / fmt("rank_%05d", dp_.rank)).string();
}

// Cuts this rank's part out of the whole model (its tensor-parallel slices, then its pipeline
// chunks) and wraps what it trains in DDP over the data-parallel group.
void TrainingRun::setup_parallel(const Device& device) {
  TESSERA_CHECK(o_.zero_stage == 0 || !dp_.model_parallel(), ValueError,
                "[train] expected --zero-stage 0 with --tp or --pp > 1 (ZeRO shards data-parallel "
                "replicas of the whole model), got --zero-stage ",
                o_.zero_stage);
  TESSERA_CHECK(o_.zero_stage == 0 || dp_.dp_size > 1, ValueError,
                "[train] expected --zero-stage with --dp > 1, got --zero-stage ", o_.zero_stage,
                " on one process");
  TESSERA_CHECK(o_.vpp == 1 || o_.pp > 1, ValueError,
                "[train] expected --vpp only with --pp > 1, got --vpp ", o_.vpp);
  TESSERA_CHECK(!o_.sp || o_.tp > 1, ValueError, "[train] expected --sp only with --tp > 1");
  const bool mixture_of_experts = spec_.config.value("n_experts", int64_t{0}) > 0;
  TESSERA_CHECK(!mixture_of_experts || !dp_.model_parallel(), ValueError,
                "[train] expected --n-experts without --tp or --pp (experts are not split across "
                "ranks yet; --dp works), got --tp ",
                dp_.tp, " --pp ", dp_.pp);
  parallel_ = std::make_unique<train::ModelParallel>(
      model_,
      train::ModelParallelGroups{.dp = dp_.dp_group,
                                 .tp = dp_.tp_group,
                                 .pp = dp_.pp_group,
                                 .embedding = dp_.embedding_group},
      train::ModelParallelOptions{
          .sequence_parallel = o_.sp,
          .schedule = dist::parse_pipeline_schedule(o_.pp_schedule),
          .virtual_stages = o_.vpp,
          .layer_sizes = layer_counts(o_.pp_layers),
          // An expert no token of a rank's batch chose has no gradient there: reduced as zeros.
          .ddp = {.bucket_cap_mb = o_.bucket_mb,
                  .find_unused_parameters = mixture_of_experts,
                  .reduce_scatter = o_.zero_stage == 2},
          .device = device});
}

double TrainingRun::evaluate(int64_t step) {
  const Clock::time_point start = Clock::now();
  // --eval-steps batches in all, split over the data-parallel ranks.
  const int64_t batches = (o_.eval_steps + dp_.dp_size - 1) / dp_.dp_size;
  const double loss = last_val_loss_ = trainer_->evaluate(*val_loader_, batches);
  if (!metrics_) return loss;
  metrics_->write({{"step", step}, {"val_loss", loss}});
  bar_->log(fmt("step %5lld/%lld | val loss %.4f | %.0f ms", static_cast<long long>(step),
                static_cast<long long>(o_.max_steps), loss, seconds_since(start) * 1e3));
  replot();
  return loss;
}

void TrainingRun::sample(int64_t step) {
  if (o_.sample_tokens <= 0 || !dp_.is_root() || dp_.model_parallel()) return;
  // A generator of its own, so that sampling never changes the training run's random numbers.
  Generator gen(o_.seed + static_cast<uint64_t>(step));
  std::vector<int32_t> prompt = prompt_ids(*tokenizer_, o_.sample_prompt);
  std::string text = o_.sample_prompt;
  int32_t prev = prompt.back();
  models::generate(*model_, prompt, o_.sample_tokens, {.temperature = 0.8, .top_k = 200}, &gen,
                   [&](int32_t id) {
                     if (ends_text(*tokenizer_, id)) return false;
                     text += tokenizer_->token_to_string(id, prev);
                     prev = id;
                     return true;
                   });
  bar_->log(str("---- sample at step ", step, " ----\n", text, "\n----"));
  // samples.jsonl beside metrics.jsonl, one {"step", "text"} a line, for `tessera studio`.
  if (!out_.empty()) {
    const std::string line = nlohmann::json{{"step", step}, {"text", text}}.dump(
                                 -1, ' ', false, nlohmann::json::error_handler_t::replace) +
                             "\n";
    if (std::FILE* f = std::fopen((std::filesystem::path(out_) / "samples.jsonl").c_str(), "a")) {
      std::fputs(line.c_str(), f);
      std::fclose(f);
    }
  }
}

void TrainingRun::save(int64_t step) {
  const Clock::time_point start = Clock::now();
  // Every rank takes part (ZeRO gathers its shards); rank 0 writes, or under model parallelism
  // every rank its part.
  const io::Checkpoint ckpt = trainer_->checkpoint(run_config_.dump());
  if (!dp_.is_root() && !dp_.model_parallel()) return;
  const int keep = static_cast<int>(o_.keep);
  std::string folder;
  if (dp_.model_parallel()) {
    // Older parts go only once every rank holds its new one: a crash midway through the save
    // leaves a step that all ranks can resume (common_checkpoint).
    folder = io::save_checkpoint(checkpoint_dir(), ckpt, /*keep_last=*/0);
    dp_.barrier();
    io::prune_checkpoints(checkpoint_dir(), keep, folder);
  } else {
    folder = io::save_checkpoint(checkpoint_dir(), ckpt, keep);
  }
  if (lora_) {  // the adapter of the newest step, as PEFT's save_pretrained writes it
    const std::string adapter = (fs::path(out_) / "adapter").string();
    io::save_lora_adapter(adapter, {*lora_, nn::lora_state_dict(*model_)},
                          o_.init_from.empty() ? "" : fs::absolute(o_.init_from).string());
    folder += " and " + adapter;
  }
  bar_->log(fmt("saved %s (%.0f ms)", folder.c_str(), seconds_since(start) * 1e3));
}

void TrainingRun::replot() {
  write_loss_plot((fs::path(out_) / "loss.svg").string(), loss_curves(metrics_->records()), title_);
}

void TrainingRun::write_profile(const profiler::Profile& profile) {
  if (!dp_.is_root()) return;
  const fs::path txt = fs::path(out_) / "profile.txt", trace = fs::path(out_) / "trace.json";
  const auto sort_by =
      profile.has_device_time() ? profiler::SortBy::kSelfDevice : profiler::SortBy::kSelfTime;
  io::write_file_atomic(txt.string(), profile.table(sort_by), "train");
  profile.export_chrome_trace(trace.string());
  bar_->log(str("profile of ", o_.profile, " steps: ", txt.string(), ", ", trace.string()));
}

int TrainingRun::run() {
  const int64_t first_step = trainer_->step_count();
  if (first_step >= o_.max_steps) {
    bar_->log(str("the checkpoint is at step ", first_step, " of --max-steps ", o_.max_steps,
                  ": nothing to train (raise --max-steps to continue)"));
    return 0;
  }
  const int64_t tokens_per_step = o_.batch_size * o_.grad_accum * dp_.dp_size * seq_len_;
  g_stop_requested = false;
  auto previous_handler = std::signal(SIGINT, on_interrupt);
  bar_->set_time_limit(o_.time_limit);
  const Clock::time_point start = Clock::now();
  int64_t step = first_step;
  int64_t last_eval = -1, last_sample = -1, last_save = step;
  if (step == 0) {  // the untrained loss anchors the curve (about ln(vocab))
    evaluate(0);
    last_eval = 0;
  }
  // --profile records steps after one warm-up step (when the run has room for it).
  const int64_t profile_from = first_step + (o_.max_steps - first_step > o_.profile ? 1 : 0);
  std::optional<profiler::Profiler> profiling;
  std::string stop_reason;
  double step_seconds = 0.0;  // moving average, to stop before the time limit is overrun
  while (step < o_.max_steps) {
    // Rank 0 decides, so that every rank stops after the same step.
    const bool out_of_time =
        o_.time_limit > 0 && seconds_since(start) + step_seconds > o_.time_limit;
    if (dp_.agree(g_stop_requested || out_of_time)) {
      stop_reason =
          g_stop_requested ? "interrupted" : fmt("time limit of %g s reached", o_.time_limit);
      break;
    }
    if (o_.profile > 0 && step == profile_from)  // GPU times too when training on a GPU
      profiling.emplace(profiler::ProfilerOptions{
          .device_time = device_option(o_.device, "train").type == DeviceType::CUDA});
    const Clock::time_point t0 = Clock::now();
    const train::StepResult result = trainer_->step();
    step = trainer_->step_count();
    const double dt = seconds_since(t0);
    if (profiling && step == profile_from + o_.profile) {
      write_profile(profiling->stop());
      profiling.reset();
    }
    step_seconds = step_seconds == 0.0 ? dt : 0.9 * step_seconds + 0.1 * dt;
    const double tok_s = static_cast<double>(tokens_per_step) / dt;
    if (metrics_)
      metrics_->write({{"step", step},
                       {"train_loss", result.loss},
                       {"lr", result.lr},
                       {"grad_norm", result.grad_norm},
                       {"ms", dt * 1e3},
                       {"tok_per_s", tok_s}});
    bar_->update(step, fmt("loss %.3f", result.loss));  // before the line, which redraws the bar
    bar_->log(
        fmt("step %5lld/%lld | train loss %.4f | norm %.3f | lr %.2e | %.1f ms | %.0f tok/s%s",
            static_cast<long long>(step), static_cast<long long>(o_.max_steps), result.loss,
            result.grad_norm, result.lr, dt * 1e3, tok_s,
            result.skipped ? " | skipped (inf/nan gradients)" : ""));
    if (o_.eval_every > 0 && step % o_.eval_every == 0) evaluate(last_eval = step);
    if (o_.sample_every > 0 && step % o_.sample_every == 0) sample(last_sample = step);
    if (o_.save_every > 0 && step % o_.save_every == 0) save(last_save = step);
  }
  if (profiling) write_profile(profiling->stop());  // the run stopped before the last profiled step
  std::signal(SIGINT, previous_handler);
  bar_->clear();
  if (!stop_reason.empty()) bar_->log(str("stopping at step ", step, ": ", stop_reason));
  // Whatever ended the loop, the run finishes evaluated, sampled and saved.
  if (last_eval != step) evaluate(step);
  if (last_save != step) save(step);
  if (last_sample != step) sample(step);
  bar_->log(fmt("done: step %lld, %.1f s of training, val loss %.4f; outputs in %s",
                static_cast<long long>(step), seconds_since(start), last_val_loss_, out_.c_str()));
  return 0;
}

}  // namespace

int run_training(const TrainOptions& options, const std::set<std::string>& explicit_keys) {
  DataParallel dp = start_data_parallel(options);
  if (!dp.group) {
    TrainingRun run(options, explicit_keys, dp);
    return run.run();
  }
  int rc = 0;
  try {
    TrainingRun run(options, explicit_keys, dp);
    rc = run.run();
  } catch (const std::exception& e) {
    abort_data_parallel(dp, e);  // the peers may be waiting in a collective: end them too
  }
  stop_data_parallel(dp);
  return rc;
}

}  // namespace tessera::cli
