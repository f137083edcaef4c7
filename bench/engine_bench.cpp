// Inference engine benchmarks: single-stream decode (infer::generate, static KV cache) and
// continuous-batching throughput with 1, 4, 16 and 32 concurrent streams (64 too on a GPU;
// infer::Engine, paged KV cache), with time to first token and time between tokens, for
// llama2.c's stories260K and a GPT-2 small-sized model (124M parameters, random weights: speed
// does not depend on them). Greedy decoding without stop tokens, so every stream generates its
// full budget. Prints one markdown table row per measurement; each number is the median over
// --reps runs. --device cuda runs the models on the GPU (bench/torch_cuda_decode.py is the
// PyTorch peer, with the same prompt length and token budget).
//
//   engine_bench [--stories PATH] [--reps N] [--only stories|gpt2] [--streams N]
//                [--device cpu|cuda[:N]] [--prompt-len N] [--new-tokens N]
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "tessera/core/device.h"
#include "tessera/infer/engine.h"
#include "tessera/infer/generate.h"
#include "tessera/infer/model_loader.h"
#include "tessera/models/gpt2.h"

using namespace tessera;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

infer::GenerationParams greedy(int64_t n) {
  infer::GenerationParams p;
  p.sampling.temperature = 0.0;
  p.stopping.max_tokens = n;
  return p;
}

// A deterministic prompt of n tokens (BOS-like first token 1, then spread ids).
std::vector<int32_t> prompt_of(int64_t n, int64_t vocab, int64_t salt) {
  std::vector<int32_t> p{1};
  for (int64_t i = 1; i < n; ++i)
    p.push_back(static_cast<int32_t>(3 + (i * 97 + salt * 31) % (vocab - 3)));
  return p;
}

// Tokens per second of one stream generating n tokens after prompt (prefill included).
double single_stream(infer::ModelRunner& runner, const std::vector<int32_t>& prompt, int64_t n,
                     int reps) {
  std::vector<double> rates;
  for (int r = 0; r < reps + 1; ++r) {
    const Clock::time_point t0 = Clock::now();
    const infer::GenerationResult res = infer::generate(runner, prompt, greedy(n));
    const double s = seconds_since(t0);
    if (r > 0) rates.push_back(static_cast<double>(res.tokens.size()) / s);  // first: warm-up
  }
  return median(rates);
}

struct BatchResult {
  double tokens_per_s, ttft_ms, tbt_ms;
};

// streams requests at once through an Engine batching up to streams sequences.
BatchResult batched(const models::CausalLM& model, int streams, int64_t prompt_len, int64_t n,
                    int reps) {
  infer::EngineConfig config;
  config.max_num_seqs = streams;
  config.num_blocks = streams * ((prompt_len + n + 15) / 16 + 1);
  infer::Engine engine(model, config);
  std::vector<double> rates, ttfts, tbts;
  for (int r = 0; r < reps + 1; ++r) {
    const Clock::time_point t0 = Clock::now();
    std::vector<Clock::time_point> last(streams);
    std::vector<bool> started(streams, false);
    std::vector<double> ttft, tbt;
    int64_t total = 0;
    for (int i = 0; i < streams; ++i)
      engine.add_request(prompt_of(prompt_len, model.vocab_size(), i), greedy(n));
    while (engine.has_unfinished()) {
      for (const infer::RequestOutput& out : engine.step()) {
        const int i = static_cast<int>(out.request_id % streams);
        const Clock::time_point now = Clock::now();
        if (!started[i])
          ttft.push_back(std::chrono::duration<double, std::milli>(now - t0).count());
        else
          tbt.push_back(std::chrono::duration<double, std::milli>(now - last[i]).count());
        started[i] = true;
        last[i] = now;
        total += static_cast<int64_t>(out.new_tokens.size());
      }
    }
    if (r == 0) continue;  // warm-up
    rates.push_back(static_cast<double>(total) / seconds_since(t0));
    ttfts.push_back(median(ttft));
    tbts.push_back(median(tbt));
  }
  return {median(rates), median(ttfts), median(tbts)};
}

void run_model(const std::string& name, const models::CausalLM& model, int64_t prompt_len,
               int64_t n, int reps, int single_reps, const std::vector<int>& streams) {
  infer::ModelRunner runner(model);
  const double single =
      single_stream(runner, prompt_of(prompt_len, model.vocab_size(), 0), n, single_reps);
  std::printf("| %s | single stream (generate, static cache) | %lld | %.0f | | | |\n", name.c_str(),
              static_cast<long long>(n), single);
  std::fflush(stdout);
  for (int c : streams) {
    const BatchResult b = batched(model, c, prompt_len, n, reps);
    std::printf("| %s | %d streams (Engine, paged cache) | %lld | %.0f | %.2fx | %.2f | %.2f |\n",
                name.c_str(), c, static_cast<long long>(n), b.tokens_per_s, b.tokens_per_s / single,
                b.ttft_ms, b.tbt_ms);
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string stories = "../shared/data/stories260K.bin", only;
  int reps = 5;
  std::vector<int> streams;
  Device device = kCPU;
  int64_t gpt2_prompt = 16, gpt2_tokens = 64;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--stories"))
      stories = argv[i + 1];
    else if (!std::strcmp(argv[i], "--reps"))
      reps = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--only"))
      only = argv[i + 1];
    else if (!std::strcmp(argv[i], "--streams"))  // one batch size only (for profiling)
      streams = {std::atoi(argv[i + 1])};
    else if (!std::strcmp(argv[i], "--device"))
      device = Device(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--prompt-len"))
      gpt2_prompt = std::atoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--new-tokens"))
      gpt2_tokens = std::atoll(argv[i + 1]);
  }
  if (streams.empty())
    streams = device.is_cpu() ? std::vector<int>{1, 4, 16, 32} : std::vector<int>{1, 4, 16, 32, 64};
  std::fprintf(stderr, "device: %s\n", device.str().c_str());
  std::fprintf(stderr, "threads: %d\n", omp_get_max_threads());
  std::printf(
      "| model | mode | tokens per stream | tokens/s | vs single | TTFT ms (median) | "
      "TBT ms (median) |\n|---|---|---|---|---|---|---|\n");
  if (only.empty() || only == "stories") {
    if (std::filesystem::exists(stories)) {
      auto model = infer::load_model(stories);
      model->to(device);
      // A 200-token run takes milliseconds: many more single-stream runs for a stable median.
      run_model("stories260K", *model, /*prompt_len=*/1, /*n=*/200, reps, 8 * reps, streams);
    } else {
      std::fprintf(stderr, "skipping stories260K: %s not found (--stories PATH)\n",
                   stories.c_str());
    }
  }
  if (only.empty() || only == "gpt2") {
    Generator gen(0);
    models::GPT2 gpt2(models::GPT2Config::from_name("gpt2"), &gen);
    gpt2.eval();
    gpt2.to(device);
    const int r = std::max(1, reps / 2);
    run_model("GPT-2 124M", gpt2, gpt2_prompt, gpt2_tokens, r, r, streams);
  }
  return 0;
}
