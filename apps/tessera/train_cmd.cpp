// `tessera train`: the command-line options of a training run (the loop is in trainer.cpp).
#include <algorithm>
#include <memory>
#include <set>
#include <utility>
#include <vector>

#include "commands.h"
#include "tessera/core/error.h"
#include "train_options.h"

namespace tessera::cli {

namespace {
using tessera::detail::str;

// The options are saved as JSON (config.json, checkpoints), which holds UTF-8 text only: refuse
// other bytes now, naming the option, instead of failing at the first save.
void check_utf8_options(const TrainOptions& o) {
  const nlohmann::json options = o;
  for (const auto& [key, value] : options.items()) {
    if (!value.is_string()) continue;
    try {
      (void)value.dump();
    } catch (const nlohmann::json::type_error& e) {
      std::string flag = "--" + key;
      std::replace(flag.begin(), flag.end(), '_', '-');
      const std::string what = e.what();  // "[json.exception.type_error.316] invalid UTF-8 ..."
      throw ValueError(
          str("[train] expected UTF-8 text in ", flag, ", got ", what.substr(what.find("] ") + 2)));
    }
  }
}
}  // namespace

Command add_train_command(CLI::App& app) {
  auto o = std::make_shared<TrainOptions>();
  // Each option with its JSON key, to tell which were given (they override a resumed run's).
  auto given = std::make_shared<std::vector<std::pair<CLI::Option*, std::string>>>();
  CLI::App* cmd = app.add_subcommand(
      "train", "Train a GPT-2 or LLaMA language model on a text file or llm.c token file");
  // A repeated option takes its last value, so scripts can append overrides to defaults.
  cmd->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  cmd->footer(
      "\nExample (a character-level GPT on Tiny Shakespeare, a few minutes on a laptop CPU):\n"
      "  tessera train --data input.txt --n-layer 4 --n-head 4 --n-embd 128 --seq-len 128 \\\n"
      "      --max-steps 1200 --lr 4e-3 --min-lr 4e-4 --time-limit 240 --out out/shakespeare\n"
      "  tessera generate --model out/shakespeare --prompt 'ROMEO:'\n"
      "--resume continues the run in --out from its newest checkpoint with the options it was "
      "started with; options given again replace them (e.g. a larger --max-steps).");
  auto add = [&](const std::string& name, auto& field, const std::string& help,
                 const std::string& group) {
    CLI::Option* opt = cmd->add_option(name, field, help)->group(group);
    std::string key = name.substr(2);
    std::replace(key.begin(), key.end(), '-', '_');
    given->emplace_back(opt, key);
    return opt;
  };
  const std::string model = "Model", data = "Data", optim = "Optimization",
                    eval = "Evaluation and sampling", run = "Run";
  add("--model", o->model, "Architecture: gpt2 or llama", model)
      ->check(CLI::IsMember({"gpt2", "llama"}))
      ->capture_default_str();
  add("--preset", o->preset,
      "Start from a named configuration (gpt2: d6, d12, gpt2-medium, ...; llama: stories15M, "
      "llama-test, ...); the size options below override it",
      model);
  add("--n-layer", o->n_layer, "Transformer blocks (default 4)", model)->check(CLI::PositiveNumber);
  add("--n-head", o->n_head, "Attention heads (default 4)", model)->check(CLI::PositiveNumber);
  add("--n-kv-head", o->n_kv_head, "LLaMA key/value heads (default: --n-head; fewer: GQA)", model)
      ->check(CLI::PositiveNumber);
  add("--n-embd", o->n_embd, "Embedding width (default 128)", model)->check(CLI::PositiveNumber);
  add("--seq-len", o->seq_len, "Context length in tokens (default 128)", model)
      ->check(CLI::PositiveNumber);
  add("--n-experts", o->n_experts,
      "LLaMA as a Mixtral: SwiGLU experts per layer instead of one MLP (default 0: dense)", model)
      ->check(CLI::PositiveNumber);
  add("--experts-per-token", o->experts_per_token,
      "Experts the router picks for each token (default 2)", model)
      ->check(CLI::PositiveNumber);
  add("--router-aux-loss-coef", o->router_aux_loss_coef,
      "Weight of the experts' load-balancing loss added in training (default 0.001, as Hugging "
      "Face's Mixtral; 0: none)",
      model)
      ->check(CLI::NonNegativeNumber);
  add("--head-dim", o->head_dim,
      "LLaMA attention head size when not --n-embd / --n-head (Qwen3's 128 over widths of "
      "1024 to 5120)",
      model)
      ->check(CLI::PositiveNumber);
  given->emplace_back(
      cmd->add_flag("--qk-norm", o->qk_norm,
                    "LLaMA as Qwen3: RMS-norm each query and key head before the rotary embedding")
          ->group(model),
      "qk_norm");
  add("--dropout", o->dropout, "GPT-2 dropout probability", model)
      ->check(CLI::Range(0.0, 0.95))
      ->capture_default_str();

  add("--data", o->data, "Training data: a text file or an llm.c .bin token file (required)", data);
  add("--val-data", o->val_data, "Validation data (default: the last --val-fraction of --data)",
      data);
  add("--val-fraction", o->val_fraction, "Share of --data held out for validation", data)
      ->check(CLI::Range(0.001, 0.999))
      ->capture_default_str();
  add("--tokenizer", o->tokenizer,
      "char, gpt2, or a path (llama2.c .bin, SentencePiece .model, GPT-2 folder, Hugging Face "
      "tokenizer.json, .chars); "
      "default: char for text, gpt2 for token files",
      data);
  add("--data-dir", o->data_dir,
      "Folder holding gpt2/encoder.json and gpt2/vocab.bpe (default: $TESSERA_DATA_DIR)", data);

  add("--batch-size", o->batch_size, "Sequences per micro-batch", optim)
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  add("--grad-accum", o->grad_accum, "Micro-batches per optimizer step", optim)
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  add("--max-steps", o->max_steps, "Optimizer steps (the cosine schedule ends there)", optim)
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  add("--lr", o->lr, "Peak learning rate (AdamW, betas 0.9/0.95)", optim)
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  add("--min-lr", o->min_lr, "Learning rate at the end of the cosine decay", optim)
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  add("--warmup-steps", o->warmup_steps, "Linear warmup steps", optim)
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  add("--weight-decay", o->weight_decay, "AdamW weight decay (matrices and embeddings only)", optim)
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  add("--grad-clip", o->grad_clip, "Clip the gradient norm to this (0: no clipping)", optim)
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  add("--time-limit", o->time_limit,
      "Stop training after this many seconds (0: none), then evaluate, sample and save", optim)
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  add("--dtype", o->dtype,
      "float32, or bfloat16/float16: forward passes under autocast (matmuls in the lower "
      "precision, norms and losses in float32) with float32 master weights; float16 adds "
      "dynamic loss scaling",
      optim)
      ->check(CLI::IsMember({"float32", "bfloat16", "float16"}))
      ->capture_default_str();
  add("--device", o->device,
      "cpu, cuda or cuda:N: where the model, its batches and the "
      "optimizer live",
      optim)
      ->capture_default_str();
  CLI::Option* checkpointing =
      cmd->add_flag("--activation-checkpointing", o->activation_checkpointing,
                    "Recompute each block's activations in backward instead of keeping them "
                    "(less memory, about a third more compute)")
          ->group(optim);
  given->emplace_back(checkpointing, "activation_checkpointing");

  add("--eval-every", o->eval_every,
      "Evaluate on the validation split every N steps (0: only "
      "at the start and the end)",
      eval)
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  add("--eval-steps", o->eval_steps, "Validation batches per evaluation", eval)
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  add("--sample-every", o->sample_every,
      "Print a sample (temperature 0.8, top-k 200) every N steps (0: only at the end)", eval)
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  add("--sample-tokens", o->sample_tokens, "Tokens per sample (0: no samples)", eval)
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  add("--sample-prompt", o->sample_prompt, "Text the samples start from", eval);

  add("--out", o->out, "Output folder: checkpoints, config.json, metrics.jsonl, loss.svg", run)
      ->capture_default_str();
  add("--save-every", o->save_every, "Save a checkpoint every N steps (0: only at the end)", run)
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  add("--keep", o->keep, "Checkpoints to keep (the newest; 0: all)", run)
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  CLI::Option* resume =
      cmd->add_flag("--resume", o->resume, "Continue the run in --out from its newest checkpoint")
          ->group(run);
  given->emplace_back(resume, "resume");
  add("--init-from", o->init_from,
      "Start from a trained model: a run or checkpoint folder, .safetensors with config.json, "
      "llm.c GPT-2 .bin or llama2.c file (its architecture and tokenizer are used)",
      run);
  const std::string lora = "LoRA fine-tuning (with --init-from)";
  add("--lora-rank", o->lora_rank,
      "Train low-rank adapters of this rank on the --lora-targets layers instead of every weight "
      "(0: off); the adapter is written to --out/adapter in PEFT's format",
      lora)
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  add("--lora-alpha", o->lora_alpha,
      "LoRA scaling numerator: branches scale by alpha / rank (0: twice the rank)", lora)
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  add("--lora-dropout", o->lora_dropout, "Dropout on the LoRA branches' input", lora)
      ->check(CLI::Range(0.0, 0.99))
      ->capture_default_str();
  add("--lora-targets", o->lora_targets,
      "Layers to adapt: comma-separated names (c_attn,c_fc or q_proj,k_proj,v_proj,o_proj) or "
      "all-linear (default: c_attn for GPT-2, q_proj,v_proj for LLaMA, as PEFT)",
      lora);
  add("--seed", o->seed, "Seed of the initialization, dropout, batches and samples", run)
      ->capture_default_str();
  add("--threads", o->threads, "CPU threads (0: OpenMP's default)", run)
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  add("--profile", o->profile,
      "Profile N training steps (after one warm-up step) and write profile.txt (ops and backward "
      "nodes by self time; on a GPU with GPU times, sorted by them) and trace.json "
      "(Chrome/Perfetto trace) into --out",
      run)
      ->check(CLI::NonNegativeNumber);

  const std::string parallel = "Parallel training (launch with mpirun -np dp x tp x pp)";
  add("--dp", o->dp,
      "Data-parallel ranks: must equal the launcher's process count; each rank trains on its "
      "own micro-batches and gradients are averaged (global batch = dp x batch x accum)",
      parallel)
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  add("--zero-stage", o->zero_stage,
      "0: every rank keeps the whole AdamW state; 1: the state is sharded over the ranks; "
      "2: gradients are reduce-scattered and sharded too",
      parallel)
      ->check(CLI::IsMember({0, 1, 2}))
      ->capture_default_str();
  add("--dist-timeout", o->dist_timeout,
      "Seconds any collective may wait for the other ranks before the job stops with an error",
      parallel)
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  add("--bucket-mb", o->bucket_mb, "Gradient bucket size of the all-reduce (MiB)", parallel)
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  add("--tp", o->tp,
      "Tensor-parallel ranks: attention heads, MLP units and the vocabulary split over them "
      "(mpirun -np dp x tp x pp)",
      parallel)
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  given->emplace_back(
      cmd->add_flag("--sp", o->sp,
                    "Sequence parallelism with --tp: norms and residuals split along the "
                    "sequence too")
          ->group(parallel),
      "sp");
  add("--pp", o->pp, "Pipeline stages: the layers split into consecutive stages", parallel)
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  add("--vpp", o->vpp,
      "Model chunks per pipeline stage (interleaved 1F1B; needs --grad-accum divisible by --pp)",
      parallel)
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  add("--pp-layers", o->pp_layers,
      "Layers of each pipeline chunk, comma-separated (pp x vpp counts; default: an even split)",
      parallel);
  add("--pp-schedule", o->pp_schedule,
      "Pipeline schedule of the --grad-accum micro-batches: gpipe, 1f1b or interleaved "
      "(--vpp > 1 picks interleaved)",
      parallel)
      ->check(CLI::IsMember({"gpipe", "1f1b", "interleaved"}))
      ->capture_default_str();

  return {cmd, [o, given]() {
            std::set<std::string> keys;
            for (const auto& [opt, key] : *given)
              if (opt->count() > 0) keys.insert(key);
            check_utf8_options(*o);
            return run_training(*o, keys);
          }};
}

}  // namespace tessera::cli
