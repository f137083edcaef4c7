#pragma once
// Subcommands of the `tessera` program. Each adds itself to the CLI11 app and returns its
// subcommand with the function that runs it once the command line is parsed.
#include <CLI/CLI.hpp>

#include <functional>

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

}  // namespace tessera::cli
