#pragma once
// Execution context passed to every op (DESIGN §3): device, CPU thread count and pool, CUDA stream, allocator.
// CPU parallelism splits [0, n) into static parts that depend only on (n, num_threads), so every reduction has a
// fixed work split and results are bitwise reproducible for a given num_threads (DESIGN §7); which thread runs a
// part is decided at run time by the thread pool (core/thread_pool.hpp), so a descheduled worker never holds up
// an op on a busy machine.
#include <algorithm>
#include <atomic>
#include <cstdint>

#include "vlpar/core/allocator.hpp"
#include "vlpar/core/device.hpp"
#include "vlpar/core/thread_pool.hpp"

namespace vlpar {

class WeightGradQueue;

struct Context {
  Device device = Device::cpu();
  int num_threads = 1;          // CPU parts per parallel op (>= 1); also the pool's thread count
  void* stream = nullptr;       // cudaStream_t when device is CUDA; nullptr is the legacy default stream
  Allocator* allocator = nullptr;
  ThreadPool* pool = nullptr;   // nullptr: ThreadPool::shared(), the process-wide pool
  /// Set: the nn blocks' backward computes input gradients only and queues its parameter-gradient GEMMs here (the
  /// I of a split backward, core/weight_grad_queue.hpp); nullptr: they run at once (the full backward).
  WeightGradQueue* weight_grads = nullptr;

  /// @brief A CPU context with default_cpu_threads() threads.
  static Context cpu_default();
};

/// @brief The CPU thread count a default context uses: VLPAR_NUM_THREADS, else OMP_NUM_THREADS (its first value),
/// else the CPUs this process may run on (its affinity mask). At least 1.
int default_cpu_threads();

/// @brief Number of static chunks parallel_for splits [0, n) into: min(num_threads, n, kMaxParts), at least 1.
inline int64_t num_parts(const Context& ctx, int64_t n) {
  return std::max<int64_t>(1, std::min<int64_t>({int64_t(ctx.num_threads), n, ThreadPool::kMaxParts}));
}

/// @brief Number of static chunks for n items of about `work` elementary operations each: at most num_parts, and
/// few enough that every chunk gets kMinWorkPerPart operations (a smaller op runs on the calling thread: waking
/// a worker costs more than it saves, and on a busy machine each part is a chance to wait for a time slice).
/// Depends only on (n, work, num_threads), so results stay reproducible for a given thread count.
inline constexpr int64_t kMinWorkPerPart = 1 << 15;
inline int64_t num_parts(const Context& ctx, int64_t n, int64_t work) {
  const int64_t total = n * std::max<int64_t>(1, work);
  return std::max<int64_t>(1, std::min<int64_t>(num_parts(ctx, n), total / kMinWorkPerPart));
}

namespace detail {
/// The pool ctx names, else the process-wide one.
inline ThreadPool& pool_of(const Context& ctx) { return ctx.pool != nullptr ? *ctx.pool : ThreadPool::shared(); }

template <class Fn>
void run_parts(const Context& ctx, int64_t n, int64_t parts, Fn&& fn) {
  if (n <= 0) return;
  if (parts == 1) {
    fn(int64_t{0}, int64_t{0}, n);
    return;
  }
  pool_of(ctx).run(parts, [&](int64_t p) { fn(p, n * p / parts, n * (p + 1) / parts); });
}
}  // namespace detail

/// @brief Runs fn(part, begin, end) for each of num_parts(ctx, n) contiguous static chunks of [0, n).
/// Chunk boundaries depend only on (n, num_threads), so per-part partial sums combined in part order give
/// bitwise reproducible reductions. Nested calls run serially on the calling thread.
template <class Fn>
void parallel_for_parts(const Context& ctx, int64_t n, Fn&& fn) {
  detail::run_parts(ctx, n, num_parts(ctx, n), fn);
}

/// @brief parallel_for_parts with a work estimate per item (elementary operations): small ops run inline.
template <class Fn>
void parallel_for_parts(const Context& ctx, int64_t n, int64_t work_per_item, Fn&& fn) {
  detail::run_parts(ctx, n, num_parts(ctx, n, work_per_item), fn);
}

/// @brief Runs fn(begin, end) over the static chunks of parallel_for_parts.
template <class Fn>
void parallel_for(const Context& ctx, int64_t n, Fn&& fn) {
  parallel_for_parts(ctx, n, [&](int64_t, int64_t begin, int64_t end) { fn(begin, end); });
}

/// @brief parallel_for with a work estimate per item (elementary operations): small ops run inline.
template <class Fn>
void parallel_for(const Context& ctx, int64_t n, int64_t work_per_item, Fn&& fn) {
  parallel_for_parts(ctx, n, work_per_item, [&](int64_t, int64_t begin, int64_t end) { fn(begin, end); });
}

/// @brief Runs fn(part, begin, end) over `parts` static chunks of [0, n), `parts` computed once by the caller with
/// num_parts (either form) and clamped to [1, num_parts(ctx, n)]. For reductions: the buffer of per-part partials
/// and the loop that fills it take the same `parts`, so the two can never disagree (part < parts always).
template <class Fn>
void parallel_for_n_parts(const Context& ctx, int64_t n, int64_t parts, Fn&& fn) {
  detail::run_parts(ctx, n, std::clamp<int64_t>(parts, 1, num_parts(ctx, n)), fn);
}

/// @brief Hands out items [0, n) one at a time, dynamically, to num_parts(ctx, n) runners; each runner first
/// builds its own state with make() (scratch buffers) and calls fn(i, state) for every item it takes. Use only
/// where each item's result does not depend on which runner ran it (item-level outputs, no cross-item float
/// accumulation).
template <class Make, class Fn>
void parallel_for_dynamic_with(const Context& ctx, int64_t n, Make&& make, Fn&& fn) {
  if (n <= 0) return;
  const int64_t runners = num_parts(ctx, n);
  if (runners == 1) {
    auto state = make();
    for (int64_t i = 0; i < n; ++i) fn(i, state);
    return;
  }
  std::atomic<int64_t> next{0};
  detail::pool_of(ctx).run(runners, [&](int64_t) {
    auto state = make();
    for (int64_t i = next.fetch_add(1, std::memory_order_relaxed); i < n;
         i = next.fetch_add(1, std::memory_order_relaxed))
      fn(i, state);
  });
}

/// @brief parallel_for_dynamic_with without per-runner state: fn(i).
template <class Fn>
void parallel_for_dynamic(const Context& ctx, int64_t n, Fn&& fn) {
  parallel_for_dynamic_with(ctx, n, [] { return 0; }, [&](int64_t i, int) { fn(i); });
}

}  // namespace vlpar
