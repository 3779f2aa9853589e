#pragma once
// The CPU thread pool behind parallel_for (DESIGN §7): static parts, dynamic executors.
//
// A job is `parts` numbered tasks whose boundaries the caller fixed (parallel_for: from n and num_threads only), so
// results are bitwise reproducible whatever thread runs which part. The calling thread and the pool's workers
// claim parts from one shared counter until none is left; the caller then waits only for parts already claimed.
// Why not OpenMP's fork-join: its team barrier waits for every thread of the team, so on a busy machine each op
// waits for a descheduled worker's next time slice (issue 18: a 7 ms training step took up to 7.5 s beside four
// busy processes). Here a worker the scheduler has not run yet simply finds no part left when it wakes.
//
// Workers spin briefly between jobs (consecutive ops are microseconds apart), then block on a Linux futex, so an
// idle pool uses no CPU. One job at a time: a second thread that calls run() while a
// job is in flight, and any call from inside a part (nesting), runs its parts inline on the calling thread.
// An exception thrown by a part is rethrown by run() after every claimed part has finished (the first one wins).
// Test: tests/unit/test_thread_pool.cpp. Bench: bench/contention/ (idle vs busy machine, next to PyTorch).
#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace vlpar {

class ThreadPool {
 public:
  /// Most parts of one job (the claim counter's width).
  static constexpr int64_t kMaxParts = 1 << 15;

  /// @brief A pool that starts no thread until a job with more than one part needs one.
  ThreadPool() = default;
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  /// @brief The process-wide pool used by every Context whose `pool` is null (created on first use).
  static ThreadPool& shared();

  /// @brief Runs fn(part) for every part in [0, parts), on the caller and up to parts − 1 workers; returns when all
  /// have run. A job of more than kMaxParts parts runs inline on the caller.
  template <class Fn>
  void run(int64_t parts, Fn&& fn) {
    auto invoke = [](void* obj, int64_t part) { (*static_cast<std::remove_reference_t<Fn>*>(obj))(part); };
    run_erased(parts, invoke, const_cast<void*>(static_cast<const void*>(&fn)));
  }

  /// @brief Worker threads started so far (they are started on demand and kept until the pool is destroyed).
  int num_workers() const;

  /// @brief True on a thread that is running a part of some pool's job (parallel_for runs nested calls inline).
  static bool in_part();

 private:
  using Invoke = void (*)(void* obj, int64_t part);

  void run_erased(int64_t parts, Invoke invoke, void* obj);
  void ensure_workers(int64_t want);
  void worker_loop(uint32_t seen);  // seen: the last epoch this worker need not look at
  // Claims and runs parts of the job published under `epoch` until none is left.
  void run_parts(uint32_t epoch);

  // state_ = epoch (32 bits) | parts − 1 (16 bits) | next unclaimed part (16 bits; at most parts ≤ kMaxParts).
  // One word, so a claim (a CAS) is valid only for the job it read: a late worker cannot take a part of the next
  // job with the previous job's size.
  std::atomic<uint64_t> state_{0};
  std::atomic<uint32_t> epoch_{0};   // the futex workers sleep on: bumped after each publish and at shutdown
  std::atomic<uint32_t> done_{0};    // parts of the current job finished (the futex the caller sleeps on)
  std::atomic<int32_t> epoch_sleepers_{0}, done_sleepers_{0};  // threads asleep on each (wake only if any)
  Invoke invoke_ = nullptr;          // the current job: written only while no part of it can be claimed
  void* obj_ = nullptr;
  std::exception_ptr error_;
  std::mutex error_mutex_;
  std::mutex run_mutex_;             // one job in flight; other callers run inline
  std::atomic<bool> stop_{false};
  std::vector<std::thread> workers_;
  mutable std::mutex workers_mutex_;
};

}  // namespace vlpar
