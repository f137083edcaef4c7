#pragma once
// A ProcessGroup that forwards to another and counts what passes through it: per operation, the
// calls and their size as nccl-tests defines it (all_reduce, broadcast: the buffer; all_gather:
// the output; reduce_scatter: the input; send: the tensor). Receives and barriers count nothing
// (the sender counts a transfer).
#include <array>
#include <cstdint>
#include <memory>
#include <string>

#include "tessera/dist/process_group.h"

namespace tessera::bench {

enum class CommOp { AllReduce, AllGather, ReduceScatter, Broadcast, Send };
inline constexpr int kCommOps = 5;

struct CommCount {
  int64_t calls = 0, bytes = 0;
};

// Bytes one rank moves on the wire in a ring for an operation of `bytes` over n ranks
// (nccl-tests' bus bandwidth factors; a send moves its bytes once).
inline double bus_bytes(CommOp op, double bytes, int n) {
  switch (op) {
    case CommOp::AllReduce:
      return bytes * 2.0 * (n - 1) / n;
    case CommOp::AllGather:
    case CommOp::ReduceScatter:
    case CommOp::Broadcast:
      return bytes * (n - 1) / n;
    case CommOp::Send:
      return bytes;
  }
  return 0;
}

class CountingProcessGroup : public dist::ProcessGroup {
 public:
  explicit CountingProcessGroup(std::shared_ptr<dist::ProcessGroup> inner)
      : ProcessGroup(inner->rank(), inner->size(), inner->name()), inner_(std::move(inner)) {}

  std::array<CommCount, kCommOps> counts{};
  void reset() { counts = {}; }

  dist::WorkHandle all_reduce(const Tensor& t, dist::ReduceOp op) override {
    count(CommOp::AllReduce, t);
    return inner_->all_reduce(t, op);
  }
  dist::WorkHandle all_gather(const Tensor& output, const Tensor& input) override {
    count(CommOp::AllGather, output);
    return inner_->all_gather(output, input);
  }
  dist::WorkHandle reduce_scatter(const Tensor& output, const Tensor& input,
                                  dist::ReduceOp op) override {
    count(CommOp::ReduceScatter, input);
    return inner_->reduce_scatter(output, input, op);
  }
  dist::WorkHandle broadcast(const Tensor& t, int root) override {
    count(CommOp::Broadcast, t);
    return inner_->broadcast(t, root);
  }
  dist::WorkHandle send(const Tensor& t, int dst, int tag) override {
    count(CommOp::Send, t);
    return inner_->send(t, dst, tag);
  }
  dist::WorkHandle recv(const Tensor& t, int src, int tag) override {
    return inner_->recv(t, src, tag);
  }
  dist::WorkHandle barrier() override { return inner_->barrier(); }

 private:
  void count(CommOp op, const Tensor& t) {
    CommCount& c = counts[static_cast<int>(op)];
    ++c.calls;
    c.bytes += t.numel() * static_cast<int64_t>(t.element_size());
  }

  std::shared_ptr<dist::ProcessGroup> inner_;
};

}  // namespace tessera::bench
