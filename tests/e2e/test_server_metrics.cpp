// The server's latency histograms for a request of several choices (n > 1): time to first token
// once per request, time between tokens per choice (gaps between different choices' outputs in
// one engine step are not token gaps).
#include <gtest/gtest.h>

#include <chrono>
#include <regex>
#include <string>
#include <thread>

#include "serve/server_internal.h"

namespace tessera::serve {
namespace {

// The value of `<name> <value>` in a Prometheus exposition, or -1.
double metric(const std::string& text, const std::string& name) {
  std::smatch m;
  if (!std::regex_search(text, m, std::regex("\n" + name + " ([0-9.e+-]+)"))) return -1;
  return std::stod(m[1]);
}

infer::RequestOutput tokens(int64_t id) {
  infer::RequestOutput out;
  out.request_id = id;
  out.new_tokens = {7};
  return out;
}

TEST(ServerMetrics, TimeBetweenTokensIsPerChoice) {
  Metrics metrics;
  detail::RequestChannel channel(2);
  channel.ids = {10, 11};
  // Two engine steps 30 ms apart, each giving both choices a token.
  for (int step = 0; step < 2; ++step) {
    if (step) std::this_thread::sleep_for(std::chrono::milliseconds(30));
    EXPECT_TRUE(channel.push(0, tokens(10), metrics));
    EXPECT_TRUE(channel.push(1, tokens(11), metrics));
  }
  const std::string text = metrics.render({});
  EXPECT_EQ(metric(text, "tessera_time_to_first_token_seconds_count"), 1);
  // One gap per choice, each the 30 ms between the steps (not 3 gaps, two of them ~0).
  EXPECT_EQ(metric(text, "tessera_time_between_tokens_seconds_count"), 2);
  EXPECT_GE(metric(text, "tessera_time_between_tokens_seconds_sum"), 0.055);
}

}  // namespace
}  // namespace tessera::serve
