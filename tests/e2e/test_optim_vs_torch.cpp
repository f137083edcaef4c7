// Optimizers, schedulers and clip_grad_norm_ against torch 1.13: tests/reference/
// optim_reference.py runs the same deterministic float64 problem (a 3-5-2 tanh MLP on closed-form
// data, parameters from closed-form values) and prints every trajectory as JSON. Skipped with a
// message when /usr/bin/python3 cannot import torch.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tessera/optim/adam.h"
#include "tessera/optim/clip_grad.h"
#include "tessera/optim/lr_scheduler.h"
#include "tessera/optim/sgd.h"
#include "tessera/tessera.h"
#include "testing/torch_reference.h"

namespace tessera {
namespace {

using Rows = std::vector<std::vector<double>>;
using Reference = std::map<std::string, Rows>;

constexpr int kSteps = 20;
constexpr double kRtol = 1e-6, kAtol = 1e-10;

// ---- the reference run ----

// The script's output: {"name": [[number, ...], ...], ...}. Returns false on anything else.
bool parse_reference(const std::string& text, Reference& out) {
  nlohmann::json doc = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object()) return false;
  try {
    for (const auto& [name, rows] : doc.items()) out[name] = rows.get<Rows>();
  } catch (const nlohmann::json::exception&) {
    return false;
  }
  return true;
}

class OptimVsTorch : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string out;
    if (testing::run_command("/usr/bin/python3 -c 'import torch' 2>&1", out) != 0) {
      skip_reason_ =
          "PyTorch reference unavailable: /usr/bin/python3 cannot import torch "
          "(install python3-torch)";
      return;
    }
    std::filesystem::path script = testing::tests_dir() / "reference" / "optim_reference.py";
    // stderr (warnings, tracebacks) goes to the test log; stdout must be the JSON alone.
    out.clear();
    const int status = testing::run_command("/usr/bin/python3 " + script.string(), out);
    if (status != 0 || !parse_reference(out, *reference_)) {
      error_ = "optim_reference.py failed (status " + std::to_string(status) + "): " + out;
    }
  }

  void SetUp() override {
    if (!skip_reason_.empty()) GTEST_SKIP() << skip_reason_;
    ASSERT_TRUE(error_.empty()) << error_;
  }

  static const Rows& ref(const std::string& name) {
    auto it = reference_->find(name);
    if (it == reference_->end()) throw std::runtime_error("no reference case " + name);
    return it->second;
  }

  static inline std::string skip_reason_, error_;
  static inline std::unique_ptr<Reference> reference_ = std::make_unique<Reference>();
};

void expect_rows_near(const Rows& got, const Rows& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t r = 0; r < got.size(); ++r) {
    ASSERT_EQ(got[r].size(), want[r].size()) << what << " row " << r;
    for (size_t c = 0; c < got[r].size(); ++c) {
      ASSERT_NEAR(got[r][c], want[r][c], kAtol + kRtol * std::abs(want[r][c]))
          << what << ": row (step) " << r << ", element " << c;
    }
  }
}

// ---- the same problem in tessera (keep in sync with optim_reference.py) ----

const std::vector<Shape> kShapes = {{5, 3}, {5}, {2, 5}, {2}};  // W1, b1, W2, b2

Tensor from_formula(const Shape& shape, const std::function<double(int64_t)>& f) {
  std::vector<double> v(shape_numel(shape));
  for (int64_t i = 0; i < static_cast<int64_t>(v.size()); ++i) v[i] = f(i);
  return tensor(v, shape);
}

// Parameter k, element i (row-major) = 0.5 * sin(1 + 0.7 i + 1.9 k).
TensorList make_params() {
  TensorList params;
  for (size_t k = 0; k < kShapes.size(); ++k) {
    params.push_back(from_formula(kShapes[k], [k](int64_t i) {
                       return 0.5 * std::sin(1.0 + 0.7 * i + 1.9 * k);
                     }).requires_grad_());
  }
  return params;
}

