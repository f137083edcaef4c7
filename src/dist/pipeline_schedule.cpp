#include "tessera/dist/pipeline_schedule.h"

#include <algorithm>

#include "tessera/core/error.h"

namespace tessera::dist {

namespace {

using Kind = PipelineStep::Kind;

PipelineStep fwd(int64_t micro, int chunk) { return {Kind::Forward, micro, chunk}; }
PipelineStep bwd(int64_t micro, int chunk) { return {Kind::Backward, micro, chunk}; }

// F^w (F B)^(n-w) B^w: w warm-up forwards, the steady state, the cool-down. forward(k) and
// backward(k) give the k-th forward and backward.
template <class F, class B>
std::vector<PipelineStep> one_f_one_b(int64_t n, int64_t warmup, F forward, B backward) {
  std::vector<PipelineStep> steps;
  steps.reserve(2 * n);
  for (int64_t k = 0; k < warmup; ++k) steps.push_back(forward(k));
  for (int64_t k = 0; k < n - warmup; ++k) {
    steps.push_back(forward(warmup + k));
    steps.push_back(backward(k));
  }
  for (int64_t k = n - warmup; k < n; ++k) steps.push_back(backward(k));
  return steps;
}

}  // namespace

std::string_view pipeline_schedule_name(PipelineScheduleKind kind) {
  switch (kind) {
    case PipelineScheduleKind::GPipe:
      return "gpipe";
    case PipelineScheduleKind::OneFOneB:
      return "1f1b";
    case PipelineScheduleKind::Interleaved1F1B:
      return "interleaved";
  }
  return "?";
}

PipelineScheduleKind parse_pipeline_schedule(std::string_view name) {
  for (auto kind : {PipelineScheduleKind::GPipe, PipelineScheduleKind::OneFOneB,
                    PipelineScheduleKind::Interleaved1F1B})
    if (name == pipeline_schedule_name(kind)) return kind;
  throw ValueError(detail::str(
      "[parse_pipeline_schedule] expected one of gpipe, 1f1b, interleaved, got '", name, "'"));
}

std::string to_string(const PipelineStep& step) {
  return detail::str(step.kind == Kind::Forward ? "F" : "B", "(micro ", step.micro, ", chunk ",
                     step.chunk, ")");
}

std::vector<PipelineStep> make_pipeline_schedule(PipelineScheduleKind kind, int stages,
                                                 int64_t micro_batches, int virtual_stages,
                                                 int stage) {
  const int p = stages, v = virtual_stages;
  const int64_t m = micro_batches;
  TESSERA_CHECK(p >= 1 && m >= 1 && v >= 1, ValueError,
                "[make_pipeline_schedule] expected stages, micro_batches and virtual_stages >= 1, "
                "got stages=",
                p, " micro_batches=", m, " virtual_stages=", v);
  TESSERA_CHECK(stage >= 0 && stage < p, ValueError,
                "[make_pipeline_schedule] expected a stage in [0, ", p, "), got ", stage);
  switch (kind) {
    case PipelineScheduleKind::GPipe: {
      std::vector<PipelineStep> steps;
      steps.reserve(2 * m * v);
      for (int c = 0; c < v; ++c)
        for (int64_t i = 0; i < m; ++i) steps.push_back(fwd(i, c));
      for (int c = v - 1; c >= 0; --c)
        for (int64_t i = 0; i < m; ++i) steps.push_back(bwd(i, c));
      return steps;
    }
    case PipelineScheduleKind::OneFOneB: {
      TESSERA_CHECK(v == 1, ValueError,
                    "[make_pipeline_schedule] expected virtual_stages = 1 for 1f1b (use "
                    "interleaved for virtual stages), got ",
                    v);
      const int64_t warmup = std::min<int64_t>(p - stage - 1, m);
      return one_f_one_b(
          m, warmup, [](int64_t k) { return fwd(k, 0); }, [](int64_t k) { return bwd(k, 0); });
    }
    case PipelineScheduleKind::Interleaved1F1B: {
      if (v == 1) return make_pipeline_schedule(PipelineScheduleKind::OneFOneB, p, m, 1, stage);
      TESSERA_CHECK(m % p == 0, ValueError,
                    "[make_pipeline_schedule] expected micro_batches to be a multiple of stages "
                    "for the interleaved schedule, got micro_batches=",
                    m, " stages=", p);
      // The k-th forward: groups of p micro-batches go through chunk 0, 1, ..., v-1 in turn;
      // the k-th backward takes the same micro-batch through the chunks from v-1 down.
      const int64_t group = static_cast<int64_t>(p) * v;
      auto micro = [=](int64_t k) { return (k / group) * p + k % p; };
      auto chunk = [=](int64_t k) { return static_cast<int>((k % group) / p); };
      const int64_t total = m * v;
      const int64_t warmup = std::min<int64_t>(2 * (p - stage - 1) + (v - 1) * p, total);
      return one_f_one_b(
          total, warmup, [=](int64_t k) { return fwd(micro(k), chunk(k)); },
          [=](int64_t k) { return bwd(micro(k), v - 1 - chunk(k)); });
    }
  }
  throw ValueError("[make_pipeline_schedule] expected a schedule kind");
}

std::vector<std::vector<PipelineStep>> make_pipeline_schedules(PipelineScheduleKind kind,
                                                               int stages, int64_t micro_batches,
                                                               int virtual_stages) {
  std::vector<std::vector<PipelineStep>> all;
  for (int s = 0; s < std::max(stages, 1); ++s)
    all.push_back(make_pipeline_schedule(kind, stages, micro_batches, virtual_stages, s));
  return all;
}

PipelineStats simulate_pipeline(const std::vector<std::vector<PipelineStep>>& schedules,
                                int64_t micro_batches, int virtual_stages,
                                PipelineStepTimes times) {
  const int p = static_cast<int>(schedules.size()), v = virtual_stages;
  const int64_t m = micro_batches;
  TESSERA_CHECK(p >= 1 && m >= 1 && v >= 1, ValueError,
                "[simulate_pipeline] expected at least one schedule, micro_batches and "
                "virtual_stages >= 1, got ",
                p, " schedules, micro_batches=", m, " virtual_stages=", v);
  TESSERA_CHECK(times.forward > 0 && times.backward > 0, ValueError,
                "[simulate_pipeline] expected positive step times, got forward=", times.forward,
                " backward=", times.backward);
  const int n = p * v;  // global chunks
  auto global = [&](int rank, const PipelineStep& s) { return s.chunk * p + rank; };
  auto index = [&](int g, int64_t micro) { return static_cast<size_t>(g) * m + micro; };
  auto step_of = [&](Kind kind, int g, int64_t micro) {
    return detail::str(to_string({kind, micro, g / p}), " of rank ", g % p, " (global chunk ", g,
                       ")");
  };

  // Completeness, and each backward after its own forward on the rank.
  PipelineStats stats;
  for (int r = 0; r < p; ++r) {
    std::vector<int64_t> pos[2] = {std::vector<int64_t>(static_cast<size_t>(m) * v, -1),
                                   std::vector<int64_t>(static_cast<size_t>(m) * v, -1)};
    int64_t in_flight = 0, peak = 0, first_backward = -1;
    const auto& steps = schedules[r];
    for (size_t k = 0; k < steps.size(); ++k) {
      const PipelineStep& s = steps[k];
      TESSERA_CHECK(s.micro >= 0 && s.micro < m && s.chunk >= 0 && s.chunk < v, ValueError,
                    "[simulate_pipeline] rank ", r, " step ", k, ": expected micro in [0, ", m,
                    ") and chunk in [0, ", v, "), got ", to_string(s));
      const size_t at = static_cast<size_t>(s.chunk) * m + s.micro;
      const bool is_fwd = s.kind == Kind::Forward;
      TESSERA_CHECK(pos[is_fwd ? 0 : 1][at] < 0, ValueError, "[simulate_pipeline] rank ", r,
                    ": expected each step once, got ", to_string(s), " at steps ",
                    pos[is_fwd ? 0 : 1][at], " and ", k);
      TESSERA_CHECK(is_fwd || pos[0][at] >= 0, ValueError, "[simulate_pipeline] rank ", r,
                    ": expected ", to_string(s), " after its forward, got it at step ", k,
                    " before the forward");
      pos[is_fwd ? 0 : 1][at] = static_cast<int64_t>(k);
      if (!is_fwd && first_backward < 0) first_backward = in_flight;
      in_flight += is_fwd ? 1 : -1;
      peak = std::max(peak, in_flight);
    }
    for (int c = 0; c < v; ++c)
      for (int64_t i = 0; i < m; ++i)
        for (Kind kind : {Kind::Forward, Kind::Backward})
          TESSERA_CHECK(pos[kind == Kind::Forward ? 0 : 1][static_cast<size_t>(c) * m + i] >= 0,
                        ValueError, "[simulate_pipeline] rank ", r, ": expected every step, ",
                        to_string({kind, i, c}), " is missing");
    stats.forwards_before_first_backward.push_back(first_backward);
    stats.peak_in_flight.push_back(peak);
  }

  // The executor matches the messages of one channel (activations from global chunk g to g + 1,
  // gradients from g + 1 to g) in order, so sender and receiver must agree on that order.
  if (p > 1) {
    std::vector<std::vector<int64_t>> order[2];  // [kind][global chunk] -> micro order
    for (auto& o : order) o.assign(n, {});
    for (int r = 0; r < p; ++r)
      for (const PipelineStep& s : schedules[r])
        order[s.kind == Kind::Forward ? 0 : 1][global(r, s)].push_back(s.micro);
    for (int g = 0; g + 1 < n; ++g) {
      TESSERA_CHECK(order[0][g] == order[0][g + 1], ValueError,
                    "[simulate_pipeline] expected global chunk ", g + 1,
                    " to take activations in the order chunk ", g, " sends them, got sent ",
                    order[0][g], ", taken ", order[0][g + 1]);
      TESSERA_CHECK(order[1][g] == order[1][g + 1], ValueError,
                    "[simulate_pipeline] expected global chunk ", g,
                    " to take gradients in the order chunk ", g + 1, " sends them, got sent ",
                    order[1][g + 1], ", taken ", order[1][g]);
    }
  }

  // Event-free list scheduling: a step's start is max(its rank's previous end, its
  // dependencies' ends), and ends never change once set, so sweeping the ranks until none can
  // move gives the as-soon-as-possible times whatever the sweep order.
  constexpr double kNotDone = -1;
  std::vector<double> fwd_end(static_cast<size_t>(n) * m, kNotDone), bwd_end = fwd_end;
  std::vector<size_t> next(p, 0);
  std::vector<double> free_at(p, 0.0), busy(p, 0.0);
  stats.start.resize(p);
  for (bool moved = true; moved;) {
    moved = false;
    for (int r = 0; r < p; ++r) {
      for (; next[r] < schedules[r].size(); ++next[r]) {
        const PipelineStep& s = schedules[r][next[r]];
        const int g = global(r, s);
        double ready = free_at[r];
        if (s.kind == Kind::Forward) {
          if (g > 0) {
            const double dep = fwd_end[index(g - 1, s.micro)];
            if (dep == kNotDone) break;
            ready = std::max(ready, dep);
          }
        } else {
          const double own = fwd_end[index(g, s.micro)];
          if (own == kNotDone) break;
          ready = std::max(ready, own);
          if (g + 1 < n) {
            const double dep = bwd_end[index(g + 1, s.micro)];
            if (dep == kNotDone) break;
            ready = std::max(ready, dep);
          }
        }
        const double t = s.kind == Kind::Forward ? times.forward : times.backward;
        stats.start[r].push_back(ready);
        free_at[r] = ready + t;
        busy[r] += t;
        (s.kind == Kind::Forward ? fwd_end : bwd_end)[index(g, s.micro)] = ready + t;
        moved = true;
      }
    }
  }
  std::string blocked;
  for (int r = 0; r < p; ++r) {
    if (next[r] == schedules[r].size()) continue;
    const PipelineStep& s = schedules[r][next[r]];
    const int g = global(r, s);
    const bool waits_fwd = s.kind == Kind::Forward;
    blocked += detail::str(blocked.empty() ? "" : "; ", "rank ", r, " at step ", next[r], " ",
                           to_string(s), " waits for ",
                           waits_fwd ? step_of(Kind::Forward, g - 1, s.micro)
                                     : step_of(Kind::Backward, g + 1, s.micro));
  }
  TESSERA_CHECK(
      blocked.empty(), ValueError,
      "[simulate_pipeline] expected a schedule that completes, got a deadlock: ", blocked);

  stats.makespan = *std::max_element(free_at.begin(), free_at.end());
  stats.ideal = static_cast<double>(m) * v * (times.forward + times.backward);
  stats.bubble_overhead = (stats.makespan - stats.ideal) / stats.ideal;
  double idle_sum = 0;
  for (int r = 0; r < p; ++r) {
    stats.idle.push_back(stats.makespan - busy[r]);
    idle_sum += stats.idle.back();
  }
  stats.bubble_fraction = idle_sum / (p * stats.makespan);
  return stats;
}

}  // namespace tessera::dist
