// ProcessGroupNCCL on CUDA tensors: the serial-reference checks of collective_checks.h, stream
// semantics, subgroups, deadlines and debug mode. Part of dist_tests (run under mpirun); every
// test skips in builds without NCCL, without a GPU, or with fewer GPUs than ranks.
#include "collective_checks.h"

#ifdef TESSERA_WITH_NCCL
#include <chrono>
#include <numeric>
#include <thread>

#include "tessera/dist/process_group_nccl.h"
#include "tessera/runtime/cuda.h"

namespace tessera::dist::testing {
namespace {

class Nccl : public ::testing::Test {
 protected:
  // One communicator for the suite: creating one costs tens of milliseconds a rank.
  static void SetUpTestSuite() {
    // The same answer on every rank of a node, so either all ranks create the group or none.
    if (cuda::device_count() >= world()->size()) pg_ = ProcessGroupNCCL::create(world());
  }
  static void TearDownTestSuite() { pg_.reset(); }
  void SetUp() override {
    if (!pg_)
      GTEST_SKIP() << "needs one GPU per rank, found " << cuda::device_count() << " for "
                   << world()->size() << " ranks";
  }

  static Device gpu() { return Device(DeviceType::CUDA, pg_->device()); }
  // A group of every rank with its own communicator, for tests that abort or change settings.
  static std::shared_ptr<ProcessGroupNCCL> fresh_group(const char* name) {
    std::vector<int> all(pg_->size());
    std::iota(all.begin(), all.end(), 0);
    return pg_->new_group(all, name);
  }

  static inline std::shared_ptr<ProcessGroupNCCL> pg_;
};

TEST_F(Nccl, AllReduceMatchesSerialReference) { check_all_reduce(*pg_, gpu(), sizes()); }
TEST_F(Nccl, AllGatherMatchesSerialReference) { check_all_gather(*pg_, gpu(), sizes()); }
TEST_F(Nccl, ReduceScatterMatchesSerialReference) { check_reduce_scatter(*pg_, gpu(), sizes()); }
TEST_F(Nccl, BroadcastFromEveryRoot) { check_broadcast(*pg_, gpu(), sizes()); }
TEST_F(Nccl, SendRecvAroundARing) { check_send_recv_ring(*pg_, gpu(), sizes()); }
TEST_F(Nccl, NonContiguousTensorsAreStaged) { check_non_contiguous(*pg_, gpu()); }

TEST_F(Nccl, WaitOrdersTheCallersStream) {
  // Input written and result read on a stream of the caller's own: the NCCL stream waits for
  // the first, wait() orders the second after the collective.
  cuda::Stream stream;
  cuda::StreamGuard on_stream(stream);
  Tensor t = input(pg_->rank(), 1001, kFloat32).to(gpu()) * 2.0;
  pg_->all_reduce(t)->wait();
  std::vector<double> want = reference(pg_->size(), 1001, kFloat32, ReduceOp::Sum);
  for (double& w : want) w *= 2;
  expect_values(t.to(kCPU), want, kFloat32, "all_reduce on a side stream");
}

TEST_F(Nccl, BarrierAndIsCompleted) {
  WorkHandle w = pg_->barrier();
  while (!w->is_completed()) {
  }
  w->wait();
  EXPECT_TRUE(w->is_completed());
}

TEST_F(Nccl, DroppedHandlesStillComplete) {
  // The tensors stay alive until the stream is past the operations.
  pg_->all_reduce(input(pg_->rank(), 9, kFloat64).to(gpu()));
  // Queued; the barrier launches them first.
  pg_->send(input(pg_->rank(), 9, kFloat64).to(gpu()), (pg_->rank() + 1) % pg_->size());
  pg_->recv(zeros({9}, TensorOptions(kFloat64).with_device(gpu())),
            (pg_->rank() + pg_->size() - 1) % pg_->size());
  pg_->barrier()->wait();
  pg_->barrier()->wait();
}

TEST_F(Nccl, ArgumentErrorsAreTyped) {
  Tensor f = zeros({3}, TensorOptions(kFloat32).with_device(gpu()));
  Tensor i = zeros({3}, TensorOptions(kInt32).with_device(gpu()));
  try {
    pg_->all_reduce(zeros({3}));
    ADD_FAILURE() << "a CPU tensor was accepted";
  } catch (const ValueError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("[all_reduce] expected an input tensor on the group's device"),
              std::string::npos)
        << msg;
  }
  EXPECT_THROW(pg_->send(zeros({3}), 0), ValueError);
  EXPECT_THROW(pg_->all_reduce(i, ReduceOp::Avg), TypeError);
  EXPECT_THROW(pg_->all_gather(zeros({3 * pg_->size() + 1}).to(gpu()), f), ValueError);
  EXPECT_THROW(pg_->all_gather(zeros({3 * pg_->size()}).to(gpu()), i), TypeError);
  EXPECT_THROW(pg_->reduce_scatter(f, zeros({3 * pg_->size() + 1}).to(gpu())), ValueError);
  EXPECT_THROW(pg_->broadcast(f, pg_->size()), IndexError);
  EXPECT_THROW(pg_->send(f, -1), IndexError);
  EXPECT_THROW(pg_->recv(f, 0, -2), ValueError);
  EXPECT_THROW(pg_->all_reduce(Tensor()), ValueError);
  EXPECT_THROW(pg_->new_group({0, 0}), ValueError);
}

TEST_F(Nccl, NewGroupOfEvenRanks) { check_new_group_of_evens(*pg_, gpu()); }

TEST_F(Nccl, LayoutAxisGroupsSumTheirRanks) { check_layout_groups(*pg_, gpu()); }

TEST_F(Nccl, ATimeoutAbortsTheCommunicator) {
  if (pg_->size() < 2) GTEST_SKIP() << "needs a peer to wait for";
  auto group = fresh_group("nccl_deadline");
  group->set_timeout(std::chrono::seconds(2));
  if (pg_->rank() == pg_->size() - 1) {
    std::this_thread::sleep_for(group->timeout() + std::chrono::seconds(2));
    group->abort();  // its peers gave up: a late all_reduce would never complete
  } else {
    expect_deadline_error(*group, input(pg_->rank(), 3, kFloat32).to(gpu()));
  }
  // Aborted on every rank: later calls fail at once instead of hanging.
  EXPECT_THROW(group->barrier(), DistributedError);
  world()->barrier()->wait();
}

TEST_F(Nccl, DebugModeNamesAMismatch) {
  if (pg_->size() < 2) GTEST_SKIP() << "a mismatch needs two ranks";
  auto group = fresh_group("nccl_debug");
  group->set_debug(true);
  Tensor ok = zeros({4}, TensorOptions(kBFloat16).with_device(gpu()));
  group->all_reduce(ok)->wait();
  expect_shape_mismatch_named(*group, gpu());
}

}  // namespace
}  // namespace tessera::dist::testing

#else

TEST(Nccl, NotBuilt) {
  GTEST_SKIP() << "built without NCCL (needs TESSERA_CUDA, TESSERA_MPI and NCCL)";
}

#endif  // TESSERA_WITH_NCCL
