// Encoding throughput of a tokenizer on a text file: loads it (timed apart), then encodes the
// whole text REPS times, each on a fresh tokenizer's empty cache of pieces, and prints
// "load_ms tokens median_MB_per_s". bench/tokenizer_bench.sh runs it beside tokenizers.js.
//
//   tokenizer_bench TOKENIZER TEXT_FILE [REPS]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "tessera/tokenizers/tokenizer.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s TOKENIZER TEXT_FILE [REPS]\n", argv[0]);
    return 2;
  }
  using Clock = std::chrono::steady_clock;
  std::ifstream in(argv[2], std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const int reps = argc > 3 ? std::stoi(argv[3]) : 5;
  std::vector<double> rates;
  double load_ms = 0;
  size_t tokens = 0;
  for (int r = 0; r < reps; ++r) {
    const Clock::time_point t0 = Clock::now();
    const auto tok = tessera::tokenizers::make_tokenizer(argv[1]);
    const Clock::time_point t1 = Clock::now();
    tokens = tok->encode(text).size();
    const double s = std::chrono::duration<double>(Clock::now() - t1).count();
    load_ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
    rates.push_back(static_cast<double>(text.size()) / 1e6 / s);
  }
  std::sort(rates.begin(), rates.end());
  std::printf("%.0f %zu %.2f\n", load_ms, tokens, rates[rates.size() / 2]);
}
