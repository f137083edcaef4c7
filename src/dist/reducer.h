#pragma once
// The engine of DistributedDataParallel: assigns parameters to buckets, reacts to each
// parameter's post-accumulate-grad hook, launches bucket reductions in index order, keeps them
// progressing, and ends each synchronised backward by waiting for them (queued as an autograd
// callback). One instance per DDP object; the hooks hold it through a weak_ptr.
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "tessera/dist/ddp.h"

namespace tessera::dist {

class Reducer : public std::enable_shared_from_this<Reducer> {
 public:
  Reducer(TensorList params, std::vector<std::string> names, std::shared_ptr<ProcessGroup> group,
          DDPOptions options);
  ~Reducer();
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  // The post-accumulate-grad hook of parameter `index`.
  void on_grad_ready(int64_t index);

  const TensorList& params() const { return params_; }
  const std::vector<std::string>& names() const { return names_; }
  const std::vector<GradBucket>& buckets() const { return buckets_; }
  int64_t layout_version() const { return layout_version_; }
  void freeze_layout() {
    rebuilt_ = true;
    arrivals_.clear();
  }
  bool require_sync = true;
  DistributedDataParallel::Timing timing;

 private:
  using Clock = std::chrono::steady_clock;

  // Buckets over the parameters in `order` (indices into params_): one dtype and device per
  // bucket, the first closed at first_bucket_cap_mb, the others at bucket_cap_mb.
  void build_buckets(const std::vector<int64_t>& order);
  // The bucket view of parameter i's gradient.
  Tensor slot(int64_t i) const;
  // Puts parameter i's gradient into its slot (zeros when it has none) and, with
  // gradient_as_bucket_view, makes .grad that slot.
  void fill_slot(int64_t i);
  void start_backward();
  void launch_ready_buckets();
  WorkHandle launch(const GradBucket& bucket);
  // The end of a synchronised backward (autograd callback).
  void finish_backward();
  void wait_all();
  void write_back();
  // Once, after the first synchronised backward: buckets in the order gradients arrived on
  // rank 0, broadcast so every rank builds the same ones.
  void rebuild_buckets();
  void start_progress_thread();
  void stop_progress_thread();
  // One non-blocking poll of the oldest reduction in flight (MPI progresses them all).
  void poll_once();

  TensorList params_;
  std::vector<std::string> names_;
  std::shared_ptr<ProcessGroup> group_;
  DDPOptions options_;
  std::vector<GradBucket> buckets_;
  std::vector<std::pair<int64_t, int64_t>> location_;  // parameter -> (bucket, index in it)
  int64_t layout_version_ = 0;
  bool rebuilt_ = false;

  // The backward in progress.
  bool in_backward_ = false;
  uint64_t pass_ = 0;              // autograd::backward_pass_id() of the pass in_backward_ is about
  std::vector<char> ready_;        // per parameter
  std::vector<int64_t> pending_;   // per bucket: parameters not ready yet
  size_t next_launch_ = 0;         // buckets launch in index order
  std::vector<int64_t> arrivals_;  // parameter order of the hooks, until the rebuild
  Clock::time_point first_launch_;

  std::mutex works_mutex_;  // works_ is shared with the progress thread
  std::vector<WorkHandle> works_;
  size_t completed_ = 0;  // works_[0, completed_) are known to be complete
  std::thread progress_thread_;
  std::atomic<bool> stop_progress_{false};
};

}  // namespace tessera::dist
