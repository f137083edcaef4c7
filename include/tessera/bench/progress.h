#pragma once
// How a suite reports progress on long runs: the CLI draws it as a progress bar, tests ignore it.
#include <cstdint>
#include <functional>
#include <string>

namespace tessera::bench {

// what: the measurement under way ("stream triad 256 MiB"); done of total steps of the suite.
using Progress = std::function<void(const std::string& what, int64_t done, int64_t total)>;

}  // namespace tessera::bench
