// Mixtral's sparse mixture of experts (models::MixtralSparseMoe, LlamaConfig::n_experts): each
// token's output against its experts computed by hand, float64 gradients of the input and the
// weights against finite differences, the load-balancing loss against Hugging Face's formula
// written out, configs and Hugging Face import, and the schemes that refuse a mixture. (The
// whole model against PyTorch is in tests/e2e/test_models_vs_torch.cpp, the inference runner in
// test_model_runner.cpp.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "infer/device_runner.h"
#include "tessera/models/llama.h"
#include "tessera/models/pipeline_stage.h"
#include "tessera/models/registry.h"
#include "tessera/tessera.h"
#include "testing/expect_error.h"
#include "testing/gradcheck.h"

namespace tessera {
namespace {

models::LlamaConfig moe_config() { return models::LlamaConfig::from_name("mixtral-test"); }

// A float64 mixture whose router prefers experts clearly (no near-ties for differences to flip).
std::shared_ptr<models::MixtralSparseMoe> float64_moe(const models::LlamaConfig& c, uint64_t seed) {
  manual_seed(seed);
  auto moe = std::make_shared<models::MixtralSparseMoe>(c);
  moe->to(kFloat64);
  autograd::NoGradGuard no_grad;
  moe->gate->weight.mul_(8.0);
  return moe;
}

std::vector<double> values(const Tensor& t) {
  const Tensor c = t.to(kFloat64).contiguous();
  return {c.data_ptr<double>(), c.data_ptr<double>() + c.numel()};
}

TEST(MixtralMoe, EachTokenIsItsTopExpertsWeightedByRenormalisedProbabilities) {
  for (const int64_t top_k : {1, 2, 3}) {
    models::LlamaConfig c = moe_config();
    c.n_experts_per_token = top_k;
    auto moe = float64_moe(c, 5 + top_k);
    const Tensor x = randn({2, 7, c.dim}, TensorOptions(kFloat64));
    const Tensor y = (*moe)(x);
    ASSERT_EQ(y.sizes(), x.sizes());
    const Tensor rows = x.reshape({-1, c.dim}), out = y.reshape({-1, c.dim});
    std::vector<int64_t> picks(c.n_experts, 0);
    for (int64_t n = 0; n < rows.size(0); ++n) {
      const Tensor xn = rows.narrow(0, n, 1);
      std::vector<double> p = values(matmul(xn, moe->gate->weight.t()));
      const double top = *std::max_element(p.begin(), p.end());
      for (double& v : p) v = std::exp(v - top);
      std::vector<int64_t> order(c.n_experts);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(),
                       [&](int64_t a, int64_t b) { return p[a] > p[b]; });
      double chosen = 0.0;
      for (int64_t k = 0; k < top_k; ++k) chosen += p[order[k]];
      Tensor want = zeros({1, c.dim}, TensorOptions(kFloat64));
      for (int64_t k = 0; k < top_k; ++k) {
        const int64_t e = order[k];
        ++picks[e];
        want = want + (*moe->experts->at<models::MixtralExpert>(e))(xn) * (p[e] / chosen);
      }
      EXPECT_TRUE(allclose(out.narrow(0, n, 1), want, 1e-12, 1e-12)) << "token " << n;
    }
    EXPECT_EQ(moe->last_stats.picks, picks) << "picks recorded for the load-balancing loss";
    EXPECT_EQ(moe->last_stats.tokens, 14);
    EXPECT_GT(std::count_if(picks.begin(), picks.end(), [](int64_t n) { return n > 0; }), 1)
        << "the tokens spread over experts";
  }
}

// sum(moe(x) * v)'s gradient for one entry of t, by central differences.
double numeric_gradient(models::MixtralSparseMoe& moe, const Tensor& x, const Tensor& v, Tensor t,
                        int64_t flat_index) {
  autograd::NoGradGuard no_grad;
  double* entry = t.data_ptr<double>() + flat_index;
  const double eps = 1e-6, saved = *entry;
  *entry = saved + eps;
  const double up = sum(moe(x) * v).item<double>();
  *entry = saved - eps;
  const double down = sum(moe(x) * v).item<double>();
  *entry = saved;
  return (up - down) / (2 * eps);
}

TEST(MixtralMoe, Float64GradientsMatchFiniteDifferences) {
  const models::LlamaConfig c = moe_config();
  auto moe = float64_moe(c, 17);
  const Tensor x = randn({9, c.dim}, TensorOptions(kFloat64));
  EXPECT_EQ(testing::gradcheck([&](const TensorList& in) { return TensorList{(*moe)(in[0])}; },
                               {x.clone().requires_grad_()}),
            "");
  // The router's weights (through the renormalised probabilities) and each expert's.
  const Tensor v = randn({9, c.dim}, TensorOptions(kFloat64));
  moe->zero_grad();
  sum((*moe)(x)*v).backward();
  int64_t checked = 0;
  for (auto& [name, p] : moe->named_parameters()) {
    if (!p.grad().defined()) {  // an expert no token chose has no gradient, as in torch
      EXPECT_TRUE(name.starts_with("experts.")) << name;
      continue;
    }
    for (const int64_t i : {int64_t{0}, p.numel() / 2 + 3, p.numel() - 1}) {
      const double want = numeric_gradient(*moe, x, v, p, i);
      EXPECT_NEAR(p.grad().contiguous().data_ptr<double>()[i], want, 1e-6 + 1e-5 * std::abs(want))
          << name << "[" << i << "]";
      ++checked;
    }
  }
  EXPECT_GE(checked, 3 * 4) << "the router and at least one expert's three weights";
}

// Hugging Face's load_balancing_loss_func over the router scores of every layer, written out.
double hf_load_balancing_loss(const std::vector<Tensor>& scores, int64_t top_k) {
  const Tensor all = cat(scores, 0).to(kFloat64);  // [layers * tokens, E]
  const Tensor probs = softmax(all, -1);
  const Tensor chosen = std::get<1>(topk(probs, top_k, -1));
  const Tensor mask = one_hot(chosen, all.size(1)).to(kFloat64);  // [rows, k, E]
  const Tensor tokens_per_expert = mean(mask, {0});               // [k, E]
  const Tensor prob_per_expert = mean(probs, {0});                // [E]
  return (sum(tokens_per_expert * prob_per_expert.unsqueeze(0)) * all.size(1)).item<double>();
}

TEST(MixtralMoe, TrainingAddsHuggingFacesLoadBalancingLoss) {
  models::LlamaConfig c = moe_config();
  c.router_aux_loss_coef = 0.02;
  manual_seed(3);
  models::Llama model(c);
  std::vector<Tensor> scores;
  for (size_t i = 0; i < model.model->layers->size(); ++i) {
    auto& moe = *model.model->layers->at<models::LlamaDecoderLayer>(i)->block_sparse_moe;
    moe.register_forward_hook([&scores, &moe](nn::Module&, const TensorList& in, const Tensor&) {
      scores.push_back((*moe.gate)(in[0].reshape({-1, in[0].size(-1)})).detach());
      return std::optional<Tensor>();
    });
  }
  const Tensor x = randint(0, c.vocab_size, {2, 12}), y = randint(0, c.vocab_size, {2, 12});
  const Tensor loss = model.loss(x, y);
  ASSERT_EQ(scores.size(), 2u);
  const double ce =
      cross_entropy(model(x).reshape({-1, c.vocab_size}), y.reshape({-1})).item<double>();
  const double aux = hf_load_balancing_loss(scores, c.n_experts_per_token);
  EXPECT_NEAR(loss.item<double>(), ce + 0.02 * aux, 1e-6);
  EXPECT_GT(aux, 0.0);

  // The loss reaches the routers; evaluation reports the cross entropy alone.
  loss.backward();
  const Tensor gate_grad =
      model.model->layers->at<models::LlamaDecoderLayer>(0)->block_sparse_moe->gate->weight.grad();
  ASSERT_TRUE(gate_grad.defined());
  EXPECT_GT(max(abs(gate_grad)).item<float>(), 0.0f);
  {
    nn::EvalModeGuard eval(model);
    EXPECT_FALSE(model.auxiliary_loss().defined());
    EXPECT_NEAR(model.loss(x, y).item<double>(), ce, 1e-6);
  }
  c.router_aux_loss_coef = 0.0;
  models::Llama plain(c);
  EXPECT_FALSE(plain.has_auxiliary_loss());
  plain.forward(x);
  EXPECT_FALSE(plain.auxiliary_loss().defined());
}

TEST(MixtralMoe, AUniformRouterCostsTopKTimesTheCoefficient) {
  // Every probability 1 / E and ties going to the lowest indices: n_experts * sum f P = top_k.
  models::LlamaConfig c = moe_config();
  c.router_aux_loss_coef = 0.5;
  models::Llama model(c);
  {
    autograd::NoGradGuard no_grad;
    for (auto& [name, p] : model.named_parameters())
      if (name.ends_with("gate.weight")) p.zero_();
  }
  model.forward(randint(0, c.vocab_size, {1, 9}));
  EXPECT_NEAR(model.auxiliary_loss().item<double>(), 0.5 * c.n_experts_per_token, 1e-6);
}

TEST(MixtralMoe, ConfigNamesAndHuggingFaceImport) {
  const models::LlamaConfig c = moe_config();
  EXPECT_TRUE(c.mixture_of_experts());
  EXPECT_EQ(c.n_experts, 4);
  const models::LlamaConfig back = models::LlamaConfig::from_json(c.to_json());
  EXPECT_EQ(back.n_experts, 4);
  EXPECT_EQ(back.n_experts_per_token, 2);
  EXPECT_DOUBLE_EQ(back.router_aux_loss_coef, c.router_aux_loss_coef);
  EXPECT_FALSE(models::LlamaConfig::from_name("llama-test").mixture_of_experts());
  const models::LlamaConfig big = models::LlamaConfig::from_name("mixtral-8x7b");
  EXPECT_EQ(big.n_experts, 8);
  EXPECT_EQ(big.hidden_dim, 14336);

  models::Llama model(c);
  const auto names = model.named_parameters();
  EXPECT_TRUE(names.contains("model.layers.1.block_sparse_moe.gate.weight"));
  EXPECT_TRUE(names.contains("model.layers.1.block_sparse_moe.experts.3.w2.weight"));
  EXPECT_FALSE(names.contains("model.layers.1.mlp.gate_proj.weight"));
  EXPECT_EQ(names.at("model.layers.0.block_sparse_moe.experts.0.w1.weight").sizes(),
            (Shape{c.hidden_dim, c.dim}));

  const models::ModelFamily* family = models::family_of_hf_type("mixtral");
  ASSERT_NE(family, nullptr);
  EXPECT_EQ(family->name, "llama");
  const std::string json = family->config_from_hf(R"({"model_type": "mixtral", "vocab_size": 96,
      "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
      "num_key_value_heads": 2, "intermediate_size": 96, "max_position_embeddings": 64,
      "num_local_experts": 8, "num_experts_per_tok": 2, "router_aux_loss_coef": 0.02})");
  const models::LlamaConfig hf = models::LlamaConfig::from_json(json);
  EXPECT_EQ(hf.n_experts, 8);
  EXPECT_EQ(hf.n_experts_per_token, 2);
  EXPECT_DOUBLE_EQ(hf.router_aux_loss_coef, 0.02);
}

