#pragma once
// Checks shared by the MPI suite (CPU tensors) and the NCCL suite (GPU tensors), for any process
// group and device. The operation checks run one operation on pg for every dtype (and reduce op)
// at the sizes ns and compare every rank's result with a float64 reference computed locally
// (test_collectives.cpp keeps its own CPU copies for now); the group checks cover subgroups,
// deadlines and debug mode.
#include <algorithm>
#include <chrono>
#include <functional>
#include <initializer_list>
#include <numeric>
#include <string>
#include <vector>

#include "dist_test_util.h"
#include "tessera/dist/layout.h"

namespace tessera::dist::testing {

std::vector<ReduceOp> reduce_ops(DType dtype);
// The reduction over ranks of each element of the inputs input(r, n, dtype, offset), cast to
// dtype the way the result is (bool sums saturate to true).
std::vector<double> reference(int world, int64_t n, DType dtype, ReduceOp op, int64_t offset = 0);

void check_all_reduce(ProcessGroup& pg, Device device, const std::vector<int64_t>& ns);
void check_all_gather(ProcessGroup& pg, Device device, const std::vector<int64_t>& ns);
void check_reduce_scatter(ProcessGroup& pg, Device device, const std::vector<int64_t>& ns);
void check_broadcast(ProcessGroup& pg, Device device, const std::vector<int64_t>& ns);
// Every rank receives from its predecessor and sends to its successor, both posted before either
// wait.
void check_send_recv_ring(ProcessGroup& pg, Device device, const std::vector<int64_t>& ns);
// Results land in the strided elements of transposed views.
void check_non_contiguous(ProcessGroup& pg, Device device);

// Expects call() to throw DistributedError whose message contains every one of parts.
void expect_error_naming(const std::function<void()>& call,
                         std::initializer_list<std::string> parts);
// For the ranks whose peer sleeps: all_reduce(t) on group throws DistributedError naming the
// collective, the group and the rank, after the group's deadline and not long after.
void expect_deadline_error(ProcessGroup& group, const Tensor& t);
// Rank 0 all-reduces 4 elements, the others 5: debug mode names both calls, and nothing is left
// in flight.
void expect_shape_mismatch_named(ProcessGroup& group, Device device);

// The subgroup of even ranks (new_group) reduces over its members only and numbers them itself.
// Group: ProcessGroupMPI or ProcessGroupNCCL.
template <class Group>
void check_new_group_of_evens(Group& pg, Device device) {
  std::vector<int> evens;
  for (int r = 0; r < pg.size(); r += 2) evens.push_back(r);
  auto sub = pg.new_group(evens);
  if (pg.rank() % 2 != 0) {
    EXPECT_EQ(sub, nullptr);
    return;
  }
  ASSERT_NE(sub, nullptr);
  EXPECT_EQ(sub->size(), static_cast<int>(evens.size()));
  EXPECT_EQ(sub->rank(), pg.rank() / 2);
  for (DType dtype : all_dtypes()) {
    for (int64_t n : sizes()) {
      Tensor t = input(pg.rank(), n, dtype).to(device);
      sub->all_reduce(t, ReduceOp::Max)->wait();
      std::vector<double> want(n, 0);
      for (int r : evens) {
        auto v = values(input(r, n, dtype));
        for (int64_t i = 0; i < n; ++i) want[i] = std::max(want[i], v[i]);
      }
      expect_values(t.to(kCPU), want, dtype,
                    detail::str("subgroup all_reduce ", dtype, "[", n, "]"));
    }
  }
  // Ranks in a subgroup are its own: rank 0 of the subgroup broadcasts.
  Tensor b = tensor(std::vector<double>{double(pg.rank())}).to(device);
  sub->broadcast(b, 0)->wait();
  EXPECT_EQ(values(b.to(kCPU))[0], 0.0);
}

// Every Layout factorisation tp x pp of pg's size: each axis group, made by split, has the
// Layout's members in order and sums their ranks.
template <class Group>
void check_layout_groups(Group& pg, Device device) {
  for (int tp = 1; tp <= pg.size(); ++tp) {
    for (int pp = 1; pp * tp <= pg.size(); ++pp) {
      if (pg.size() % (tp * pp) != 0) continue;
      Layout layout = Layout::from_world(pg.size(), tp, pp);
      for (Axis axis : {Axis::DP, Axis::TP, Axis::PP}) {
        auto sub = pg.split(layout.group_index(axis, pg.rank()), pg.rank(), axis_name(axis));
        const std::vector<int> members = layout.group_ranks(axis, pg.rank());
        ASSERT_EQ(sub->size(), static_cast<int>(members.size()));
        EXPECT_EQ(members[sub->rank()], pg.rank());
        Tensor t = tensor(std::vector<double>{double(pg.rank())}).to(device);
        sub->all_reduce(t)->wait();
        EXPECT_EQ(values(t.to(kCPU))[0], std::accumulate(members.begin(), members.end(), 0.0))
            << "tp=" << tp << " pp=" << pp << " axis " << axis_name(axis);
      }
    }
  }
}

}  // namespace tessera::dist::testing
