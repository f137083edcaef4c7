// The inference engine on a CUDA device against the CPU engine, its oracle: the paged caching /
// attention kernels on random caches (several sequences, GQA, block sizes 16 and 32, prefill and
// decode rows in one batch; float32 and bfloat16 caches), the device ModelRunner's logits and
// greedy tokens for small GPT-2 and LLaMA models over a mixed prefill + decode schedule, and an
// Engine's greedy tokens for stories260K (device argmax and host sampler). Skips with a message
// where no GPU is present.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <numeric>
#include <random>
#include <vector>

#include "tessera/infer/attention.h"
#include "tessera/infer/engine.h"
#include "tessera/infer/model_loader.h"
#include "tessera/infer/model_runner.h"
#include "tessera/infer/sampler.h"
#include "tessera/models/gpt2.h"
#include "tessera/models/llama.h"
#include "tessera/runtime/cuda.h"
#include "tessera/tessera.h"
#include "testing/cuda_test.h"
#include "testing/expect_error.h"
#include "testing/shared_data.h"
#include "testing/small_models.h"
#include "testing/step_schedule.h"

namespace tessera {
namespace {

using testing::small_gpt2;
using testing::small_llama;

using testing::kCuda;
using CudaInferTest = testing::CudaTest;

Tensor int32_tensor(const std::vector<int32_t>& v) { return tensor(v).to(kInt32); }

float max_diff(const Tensor& a, const Tensor& b) {
  return max(abs(a.to(kCPU) - b.to(kCPU))).item<float>();
}

// A sequence of len cached positions whose last num_queries are this step's rows.
struct SeqCase {
  int64_t len, num_queries;
};

// Writes each sequence's new rows into random caches of cache_dtype (blocks shuffled over the
// pool, one token skipped with slot -1) and attends them, on the CPU and on the GPU from the same
// inputs.
void check_paged_kernels(const std::vector<SeqCase>& seqs, int64_t Hq, int64_t Hkv, int64_t D,
                         int64_t bs, uint64_t seed, DType cache_dtype = kFloat32) {
  SCOPED_TRACE(::testing::Message() << "Hq " << Hq << ", Hkv " << Hkv << ", D " << D
                                    << ", block size " << bs << ", " << cache_dtype << " caches");
  manual_seed(seed);
  int64_t used = 0, max_blocks = 0;
  for (const SeqCase& s : seqs) {
    used += (s.len + bs - 1) / bs;
    max_blocks = std::max(max_blocks, (s.len + bs - 1) / bs);
  }
  const int64_t num_blocks = used + 3;
  std::vector<int32_t> pool(num_blocks);
  std::iota(pool.begin(), pool.end(), 0);
  std::shuffle(pool.begin(), pool.end(), std::mt19937(static_cast<uint32_t>(seed)));
  std::vector<int32_t> tables(seqs.size() * max_blocks, 0), lens, starts{0};
  std::vector<int64_t> slots;
  int64_t next = 0;
  for (size_t s = 0; s < seqs.size(); ++s) {
    const int64_t blocks = (seqs[s].len + bs - 1) / bs;
    for (int64_t i = 0; i < blocks; ++i) tables[s * max_blocks + i] = pool[next++];
    for (int64_t p = seqs[s].len - seqs[s].num_queries; p < seqs[s].len; ++p)
      slots.push_back(int64_t{tables[s * max_blocks + p / bs]} * bs + p % bs);
    lens.push_back(static_cast<int32_t>(seqs[s].len));
    starts.push_back(starts.back() + static_cast<int32_t>(seqs[s].num_queries));
  }
  const int64_t N = starts.back();
  slots.push_back(-1);  // a padding token: written nowhere
  Tensor kc = randn({num_blocks, Hkv, D, bs}).to(cache_dtype);
  Tensor vc = randn({num_blocks, Hkv, D, bs}).to(cache_dtype);
  Tensor k = randn({N + 1, Hkv, D}), v = randn({N + 1, Hkv, D}), q = randn({N, Hq, D});
  Tensor kc_gpu = kc.to(kCuda), vc_gpu = vc.to(kCuda);
  Tensor slot_mapping = tensor(slots);
  infer::paged_caching(k, v, kc, vc, slot_mapping);
  infer::paged_caching(k.to(kCuda), v.to(kCuda), kc_gpu, vc_gpu, slot_mapping.to(kCuda));
  EXPECT_TRUE(allclose(kc_gpu.to(kCPU), kc, 0, 0)) << "keys written differently";
  EXPECT_TRUE(allclose(vc_gpu.to(kCPU), vc, 0, 0)) << "values written differently";

  const auto S = static_cast<int64_t>(seqs.size());
  Tensor table = int32_tensor(tables).reshape({S, max_blocks});
  Tensor want = infer::paged_attention(q, kc, vc, table, int32_tensor(lens), int32_tensor(starts));
  Tensor got = infer::paged_attention(q.to(kCuda), kc_gpu, vc_gpu, table.to(kCuda),
                                      int32_tensor(lens).to(kCuda), int32_tensor(starts).to(kCuda));
  ASSERT_EQ(got.device(), kCuda);
  EXPECT_TRUE(allclose(got.to(kCPU), want, 1e-4, 1e-5)) << "max diff " << max_diff(got, want);
}

TEST_F(CudaInferTest, PagedKernelsMatchTheCpuForMixedPrefillAndDecode) {
  const std::vector<SeqCase> mixed = {{37, 37}, {5, 1}, {16, 16}, {70, 1},
                                      {33, 3},  {1, 1}, {64, 1},  {200, 1}};
  for (const int64_t bs : {16, 32}) {
    check_paged_kernels(mixed, 8, 2, 64, bs, 1);                   // GQA, GPT-2 / LLaMA head dim
    check_paged_kernels(mixed, 4, 4, 128, bs, 2);                  // MHA, the widest common head
    check_paged_kernels(mixed, 6, 1, 8, bs, 3);                    // multi-query, a tiny head
    check_paged_kernels({{300, 300}, {129, 1}}, 4, 2, 32, bs, 4);  // long prompt: many tiles
  }
}

// bfloat16 caches: the same rounding on both devices writes the same bits, and both widen them
// exactly, so attention agrees as over float32 caches.
TEST_F(CudaInferTest, PagedKernelsOverBFloat16CachesMatchTheCpu) {
  const std::vector<SeqCase> mixed = {{37, 37}, {5, 1}, {70, 1}, {33, 3}, {200, 1}};
  check_paged_kernels(mixed, 8, 2, 64, 16, 5, kBFloat16);
  check_paged_kernels(mixed, 6, 1, 8, 32, 6, kBFloat16);
}

TEST_F(CudaInferTest, PagedOpsRefuseTensorsOnTwoDevices) {
  Tensor kc = zeros({2, 2, 8, 16}), vc = zeros({2, 2, 8, 16});
  Tensor tables = zeros({1, 1}, kInt32), lens = full({1}, 1, kInt32);
  Tensor starts = int32_tensor({0, 1});
  EXPECT_TESSERA_ERROR(
      infer::paged_attention(randn({1, 4, 8}).to(kCuda), kc, vc, tables, lens, starts), ValueError,
      "[paged_attention] expected q and k_cache on one device, got cuda:0 and cpu");
  EXPECT_TESSERA_ERROR(infer::paged_caching(randn({1, 2, 8}), randn({1, 2, 8}), kc, vc,
                                            tensor(std::vector<int64_t>{0}).to(kCuda)),
                       ValueError, "[paged_caching] expected k and slot_mapping on one device");
}

// A CPU and a GPU runner over testing::MixedSchedule, each with its own paged cache and the same
// block tables. Every step's logits must agree, and the GPU's greedy tokens (argmax on the
// device) must be the host argmax of its own logits for the same step.
void check_device_runner(const std::function<std::shared_ptr<models::CausalLM>()>& make) {
  auto cpu_model = make(), gpu_model = make();
  gpu_model->to(kCuda);
  infer::ModelRunner cpu(*cpu_model), gpu(*gpu_model);
  ASSERT_EQ(gpu.device(), kCuda);
  const int64_t V = cpu.vocab_size(), bs = 16;
  infer::PagedKVCache cpu_cache(cpu.kv_spec(), 24, bs), gpu_cache(gpu.kv_spec(), 24, bs, kCuda);
  EXPECT_TESSERA_ERROR(gpu.forward(infer::StepBatch{}, cpu_cache), ValueError,
                       "[ModelRunner.forward] expected a cache on cuda:0");
  testing::MixedSchedule schedule(V, cpu_cache);
  infer::StepBatch batch;
  for (int step = 0; step < 8; ++step) {
    schedule.next(batch);
    const auto want = cpu.forward(batch, cpu_cache);
    Tensor w = tensor(std::vector<float>(want.begin(), want.end()));
    const auto got = gpu.forward(batch, gpu_cache);
    const std::vector<float> got_logits(got.begin(), got.end());
    Tensor g = tensor(got_logits);
    EXPECT_TRUE(allclose(g, w, 1e-4, 1e-5)) << "step " << step << ": max diff " << max_diff(g, w);
    // The same step again (it rewrites the same keys and values) for its ids only.
    const auto ids = gpu.greedy_tokens(batch, gpu_cache);
    ASSERT_EQ(ids.size(), batch.logit_rows.size());
    for (size_t r = 0; r < ids.size(); ++r)
      EXPECT_EQ(ids[r], infer::argmax(std::span(got_logits).subspan(r * V, V)))
          << "step " << step << " row " << r;
  }
}

TEST_F(CudaInferTest, DeviceRunnerMatchesTheCpuRunnerForGpt2) {
  check_device_runner([] { return small_gpt2(96, 64); });
}

TEST_F(CudaInferTest, DeviceRunnerMatchesTheCpuRunnerForGqaLlama) {
  check_device_runner([] { return small_llama(96); });
}

TEST_F(CudaInferTest, DeviceRunnerRefusesLowPrecisionWeights) {
  auto model = small_gpt2();
  model->to(kCuda);
  for (const DType weights : {kBFloat16, kInt8})
    EXPECT_TESSERA_ERROR(infer::ModelRunner(*model, weights), NotImplementedError,
                         "[ModelRunner] expected float32 weights on cuda:0");
}

// stories260K (trained, so its next-token distributions are peaked and argmax is stable) through
// an Engine on each device: four requests of different prompts batched together.
TEST_F(CudaInferTest, EngineGreedyTokensMatchTheCpuForStories260K) {
  TESSERA_SHARED_DATA_OR_SKIP(path, "stories260K.bin");
  auto cpu_model = infer::load_model(path), gpu_model = infer::load_model(path);
  gpu_model->to(kCuda);
  // logprobs >= 0 makes every step send its logits to the host sampler; -1 lets the device
  // take the argmax.
  auto run = [](const models::CausalLM& model, int64_t logprobs) {
    infer::Engine engine(model, {.num_blocks = 64, .max_num_seqs = 4});
    infer::GenerationParams p;
    p.sampling.temperature = 0;
    p.stopping.max_tokens = 60;
    p.logprobs = logprobs;
    const std::vector<std::vector<int32_t>> prompts = {{1}, {1, 403, 407}, {1, 79}, {1, 300}};
    for (const auto& prompt : prompts) engine.add_request(prompt, p);
    std::vector<std::vector<int32_t>> out(prompts.size());
    while (engine.has_unfinished())
      for (const infer::RequestOutput& o : engine.step())
        out[o.request_id].insert(out[o.request_id].end(), o.new_tokens.begin(), o.new_tokens.end());
    return out;
  };
  const auto want = run(*cpu_model, -1), got = run(*gpu_model, -1);
  const auto host_sampled = run(*gpu_model, 0);
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(want[i].size(), 60u) << "request " << i;
    EXPECT_EQ(got[i], want[i]) << "request " << i;
    EXPECT_EQ(host_sampled[i], got[i]) << "request " << i << ": host sampler vs device argmax";
  }
}

// Temperature / top-k / top-p requests: drawn on the GPU (no logprobs) they give the tokens the
// host sampler draws from the same GPU logits (logprobs 0 brings them to the host).
TEST_F(CudaInferTest, EngineSampledTokensMatchTheHostSamplerForStories260K) {
  TESSERA_SHARED_DATA_OR_SKIP(path, "stories260K.bin");
  auto model = infer::load_model(path);
  model->to(kCuda);
  auto run = [&](int64_t logprobs) {
    infer::Engine engine(*model, {.num_blocks = 64, .max_num_seqs = 4});
    std::vector<std::vector<int32_t>> out(4);
    for (int i = 0; i < 4; ++i) {
      infer::GenerationParams p;
      p.sampling.temperature = 0.6 + 0.3 * i;
      p.sampling.top_k = i == 1 ? 20 : 0;
      p.sampling.top_p = i == 2 ? 0.9 : 1.0;
      p.sampling.min_p = i == 3 ? 0.05 : 0.0;
      p.sampling.seed = 11 + i;
      p.stopping.max_tokens = 60;
      p.logprobs = logprobs;
      engine.add_request({1, 300 + i}, p);
    }
    while (engine.has_unfinished())
      for (const infer::RequestOutput& o : engine.step())
        out[o.request_id].insert(out[o.request_id].end(), o.new_tokens.begin(), o.new_tokens.end());
    return out;
  };
  const auto on_device = run(-1), on_host = run(0);
  for (size_t i = 0; i < on_device.size(); ++i) {
    EXPECT_EQ(on_device[i].size(), 60u) << "request " << i;
    EXPECT_EQ(on_device[i], on_host[i]) << "request " << i;
  }
}

}  // namespace
}  // namespace tessera
