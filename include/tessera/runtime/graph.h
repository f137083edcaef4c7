#pragma once
// Graph recording, as CUDA graphs and InfiniCore's context.start_graph_recording /
// stop_graph_recording:
//   start_graph_recording();
//   Tensor y = gelu(layer_norm(x, {C}, w, b)) + x;   // runs eagerly and is recorded
//   Graph g = stop_graph_recording();
//   x.copy_(next_x); g.run();                           // y now holds the result for next_x
// Recording captures every kernel the ops launch (call_kernel is the one hook, so ops called from
// C++ and from Python are covered without per-op code), with the buffers they used. A replay
// re-launches them on the same buffers: it reads the current contents of the tensors made before
// recording (inputs and weights) and rewrites the tensors made while recording, so the outputs a
// caller kept are refreshed in place and a replay allocates nothing. Host-side logic (shape
// checks, Python code between ops) is not replayed: shapes and control flow are those recorded.
//
// On replay, kernels whose inputs are all constants (scalar operands, zeros) are not re-run, and
// chains of elementwise kernels (unary, binary with broadcasting, scalar ops, activations) of one
// dtype whose intermediates nothing else uses are fused into one pass over the output, tile by
// tile, multithreaded, without intermediate tensors (CPU tensors; CUDA kernels replay one by one
// on the current stream). A graph keeps its buffers (inputs, weights, outputs) alive; one graph
// must not be replayed by two threads at once.
//
// Autograd is off while recording (inference graphs). Recording is per thread. Refused at record
// time with a RuntimeError naming the op: random ops (a replay would repeat the recorded draw),
// ops whose output shape or values depend on data read on the host (sort, topk, nonzero,
// masked_select, multinomial, unique, the paged attention ops), in-place ops on tensors made
// before recording, and kernels taking raw pointers (cross-device copies). Not detected, so not
// to be recorded: one_hot without num_classes (the class count is read from the data), .item()
// or other host reads whose value steers later ops, and ops writing into a tensor made before
// recording through kernels whose outputs the recorder cannot see (index_add_, scatter_ into an
// input; a replay repeats the write).
#include <cstdint>
#include <string>
#include <vector>

#include "tessera/core/kernel_capture.h"

namespace tessera {

struct GraphStats {
  int64_t recorded_kernels = 0;     // kernel calls captured while recording
  int64_t folded_kernels = 0;       // constant kernels not replayed (their results are kept)
  int64_t fused_kernels = 0;        // elementwise kernels merged into fused passes
  int64_t fused_passes = 0;         // fused passes (each replaces a chain of fused kernels)
  int64_t launches = 0;             // kernels one replay launches (fused passes count once)
  int64_t freed_intermediates = 0;  // tensors of fused chains the graph no longer holds
  int64_t replays = 0;
  // Allocations the allocators counted during the last replay (every thread's; 0 when the replay
  // made no tensor, the point of replaying on recorded buffers).
  int64_t last_replay_allocations = 0;
};

namespace detail {
struct ReplayStep;
}

class Graph {
 public:
  Graph();
  ~Graph();
  Graph(Graph&&) noexcept;
  Graph& operator=(Graph&&) noexcept;
  // Replays the recorded kernels (see the file comment); returns when the work is queued (CPU:
  // done).
  void run();
  const GraphStats& stats() const { return stats_; }
  // Each replay step by name ("fused(layer_norm... )" for fused passes), in order.
  std::vector<std::string> steps() const;

 private:
  friend Graph stop_graph_recording();
  std::vector<detail::ReplayStep> steps_;
  GraphStats stats_;
};

// Starts recording this thread's ops; RuntimeError when a recording is already open.
void start_graph_recording();
// Ends the recording and returns its graph; RuntimeError when none is open.
Graph stop_graph_recording();
bool is_graph_recording();

}  // namespace tessera
