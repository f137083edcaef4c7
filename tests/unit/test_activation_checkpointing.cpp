// Activation checkpointing: the same gradients as the plain run (bit for bit: the recompute
// repeats the forward exactly, dropout included), with a lower peak of allocated memory.
#include <gtest/gtest.h>

#include "tessera/autograd/checkpoint.h"
#include "tessera/models/gpt2.h"
#include "tessera/models/llama.h"
#include "tessera/tessera.h"

namespace tessera {
namespace {

// Peak allocated bytes during loss + backward, and the gradients it left.
struct Run {
  int64_t peak_bytes;
  TensorList grads;
};

Run train_once(models::CausalLM& model, const Tensor& x, const Tensor& y, bool checkpointing) {
  model.zero_grad();
  model.set_activation_checkpointing(checkpointing);
  manual_seed(7);  // the same dropout masks in both runs
  Allocator* allocator = cpu_allocator();
  allocator->reset_peak();
  const int64_t before = allocator->stats().live_bytes;
  model.loss(x, y).backward();
  Run run{allocator->stats().peak_bytes - before, {}};
  for (const Tensor& p : model.parameters()) run.grads.push_back(p.grad().clone());
  return run;
}

void expect_same_grads_lower_peak(models::CausalLM& model) {
  manual_seed(3);
  Tensor x = randint(0, model.vocab_size(), {4, 64});
  Tensor y = randint(0, model.vocab_size(), {4, 64});
  const Run plain = train_once(model, x, y, false);
  const Run checkpointed = train_once(model, x, y, true);
  ASSERT_EQ(plain.grads.size(), checkpointed.grads.size());
  for (size_t i = 0; i < plain.grads.size(); ++i)
    EXPECT_TRUE(allclose(plain.grads[i], checkpointed.grads[i], 0, 0)) << "parameter " << i;
  // Four blocks keep only their inputs instead of every activation.
  EXPECT_LT(checkpointed.peak_bytes, plain.peak_bytes * 3 / 4)
      << "peak " << checkpointed.peak_bytes << " vs " << plain.peak_bytes;
}

TEST(ActivationCheckpointing, Gpt2SameGradsLowerPeak) {
  models::GPT2Config c;
  c.vocab_size = 64;
  c.block_size = 64;
  c.n_layer = 4;
  c.n_head = 4;
  c.n_embd = 64;
  c.dropout = 0.1;  // recomputed blocks must redraw the same masks
  manual_seed(1);
  models::GPT2 model(c);
  expect_same_grads_lower_peak(model);
}

TEST(ActivationCheckpointing, LlamaSameGradsLowerPeak) {
  models::LlamaConfig c;
  c.vocab_size = 64;
  c.dim = 64;
  c.n_layers = 4;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.hidden_dim = 160;
  c.max_seq_len = 64;
  manual_seed(2);
  models::Llama model(c);
  expect_same_grads_lower_peak(model);
}

TEST(ActivationCheckpointing, FunctionGradientsMatchAndEvalSkipsIt) {
  Tensor w = randn({8, 8}).requires_grad_();
  Tensor x = randn({4, 8}).requires_grad_();
  auto fn = [&](const TensorList& in) { return TensorList{tanh(matmul(in[0], w)) * 2.0}; };
  sum(fn({x})[0]).backward();
  Tensor gw = w.grad().clone(), gx = x.grad().clone();
  w.set_grad(Tensor());
  x.set_grad(Tensor());
  Tensor out = autograd::checkpoint(fn, {x})[0];
  EXPECT_EQ(out.grad_fn()->name(), "CheckpointBackward");
  sum(out).backward();
  EXPECT_TRUE(allclose(w.grad(), gw, 0, 0));
  EXPECT_TRUE(allclose(x.grad(), gx, 0, 0));
}

}  // namespace
}  // namespace tessera
