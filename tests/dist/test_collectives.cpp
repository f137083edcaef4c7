// Every collective and send/recv against a serial reference, for every dtype, odd sizes, size 0,
// non-contiguous tensors and tensors split into chunks (as those over INT_MAX elements are).
#include <algorithm>
#include <functional>

#include "dist_test_util.h"

namespace tessera::dist::testing {
namespace {

std::vector<ReduceOp> reduce_ops(DType dtype) {
  if (is_floating(dtype)) return {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min};
  return {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min};
}

// The reduction over ranks of each element of the inputs input(r, n, dtype, offset), cast to
// dtype the way the result is (bool sums saturate to true).
std::vector<double> reference(int world, int64_t n, DType dtype, ReduceOp op, int64_t offset = 0) {
  std::vector<std::vector<double>> per_rank;
  for (int r = 0; r < world; ++r) per_rank.push_back(values(input(r, n, dtype, offset)));
  std::vector<double> out(n);
  for (int64_t i = 0; i < n; ++i) {
    std::vector<double> xs;
    for (int r = 0; r < world; ++r) xs.push_back(per_rank[r][i]);
    double acc = 0;
    for (double x : xs) acc += x;
    if (op == ReduceOp::Avg) acc /= world;
    if (op == ReduceOp::Max) acc = *std::max_element(xs.begin(), xs.end());
    if (op == ReduceOp::Min) acc = *std::min_element(xs.begin(), xs.end());
    out[i] = acc;
  }
  return n ? values(tensor(out).to(dtype)) : out;
}

// Each check runs one operation for every dtype (and reduce op) at the sizes ns.
void check_all_reduce(const std::vector<int64_t>& ns) {
  auto pg = world();
  for (DType dtype : all_dtypes()) {
    for (ReduceOp op : reduce_ops(dtype)) {
      for (int64_t n : ns) {
        Tensor t = input(pg->rank(), n, dtype);
        pg->all_reduce(t, op)->wait();
        expect_values(t, reference(pg->size(), n, dtype, op), dtype,
                      detail::str("all_reduce ", reduce_op_name(op), " ", dtype, "[", n, "]"));
      }
    }
  }
}

void check_all_gather(const std::vector<int64_t>& ns) {
  auto pg = world();
  for (DType dtype : all_dtypes()) {
    for (int64_t n : ns) {
      Tensor out = zeros({pg->size(), n}, TensorOptions(dtype));
      pg->all_gather(out, input(pg->rank(), n, dtype))->wait();
      std::vector<double> want;
      for (int r = 0; r < pg->size(); ++r) {
        auto v = values(input(r, n, dtype));
        want.insert(want.end(), v.begin(), v.end());
      }
      expect_values(out, want, dtype, detail::str("all_gather ", dtype, "[", n, "]"));
    }
  }
}

void check_reduce_scatter(const std::vector<int64_t>& ns) {
  auto pg = world();
  for (DType dtype : all_dtypes()) {
    for (ReduceOp op : reduce_ops(dtype)) {
      for (int64_t n : ns) {
        Tensor out = zeros({n}, TensorOptions(dtype));
        pg->reduce_scatter(out, input(pg->rank(), n * pg->size(), dtype), op)->wait();
        expect_values(out, reference(pg->size(), n, dtype, op, n * pg->rank()), dtype,
                      detail::str("reduce_scatter ", reduce_op_name(op), " ", dtype, "[", n, "]"));
      }
    }
  }
}

void check_broadcast(const std::vector<int64_t>& ns) {
  auto pg = world();
  for (DType dtype : all_dtypes()) {
    for (int root = 0; root < pg->size(); ++root) {
      for (int64_t n : ns) {
        Tensor t = input(pg->rank(), n, dtype);
        pg->broadcast(t, root)->wait();
        expect_values(t, values(input(root, n, dtype)), dtype,
                      detail::str("broadcast root ", root, " ", dtype, "[", n, "]"));
      }
    }
  }
}

void check_send_recv_ring(const std::vector<int64_t>& ns) {
  auto pg = world();
  const int next = (pg->rank() + 1) % pg->size();
  const int prev = (pg->rank() + pg->size() - 1) % pg->size();
  for (DType dtype : all_dtypes()) {
    for (int64_t n : ns) {
      // Both posted before either wait: a ring of blocking sends would deadlock.
      Tensor got = zeros({n}, TensorOptions(dtype));
      WorkHandle r = pg->recv(got, prev, /*tag=*/3);
      WorkHandle s = pg->send(input(pg->rank(), n, dtype), next, /*tag=*/3);
      s->wait();
      r->wait();
      expect_values(got, values(input(prev, n, dtype)), dtype,
                    detail::str("recv ", dtype, "[", n, "]"));
    }
  }
}

TEST(Collectives, AllReduceMatchesSerialReference) { check_all_reduce(sizes()); }
TEST(Collectives, AllGatherMatchesSerialReference) { check_all_gather(sizes()); }
TEST(Collectives, ReduceScatterMatchesSerialReference) { check_reduce_scatter(sizes()); }
TEST(Collectives, BroadcastFromEveryRoot) { check_broadcast(sizes()); }
TEST(Collectives, SendRecvAroundARing) { check_send_recv_ring(sizes()); }

// Lowers the per-call element limit for one scope (tensors over INT_MAX elements cannot be
// allocated in a test).
class ChunkLimit {
 public:
  explicit ChunkLimit(int64_t limit) : previous_(detail::set_max_chunk_elements(limit)) {}
  ~ChunkLimit() { detail::set_max_chunk_elements(previous_); }

