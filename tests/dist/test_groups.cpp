// Subgroups (new_group, Layout axis groups through split), deadlines and debug-mode mismatch
// detection.
#include <chrono>
#include <numeric>
#include <thread>

#include "dist_test_util.h"
#include "tessera/dist/layout.h"

namespace tessera::dist::testing {
namespace {

TEST(Groups, NewGroupOfEvenRanks) {
  auto pg = world();
  std::vector<int> evens;
  for (int r = 0; r < pg->size(); r += 2) evens.push_back(r);
  auto sub = pg->new_group(evens);
  if (pg->rank() % 2 != 0) {
    EXPECT_EQ(sub, nullptr);
    return;
  }
  ASSERT_NE(sub, nullptr);
  EXPECT_EQ(sub->size(), static_cast<int>(evens.size()));
  EXPECT_EQ(sub->rank(), pg->rank() / 2);
  for (DType dtype : all_dtypes()) {
    for (int64_t n : sizes()) {
      Tensor t = input(pg->rank(), n, dtype);
      sub->all_reduce(t, ReduceOp::Max)->wait();
      std::vector<double> want(n, 0);
      for (int r : evens) {
        auto v = values(input(r, n, dtype));
        for (int64_t i = 0; i < n; ++i) want[i] = std::max(want[i], v[i]);
      }
      expect_values(t, want, dtype, detail::str("subgroup all_reduce ", dtype, "[", n, "]"));
    }
  }
  // Ranks in a subgroup are its own: rank 0 of the subgroup broadcasts.
  Tensor b = tensor(std::vector<double>{double(pg->rank())});
  sub->broadcast(b, 0)->wait();
  EXPECT_EQ(values(b)[0], 0.0);
}

TEST(Groups, LayoutAxisGroupsSumTheirRanks) {
  auto pg = world();
  // Every factorisation tp x pp of this world size.
  for (int tp = 1; tp <= pg->size(); ++tp) {
    for (int pp = 1; pp * tp <= pg->size(); ++pp) {
      if (pg->size() % (tp * pp) != 0) continue;
      Layout layout = Layout::from_world(pg->size(), tp, pp);
      for (Axis axis : {Axis::DP, Axis::TP, Axis::PP}) {
        auto sub = pg->split(layout.group_index(axis, pg->rank()), pg->rank(), axis_name(axis));
        const std::vector<int> members = layout.group_ranks(axis, pg->rank());
        ASSERT_EQ(sub->size(), static_cast<int>(members.size()));
        EXPECT_EQ(members[sub->rank()], pg->rank());
        Tensor t = tensor(std::vector<double>{double(pg->rank())});
        sub->all_reduce(t)->wait();
        EXPECT_EQ(values(t)[0], std::accumulate(members.begin(), members.end(), 0.0))
            << "tp=" << tp << " pp=" << pp << " axis " << axis_name(axis);
      }
    }
  }
}

TEST(Deadlines, ASleepingRankMakesThePeersThrowNamingTheCollective) {
  auto pg = world();
  if (pg->size() < 2) GTEST_SKIP() << "needs a peer to wait for";
  std::vector<int> all(pg->size());
  std::iota(all.begin(), all.end(), 0);
  auto group = pg->new_group(all, "deadline_test");
  const auto deadline = std::chrono::seconds(2);
  group->set_timeout(deadline);
  const int sleeper = pg->size() - 1;
  Tensor t = tensor(std::vector<double>{1.0, 2.0, 3.0});
  if (pg->rank() == sleeper) {
    std::this_thread::sleep_for(deadline + std::chrono::seconds(2));
    group->set_timeout(std::chrono::seconds(60));
    group->all_reduce(t)->wait();  // the peers' abandoned calls still complete it
    EXPECT_EQ(values(t)[0], pg->size());
  } else {
    const auto start = std::chrono::steady_clock::now();
    try {
      group->all_reduce(t)->wait();
      ADD_FAILURE() << "all_reduce returned although rank " << sleeper << " was asleep";
    } catch (const DistributedError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("[all_reduce]"), std::string::npos) << msg;
      EXPECT_NE(msg.find("deadline_test"), std::string::npos) << msg;
      EXPECT_NE(msg.find(detail::str("rank ", pg->rank(), " of ")), std::string::npos) << msg;
    }
    const auto took = std::chrono::steady_clock::now() - start;
    EXPECT_GE(took, deadline);
    EXPECT_LT(took, deadline + std::chrono::seconds(5));
  }
  pg->barrier()->wait();
}

TEST(DebugMode, MatchingCallsPass) {
  auto pg = world();
  std::vector<int> all(pg->size());
  std::iota(all.begin(), all.end(), 0);
  auto group = pg->new_group(all, "debug_ok");
  group->set_debug(true);
  Tensor t = input(pg->rank(), 5, kFloat32);
  group->all_reduce(t)->wait();
  group->broadcast(t, 0)->wait();
  Tensor out = zeros({5 * pg->size()});
  group->all_gather(out, t)->wait();
  group->barrier()->wait();
}

TEST(DebugMode, ShapeMismatchIsNamed) {
  auto pg = world();
  if (pg->size() < 2) GTEST_SKIP() << "a mismatch needs two ranks";
  std::vector<int> all(pg->size());
  std::iota(all.begin(), all.end(), 0);
  auto group = pg->new_group(all, "debug_shape");
  group->set_debug(true);
  group->set_timeout(std::chrono::seconds(20));
  Tensor t = zeros({pg->rank() == 0 ? 4 : 5});
  try {
    group->all_reduce(t)->wait();
    ADD_FAILURE() << "the mismatch went unnoticed";
  } catch (const DistributedError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("[all_reduce] expected every rank"), std::string::npos) << msg;
    EXPECT_NE(msg.find("ranks [0]: all_reduce(sum, float32[4])"), std::string::npos) << msg;
    EXPECT_NE(msg.find("all_reduce(sum, float32[5])"), std::string::npos) << msg;
  }
  group->barrier()->wait();  // nothing was left in flight
}

TEST(DebugMode, DifferentCollectivesAreNamed) {
  auto pg = world();
  if (pg->size() < 2) GTEST_SKIP() << "a mismatch needs two ranks";
  std::vector<int> all(pg->size());
  std::iota(all.begin(), all.end(), 0);
  auto group = pg->new_group(all, "debug_op");
  group->set_debug(true);
  group->set_timeout(std::chrono::seconds(20));
  Tensor t = zeros({3}, TensorOptions(kBFloat16));
  try {
    if (pg->rank() == 1) {
      group->broadcast(t, 0)->wait();
    } else {
      group->all_reduce(t, ReduceOp::Max)->wait();
    }
    ADD_FAILURE() << "the mismatch went unnoticed";
  } catch (const DistributedError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("ranks [1]: broadcast(root 0, bfloat16[3])"), std::string::npos) << msg;
    EXPECT_NE(msg.find("all_reduce(max, bfloat16[3])"), std::string::npos) << msg;
    EXPECT_NE(msg.find("debug_op"), std::string::npos) << msg;
  }
  group->barrier()->wait();
}

}  // namespace
}  // namespace tessera::dist::testing
