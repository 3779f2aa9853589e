// ThreadPool and parallel_for (include/vlpar/core/thread_pool.hpp, core/context.hpp): every part runs exactly once,
// partitions depend only on (n, num_threads) whatever thread runs a part, nested and concurrent calls run inline,
// exceptions reach the caller, and a job finishes while its workers cannot run.
#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "vlpar/core/context.hpp"
#include "vlpar/core/thread_pool.hpp"

namespace vlpar {
namespace {

TEST(ThreadPool, EveryPartRunsExactlyOnce) {
  ThreadPool pool;
  for (int64_t parts : {1, 2, 3, 7, 64, 1000}) {
    std::vector<std::atomic<int>> runs(static_cast<size_t>(parts));
    for (int rep = 0; rep < 50; ++rep) {
      pool.run(parts, [&](int64_t p) { runs[size_t(p)].fetch_add(1); });
    }
    for (int64_t p = 0; p < parts; ++p) EXPECT_EQ(runs[size_t(p)].load(), 50) << "parts " << parts << " part " << p;
  }
  EXPECT_LE(pool.num_workers(), 255);
}

TEST(ThreadPool, DestroyedRightAfterItsFirstJob) {
  // The caller can finish a job before the workers it started have even begun running: a worker that starts after
  // the shutdown (or after the job) must still see it and exit, not sleep forever in the destructor's join.
  for (int rep = 0; rep < 300; ++rep) {
    ThreadPool pool;
    std::atomic<int> ran{0};
    pool.run(8, [&](int64_t) { ran.fetch_add(1); });
    EXPECT_EQ(ran.load(), 8);
  }
}

TEST(ThreadPool, RunReturnsOnlyAfterEveryPartFinished) {
  // Parts of different lengths (sleeping, so they overlap even on one core): whoever claimed them, run() returns
  // after the slowest.
  ThreadPool pool;
  for (int rep = 0; rep < 3; ++rep) {
    auto finished = std::make_shared<std::array<std::atomic<int>, 4>>();
    pool.run(4, [finished](int64_t p) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5 * (p + 1)));
      (*finished)[size_t(p)].store(1);
    });
    for (int p = 0; p < 4; ++p) EXPECT_EQ((*finished)[size_t(p)].load(), 1) << "part " << p << ", rep " << rep;
  }
}

TEST(ThreadPool, ManySmallJobsInARow) {
  // Thousands of back-to-back jobs: workers spinning, sleeping and waking late must never run a part twice, skip one,
  // or run a part of one job with another job's function.
  ThreadPool pool;
  std::atomic<int64_t> sum{0};
  int64_t expect = 0;
  for (int job = 0; job < 20000; ++job) {
    const int64_t parts = 2 + job % 5;
    pool.run(parts, [&, job](int64_t p) { sum.fetch_add(int64_t(job) * 8 + p); });
    for (int64_t p = 0; p < parts; ++p) expect += int64_t(job) * 8 + p;
  }
  EXPECT_EQ(sum.load(), expect);
}

TEST(ThreadPool, PartitionsDependOnlyOnTheThreadCount) {
  // parallel_for_parts: chunk p of [0, n) is the same whichever thread ran it, so per-part float sums combined in
  // part order are bitwise equal to the serial computation of the same chunks.
  const int64_t n = 100003;
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) x[size_t(i)] = 1.f / float(1 + (i * 7919) % 1013);
  for (int threads : {2, 3, 8}) {
    Context ctx = Context::cpu_default();
    ctx.num_threads = threads;
    std::vector<float> partial(static_cast<size_t>(threads), 0.f);
    parallel_for_parts(ctx, n, [&](int64_t part, int64_t b, int64_t e) {
      float s = 0.f;
      for (int64_t i = b; i < e; ++i) s += x[size_t(i)];
      partial[size_t(part)] = s;
    });
    for (int64_t p = 0; p < threads; ++p) {
      float s = 0.f;
      for (int64_t i = n * p / threads; i < n * (p + 1) / threads; ++i) s += x[size_t(i)];
      EXPECT_EQ(partial[size_t(p)], s) << threads << " threads, part " << p;
    }
  }
}

