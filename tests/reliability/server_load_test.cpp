// The server under load and faults (#19), in process on loopback with stories260K: 64 client
// threads stream completions at once while some hang up mid-stream, some read slowly through a
// tiny receive buffer and some send malformed JSON, oversized bodies and invalid UTF-8. The
// server must keep answering /health throughout, every request that completes must equal the
// output it gets alone, and afterwards the KV blocks and the allocator's live bytes must be
// back at their idle level. Prints the figures docs/reliability.md quotes.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <unistd.h>
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <random>

#include "tessera/core/allocator.h"
#include "testing/server_harness.h"

namespace tessera {
namespace {

using Json = nlohmann::json;
using testing::StreamOptions;
using testing::StreamResult;
using testing::TestServer;
using Clock = std::chrono::steady_clock;

constexpr int kClients = 64;
// Requests per client: fewer under the sanitizers, which run the model ~20x slower.
#ifdef NDEBUG
constexpr int kRequestsPerClient = 16;
constexpr int kRssSlackMiB = 256;
#else
constexpr int kRequestsPerClient = 2;
constexpr int kRssSlackMiB = 1024;
#endif
constexpr int kTemplates = 12;
constexpr size_t kMaxBody = 16 * 1024;

// Request template t: a text or token-id prompt and a length; seeded when sampled.
Json request(int t, bool sampled, bool stream) {
  Json body = {{"max_tokens", 24 + 9 * t}, {"stream", stream}};
  if (t % 3 == 0)
    body["prompt"] = std::string("Once upon a time, a little ").substr(0, 5 + 2 * t);
  else if (t % 3 == 1)
    body["prompt"] = "Lily saw a bird \xc3\xa9\xe2\x9c\x93";  // valid UTF-8 beyond ASCII
  else
    body["prompt"] = std::vector<int>{1, 3 + t, 40 + 7 * t, 200 + t};
  if (sampled) {
    body["temperature"] = 0.8;
    body["seed"] = 100 + t;
  } else {
    body["temperature"] = 0;
  }
  return body;
}

// A body the server must refuse, with the status it must answer.
std::pair<std::string, int> bad_body(int kind) {
  switch (kind % 5) {
    case 0:
      return {R"({"prompt": "Once", "max_tokens": 5,)", 400};  // malformed JSON
    case 1:
      return {"{\"prompt\": \"Once \xff\xfe upon\"}", 400};  // invalid UTF-8 in a string
    case 2:
      return {R"({"prompt": "\ud800 lone surrogate"})", 400};
    case 3:
      return {"\xc3\x28\x80{}", 400};  // not even JSON, and not UTF-8
    default:
      return {"{\"prompt\": \"" + std::string(kMaxBody, 'a') + "\"}", 413};
  }
}

// Sends raw bytes on a fresh connection and hangs up without reading the answer: a request
// cut off mid-body, or a whole one abandoned before its first token.
bool send_and_hang_up(int port, const std::string& bytes) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bool ok =
      ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size());
  ::close(fd);
  return ok;
}

std::string http_post(const std::string& body, size_t content_length) {
  return "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
         "Content-Length: " +
         std::to_string(content_length) + "\r\n\r\n" + body;
}

int64_t rss_bytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * sysconf(_SC_PAGESIZE);
}

// Waits (bounded) until the engine has nothing queued or running.
infer::EngineStats wait_idle(const TestServer& ts) {
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  infer::EngineStats s = ts.engine->stats();
  while ((s.num_running > 0 || s.num_waiting > 0 || ts.server->in_flight() > 0) &&
         Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    s = ts.engine->stats();
  }
  return s;
}

struct Tally {
  std::mutex mutex;
  std::map<std::string, int> counts;
  std::vector<std::string> failures;
  void add(const std::string& what) {
    std::lock_guard<std::mutex> lock(mutex);
    ++counts[what];
  }
  void fail(const std::string& what) {
    std::lock_guard<std::mutex> lock(mutex);
    failures.push_back(what);
  }
};

