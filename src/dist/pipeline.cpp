#include "tessera/dist/pipeline.h"

#include <algorithm>
#include <chrono>
#include <optional>

#include "tessera/autograd/engine.h"
#include "tessera/autograd/grad_mode.h"
#include "tessera/core/error.h"
#include "tessera/dist/error.h"
#include "tessera/ops/creation.h"

namespace tessera::dist {

namespace {

// Header: [magic, is_grad, global chunk it is for, micro-batch, dtype code, ndim, dims...].
constexpr int64_t kMagic = 0x7e55e7a;
constexpr int kHeaderSize = 16;
constexpr int kMaxDims = kHeaderSize - 6;
// Tags: kTagBase + 4 g + 2 is_grad + is_payload for messages to global chunk g; below MPI's
// guaranteed tag bound (32767) while p v < 7000.
constexpr int kTagBase = 4096;
constexpr int kTagLimit = 32767;

int tag_of(int global_chunk, bool is_grad, bool is_payload) {
  return kTagBase + 4 * global_chunk + 2 * static_cast<int>(is_grad) + static_cast<int>(is_payload);
}

const char* what_of(bool is_grad) { return is_grad ? "gradient" : "activation"; }

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

}  // namespace

PipelineExecutor::PipelineExecutor(std::shared_ptr<ProcessGroup> pp_group,
                                   PipelineScheduleKind kind, int virtual_stages, Device device)
    : group_(std::move(pp_group)), kind_(kind), v_(virtual_stages), device_(device) {
  TESSERA_CHECK(group_ != nullptr, ValueError,
                "[PipelineExecutor] expected a pipeline process group, got nullptr");
  TESSERA_CHECK(v_ >= 1, ValueError, "[PipelineExecutor] expected virtual_stages >= 1, got ", v_);
  TESSERA_CHECK(kind_ != PipelineScheduleKind::OneFOneB || v_ == 1, ValueError,
                "[PipelineExecutor] expected virtual_stages = 1 for 1f1b (use interleaved for "
                "virtual stages), got ",
                v_);
  TESSERA_CHECK(tag_of(stages() * v_, true, true) <= kTagLimit, ValueError,
                "[PipelineExecutor] expected stages * virtual_stages < 7000, got ", stages() * v_);
}

void PipelineExecutor::check_agreement(int64_t micro_batches) {
  const int p = stages();
  if (p == 1) return;
  const std::vector<int64_t> mine = {static_cast<int64_t>(kind_), v_, micro_batches};
  Tensor all = empty({3 * p}, TensorOptions(kInt64).with_device(device_));
  group_->all_gather(all, tensor(mine).to(device_))->wait();
  Tensor host = all.to(kCPU).contiguous();
  const int64_t* a = host.data_ptr<int64_t>();
  bool same = true;
  for (int r = 0; r < p; ++r) same = same && std::equal(mine.begin(), mine.end(), a + 3 * r);
  if (same) return;
  std::string calls;
  for (int r = 0; r < p; ++r) {
    const auto k = static_cast<PipelineScheduleKind>(a[3 * r]);
    calls += detail::str(r ? "; " : "", "rank ", r, ": (", pipeline_schedule_name(k), ", ",
                         a[3 * r + 1], ", ", a[3 * r + 2], ")");
  }
  throw ValueError(detail::str(
      "[PipelineExecutor.run] expected every pipeline rank to run the same schedule, got "
      "(schedule, virtual stages, micro-batches) ",
      calls));
}

void PipelineExecutor::send(const Tensor& t, bool is_grad, int to_global_chunk, int64_t micro) {
  if (stages() == 1) {
    local_.push_back({{is_grad, to_global_chunk, micro}, t.detach()});
    return;
  }
  TESSERA_CHECK(t.dim() <= kMaxDims, ValueError, "[PipelineExecutor] expected a ", what_of(is_grad),
                " of at most ", kMaxDims, " dims, got shape ", t.shape_str());
  std::vector<int64_t> h(kHeaderSize, 0);
  h[0] = kMagic;
  h[1] = is_grad;
  h[2] = to_global_chunk;
  h[3] = micro;
  h[4] = static_cast<int64_t>(t.dtype());
  h[5] = t.dim();
  for (int64_t d = 0; d < t.dim(); ++d) h[6 + d] = t.size(d);
  const int dst = to_global_chunk % stages();
  Tensor header = tensor(h).to(device_);
  Tensor payload = t.detach().contiguous();
  pending_.push_back({group_->send(header, dst, tag_of(to_global_chunk, is_grad, false)), header});
  pending_.push_back({group_->send(payload, dst, tag_of(to_global_chunk, is_grad, true)), payload});
}

Tensor PipelineExecutor::recv(bool is_grad, int at_global_chunk, int64_t micro) {
  if (stages() == 1) {
    auto it = std::find_if(local_.begin(), local_.end(), [&](const auto& e) {
      return e.first == std::array<int64_t, 3>{is_grad, at_global_chunk, micro};
    });
    TESSERA_ASSERT(it != local_.end(), "no local ", what_of(is_grad), " for chunk ",
                   at_global_chunk, " micro ", micro);
    Tensor t = std::move(it->second);
    local_.erase(it);
    return t;
  }
  const int p = stages();
  const int src = (at_global_chunk + (is_grad ? 1 : p - 1)) % p;
  Tensor header = empty({kHeaderSize}, TensorOptions(kInt64).with_device(device_));
  group_->recv(header, src, tag_of(at_global_chunk, is_grad, false))->wait();
  Tensor host = header.to(kCPU).contiguous();
  const int64_t* h = host.data_ptr<int64_t>();
  const bool ok = h[0] == kMagic && h[1] == is_grad && h[2] == at_global_chunk && h[3] == micro &&
                  h[4] >= 0 && h[4] < kNumDTypes && h[5] >= 0 && h[5] <= kMaxDims &&
                  std::all_of(h + 6, h + 6 + h[5], [](int64_t d) { return d >= 0; });
  TESSERA_CHECK(ok, DistributedError, "[PipelineExecutor] expected the header of the ",
                what_of(is_grad), " of micro-batch ", micro, " for global chunk ", at_global_chunk,
                " from rank ", src, ", got [magic ", h[0], ", gradient ", h[1], ", chunk ", h[2],
                ", micro ", h[3], ", dtype ", h[4], ", ndim ", h[5], "] in group '", group_->name(),
                "' (rank ", group_->rank(), " of ", p, ")");
  Shape shape(h + 6, h + 6 + h[5]);
  Tensor payload = empty(shape, TensorOptions(static_cast<DType>(h[4])).with_device(device_));
  group_->recv(payload, src, tag_of(at_global_chunk, is_grad, true))->wait();
  return payload;
}

void PipelineExecutor::reap_sends(bool wait_all) {
  if (wait_all)
    for (Pending& s : pending_) s.work->wait();
  std::erase_if(pending_, [&](Pending& s) { return wait_all || s.work->is_completed(); });
}

double PipelineExecutor::run(int64_t micro_batches, const PipelineCallbacks& cb) {
  const int64_t m = micro_batches;
  const int p = stages();
  TESSERA_CHECK(m >= 1, ValueError, "[PipelineExecutor.run] expected micro_batches >= 1, got ", m);
  TESSERA_CHECK(static_cast<bool>(cb.forward), ValueError,
                "[PipelineExecutor.run] expected a forward callback");
  const Clock::time_point start = Clock::now();
  timing_ = {};
  check_agreement(m);
  std::vector<PipelineStep> steps;
  std::optional<autograd::NoGradGuard> no_grad;
  if (cb.forward_only) {
    // Micro-batch by micro-batch, chunk by chunk: every forward's input comes from one earlier
    // in that order on some rank, and sends do not block, so any m and v flow.
    for (int64_t micro = 0; micro < m; ++micro)
      for (int chunk = 0; chunk < v_; ++chunk)
        steps.push_back({PipelineStep::Kind::Forward, micro, chunk});
    no_grad.emplace();
  } else {
    steps = make_pipeline_schedule(kind_, p, m, v_, stage());
  }
  local_.clear();
  std::vector<Stored> stored(static_cast<size_t>(m) * v_);
  std::vector<int64_t> backwards(v_, 0);
  double loss_sum = 0;
  for (const PipelineStep& step : steps) {
    const int g = global_chunk(step.chunk);
    Stored& st = stored[static_cast<size_t>(step.chunk) * m + step.micro];
    if (step.kind == PipelineStep::Kind::Forward) {
      if (g > 0) {
        st.input = recv(false, g, step.micro);
        if (!cb.forward_only) st.input.requires_grad_(true);
      }
      const Clock::time_point compute = Clock::now();
      st.output = cb.forward(step.chunk, step.micro, st.input);
      timing_.compute_seconds += seconds_since(compute);
      TESSERA_CHECK(st.output.defined(), ValueError,
                    "[PipelineExecutor.run] expected the forward of chunk ", step.chunk,
                    " to return a tensor, got an undefined one");
      if (is_last_chunk(step.chunk)) {
        TESSERA_CHECK(st.output.numel() == 1, ValueError,
                      "[PipelineExecutor.run] expected the last chunk's forward to return a "
                      "one-element loss, got shape ",
                      st.output.shape_str());
        loss_sum += st.output.item().to_double();
      } else {
        send(st.output, false, g + 1, step.micro);
      }
      if (cb.forward_only) st = Stored{};
    } else {
      Clock::time_point compute = Clock::now();
      if (cb.before_backward)
        cb.before_backward(step.chunk, step.micro, ++backwards[step.chunk] == m);
      timing_.compute_seconds += seconds_since(compute);
      Tensor grad;
      if (is_last_chunk(step.chunk)) {
        grad = full_like(st.output, 1.0 / static_cast<double>(m));
      } else {
        grad = recv(true, g, step.micro);
        TESSERA_CHECK(grad.shape() == st.output.shape() && grad.dtype() == st.output.dtype(),
                      DistributedError, "[PipelineExecutor] expected the gradient of chunk ", g,
                      "'s output ", detail::describe(st.output), " for micro-batch ", step.micro,
                      ", got ", detail::describe(grad));
      }
      compute = Clock::now();
      autograd::backward({st.output}, {grad});
      timing_.compute_seconds += seconds_since(compute);
      if (g > 0) {
        Tensor gi = st.input.grad();
        send(gi.defined() ? gi : zeros_like(st.input), true, g - 1, step.micro);
      }
      st = Stored{};  // frees the chunk's activations for this micro-batch
    }
    reap_sends(false);  // MPI moves a large send on only while the sender calls into it
  }
  reap_sends(true);
  if (p > 1) {
    Tensor loss = scalar_tensor(loss_sum, TensorOptions(kFloat64).with_device(device_));
    group_->broadcast(loss, p - 1)->wait();
    loss_sum = loss.item().to_double();
  }
  timing_.wall_seconds = seconds_since(start);
  return loss_sum;
}

}  // namespace tessera::dist
