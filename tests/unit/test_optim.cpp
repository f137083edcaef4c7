// Optimizers, schedulers and gradient utilities without PyTorch: the fused kernels against a
// composite (op-by-op) oracle, param-group rules, state_dict resume, scheduler shapes, clipping
// and accumulation. tests/e2e/test_optim_vs_torch.cpp compares trajectories with torch.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <memory>

#include "tessera/nn/layers.h"
#include "tessera/optim/adam.h"
#include "tessera/optim/clip_grad.h"
#include "tessera/optim/lr_scheduler.h"
#include "tessera/optim/sgd.h"
#include "tessera/tessera.h"
#include "testing/expect_error.h"

namespace tessera {
namespace {

Tensor param(const Shape& shape, DType dtype = kFloat32, uint64_t seed = 0) {
  Generator g(seed + 11);
  return randn(shape, TensorOptions(dtype), &g).requires_grad_();
}

// Sets a fresh pseudo-random gradient on every param (different each step).
void set_grads(const TensorList& params, int step) {
  for (size_t k = 0; k < params.size(); ++k) {
    Generator g(1000 * step + k);
    params[k].set_grad(randn(params[k].sizes(), TensorOptions(params[k].dtype()), &g));
  }
}

// ---- composite oracles: torch's update written with tensor ops ----

struct OracleState {
  Tensor m, v, vmax;
  int64_t step = 0;
};

void adam_oracle(Tensor p, const Tensor& grad, OracleState& s, const optim::AdamOptions& o,
                 bool decoupled) {
  autograd::NoGradGuard ng;
  double wd = o.weight_decay.value_or(0.0);
  Tensor g = o.maximize ? -grad : grad;
  ++s.step;
  if (decoupled)
    p.mul_(1.0 - o.lr * wd);
  else
    g = g + p * wd;
  if (!s.m.defined()) s.m = zeros_like(p), s.v = zeros_like(p), s.vmax = zeros_like(p);
  s.m = s.m * o.beta1 + g * (1.0 - o.beta1);
  s.v = s.v * o.beta2 + g * g * (1.0 - o.beta2);
  double bc1 = 1.0 - std::pow(o.beta1, s.step), bc2 = 1.0 - std::pow(o.beta2, s.step);
  if (o.amsgrad) s.vmax = maximum(s.vmax, s.v);
  Tensor denom = sqrt(o.amsgrad ? s.vmax : s.v) / std::sqrt(bc2) + o.eps;
  p.sub_(s.m / denom, o.lr / bc1);
}

void sgd_oracle(Tensor p, const Tensor& grad, OracleState& s, const optim::SGDOptions& o) {
  autograd::NoGradGuard ng;
  Tensor d = (o.maximize ? -grad : grad) + p * o.weight_decay;
  if (o.momentum != 0.0) {
    s.m = s.m.defined() ? s.m * o.momentum + d * (1.0 - o.dampening) : d.clone();
    d = o.nesterov ? d + s.m * o.momentum : s.m;
  }
  p.sub_(d, o.lr);
}

// Runs `steps` steps of opt on params and of the oracle on copies; compares after each.
void expect_matches_oracle(optim::Optimizer& opt, const TensorList& params,
                           const std::function<void(Tensor, const Tensor&, OracleState&)>& oracle,
                           double rtol, double atol, int steps = 5) {
  TensorList copies;
  for (const Tensor& p : params) copies.push_back(p.detach().clone());
  std::vector<OracleState> states(params.size());
  for (int step = 0; step < steps; ++step) {
    set_grads(params, step);
    opt.step();
    for (size_t k = 0; k < params.size(); ++k) {
      oracle(copies[k], params[k].grad(), states[k]);
      ASSERT_TRUE(allclose(params[k].detach().to(kFloat64), copies[k].to(kFloat64), rtol, atol))
          << "param " << k << " step " << step;
    }
  }
}

TEST(Optim, FusedAdamAndAdamWMatchTheCompositeFormula) {
  for (bool decoupled : {false, true}) {
    for (bool amsgrad : {false, true}) {
      optim::AdamOptions o{.lr = 0.01,
                           .beta1 = 0.8,
                           .beta2 = 0.95,
                           .eps = 1e-6,
                           .weight_decay = 0.1,
                           .amsgrad = amsgrad,
                           .maximize = amsgrad};
      TensorList params = {param({64, 33}), param({7}, kFloat32, 1)};
      std::unique_ptr<optim::Optimizer> opt;
      if (decoupled)
        opt = std::make_unique<optim::AdamW>(params, o);
      else
        opt = std::make_unique<optim::Adam>(params, o);
      expect_matches_oracle(
          *opt, params,
          [&](Tensor p, const Tensor& g, OracleState& s) { adam_oracle(p, g, s, o, decoupled); },
          1e-5, 1e-6);
    }
  }
}

TEST(Optim, AdamStepsParametersWithDifferentStepCounts) {
  // b has no gradient in the first step, so its bias corrections lag a's: the group's update
  // goes to the list kernel as two calls, one per step count.
  const optim::AdamOptions o{.lr = 0.01, .weight_decay = 0.1};
  Tensor a = param({5, 3}), b = param({4}, kFloat32, 1);
  optim::AdamW opt({a, b}, o);
  Tensor a_copy = a.detach().clone(), b_copy = b.detach().clone();
  OracleState sa, sb;
  for (int step = 0; step < 3; ++step) {
    set_grads({a, b}, step);
    if (step == 0) b.set_grad(Tensor());
    opt.step();
    adam_oracle(a_copy, a.grad(), sa, o, true);
    if (step > 0) adam_oracle(b_copy, b.grad(), sb, o, true);
  }
  EXPECT_EQ(opt.state(a)->step, 3);
  EXPECT_EQ(opt.state(b)->step, 2);
  EXPECT_TRUE(allclose(a.detach(), a_copy, 1e-5, 1e-6));
  EXPECT_TRUE(allclose(b.detach(), b_copy, 1e-5, 1e-6));
}

TEST(Optim, FusedSgdMatchesTheCompositeFormula) {
  const optim::SGDOptions variants[] = {
      {.lr = 0.1},
      {.lr = 0.05, .momentum = 0.9, .dampening = 0.2, .weight_decay = 0.01},
      {.lr = 0.05, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true, .maximize = true}};
  for (const optim::SGDOptions& o : variants) {
    TensorList params = {param({16, 9}, kFloat64), param({3}, kFloat64, 1)};
    optim::SGD opt(params, o);
    expect_matches_oracle(
        opt, params, [&](Tensor p, const Tensor& g, OracleState& s) { sgd_oracle(p, g, s, o); },
        1e-12, 1e-14);
  }
}

TEST(Optim, AdamFirstStepMovesEachWeightByLr) {
  // Step 1: m_hat = g and v_hat = g^2, so the update is lr * g / (|g| + eps).
  Tensor p = tensor({1.0, -2.0, 3.0}, kFloat64).requires_grad_();
  optim::Adam opt({p}, optim::AdamOptions{.lr = 0.1, .eps = 0.0});
  p.set_grad(tensor({0.5, -4.0, 1e-3}, kFloat64));
  opt.step();
  EXPECT_TRUE(allclose(p.detach(), tensor({0.9, -1.9, 2.9}, kFloat64), 1e-12, 1e-12));
  EXPECT_EQ(opt.state(p)->step, 1);
  EXPECT_EQ(opt.state(p)->buffers.keys(), (std::vector<std::string>{"exp_avg", "exp_avg_sq"}));
}

TEST(Optim, Bf16ParamsKeepFloat32State) {
  Tensor p32 = param({256}), p16 = p32.detach().to(kBFloat16).requires_grad_();
  Tensor ref = p16.detach().to(kFloat32).requires_grad_();
  optim::AdamW opt16({p16}, optim::AdamOptions{.lr = 1e-2});
  optim::AdamW opt32({ref}, optim::AdamOptions{.lr = 1e-2});
  for (int step = 0; step < 3; ++step) {
    set_grads({ref}, step);
    p16.set_grad(ref.grad().to(kBFloat16));
    opt16.step();
    opt32.step();
  }
  EXPECT_EQ(opt16.state(p16)->buffers["exp_avg"].dtype(), kFloat32);
  EXPECT_EQ(p16.dtype(), kBFloat16);
  EXPECT_TRUE(allclose(p16.detach().to(kFloat32), ref.detach(), 2e-2, 2e-2));
}

TEST(Optim, NonContiguousParamsAndGradsAreUpdated) {
  Tensor base = param({4, 6}, kFloat64);
  Tensor p = base.detach().t().requires_grad_();  // a strided leaf
  Tensor q = p.detach().contiguous().requires_grad_();
  ASSERT_FALSE(p.is_contiguous());
  optim::SGD opt_p({p}, {.lr = 0.1, .momentum = 0.9});
  optim::SGD opt_q({q}, {.lr = 0.1, .momentum = 0.9});
  for (int step = 0; step < 3; ++step) {
    Tensor g = randn({4, 6}, kFloat64).t();  // strided grad
    p.set_grad(g);
    q.set_grad(g.contiguous());
    opt_p.step();
    opt_q.step();
  }
  EXPECT_TRUE(allclose(p.detach(), q.detach(), 0, 0));
  EXPECT_EQ(p.data_ptr(), base.data_ptr());  // updated in place, still the same storage
}

TEST(Optim, ParamGroupsOptionsAndValidation) {
  Tensor w = param({3, 3}), b = param({3});
  optim::SGD opt({optim::ParamGroup{{w}, {}}, optim::ParamGroup{{b}, {{"lr", 0.5}}}},
                 optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
  // Every group lists every option, in the defaults' order.
  EXPECT_EQ(opt.param_groups()[1].options.keys(),
            (std::vector<std::string>{"lr", "momentum", "dampening", "weight_decay", "nesterov",
                                      "maximize"}));
  EXPECT_EQ(opt.param_groups()[0].options.at("lr"), 0.1);
  EXPECT_EQ(opt.param_groups()[1].options.at("lr"), 0.5);
  EXPECT_EQ(opt.param_groups()[1].options.at("momentum"), 0.9);
  Tensor b_before = b.detach().clone();
  b.set_grad(ones({3}));
  opt.step();  // w has no grad: skipped, no state
  EXPECT_EQ(opt.state(w), nullptr);
  EXPECT_TRUE(allclose(b.detach(), b_before - 0.5));

  EXPECT_TESSERA_ERROR(opt.add_param_group({{w}, {}}), ValueError, "one group only");
  EXPECT_TESSERA_ERROR(opt.add_param_group({{param({2})}, {{"betas", 0.9}}}), ValueError,
                       "[SGD] expected options among");
  EXPECT_TESSERA_ERROR(optim::SGD({param({2})}, {.lr = -1.0}), ValueError, "lr >= 0");
  EXPECT_TESSERA_ERROR(optim::SGD({param({2})}, {.lr = 0.1, .nesterov = true}), ValueError,
                       "nesterov");
  EXPECT_TESSERA_ERROR(optim::Adam({param({2})}, {.beta2 = 1.0}), ValueError, "beta2 in [0, 1)");
  EXPECT_TESSERA_ERROR(optim::AdamW(TensorList{}), ValueError, "at least one parameter");
  EXPECT_TESSERA_ERROR(optim::SGD({w * 2.0}), ValueError, "leaf");
  EXPECT_TESSERA_ERROR(optim::SGD({zeros({2}, kInt64)}), ValueError, "floating-point");
  EXPECT_EQ(optim::AdamW({param({2})}).param_groups()[0].options.at("weight_decay"), 1e-2);
  EXPECT_EQ(optim::Adam({param({2})}).param_groups()[0].options.at("weight_decay"), 0.0);
}

TEST(Optim, WeightDecayGroupsSplitMatricesFromVectors) {
  nn::Linear lin(3, 4);
  nn::LayerNorm ln(4);
  Tensor frozen = param({2, 2}).requires_grad_(false);
  TensorList params = {lin.weight, lin.bias, ln.weight, ln.bias, frozen};
  std::vector<optim::ParamGroup> groups = optim::weight_decay_param_groups(params, 0.1);
  ASSERT_EQ(groups.size(), 2u);
  ASSERT_EQ(groups[0].params.size(), 1u);
  EXPECT_TRUE(groups[0].params[0].is_same(lin.weight));
  EXPECT_EQ(groups[0].options.at("weight_decay"), 0.1);
  EXPECT_EQ(groups[1].params.size(), 3u);
  EXPECT_EQ(groups[1].options.at("weight_decay"), 0.0);
}

TEST(Optim, ZeroGradClearsOrZeroes) {
  Tensor p = param({3});
  optim::SGD opt({p});
  p.set_grad(ones({3}));
  opt.zero_grad(/*set_to_none=*/false);
  EXPECT_TRUE(allclose(p.grad(), zeros({3})));
  opt.zero_grad();
  EXPECT_FALSE(p.grad().defined());
}

// ---- state_dict resume ----

using MakeOpt = std::function<std::unique_ptr<optim::Optimizer>(const TensorList&)>;
using MakeSched = std::function<std::unique_ptr<optim::LRScheduler>(optim::Optimizer&)>;

optim::StateDict snapshot(const optim::StateDict& sd) {
  optim::StateDict copy;
  copy.scalars = sd.scalars;
  for (const auto& [k, t] : sd.tensors) copy.tensors.insert(k, t.clone());
  return copy;
}

// 20 steps straight vs 10 steps, a checkpoint, fresh objects loading it, 10 more: identical.
void expect_resume_is_exact(const MakeOpt& make_opt, const MakeSched& make_sched) {
  auto fresh_params = [] { return TensorList{param({5, 4}, kFloat64), param({4}, kFloat64, 1)}; };
  auto train = [&](const TensorList& params, optim::Optimizer& opt, optim::LRScheduler& sched,
                   int from, int to) {
    for (int step = from; step < to; ++step) {
      set_grads(params, step);
      opt.step();
      sched.step();
    }
  };
  TensorList straight = fresh_params();
  auto opt = make_opt(straight);
  auto sched = make_sched(*opt);
  train(straight, *opt, *sched, 0, 20);

  TensorList first = fresh_params();
  auto opt1 = make_opt(first);
  auto sched1 = make_sched(*opt1);
  train(first, *opt1, *sched1, 0, 10);
  optim::StateDict opt_state = snapshot(opt1->state_dict()), sched_state = sched1->state_dict();
  TensorList resumed = fresh_params();
  for (size_t k = 0; k < resumed.size(); ++k) {
    autograd::NoGradGuard ng;
    resumed[k].copy_(first[k]);
  }
  train(first, *opt1, *sched1, 10, 15);  // the original keeps going: the snapshot must not move
  auto opt2 = make_opt(resumed);
  auto sched2 = make_sched(*opt2);
  opt2->load_state_dict(opt_state);
  sched2->load_state_dict(sched_state);
  EXPECT_EQ(sched2->last_step(), 10);
  train(resumed, *opt2, *sched2, 10, 20);
  for (size_t k = 0; k < straight.size(); ++k) {
    EXPECT_TRUE(allclose(resumed[k], straight[k], 0, 0)) << opt->name() << " param " << k;
  }
}

TEST(Optim, StateDictResumesTheIdenticalTrajectory) {
  expect_resume_is_exact(
      [](const TensorList& p) {
        return std::make_unique<optim::SGD>(
            p, optim::SGDOptions{.lr = 0.05, .momentum = 0.9, .nesterov = true});
      },
      [](optim::Optimizer& o) { return std::make_unique<optim::StepLR>(o, 4, 0.5); });
  expect_resume_is_exact(
      [](const TensorList& p) {
        return std::make_unique<optim::Adam>(p, optim::AdamOptions{.lr = 0.01, .amsgrad = true});
      },
      [](optim::Optimizer& o) {
        return std::make_unique<optim::LambdaLR>(o, [](int64_t t) { return 1.0 / (1.0 + t); });
      });
  expect_resume_is_exact(
      [](const TensorList& p) {
        return std::make_unique<optim::AdamW>(optim::weight_decay_param_groups(p, 0.1),
                                              optim::AdamOptions{.lr = 0.01});
      },
      [](optim::Optimizer& o) { return std::make_unique<optim::WarmupCosineLR>(o, 3, 15, 1e-4); });
}

TEST(Optim, StateDictLayoutAndLoadErrors) {
  Tensor w = param({2, 3}), b = param({3});
  optim::AdamW opt(optim::weight_decay_param_groups({w, b}, 0.1), {.lr = 0.01});
  set_grads({w, b}, 0);
  opt.step();
  optim::StateDict sd = opt.state_dict();
  EXPECT_EQ(sd.tensors.keys(), (std::vector<std::string>{"state.0.exp_avg", "state.0.exp_avg_sq",
                                                         "state.1.exp_avg", "state.1.exp_avg_sq"}));
  EXPECT_EQ(sd.scalars.at("param_groups.0.weight_decay"), 0.1);
  EXPECT_EQ(sd.scalars.at("param_groups.1.weight_decay"), 0.0);
  EXPECT_EQ(sd.scalars.at("param_groups.1.num_params"), 1.0);
  EXPECT_EQ(sd.scalars.at("state.1.step"), 1.0);

  optim::StateDict bad = sd;
  bad.tensors["state.1.exp_avg"] = zeros({4});
  EXPECT_TESSERA_ERROR(opt.load_state_dict(bad), ValueError, "'state.1.exp_avg' of shape [3]");
  bad = sd;
  bad.scalars["param_groups.0.num_params"] = 2.0;
  EXPECT_TESSERA_ERROR(opt.load_state_dict(bad), ValueError, "params in group 0");
  bad = sd;
  bad.scalars.insert("param_groups.0.momentum", 0.9);
  EXPECT_TESSERA_ERROR(opt.load_state_dict(bad), ValueError, "expected options among");
  bad = sd;
  bad.tensors.insert("state.7.exp_avg", zeros({3}));
  EXPECT_TESSERA_ERROR(opt.load_state_dict(bad), ValueError, "state.7.exp_avg");
  // A failed load leaves the optimizer as it was.
  EXPECT_EQ(opt.state(w)->step, 1);
  EXPECT_EQ(opt.param_groups()[0].options.at("weight_decay"), 0.1);
}

// ---- schedulers ----

TEST(LrScheduler, WarmupCosineShape) {
  Tensor p = param({1});
  optim::SGD opt({p}, {.lr = 1.0});
  optim::WarmupCosineLR sched(opt, 4, 12, 0.1);
  std::vector<double> lrs = {sched.last_lr()[0]};
  for (int i = 0; i < 14; ++i) {
    sched.step();
    lrs.push_back(opt.param_groups()[0].options.at("lr"));
  }
  EXPECT_EQ(lrs[0], 0.0);
  EXPECT_DOUBLE_EQ(lrs[2], 0.5);
  EXPECT_DOUBLE_EQ(lrs[4], 1.0);                // peak at the end of warmup
  EXPECT_NEAR(lrs[8], 0.1 + 0.9 * 0.5, 1e-12);  // halfway through the cosine
  EXPECT_DOUBLE_EQ(lrs[12], 0.1);
  EXPECT_DOUBLE_EQ(lrs[14], 0.1);  // constant after max_steps
  for (int i = 5; i <= 12; ++i) EXPECT_LT(lrs[i], lrs[i - 1]);
  EXPECT_TESSERA_ERROR(optim::WarmupCosineLR(opt, 5, 5), ValueError, "[WarmupCosineLR]");
  EXPECT_TESSERA_ERROR(optim::StepLR(opt, 0), ValueError, "[StepLR]");
}

TEST(LrScheduler, StepAndLambdaAndStateDict) {
  Tensor p = param({1});
  optim::SGD opt(
      {optim::ParamGroup{{p}, {}}, optim::ParamGroup{{param({1}, kFloat32, 1)}, {{"lr", 0.2}}}},
      {.lr = 1.0});
  optim::StepLR step(opt, 2, 0.5);
  for (int i = 0; i < 5; ++i) step.step();
  EXPECT_EQ(step.last_lr(), (std::vector<double>{0.25, 0.05}));  // gamma^(5 / 2)
  optim::StateDict sd = step.state_dict();
  EXPECT_EQ(sd.scalars.at("last_step"), 5.0);
  EXPECT_EQ(sd.scalars.at("base_lrs.1"), 0.2);

  // Another scheduler on the decayed optimizer starts from the initial lrs (torch's
  // group["initial_lr"]; it took the decayed 0.25, so chained schedules compounded), and a
  // state sets its step.
  optim::StepLR resumed(opt, 2, 0.5);
  EXPECT_EQ(resumed.base_lrs(), (std::vector<double>{1.0, 0.2}));
  resumed.load_state_dict(sd);
  EXPECT_EQ(resumed.last_step(), 5);
  resumed.step();
  EXPECT_EQ(resumed.last_lr(), (std::vector<double>{0.125, 0.025}));
  resumed.step(0);  // torch's step(epoch), as SequentialLR restarts a schedule
  EXPECT_EQ(resumed.last_lr(), (std::vector<double>{1.0, 0.2}));

  // A warm-up then a decay, chained: the decay's base is not the warm-up's step-0 lr of 0.
  optim::LambdaLR warmup(opt, [](int64_t t) { return t / 10.0; });
  EXPECT_EQ(warmup.last_lr()[0], 0.0);
  optim::LambdaLR lambda(opt, [](int64_t t) { return t < 3 ? 1.0 : 0.1; });
  EXPECT_EQ(lambda.base_lrs()[0], 1.0);
  for (int i = 0; i < 3; ++i) lambda.step();
  EXPECT_DOUBLE_EQ(lambda.last_lr()[0], 0.1);
  optim::StateDict missing;
  missing.scalars.insert("last_step", 1.0);
  EXPECT_TESSERA_ERROR(lambda.load_state_dict(missing), ValueError, "base lrs");
}

// ---- gradient utilities ----

TEST(ClipGrad, NormsAndClipping) {
  Tensor a = param({2}), b = param({1}), none = param({3});
  a.set_grad(tensor({3.0, 0.0}));
  b.set_grad(tensor({4.0}));
  EXPECT_FLOAT_EQ(optim::grad_norm({a, b, none}).item<float>(), 5.0f);
  EXPECT_FLOAT_EQ(optim::grad_norm({a, b}, 1.0).item<float>(), 7.0f);
  EXPECT_FLOAT_EQ(optim::grad_norm({a, b}, optim::kInfNorm).item<float>(), 4.0f);
  // Below the threshold: unchanged (the coefficient clamps to 1).
  Tensor total = optim::clip_grad_norm_({a, b}, 10.0);
  EXPECT_EQ(total.dtype(), kFloat32);
  EXPECT_TRUE(allclose(a.grad(), tensor({3.0, 0.0}), 0, 0));
  total = optim::clip_grad_norm_({a, b}, 1.0);
  EXPECT_FLOAT_EQ(total.item<float>(), 5.0f);
  EXPECT_NEAR(optim::grad_norm({a, b}).item<double>(), 1.0, 1e-6);
  EXPECT_NEAR(b.grad().item<double>(), 4.0 / (5.0 + 1e-6), 1e-6);
  EXPECT_EQ(optim::clip_grad_norm_({none}, 1.0).item<double>(), 0.0);
  b.set_grad(tensor({std::nan("")}));
  EXPECT_TESSERA_ERROR(optim::clip_grad_norm_({a, b}, 1.0, 2.0, true), RuntimeError,
                       "[clip_grad_norm_]");
}

TEST(GradAccumulation, MicroBatchesGiveTheFullBatchGradient) {
  Tensor w = param({3, 1}, kFloat64);
  Tensor x = randn({8, 3}, kFloat64), y = randn({8, 1}, kFloat64);
  mse_loss(matmul(x, w), y).backward();
  Tensor full = w.grad().clone();
  w.set_grad(Tensor());

  optim::GradAccumulator accum(4);
  std::vector<bool> done;
  for (int64_t i = 0; i < 4; ++i) {
    EXPECT_EQ(accum.is_last_micro_step(), i == 3);
    done.push_back(
        accum.backward(mse_loss(matmul(x.narrow(0, 2 * i, 2), w), y.narrow(0, 2 * i, 2))));
  }
  EXPECT_EQ(done, (std::vector<bool>{false, false, false, true}));
  EXPECT_EQ(accum.micro_step(), 0);
  EXPECT_TRUE(allclose(w.grad(), full, 1e-12, 1e-14));
  EXPECT_TESSERA_ERROR(optim::GradAccumulator(0), ValueError, "micro_steps > 0");
}

}  // namespace
}  // namespace tessera
