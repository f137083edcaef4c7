// nn::Module and layers: registration order and dotted names, state dicts and load reports,
// to(dtype) keeping aliases, train/eval, hooks, parameter counts, layer forwards and init.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include "tessera/nn/init.h"
#include "tessera/nn/layers.h"
#include "tessera/nn/module.h"
#include "tessera/optim/adam.h"
#include "tessera/tessera.h"
#include "testing/expect_error.h"

namespace tessera {
namespace {

using nn::Linear;

// A GPT-2-shaped toy: wte, h.<i>.{ln_1, attn.{c_attn, c_proj}, mlp}, ln_f, lm_head (tied).
struct Attn : nn::Module {
  std::shared_ptr<Linear> c_attn, c_proj;
  Tensor mask;
  Attn() {
    c_attn = register_module("c_attn", std::make_shared<Linear>(4, 12));
    c_proj = register_module("c_proj", std::make_shared<Linear>(4, 4));
    mask = register_buffer("mask", ones({2, 2}), /*persistent=*/false);
  }
};

struct Block : nn::Module {
  std::shared_ptr<nn::LayerNorm> ln_1;
  std::shared_ptr<Attn> attn;
  std::shared_ptr<nn::Sequential> mlp;
  Block() {
    ln_1 = register_module("ln_1", std::make_shared<nn::LayerNorm>(4));
    attn = register_module("attn", std::make_shared<Attn>());
    mlp = register_module(
        "mlp",
        std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::UnaryModule>>{
            std::make_shared<Linear>(4, 8), std::make_shared<nn::GELU>("tanh"),
            std::make_shared<Linear>(8, 4)}));
  }
};

struct TinyGpt : nn::Module {
  std::shared_ptr<nn::Embedding> wte;
  std::shared_ptr<nn::ModuleList> h;
  std::shared_ptr<nn::LayerNorm> ln_f;
  std::shared_ptr<Linear> lm_head;
  Tensor steps;
  explicit TinyGpt(int64_t layers = 2) {
    wte = register_module("wte", std::make_shared<nn::Embedding>(10, 4));
    h = register_module("h", std::make_shared<nn::ModuleList>());
    for (int64_t i = 0; i < layers; ++i) h->push_back(std::make_shared<Block>());
    ln_f = register_module("ln_f", std::make_shared<nn::LayerNorm>(4));
    lm_head = register_module("lm_head", std::make_shared<Linear>(4, 10, /*bias=*/false));
    lm_head->weight = lm_head->replace_parameter("weight", wte->weight);  // weight tying
    steps = register_buffer("steps", zeros({1}, kInt64));
  }
};

std::vector<std::string> keys(const nn::TensorDict& d) { return d.keys(); }

TEST(NnModule, RegistrationOrderAndDottedNames) {
  struct Ordered : nn::Module {
    Ordered() {
      register_parameter("zeta", zeros({1}));
      register_module("inner", std::make_shared<Linear>(2, 2));
      register_parameter("alpha", zeros({1}));
      register_buffer("buf", zeros({1}));
    }
  };
  auto m = std::make_shared<Ordered>();
  // Own parameters first in insertion order (not sorted), then the children's.
  EXPECT_EQ(keys(m->named_parameters()),
            (std::vector<std::string>{"zeta", "alpha", "inner.weight", "inner.bias"}));
  EXPECT_EQ(keys(m->named_parameters(/*recurse=*/false)),
            (std::vector<std::string>{"zeta", "alpha"}));
  EXPECT_EQ(keys(m->state_dict()),
            (std::vector<std::string>{"zeta", "alpha", "buf", "inner.weight", "inner.bias"}));

  auto gpt = std::make_shared<TinyGpt>(2);
  std::vector<std::string> names = keys(gpt->named_parameters());
  ASSERT_EQ(names.size(), 1u + 2 * 10 + 2);  // lm_head.weight is wte.weight
  EXPECT_EQ(names[0], "wte.weight");
  EXPECT_EQ(names[1], "h.0.ln_1.weight");
  EXPECT_EQ(names[3], "h.0.attn.c_attn.weight");
  EXPECT_EQ(names[7], "h.0.mlp.0.weight");
  EXPECT_EQ(names[9], "h.0.mlp.2.weight");
  EXPECT_EQ(names[11], "h.1.ln_1.weight");
  EXPECT_EQ(names.back(), "ln_f.bias");
  std::vector<std::string> modules = gpt->named_modules().keys();
  EXPECT_EQ(std::vector<std::string>(modules.begin(), modules.begin() + 6),
            (std::vector<std::string>{"", "wte", "h", "h.0", "h.0.ln_1", "h.0.attn"}));
  EXPECT_EQ(modules.back(), "lm_head");
  EXPECT_EQ(keys(gpt->named_buffers()),
            (std::vector<std::string>{"steps", "h.0.attn.mask", "h.1.attn.mask"}));
  EXPECT_TRUE(gpt->named_parameters()["h.1.attn.c_proj.bias"].is_same(
      gpt->h->at<Block>(1)->attn->c_proj->bias));
}

TEST(NnModule, RegistrationErrors) {
  nn::Module m;
  m.register_parameter("w", zeros({2}));
  EXPECT_TESSERA_ERROR(m.register_parameter("w", zeros({2})), ValueError, "[register_parameter]");
  EXPECT_TESSERA_ERROR(m.register_buffer("w", zeros({2})), ValueError, "not yet used");
  EXPECT_TESSERA_ERROR(m.register_parameter("a.b", zeros({2})), ValueError, "without '.'");
  EXPECT_TESSERA_ERROR(m.register_parameter("", zeros({2})), ValueError, "non-empty");
  Tensor leaf = zeros({2}, TensorOptions().with_requires_grad());
  EXPECT_TESSERA_ERROR(m.register_parameter("x", leaf * 2.0), ValueError, "leaf");
  EXPECT_TESSERA_ERROR(m.register_module("c", std::shared_ptr<Linear>()), ValueError, "nullptr");
  EXPECT_TESSERA_ERROR(m.replace_parameter("nope", zeros({1})), ValueError, "[replace_parameter]");
  EXPECT_TESSERA_ERROR(m.named_modules(), RuntimeError, "std::shared_ptr");
  auto list = std::make_shared<nn::ModuleList>(
      std::initializer_list<std::shared_ptr<nn::Module>>{std::make_shared<nn::ReLU>()});
  EXPECT_TESSERA_ERROR(list->at<Linear>(0), TypeError, "ReLU");
  EXPECT_TESSERA_ERROR((*list)[3], IndexError, "[ModuleList]");
}

TEST(NnModule, StateDictRoundTripIntoNestedModel) {
  auto a = std::make_shared<TinyGpt>(), b = std::make_shared<TinyGpt>();
  nn::TensorDict sd = a->state_dict();
  // Tied weights appear under both names, non-persistent buffers not at all.
  EXPECT_TRUE(sd.contains("lm_head.weight"));
  EXPECT_TRUE(sd.contains("wte.weight"));
  EXPECT_FALSE(sd.contains("h.0.attn.mask"));
  EXPECT_TRUE(sd.contains("steps"));
  EXPECT_FALSE(sd["wte.weight"].requires_grad());  // detached views of the live tensors
  EXPECT_EQ(sd["wte.weight"].data_ptr(), a->wte->weight.data_ptr());

  const TensorImpl* b_weight = b->h->at<Block>(0)->attn->c_attn->weight.impl();
  EXPECT_FALSE(
      allclose(b->h->at<Block>(0)->attn->c_attn->weight, a->h->at<Block>(0)->attn->c_attn->weight));
  nn::LoadStateDictReport report = b->load_state_dict(sd);
  EXPECT_TRUE(report.ok()) << report.str();
  for (const auto& [name, t] : b->state_dict()) EXPECT_TRUE(allclose(t, sd[name])) << name;
  // Loading copies into the existing tensors: members and aliases are untouched.
  EXPECT_EQ(b->h->at<Block>(0)->attn->c_attn->weight.impl(), b_weight);
  EXPECT_TRUE(b->lm_head->weight.is_same(b->wte->weight));
}

TEST(NnModule, StrictAndNonStrictLoadReports) {
  auto model = std::make_shared<TinyGpt>(1);
  nn::TensorDict sd;
  for (const auto& [name, t] : model->state_dict()) sd.insert(name, t.clone());
  sd.erase("ln_f.bias");
  sd.insert("extra.weight", zeros({3}));
  sd["h.0.ln_1.weight"] = zeros({5});
  Tensor before = model->h->at<Block>(0)->attn->c_proj->weight.clone();
  {
    autograd::NoGradGuard ng;
    for (auto& [_, t] : sd) {
      if (t.is_floating_point()) t.add_(1.0);
    }
  }
  try {
    model->load_state_dict(sd);
    FAIL() << "strict load did not throw";
  } catch (const ValueError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("[load_state_dict]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("missing keys [ln_f.bias]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("unexpected keys [extra.weight]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("h.0.ln_1.weight: expected [4], got [5]"), std::string::npos) << msg;
  }
  // A failed strict load changes nothing.
  EXPECT_TRUE(allclose(model->h->at<Block>(0)->attn->c_proj->weight, before));

  // A shape mismatch throws even when not strict (torch), unless skipped (a new head).
  EXPECT_THROW(model->load_state_dict(sd, /*strict=*/false), ValueError);
  EXPECT_TRUE(allclose(model->h->at<Block>(0)->attn->c_proj->weight, before));
  nn::LoadStateDictReport report =
      model->load_state_dict(sd, /*strict=*/false, /*skip_mismatched_shapes=*/true);
  EXPECT_FALSE(report.ok());
  EXPECT_EQ(report.missing_keys, std::vector<std::string>{"ln_f.bias"});
  EXPECT_EQ(report.unexpected_keys, std::vector<std::string>{"extra.weight"});
  ASSERT_EQ(report.mismatched_keys.size(), 1u);
  EXPECT_EQ(report.mismatched_keys[0].key, "h.0.ln_1.weight");
  // Everything that matched was loaded.
  EXPECT_TRUE(allclose(model->h->at<Block>(0)->attn->c_proj->weight, before + 1.0));
  EXPECT_TRUE(allclose(model->h->at<Block>(0)->ln_1->weight, ones({4})));  // mismatch skipped
}

TEST(NnModule, ToFloat64KeepsTiedWeightsAndOptimizerReferences) {
  auto model = std::make_shared<TinyGpt>(1);
  const TensorImpl* wte_impl = model->wte->weight.impl();
  optim::AdamW opt(model->parameters(), optim::AdamOptions{.lr = 1e-2});
  Tensor idx = tensor(std::vector<int64_t>{1, 2, 3});
  auto forward = [&] { return sum((*model->lm_head)((*model->wte)(idx))); };
  forward().backward();
  opt.step();  // optimizer state exists in float32 now

  model->to(kFloat64);
  EXPECT_EQ(model->wte->weight.impl(), wte_impl);
  EXPECT_TRUE(model->lm_head->weight.is_same(model->wte->weight));
  EXPECT_EQ(model->wte->weight.dtype(), kFloat64);
  EXPECT_EQ(model->wte->weight.grad().dtype(), kFloat64);
  EXPECT_EQ(model->steps.dtype(), kInt64);  // integer buffers keep their dtype
  EXPECT_EQ(model->h->at<Block>(0)->attn->mask.dtype(), kFloat64);  // non-persistent too
  bool found = false;
  for (const Tensor& p : opt.param_groups()[0].params) {
    EXPECT_EQ(p.dtype(), kFloat64);
    found = found || p.impl() == wte_impl;
  }
  EXPECT_TRUE(found);
  // Training continues in float64; the optimizer's state follows the new dtype.
  opt.zero_grad();
  forward().backward();
  opt.step();
  EXPECT_EQ(opt.state(model->wte->weight)->buffers["exp_avg"].dtype(), kFloat64);
  EXPECT_EQ(opt.state(model->wte->weight)->step, 2);
}

TEST(NnModule, TrainEvalPropagatesAndDropoutFollows) {
  auto seq =
      std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::UnaryModule>>{
          std::make_shared<Linear>(8, 8), std::make_shared<nn::Dropout>(0.5)});
  auto model = std::make_shared<nn::ModuleDict>(
      std::initializer_list<std::pair<std::string, std::shared_ptr<nn::Module>>>{{"seq", seq}});
  EXPECT_TRUE(seq->is_training());
  model->eval();
  for (const auto& m : model->modules()) EXPECT_FALSE(m->is_training()) << m->type_name();
  Tensor x = randn({4, 8});
  Tensor h = (*(*seq)[0])(x);
  EXPECT_TRUE(allclose((*seq)(x), h));  // dropout is the identity in eval
  model->train();
  for (const auto& m : model->modules()) EXPECT_TRUE(m->is_training());
  Tensor y = (*(*seq)[1])(ones({1000}));
  double zeros_frac = mean(eq(y, zeros({1000})).to(kFloat64)).item<double>();
  EXPECT_NEAR(zeros_frac, 0.5, 0.08);
}

TEST(NnModule, ForwardHooksWrapForwardAndCanBeRemoved) {
  auto lin = std::make_shared<Linear>(3, 2);
  auto seq = std::make_shared<nn::Sequential>(
      std::initializer_list<std::shared_ptr<nn::UnaryModule>>{lin, std::make_shared<nn::ReLU>()});
  std::vector<std::string> calls;
  nn::HookHandle pre = lin->register_forward_pre_hook(
      [&](nn::Module& m, const TensorList& in) -> std::optional<TensorList> {
        calls.push_back("pre " + m.type_name());
        return TensorList{in[0] * 2.0};  // replaces the input
      });
  Tensor seen;
  nn::HookHandle post = lin->register_forward_hook(
      [&](nn::Module&, const TensorList& in, const Tensor& out) -> std::optional<Tensor> {
        calls.push_back("post");
        seen = in[0];
        return std::nullopt;
      });
  seq->register_forward_hook(
      [&](nn::Module& m, const TensorList&, const Tensor& out) -> std::optional<Tensor> {
        return out + 100.0;
      });
  Tensor x = ones({1, 3});
  Tensor y = (*seq)(x);
  EXPECT_EQ(calls, (std::vector<std::string>{"pre Linear", "post"}));
  EXPECT_TRUE(allclose(seen, x * 2.0));
  EXPECT_TRUE(allclose(y, relu(lin->forward(x * 2.0)) + 100.0));
  pre.remove();
  post.remove();
  post.remove();  // removing twice is harmless
  calls.clear();
  EXPECT_TRUE(allclose((*lin)(x), lin->forward(x)));
  EXPECT_TRUE(calls.empty());
}

TEST(NnModule, ParameterCountsAndZeroGrad) {
  EXPECT_EQ(Linear(3, 4).num_parameters(), 16);
  EXPECT_EQ(Linear(3, 4, false).num_parameters(), 12);
  auto gpt = std::make_shared<TinyGpt>(1);
  // wte 40 (shared with lm_head) + block (8 + 60 + 20 + 40 + 36) + ln_f 8.
  EXPECT_EQ(gpt->num_parameters(), 40 + 164 + 8);
  gpt->ln_f->weight.requires_grad_(false);
  EXPECT_EQ(gpt->num_parameters(/*trainable_only=*/true), 40 + 164 + 4);

  Tensor idx = tensor(std::vector<int64_t>{0, 1});
  sum((*gpt->ln_f)((*gpt->wte)(idx))).backward();
  EXPECT_TRUE(gpt->wte->weight.grad().defined());
  gpt->zero_grad(/*set_to_none=*/false);
  EXPECT_EQ(sum(abs(gpt->wte->weight.grad())).item<double>(), 0.0);
  gpt->zero_grad();
  EXPECT_FALSE(gpt->wte->weight.grad().defined());
}

TEST(NnLayers, LinearInitMatchesTorchStatistics) {
  manual_seed(1);
  Linear lin(256, 512);
  const double bound = 1.0 / 16.0;  // 1 / sqrt(in_features)
  EXPECT_EQ(lin.weight.sizes(), (Shape{512, 256}));
  EXPECT_LE(max(abs(lin.weight)).item<double>(), bound);
  EXPECT_LE(max(abs(lin.bias)).item<double>(), bound);
  EXPECT_GT(max(abs(lin.weight)).item<double>(), 0.99 * bound);
  EXPECT_NEAR(mean(lin.weight).item<double>(), 0.0, 5e-4);
  // U(-b, b) has variance b^2 / 3.
  EXPECT_NEAR(var(lin.weight).item<double>(), bound * bound / 3.0, 0.02 * bound * bound / 3.0);
  EXPECT_TRUE(lin.weight.requires_grad());
  EXPECT_EQ(lin.extra_repr(), "in_features=256, out_features=512, bias=True");
  // Same generator state, same weights.
  Generator g1(7), g2(7);
  Linear a(4, 3), b(4, 3);
  a.reset_parameters(&g1);
  b.reset_parameters(&g2);
  EXPECT_TRUE(allclose(a.weight, b.weight, 0, 0));
}

TEST(NnLayers, ForwardsMatchTheFunctionalOps) {
  Tensor x = randn({2, 3, 4});
  Linear lin(4, 5);
  EXPECT_TRUE(allclose(lin(x), matmul(x, lin.weight.t()) + lin.bias, 1e-5, 1e-6));
  nn::LayerNorm ln(4);
  EXPECT_TRUE(allclose(ln(x), layer_norm(x, {4})));
  nn::LayerNorm ln_nobias(Shape{3, 4}, 1e-5, true, false);
  EXPECT_FALSE(ln_nobias.bias.defined());
  EXPECT_EQ(keys(ln_nobias.state_dict()), std::vector<std::string>{"weight"});
  nn::RMSNorm rms(4, 1e-5);
  EXPECT_TRUE(allclose(rms(x), rms_norm(x, std::nullopt, 1e-5)));
  EXPECT_TRUE(allclose(nn::GELU("tanh")(x), gelu(x, "tanh")));
  EXPECT_TRUE(allclose(nn::SiLU()(x), silu(x)));
  EXPECT_TESSERA_ERROR(nn::GELU("fast"), ValueError, "[GELU]");
  EXPECT_TESSERA_ERROR(nn::Dropout(1.5), ValueError, "[Dropout]");

  nn::Embedding emb(6, 3, /*padding_idx=*/-1);
  EXPECT_EQ(emb.padding_idx, 5);
  EXPECT_EQ(sum(abs(emb.weight.select(0, 5))).item<double>(), 0.0);
  Tensor idx = tensor(std::vector<int64_t>{5, 2, 5});
  sum(emb(idx)).backward();
  EXPECT_EQ(sum(abs(emb.weight.grad().select(0, 5))).item<double>(), 0.0);
  EXPECT_EQ(sum(emb.weight.grad().select(0, 2)).item<double>(), 3.0);
}

TEST(NnLayers, ContainersAndRepr) {
  auto dict = std::make_shared<nn::ModuleDict>();
  dict->insert("proj", std::make_shared<Linear>(2, 3));
  dict->insert("act", std::make_shared<nn::GELU>("tanh"));
  EXPECT_EQ(dict->keys(), (std::vector<std::string>{"proj", "act"}));
  EXPECT_EQ(dict->at<Linear>("proj")->out_features, 3);
  EXPECT_TESSERA_ERROR((*dict)["missing"], IndexError, "[ModuleDict]");
  auto seq = std::make_shared<nn::Sequential>();
  seq->push_back(std::make_shared<Linear>(2, 3));
  seq->push_back(std::make_shared<nn::ReLU>());
  dict->insert("seq", seq);
  EXPECT_EQ(dict->repr(),
            "ModuleDict(\n"
            "  (proj): Linear(in_features=2, out_features=3, bias=True)\n"
            "  (act): GELU(approximate='tanh')\n"
            "  (seq): Sequential(\n"
            "    (0): Linear(in_features=2, out_features=3, bias=True)\n"
            "    (1): ReLU()\n"
            "  )\n"
            ")");
}

// replace_module on a container swapped the registered child only: forward, [] and iteration
// kept the old module while parameters() and state_dict() showed the new one.
TEST(NnLayers, ReplacingAContainersChildReachesItsForwardAndIndexing) {
  auto seq = std::make_shared<nn::Sequential>();
  seq->push_back(std::make_shared<Linear>(2, 2));
  seq->push_back(std::make_shared<nn::ReLU>());
  auto identity = std::make_shared<nn::ReLU>();
  seq->replace_module("0", identity);  // Linear -> ReLU
  EXPECT_EQ((*seq)[0].get(), identity.get());
  const Tensor x = tensor(std::vector<float>{-1.0f, 2.0f});
  EXPECT_TRUE(allclose((*seq)(x), tensor(std::vector<float>{0.0f, 2.0f})));
  EXPECT_TRUE(seq->parameters().empty());
  auto not_unary = std::make_shared<nn::ModuleList>();
  EXPECT_TESSERA_ERROR(seq->replace_module("1", not_unary), TypeError, "[Sequential]");
  EXPECT_EQ((*seq)[1]->type_name(), "ReLU");  // a refused swap changes nothing

  auto list = std::make_shared<nn::ModuleList>();
  list->push_back(std::make_shared<Linear>(2, 2));
  auto replacement = std::make_shared<Linear>(2, 4);
  list->replace_module("0", replacement);
  EXPECT_EQ(list->at<Linear>(0).get(), replacement.get());
  EXPECT_EQ(list->begin()->get(), replacement.get());
}

TEST(NnInit, GainsFansAndDistributions) {
  using namespace nn::init;
  EXPECT_DOUBLE_EQ(calculate_gain(Nonlinearity::Tanh), 5.0 / 3.0);
  EXPECT_DOUBLE_EQ(calculate_gain(Nonlinearity::ReLU), std::sqrt(2.0));
  EXPECT_DOUBLE_EQ(calculate_gain(Nonlinearity::LeakyReLU, 0.2), std::sqrt(2.0 / 1.04));
  EXPECT_EQ(calculate_fan_in_and_fan_out(zeros({8, 4, 3, 3})),
            (std::pair<int64_t, int64_t>{36, 72}));
  EXPECT_TESSERA_ERROR(calculate_fan_in_and_fan_out(zeros({4})), ValueError, "at least 2 dims");

  // Works on parameters that require grad (no_grad inside).
  Tensor w = empty({400, 600}, TensorOptions().with_requires_grad());
  xavier_uniform_(w);
  double a = std::sqrt(6.0 / 1000.0);
  EXPECT_LE(max(abs(w)).item<double>(), a);
  EXPECT_NEAR(var(w).item<double>(), a * a / 3.0, 0.02 * a * a / 3.0);
  kaiming_normal_(w, 0.0, FanMode::FanOut, Nonlinearity::ReLU);
  EXPECT_NEAR(nn::init::normal_(empty({1}), 0, 0).item<double>(), 0.0, 0.0);
  double std_want = std::sqrt(2.0) / std::sqrt(400.0);
  EXPECT_NEAR(tessera::std(w).item<double>(), std_want, 0.02 * std_want);
  xavier_normal_(w, 2.0);
  EXPECT_NEAR(tessera::std(w).item<double>(), 2.0 * std::sqrt(2.0 / 1000.0), 0.03);
  kaiming_uniform_(w);  // a = 0: bound sqrt(6 / fan_in)
  EXPECT_LE(max(abs(w)).item<double>(), std::sqrt(6.0 / 600.0));
  constant_(w, 0.25);
  EXPECT_EQ(min(w).item<double>(), 0.25);
  ones_(w);
  zeros_(w);
  EXPECT_EQ(max(abs(w)).item<double>(), 0.0);
  EXPECT_TRUE(w.requires_grad());
  EXPECT_TRUE(w.is_leaf());
  Generator g1(3), g2(3);
  Tensor u1 = uniform_(empty({5}), -1, 1, &g1), u2 = uniform_(empty({5}), -1, 1, &g2);
  EXPECT_TRUE(allclose(u1, u2, 0, 0));

  // Under a NoInitGuard (nested ones too) every function leaves its tensor as it was, and draws
  // nothing from the generator; after the outer one they fill again.
  Generator g(7), fresh(7);
  {
    nn::init::NoInitGuard outer;
    { nn::init::NoInitGuard inner; }
    constant_(w, 0.5);
    nn::init::normal_(w, 0.0, 1.0, &g);
    nn::init::uniform_(w, -1, 1, &g);
    kaiming_uniform_(w, 0.0, FanMode::FanIn, Nonlinearity::LeakyReLU, &g);
    xavier_normal_(w, 1.0, &g);
    ones_(w);
    EXPECT_EQ(max(abs(w)).item<double>(), 0.0);
    EXPECT_TESSERA_ERROR(normal_(zeros({2}, kInt64)), TypeError, "[init.normal_]");
  }
  EXPECT_TRUE(allclose(uniform_(empty({5}), -1, 1, &g), uniform_(empty({5}), -1, 1, &fresh), 0, 0))
      << "the guarded calls drew from the generator";
  ones_(w);
  EXPECT_EQ(min(w).item<double>(), 1.0);
  EXPECT_TESSERA_ERROR(normal_(zeros({2}, kInt64)), TypeError, "[init.normal_]");
}

}  // namespace
}  // namespace tessera
