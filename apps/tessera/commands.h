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

// The --dtype option of generate and serve (vLLM's): what the CPU runner keeps the linear
// layers' weights as.
inline void add_weight_dtype_option(CLI::App* cmd, std::string& dtype) {
  cmd->add_option("--dtype", dtype,
                  "What the CPU runner keeps the linear layers' weights as: auto (float32) or "
                  "bfloat16 (rounded once; half the bytes a decode step reads, float32 "
                  "arithmetic)")
      ->check(CLI::IsMember({"auto", "float32", "bfloat16"}))
      ->capture_default_str();
}

}  // namespace tessera::cli
