#pragma once
// Execution context passed to every op (DESIGN §3): device, CPU thread count, CUDA stream, allocator.
// CPU parallelism uses OpenMP with static partitions of a fixed thread count, so every reduction has a fixed
// work split and results are bitwise reproducible for a given num_threads (DESIGN §7).
#include <algorithm>
#include <cstdint>

#include "vlpar/core/allocator.hpp"
#include "vlpar/core/device.hpp"

namespace vlpar {

struct Context {
  Device device = Device::cpu();
  int num_threads = 1;          // CPU worker threads (>= 1)
  void* stream = nullptr;       // cudaStream_t when device is CUDA; nullptr is the legacy default stream
  Allocator* allocator = nullptr;

  /// @brief A CPU context using every hardware thread OpenMP reports.
  static Context cpu_default();
};

/// @brief Number of static chunks parallel_for splits [0, n) into: min(num_threads, n), at least 1.
inline int64_t num_parts(const Context& ctx, int64_t n) {
  return std::max<int64_t>(1, std::min<int64_t>(ctx.num_threads, n));
}

/// @brief Runs fn(part, begin, end) for each of num_parts(ctx, n) contiguous static chunks of [0, n).
/// Chunk boundaries depend only on (n, num_threads), so per-part partial sums combined in part order give
/// bitwise reproducible reductions. Nested calls run serially.
template <class Fn>
void parallel_for_parts(const Context& ctx, int64_t n, Fn&& fn) {
  if (n <= 0) return;
  const int64_t parts = num_parts(ctx, n);
  if (parts == 1) {
    fn(int64_t{0}, int64_t{0}, n);
    return;
  }
#pragma omp parallel for num_threads(int(parts)) schedule(static, 1)
  for (int64_t p = 0; p < parts; ++p) fn(p, n * p / parts, n * (p + 1) / parts);
}

/// @brief Runs fn(begin, end) over the static chunks of parallel_for_parts.
template <class Fn>
void parallel_for(const Context& ctx, int64_t n, Fn&& fn) {
  parallel_for_parts(ctx, n, [&](int64_t, int64_t begin, int64_t end) { fn(begin, end); });
}

/// @brief Like parallel_for but hands out items one at a time, dynamically. Use only where each item's result
/// does not depend on which thread ran it (item-level outputs, no cross-item float accumulation).
template <class Fn>
void parallel_for_dynamic(const Context& ctx, int64_t n, Fn&& fn) {
  if (n <= 0) return;
  const int threads = int(std::max<int64_t>(1, std::min<int64_t>(ctx.num_threads, n)));
  if (threads == 1) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
  for (int64_t i = 0; i < n; ++i) fn(i);
}

}  // namespace vlpar
