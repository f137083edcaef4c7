// The `tessera` command-line program: `tessera <command> --help` describes each
// command.
#include <cstdio>
#include <exception>
#include <vector>

#include "commands.h"
#include "tessera/core/error.h"


int main(int argc, char **argv) {
  CLI::App app{
      "Tessera: train, sample from and serve transformer language models"};
  app.require_subcommand(1);
  std::vector<tessera::cli::Command> commands{
      tessera::cli::add_train_command(app),
      tessera::cli::add_generate_command(app),
      tessera::cli::add_tokenize_command(app),
      tessera::cli::add_serve_command(app),
      tessera::cli::add_bench_command(app),
      tessera::cli::add_studio_command(app)};
  CLI11_PARSE(app, argc, argv);
  try {
    for (auto &c : commands)
      if (c.app->parsed())
        return c.run();
  } catch (const tessera::Error &e) {
    std::fprintf(stderr, "tessera: %s\n", e.what());
    return 1;
  } catch (const std::exception &e) {
    std::fprintf(stderr, "tessera: unexpected error: %s\n", e.what());
    return 1;
  }
  return 0;
}
