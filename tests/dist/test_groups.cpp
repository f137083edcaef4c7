// Subgroups (new_group, Layout axis groups through split), deadlines and debug-mode mismatch
// detection.
#include <chrono>
#include <numeric>
#include <thread>

#include "collective_checks.h"

namespace tessera::dist::testing {
namespace {

TEST(Groups, NewGroupOfEvenRanks) { check_new_group_of_evens(*world(), kCPU); }

TEST(Groups, LayoutAxisGroupsSumTheirRanks) { check_layout_groups(*world(), kCPU); }

TEST(Deadlines, ASleepingRankMakesThePeersThrowNamingTheCollectiveThenRefuseTheGroup) {
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
    expect_deadline_error(*group, t);
    // MPI pairs collectives by the order they were issued: after the timeout this rank's next
    // call would pair with the sleeper's late all_reduce, so the group is refused instead.
    expect_error_naming([&] { group->barrier(); },
                        {"[barrier] expected a usable MPI group", "a timeout in all_reduce"});
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
  expect_shape_mismatch_named(*group, kCPU);
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
  expect_error_naming(
      [&] {
        if (pg->rank() == 1) {
          group->broadcast(t, 0)->wait();
        } else {
          group->all_reduce(t, ReduceOp::Max)->wait();
        }
      },
      {"ranks [1]: broadcast(root 0, bfloat16[3])", "all_reduce(max, bfloat16[3])", "debug_op"});
  group->barrier()->wait();
}

}  // namespace
}  // namespace tessera::dist::testing
