// The `tessera` command-line program: `tessera <command> --help` describes each
// command.
#include <malloc.h>

#include <cstdio>
#include <exception>
#include <vector>

#include "commands.h"
#include "tessera/core/error.h"

namespace {

// A training step frees and re-allocates the same tensors every step. By
// default glibc hands large freed blocks back to the kernel (munmap, heap
// trimming) and page-faults them in again on the next step: a third of the CPU
// time of a small model's step. Keeping up to 1 GiB of freed memory in the heap
// avoids that (until the library's allocator caches blocks itself).
void keep_freed_memory() {
#ifdef __GLIBC__
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
}

} // namespace

int main(int argc, char **argv) {
  keep_freed_memory();
  CLI::App app{
      "Tessera: train, sample from and serve transformer language models"};
  app.require_subcommand(1);
  std::vector<tessera::cli::Command> commands{
      tessera::cli::add_train_command(app),
      tessera::cli::add_generate_command(app),
      tessera::cli::add_tokenize_command(app),
      tessera::cli::add_serve_command(app)};
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