TEST(MixtralMoe, BadConfigsAndUnsupportedSchemesAreTypedErrors) {
  models::LlamaConfig c = moe_config();
  c.n_experts_per_token = 5;
  EXPECT_TESSERA_ERROR(c.validate(), ValueError, "n_experts_per_token <= n_experts");
  c.n_experts_per_token = 0;
  EXPECT_TESSERA_ERROR(c.validate(), ValueError, "n_experts_per_token");
  c = moe_config();
  c.router_aux_loss_coef = -1.0;
  EXPECT_TESSERA_ERROR(c.validate(), ValueError, "router_aux_loss_coef");

  auto model = std::make_shared<models::Llama>(moe_config());
  EXPECT_TESSERA_ERROR(models::PipelineStage(model, 0, 1), NotImplementedError, "auxiliary loss");
  // The device runner's code, run here on the CPU, refuses before touching a device.
  EXPECT_TESSERA_ERROR(infer::detail::DeviceRunner(model->inference_layout(), kCPU),
                       NotImplementedError, "mixtures of experts run on the CPU runner");
  model->set_activation_checkpointing(true);
  EXPECT_TESSERA_ERROR(model->loss(randint(0, 96, {1, 4}), randint(0, 96, {1, 4})),
                       NotImplementedError, "activation checkpointing");
}

}  // namespace
}  // namespace tessera
