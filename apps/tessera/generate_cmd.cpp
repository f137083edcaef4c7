// `tessera generate`: samples text from a trained model with the inference engine's
// single-stream path (infer::generate, static KV cache), printing it as it is generated.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>

#include "commands.h"
#include "tessera/core/error.h"
#include "tessera/infer/engine.h"
#include "tessera/infer/generate.h"
#include "tessera/io/lora_adapter.h"
#include "tessera/llm/model_files.h"

namespace tessera::cli {

using namespace llm;  // model files and their tokenizers

namespace {

struct Options {
  std::string model, tokenizer, data_dir, prompt, device = "cpu";
  std::string dtype = "auto", quantization = "none";  // the CPU runner's weights
  std::string speculative_config, lora, hf_overrides;
  int64_t max_new_tokens = 256, top_k = 0;
  double temperature = 1.0, top_p = 1.0;
  uint64_t seed = 1337;
  int threads = 0;
};

infer::GenerationParams generation_params(const Options& o, const tokenizers::Tokenizer& tokenizer,
                                          const infer::GenerationConfig& model_config) {
  infer::GenerationParams params;
  params.sampling.temperature = o.temperature;
  params.sampling.top_k = o.top_k;
  params.sampling.top_p = o.top_p;
  params.sampling.seed = o.seed;
  params.stopping.max_tokens = o.max_new_tokens;
  params.stopping.stop_token_ids = text_end_ids(tokenizer);
  for (int32_t id : model_config.eos_token_ids) params.stopping.stop_token_ids.push_back(id);
  return params;
}

// The same generation through an Engine running speculative drafts (the tokens are those
// infer::generate writes): prints each step's text; returns the result and the drafts accepted.
std::pair<infer::GenerationResult, int64_t> generate_speculatively(
    const models::CausalLM& model, const Options& o, const infer::SpeculativeConfig& speculative,
    const std::vector<int32_t>& prompt, const infer::GenerationParams& params,
    std::shared_ptr<const tokenizers::Tokenizer> tokenizer) {
  infer::EngineConfig config;
  config.max_num_seqs = 1;
  config.enable_prefix_caching = false;
  config.weight_dtype = infer::weight_dtype_from_names(o.dtype, o.quantization, "generate");
  config.speculative = speculative;
  infer::Engine engine(model, config, std::move(tokenizer));
  engine.add_request(prompt, params);
  infer::GenerationResult result;
  while (engine.has_unfinished())
    for (const infer::RequestOutput& out : engine.step()) {
      TESSERA_CHECK(out.error.empty(), RuntimeError, "[generate] ", out.error);
      result.tokens.insert(result.tokens.end(), out.new_tokens.begin(), out.new_tokens.end());
      std::fwrite(out.text.data(), 1, out.text.size(), stdout);  // stop tokens bring no text
      std::fflush(stdout);
      result.finish_reason = out.finish_reason;
    }
  return {result, engine.stats().spec_accepted_tokens};
}

int run_generate(const Options& o) {
  if (o.threads > 0) omp_set_num_threads(o.threads);
  const Device device = device_option(o.device, "generate");
  // Checked before the model loads: a typo fails at once.
  const infer::SpeculativeConfig speculative =
      infer::SpeculativeConfig::parse(o.speculative_config, "generate");
  const std::optional<nn::LoraAdapter> lora =
      o.lora.empty() ? std::nullopt : std::optional(io::load_lora_adapter(o.lora));
  infer::LoadOptions load_options;
  load_options.config_overrides = o.hf_overrides;
  LoadedModel loaded = load_model(o.model, load_options);
  if (lora) nn::merge_lora(*loaded.model, *lora);
  loaded.model->to(device);
  std::shared_ptr<tokenizers::Tokenizer> tokenizer =
      model_tokenizer(loaded, o.tokenizer, o.data_dir, "generate");
  const std::vector<int32_t> prompt = prompt_ids(*tokenizer, o.prompt);
  const int64_t context = loaded.model->max_seq_len();
  // Checked before the prompt is echoed (infer::generate would refuse it too).
  TESSERA_CHECK(static_cast<int64_t>(prompt.size()) < context, ValueError,
                "[generate] expected a prompt shorter than the model's context of ", context,
                " tokens, got ", prompt.size(), " tokens");
  std::fwrite(o.prompt.data(), 1, o.prompt.size(), stdout);
  std::fflush(stdout);

  const infer::GenerationParams params = generation_params(o, *tokenizer, loaded.generation);
  const std::vector<int32_t>& ends = params.stopping.stop_token_ids;
  infer::GenerateOptions options;
  options.tokenizer = tokenizer.get();
  options.on_token = [&](int32_t id, std::string_view text) {
    // An end-of-text token ends the output without its own text (GPT-2's "<|endoftext|>").
    if (std::find(ends.begin(), ends.end(), id) != ends.end()) return true;
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
    return true;
  };
  infer::GenerationResult result;
  int64_t accepted = -1;  // drafts accepted, with speculation
  const auto start = std::chrono::steady_clock::now();
  if (o.max_new_tokens > 0 && speculative.enabled()) {
    std::tie(result, accepted) =
        generate_speculatively(*loaded.model, o, speculative, prompt, params, tokenizer);
  } else if (o.max_new_tokens > 0) {  // the engine generates at least one token
    infer::ModelRunner runner(*loaded.model,
                              infer::weight_dtype_from_names(o.dtype, o.quantization, "generate"));
    result = infer::generate(runner, prompt, params, options);
  }
  std::fputc('\n', stdout);
  std::fflush(stdout);  // the text before the notes on stderr
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const auto generated = static_cast<long long>(result.tokens.size());
  if (result.finish_reason == infer::FinishReason::Length && generated < o.max_new_tokens)
    std::fprintf(stderr,
                 "generate: stopped after %lld tokens, the model's context of %lld is full\n",
                 generated, static_cast<long long>(context));
  std::fprintf(stderr, "generate: %lld tokens in %.2f s (%.1f tokens/s) from %s\n", generated, s,
               static_cast<double>(generated) / s, loaded.source.c_str());
  if (accepted >= 0)
    std::fprintf(stderr, "generate: %lld of them were speculative drafts accepted\n",
                 static_cast<long long>(accepted));
  return 0;
}

}  // namespace

Command add_generate_command(CLI::App& app) {
  auto o = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("generate", "Sample text from a trained model");
  // A repeated option takes its last value, so scripts can append overrides to defaults.
  cmd->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  cmd->footer(
      "\nThe prompt runs through the model once, then each new token is one step against a KV "
      "cache. Generation stops at the tokenizer's end of text, after --max-new-tokens, or when "
      "the model's context is full.\nExamples:\n"
      "  tessera generate --model out/demo --prompt 'ROMEO:' --temperature 0.8 --top-k 40\n"
      "  tessera generate --model stories260K.bin --tokenizer stories260K_idtok.bin "
      "--temperature 0");
  cmd->add_option("--model", o->model,
                  "A training run folder (its newest checkpoint), a checkpoint folder, a "
                  ".safetensors file with config.json beside it, an llm.c GPT-2 .bin or a "
                  "llama2.c model file")
      ->required();
  cmd->add_option("--tokenizer", o->tokenizer,
                  "Tokenizer (default: the one the model was trained with; gpt2 for llm.c files; "
                  "required for llama2.c files)");
  cmd->add_option("--data-dir", o->data_dir,
                  "Folder holding gpt2/encoder.json and gpt2/vocab.bpe (default: "
                  "$TESSERA_DATA_DIR)");
  add_hf_overrides_option(cmd, o->hf_overrides);
  cmd->add_option("--prompt", o->prompt,
                  "Text to continue (default: start from the tokenizer's BOS, or a newline)");
  cmd->add_option("--max-new-tokens", o->max_new_tokens, "Tokens to generate at most")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--temperature", o->temperature, "Sampling temperature (0: greedy)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--top-k", o->top_k, "Sample among the k most likely tokens (0: all)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--top-p", o->top_p, "Sample among the most likely tokens holding this mass")
      ->check(CLI::Range(1e-9, 1.0))
      ->capture_default_str();
  cmd->add_option("--seed", o->seed, "Seed of the sampler")->capture_default_str();
  cmd->add_option("--threads", o->threads, "CPU threads (0: OpenMP's default)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--device", o->device,
                  "cpu, cuda or cuda:N: where the model and its KV cache live and the forward "
                  "runs (tokens are drawn there too, except with penalties or logprobs)")
      ->capture_default_str();
  add_weight_dtype_options(cmd, o->dtype, o->quantization);
  cmd->add_option("--speculative-config", o->speculative_config,
                  "Speculative decoding as vLLM's JSON, e.g. '{\"method\": \"ngram\", "
                  "\"num_speculative_tokens\": 4}' (as tessera serve's; the text is the same, "
                  "in fewer steps when it repeats itself)");
  cmd->add_option("--lora", o->lora,
                  "A LoRA adapter folder (PEFT's adapter_config.json and "
                  "adapter_model.safetensors, e.g. a `train --lora-rank` run's adapter/) merged "
                  "into the model's weights");
  return {cmd, [o]() { return run_generate(*o); }};
}

}  // namespace tessera::cli
