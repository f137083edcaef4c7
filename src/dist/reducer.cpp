#include "dist/reducer.h"

#include <algorithm>

#include "tessera/autograd/engine.h"
#include "tessera/autograd/grad_mode.h"
#include "tessera/ops/creation.h"

namespace tessera::dist {

namespace {

constexpr double kBytesPerMb = 1024.0 * 1024.0;  // torch's bucket_cap_mb counts MiB
// How often the progress thread polls: short enough that MPI's rounds follow each other
// closely, long enough to leave the core to the compute threads.
constexpr auto kProgressInterval = std::chrono::microseconds(20);

double seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

// Whether grad is exactly the slot view (same memory, same shape, contiguous).
bool aliases(const Tensor& grad, const Tensor& slot) {
  return grad.defined() && grad.data_ptr() == slot.data_ptr() && grad.sizes() == slot.sizes() &&
         grad.is_contiguous() && grad.dtype() == slot.dtype();
}

}  // namespace

int64_t GradBucket::shard_numel() const { return shard.defined() ? shard.numel() : 0; }

Reducer::Reducer(TensorList params, std::vector<std::string> names,
                 std::shared_ptr<ProcessGroup> group, DDPOptions options)
    : params_(std::move(params)),
      names_(std::move(names)),
      group_(std::move(group)),
      options_(options) {
  std::vector<int64_t> reverse(params_.size());
  for (size_t i = 0; i < reverse.size(); ++i)
    reverse[i] = static_cast<int64_t>(reverse.size() - 1 - i);
  build_buckets(reverse);
  if (options_.gradient_as_bucket_view) {
    // Gradients accumulate straight into the buckets from the first backward on.
    autograd::NoGradGuard no_grad;
    for (size_t i = 0; i < params_.size(); ++i) {
      Tensor s = slot(static_cast<int64_t>(i));
      Tensor g = params_[i].grad();
      if (g.defined()) s.copy_(g);
      params_[i].set_grad(s);
    }
  }
}

Reducer::~Reducer() { stop_progress_thread(); }

void Reducer::build_buckets(const std::vector<int64_t>& order) {
  const int world = group_->size();
  buckets_.clear();
  location_.assign(params_.size(), {-1, -1});
  struct Open {
    DType dtype;
    Device device;
    int64_t bucket = -1;  // -1: none open for this key
    int64_t bytes = 0;
    int closed = 0;
  };
  std::vector<Open> open;
  for (int64_t i : order) {
    const Tensor& p = params_[i];
    auto it = std::find_if(open.begin(), open.end(), [&](const Open& o) {
      return o.dtype == p.dtype() && o.device == p.device();
    });
    if (it == open.end()) it = open.insert(open.end(), Open{p.dtype(), p.device()});
    if (it->bucket < 0) {
      it->bucket = static_cast<int64_t>(buckets_.size());
      it->bytes = 0;
      buckets_.emplace_back();
    }
    GradBucket& b = buckets_[it->bucket];
    location_[i] = {it->bucket, static_cast<int64_t>(b.params.size())};
    b.params.push_back(i);
    b.offsets.push_back(b.numel);
    b.numel += p.numel();
    it->bytes += p.numel() * static_cast<int64_t>(itemsize(p.dtype()));
    const double cap = it->closed == 0 ? options_.first_bucket_cap_mb : options_.bucket_cap_mb;
    if (static_cast<double>(it->bytes) >= cap * kBytesPerMb) {
      it->bucket = -1;
      ++it->closed;
    }
  }
  for (GradBucket& b : buckets_) {
    const Tensor& first = params_[b.params.front()];
    const TensorOptions opts = TensorOptions(first.dtype()).with_device(first.device());
    const int64_t padded = (b.numel + world - 1) / world * world;
    b.buffer = zeros({padded}, opts);
    if (options_.reduce_scatter) b.shard = zeros({padded / world}, opts);
  }
  pending_.assign(buckets_.size(), 0);
}

Tensor Reducer::slot(int64_t i) const {
  const auto [b, k] = location_[i];
  const GradBucket& bucket = buckets_[b];
  return bucket.buffer.narrow(0, bucket.offsets[k], params_[i].numel()).view(params_[i].sizes());
}

void Reducer::fill_slot(int64_t i) {
  autograd::NoGradGuard no_grad;
  Tensor s = slot(i);
  const Tensor g = params_[i].grad();
  if (aliases(g, s)) return;
  if (g.defined())
    s.copy_(g);
  else
    s.zero_();
  if (options_.gradient_as_bucket_view) params_[i].set_grad(s);
}

void Reducer::on_grad_ready(int64_t index) {
  if (!require_sync) return;  // no_sync: gradients only accumulate
  // A pass that threw midway never ran finish_backward: a new one starts afresh.
  if (!in_backward_ || pass_ != autograd::backward_pass_id()) start_backward();
  TESSERA_CHECK(!ready_[index], RuntimeError,
                "[DistributedDataParallel] expected each parameter's gradient once per backward, "
                "got '",
                names_[index], "' twice");
  ready_[index] = 1;
  if (!rebuilt_) arrivals_.push_back(index);
  fill_slot(index);
  if (--pending_[location_[index].first] == 0) launch_ready_buckets();
  if (options_.progress == Progress::Poll) poll_once();
}

void Reducer::start_backward() {
  // What an abandoned pass launched completes first (on every rank that got as far): it reads
  // and writes the buckets this pass fills.
  if (in_backward_) wait_all();
  if (!rebuilt_) arrivals_.clear();
  pass_ = autograd::backward_pass_id();
  in_backward_ = true;
  ready_.assign(params_.size(), 0);
  for (size_t b = 0; b < buckets_.size(); ++b)
    pending_[b] = static_cast<int64_t>(buckets_[b].params.size());
  next_launch_ = 0;
  {
    std::lock_guard<std::mutex> lock(works_mutex_);
    works_.clear();
    completed_ = 0;
  }
  autograd::queue_callback([weak = weak_from_this()] {
    if (auto self = weak.lock()) self->finish_backward();
  });
}

WorkHandle Reducer::launch(const GradBucket& bucket) {
  if (options_.reduce_scatter)
    return group_->reduce_scatter(bucket.shard, bucket.buffer, ReduceOp::Avg);
  return group_->all_reduce(bucket.buffer, ReduceOp::Avg);
}

void Reducer::launch_ready_buckets() {
  while (next_launch_ < buckets_.size() && pending_[next_launch_] == 0) {
    if (next_launch_ == 0) first_launch_ = Clock::now();
    WorkHandle work = launch(buckets_[next_launch_]);
    {
      std::lock_guard<std::mutex> lock(works_mutex_);
      works_.push_back(std::move(work));
    }
    if (next_launch_ == 0 && options_.progress == Progress::Thread) start_progress_thread();
    ++next_launch_;
  }
}

void Reducer::poll_once() {
  WorkHandle oldest;
  {
    std::lock_guard<std::mutex> lock(works_mutex_);
    if (completed_ < works_.size()) oldest = works_[completed_];
  }
  if (!oldest || !oldest->is_completed()) return;
  std::lock_guard<std::mutex> lock(works_mutex_);
  ++completed_;
}

void Reducer::start_progress_thread() {
  stop_progress_ = false;
  progress_thread_ = std::thread([this] {
    while (!stop_progress_.load(std::memory_order_relaxed)) {
      try {
        poll_once();
      } catch (const Error&) {
        return;  // the main thread's wait() meets the same error and reports it
      }
      std::this_thread::sleep_for(kProgressInterval);
    }
  });
}

void Reducer::stop_progress_thread() {
  if (!progress_thread_.joinable()) return;
  stop_progress_ = true;
  progress_thread_.join();
}

void Reducer::wait_all() {
  stop_progress_thread();
  const Clock::time_point start = Clock::now();
  std::vector<WorkHandle> works;
  {
    std::lock_guard<std::mutex> lock(works_mutex_);
    works.swap(works_);
    completed_ = 0;
  }
  for (const WorkHandle& w : works) w->wait();
  const Clock::time_point end = Clock::now();
  timing.wait_seconds = seconds(end - start);
  timing.comm_window_seconds = works.empty() ? 0.0 : seconds(end - first_launch_);
}

void Reducer::finish_backward() {
  if (!in_backward_) return;
  in_backward_ = false;
  std::vector<int64_t> unused;
  for (size_t i = 0; i < params_.size(); ++i)
    if (!ready_[i]) unused.push_back(static_cast<int64_t>(i));
  if (!unused.empty() && !options_.find_unused_parameters) {
    wait_all();  // what was launched still completes on every rank
    std::string list;
    for (size_t k = 0; k < unused.size() && k < 5; ++k)
      list += (k ? ", '" : "'") + names_[unused[k]] + "'";
    if (unused.size() > 5) list += tessera::detail::str(" and ", unused.size() - 5, " more");
    throw RuntimeError(tessera::detail::str(
        "[DistributedDataParallel] expected a gradient for every parameter in each backward, got "
        "none for ",
        list, " on ", group_->name(),
        " (pass find_unused_parameters=true to reduce them as zeros, or set requires_grad=false)"));
  }
  for (int64_t i : unused) {
    ready_[i] = 1;
    fill_slot(i);
    --pending_[location_[i].first];
  }
  launch_ready_buckets();
  TESSERA_ASSERT(next_launch_ == buckets_.size(), "DDP launched ", next_launch_, " of ",
                 buckets_.size(), " buckets");
  wait_all();
  write_back();
  if (!rebuilt_) rebuild_buckets();
}

void Reducer::write_back() {
  if (options_.reduce_scatter) return;  // the averaged gradients are the shards
  autograd::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor s = slot(static_cast<int64_t>(i));
    Tensor g = params_[i].grad();
    if (aliases(g, s)) continue;
    if (options_.gradient_as_bucket_view || !g.defined())
      params_[i].set_grad(options_.gradient_as_bucket_view ? s : s.clone());
    else
      g.copy_(s);
  }
}

