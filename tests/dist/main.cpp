// The dist suite's main: MPI up before gtest, down after. Rank 0 prints gtest's usual output; the
// other ranks print only their failures, tagged with the rank, so mpirun's log stays readable.
#include <gtest/gtest.h>

#include <iostream>

#include "tessera/dist/process_group_mpi.h"

namespace {

class FailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (!r.failed()) return;
    std::cerr << "[rank " << rank_ << "] " << (r.file_name() ? r.file_name() : "?") << ":"
              << r.line_number() << ": failure\n"
              << r.summary() << std::endl;
  }

 private:
  int rank_;
};

}  // namespace

int main(int argc, char** argv) {
  tessera::dist::Environment env = tessera::dist::init();
  ::testing::InitGoogleTest(&argc, argv);
  if (env.rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new FailurePrinter(env.rank));
  }
  const int rc = RUN_ALL_TESTS();
  tessera::dist::finalize();
  return rc;
}
