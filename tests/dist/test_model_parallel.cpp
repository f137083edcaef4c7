// GPT-2 and LLaMA sharded for tensor parallelism (with and without sequence parallelism) against
// the whole model they were cut from: the loss and every gradient slice in float64, and 20
// training steps in float32, alone and beside data parallelism.
#include <gtest/gtest.h>

#include <optional>

#include "model_parallel_harness.h"

namespace tessera::dist::testing {
namespace {

std::shared_ptr<models::CausalLM> gpt2_3() { return gpt2(); }
std::shared_ptr<models::CausalLM> llama_untied() { return llama(3, false); }
std::shared_ptr<models::CausalLM> llama_tied() { return llama(3, true); }

// The largest TP size in {4, 2} dividing the world (1 if none).
int tp_size(int world_size) {
  for (int t : {4, 2})
    if (world_size % t == 0) return t;
  return 1;
}

std::shared_ptr<ProcessGroupMPI> tp_group() {
  auto w = world();
  return make_layout_groups(*w, Layout::from_world(w->size(), tp_size(w->size()), 1)).tp;
}

// What the parallel layer owning `local` holds of the whole model's `whole`: rows or columns
// of it, the vocabulary padded, or all of it for a replicated parameter.
Tensor expected_slice(const nn::Module& owner, const std::string& leaf, const Tensor& whole,
                      const Tensor& local, const ProcessGroup& g) {
  const int r = g.rank(), n = g.size();
  auto pad_rows = [&](const Tensor& t) {
    const int64_t rows = local.size(0) * n;
    if (rows == t.size(0)) return t;
    return cat({t, zeros({rows - t.size(0), t.size(1)}, t.dtype())}, 0);
  };
  if (auto* c = dynamic_cast<const ColumnParallelLinear*>(&owner)) {
    if (!c->options.fused_parts.empty())
      return shard_fused_rows(whole, c->options.fused_parts, r, n);
    return leaf == "weight" ? shard_tensor(pad_rows(whole), 0, r, n) : shard_tensor(whole, 0, r, n);
  }
  if (dynamic_cast<const RowParallelLinear*>(&owner))
    return leaf == "weight" ? shard_tensor(whole, 1, r, n) : whole;
  if (dynamic_cast<const VocabParallelEmbedding*>(&owner))
    return shard_tensor(pad_rows(whole), 0, r, n);
  return whole;
}

// Calls check(name, local parameter, its expected slice of the whole model's parameter).
void for_each_slice(
    models::CausalLM& sharded, const models::CausalLM& whole, const ProcessGroup& g,
    const std::function<void(const std::string&, const Tensor&, const Tensor&)>& check,
    bool grads) {
  const nn::TensorDict full = whole.named_parameters();
  std::set<const void*> seen;
  for (const auto& [prefix, module] : sharded.named_modules()) {
    for (const auto& [leaf, p] : module->named_parameters(/*recurse=*/false)) {
      if (!seen.insert(p.impl()).second) continue;  // a tied weight, checked where first met
      const std::string name = prefix.empty() ? leaf : prefix + "." + leaf;
      const Tensor* w = full.find(name);
      ASSERT_NE(w, nullptr) << name;
      const Tensor source = grads ? w->grad() : *w;
      ASSERT_TRUE(source.defined()) << name;
      check(name, grads ? p.grad() : p, expected_slice(*module, leaf, source, p, g));
    }
  }
}

data::Batch float64_batch() {
  Generator gen(5);
  Tensor x = randint(0, kModelVocab, {2, 16}, {kInt64}, &gen);
  Tensor y = randint(0, kModelVocab, {2, 16}, {kInt64}, &gen);
  y.data_ptr<int64_t>()[3] = -1;  // ignored targets
  y.data_ptr<int64_t>()[20] = -1;
  return {x, y};
}

void expect_sharded_equals_whole(const ModelFactory& make, bool sequence_parallel) {
  auto g = tp_group();
  auto whole = make();
  whole->to(kFloat64);
  auto sharded = make();
  sharded->to(kFloat64);
  sharded->shard_tensor_parallel(g, sequence_parallel);
  const data::Batch b = float64_batch();

  Tensor want = whole->loss(b[0], b[1]);
  Tensor got = sharded->loss(b[0], b[1]);
  EXPECT_NEAR(got.item<double>(), want.item<double>(), 1e-12 * std::abs(want.item<double>()));
  want.backward();
  got.backward();
  ParallelGradients grads(*sharded, {.tp = g, .sequence_parallel = sequence_parallel});
  grads.synchronize();
  // The whole model's norm, from the slices.
  const double whole_norm = optim::grad_norm(whole->parameters()).item<double>();
  EXPECT_NEAR(grads.clip_grad_norm_(0.0).item<double>(), whole_norm, 1e-6 * whole_norm);

  int checked = 0;
  for_each_slice(
      *sharded, *whole, *g,
      [&](const std::string& name, const Tensor& got_grad, const Tensor& want_grad) {
        ASSERT_TRUE(got_grad.defined()) << name;
        ASSERT_EQ(got_grad.sizes(), want_grad.sizes()) << name;
        const double scale = std::max(1e-3, max(abs(want_grad)).item<double>());
        EXPECT_LT(max(abs(got_grad - want_grad)).item<double>(), 1e-12 * scale)
            << name << " (sequence_parallel " << sequence_parallel << ")";
        ++checked;
      },
      /*grads=*/true);
  EXPECT_EQ(checked, static_cast<int>(sharded->parameters().size()));
}

TEST(TensorParallelModels, Gpt2LossAndGradientSlicesEqualTheWholeModel) {
  for (bool sp : {false, true}) expect_sharded_equals_whole(gpt2_3, sp);
}

TEST(TensorParallelModels, LlamaLossAndGradientSlicesEqualTheWholeModel) {
  for (bool sp : {false, true}) {
    expect_sharded_equals_whole(llama_untied, sp);
    expect_sharded_equals_whole(llama_tied, sp);
  }
}

TEST(TensorParallelModels, ShardsAreCutFromTheWholeWeights) {
  auto g = tp_group();
  auto whole = gpt2();
  auto sharded = gpt2();
  sharded->shard_tensor_parallel(g, false);
  for_each_slice(
      *sharded, *whole, *g,
      [](const std::string& name, const Tensor& got, const Tensor& want) {
        EXPECT_TRUE(allclose(got, want, 0.0, 0.0)) << name;
      },
      /*grads=*/false);
}

TEST(TensorParallelModels, SequenceParallelReplicatedGradientsAgreeAcrossRanks) {
  auto g = tp_group();
  auto sharded = gpt2();
  sharded->shard_tensor_parallel(g, /*sequence_parallel=*/true);
  const data::Batch b = float64_batch();
  sharded->loss(b[0], b[1]).backward();
  ParallelGradients grads(*sharded, {.tp = g, .sequence_parallel = true});
  grads.synchronize();
  for (const Tensor& p : tensor_parallel_params(*sharded).replicated) {
    Tensor from_root = p.grad().clone();
    g->broadcast(from_root, 0)->wait();
    EXPECT_TRUE(allclose(p.grad(), from_root, 0.0, 0.0)) << "rank " << g->rank();
  }
}

TEST(TensorParallelModels, BadShardingIsATypedError) {
  auto g = tp_group();
  if (g->size() < 2) GTEST_SKIP() << "needs a tensor-parallel group of 2 or more";
  models::GPT2Config c;
  c.vocab_size = 20;
  c.block_size = 8;
  c.n_layer = 1;
  c.n_head = 3;  // not divisible by 2 or 4
  c.n_embd = 12;
  models::GPT2 odd(c);
  EXPECT_THROW(odd.shard_tensor_parallel(g), ValueError);
  auto sharded = gpt2();
  sharded->shard_tensor_parallel(g, true);
  EXPECT_THROW(sharded->shard_tensor_parallel(g), ValueError);  // sharded twice
  Tensor x = zeros({1, 3}, kInt64);  // 3 positions do not split over the group
  EXPECT_THROW(sharded->loss(x, x), ValueError);
  EXPECT_THROW(sharded->inference_layout(), ValueError);
}

// ---- training ----

void expect_training_matches(const ModelFactory& make, bool sequence_parallel) {
  const int tp = tp_size(world()->size());
  expect_layout_matches_one_process(make, {.tp = tp, .sequence_parallel = sequence_parallel}, 2,
                                    sequence_parallel ? "TP + SP losses" : "TP losses");
}

TEST(TensorParallelTraining, Gpt2TwentyStepsMatchOneProcess) {
  for (bool sp : {false, true}) expect_training_matches(gpt2_3, sp);
}

TEST(TensorParallelTraining, LlamaTwentyStepsMatchOneProcess) {
  for (bool sp : {false, true}) expect_training_matches(llama_untied, sp);
}

TEST(TensorParallelTraining, DataTimesTensorParallelMatchesOneProcess) {
  if (world()->size() != 4) GTEST_SKIP() << "DP 2 x TP 2 needs 4 ranks";
  expect_layout_matches_one_process(gpt2_3, {.tp = 2, .sequence_parallel = true}, 2,
                                    "DP2 x TP2 losses");
  expect_layout_matches_one_process(llama_untied, {.tp = 2}, 2, "DP2 x TP2 losses");
}

}  // namespace
}  // namespace tessera::dist::testing
