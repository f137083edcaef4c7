// PipelineExecutor against the same model run serially: a float64 chain of Linear + tanh layers
// split unevenly into p v chunks, micro-batches of varying size (so shapes must travel with the
// tensors) and an MSE loss. For every schedule the summed loss and every local gradient equal
// the serial ones within 1e-12, over the world group and over two pipelines side by side.
#include <gtest/gtest.h>

#include <chrono>
#include <numeric>
#include <optional>
#include <thread>

#include "dist_test_util.h"
#include "tessera/autograd/engine.h"
#include "tessera/dist/pipeline.h"
#include "tessera/ops/elementwise.h"
#include "tessera/ops/linalg.h"
#include "tessera/ops/nn.h"
#include "tessera/ops/reduce.h"

namespace tessera::dist::testing {
namespace {

constexpr int64_t kWidth = 4;

// Layers of global chunk k out of n: 3 for the first, then 2, 1, 2, 1, ...: uneven everywhere.
std::vector<int> chunk_sizes(int n) {
  std::vector<int> sizes(n);
  for (int k = 0; k < n; ++k) sizes[k] = k == 0 ? 3 : 1 + k % 2;
  return sizes;
}

struct Layer {
  Tensor weight, bias;
};

// The toy model every rank can rebuild: `layers` Linear(kWidth, kWidth) + tanh from one seed,
// and m micro-batches of 1 + i % 3 rows with their targets.
struct Toy {
  std::vector<Layer> layers;
  std::vector<Tensor> x, y;

  Toy(int n_layers, int64_t m, uint64_t seed = 7) {
    Generator gen(seed);
    for (int l = 0; l < n_layers; ++l) {
      Tensor w = randn({kWidth, kWidth}, kFloat64, &gen) * 0.6;
      Tensor b = randn({kWidth}, kFloat64, &gen) * 0.1;
      layers.push_back({w.requires_grad_(), b.requires_grad_()});
    }
    for (int64_t i = 0; i < m; ++i) {
      x.push_back(randn({1 + i % 3, kWidth}, kFloat64, &gen));
      y.push_back(randn({1 + i % 3, kWidth}, kFloat64, &gen));
    }
  }

  Tensor apply(Tensor h, int first, int count) const {
    for (int l = first; l < first + count; ++l)
      h = tanh(linear(h, layers[l].weight, layers[l].bias));
    return h;
  }

  // The serial step: sum of the micro-batch losses, gradients of their mean in the leaves.
  double serial_step() {
    const int64_t m = static_cast<int64_t>(x.size());
    double sum = 0;
    for (int64_t i = 0; i < m; ++i) {
      Tensor loss = mse_loss(apply(x[i], 0, static_cast<int>(layers.size())), y[i]);
      sum += loss.item().to_double();
      autograd::backward({loss}, {full_like(loss, 1.0 / static_cast<double>(m))});
    }
    return sum;
  }

