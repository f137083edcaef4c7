// Tokens drawn where the logits are (detail::sample_rows, ModelRunner::sample_tokens; on a GPU
// only the ids come back) against the host Sampler with the same settings, seed and step: the
// same token for greedy, temperature, top-k, top-p, min_p and their mixes, with tied logits,
// through the device runner's code run on the CPU.
#include <gtest/gtest.h>

#include <vector>

#include "infer/device_runner.h"
#include "infer/device_sampler.h"
#include "tessera/infer/model_runner.h"
#include "tessera/infer/sampler.h"
#include "tessera/tessera.h"
#include "testing/expect_error.h"
#include "testing/small_models.h"
#include "testing/sampling_params.h"
#include "testing/step_schedule.h"

namespace tessera {
namespace {

using infer::RowSampling;
using infer::SamplingParams;

SamplingParams params(double temperature, int64_t top_k = 0, double top_p = 1.0,
                      double min_p = 0.0) {
  return testing::sampling_params(temperature, top_k, top_p, min_p);
}

const std::vector<SamplingParams>& settings() {
  static const std::vector<SamplingParams> all = {
      params(0.0),           params(1.0),           params(0.7, 5),     params(1.3, 0, 0.9),
      params(1.0, 20, 0.5),  params(0.9, 0, 1.0, 0.1), params(2.0, 1),  params(1.0, 0, 0.3, 0.05),
      params(1.0, 500)};  // a top-k beyond the vocabulary filters nothing
  return all;
}

// The host sampler's tokens for rows of logits [rows, V], row r with settings p[r].
std::vector<int32_t> host_tokens(std::span<const float> logits, int64_t V,
                                 const std::vector<SamplingParams>& p, uint64_t seed,
                                 uint64_t step) {
  infer::Sampler sampler(V);
  std::vector<int32_t> out;
  for (size_t r = 0; r < p.size(); ++r) {
    std::vector<float> row(logits.begin() + r * V, logits.begin() + (r + 1) * V);
    out.push_back(sampler.sample(row, p[r], seed + r, step, {}, {}));
  }
  return out;
}

std::vector<RowSampling> draws(const std::vector<SamplingParams>& p, uint64_t seed,
                               uint64_t step) {
  std::vector<RowSampling> out;
  for (size_t r = 0; r < p.size(); ++r) out.push_back(RowSampling::of(p[r], seed + r, step));
  return out;
}

std::vector<int32_t> ids(const Tensor& t) {
  return {t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + t.numel()};
}

TEST(DeviceSampling, SampleRowsDrawsTheHostSamplersTokens) {
  const int64_t V = 300;
  const std::vector<SamplingParams>& p = settings();
  const int64_t R = static_cast<int64_t>(p.size());
  int64_t differing_from_greedy = 0;
  for (uint64_t seed = 0; seed < 40; ++seed) {
    Generator gen(100 + seed);
    // Logits with ties: columns 150..199 repeat columns 0..49.
    Tensor logits = randn({R, V}, {}, &gen) * 2.0;
    logits.narrow(1, 150, 50).copy_(logits.narrow(1, 0, 50));
    const std::vector<float> host(logits.data_ptr<float>(), logits.data_ptr<float>() + R * V);
    const std::vector<int32_t> want = host_tokens(host, V, p, seed, seed % 7);
    const std::vector<int32_t> got = ids(infer::detail::sample_rows(logits, draws(p, seed, seed % 7)));
    EXPECT_EQ(got, want) << "seed " << seed;
    const std::vector<int32_t> greedy = ids(argmax(logits, 1));
    for (int64_t r = 0; r < R; ++r) differing_from_greedy += got[r] != greedy[r];
  }
  EXPECT_GT(differing_from_greedy, 40) << "the draws must be random, not argmaxes";
}

TEST(DeviceSampling, AllGreedyRowsAreTheArgmaxAndRowCountsAreChecked) {
  Tensor logits = tensor(std::vector<float>{1, 3, 3, 0, 5, 5}, Shape{2, 3});
  const std::vector<RowSampling> greedy(2, RowSampling::of(params(0.0), 1, 0));
  EXPECT_EQ(ids(infer::detail::sample_rows(logits, greedy)), (std::vector<int32_t>{1, 1}));
  EXPECT_TESSERA_ERROR(infer::detail::sample_rows(logits, std::span(greedy).first(1)), ValueError,
                       "2 row settings");
}

TEST(DeviceSampling, DeviceRunnerOnTheCpuDrawsTheHostSamplersTokens) {
  auto model = testing::small_llama();
  testing::RunnerPair runners(*model);
  auto& [cpu, device, cpu_cache, device_cache, schedule, batch] = runners;
  const int64_t V = cpu.vocab_size();
  for (uint64_t step = 0; step < 8; ++step) {
    SCOPED_TRACE(::testing::Message() << "step " << step);
    schedule.next(batch);
    const std::vector<SamplingParams> p(settings().begin() + step % 4,
                                        settings().begin() + step % 4 + batch.logit_rows.size());
    const std::span<const float> logits = cpu.forward(batch, cpu_cache);
    const std::vector<int32_t> want = host_tokens(logits, V, p, 3, step);
    const std::span<const int32_t> got = device.sample_tokens(batch, device_cache, draws(p, 3, step));
    EXPECT_EQ(std::vector<int32_t>(got.begin(), got.end()), want);
    const std::span<const int32_t> on_cpu = cpu.sample_tokens(batch, cpu_cache, draws(p, 3, step));
    EXPECT_EQ(std::vector<int32_t>(on_cpu.begin(), on_cpu.end()), want);
  }
  EXPECT_TESSERA_ERROR(cpu.sample_tokens(batch, cpu_cache, {}), ValueError, "one RowSampling");
}

}  // namespace
}  // namespace tessera
