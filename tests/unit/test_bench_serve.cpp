// The serve suite of `tessera bench`: percentiles as numpy computes them, the arrival generator's
// statistics (Poisson, gamma burstiness), vLLM's TTFT/TPOT/ITL/E2EL/goodput on a scripted
// stream with known timestamps, the SSE parser on chunks split anywhere, and one quick run of
// the whole suite against an in-process server on stories260K.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <thread>

#include "tessera/bench/serve.h"
#include "tessera/bench/stats.h"
#include "tessera/core/error.h"
#include "tessera/infer/model_loader.h"
#include "tessera/serve/server.h"
#include "tessera/tokenizers/llama2c_tokenizer.h"
#include "testing/shared_data.h"

namespace tessera::bench {
namespace {

// Expected values from numpy: np.percentile(d, p), np.std(d).
TEST(BenchServe, PercentilesMatchNumpy) {
  const std::vector<double> d = {3.1, 0.2, 7.5, 1.0, 4.4, 9.9, 2.5, 6.0, 5.5, 8.25, 0.75};
  EXPECT_DOUBLE_EQ(percentile(d, 50), 4.4);
  EXPECT_DOUBLE_EQ(percentile(d, 90), 8.25);
  EXPECT_NEAR(percentile(d, 99), 9.735000000000001, 1e-12);
  EXPECT_NEAR(percentile(d, 12.5), 0.8125, 1e-12);
  // summarize's std is numpy's (population), over TTFTs here.
  std::vector<RequestRecord> records;
  for (double v : d)
    records.push_back({.send = 0.0, .token_times = {v}, .output_tokens = 1, .success = true});
  const ServeSummary s = summarize(records, 1.0);
  EXPECT_NEAR(s.ttft.std, 3.107621928354023, 1e-12);
  EXPECT_NEAR(s.ttft.mean, 4.463636363636364, 1e-12);
  EXPECT_NEAR(s.ttft.p99, 9.735000000000001, 1e-12);
}

struct GapStats {
  double mean, cv;
};

GapStats gap_stats(double rate, double burstiness) {
  std::mt19937_64 rng(7);
  const std::vector<double> t = arrival_times(20001, rate, burstiness, rng);
  std::vector<double> gaps;
  for (size_t i = 1; i < t.size(); ++i) gaps.push_back(t[i] - t[i - 1]);
  const double m = mean(gaps);
  return {m, stddev(gaps) / m};
}

TEST(BenchServe, PoissonArrivalsHaveMeanGapOneOverRateAndUnitCv) {
  const GapStats g = gap_stats(4.0, 1.0);
  EXPECT_NEAR(g.mean, 0.25, 0.25 * 0.03);
  EXPECT_NEAR(g.cv, 1.0, 0.05);
}

TEST(BenchServe, GammaBurstinessSetsCvToOneOverSqrtB) {
  for (double b : {0.25, 4.0}) {
    const GapStats g = gap_stats(10.0, b);
    EXPECT_NEAR(g.mean, 0.1, 0.1 * 0.05) << "burstiness " << b;
    EXPECT_NEAR(g.cv, 1.0 / std::sqrt(b), 0.08 / std::sqrt(b)) << "burstiness " << b;
  }
}

TEST(BenchServe, InfiniteRateSendsEverythingAtOnceAndSeedsRepeat) {
  std::mt19937_64 rng(1);
  for (double t : arrival_times(50, kInf, 1.0, rng)) EXPECT_EQ(t, 0.0);
  const WorkloadOptions o{.num_prompts = 20,
                          .prompt_len = 10,
                          .output_len = 8,
                          .range_ratio = 0.5,
                          .rate = 3.0,
                          .seed = 11,
                          .vocab = 100};
  const std::vector<PlannedRequest> a = plan_workload(o), b = plan_workload(o);
  ASSERT_EQ(a.size(), 20u);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].prompt, b[i].prompt);
    EXPECT_EQ(a[i].send_at, b[i].send_at);
    EXPECT_GE(a[i].prompt.size(), 5u);
    EXPECT_LE(a[i].prompt.size(), 15u);
    for (int32_t id : a[i].prompt) EXPECT_TRUE(id >= 3 && id < 100);
  }
  EXPECT_THROW(arrival_times(3, 0.0, 1.0, rng), ValueError);
  EXPECT_THROW(arrival_times(3, 1.0, 0.0, rng), ValueError);
}

TEST(BenchServe, UniformLengthsCoverTheRangeInclusive) {
  std::mt19937_64 rng(3);
  const std::vector<int64_t> l = sample_lengths(4000, 10, 0.5, rng);
  EXPECT_EQ(*std::min_element(l.begin(), l.end()), 5);
  EXPECT_EQ(*std::max_element(l.begin(), l.end()), 15);
  for (int64_t v : sample_lengths(10, 7, 0.0, rng)) EXPECT_EQ(v, 7);
  EXPECT_THROW(sample_lengths(1, 10, 1.0, rng), ValueError);
}

