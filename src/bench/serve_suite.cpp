// run_serve_suite: the load test at each request rate (against a url, or a server started here
// on a free port from a model file) and the llama-bench table, as figures of one Result.
#include <httplib.h>

#include <cmath>
#include <filesystem>
#include <thread>

#include "tessera/bench/serve.h"
#include "tessera/core/error.h"
#include "tessera/infer/async_engine.h"
#include "tessera/llm/model_files.h"
#include "tessera/serve/server.h"

namespace tessera::bench {

ServeSuiteOptions ServeSuiteOptions::resolved() const {
  ServeSuiteOptions o = *this;
  const auto pick = [q = quick](int64_t& v, int64_t full, int64_t small) {
    if (v == 0) v = q ? small : full;
  };
  pick(o.num_prompts, 200, 8);
  pick(o.prompt_len, 256, 32);
  pick(o.output_len, 128, 16);
  pick(o.pp, 512, 64);
  pick(o.tg, 128, 16);
  pick(o.reps, 5, 2);
  if (o.rates.empty()) o.rates = {kInf};
  return o;
}

namespace {

using Json = nlohmann::json;

// A rate as a parameter: integers as integers ("rate=4" in labels), inf as "inf" (not JSON).
Json rate_param(double rate) {
  if (std::isinf(rate)) return "inf";
  if (rate == std::floor(rate) && rate < 1e15) return static_cast<int64_t>(rate);
  return rate;
}

// The rate as progress and errors print it: 4, 0.5, inf.
std::string rate_text(double rate) {
  const Json r = rate_param(rate);
  return r.is_string() ? r.get<std::string>() : r.dump();
}

// What identifies one load run's figures (--compare matches on these).
Json load_params(const ServeSuiteOptions& o, double rate) {
  Json p = {{"rate", rate_param(rate)},
            {"num_prompts", o.num_prompts},
            {"prompt_len", o.prompt_len},
            {"output_len", o.output_len}};
  if (o.range_ratio > 0.0) p["range_ratio"] = o.range_ratio;
  if (o.burstiness != 1.0) p["burstiness"] = o.burstiness;
  if (o.max_concurrency > 0) p["max_concurrency"] = o.max_concurrency;
  return p;
}

Figure figure(std::string name, std::string unit, Better better, Json params,
              std::vector<double> samples, std::string definition) {
  Figure f;
  f.name = std::move(name);
  f.unit = std::move(unit);
  f.better = better;
  f.params = std::move(params);
  f.samples = std::move(samples);
  f.definition = std::move(definition);
  return f;
}

void add_latency(Result& result, const Json& params, const char* name, const LatencyStats& s,
                 const std::string& definition) {
  if (s.values.empty()) return;  // no request had two tokens (TPOT, ITL)
  const std::pair<const char*, double> stats[] = {
      {"mean", s.mean}, {"std", s.std}, {"median", s.median}, {"p90", s.p90}, {"p99", s.p99}};
  for (const auto& [stat, value] : stats) {
    Json p = params;
    p["stat"] = stat;
    result.add(figure(name, "s", Better::Lower, p, {value},
                      definition + "; " + stat +
                          " over them (percentiles: numpy's linear interpolation; std: "
                          "population)"));
  }
  Json p = params;
  p["stat"] = "all";
  result.add(figure(name, "s", Better::Lower, p, s.values, definition + "; every value"));
}

void add_summary(Result& result, const Json& params, const ServeSummary& s, const GoodputSlo& slo,
                 const std::vector<std::string>& slo_specs) {
  result.add(figure("request_throughput", "req/s", Better::Higher, params, {s.request_throughput},
                    "completed requests / duration"));
  result.add(figure("output_throughput", "tok/s", Better::Higher, params, {s.output_throughput},
                    "output tokens of completed requests / duration"));
  result.add(figure("total_token_throughput", "tok/s", Better::Higher, params,
                    {s.total_token_throughput},
                    "prompt + output tokens of completed requests / duration"));
  if (!slo.empty()) {
    Json p = params;
    p["slo"] = slo_specs;
    result.add(figure("goodput", "req/s", Better::Higher, p, {s.goodput},
                      "completed requests meeting every SLO (ms, inclusive) / duration"));
  }
  result.add(figure("completed", "req", Better::Higher, params, {static_cast<double>(s.completed)},
                    "requests that streamed tokens"));
  result.add(figure("failed", "req", Better::Lower, params, {static_cast<double>(s.failed)},
                    "requests that got an error or no tokens"));
  result.add(figure("duration", "s", Better::Lower, params, {s.duration},
                    "first send to the last response"));
  add_latency(result, params, "ttft", s.ttft, "seconds from send to the first token (TTFT)");
  add_latency(result, params, "tpot", s.tpot,
              "(E2EL - TTFT) / (output tokens - 1) of requests with more than one (TPOT)");
  add_latency(result, params, "itl", s.itl,
              "seconds between consecutive streamed chunks carrying tokens (ITL)");
  add_latency(result, params, "e2el", s.e2el, "seconds from send to the last token (E2EL)");
}

// A serve::Server on a free loopback port, on its own thread while this lives.
struct InProcessServer {
  std::unique_ptr<serve::Server> server;
  std::thread thread;
  int port = 0;

