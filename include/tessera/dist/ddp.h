#pragma once
// DistributedDataParallel: every rank holds the whole model and its own micro-batches; after
// backward every rank holds the gradients averaged over the group, as torch's DDP.
//
//   auto world = dist::ProcessGroupMPI::world();
//   dist::DistributedDataParallel ddp(model, world);  // broadcasts rank 0's parameters
//   Tensor loss = model.loss(x, y);
//   loss.backward();  // gradients are averaged over the ranks when backward returns
//   optimizer.step();
//
// Gradients travel in buckets: flat buffers of about bucket_cap_mb (the first one 1 MB, so
// communication starts early), filled in reverse parameter order and, after the first backward,
// in the order the gradients actually arrived (rank 0's order, so all ranks agree). A bucket's
// all-reduce starts from the post-accumulate-grad hook of its last parameter, while the rest of
// backward runs; buckets launch in index order so every rank issues the same collectives. The
// backward pass ends (autograd::queue_callback) by waiting for all of them.
//
// MPI progresses non-blocking collectives only while a process calls into it, so DDP polls the
// reductions in flight: from every gradient hook (Progress::Poll, the default), from a thread
// (Progress::Thread), or not until the end of backward (Progress::None, for measuring what the
// overlap buys).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tessera/dist/process_group.h"
#include "tessera/nn/module.h"

namespace tessera::dist {

enum class Progress { Poll, Thread, None };

struct DDPOptions {
  double bucket_cap_mb = 25.0;
  double first_bucket_cap_mb = 1.0;
  // Each parameter's .grad is a view into its bucket, so gradients are not copied in and out
  // (torch's gradient_as_bucket_view). zero_grad(set_to_none) drops the views; the next backward
  // puts them back.
  bool gradient_as_bucket_view = false;
  // Parameters that get no gradient in a backward are reduced as zeros. Off: such a parameter is
  // a RuntimeError naming it, at the end of that backward.
  bool find_unused_parameters = false;
  Progress progress = Progress::Poll;
  // ZeRO stage 2: buckets are reduce-scattered, so each rank receives the averaged gradients of
  // its shard only (see ZeroOptimizer); parameters' .grad are then not the averaged gradients.
  bool reduce_scatter = false;
};

// One bucket: parameters of one dtype and device packed into a flat buffer. Its length is padded
// to a multiple of the group size, so that it splits into equal shards (ZeRO).
struct GradBucket {
  std::vector<int64_t> params;   // indices into DistributedDataParallel::parameters()
  std::vector<int64_t> offsets;  // element offset of each parameter in the buffer
  int64_t numel = 0;             // elements used (without the padding)
  Tensor buffer;                 // the gradients, padded_numel() elements
  Tensor shard;                  // reduce_scatter: this rank's averaged shard
  int64_t shard_numel() const;
  int64_t padded_numel() const { return buffer.numel(); }
};

class Reducer;  // src/dist/reducer.h: the buckets, the hooks' logic and the work in flight

class DistributedDataParallel {
 public:
  // Broadcasts module's parameters and buffers from rank 0 of group and registers the gradient
  // hooks. The module must outlive this object; the hooks are inert once it is destroyed.
  DistributedDataParallel(nn::Module& module, std::shared_ptr<ProcessGroup> group,
                          DDPOptions options = {});
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  nn::Module& module() { return module_; }
  ProcessGroup& group() { return *group_; }
  const std::shared_ptr<ProcessGroup>& group_ptr() const { return group_; }
  const DDPOptions& options() const { return options_; }
  // The parameters that require grad, in module order (tied ones once); buckets index into it.
  const TensorList& parameters() const;
  const std::vector<std::string>& parameter_names() const;
  const std::vector<GradBucket>& buckets() const;
  // Increases when the buckets are rebuilt (once, at the end of the first synchronised backward).
  int64_t bucket_layout_version() const;
  // Keeps the current buckets for good (no rebuild): ZeroOptimizer cuts its shards from them.
  void freeze_bucket_layout();

  // Whether the next backward passes reduce gradients. Off: gradients accumulate locally, to be
  // reduced together by the next backward with sync on (torch's no_sync()).
  void set_require_gradient_sync(bool sync);
  bool require_gradient_sync() const;
  // RAII form: DDP's no_sync() context manager.
  class NoSync {
   public:
    explicit NoSync(DistributedDataParallel& ddp)
        : ddp_(ddp), previous_(ddp.require_gradient_sync()) {
      ddp.set_require_gradient_sync(false);
    }
    ~NoSync() { ddp_.set_require_gradient_sync(previous_); }
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    DistributedDataParallel& ddp_;
    bool previous_;
  };
  NoSync no_sync() { return NoSync(*this); }

  // The last synchronised backward's communication: seconds from the first bucket's launch to
  // the completion of the last, and the part of it backward spent blocked at its end.
  struct Timing {
    double comm_window_seconds = 0.0;
    double wait_seconds = 0.0;
  };
  Timing last_timing() const;

 private:
  void broadcast_from_rank0();

  nn::Module& module_;
  std::shared_ptr<ProcessGroup> group_;
  DDPOptions options_;
  std::shared_ptr<Reducer> reducer_;  // shared with the hooks, which hold it weakly
};

}  // namespace tessera::dist
