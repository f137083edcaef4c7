#pragma once
// Subcommands of the `tessera` program. Each adds itself to the CLI11 app and returns its
// subcommand with the function that runs it once the command line is parsed.
#include <CLI/CLI.hpp>

#include <functional>
#include <string>

namespace tessera::cli {

struct Command {
  CLI::App* app;
  std::function<int()> run;
};

Command add_tokenize_command(CLI::App& app);
Command add_train_command(CLI::App& app);
Command add_generate_command(CLI::App& app);
Command add_serve_command(CLI::App& app);
Command add_bench_command(CLI::App& app);
Command add_studio_command(CLI::App& app);

// The --dtype and --quantization options of generate and serve (vLLM's): what the CPU runner
// keeps the linear layers' weights as (infer::weight_dtype_from_names reads them).
inline void add_weight_dtype_options(CLI::App* cmd, std::string& dtype, std::string& quantization) {
  cmd->add_option("--dtype", dtype,
                  "What the CPU runner keeps the linear layers' weights as: auto (float32) or "
                  "bfloat16 (rounded once; half the bytes a decode step reads, float32 "
                  "arithmetic)")
      ->check(CLI::IsMember({"auto", "float32", "bfloat16"}))
      ->capture_default_str();
  cmd->add_option("--quantization", quantization,
                  "none, or int8: the CPU runner's linear weights quantized per output channel "
                  "(a quarter of float32's bytes, float32 arithmetic)")
      ->check(CLI::IsMember({"none", "int8"}))
      ->capture_default_str();
}

// The --hf-overrides option of generate and serve (vLLM's): JSON merged into the model's config.
inline void add_hf_overrides_option(CLI::App* cmd, std::string& overrides) {
  cmd->add_option("--hf-overrides", overrides,
                  "A JSON object merged into the model's config.json before it is built, e.g. "
                  "'{\"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4.0, "
                  "\"original_max_position_embeddings\": 32768}}' for Qwen's long context "
                  "(nested objects merge, null removes a key)");
}

}  // namespace tessera::cli