  InProcessServer(const models::CausalLM& model, std::shared_ptr<tokenizers::Tokenizer> tokenizer,
                  const ServeSuiteOptions& o, const std::string& name) {
    infer::EngineConfig ec;
    if (o.max_batch > 0) ec.max_num_seqs = o.max_batch;
    ec.seed = o.seed;
    auto engine =
        std::make_shared<infer::AsyncEngine>(std::make_unique<infer::Engine>(model, ec, tokenizer));
    serve::ServerConfig sc;
    sc.port = 0;
    sc.model_names = {name};
    // Every planned request may be in flight at once: none may be refused with 429.
    sc.max_concurrent_requests = std::max<int64_t>(sc.max_concurrent_requests, o.num_prompts + 1);
    server = std::make_unique<serve::Server>(engine, sc);
    port = server->bind();
    thread = std::thread([this] { server->run(); });
    // Serving once /health answers: stop() before run()'s loop has started would not stop it.
    httplib::Client probe("127.0.0.1", port);
    for (int i = 0; i < 500; ++i) {
      if (auto res = probe.Get("/health"); res && res->status == 200) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  ~InProcessServer() {
    server->stop();
    thread.join();
  }
};

}  // namespace

Result& run_serve_suite(Result& result, const ServeSuiteOptions& options) {
  const ServeSuiteOptions o = options.resolved();
  TESSERA_CHECK(!o.url.empty() || !o.model.empty(), ValueError,
                "[bench.serve] expected a server url or a model file, got neither");
  TESSERA_CHECK(!(o.skip_load && o.skip_llama_bench), ValueError,
                "[bench.serve] expected the load test or the llama-bench table to run, got both "
                "skipped");
  TESSERA_CHECK(o.num_prompts >= 1, ValueError, "[bench.serve] expected num_prompts >= 1, got ",
                o.num_prompts);
  for (double rate : o.rates)
    TESSERA_CHECK(rate > 0.0, ValueError, "[bench.serve] expected rates > 0, got ", rate);
  const GoodputSlo slo = parse_goodput(o.goodput);
  const bool load = !o.skip_load;
  const bool table = !o.skip_llama_bench && !o.model.empty();

  llm::LoadedModel loaded;
  std::string name;
  if (!o.model.empty() && (table || o.url.empty())) {
    loaded = llm::load_model(o.model);
    loaded.model->to(llm::device_option(o.device, "bench serve"));
    name = std::filesystem::path(loaded.source).stem().string();
  }

  const int64_t per_table = table ? 2 * (o.reps + 1) : 0;
  const int64_t total =
      (load ? static_cast<int64_t>(o.rates.size()) * o.num_prompts : 0) + per_table;
  int64_t done = 0;
  if (load) {
    ClientOptions client{.url = o.url, .model = o.served_model_name, .api_key = o.api_key};
    // Prompt ids any served vocabulary has, unless the model (or the caller) says more.
    int64_t vocab = o.prompt_vocab > 0 ? o.prompt_vocab : 256;
    if (o.prompt_vocab == 0 && loaded.model) vocab = loaded.model->vocab_size();
    std::unique_ptr<InProcessServer> local;
    if (o.url.empty()) {
      const int64_t ctx = loaded.model->max_seq_len();
      const auto longest = [&](int64_t len) {
        return static_cast<int64_t>(std::floor(len * (1.0 + o.range_ratio)));
      };
      TESSERA_CHECK(longest(o.prompt_len) + longest(o.output_len) <= ctx, ValueError,
                    "[bench.serve] expected prompt_len + output_len within the model's context (",
                    ctx, " tokens), got up to ", longest(o.prompt_len), " + ",
                    longest(o.output_len));
      local = std::make_unique<InProcessServer>(
          *loaded.model, llm::model_tokenizer(loaded, o.tokenizer, o.data_dir, "bench serve"), o,
          name);
      client.url = "http://127.0.0.1:" + std::to_string(local->port);
      client.model = name;
    }
    for (size_t r = 0; r < o.rates.size(); ++r) {
      const double rate = o.rates[r];
      // Each rate its own prompts: the same ones again would be served from the prefix cache.
      const std::vector<PlannedRequest> plan = plan_workload({.num_prompts = o.num_prompts,
                                                              .prompt_len = o.prompt_len,
                                                              .output_len = o.output_len,
                                                              .range_ratio = o.range_ratio,
                                                              .rate = rate,
                                                              .burstiness = o.burstiness,
                                                              .seed = o.seed + r,
                                                              .vocab = vocab});
      const std::string what = "serve rate " + rate_text(rate);
      const LoadResult run =
          run_load(client, plan, o.max_concurrency, [&](const std::string&, int64_t d, int64_t) {
            if (o.progress) o.progress(what, done + d, total);
          });
      done += o.num_prompts;
      const ServeSummary s = summarize(run.records, run.duration, slo);
      if (s.completed == 0) {
        const std::string& first = run.records.front().error;
        throw RuntimeError(detail::str("[bench.serve] expected requests to complete at rate ",
                                       rate_text(rate), ", got ", s.failed,
                                       " failed; the first: ", first));
      }
      add_summary(result, load_params(o, rate), s, slo, o.goodput);
    }
  }
  if (table)
    run_llama_bench(result, name, *loaded.model, o.pp, o.tg, o.reps,
                    [&](const std::string& what, int64_t d, int64_t) {
                      if (o.progress) o.progress(what, done + d, total);
                    });
  return result;
}

}  // namespace tessera::bench