TEST(ServerLoad, SixtyFourStreamsWithDisconnectsSlowReadersAndBadBodies) {
  STORIES_OR_SKIP(s);
  infer::EngineConfig ec;
  ec.max_num_seqs = 32;  // half the streams wait for a slot at times
  ec.num_blocks = 48;    // 768 positions for up to 32 sequences of up to ~150: preemptions
  serve::ServerConfig sc;
  sc.max_body_bytes = kMaxBody;
  // Above the 64 clients: a finished stream's slot is released just after its client has seen
  // [DONE], so its next request may briefly overlap it.
  sc.max_concurrent_requests = 2 * kClients;
  TestServer ts(*s->model, s->tokenizer, ec, sc);

  // The single-request outputs, one request at a time (this also warms the server up).
  std::vector<StreamResult> alone[2];
  for (int sampled = 0; sampled < 2; ++sampled)
    for (int t = 0; t < kTemplates; ++t) {
      StreamResult r = testing::stream_completion(ts.port, request(t, sampled, true));
      ASSERT_TRUE(r.error.empty() && r.done && r.status == 200) << r.error;
      ASSERT_FALSE(r.tokens.empty());
      alone[sampled].push_back(std::move(r));
    }
  const infer::EngineStats idle = wait_idle(ts);
  ASSERT_EQ(idle.blocks_used, 0);
  const int64_t live_before = cpu_allocator()->stats().live_bytes;
  const int64_t rss_before = rss_bytes();

  // /health and /metrics answer throughout.
  std::atomic<bool> loading{true};
  std::atomic<int> health_ok{0}, health_failed{0};
  std::thread monitor([&] {
    while (loading) {
      auto c = ts.client();
      auto h = c.Get("/health");
      auto m = c.Get("/metrics");
      (h && h->status == 200 && m && m->status == 200 ? health_ok : health_failed)++;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });

  Tally tally;
  std::atomic<int> streaming{0}, peak_streaming{0};
  const Clock::time_point start = Clock::now();
  std::vector<std::thread> clients;
  for (int client = 0; client < kClients; ++client)
    clients.emplace_back([&, client] {
      std::mt19937 rng(1000 + client);  // seeded: a failure names its client and request
      for (int k = 0; k < kRequestsPerClient; ++k) {
        const std::string who =
            "client " + std::to_string(client) + " request " + std::to_string(k);
        const int t = static_cast<int>(rng() % kTemplates);
        const bool sampled = rng() % 2 == 1;
        const int kind = static_cast<int>(rng() % 11);
        if (kind == 10) {  // hangs up mid-body, or right after a whole request
          const std::string body = request(t, sampled, rng() % 2 == 1).dump();
          const bool cut = rng() % 2 == 0;
          if (!send_and_hang_up(ts.port,
                                cut ? http_post(body.substr(0, body.size() / 2), body.size())
                                    : http_post(body, body.size())))
            tally.fail(who + ": could not send");
          tally.add(cut ? "hung up mid-body" : "hung up before the answer");
          continue;
        }
        if (kind == 9) {  // a bad body
          auto [body, status] = bad_body(static_cast<int>(rng()));
          auto res = ts.client().Post("/v1/completions", body, "application/json");
          if (!res) {
            tally.fail(who + ": no answer to a bad body");
            continue;
          }
          const Json j = Json::parse(res->body, nullptr, false);
          if (res->status != status || !j.is_object() || !j.contains("error"))
            tally.fail(who + ": bad body got " + std::to_string(res->status) + " " + res->body);
          tally.add("bad body " + std::to_string(status));
          continue;
        }
        if (kind == 8) {  // not streamed
          auto res = ts.client().Post("/v1/completions", request(t, sampled, false).dump(),
                                      "application/json");
          const Json j = res ? Json::parse(res->body, nullptr, false) : Json();
          if (!res || res->status != 200 || !j.contains("choices"))
            tally.fail(who + ": plain request failed");
          else if (j["choices"][0]["token_ids"].get<std::vector<int32_t>>() !=
                   alone[sampled][t].tokens)
            tally.fail(who + ": plain request differs from its single-request output");
          tally.add("plain completed");
          continue;
        }
        StreamOptions opt;
        std::string what = "stream completed";
        if (kind < 2) {  // hangs up after a few events
          opt.hang_up_after = 1 + static_cast<int>(rng() % 8);
          what = "stream disconnected";
        } else if (kind == 2) {  // reads slowly through a small buffer
          opt.slow_rcvbuf = 1024;
          opt.slow_pause = std::chrono::milliseconds(2 + rng() % 6);
          what = "slow reader completed";
        }
        const int now = ++streaming;
        for (int p = peak_streaming; now > p && !peak_streaming.compare_exchange_weak(p, now);) {
        }
        const StreamResult r = testing::stream_completion(ts.port, request(t, sampled, true), opt);
        --streaming;
        tally.add(what);
        if (!r.error.empty()) {
          tally.fail(who + ": " + r.error);
        } else if (opt.hang_up_after > 0) {
          // Whatever arrived before the hang-up is a prefix of the single-request output.
          const std::vector<int32_t>& want = alone[sampled][t].tokens;
          if (r.tokens.size() > want.size() ||
              !std::equal(r.tokens.begin(), r.tokens.end(), want.begin()))
            tally.fail(who + ": tokens before the hang-up differ from the single-request output");
        } else if (r.status != 200 || !r.done) {
          tally.fail(who + ": stream ended without data: [DONE] (status " +
                     std::to_string(r.status) + ")");
        } else if (r.tokens != alone[sampled][t].tokens || r.text != alone[sampled][t].text ||
                   r.finish_reason != alone[sampled][t].finish_reason) {
          tally.fail(who + ": stream differs from its single-request output");
        }
      }
    });
  for (auto& c : clients) c.join();
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  const infer::EngineStats after = wait_idle(ts);
  loading = false;
  monitor.join();
  const int64_t live_after = cpu_allocator()->stats().live_bytes;
  const int64_t rss_after = rss_bytes();

  // A normal request still gets its single-request output.
  const StreamResult last = testing::stream_completion(ts.port, request(0, false, true));
  EXPECT_EQ(last.tokens, alone[0][0].tokens);
  EXPECT_EQ(ts.client().Get("/health")->status, 200);

  for (const std::string& f : tally.failures) ADD_FAILURE() << f;
  EXPECT_EQ(health_failed, 0) << "/health or /metrics failed during the load";
  EXPECT_GT(health_ok, 0);
  EXPECT_EQ(after.num_running + after.num_waiting, 0);
  EXPECT_EQ(after.blocks_used, idle.blocks_used) << "KV blocks not returned";
  EXPECT_EQ(live_after, live_before) << "tensor memory not returned to its idle level";
  // Resident memory: malloc arenas of 130 threads (and ASan's quarantine of freed memory, 256
  // MiB, and its shadow) may stay, but a leak per request would exceed this.
  EXPECT_LT(rss_after - rss_before, int64_t{kRssSlackMiB} << 20);
  EXPECT_GE(peak_streaming, kClients / 2) << "the clients were meant to overlap";
  EXPECT_GT(after.num_preemptions, 0) << "the KV cache was meant to run out";

  std::string counts;
  for (const auto& [what, n] : tally.counts) counts += " " + what + "=" + std::to_string(n);
  std::printf(
      "server load: %d clients x %d requests in %.1f s, peak %d streams;%s; failures %zu; "
      "health %d ok %d failed; KV blocks used %lld -> %lld of %lld; live tensor bytes %lld -> "
      "%lld; RSS %.1f -> %.1f MiB; preemptions %lld\n",
      kClients, kRequestsPerClient, seconds, peak_streaming.load(), counts.c_str(),
      tally.failures.size(), health_ok.load(), health_failed.load(),
      static_cast<long long>(idle.blocks_used), static_cast<long long>(after.blocks_used),
      static_cast<long long>(after.blocks_total), static_cast<long long>(live_before),
      static_cast<long long>(live_after), rss_before / 1048576.0, rss_after / 1048576.0,
      static_cast<long long>(after.num_preemptions));
}

}  // namespace
}  // namespace tessera
