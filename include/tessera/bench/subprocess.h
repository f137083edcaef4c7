#pragma once
// Runs a peer program (PyTorch's side of a comparison, or a worker of our own) to completion and
// collects its stdout and peak resident memory, measured the same way for every program.
#include <cstdint>
#include <string>
#include <vector>

namespace tessera::bench {

struct ProcessResult {
  int exit_code = -1;         // the exit status, or 128 + signal
  std::string out;            // everything it wrote to stdout
  std::string err;            // and to stderr (kept for error messages)
  int64_t max_rss_bytes = 0;  // its peak resident set size (getrusage of the child)
};

// Runs argv[0] (searched in PATH) with argv and extra environment entries "KEY=VALUE" added to
// this process's. RuntimeError when it cannot be started.
ProcessResult run_process(const std::vector<std::string>& argv,
                          const std::vector<std::string>& extra_env = {});
// True when `python` can import torch (checked once per interpreter path).
bool python_has_torch(const std::string& python);

}  // namespace tessera::bench