TEST(ThreadPool, NestedCallsRunInline) {
  Context ctx = Context::cpu_default();
  ctx.num_threads = 4;
  std::atomic<int64_t> total{0};
  std::atomic<int> nested_outside_part{0};
  parallel_for(ctx, 4, [&](int64_t, int64_t) {
    EXPECT_TRUE(ThreadPool::in_part());
    const std::thread::id self = std::this_thread::get_id();
    parallel_for(ctx, 100, [&](int64_t b, int64_t e) {
      if (std::this_thread::get_id() != self) nested_outside_part.fetch_add(1);
      total.fetch_add(e - b);
    });
  });
  EXPECT_EQ(total.load(), 400);
  EXPECT_EQ(nested_outside_part.load(), 0);
  EXPECT_FALSE(ThreadPool::in_part());
}

TEST(ThreadPool, ConcurrentCallersBothFinish) {
  // Two threads share one pool: one gets the workers, the other runs its parts inline; both results are whole.
  ThreadPool pool;
  std::atomic<int64_t> a{0}, b{0};
  std::thread other([&] {
    for (int i = 0; i < 2000; ++i) pool.run(3, [&](int64_t p) { a.fetch_add(p + 1); });
  });
  for (int i = 0; i < 2000; ++i) pool.run(5, [&](int64_t p) { b.fetch_add(p + 1); });
  other.join();
  EXPECT_EQ(a.load(), 2000 * 6);
  EXPECT_EQ(b.load(), 2000 * 15);
}

TEST(ThreadPool, ExceptionReachesTheCallerAndThePoolStaysUsable) {
  ThreadPool pool;
  std::atomic<int> ran{0};
  EXPECT_THROW(pool.run(6,
                        [&](int64_t p) {
                          ran.fetch_add(1);
                          if (p == 3) throw std::runtime_error("part 3");
                        }),
               std::runtime_error);
  EXPECT_EQ(ran.load(), 6);  // the other parts still ran: run() returns only after every part finished
  std::atomic<int> again{0};
  pool.run(6, [&](int64_t) { again.fetch_add(1); });
  EXPECT_EQ(again.load(), 6);
}

TEST(ThreadPool, APartThatWaitsForTheOthersDoesNotDeadlock) {
  // Part 0 (the first claim, by the caller or a worker) blocks until the other 7 parts ran: they must be claimed by
  // other threads, whichever those are (no part is bound to a thread).
  ThreadPool pool;
  std::mutex m;
  std::condition_variable cv;
  int others_done = 0;
  pool.run(8, [&](int64_t p) {
    std::unique_lock<std::mutex> lock(m);
    if (p == 0) {
      EXPECT_TRUE(cv.wait_for(lock, std::chrono::seconds(30), [&] { return others_done == 7; }));
    } else {
      ++others_done;
      cv.notify_all();
    }
  });
  EXPECT_EQ(others_done, 7);
}

TEST(ThreadPool, SmallOpsRunOnTheCallingThread) {
  // A work estimate below kMinWorkPerPart per part gives fewer parts: an op of a few thousand operations runs
  // inline (no wake-up of a worker, no wait for one on a busy machine); a large one is split num_threads ways.
  Context ctx = Context::cpu_default();
  ctx.num_threads = 4;
  EXPECT_EQ(num_parts(ctx, 64, 16), 1);
  EXPECT_EQ(num_parts(ctx, 64, kMinWorkPerPart / 64), 1);
  EXPECT_EQ(num_parts(ctx, 64, kMinWorkPerPart / 32), 2);
  EXPECT_EQ(num_parts(ctx, 64, kMinWorkPerPart), 4);
  EXPECT_EQ(num_parts(ctx, 3, kMinWorkPerPart), 3);
  EXPECT_EQ(num_parts(ctx, 0, kMinWorkPerPart), 1);
  const std::thread::id self = std::this_thread::get_id();
  int calls = 0;
  parallel_for(ctx, 1000, 8, [&](int64_t b, int64_t e) {
    EXPECT_EQ(std::this_thread::get_id(), self);
    EXPECT_EQ(b, 0);
    EXPECT_EQ(e, 1000);
    ++calls;
  });
  EXPECT_EQ(calls, 1);
  std::atomic<int> parts{0};
  parallel_for(ctx, 1000, kMinWorkPerPart, [&](int64_t, int64_t) { parts.fetch_add(1); });
  EXPECT_EQ(parts.load(), 4);
}

TEST(ThreadPool, DynamicItemsEachOnce) {
  Context ctx = Context::cpu_default();
  ctx.num_threads = 3;
  std::vector<std::atomic<int>> hits(1000);
  parallel_for_dynamic(ctx, 1000, [&](int64_t i) { hits[size_t(i)].fetch_add(1); });
  for (auto& h : hits) EXPECT_EQ(h.load(), 1);
}

}  // namespace
}  // namespace vlpar