// A scripted stream: events (data, arrival time) folded as the client folds them.
RequestRecord scripted(double send, int64_t prompt,
                       const std::vector<std::pair<std::string, double>>& events) {
  RequestRecord r;
  r.send = send;
  r.prompt_tokens = prompt;
  for (const auto& [data, t] : events) EXPECT_TRUE(record_event(r, data, t)) << data;
  r.success = true;
  return r;
}

std::string chunk(const std::string& choice) {
  return R"({"object":"text_completion","choices":[)" + choice + "]}";
}

TEST(BenchServe, VllmMetricsFromAScriptedStream) {
  std::vector<RequestRecord> records;
  // A: 4 tokens in 3 chunks, usage last. TTFT 0.5, E2EL 1.0, TPOT 0.5 / 3, ITL 0.2 and 0.3.
  records.push_back(
      scripted(1.0, 99,
               {{chunk(R"({"index":0,"text":"a","token_ids":[5]})"), 1.5},
                {chunk(R"({"index":0,"text":"bc","token_ids":[6,7]})"), 1.7},
                {chunk(R"({"index":0,"text":"d","token_ids":[8],"finish_reason":"length"})"), 2.0},
                {R"({"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":4}})", 2.0},
                {"[DONE]", 2.0}}));
  // B: a server without token_ids or usage: each chunk with text is one token.
  records.push_back(scripted(2.0, 5,
                             {{chunk(R"({"index":0,"text":"x"})"), 2.1},
                              {chunk(R"({"index":0,"text":""})"), 2.15},
                              {chunk(R"({"index":0,"text":"y"})"), 2.2}}));
  // D: one token (no TPOT, no ITL).
  records.push_back(scripted(0.0, 3, {{chunk(R"({"index":0,"text":"z","token_ids":[9]})"), 0.3}}));
  RequestRecord failed;
  failed.error = "HTTP 429";
  records.push_back(failed);

  EXPECT_EQ(records[0].output_tokens, 4);
  EXPECT_EQ(records[0].prompt_tokens, 10);
  EXPECT_EQ(records[1].output_tokens, 2);
  EXPECT_NEAR(records[0].tpot(), 0.5 / 3, 1e-12);

  const ServeSummary s = summarize(records, 4.0, parse_goodput({"ttft:400", "tpot:150"}));
  EXPECT_EQ(s.completed, 3);
  EXPECT_EQ(s.failed, 1);
  EXPECT_EQ(s.total_input, 18);
  EXPECT_EQ(s.total_output, 7);
  EXPECT_DOUBLE_EQ(s.request_throughput, 0.75);
  EXPECT_DOUBLE_EQ(s.output_throughput, 7.0 / 4);
  EXPECT_DOUBLE_EQ(s.total_token_throughput, 25.0 / 4);
  ASSERT_EQ(s.ttft.values.size(), 3u);
  EXPECT_NEAR(s.ttft.mean, 0.3, 1e-12);
  EXPECT_NEAR(s.ttft.median, 0.3, 1e-12);
  ASSERT_EQ(s.tpot.values.size(), 2u);  // D has one token
  EXPECT_NEAR(s.tpot.values[0], 0.5 / 3, 1e-12);
  EXPECT_NEAR(s.tpot.values[1], 0.1, 1e-12);
  ASSERT_EQ(s.itl.values.size(), 3u);
  EXPECT_NEAR(s.itl.values[0], 0.2, 1e-12);
  EXPECT_NEAR(s.itl.values[1], 0.3, 1e-12);
  EXPECT_NEAR(s.itl.values[2], 0.1, 1e-12);
  ASSERT_EQ(s.e2el.values.size(), 3u);
  EXPECT_NEAR(s.e2el.p90, 0.86, 1e-9);  // np.percentile([1.0, 0.2, 0.3], 90)
  // B (TTFT 0.1, TPOT 0.1) and D (TTFT 0.3, TPOT 0 by convention) meet both; A's TTFT does not.
  EXPECT_DOUBLE_EQ(s.goodput, 2.0 / 4);
  // SLOs are inclusive: A's TTFT of exactly 0.5 s meets ttft:500.
  EXPECT_DOUBLE_EQ(summarize(records, 4.0, parse_goodput({"ttft:500", "e2el:1000"})).goodput,
                   3.0 / 4);
  EXPECT_DOUBLE_EQ(s.goodput, 0.5);
}

