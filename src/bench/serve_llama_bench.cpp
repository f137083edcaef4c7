// llama-bench's two figures on the engine in-process: ppN, the prefill of N prompt tokens in one
// forward, and tgN, N one-token decode steps from an empty cache, both in tokens/s with one
// sample per repetition (llama-bench prints their mean +- sample standard deviation).
#include <chrono>
#include <cstdio>
#include <functional>

#include "tessera/bench/serve.h"
#include "tessera/bench/stats.h"
#include "tessera/core/error.h"
#include "tessera/infer/model_runner.h"

namespace tessera::bench {

namespace {

using Clock = std::chrono::steady_clock;

// Seconds of one forward of tokens at positions start, start + 1, ... (the logits come back to
// the host, so a device forward has finished when it returns).
double timed_forward(infer::ModelRunner& runner, infer::StaticKVCache& cache,
                     infer::StepBatch& batch, const std::vector<int32_t>& tokens, int64_t start) {
  batch.clear();
  batch.add_sequence(tokens, start, cache.table(), cache.block_size(), /*want_logits=*/true);
  const Clock::time_point t0 = Clock::now();
  runner.forward(batch, cache);
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

void run_llama_bench(Result& result, const std::string& model_name, const models::CausalLM& model,
                     int64_t pp, int64_t tg, int64_t reps, const Progress& progress) {
  infer::ModelRunner runner(model);
  const int64_t ctx = runner.max_seq_len();
  TESSERA_CHECK(pp >= 1 && pp <= ctx, ValueError, "[bench.serve] expected pp in [1, ", ctx,
                "] (the model's context), got ", pp);
  TESSERA_CHECK(tg >= 1 && tg <= ctx, ValueError, "[bench.serve] expected tg in [1, ", ctx,
                "] (the model's context), got ", tg);
  TESSERA_CHECK(reps >= 1, ValueError, "[bench.serve] expected reps >= 1, got ", reps);
  infer::StaticKVCache cache(runner.kv_spec(), std::max(pp, tg), runner.device());
  infer::StepBatch batch;
  // Like llama-bench's random tokens: the speed does not depend on which ids they are.
  const int64_t vocab = runner.vocab_size();
  std::vector<int32_t> prompt(static_cast<size_t>(pp));
  for (int64_t i = 0; i < pp; ++i) prompt[i] = static_cast<int32_t>((i * 7919 + 3) % vocab);

  const int64_t total = 2 * (reps + 1);
  int64_t step = 0;
  // One figure of n tokens / seconds of run(), once to warm up and then reps times.
  const auto measure = [&](const char* name, int64_t n, const char* definition,
                           const std::function<double()>& run) {
    Figure f;
    f.name = name;
    f.unit = "tok/s";
    f.better = Better::Higher;
    f.params = {{"model", model_name}, {"tokens", n}};
    f.definition = definition;
    for (int64_t r = 0; r <= reps; ++r) {
      const double s = run();
      if (r > 0) f.samples.push_back(static_cast<double>(n) / s);
      if (progress) progress(name + std::to_string(n), ++step, total);
    }
    result.add(std::move(f));
  };
  measure("pp", pp,
          "tokens / seconds of one forward over a prompt of that many tokens from an empty cache "
          "(llama-bench's ppN)",
          [&] { return timed_forward(runner, cache, batch, prompt, 0); });
  std::vector<int32_t> token(1);
  measure("tg", tg,
          "tokens / seconds of that many one-token decode steps from an empty cache "
          "(llama-bench's tgN)",
          [&] {
            double s = 0.0;
            for (int64_t i = 0; i < tg; ++i) {
              token[0] = prompt[static_cast<size_t>(i % pp)];
              s += timed_forward(runner, cache, batch, token, i);
            }
            return s;
          });
}

std::string llama_bench_table(const Result& result) {
  std::string out = "| model | test | t/s |\n| --- | --- | ---: |\n";
  for (const Figure& f : result.figures) {
    if ((f.name != "pp" && f.name != "tg") || f.samples.empty()) continue;
    char row[256];
    std::snprintf(row, sizeof row, "| %s | %s%lld | %.2f ± %.2f |\n",
                  f.params.value("model", std::string("?")).c_str(), f.name.c_str(),
                  static_cast<long long>(f.params.value("tokens", int64_t{0})), mean(f.samples),
                  stddev(f.samples));
    out += row;
  }
  return out;
}

}  // namespace tessera::bench
