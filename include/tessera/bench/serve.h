#pragma once
// The serve suite of `tessera bench`: load tests of an OpenAI-compatible server measured as
// vLLM's serving benchmark (benchmarks/benchmark_serving.py) measures them, and a llama-bench
// table (pp512, tg128) on the engine in-process.
//
// Load test: num_prompts requests of random token-id prompts with "ignore_eos": true, so each
// generates exactly its output length, sent to POST /v1/completions with "stream": true at
// Poisson (or gamma, burstiness != 1) arrival times, optionally at most max_concurrency at once.
// Every streamed chunk that carries tokens is timestamped, and the run is summarised as vLLM
// does: TTFT, TPOT, ITL, E2EL (mean, std, median, p90, p99), request/output/total token
// throughput and goodput under SLOs. The metrics are pure functions of the recorded timestamps
// (summarize), so they are testable on scripted streams.
//
//   bench::ServeSuiteOptions o;
//   o.model = "stories260K.bin";  o.tokenizer = "stories260K_idtok.bin";  o.rates = {4, kInf};
//   bench::Result r = bench::Result::start("serve", "tessera bench serve ...");
//   bench::run_serve_suite(r, o);  // figures "ttft" {rate: 4, stat: "p99"}, "pp" {tokens: 512}...
#include <chrono>
#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/bench/progress.h"
#include "tessera/bench/result.h"

namespace tessera::models {
class CausalLM;
}  // namespace tessera::models

namespace tessera::bench {

inline constexpr double kInf = std::numeric_limits<double>::infinity();

// ---- Workload (serve_arrivals.cpp) ----

// When each of n requests is sent, in seconds from the start: the first at 0, then gaps drawn
// from a gamma distribution of shape burstiness and scale 1 / (rate * burstiness), so the mean
// gap is 1 / rate and its coefficient of variation 1 / sqrt(burstiness) (1: Poisson, below 1:
// burstier). rate = inf: all at 0. ValueError for rate or burstiness <= 0.
std::vector<double> arrival_times(int64_t n, double rate, double burstiness, std::mt19937_64& rng);

// n lengths: len when range_ratio is 0, else uniform integers in
// [floor(len * (1 - range_ratio)), floor(len * (1 + range_ratio))] (vLLM's random dataset), at
// least 1. ValueError for len < 1 or range_ratio outside [0, 1).
std::vector<int64_t> sample_lengths(int64_t n, int64_t len, double range_ratio,
                                    std::mt19937_64& rng);

struct PlannedRequest {
  double send_at = 0.0;         // seconds after the run starts
  std::vector<int32_t> prompt;  // token ids
  int64_t output_len = 0;       // max_tokens (with ignore_eos: exactly this many)
};

struct WorkloadOptions {
  int64_t num_prompts = 0;
  int64_t prompt_len = 0;
  int64_t output_len = 0;
  double range_ratio = 0.0;
  double rate = kInf;
  double burstiness = 1.0;
  uint64_t seed = 0;
  // Prompt ids are uniform in [3, vocab): 0..2 are special in llama2.c/sentencepiece vocabularies.
  int64_t vocab = 256;
};

// The requests of a run, in send order; the same seed gives the same workload.
std::vector<PlannedRequest> plan_workload(const WorkloadOptions& options);

// ---- Request records and metrics (serve_metrics.cpp) ----

// One request as the client saw it; times in seconds on the run's clock.
struct RequestRecord {
  double send = 0.0;
  std::vector<double> token_times;  // arrival of each streamed chunk that carried tokens
  int64_t prompt_tokens = 0;        // from usage, else the prompt sent
  int64_t output_tokens = 0;        // from usage, else the tokens counted in chunks
  bool success = false;
  std::string error;  // why it failed (HTTP status and body, transport error, no tokens)

  double ttft() const;  // first token - send
  double e2el() const;  // last token - send
  // (E2EL - TTFT) / (output_tokens - 1); 0 for one output token (vLLM's convention).
  double tpot() const;
};

// Service-level objectives in seconds (vLLM's --goodput ttft:500 tpot:50 is in ms); a request is
// good when it meets every one set.
struct GoodputSlo {
  std::optional<double> ttft, tpot, e2el;
  bool empty() const { return !ttft && !tpot && !e2el; }
};
// Parses "ttft:500" "tpot:50" "e2el:2000" (milliseconds) as vLLM's --goodput does. ValueError
// "[bench.serve] expected ..." for another key, a missing or non-positive value.
GoodputSlo parse_goodput(const std::vector<std::string>& specs);

// A latency's distribution over requests (or, for ITL, over token gaps), in seconds.
struct LatencyStats {
  std::vector<double> values;
  double mean = 0.0, std = 0.0, median = 0.0, p90 = 0.0, p99 = 0.0;  // std: population (numpy)
};

struct ServeSummary {
  int64_t completed = 0, failed = 0;
  double duration = 0.0;                      // first send to last response, seconds
  int64_t total_input = 0, total_output = 0;  // tokens of completed requests
  double request_throughput = 0.0;            // completed / duration
  double output_throughput = 0.0;             // total_output / duration
  double total_token_throughput = 0.0;        // (total_input + total_output) / duration
  double goodput = 0.0;                       // requests meeting every SLO / duration
  LatencyStats ttft, tpot, itl, e2el;         // over completed requests (TPOT: > 1 token)
};

// vLLM's calculate_metrics over the records of one run lasting duration seconds.
ServeSummary summarize(const std::vector<RequestRecord>& records, double duration,
                       const GoodputSlo& slo = {});

// ---- Streaming client (serve_client.cpp) ----

// Splits a server-sent event stream into events' data as bytes arrive: chunks may end anywhere
// (mid-line, between \r and \n). Data lines of one event are joined with \n; comments and other
// fields are ignored.
class SseParser {
 public:
  // Appends the data of each event that bytes complete to events.
  void feed(std::string_view bytes, std::vector<std::string>& events);