TEST(BenchServe, GoodputSpecsAndBadEventsAreTypedErrors) {
  const GoodputSlo slo = parse_goodput({"e2el:2500"});
  EXPECT_FALSE(slo.ttft.has_value());
  EXPECT_DOUBLE_EQ(*slo.e2el, 2.5);
  EXPECT_THROW(parse_goodput({"latency:5"}), ValueError);
  EXPECT_THROW(parse_goodput({"ttft"}), ValueError);
  EXPECT_THROW(parse_goodput({"ttft:-1"}), ValueError);
  EXPECT_THROW(parse_goodput({"ttft:5ms"}), ValueError);
  RequestRecord r;
  EXPECT_FALSE(record_event(r, "{not json", 0.0));
  EXPECT_FALSE(r.error.empty());
  RequestRecord e;
  EXPECT_FALSE(record_event(e, R"({"error":{"message":"boom"}})", 0.0));
  EXPECT_NE(e.error.find("boom"), std::string::npos);
}

TEST(BenchServe, SseParserHandlesChunksSplitAnywhere) {
  const std::vector<std::string> want = {R"({"a":1})", "line1\nline2", "[DONE]"};
  for (const std::string eol : {"\n", "\r\n", "\r"}) {
    const std::string stream = ": keep-alive" + eol + eol + "data: {\"a\":1}" + eol + eol +
                               "event: x" + eol + "data: line1" + eol + "data:line2" + eol + eol +
                               "data: [DONE]" + eol + eol;
    for (size_t cut = 0; cut <= stream.size(); ++cut) {
      SseParser p;
      std::vector<std::string> got;
      p.feed(std::string_view(stream).substr(0, cut), got);
      p.feed(std::string_view(stream).substr(cut), got);
      EXPECT_EQ(got, want) << "cut at " << cut;
    }
    SseParser p;  // one byte at a time
    std::vector<std::string> got;
    for (char c : stream) p.feed(std::string_view(&c, 1), got);
    EXPECT_EQ(got, want);
  }
}

TEST(BenchServe, UnreachableServerIsAFailedRecord) {
  const PlannedRequest req{.send_at = 0.0, .prompt = {3, 4}, .output_len = 2};
  const RequestRecord r =
      send_request({.url = "http://127.0.0.1:1"}, req, std::chrono::steady_clock::now());
  EXPECT_FALSE(r.success);
  EXPECT_FALSE(r.error.empty());
}

// A server on a free port with stories260K, running on its own thread while this lives.
struct StoriesServer {
  std::unique_ptr<serve::Server> server;
  std::thread thread;
  std::string url;

  StoriesServer(const std::string& model, const std::string& tokenizer) {
    static const std::shared_ptr<models::CausalLM> m = infer::load_model(model);
    auto engine = std::make_shared<infer::AsyncEngine>(std::make_unique<infer::Engine>(
        *m, infer::EngineConfig{}, std::make_shared<tokenizers::Llama2cTokenizer>(tokenizer)));
    server = std::make_unique<serve::Server>(engine, serve::ServerConfig{.port = 0});
    url = "http://127.0.0.1:" + std::to_string(server->bind());
    thread = std::thread([this] { server->run(); });
  }
  ~StoriesServer() {
    server->stop();
    thread.join();
  }
};

TEST(BenchServe, ConcurrencyCapHoldsAgainstAUrl) {
  TESSERA_SHARED_DATA_OR_SKIP(model, "stories260K.bin");
  TESSERA_SHARED_DATA_OR_SKIP(tokenizer, "stories260K_idtok.bin");
  StoriesServer ss(model, tokenizer);
  const std::vector<PlannedRequest> plan = plan_workload({.num_prompts = 12,
                                                          .prompt_len = 20,
                                                          .output_len = 12,
                                                          .range_ratio = 0.5,
                                                          .rate = kInf,
                                                          .seed = 5,
                                                          .vocab = 512});
  const LoadResult run = run_load({.url = ss.url}, plan, /*max_concurrency=*/2);
  ASSERT_EQ(run.records.size(), plan.size());
  for (size_t i = 0; i < plan.size(); ++i) {
    const RequestRecord& r = run.records[i];
    ASSERT_TRUE(r.success) << r.error;
    EXPECT_EQ(r.output_tokens, plan[i].output_len);
    EXPECT_EQ(r.prompt_tokens, static_cast<int64_t>(plan[i].prompt.size()));
    // No more than two requests in flight at any request's send.
    int in_flight = 0;
    for (const RequestRecord& o : run.records)
      in_flight += !o.token_times.empty() && o.send <= r.send && r.send < o.token_times.back();
    EXPECT_LE(in_flight, 2) << "request " << i;
  }
  // The whole suite on the url (load test only), bursty arrivals.
  ServeSuiteOptions o;
  o.url = ss.url;
  o.quick = true;
  o.rates = {100.0};
  o.burstiness = 0.5;
  o.max_concurrency = 3;
  o.prompt_vocab = 512;
  Result result;
  run_serve_suite(result, o);
  const nlohmann::json params = {{"rate", 100}, {"burstiness", 0.5}, {"max_concurrency", 3}};
  const Figure* completed = result.find("completed", params);
  ASSERT_NE(completed, nullptr);
  EXPECT_EQ(completed->samples.at(0), o.resolved().num_prompts);
  EXPECT_EQ(result.find("pp"), nullptr);  // no model: no llama-bench table
}

