#pragma once
// The options of `tessera train`, as one record that round-trips through JSON: a run saves them
// in config.json and in every checkpoint, and --resume starts from the saved record with only
// the options given on the command line replaced. JSON keys are the option names with '_' for
// '-' (--n-layer -> "n_layer").
#include <cstdint>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

namespace tessera::cli {

struct TrainOptions {
  // Model. Sizes of 0 mean "not given": the preset's, else the defaults in train_cmd.cpp.
  std::string model = "gpt2";  // architecture: gpt2 or llama
  std::string preset;          // a GPT2Config / LlamaConfig preset name to start from
  int64_t n_layer = 0, n_head = 0, n_kv_head = 0, n_embd = 0, seq_len = 0;
  double dropout = 0.0;
  // LLaMA as a Mixtral mixture of experts: experts per layer (0: dense, or the preset's), chosen
  // per token (0: the preset's, else 2), the load-balancing loss's weight (< 0: the preset's).
  int64_t n_experts = 0, experts_per_token = 0;
  double router_aux_loss_coef = -1;
  // LLaMA heads as Qwen3's: a head size apart from n_embd / n_head (0: that, or the preset's),
  // and RMS norms of each query and key head (or the preset's).
  int64_t head_dim = 0;
  bool qk_norm = false;
  // Data.
  std::string data, val_data, tokenizer, data_dir;
  double val_fraction = 0.1;
  // Optimisation.
  int64_t batch_size = 16, grad_accum = 1, max_steps = 1000, warmup_steps = 100;
  double lr = 1e-3, min_lr = 1e-4, weight_decay = 0.1, grad_clip = 1.0;
  double time_limit = 0;  // seconds; 0: none
  // Evaluation, sampling, checkpoints.
  int64_t eval_every = 100, eval_steps = 20;
  int64_t sample_every = 0, sample_tokens = 200;
  std::string sample_prompt;
  int64_t save_every = 0, keep = 3;
  std::string out = "out/train";
  bool resume = false;
  std::string init_from;
  uint64_t seed = 1337;
  std::string dtype = "float32";  // float32, or the autocast dtype: bfloat16, float16
  std::string device = "cpu";     // cpu, cuda or cuda:N
  bool activation_checkpointing = false;
  int threads = 0;      // 0: OpenMP's default
  int64_t profile = 0;  // training steps to profile (0: none)
  // Data parallelism: ranks (the launcher's process count), ZeRO stage, deadline of every
  // collective in seconds, DDP bucket size.
  int dp = 1;
  int zero_stage = 0;
  double dist_timeout = 600;
  double bucket_mb = 25;
  // Model parallelism: tensor-parallel ranks (with sequence parallelism), pipeline stages, model
  // chunks per stage (interleaved schedule), layers per chunk ("3,5"; empty: even) and the
  // schedule (gpipe, 1f1b, interleaved).
  int tp = 1, pp = 1, vpp = 1;
  bool sp = false;
  std::string pp_layers;
  std::string pp_schedule = "1f1b";
  // LoRA fine-tuning: rank (0: off, every weight trains), alpha (0: twice the rank), dropout on
  // the branches' input, adapted layers (comma-separated names, "all-linear"; empty: the
  // family's default).
  int64_t lora_rank = 0;
  double lora_alpha = 0, lora_dropout = 0;
  std::string lora_targets;
};

NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(
    TrainOptions, model, preset, n_layer, n_head, n_kv_head, n_embd, seq_len, dropout, n_experts,
    experts_per_token, router_aux_loss_coef, head_dim, qk_norm, data, val_data, tokenizer, data_dir,
    val_fraction, batch_size, grad_accum, max_steps, warmup_steps, lr, min_lr, weight_decay,
    grad_clip, time_limit, eval_every, eval_steps, sample_every, sample_tokens, sample_prompt,
    save_every, keep, out, resume, init_from, seed, dtype, device, activation_checkpointing,
    threads, profile, dp, zero_stage, dist_timeout, bucket_mb, tp, pp, vpp, sp, pp_layers,
    pp_schedule, lora_rank, lora_alpha, lora_dropout, lora_targets)

// Runs `tessera train`; explicit_keys names the options given on the command line (JSON keys),
// which override a resumed run's saved options. Returns the exit code.
int run_training(const TrainOptions& options, const std::set<std::string>& explicit_keys);

}  // namespace tessera::cli
