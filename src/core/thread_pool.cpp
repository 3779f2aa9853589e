// The CPU thread pool behind parallel_for: parts claimed from one counter by the caller and the workers.
#include "vlpar/core/thread_pool.hpp"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <system_error>

namespace vlpar {
namespace {

thread_local bool t_in_part = false;

// A worker keeps polling for the next job this long before it sleeps on the futex: ops follow each other within
// microseconds during a step, and waking a sleeping thread costs tens of microseconds. Short enough that a pool
// between steps (or beside a busy process) gives its cores away almost at once.
constexpr auto kWorkerSpin = std::chrono::microseconds(100);
// The caller polls this long for the last claimed parts before it sleeps until the last one finishes.
constexpr auto kCallerSpin = std::chrono::microseconds(50);
// Most worker threads one pool starts (a job with more parts runs them on fewer threads).
constexpr int64_t kMaxWorkers = 255;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

constexpr uint64_t pack(uint32_t epoch, int64_t parts, int64_t next) {
  return (uint64_t(epoch) << 32) | (uint64_t(parts - 1) << 16) | uint64_t(next);
}
constexpr uint32_t epoch_of(uint64_t s) { return uint32_t(s >> 32); }
constexpr int64_t parts_of(uint64_t s) { return int64_t((s >> 16) & 0xFFFF) + 1; }
constexpr int64_t next_of(uint64_t s) { return int64_t(s & 0xFFFF); }

// Sleeping and waking on a 32-bit word: Linux futexes, called directly, with an explicit count of sleepers, so that
// a job published while every worker is spinning costs no system call.
static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t) && std::atomic<uint32_t>::is_always_lock_free);

/// Blocks while *word == expected (returns at once if it differs; may return spuriously).
void futex_wait(std::atomic<uint32_t>& word, uint32_t expected) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAIT_PRIVATE, expected, nullptr, nullptr, 0);
}

void futex_wake_all(std::atomic<uint32_t>& word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
}

/// Sleeps until word != seen: announces itself in `sleepers` first, so that a writer that stores a new value and
/// then sees no sleeper may skip the wake-up system call (both sides sequentially consistent: either the writer
/// sees the sleeper or the sleeper sees the new value, which futex_wait also checks atomically).
void sleep_while_equal(std::atomic<uint32_t>& word, uint32_t seen, std::atomic<int32_t>& sleepers) {
  sleepers.fetch_add(1, std::memory_order_seq_cst);
  while (word.load(std::memory_order_seq_cst) == seen) futex_wait(word, seen);
  sleepers.fetch_sub(1, std::memory_order_seq_cst);
}

void wake_sleepers(std::atomic<uint32_t>& word, const std::atomic<int32_t>& sleepers) {
  if (sleepers.load(std::memory_order_seq_cst) > 0) futex_wake_all(word);
}

/// Polls cond() for up to `spin`, checking the clock every 64 polls; true if it held.
template <class Cond>
bool spin_until(std::chrono::microseconds spin, Cond&& cond) {
  const auto until = std::chrono::steady_clock::now() + spin;
  for (int i = 1;; ++i) {
    if (cond()) return true;
    cpu_relax();
    if (i % 64 == 0 && std::chrono::steady_clock::now() >= until) return cond();
  }
}

}  // namespace

ThreadPool& ThreadPool::shared() {
  static ThreadPool pool;
  return pool;
}

bool ThreadPool::in_part() { return t_in_part; }

int ThreadPool::num_workers() const {
  std::lock_guard<std::mutex> lock(workers_mutex_);
  return int(workers_.size());
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_seq_cst);
  epoch_.fetch_add(1, std::memory_order_seq_cst);
  wake_sleepers(epoch_, epoch_sleepers_);
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::ensure_workers(int64_t want) {
  std::lock_guard<std::mutex> lock(workers_mutex_);
  want = std::min(want, kMaxWorkers);
  while (int64_t(workers_.size()) < want) {
    try {
      // The worker starts from the epoch before the job about to be published (ensure_workers runs before the
      // publish, under run_mutex_): a thread the scheduler starts late still sees that job, or the shutdown.
      workers_.emplace_back([this, seen = epoch_.load(std::memory_order_acquire)] { worker_loop(seen); });
    } catch (const std::system_error&) {
      return;  // no more threads: the caller and the workers there are run every part
    }
  }
}

void ThreadPool::worker_loop(uint32_t seen) {
  for (;;) {
    if (!spin_until(kWorkerSpin, [&] { return epoch_.load(std::memory_order_acquire) != seen; }))
      sleep_while_equal(epoch_, seen, epoch_sleepers_);
    seen = epoch_.load(std::memory_order_acquire);
    if (stop_.load(std::memory_order_acquire)) return;
    run_parts(seen);
  }
}

void ThreadPool::run_parts(uint32_t epoch) {
  const bool outer = t_in_part;
  t_in_part = true;
  for (;;) {
    uint64_t s = state_.load(std::memory_order_acquire);
    int64_t part = 0, parts = 0;
    for (;;) {  // claim the next part of this epoch's job, if one is left
      if (epoch_of(s) != epoch || next_of(s) >= parts_of(s)) {
        t_in_part = outer;
        return;
      }
      part = next_of(s);
      parts = parts_of(s);
      if (state_.compare_exchange_weak(s, s + 1, std::memory_order_acq_rel, std::memory_order_acquire)) break;
    }
    // The job cannot change while one of its parts is claimed and unfinished: invoke_ and obj_ are this epoch's.
    try {
      invoke_(obj_, part);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex_);
      if (!error_) error_ = std::current_exception();
    }
    if (int64_t(done_.fetch_add(1, std::memory_order_seq_cst)) + 1 == parts) wake_sleepers(done_, done_sleepers_);
  }
}

void ThreadPool::run_erased(int64_t parts, Invoke invoke, void* obj) {
  if (parts <= 0) return;
  // Inline: one part, a nested call, a job too large for the claim counter, or another thread's job in flight.
  if (parts == 1 || t_in_part || parts > kMaxParts || !run_mutex_.try_lock()) {
    for (int64_t p = 0; p < parts; ++p) invoke(obj, p);
    return;
  }
  std::lock_guard<std::mutex> lock(run_mutex_, std::adopt_lock);
  ensure_workers(parts - 1);
  invoke_ = invoke;
  obj_ = obj;
  error_ = nullptr;
  done_.store(0, std::memory_order_relaxed);
  const uint32_t epoch = epoch_.load(std::memory_order_relaxed) + 1;
  state_.store(pack(epoch, parts, 0), std::memory_order_release);
  epoch_.store(epoch, std::memory_order_seq_cst);
  wake_sleepers(epoch_, epoch_sleepers_);
  run_parts(epoch);  // the caller works too: with every worker descheduled it runs all parts itself
  const auto finished = [&] { return int64_t(done_.load(std::memory_order_acquire)) == parts; };
  if (!spin_until(kCallerSpin, finished)) {
    for (uint32_t d = done_.load(std::memory_order_seq_cst); int64_t(d) != parts;
         d = done_.load(std::memory_order_seq_cst))
      sleep_while_equal(done_, d, done_sleepers_);
  }
  if (error_) std::rethrow_exception(error_);
}

}  // namespace vlpar