TEST(BenchServe, NoServerIsAnErrorNamingTheCause) {
  ServeSuiteOptions o;
  o.url = "http://127.0.0.1:1";
  o.quick = true;
  Result result;
  try {
    run_serve_suite(result, o);
    FAIL() << "expected a RuntimeError";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("[bench.serve] expected requests to complete"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(run_serve_suite(result, ServeSuiteOptions{}), ValueError);  // no url, no model
}

TEST(BenchServe, QuickSuiteAgainstAnInProcessServer) {
  TESSERA_SHARED_DATA_OR_SKIP(model, "stories260K.bin");
  TESSERA_SHARED_DATA_OR_SKIP(tokenizer, "stories260K_idtok.bin");
  ServeSuiteOptions o;
  o.model = model;
  o.tokenizer = tokenizer;
  o.quick = true;
  o.rates = {50.0, kInf};
  o.goodput = {"ttft:60000"};
  int64_t last_done = 0, last_total = 0;
  o.progress = [&](const std::string&, int64_t done, int64_t total) {
    EXPECT_GE(done, last_done);
    last_done = done;
    last_total = total;
  };
  Result result;
  result.suite = "serve";
  run_serve_suite(result, o);
  const ServeSuiteOptions q = o.resolved();
  EXPECT_EQ(last_done, last_total);
  EXPECT_EQ(last_total, 2 * q.num_prompts + 2 * (q.reps + 1));

  for (const nlohmann::json rate : {nlohmann::json(50), nlohmann::json("inf")}) {
    const Figure* completed = result.find("completed", {{"rate", rate}});
    ASSERT_NE(completed, nullptr) << rate;
    EXPECT_EQ(completed->samples.at(0), q.num_prompts);
    EXPECT_EQ(result.find("failed", {{"rate", rate}})->samples.at(0), 0.0);
    const Figure* ttft = result.find("ttft", {{"rate", rate}, {"stat", "all"}});
    ASSERT_NE(ttft, nullptr);
    EXPECT_EQ(ttft->samples.size(), static_cast<size_t>(q.num_prompts));
    ASSERT_NE(result.find("ttft", {{"rate", rate}, {"stat", "p99"}}), nullptr);
    ASSERT_NE(result.find("itl", {{"rate", rate}, {"stat", "median"}}), nullptr);
    EXPECT_NE(result.find("goodput", {{"rate", rate}}), nullptr);
    // Requests went out at their arrival times: the run lasts at least until the last one.
    const std::vector<PlannedRequest> plan = plan_workload({.num_prompts = q.num_prompts,
                                                            .prompt_len = q.prompt_len,
                                                            .output_len = q.output_len,
                                                            .rate = rate == "inf" ? kInf : 50.0,
                                                            .seed = q.seed});
    EXPECT_GE(result.find("duration", {{"rate", rate}})->samples.at(0), plan.back().send_at);
    // ignore_eos: every request generated exactly output_len tokens.
    const double out = result.find("output_throughput", {{"rate", rate}})->samples.at(0);
    const double req = result.find("request_throughput", {{"rate", rate}})->samples.at(0);
    EXPECT_NEAR(out / req, static_cast<double>(q.output_len), 1e-9);
  }
  for (const char* name : {"pp", "tg"}) {
    const Figure* f = result.find(name);
    ASSERT_NE(f, nullptr) << name;
    EXPECT_EQ(f->samples.size(), static_cast<size_t>(q.reps));
  }
  const std::string table = llama_bench_table(result);
  EXPECT_NE(table.find("| stories260K | pp64 | "), std::string::npos) << table;
  EXPECT_NE(table.find("| stories260K | tg16 | "), std::string::npos) << table;

  for (const Figure& f : result.figures) {
    ASSERT_FALSE(f.samples.empty()) << f.label();
    for (double v : f.samples) {
      EXPECT_TRUE(std::isfinite(v)) << f.label();
      // Events read in one receive share a timestamp: an ITL gap can be 0.
      const std::string stat = f.params.value("stat", "");
      if (f.name == "failed" || stat == "std" || (f.name == "itl" && stat == "all"))
        EXPECT_GE(v, 0.0) << f.label();
      else
        EXPECT_GT(v, 0.0) << f.label();
    }
  }
  // The figures survive the result format (rates as "inf" strings, not JSON's missing inf).
  const Result back = Result::from_json(result.to_json());

  EXPECT_EQ(back.figures.size(), result.figures.size());
}

}  // namespace
}  // namespace tessera::bench