  void sgd(double lr) {
    for (Layer& l : layers)
      for (Tensor* t : {&l.weight, &l.bias}) {
        // Another rank's layer has no gradient here: it stays as it is.
        Tensor updated = t->grad().defined() ? t->detach() - t->grad() * lr : t->detach();
        *t = updated.requires_grad_();
      }
  }
};

double max_abs_diff(const Tensor& a, const Tensor& b) {
  return (a - b).abs().max().item().to_double();
}

// One pipeline configuration: the executor over `group` with this rank's chunks of a Toy, and
// the serial Toy it must reproduce.
void expect_matches_serial(const std::shared_ptr<ProcessGroup>& group, PipelineScheduleKind kind,
                           int v, int64_t m, int steps = 3) {
  const int p = group->size(), s = group->rank(), n = p * v;
  SCOPED_TRACE(::testing::Message() << pipeline_schedule_name(kind) << " p=" << p << " v=" << v
                                    << " m=" << m << " stage " << s);
  const std::vector<int> sizes = chunk_sizes(n);
  std::vector<int> first(n + 1, 0);
  std::partial_sum(sizes.begin(), sizes.end(), first.begin() + 1);
  Toy serial(first[n], m), piped(first[n], m);

  PipelineExecutor exec(group, kind, v);
  std::vector<std::vector<bool>> last_flags(v);
  PipelineCallbacks cb;
  cb.forward = [&](int chunk, int64_t micro, const Tensor& input) {
    const int g = exec.global_chunk(chunk);
    EXPECT_EQ(input.defined(), g > 0);
    if (g > 0) EXPECT_TRUE(input.requires_grad() && input.is_leaf());
    Tensor h = piped.apply(g == 0 ? piped.x[micro] : input, first[g], sizes[g]);
    return g == n - 1 ? mse_loss(h, piped.y[micro]) : h;
  };
  cb.before_backward = [&](int chunk, int64_t, bool last) { last_flags.at(chunk).push_back(last); };

  for (int step = 0; step < steps; ++step) {
    SCOPED_TRACE(::testing::Message() << "step " << step);
    for (auto& f : last_flags) f.clear();
    const double want = serial.serial_step();
    const double got = exec.run(m, cb);
    EXPECT_NEAR(got, want, 1e-12 * std::max(1.0, std::abs(want)));
    for (int c = 0; c < v; ++c) {
      const int g = exec.global_chunk(c);
      for (int l = first[g]; l < first[g + 1]; ++l) {
        ASSERT_TRUE(piped.layers[l].weight.grad().defined()) << "layer " << l;
        EXPECT_LT(max_abs_diff(piped.layers[l].weight.grad(), serial.layers[l].weight.grad()),
                  1e-12)
            << "layer " << l;
        EXPECT_LT(max_abs_diff(piped.layers[l].bias.grad(), serial.layers[l].bias.grad()), 1e-12)
            << "layer " << l;
      }
      // m backwards per chunk, the last of them (and only it) flagged.
      std::vector<bool> want_flags(m, false);
      want_flags.back() = true;
      EXPECT_EQ(last_flags[c], want_flags) << "chunk " << c;
    }
    // Layers of other ranks' chunks never see a gradient here.
    for (int g = 0; g < n; ++g)
      if (g % p != s)
        for (int l = first[g]; l < first[g + 1]; ++l)
          EXPECT_FALSE(piped.layers[l].weight.grad().defined()) << "layer " << l;
    serial.sgd(0.1);
    piped.sgd(0.1);  // fresh leaves: gradients start from nothing next step
  }
}

// Micro-batch counts for each schedule: fewer than p, p, and more, odd where allowed.
void run_all_schedules(const std::shared_ptr<ProcessGroup>& group) {
  const int64_t p = group->size();
  for (int64_t m : {int64_t{1}, p, 2 * p + 1}) {
    expect_matches_serial(group, PipelineScheduleKind::GPipe, 1, m);
    expect_matches_serial(group, PipelineScheduleKind::OneFOneB, 1, m);
  }
  expect_matches_serial(group, PipelineScheduleKind::GPipe, 2, p + 1);
  for (int64_t m : {p, 2 * p}) {
    expect_matches_serial(group, PipelineScheduleKind::Interleaved1F1B, 2, m);
    expect_matches_serial(group, PipelineScheduleKind::Interleaved1F1B, 3, m, 1);
  }
}

TEST(Pipeline, EverySchedulesLossAndGradientsEqualSerialOverTheWorld) {
  run_all_schedules(world());
}

// Two ranks as the pipeline, the others out of it (np 3) or a second pipeline beside it (np 4):
// the executors of different groups must not see each other's messages.
TEST(Pipeline, SubgroupPipelinesEqualSerial) {
  auto pg = world();
  if (pg->size() < 3) GTEST_SKIP() << "needs a rank outside a two-stage pipeline";
  std::shared_ptr<ProcessGroup> group;
  if (pg->size() == 4)
    group = pg->split(pg->rank() / 2, pg->rank(), "pp_pair");
  else
    group = pg->new_group({0, 1}, "pp_pair");
  if (group) run_all_schedules(group);
  pg->barrier()->wait();
}

TEST(Pipeline, RanksDisagreeingOnTheScheduleRaiseInsteadOfHanging) {
  auto pg = world();
  if (pg->size() < 2) GTEST_SKIP() << "needs two stages";
  std::vector<int> all(pg->size());
  std::iota(all.begin(), all.end(), 0);
  auto group = pg->new_group(all, "pp_mismatch");
  group->set_timeout(std::chrono::seconds(20));
  const bool odd = pg->rank() == 0;
  PipelineExecutor exec(group,
                        odd ? PipelineScheduleKind::Interleaved1F1B : PipelineScheduleKind::GPipe,
                        odd ? 2 : 1);
  PipelineCallbacks cb;
  cb.forward = [](int, int64_t, const Tensor&) -> Tensor {
    ADD_FAILURE() << "no forward may run";
    return {};
  };
  try {
    exec.run(odd ? 2 * group->size() : 3, cb);
    ADD_FAILURE() << "expected ValueError";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("[PipelineExecutor.run] expected every pipeline rank to "
                                         "run the same schedule, got (schedule, virtual stages, "
                                         "micro-batches) rank 0: (interleaved, 2, "),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("rank 1: (gpipe, 1, 3)"), std::string::npos) << e.what();
  }
}

// last_timing(): each forward sleeps 5 ms, so a rank's compute is at least m times that, and
// the last stage waits at least p - 1 forwards before its first (GPipe): idle, not compute.
TEST(Pipeline, TimingSplitsComputeFromWaiting) {
  auto group = world();
  const int p = group->size();
  const int64_t m = 2;
  constexpr double kSleep = 0.005;
  PipelineExecutor exec(group, PipelineScheduleKind::GPipe, 1);
  Tensor weight = ones({3}, kFloat64).requires_grad_(true);
  PipelineCallbacks cb;
  cb.forward = [&](int chunk, int64_t, const Tensor& input) {
    std::this_thread::sleep_for(std::chrono::duration<double>(kSleep));
    Tensor h = (input.defined() ? input : ones({3}, kFloat64)) * weight;
    return exec.is_last_chunk(chunk) ? sum(h) : h;
  };
  exec.run(m, cb);
  const PipelineTiming& t = exec.last_timing();
  EXPECT_GE(t.compute_seconds, m * kSleep);
  EXPECT_GE(t.wall_seconds, t.compute_seconds);
  if (exec.holds_last()) EXPECT_GE(t.idle_seconds(), 0.9 * (p - 1) * kSleep);
}

TEST(Pipeline, BadArgumentsRaiseValueError) {
  auto group = world();
  EXPECT_THROW(PipelineExecutor(nullptr, PipelineScheduleKind::GPipe, 1), ValueError);
  EXPECT_THROW(PipelineExecutor(group, PipelineScheduleKind::OneFOneB, 2), ValueError);
  EXPECT_THROW(PipelineExecutor(group, PipelineScheduleKind::GPipe, 0), ValueError);
  PipelineExecutor exec(group, PipelineScheduleKind::GPipe, 1);
  EXPECT_THROW(exec.run(0, {.forward = [](int, int64_t, const Tensor& t) { return t; }}),
               ValueError);
  EXPECT_THROW(exec.run(2, {}), ValueError);
}

}  // namespace
}  // namespace tessera::dist::testing
