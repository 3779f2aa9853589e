// GoogleTest main for the multi-process tests (tests/mpi/test_*.cpp): one process per rank under mpirun.
// Initialises MPI through an MpiSession owned here (finalised when main returns), runs every test on every rank
// in the same order, and exits non-zero on every rank if any rank failed. Rank 0 prints the usual gtest report;
// other ranks print only their failures, tagged with their rank, so a 4-rank log stays readable.
// Run: ctest --preset cpu -L mpi   (or: mpirun -np 4 ./build/cpu/tests/test_collectives)
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>

#include "vlpar/comm/mpi_communicator.hpp"

namespace {
class FailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (!r.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_, r.file_name() ? r.file_name() : "?",
                 r.line_number(), r.message());
  }
  void OnTestEnd(const ::testing::TestInfo& info) override {
    if (info.result()->Failed())
      std::fprintf(stderr, "[  FAILED  ] %s.%s (rank %d)\n", info.test_suite_name(), info.name(), rank_);
  }

 private:
  int rank_;
};
}  // namespace

int main(int argc, char** argv) {
  auto session = vlpar::comm::MpiSession::init(&argc, &argv);
  if (!session.ok()) {
    std::fprintf(stderr, "%s\n", session.status().to_string().c_str());
    return 1;
  }
  ::testing::InitGoogleTest(&argc, argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new FailurePrinter(rank));
  }
  int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  int any_failed = 0;
  MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0 && any_failed && !failed) std::fprintf(stderr, "FAILED on another rank (see [rank N] lines)\n");
  return any_failed;
}