void Reducer::rebuild_buckets() {
  rebuilt_ = true;
  std::vector<int64_t> order = arrivals_;
  arrivals_.clear();
  std::vector<char> seen(params_.size(), 0);
  for (int64_t i : order) seen[i] = 1;
  for (int64_t i = static_cast<int64_t>(params_.size()) - 1; i >= 0; --i)
    if (!seen[i]) order.push_back(i);
  Tensor t = tensor(order);
  group_->broadcast(t, 0)->wait();
  const int64_t* got = t.data_ptr<int64_t>();
  order.assign(got, got + t.numel());

  // Each parameter's gradient as it stands (averaged, or local under reduce_scatter), moved
  // into the new buckets.
  TensorList current(params_.size());
  for (size_t i = 0; i < params_.size(); ++i)
    current[i] =
        options_.gradient_as_bucket_view ? slot(static_cast<int64_t>(i)) : params_[i].grad();
  build_buckets(order);
  ++layout_version_;
  autograd::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor s = slot(static_cast<int64_t>(i));
    if (current[i].defined())
      s.copy_(current[i]);
    else
      s.zero_();
    if (options_.gradient_as_bucket_view) params_[i].set_grad(s);
  }
  if (options_.reduce_scatter) {  // the shards were in the old layout: reduce once more
    std::vector<WorkHandle> works;
    for (const GradBucket& b : buckets_) works.push_back(launch(b));
    for (const WorkHandle& w : works) w->wait();
  }
}

}  // namespace tessera::dist
