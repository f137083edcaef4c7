#pragma once
// Pipeline-parallel schedules as plain data, and a simulator that checks them.
//
// p ranks (stages) each hold v model chunks (virtual stages); as in Megatron, rank s holds the
// global chunks s, s + p, s + 2p, ..., so local chunk c of rank s is global chunk g = c * p + s
// and a micro-batch passes ranks 0..p-1 v times. A schedule is the order in which one rank runs
// the forward and backward of each (micro-batch, local chunk) pair: m * v forwards and m * v
// backwards. PipelineExecutor (pipeline.h) runs such a list; simulate_pipeline() checks a set
// of p lists and measures its bubble.
//
// Per-rank schedules (w = warm-up forwards before the first backward):
//   GPipe        all forwards (chunk-major: every micro-batch of chunk 0, then chunk 1, ...),
//                then all backwards (chunk v-1 first), each chunk's micro-batches in increasing
//                order. Holds all m * v activations at the peak.
//   1F1B         w = min(p - s - 1, m) forwards, then alternately one forward and one backward,
//                then the remaining backwards (Megatron's non-interleaved schedule); at most
//                p - s micro-batches in flight. Requires v = 1.
//   Interleaved  Megatron's interleaved 1F1B: forwards take groups of p micro-batches through
//                chunk 0, then chunk 1, ...; backwards the same groups from chunk v-1 down;
//                w = min(2 (p - s - 1) + (v - 1) p, m v). Requires m % p == 0; v = 1 is 1F1B.
// With free communication and step times tF, tB the makespan is (m v + p - 1)(tF + tB), so the
// bubble overhead (makespan - ideal) / ideal, ideal = m v (tF + tB), is (p - 1) / m for GPipe
// and 1F1B (v = 1) and (p - 1) / (v m) for interleaved (and GPipe with v > 1 when m >= p);
// tests/unit/test_pipeline_schedule.cpp checks it for tB = tF and tB = 2 tF.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::dist {

enum class PipelineScheduleKind { GPipe, OneFOneB, Interleaved1F1B };

// "gpipe", "1f1b" or "interleaved": the names of the command line's --pp-schedule.
std::string_view pipeline_schedule_name(PipelineScheduleKind kind);
// Inverse of pipeline_schedule_name; ValueError for any other name.
PipelineScheduleKind parse_pipeline_schedule(std::string_view name);

struct PipelineStep {
  enum class Kind { Forward, Backward };
  Kind kind = Kind::Forward;
  int64_t micro = 0;  // micro-batch index in [0, m)
  int chunk = 0;      // local chunk (virtual stage) in [0, v); global chunk = chunk * p + stage
  bool operator==(const PipelineStep&) const = default;
};
// "F(micro 3, chunk 1)" / "B(...)".
std::string to_string(const PipelineStep& step);

// The steps of rank `stage` (0 <= stage < stages) for micro_batches micro-batches and
// virtual_stages chunks per rank. ValueError for out-of-range arguments, v > 1 with 1F1B, or an
// interleaved schedule whose m is not a multiple of p.
std::vector<PipelineStep> make_pipeline_schedule(PipelineScheduleKind kind, int stages,
                                                 int64_t micro_batches, int virtual_stages,
                                                 int stage);
// Every rank's schedule, indexed by stage.
std::vector<std::vector<PipelineStep>> make_pipeline_schedules(PipelineScheduleKind kind,
                                                               int stages, int64_t micro_batches,
                                                               int virtual_stages);

// Durations of one chunk's forward and backward for the simulation.
struct PipelineStepTimes {
  double forward = 1.0;
  double backward = 1.0;
};

struct PipelineStats {
  double makespan = 0;  // when the last step of any rank ends
  double ideal = 0;     // one rank's compute: m v (forward + backward)
  // (makespan - ideal) / ideal: (p - 1) / m for 1F1B, (p - 1) / (v m) interleaved, equal times.
  double bubble_overhead = 0;
  // Idle share of all ranks' time: sum(idle) / (p makespan), (p - 1) / (m + p - 1) for 1F1B.
  double bubble_fraction = 0;
  std::vector<double> idle;  // per rank: makespan - its compute
  // Per rank: forwards before its first backward, the warm-up plus the steady state's first
  // forward: min(p - s, m) for 1F1B.
  std::vector<int64_t> forwards_before_first_backward;
  std::vector<int64_t> peak_in_flight;  // per rank: most (micro, chunk) forwarded, not backwarded
  std::vector<std::vector<double>> start;  // per rank, per step: when it starts
};

// Runs the p = schedules.size() ranks' step lists with the given step times and free,
// unbounded-buffer communication: a rank runs its steps in order, each as soon as its
// dependencies are done. Forward of global chunk g needs forward of g - 1 (same micro-batch);
// backward of g needs forward of g and backward of g + 1. Throws ValueError naming the rank and
// step for a step out of range, a duplicated or missing step, a backward listed before its own
// forward, a channel whose sender and receiver disagree on the micro-batch order (the executor
// matches messages in order), or a deadlock (naming what each blocked rank waits for).
PipelineStats simulate_pipeline(const std::vector<std::vector<PipelineStep>>& schedules,
                                int64_t micro_batches, int virtual_stages,
                                PipelineStepTimes times = {});

}  // namespace tessera::dist