Tensor loss_fn(const TensorList& p) {
  static const Tensor x =
      from_formula({8, 3}, [](int64_t i) { return std::sin(0.7 * (i / 3) + 1.3 * (i % 3)); });
  static const Tensor y =
      from_formula({8, 2}, [](int64_t i) { return std::cos(0.5 * (i / 2) - 0.9 * (i % 2)); });
  return mse_loss(linear(tanh(linear(x, p[0], p[1])), p[2], p[3]), y);
}

std::vector<double> flat(const TensorList& ts) {
  std::vector<double> out;
  for (const Tensor& t : ts) {
    Tensor c = t.detach().contiguous();
    out.insert(out.end(), c.data_ptr<double>(), c.data_ptr<double>() + c.numel());
  }
  return out;
}

using MakeOptimizer = std::function<std::unique_ptr<optim::Optimizer>(const TensorList&)>;
using MakeScheduler = std::function<std::unique_ptr<optim::LRScheduler>(optim::Optimizer&)>;

// Runs kSteps steps; returns the flattened parameters after each and the lrs each step used.
std::pair<Rows, Rows> run(const MakeOptimizer& make_opt, const MakeScheduler& make_sched = {}) {
  TensorList params = make_params();
  std::unique_ptr<optim::Optimizer> opt = make_opt(params);
  std::unique_ptr<optim::LRScheduler> sched = make_sched ? make_sched(*opt) : nullptr;
  Rows rows, lrs;
  for (int step = 0; step < kSteps; ++step) {
    opt->zero_grad();
    loss_fn(params).backward();
    lrs.emplace_back();
    for (const optim::ParamGroup& g : opt->param_groups()) lrs.back().push_back(g.options.at("lr"));
    opt->step();
    if (sched) sched->step();
    rows.push_back(flat(params));
  }
  return {rows, lrs};
}

template <class Opt, class Options>
MakeOptimizer make(Options options) {
  return [options](const TensorList& p) { return std::make_unique<Opt>(p, options); };
}

TEST_F(OptimVsTorch, SgdTrajectories) {
  using optim::SGD;
  expect_rows_near(run(make<SGD>(optim::SGDOptions{.lr = 0.1})).first, ref("sgd"), "sgd");
  expect_rows_near(run(make<SGD>(optim::SGDOptions{
                           .lr = 0.05, .momentum = 0.9, .dampening = 0.1, .weight_decay = 0.01}))
                       .first,
                   ref("sgd_momentum_dampening_wd"), "sgd_momentum_dampening_wd");
  expect_rows_near(run(make<SGD>(optim::SGDOptions{
                           .lr = 0.05, .momentum = 0.8, .weight_decay = 0.02, .nesterov = true}))
                       .first,
                   ref("sgd_nesterov_wd"), "sgd_nesterov_wd");
  expect_rows_near(
      run(make<SGD>(optim::SGDOptions{.lr = 0.01, .momentum = 0.5, .maximize = true})).first,
      ref("sgd_maximize"), "sgd_maximize");
}

TEST_F(OptimVsTorch, AdamTrajectories) {
  using optim::Adam;
  expect_rows_near(
      run(make<Adam>(optim::AdamOptions{
              .lr = 0.02, .beta1 = 0.9, .beta2 = 0.99, .eps = 1e-8, .weight_decay = 0.01}))
          .first,
      ref("adam"), "adam");
  expect_rows_near(run(make<Adam>(optim::AdamOptions{
                           .lr = 0.02, .beta1 = 0.8, .beta2 = 0.95, .eps = 1e-6, .amsgrad = true}))
                       .first,
                   ref("adam_amsgrad"), "adam_amsgrad");
}

TEST_F(OptimVsTorch, AdamWTrajectories) {
  using optim::AdamW;
  expect_rows_near(run(make<AdamW>(optim::AdamOptions{.lr = 0.02, .weight_decay = 0.1})).first,
                   ref("adamw"), "adamw");
  expect_rows_near(run(make<AdamW>(optim::AdamOptions{
                           .lr = 0.01, .weight_decay = 0.05, .amsgrad = true, .maximize = true}))
                       .first,
                   ref("adamw_amsgrad_maximize"), "adamw_amsgrad_maximize");
}

