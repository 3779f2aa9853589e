// The watchdog: Work::wait() gives up after the group's timeout with kTimeout naming op, group, rank and peer.
//   RecvTimesOutAndIsCancelled : a recv whose sender never sends times out, is cancelled, the group stays usable.
//   AllReduceTimesOutWhenAPeerNeverJoins : rank 1 sleeps far past the timeout instead of joining an all_reduce;
//     rank 0 must get kTimeout within timeout + slack, the group must then refuse further ops, and rank 0 aborts
//     the job with MpiSession::abort_job, as a binary would. The job therefore ends with a non-zero exit code;
//     ctest passes it on the "VLPAR_WATCHDOG_OK" line (PASS_REGULAR_EXPRESSION), and its TIMEOUT (well below
//     rank 1's sleep) fails a watchdog that hangs instead of timing out.
// Run: ctest --preset cpu -R test_watchdog   (mpirun -np 2 ./build/cpu/tests/test_watchdog; exits via MPI_Abort)
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "mpi/mpi_test_util.hpp"

namespace vlpar::test {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kRecvTimeout = std::chrono::milliseconds(500);
constexpr auto kCollectiveTimeout = std::chrono::milliseconds(1000);
constexpr double kSlackSeconds = 2.0;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

TEST(Watchdog, RecvTimesOutAndIsCancelled) {
  auto c = comm::MpiCommunicator::create(MPI_COMM_WORLD, comm::CommOptions{"watchdog", kRecvTimeout});
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  auto& comm = *c.value();
  ASSERT_GE(comm.size(), 2);
  if (comm.rank() == 0) {
    Allocator alloc;
    Buf b = make_buf(alloc, {4}, DType::kF32);
    const auto t0 = Clock::now();
    const Status s = comm.recv(b.view, 1, 77);  // rank 1 never sends with tag 77
    const double dt = seconds_since(t0);
    EXPECT_EQ(s.code(), StatusCode::kTimeout) << s.to_string();
    EXPECT_NE(s.message().find(fmt::format("recv on group 'watchdog' (rank 0 of {}): timed out after 500 ms waiting "
                                           "for rank 1 (tag 77); receive cancelled",
                                           comm.size())),
              std::string::npos)
        << s.message();
    EXPECT_GE(dt, 0.5);
    EXPECT_LE(dt, 0.5 + kSlackSeconds);
  }
  // The cancelled receive left the group usable.
  EXPECT_TRUE(comm.barrier().ok());
}

TEST(Watchdog, AllReduceTimesOutWhenAPeerNeverJoins) {
  auto c = comm::MpiCommunicator::create(MPI_COMM_WORLD, comm::CommOptions{"watchdog", kCollectiveTimeout});
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  auto& comm = *c.value();
  ASSERT_EQ(comm.size(), 2) << "register this test with NP 2 only";
  if (comm.rank() == 1) {
    std::this_thread::sleep_for(std::chrono::seconds(60));  // never joins in time; killed by rank 0's abort
    ADD_FAILURE() << "rank 1 was not aborted by rank 0";
    return;
  }
  Allocator alloc;
  Buf b = make_buf(alloc, {16}, DType::kBF16);
  const auto t0 = Clock::now();
  const Status s = comm.all_reduce(b.view, comm::ReduceOp::kSum);
  const double dt = seconds_since(t0);
  EXPECT_EQ(s.code(), StatusCode::kTimeout) << s.to_string();
  EXPECT_NE(s.message().find("all_reduce on group 'watchdog' (rank 0 of 2): timed out after 1000 ms waiting for any "
                             "of ranks {1}"),
            std::string::npos)
      << s.message();
  EXPECT_GE(dt, 1.0);
  EXPECT_LE(dt, 1.0 + kSlackSeconds);
  // After a collective timed out, the group refuses further work instead of mixing up in-flight ops.
  const Status again = comm.barrier();
  EXPECT_EQ(again.code(), StatusCode::kCommError) << again.to_string();
  EXPECT_NE(again.message().find("barrier on group 'watchdog' (rank 0 of 2): the group is unusable since all_reduce "
                                 "on group 'watchdog' (rank 0 of 2) timed out"),
            std::string::npos)
      << again.message();
  std::printf("%s: %s (after %.2f s)\n", ::testing::Test::HasFailure() ? "VLPAR_WATCHDOG_FAILED" : "VLPAR_WATCHDOG_OK",
              s.to_string().c_str(), dt);
  // gtest's own summary never prints (the job aborts below), so report a failure in its format here.
  if (::testing::Test::HasFailure()) std::printf("[  FAILED  ] Watchdog.AllReduceTimesOutWhenAPeerNeverJoins\n");
  std::fflush(stdout);
  comm::MpiSession::abort_job(s);  // what a binary does with a timeout: end every rank of the job
}

}  // namespace
}  // namespace vlpar::test
