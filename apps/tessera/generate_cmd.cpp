// `tessera generate`: samples text from a trained model, printing it as it is generated.
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include "commands.h"
#include "model_files.h"
#include "tessera/core/error.h"
#include "tessera/models/sampling.h"

namespace tessera::cli {

Command add_generate_command(CLI::App& app) {
  struct Options {
    std::string model, tokenizer, data_dir, prompt;
    int64_t max_new_tokens = 256, top_k = 0;
    double temperature = 1.0, top_p = 1.0;
    uint64_t seed = 1337;
    int threads = 0;
  };
  auto o = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("generate", "Sample text from a trained model");
  // A repeated option takes its last value, so scripts can append overrides to defaults.
  cmd->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  cmd->footer(
      "\nWithout a KV cache each new token re-runs the model over the whole context, which is "
      "fine for small models and short outputs.\nExamples:\n"
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
  cmd->add_option("--prompt", o->prompt,
                  "Text to continue (default: start from the tokenizer's BOS, or a newline)");
  cmd->add_option("--max-new-tokens", o->max_new_tokens, "Tokens to generate")
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
  return {cmd, [o]() {
            if (o->threads > 0) omp_set_num_threads(o->threads);
            LoadedModel loaded = load_model(o->model, "generate");
            std::unique_ptr<tokenizers::Tokenizer> tokenizer;
            if (!o->tokenizer.empty()) {
              tokenizer = load_tokenizer({o->tokenizer, o->data_dir, ""});
            } else {
              TESSERA_CHECK(loaded.tokenizer.has_value(), ValueError,
                            "[generate] expected --tokenizer for '", o->model,
                            "' (the file records none; llama2.c models use their tokenizer.bin)");
              TokenizerRef ref = *loaded.tokenizer;
              if (!o->data_dir.empty()) ref.data_dir = o->data_dir;
              tokenizer = load_tokenizer(ref);
            }
            TESSERA_CHECK(tokenizer->vocab_size() == loaded.model->vocab_size(), ValueError,
                          "[generate] expected a tokenizer with the model's vocabulary of ",
                          loaded.model->vocab_size(), " tokens, got ", tokenizer->vocab_size());

            const std::vector<int32_t> prompt = prompt_ids(*tokenizer, o->prompt);
            std::fwrite(o->prompt.data(), 1, o->prompt.size(), stdout);
            std::fflush(stdout);
            int32_t prev = prompt.back();
            int64_t generated = 0;
            Generator gen(o->seed);
            const auto start = std::chrono::steady_clock::now();
            models::generate(*loaded.model, prompt, o->max_new_tokens,
                             {.temperature = o->temperature, .top_k = o->top_k, .top_p = o->top_p},
                             &gen, [&](int32_t id) {
                               ++generated;
                               if (ends_text(*tokenizer, id)) return false;
                               const std::string piece = tokenizer->token_to_string(id, prev);
                               std::fwrite(piece.data(), 1, piece.size(), stdout);
                               std::fflush(stdout);
                               prev = id;
                               return true;
                             });
            std::fputc('\n', stdout);
            std::fflush(stdout);  // the text before the statistics on stderr
            const double s =
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
            std::fprintf(stderr, "generate: %lld tokens in %.2f s (%.1f tokens/s) from %s\n",
                         static_cast<long long>(generated), s, static_cast<double>(generated) / s,
                         loaded.source.c_str());
            return 0;
          }};
}

}  // namespace tessera::cli