TEST_F(OptimVsTorch, AdamWWithDecayGroupsAndPerGroupLr) {
  auto make_opt = [](const TensorList& p) {
    std::vector<optim::ParamGroup> groups = optim::weight_decay_param_groups(p, 0.1);
    groups[1].options.insert("lr", 0.03);  // the no-decay group (biases) gets its own lr
    return std::make_unique<optim::AdamW>(groups, optim::AdamOptions{.lr = 0.01});
  };
  expect_rows_near(run(make_opt).first, ref("adamw_groups"), "adamw_groups");
}

TEST_F(OptimVsTorch, AdamWWithWarmupCosineSchedule) {
  auto [rows, lrs] = run(make<optim::AdamW>(optim::AdamOptions{.lr = 0.05, .weight_decay = 0.1}),
                         [](optim::Optimizer& opt) {
                           return std::make_unique<optim::WarmupCosineLR>(opt, 5, 15, 0.005);
                         });
  expect_rows_near(lrs, ref("adamw_warmup_cosine_lrs"), "adamw_warmup_cosine lrs");
  expect_rows_near(rows, ref("adamw_warmup_cosine"), "adamw_warmup_cosine");
}

// The lrs of two groups (base 0.1 and 0.03) at steps 0..30.
Rows scheduler_lrs(const MakeScheduler& make_sched) {
  std::vector<optim::ParamGroup> groups = {
      {{zeros({1}, TensorOptions(kFloat64).with_requires_grad())}, {{"lr", 0.1}}},
      {{zeros({1}, TensorOptions(kFloat64).with_requires_grad())}, {{"lr", 0.03}}}};
  optim::SGD opt(groups);
  std::unique_ptr<optim::LRScheduler> sched = make_sched(opt);
  Rows rows = {sched->last_lr()};
  for (int step = 0; step < 30; ++step) {
    opt.step();
    sched->step();
    rows.push_back(sched->last_lr());
    EXPECT_EQ(opt.param_groups()[0].options.at("lr"), rows.back()[0]);
  }
  return rows;
}

TEST_F(OptimVsTorch, SchedulerValues) {
  expect_rows_near(scheduler_lrs([](optim::Optimizer& opt) {
                     return std::make_unique<optim::WarmupCosineLR>(opt, 5, 20, 0.001);
                   }),
                   ref("sched_warmup_cosine"), "warmup_cosine");
  expect_rows_near(scheduler_lrs([](optim::Optimizer& opt) {
                     return std::make_unique<optim::StepLR>(opt, 3, 0.5);
                   }),
                   ref("sched_step"), "step");
  expect_rows_near(scheduler_lrs([](optim::Optimizer& opt) {
                     return std::make_unique<optim::LambdaLR>(
                         opt, [](int64_t t) { return std::pow(0.95, static_cast<double>(t)); });
                   }),
                   ref("sched_lambda"), "lambda");
}

TEST_F(OptimVsTorch, ClipGradNorm) {
  const std::vector<std::pair<double, std::string>> norms = {
      {2.0, "2"}, {1.0, "1"}, {optim::kInfNorm, "inf"}, {3.0, "3"}};
  for (const auto& [norm_type, key] : norms) {
    for (double max_norm : {1.5, 1000.0}) {
      std::string name = "clip_" + key + "_" + (max_norm == 1.5 ? "1.5" : "1000");
      TensorList params = make_params();
      for (size_t k = 0; k < params.size(); ++k) {
        params[k].set_grad(from_formula(params[k].sizes(), [k](int64_t i) {
          return 3.0 * std::cos(0.3 * i + static_cast<double>(k));
        }));
      }
      Tensor total = optim::clip_grad_norm_(params, max_norm, norm_type);
      TensorList grads;
      for (const Tensor& p : params) grads.push_back(p.grad());
      expect_rows_near({{total.item<double>()}, flat(grads)}, ref(name), name);
    }
  }
}

}  // namespace
}  // namespace tessera