 private:
  std::string line_;  // the incomplete last line
  std::string data_;  // data lines of the event so far
  bool has_data_ = false;
  bool after_cr_ = false;  // the last byte was \r (a following \n ends no new line)
};

// Folds one event's data, received at time t, into record: a chunk whose choices carry tokens
// (token_ids, else non-empty text as one token) adds a token time; usage sets the token counts;
// "[DONE]" and chunks without tokens only count as received. Returns false with record.error
// set for data that is not JSON or carries an error object.
bool record_event(RequestRecord& record, std::string_view data, double t);

struct ClientOptions {
  std::string url = "http://127.0.0.1:8000";  // scheme://host:port (http only)
  std::string model;                          // "model" of the requests; empty: the server's
  std::string api_key;                        // sent as a bearer token when set
  double timeout = 600.0;                     // read timeout, seconds
};

// Streams one completion of request and records it, times measured from origin.
RequestRecord send_request(const ClientOptions& client, const PlannedRequest& request,
                           std::chrono::steady_clock::time_point origin);

// ---- Load runner (serve_load.cpp) ----

struct LoadResult {
  std::vector<RequestRecord> records;  // in plan order
  double duration = 0.0;
};

// Sends each planned request at its time (later when max_concurrency > 0 requests are already in
// flight) from worker threads, and waits for them all. progress(what, done, total) after each.
LoadResult run_load(const ClientOptions& client, const std::vector<PlannedRequest>& plan,
                    int64_t max_concurrency, const Progress& progress = {});

// ---- The suite (serve_suite.cpp, serve_llama_bench.cpp) ----

// Everything `tessera bench serve` takes. Zero sizes mean the default, smaller under quick.
struct ServeSuiteOptions {
  std::string url;        // a running server; empty: start one in-process from model
  std::string model;      // model file or run folder (llm::load_model): in-process server, pp/tg
  std::string tokenizer;  // tokenizer spec; empty: the one the model records
  std::string data_dir;   // gpt2 tokenizer files
  std::string device = "cpu";     // where the model runs (llm::device_option: cpu, cuda, cuda:N)
  int64_t max_batch = 0;          // the in-process engine's max_num_seqs; 0: its default
  std::string served_model_name;  // "model" sent to url; empty: the server's default
  std::string api_key;
  std::vector<double> rates;    // requests/s, kInf allowed; empty: {kInf}
  int64_t max_concurrency = 0;  // 0: unlimited
  int64_t num_prompts = 0;      // 0: 200 (quick: 8)
  int64_t prompt_len = 0;       // 0: 256 (quick: 32)
  int64_t output_len = 0;       // 0: 128 (quick: 16)
  double range_ratio = 0.0;
  double burstiness = 1.0;
  uint64_t seed = 0;
  std::vector<std::string> goodput;  // "ttft:500" ... (ms), as vLLM's --goodput
  int64_t prompt_vocab = 0;          // prompt ids below this; 0: the model's vocab, else 256
  bool quick = false;
  bool skip_load = false;            // only the llama-bench table
  bool skip_llama_bench = false;     // only the load test
  int64_t pp = 0, tg = 0, reps = 0;  // 0: 512, 128, 5 (quick: 64, 16, 2)
  Progress progress;

  // This with every zero size replaced by its default (quick's when quick).
  ServeSuiteOptions resolved() const;
};

// Runs the suite and appends its figures to result (returned). Per rate r (params "rate": r or
// "inf", plus prompt_len, output_len, num_prompts, and max_concurrency / burstiness when set):
//   request_throughput (req/s), output_throughput and total_token_throughput (tok/s),
//   goodput (req/s, with the SLOs in params; only when goodput is given), completed and failed
//   (requests), duration (s), and ttft, tpot, itl, e2el (s) with "stat" mean / std / median /
//   p90 / p99 (one sample each) and "stat": "all" whose samples are every request's value
//   (every token gap for itl).
// With a model: pp (prefill of pp tokens) and tg (generation of tg tokens) in tok/s, params
// {"tokens": n, "model": name}, one sample per repetition (llama-bench's mean +- std).
// ValueError "[bench.serve] ..." for options that cannot run (neither url nor model, bad sizes,
// prompt + output beyond the in-process model's context); RuntimeError when no request of a rate
// completes (with the first request's error: server down, 4xx, ...).
Result& run_serve_suite(Result& result, const ServeSuiteOptions& options);

// llama-bench's pp/tg on a model in-process (ModelRunner, static cache): reps timed runs of a
// pp-token prefill (one forward) and of tg one-token decode steps, after one warm-up each.
void run_llama_bench(Result& result, const std::string& model_name, const models::CausalLM& model,
                     int64_t pp, int64_t tg, int64_t reps, const Progress& progress = {});

// The pp/tg figures of result as llama-bench prints them:
//   | model | test | t/s |  with rows  | stories260K | pp512 | 1234.56 ± 7.89 |
std::string llama_bench_table(const Result& result);

}  // namespace tessera::bench
