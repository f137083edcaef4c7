// Pipeline schedules as data: every GPipe, 1F1B and interleaved schedule is complete and
// deadlock-free, has the warm-up and in-flight counts of its definition and the bubble of the
// formulas, and the simulator rejects broken schedules by name. No MPI.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/dist/pipeline_schedule.h"

namespace tessera::dist {
namespace {

using Kind = PipelineScheduleKind;
using Schedules = std::vector<std::vector<PipelineStep>>;

const std::vector<int> kStages = {1, 2, 3, 4, 8};
const std::vector<int64_t> kMicro = {1, 2, 3, 4, 5, 6, 8, 12, 16, 24};

PipelineStep F(int64_t micro, int chunk = 0) { return {PipelineStep::Kind::Forward, micro, chunk}; }
PipelineStep B(int64_t micro, int chunk = 0) {
  return {PipelineStep::Kind::Backward, micro, chunk};
}

// Every configuration make_pipeline_schedule accepts among the test sizes.
struct Config {
  Kind kind;
  int p;
  int64_t m;
  int v;
};
std::vector<Config> configs() {
  std::vector<Config> out;
  for (int p : kStages)
    for (int64_t m : kMicro) {
      out.push_back({Kind::OneFOneB, p, m, 1});
      for (int v : {1, 2, 3}) {
        out.push_back({Kind::GPipe, p, m, v});
        if (v == 1 || m % p == 0) out.push_back({Kind::Interleaved1F1B, p, m, v});
      }
    }
  return out;
}

std::string describe(const Config& c) {
  return testing::PrintToString(std::string(pipeline_schedule_name(c.kind))) +
         " p=" + std::to_string(c.p) + " m=" + std::to_string(c.m) + " v=" + std::to_string(c.v);
}

template <class F>
void expect_value_error(F f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "expected ValueError containing '" << needle << "'";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(PipelineSchedule, NamesRoundTripAndUnknownNamesAreRejected) {
  for (Kind k : {Kind::GPipe, Kind::OneFOneB, Kind::Interleaved1F1B})
    EXPECT_EQ(parse_pipeline_schedule(pipeline_schedule_name(k)), k);
  EXPECT_EQ(parse_pipeline_schedule("1f1b"), Kind::OneFOneB);
  expect_value_error([] { parse_pipeline_schedule("pipedream"); },
                     "[parse_pipeline_schedule] expected one of gpipe, 1f1b, interleaved, got "
                     "'pipedream'");
}

TEST(PipelineSchedule, BadArgumentsRaiseValueError) {
  expect_value_error([] { make_pipeline_schedule(Kind::GPipe, 0, 4, 1, 0); },
                     "[make_pipeline_schedule] expected stages, micro_batches and virtual_stages");
  expect_value_error([] { make_pipeline_schedule(Kind::GPipe, 2, 0, 1, 0); }, "micro_batches=0");
  expect_value_error([] { make_pipeline_schedule(Kind::GPipe, 2, 4, 0, 0); }, "virtual_stages=0");
  expect_value_error([] { make_pipeline_schedule(Kind::OneFOneB, 2, 4, 1, 2); },
                     "[make_pipeline_schedule] expected a stage in [0, 2), got 2");
  expect_value_error([] { make_pipeline_schedule(Kind::OneFOneB, 2, 4, 2, 0); },
                     "expected virtual_stages = 1 for 1f1b");
  expect_value_error([] { make_pipeline_schedule(Kind::Interleaved1F1B, 4, 6, 2, 0); },
                     "expected micro_batches to be a multiple of stages for the interleaved "
                     "schedule, got micro_batches=6 stages=4");
}

TEST(PipelineSchedule, EveryScheduleIsCompleteAndDeadlockFree) {
  for (const Config& c : configs()) {
    SCOPED_TRACE(describe(c));
    const Schedules s = make_pipeline_schedules(c.kind, c.p, c.m, c.v);
    ASSERT_EQ(s.size(), static_cast<size_t>(c.p));
    for (const auto& rank : s) EXPECT_EQ(static_cast<int64_t>(rank.size()), 2 * c.m * c.v);
    // simulate_pipeline throws on a missing, duplicated or misordered step and on a deadlock.
    EXPECT_NO_THROW(simulate_pipeline(s, c.m, c.v));
    EXPECT_NO_THROW(simulate_pipeline(s, c.m, c.v, {.forward = 1, .backward = 2}));
  }
}

// Megatron's shape: w warm-up forwards, n - w (forward, backward) pairs, w cool-down backwards.
void expect_warmup(const std::vector<PipelineStep>& steps, int64_t w) {
  using K = PipelineStep::Kind;
  const int64_t n = static_cast<int64_t>(steps.size()) / 2;
  ASSERT_LE(w, n);
  for (int64_t k = 0; k < static_cast<int64_t>(steps.size()); ++k) {
    const K want = k < w              ? K::Forward
                   : k >= 2 * n - w   ? K::Backward
                   : (k - w) % 2 == 0 ? K::Forward
                                      : K::Backward;
    ASSERT_EQ(steps[k].kind, want) << "step " << k << " of " << 2 * n << ", warm-up " << w;
  }
}

TEST(PipelineSchedule, OneFOneBWarmsUpWithPMinusSMinusOneAndHoldsAtMostPMinusS) {
  for (int p : kStages)
    for (int64_t m : kMicro) {
      SCOPED_TRACE(testing::Message() << "p=" << p << " m=" << m);
      const Schedules sched = make_pipeline_schedules(Kind::OneFOneB, p, m, 1);
      const PipelineStats one = simulate_pipeline(sched, m, 1);
      const PipelineStats gpipe =
          simulate_pipeline(make_pipeline_schedules(Kind::GPipe, p, m, 1), m, 1);
      for (int s = 0; s < p; ++s) {
        SCOPED_TRACE(testing::Message() << "stage " << s);
        expect_warmup(sched[s], std::min<int64_t>(p - s - 1, m));
        EXPECT_EQ(one.forwards_before_first_backward[s], std::min<int64_t>(p - s, m));
        EXPECT_EQ(one.peak_in_flight[s], std::min<int64_t>(p - s, m));
        EXPECT_LE(one.peak_in_flight[s], p);
        EXPECT_EQ(gpipe.forwards_before_first_backward[s], m);
        EXPECT_EQ(gpipe.peak_in_flight[s], m);
      }
    }
}

TEST(PipelineSchedule, InterleavedFollowsMegatronAndEqualsOneFOneBAtOneChunk) {
  for (int p : kStages)
    for (int64_t m : kMicro) {
      EXPECT_EQ(make_pipeline_schedules(Kind::Interleaved1F1B, p, m, 1),
                make_pipeline_schedules(Kind::OneFOneB, p, m, 1));
      if (m % p != 0) continue;
      for (int v : {2, 3}) {
        SCOPED_TRACE(testing::Message() << "p=" << p << " m=" << m << " v=" << v);
        const Schedules s = make_pipeline_schedules(Kind::Interleaved1F1B, p, m, v);
        const PipelineStats st = simulate_pipeline(s, m, v);
        for (int r = 0; r < p; ++r) {
          const int64_t w = std::min<int64_t>(2 * (p - r - 1) + (v - 1) * p, m * v);
          expect_warmup(s[r], w);
          EXPECT_EQ(st.forwards_before_first_backward[r], std::min(w + 1, m * v));
          EXPECT_EQ(st.peak_in_flight[r], std::min(w + 1, m * v));
        }
        // Forwards take groups of p micro-batches through chunk 0, 1, ...; backwards from the
        // last chunk down.
        if (m >= p) {
          EXPECT_EQ(s[0][0], F(0, 0));
          EXPECT_EQ(s[0][static_cast<size_t>(p)], F(0, 1));
        }
        const auto first_b = std::find_if(s[p - 1].begin(), s[p - 1].end(), [](auto& st) {
          return st.kind == PipelineStep::Kind::Backward;
        });
        ASSERT_NE(first_b, s[p - 1].end());
        EXPECT_EQ(*first_b, B(0, v - 1));
      }
    }
}

// Unit-time forwards and backwards, free communication: the makespan is 2 (m v + p - 1), i.e.
// the bubble overhead (makespan - 2 m v) / (2 m v) is (p - 1) / m without virtual stages and
// (p - 1) / (v m) with them (GPipe with v > 1 only from m >= p); as a share of all ranks' time
// the bubble is (p - 1) / (m v + p - 1).
TEST(PipelineSchedule, BubbleMatchesTheFormulas) {
  for (const Config& c : configs()) {
    SCOPED_TRACE(describe(c));
    const PipelineStats st =
        simulate_pipeline(make_pipeline_schedules(c.kind, c.p, c.m, c.v), c.m, c.v);
    const double p = c.p, m = static_cast<double>(c.m), v = c.v;
    EXPECT_DOUBLE_EQ(st.ideal, 2 * m * v);
    if (c.kind == Kind::GPipe && c.v > 1 && c.m < c.p) {
      // Chunk 1's first forward on rank 0 waits for chunk 0's last rank: m < p leaves a gap.
      EXPECT_GT(st.bubble_overhead, (p - 1) / (v * m));
      continue;
    }
    EXPECT_NEAR(st.makespan, 2 * (m * v + p - 1), 1e-12);
    EXPECT_NEAR(st.bubble_overhead, (p - 1) / (v * m), 1e-12);
    EXPECT_NEAR(st.bubble_fraction, (p - 1) / (m * v + p - 1), 1e-12);
    for (int r = 0; r < c.p; ++r) EXPECT_NEAR(st.idle[r], 2 * (p - 1), 1e-12);
  }
}

// With backward = 2 x forward the overheads stay (p - 1) / m and (p - 1) / (v m): each rank
// waits (p - 1) forwards before its first step and (p - 1) backwards after its last, so the
// makespan is 3 (m v + p - 1).
TEST(PipelineSchedule, BubbleWithBackwardTwiceForward) {
  for (const Config& c : configs()) {
    if (c.kind == Kind::GPipe && c.v > 1 && c.m < c.p) continue;
    SCOPED_TRACE(describe(c));
    const PipelineStats st = simulate_pipeline(make_pipeline_schedules(c.kind, c.p, c.m, c.v), c.m,
                                               c.v, {.forward = 1, .backward = 2});
    const double p = c.p, m = static_cast<double>(c.m), v = c.v;
    EXPECT_NEAR(st.makespan, 3 * (m * v + p - 1), 1e-12);
    EXPECT_NEAR(st.bubble_overhead, (p - 1) / (v * m), 1e-12);
  }
}

TEST(PipelineSchedule, SimulatorRejectsBrokenSchedules) {
  // p = 2, m = 2, 1F1B as the base.
  const Schedules good = make_pipeline_schedules(Kind::OneFOneB, 2, 2, 1);
  EXPECT_NO_THROW(simulate_pipeline(good, 2, 1));

  Schedules missing = good;
  missing[1].pop_back();
  expect_value_error([&] { simulate_pipeline(missing, 2, 1); },
                     "rank 1: expected every step, B(micro 1, chunk 0) is missing");

  Schedules duplicated = good;
  duplicated[0].push_back(F(1));
  expect_value_error([&] { simulate_pipeline(duplicated, 2, 1); },
                     "rank 0: expected each step once, got F(micro 1, chunk 0)");

  expect_value_error(
      [&] {
        simulate_pipeline({{B(0), F(0)}}, 1, 1);
      },
      "rank 0: expected B(micro 0, chunk 0) after its forward");

  expect_value_error(
      [&] {
        simulate_pipeline({{F(0, 1), B(0, 1)}}, 1, 1);
      },
      "rank 0 step 0: expected micro in [0, 1) and chunk in [0, 1), got F(micro "
      "0, chunk 1)");

  // Rank 0 backwards micro 0 before forwarding micro 1, which rank 1 forwards before any
  // backward: each waits for the other.
  expect_value_error(
      [&] {
        simulate_pipeline({{F(0), B(0), F(1), B(1)}, {F(0), F(1), B(0), B(1)}}, 2, 1);
      },
      "got a deadlock: rank 0 at step 1 B(micro 0, chunk 0) waits for B(micro 0, "
      "chunk 0) of rank 1 (global chunk 1); rank 1 at step 1 F(micro 1, chunk 0) "
      "waits for F(micro 1, chunk 0) of rank 0 (global chunk 0)");

  // Data-wise fine, but rank 1 would take rank 0's activations out of order.
  expect_value_error(
      [&] {
        simulate_pipeline({{F(1), F(0), B(0), B(1)}, {F(0), F(1), B(0), B(1)}}, 2, 1);
      },
      "expected global chunk 1 to take activations in the order chunk 0 sends "
      "them, got sent [1, 0], taken [0, 1]");
  expect_value_error(
      [&] {
        simulate_pipeline({{F(0), F(1), B(0), B(1)}, {F(0), F(1), B(1), B(0)}}, 2, 1);
      },
      "expected global chunk 0 to take gradients in the order chunk 1 sends them, "
      "got sent [1, 0], taken [0, 1]");
  expect_value_error([&] { simulate_pipeline(good, 2, 1, {.forward = 0}); },
                     "expected positive step times");
}

}  // namespace
}  // namespace tessera::dist
