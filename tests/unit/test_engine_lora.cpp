// Serving LoRA adapters (vLLM's multi-LoRA): the runner adds each sequence's adapter to the base
// projections (fused q|k|v and gate|up pieces included) and gives the merged model's logits;
// sequences of different adapters batch together with each row as it runs alone (also when
// the adapters' runs split across threads); the engine
// routes requests by GenerationParams::lora_id, and the prefix cache keeps each adapter's blocks
// apart.
#include <gtest/gtest.h>

#include "tessera/infer/engine.h"
#include "tessera/infer/model_runner.h"
#include "tessera/tessera.h"
#include "testing/expect_error.h"
#include "testing/lora_adapters.h"
#include "testing/small_models.h"

namespace tessera {
namespace {

using infer::ModelRunner;
using infer::StepBatch;
using ModelFactory = std::shared_ptr<models::CausalLM> (*)();

std::shared_ptr<models::CausalLM> gpt2() { return testing::small_gpt2(); }
std::shared_ptr<models::CausalLM> llama() { return testing::small_llama(); }
// Wide enough that a batch's adapter runs split across two threads (ModelRunner's kSplitMacs).
std::shared_ptr<models::CausalLM> wide_gpt2() { return testing::small_gpt2(80, 256); }

// An adapter of make()'s model on targets, with random A and B (seeded).
nn::LoraAdapter random_adapter(ModelFactory make, std::vector<std::string> targets, int64_t r,
                               uint64_t seed) {
  return testing::random_lora_adapter(*make(), std::move(targets), r, seed, 0.2);
}

std::shared_ptr<models::CausalLM> merged(ModelFactory make, const nn::LoraAdapter* adapter) {
  auto model = make();
  if (adapter) nn::merge_lora(*model, *adapter);
  model->eval();
  return model;
}

std::vector<int32_t> ids(int64_t n, int64_t vocab, int32_t salt) {
  std::vector<int32_t> out;
  for (int64_t i = 0; i < n; ++i) out.push_back(static_cast<int32_t>((i * 7 + salt * 13) % vocab));
  return out;
}

Tensor last_logits(models::CausalLM& model, const std::vector<int32_t>& prompt) {
  autograd::NoGradGuard no_grad;
  std::vector<int64_t> wide(prompt.begin(), prompt.end());
  Tensor all = model(tensor(wide).reshape({1, -1})).squeeze(0);
  return all.narrow(0, all.size(0) - 1, 1);
}

TEST(LoraRunner, MixedBatchGivesEachMergedModelsLogitsAndRowsAsAlone) {
  for (const auto& [make, name, partial] :
       {std::tuple{&gpt2, "gpt2", std::vector<std::string>{"c_attn", "mlp.c_proj"}},
        std::tuple{&llama, "llama", std::vector<std::string>{"k_proj", "v_proj", "up_proj"}},
        std::tuple{&wide_gpt2, "wide gpt2", std::vector<std::string>{"c_attn", "c_fc"}}}) {
    SCOPED_TRACE(name);
    const nn::LoraAdapter all = random_adapter(make, {"all-linear"}, 16, 1);
    const nn::LoraAdapter some = random_adapter(make, partial, 2, 2);
    auto base = make();
    ModelRunner runner(*base);
    ASSERT_EQ(runner.add_lora(all), 1);
    ASSERT_EQ(runner.add_lora(some), 2);
    const std::vector<const nn::LoraAdapter*> adapter_of = {nullptr, &all, &some};
    // Sequences naming adapters 1, 1, 0, 2 (a run of one adapter, then others).
    const std::vector<int32_t> lora = {1, 1, 0, 2};
    infer::PagedKVCache cache(runner.kv_spec(), 32, 16);
    StepBatch batch;
    batch.clear();
    std::vector<std::vector<int32_t>> prompts;
    std::vector<infer::BlockTable> tables(lora.size());
    for (size_t s = 0; s < lora.size(); ++s) {
      prompts.push_back(ids(9 + 5 * s, runner.vocab_size(), static_cast<int32_t>(s)));
      ASSERT_TRUE(cache.reserve(tables[s], prompts[s].size()));
      batch.add_sequence(prompts[s], 0, tables[s], 16, true, lora[s]);
    }
    const Tensor got = tensor(std::vector<float>(runner.forward(batch, cache).begin(),
                                                 runner.forward(batch, cache).end()))
                           .reshape({static_cast<int64_t>(lora.size()), -1});
    for (size_t s = 0; s < lora.size(); ++s) {
      auto want_model = merged(make, adapter_of[lora[s]]);
      const Tensor want = last_logits(*want_model, prompts[s]);
      EXPECT_TRUE(allclose(got.narrow(0, s, 1), want, 1e-4, 1e-4))
          << "sequence " << s << " (adapter " << lora[s] << "): max diff "
          << max(abs(got.narrow(0, s, 1) - want)).item<float>();
      // Alone in its batch: the same bits.
      infer::PagedKVCache own(runner.kv_spec(), 8, 16);
      infer::BlockTable table;
      ASSERT_TRUE(own.reserve(table, prompts[s].size()));
      StepBatch one;
      one.clear();
      one.add_sequence(prompts[s], 0, table, 16, true, lora[s]);
      const std::span<const float> alone = runner.forward(one, own);
      EXPECT_TRUE(std::equal(alone.begin(), alone.end(),
                             got.narrow(0, s, 1).contiguous().data_ptr<float>()))
          << "sequence " << s << " batched differs from alone";
    }
    auto plain = merged(make, nullptr);
    EXPECT_FALSE(allclose(got.narrow(0, 0, 1), last_logits(*plain, prompts[0]), 1e-3, 1e-3))
        << "the adapter changes the logits";
  }
}

TEST(LoraRunner, RefusesAdaptersItHasNoProjectionForAndBadIds) {
  auto base = gpt2();
  ModelRunner runner(*base);
  nn::LoraAdapter head = random_adapter(&gpt2, {"c_fc"}, 2, 3);
  head.weights.insert("lm_head.lora_A.weight", randn({2, 40}));
  head.weights.insert("lm_head.lora_B.weight", randn({70, 2}));
  EXPECT_TESSERA_ERROR(runner.add_lora(head), ValueError, "got one for 'lm_head'");
  nn::LoraAdapter narrow{{.r = 2},
                         {{"transformer.h.0.attn.c_attn.lora_A.weight", randn({2, 41})},
                          {"transformer.h.0.attn.c_attn.lora_B.weight", randn({120, 2})}}};
  EXPECT_TESSERA_ERROR(runner.add_lora(narrow), ValueError, "lora_A [r, 40]");
  EXPECT_EQ(runner.num_loras(), 0);
  infer::PagedKVCache cache(runner.kv_spec(), 4, 16);
  infer::BlockTable table;
  ASSERT_TRUE(cache.reserve(table, 4));
  StepBatch batch;
  batch.clear();
  batch.add_sequence(ids(4, 70, 0), 0, table, 16, true, /*lora_id=*/1);
  EXPECT_TESSERA_ERROR(runner.forward(batch, cache), ValueError, "expected lora ids in [0, 0]");
  infer::Engine engine(*base, {.num_blocks = 16});
  infer::GenerationParams p;
  p.lora_id = 1;
  EXPECT_TESSERA_ERROR(engine.add_request(ids(4, 70, 0), p), ValueError, "lora_id in [0, 0]");
}

TEST(LoraEngine, RequestsRunThroughTheirAdaptersAndCacheTheirOwnPrefixes) {
  auto base = llama();
  const std::vector<nn::LoraAdapter> loras = {random_adapter(&llama, {"all-linear"}, 4, 5),
                                              random_adapter(&llama, {"q_proj", "v_proj"}, 8, 6)};
  infer::Engine engine(*base, {.num_blocks = 32});
  for (const nn::LoraAdapter& a : loras) engine.add_lora(a);
  const std::vector<int32_t> prompt = ids(40, base->vocab_size(), 3);  // 2 full blocks + 8
  infer::GenerationParams p;
  p.sampling.temperature = 0;
  p.stopping.max_tokens = 8;
  // All three adapters at once, in one batch.
  std::map<int64_t, std::vector<int32_t>> tokens;
  std::map<int64_t, int32_t> lora_of;
  for (const int32_t lora_id : {1, 0, 2}) {
    p.lora_id = lora_id;
    lora_of[engine.add_request(prompt, p)] = lora_id;
  }
  auto run = [&](std::map<int64_t, int64_t>* cached = nullptr) {
    while (engine.has_unfinished())
      for (const infer::RequestOutput& o : engine.step()) {
        tokens[o.request_id].insert(tokens[o.request_id].end(), o.new_tokens.begin(),
                                    o.new_tokens.end());
        if (cached) (*cached)[o.request_id] = o.cached_tokens;
      }
  };
  run();
  std::map<int32_t, std::vector<int32_t>> by_lora;
  for (const auto& [id, t] : tokens) {
    EXPECT_EQ(t, testing::greedy_alone(*base, loras, prompt, lora_of[id], 8))
        << "lora " << lora_of[id];
    by_lora[lora_of[id]] = t;
  }
  EXPECT_NE(by_lora[1], by_lora[0]);
  EXPECT_NE(by_lora[2], by_lora[0]);
  // The same prompt again: each adapter finds its own blocks (32 of the 40 tokens), and tokens
  // computed under another adapter are never taken.
  tokens.clear();
  lora_of.clear();
  std::map<int64_t, int64_t> cached;
  for (const int32_t lora_id : {2, 0}) {
    p.lora_id = lora_id;
    lora_of[engine.add_request(prompt, p)] = lora_id;
    run(&cached);
  }
  for (const auto& [id, t] : tokens) {
    EXPECT_EQ(cached[id], 32) << "lora " << lora_of[id];
    EXPECT_EQ(t, by_lora[lora_of[id]]) << "lora " << lora_of[id];
  }
  infer::Engine fresh(*base, {.num_blocks = 32});
  fresh.add_lora(loras[0]);
  p.lora_id = 1;
  fresh.add_request(prompt, p);
  while (fresh.has_unfinished()) fresh.step();
  p.lora_id = 0;
  const int64_t other = fresh.add_request(prompt, p);
  int64_t other_cached = -1;
  while (fresh.has_unfinished())
    for (const infer::RequestOutput& o : fresh.step())
      if (o.request_id == other) other_cached = o.cached_tokens;
  EXPECT_EQ(other_cached, 0) << "the base model took blocks an adapter computed";
}

}  // namespace
}  // namespace tessera