 private:
  int64_t previous_;
};

// Transfers split as an over-INT_MAX tensor's would, at 5 elements a call: sizes that fit one
// chunk, fill chunks exactly and leave a remainder.
TEST(Collectives, ChunkedTransfersMatchSerialReference) {
  ChunkLimit limit(5);
  const std::vector<int64_t> ns = {0, 1, 5, 7, 23};
  check_all_reduce(ns);
  check_all_gather(ns);
  check_reduce_scatter(ns);
  check_broadcast(ns);
  check_send_recv_ring(ns);
}

TEST(Collectives, ChunkedRecvOfTheWrongLengthIsAnError) {
  ChunkLimit limit(5);
  auto pg = world();
  const int next = (pg->rank() + 1) % pg->size();
  const int prev = (pg->rank() + pg->size() - 1) % pg->size();
  Tensor got = zeros({12});  // chunks 5, 5, 2 against the sender's 5, 5, 1
  WorkHandle r = pg->recv(got, prev);
  WorkHandle s = pg->send(zeros({11}), next);
  s->wait();
  try {
    r->wait();
    ADD_FAILURE() << "a short message went unnoticed";
  } catch (const DistributedError& e) {
    EXPECT_NE(std::string(e.what()).find("(chunk 3 of 3), got 1"), std::string::npos) << e.what();
  }
}

TEST(Collectives, RecvOfTheWrongLengthIsAnError) {
  auto pg = world();
  const int next = (pg->rank() + 1) % pg->size();
  const int prev = (pg->rank() + pg->size() - 1) % pg->size();
  Tensor got = zeros({5});
  WorkHandle r = pg->recv(got, prev);
  WorkHandle s = pg->send(zeros({4}), next);
  s->wait();
  EXPECT_THROW(r->wait(), DistributedError);
  // Every request completed, so the ranks still agree on what comes next: the group stays usable.
  pg->barrier()->wait();
}

TEST(Collectives, NonContiguousTensorsAreStaged) {
  auto pg = world();
  for (DType dtype : {kFloat32, kBFloat16, kInt32}) {
    // A transposed 3 x 5 view: results must land in its strided elements.
    Tensor base = input(pg->rank(), 15, dtype).reshape({5, 3});
    Tensor t = base.t();
    ASSERT_FALSE(t.is_contiguous());
    const std::vector<double> want_t = [&] {
      auto flat = reference(pg->size(), 15, dtype, ReduceOp::Sum);
      return values(tensor(flat).to(dtype).reshape({5, 3}).t());
    }();
    pg->all_reduce(t, ReduceOp::Sum)->wait();
    expect_values(t, want_t, dtype, detail::str("all_reduce of a transposed ", dtype));

    Tensor out = zeros({3, 2 * pg->size()}, TensorOptions(dtype)).t();
    ASSERT_FALSE(out.is_contiguous());
    pg->all_gather(out, input(pg->rank(), 6, dtype))->wait();
    std::vector<double> want;
    for (int r = 0; r < pg->size(); ++r) {
      auto v = values(input(r, 6, dtype));
      want.insert(want.end(), v.begin(), v.end());
    }
    expect_values(out, want, dtype, detail::str("all_gather into a transposed ", dtype));
  }
}

TEST(Collectives, BarrierAndIsCompleted) {
  auto pg = world();
  WorkHandle w = pg->barrier();
  while (!w->is_completed()) {
  }
  w->wait();  // a finished Work waits at once
  EXPECT_TRUE(w->is_completed());
}

TEST(Collectives, DroppedHandlesStillComplete) {
  auto pg = world();
  Tensor t = input(pg->rank(), 9, kFloat64);
  pg->all_reduce(t);  // handle dropped at once: the buffers stay alive until MPI is done
  pg->barrier()->wait();
  pg->barrier()->wait();
}

TEST(Collectives, ArgumentErrorsAreTyped) {
  auto pg = world();
  Tensor i = zeros({3}, TensorOptions(kInt32));
  EXPECT_THROW(pg->all_reduce(i, ReduceOp::Avg), TypeError);
  EXPECT_THROW(pg->all_gather(zeros({3 * pg->size() + 1}), zeros({3})), ValueError);
  EXPECT_THROW(pg->all_gather(zeros({3 * pg->size()}), i), TypeError);
  EXPECT_THROW(pg->reduce_scatter(zeros({2}), zeros({2 * pg->size() + 1})), ValueError);
  EXPECT_THROW(pg->broadcast(zeros({3}), pg->size()), IndexError);
  EXPECT_THROW(pg->send(zeros({3}), -1), IndexError);
  EXPECT_THROW(pg->recv(zeros({3}), 0, -2), ValueError);
  EXPECT_THROW(pg->new_group({0, 0}), ValueError);
  EXPECT_THROW(pg->all_reduce(Tensor()), ValueError);
  EXPECT_THROW(detail::set_max_chunk_elements(0), ValueError);
}

}  // namespace
}  // namespace tessera::dist::testing
