#pragma once
// PipelineExecutor: runs one optimizer step's micro-batches through this rank's model chunks in
// the order of a pipeline schedule (pipeline_schedule.h), independent of any model. The model
// is behind callbacks; activations and gradients travel between the ranks of the pipeline group
// over ProcessGroup send/recv.
//
//   dist::PipelineExecutor pp(pp_group, dist::PipelineScheduleKind::OneFOneB, 1);
//   double loss = pp.run(m, {.forward = [&](int chunk, int64_t micro, const Tensor& x) {
//     return chunk_is_last ? model.loss(...) : model.chunk(chunk, x); }});
//   optimizer.step();  // every local parameter's .grad holds d(sum of losses / m)
//
// Wire format: before each tensor the sender sends a fixed-size int64 header (direction, global
// chunk and micro-batch it is for, dtype code, ndim, dims), so shapes and dtypes come from the
// sender, never from flags, and a message meant for another step is an error, not corrupt data.
// Tags separate activations from gradients and headers from payloads, per receiving chunk; MPI
// delivers the messages of one (peer, tag) in order, which simulate_pipeline() checks the
// schedules respect. Sends are non-blocking (kept until complete), receives wait when the step
// needs them; since every schedule is deadlock-free with free communication, so is the executor.
// NCCL does not match tags and its sends wait for the receiver on the group's stream: the
// executor is written against the MPI semantics and untested on NCCL.
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "tessera/core/tensor.h"
#include "tessera/dist/pipeline_schedule.h"
#include "tessera/dist/process_group.h"

namespace tessera::dist {

struct PipelineCallbacks {
  // Forward of local chunk `chunk` for micro-batch `micro`. input: the activation received from
  // the previous global chunk (a leaf requiring grad), undefined for global chunk 0. Returns the
  // activation to send on or, on the last global chunk, the micro-batch's loss (one element;
  // the executor scales it by 1/m before backward).
  std::function<Tensor(int chunk, int64_t micro, const Tensor& input)> forward;
  // Optional: called before each backward, with whether it is the chunk's last backward of the
  // step (when DDP should synchronise its gradients).
  std::function<void(int chunk, int64_t micro, bool last)> before_backward;
  // Evaluation: only forwards run (micro-batch by micro-batch, any m), without autograd; run
  // returns the summed losses as usual.
  bool forward_only = false;
};

// Where the last run()'s time went on this rank. compute: the callbacks and the backwards;
// the rest of wall (waiting for peers, transfers, the agreement check and loss broadcast) is
// this rank's pipeline bubble as measured, to set against (p - 1) / m of the schedule.
struct PipelineTiming {
  double wall_seconds = 0, compute_seconds = 0;
  double idle_seconds() const { return wall_seconds - compute_seconds; }
};

class PipelineExecutor {
 public:
  // pp_group: the pipeline stages, stage = rank in the group. Received tensors are allocated on
  // `device`. ValueError for virtual_stages < 1 or virtual stages with 1F1B.
  PipelineExecutor(std::shared_ptr<ProcessGroup> pp_group, PipelineScheduleKind kind,
                   int virtual_stages, Device device = kCPU);

  int stage() const { return group_->rank(); }
  int stages() const { return group_->size(); }
  int virtual_stages() const { return v_; }
  PipelineScheduleKind kind() const { return kind_; }
  // Global chunk of local chunk `chunk` on this rank: chunk * stages() + stage().
  int global_chunk(int chunk) const { return chunk * stages() + stage(); }
  // Whether this rank holds the first / last global chunk (chunk 0 of stage 0 / chunk v-1 of
  // stage p-1).
  bool holds_first() const { return stage() == 0; }
  bool holds_last() const { return stage() == stages() - 1; }
  // Whether local chunk `chunk` is the last global chunk (its forward returns the loss).
  bool is_last_chunk(int chunk) const { return global_chunk(chunk) == stages() * v_ - 1; }

  // Runs micro_batches forwards and backwards of every local chunk. Returns the sum of the
  // unscaled micro-batch losses, on every rank (broadcast from the last stage). The ranks first
  // compare (kind, virtual stages, micro_batches) in one small all-gather and throw ValueError
  // on a mismatch instead of hanging. Gradients accumulate into the chunks' leaves: zero them
  // between steps.
  double run(int64_t micro_batches, const PipelineCallbacks& cb);
  const PipelineTiming& last_timing() const { return timing_; }

 private:
  struct Stored {
    Tensor input, output;
  };
  void check_agreement(int64_t micro_batches);
  void send(const Tensor& t, bool is_grad, int to_global_chunk, int64_t micro);
  Tensor recv(bool is_grad, int at_global_chunk, int64_t micro);
  void reap_sends(bool wait_all);

  std::shared_ptr<ProcessGroup> group_;
  PipelineScheduleKind kind_;
  int v_;
  Device device_;
  struct Pending {
    WorkHandle work;
    Tensor buffer;
  };
  std::vector<Pending> pending_;
  // p = 1: transfers between this rank's own chunks, keyed by (is_grad, global chunk, micro).
  std::vector<std::pair<std::array<int64_t, 3>, Tensor>> local_;
  PipelineTiming timing_;
};

}  // namespace tessera::dist
