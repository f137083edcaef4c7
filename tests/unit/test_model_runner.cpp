// The fused inference forward (infer::ModelRunner) against its composite oracle, the models' own
// forward: prefill and token-by-token decode logits of GPT-2, a GQA LLaMA with Llama-3 RoPE
// scaling (and one with YaRN's) and a Mixtral (mixture of experts), through a static and a paged
// cache; bit-identical logits for a sequence alone or batched with others, and for the static and
// paged caches.
#include <gtest/gtest.h>

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <vector>

#include "tessera/infer/model_runner.h"
#include "tessera/models/gpt2.h"
#include "tessera/models/llama.h"
#include "tessera/tessera.h"
#include "testing/expect_error.h"
#include "testing/small_models.h"

namespace tessera {
namespace {

using testing::small_gpt2;
using testing::small_llama;
using testing::small_mixtral;

using infer::ModelRunner;
using infer::StepBatch;

std::vector<int32_t> tokens(int64_t n, int64_t vocab, uint64_t seed) {
  manual_seed(seed);
  Tensor t = randint(0, vocab, {n});
  std::vector<int32_t> out;
  for (int64_t i = 0; i < n; ++i) out.push_back(static_cast<int32_t>(t.data_ptr<int64_t>()[i]));
  return out;
}

// Full-sequence logits [T, V] from the model's own forward.
Tensor oracle_logits(models::CausalLM& model, const std::vector<int32_t>& ids) {
  std::vector<int64_t> wide(ids.begin(), ids.end());
  autograd::NoGradGuard no_grad;
  return model(tensor(wide).reshape({1, -1})).squeeze(0);
}

Tensor as_tensor(std::span<const float> v, int64_t rows) {
  return tensor(std::vector<float>(v.begin(), v.end())).reshape({rows, -1});
}

// Prefills `prefill` tokens then decodes the rest one at a time; checks every step's logits.
void check_runner(models::CausalLM& model, infer::KVCache& cache, const infer::BlockTable& table,
                  int64_t prefill, int64_t total) {
  ModelRunner runner(model);
  const std::vector<int32_t> ids = tokens(total, model.vocab_size(), 3);
  Tensor want = oracle_logits(model, ids);
  StepBatch batch;
  batch.clear();
  batch.add_sequence(std::span(ids).first(prefill), 0, table, cache.block_size(), true);
  for (int64_t pos = prefill;; ++pos) {
    Tensor got = as_tensor(runner.forward(batch, cache), 1);
    EXPECT_TRUE(allclose(got, want.narrow(0, pos - 1, 1), 1e-4, 1e-5))
        << "logits at position " << pos - 1 << ": max diff "
        << max(abs(got - want.narrow(0, pos - 1, 1))).item<float>();
    if (pos == total) break;
    batch.clear();
    batch.add_sequence(std::span(ids).subspan(pos, 1), pos, table, cache.block_size(), true);
  }
}

// check_runner through a paged cache of `blocks` blocks of 16 positions, in order.
void check_paged_runner(models::CausalLM& model, int64_t blocks, int64_t prefill, int64_t total) {
  infer::PagedKVCache paged(ModelRunner(model).kv_spec(), blocks, 16);
  infer::BlockTable table;
  ASSERT_TRUE(paged.reserve(table, total));
  check_runner(model, paged, table, prefill, total);
}

TEST(ModelRunner, LlamaGqaMatchesModelForwardStaticAndPaged) {
  auto model = small_llama();
  infer::StaticKVCache fixed(ModelRunner(*model).kv_spec(), 70);
  check_runner(*model, fixed, fixed.table(), 23, 70);
  infer::PagedKVCache paged(ModelRunner(*model).kv_spec(), 9, 16);
  infer::BlockTable table;
  ASSERT_TRUE(paged.reserve(table, 70));
  std::swap(table[0], table[3]);  // scattered blocks
  check_runner(*model, paged, table, 17, 70);
}

TEST(ModelRunner, MixtralMatchesModelForward) { check_paged_runner(*small_mixtral(), 6, 29, 70); }

// Qwen2's q/k/v biases go into the fused projection's bias.
TEST(ModelRunner, AttentionBiasesMatchModelForward) {
  models::LlamaConfig c = testing::small_llama_config(80);
  c.attention_bias = true;
  manual_seed(14);
  auto model = std::make_shared<models::Llama>(c);
  testing::draw_biases(*model, 0.5);
  check_paged_runner(*model, 6, 21, 60);
}

// Qwen3's decoupled head size and per-head query/key norms (fused into the rotation).
TEST(ModelRunner, Qwen3MatchesModelForward) {
  check_paged_runner(*testing::small_qwen3(), 6, 21, 60);
}

// YaRN's attention factor scales the rotary tables, hence q and k: the runner's fused rotation
// reads the same tables.
TEST(ModelRunner, YarnRopeScalingMatchesModelForward) {
  models::LlamaConfig c = testing::small_llama_config(80);
  c.rope_scaling = testing::yarn_scaling(8.0, 64);
  manual_seed(15);
  check_paged_runner(*std::make_shared<models::Llama>(c), 6, 21, 60);
}

// Qwen3-MoE: experts under the MLP's names, their probabilities not renormalised.
TEST(ModelRunner, Qwen3MoeMatchesModelForward) {
  check_paged_runner(*testing::small_qwen3_moe(), 6, 29, 70);
}

TEST(ModelRunner, Gpt2MatchesModelForward) { check_paged_runner(*small_gpt2(), 6, 40, 80); }

// Logits of the same step for sequence a, computed with a alone and next to b.
TEST(ModelRunner, BatchedLogitsAreBitIdenticalToAlone) {
  for (auto model : {small_llama(), small_gpt2(), small_mixtral()}) {
    ModelRunner runner(*model);
    infer::PagedKVCache cache(runner.kv_spec(), 12, 16);
    infer::BlockTable ta, tb;
    ASSERT_TRUE(cache.reserve(ta, 40));
    ASSERT_TRUE(cache.reserve(tb, 40));
    const std::vector<int32_t> a = tokens(40, model->vocab_size(), 4);
    const std::vector<int32_t> b = tokens(40, model->vocab_size(), 5);
    StepBatch batch;
    auto step = [&](bool with_b, int64_t pos) {
      batch.clear();
      if (with_b) batch.add_sequence(std::span(b).first(pos + 1), 0, tb, 16, true);
      if (pos == 30)
        batch.add_sequence(std::span(a).first(31), 0, ta, 16, true);
      else
        batch.add_sequence(std::span(a).subspan(pos, 1), pos, ta, 16, true);
      std::span<const float> out = runner.forward(batch, cache);
      return std::vector<float>(out.end() - model->vocab_size(), out.end());
    };
    // a: prefill 31 then decode 5, alone and then again with b prefilling beside it.
    std::vector<std::vector<float>> alone, batched;
    for (int64_t pos = 30; pos < 36; ++pos) alone.push_back(step(false, pos));
    for (int64_t pos = 30; pos < 36; ++pos) batched.push_back(step(true, pos));
    for (size_t i = 0; i < alone.size(); ++i)
      EXPECT_EQ(std::memcmp(alone[i].data(), batched[i].data(), alone[i].size() * sizeof(float)), 0)
          << model->type_name() << " step " << i;
  }
}

// Five sequences prefilled in one batch (large enough to be split across two threads) give the
// logits each gets alone, in the order of their logit rows.
TEST(ModelRunner, SplitBatchLogitsAreBitIdenticalToAloneAndInOrder) {
  const int threads = omp_get_max_threads();
  omp_set_num_threads(2);
  for (auto model : {small_llama(), small_gpt2(), small_mixtral()}) {
    ModelRunner runner(*model);
    const int64_t V = model->vocab_size();
    infer::PagedKVCache cache(runner.kv_spec(), 30, 16);
    std::vector<std::vector<int32_t>> prompts;
    std::vector<infer::BlockTable> tables(5);
    for (int64_t s = 0; s < 5; ++s) {
      prompts.push_back(tokens(10 + 9 * s, V, 20 + s));
      ASSERT_TRUE(cache.reserve(tables[s], static_cast<int64_t>(prompts[s].size())));
    }
    StepBatch batch;
    batch.clear();
    for (int64_t s = 0; s < 5; ++s) batch.add_sequence(prompts[s], 0, tables[s], 16, true);
    std::span<const float> out = runner.forward(batch, cache);
    const std::vector<float> together(out.begin(), out.end());
    ASSERT_EQ(together.size(), static_cast<size_t>(5 * V));
    for (int64_t s = 0; s < 5; ++s) {
      batch.clear();
      batch.add_sequence(prompts[s], 0, tables[s], 16, true);
      std::span<const float> alone = runner.forward(batch, cache);
      EXPECT_EQ(std::memcmp(alone.data(), together.data() + s * V, V * sizeof(float)), 0)
          << model->type_name() << " sequence " << s;
    }
  }
  omp_set_num_threads(threads);
}

TEST(ModelRunner, StaticAndPagedCachesGiveIdenticalLogits) {
  auto model = small_llama();
  ModelRunner runner(*model);
  const std::vector<int32_t> ids = tokens(50, model->vocab_size(), 6);
  infer::StaticKVCache fixed(runner.kv_spec(), 64);
  infer::PagedKVCache paged(runner.kv_spec(), 4, 16);
  infer::BlockTable table;
  ASSERT_TRUE(paged.reserve(table, 50));
  std::swap(table[0], table[2]);
  StepBatch batch;
  auto last = [&](infer::KVCache& cache, const infer::BlockTable& t) {
    batch.clear();
    batch.add_sequence(ids, 0, t, cache.block_size(), true);
    std::span<const float> out = runner.forward(batch, cache);
    return std::vector<float>(out.begin(), out.end());
  };
  EXPECT_EQ(last(fixed, fixed.table()), last(paged, table));
}

// Logits of 40 prefilled tokens, then of 5 decode steps, with the runner's weights in dtype.
Tensor runner_logits(const models::CausalLM& model, DType weights,
                     const std::vector<int32_t>& ids) {
  ModelRunner runner(model, weights);
  infer::PagedKVCache cache(runner.kv_spec(), 4, 16);
  infer::BlockTable table;
  EXPECT_TRUE(cache.reserve(table, 45));
  StepBatch batch;
  std::vector<float> out;
  for (int64_t pos = 40; pos <= 45; ++pos) {
    batch.clear();
    if (pos == 40)
      batch.add_sequence(std::span(ids).first(40), 0, table, 16, true);
    else
      batch.add_sequence(std::span(ids).subspan(pos - 1, 1), pos - 1, table, 16, true);
    const std::span<const float> step = runner.forward(batch, cache);
    out.insert(out.end(), step.begin(), step.end());
  }
  return tensor(out);
}

// Low-precision weights are the float32 weights stored once in dtype and widened exactly as the
// GEMM loads them: on the original models the logits differ from float32's by that storage alone
// (within share of the logits' scale, and not equal); once make_exact has made every matrix's
// values ones dtype stores exactly, the logits are bit-identical to float32's.
void check_weight_dtype(DType dtype, const std::function<void(Tensor&)>& make_exact, double share) {
  for (auto model : {small_llama(), small_gpt2()}) {
    const std::vector<int32_t> ids = tokens(45, model->vocab_size(), 8);
    const Tensor f32 = runner_logits(*model, kFloat32, ids);
    const Tensor low = runner_logits(*model, dtype, ids);
    const float scale = max(abs(f32)).item<float>();
    EXPECT_TRUE(allclose(low, f32, 0.0, share * scale))
        << model->type_name() << " " << dtype << ": max diff " << max(abs(low - f32)).item<float>()
        << " of logits up to " << scale;
    EXPECT_FALSE(all(low == f32).item<bool>()) << dtype << " weights were stored as float32";
    {
      autograd::NoGradGuard no_grad;
      for (Tensor& p : model->parameters())
        if (p.dim() == 2) make_exact(p);
    }
    const Tensor exact32 = runner_logits(*model, kFloat32, ids);
    const Tensor exact = runner_logits(*model, dtype, ids);
    EXPECT_EQ(std::memcmp(exact.data_ptr(), exact32.data_ptr(), exact32.numel() * sizeof(float)), 0)
        << model->type_name() << " " << dtype << ": max diff "
        << max(abs(exact - exact32)).item<float>();
  }
}

TEST(ModelRunner, BFloat16WeightsAreFloat32WeightsRoundedOnce) {
  check_weight_dtype(
      kBFloat16, [](Tensor& w) { w.copy_(w.to(kBFloat16).to(kFloat32)); }, 2e-2);
  EXPECT_TESSERA_ERROR(ModelRunner(*small_gpt2(), kFloat16), TypeError,
                       "[ModelRunner] expected float32, bfloat16 or int8 weights, got float16");
}

// int8 stores W[o, k] = s_o q[o, k], s_o = max |W[o, :]| / 127. Rows that are integers in
// [-127, 127] (127 among them) times a power of two are stored exactly, and then x (q s) = (x q) s
// at every step of the chain, so int8's chain scaled once rounds as float32's does.
TEST(ModelRunner, Int8WeightsArePerChannelScaledIntegers) {
  check_weight_dtype(
      kInt8,
      [](Tensor& w) {
        const int64_t O = w.size(0), K = w.size(1);
        const Tensor c = w.contiguous();
        std::vector<float> v(c.data_ptr<float>(), c.data_ptr<float>() + O * K);
        for (int64_t o = 0; o < O; ++o) {
          float* row = v.data() + o * K;
          float amax = 0.0f;
          for (int64_t k = 0; k < K; ++k) amax = std::max(amax, std::abs(row[k]));
          const float s = std::exp2(std::floor(std::log2(amax / 127.0f)));
          for (int64_t k = 0; k < K; ++k)
            row[k] = std::clamp(std::nearbyint(row[k] / s), -127.0f, 127.0f) * s;
          row[0] = 127.0f * s;
        }
        w.copy_(tensor(v).reshape({O, K}));
      },
      3e-2);
  auto broken = small_gpt2();
  {
    autograd::NoGradGuard no_grad;
    broken->named_parameters()
        .at("transformer.h.0.attn.c_attn.weight")
        .select(0, 1)
        .narrow(0, 5, 1)
        .fill_(std::nan(""));
  }
  EXPECT_TESSERA_ERROR(ModelRunner(*broken, kInt8), ValueError,
                       "[pack_linear] expected finite weights to quantize to int8, got nan");
}

TEST(ModelRunner, RejectsBadInput) {
  auto model = small_gpt2();
  ModelRunner runner(*model);
  infer::StaticKVCache cache(runner.kv_spec(), 96);
  StepBatch batch;
  batch.clear();
  batch.add_sequence(std::vector<int32_t>{1, 2}, 79, cache.table(), cache.block_size(), true);
  EXPECT_TESSERA_ERROR(runner.forward(batch, cache), IndexError, "expected positions in [0, 80)");
  batch.clear();
  batch.add_sequence(std::vector<int32_t>{70}, 0, cache.table(), cache.block_size(), true);
  EXPECT_TESSERA_ERROR(runner.forward(batch, cache), IndexError, "token ids in [0, 70)");
  infer::StaticKVCache wrong({3, 4, 10}, 16);
  EXPECT_TESSERA_ERROR(runner.forward(batch, wrong), ValueError, "expected a cache of 2 layers");
  EXPECT_TESSERA_ERROR(batch.add_sequence(std::vector<int32_t>{1}, 200, cache.table(), 96, true),
                       ValueError, "[StepBatch.add_sequence]");
}

}  // namespace
}  // namespace tessera
