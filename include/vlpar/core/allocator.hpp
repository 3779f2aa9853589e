#pragma once
// Allocator with per-device accounting of current and peak bytes (the trainer reports these).
// One Allocator object is created by the application and passed to whoever allocates; there is no global
// allocator. It must outlive every Tensor it allocated.
//
// Host block cache: a freed host block of at least kHostCacheMinBytes is kept (not returned to the system) and
// handed out again to the next allocation of its size class, up to host_cache_limit bytes kept; beyond the limit
// blocks are freed. Without it every large scratch tensor of a step (expert-dispatch staging, activations) is fresh
// memory from mmap, and its first touch costs a page fault per 4 KiB page: the expert dispatch ran at half speed
// (bench/bench_expert_dispatch.cpp). Size classes: sizes rounded up to a multiple of an eighth of their power of
// two (at most 12.5 % more), so the varying row counts of a MoE step reuse each other's blocks. Cached bytes are
// not "current" (no tensor uses them); stats() reports them apart. Thread-safe.
// Test: tests/unit/test_core.cpp (Allocator tests).
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "vlpar/core/device.hpp"
#include "vlpar/core/status.hpp"

namespace vlpar {

struct MemoryStats {
  int64_t current_bytes = 0;
  int64_t peak_bytes = 0;
  int64_t num_allocs = 0;  // live allocations
  int64_t cached_bytes = 0;  // host: freed blocks kept for reuse (not in current_bytes)
};

class Allocator {
 public:
  static constexpr int kMaxCudaDevices = 16;
  static constexpr size_t kHostAlignment = 64;  // one cache line; also AVX-512 aligned

  static constexpr size_t kHostCacheMinBytes = size_t(1) << 20;       // smaller blocks go straight to malloc
  static constexpr size_t kDefaultHostCacheLimit = size_t(2) << 30;   // 2 GiB kept at most

  explicit Allocator(size_t host_cache_limit = kDefaultHostCacheLimit) : host_cache_limit_(host_cache_limit) {}
  ~Allocator();
  Allocator(const Allocator&) = delete;
  Allocator& operator=(const Allocator&) = delete;

  /// The capacity a host allocation of `bytes` gets: 64-byte aligned, and from kHostCacheMinBytes on rounded up to
  /// its size class (a multiple of 1/8 of the largest power of two ≤ the size).
  static size_t host_capacity(size_t bytes);
  /// @brief Returns every cached host block to the system.
  void release_cached();

  /// @brief Allocates `bytes` on `device`. Zero bytes gives a null pointer and succeeds.
  Result<void*> allocate(size_t bytes, Device device);
  /// @brief Returns memory obtained from allocate() with the same size and device.
  void deallocate(void* ptr, size_t bytes, Device device);

  MemoryStats stats(Device device) const;
  /// @brief Sets the peak of `device` to its current usage (e.g. at each logging interval).
  void reset_peak(Device device);

 private:
  struct Counters {
    std::atomic<int64_t> current{0};
    std::atomic<int64_t> peak{0};
    std::atomic<int64_t> allocs{0};
  };
  Counters* counters(Device device);
  const Counters* counters(Device device) const;

  void* take_cached(size_t capacity);
  bool keep_cached(void* ptr, size_t capacity);

  Counters host_;
  std::array<Counters, kMaxCudaDevices> cuda_;
  size_t host_cache_limit_;
  mutable std::mutex cache_mutex_;                          // guards the two below
  std::unordered_map<size_t, std::vector<void*>> cache_;    // size class → free blocks of that capacity
  size_t cached_bytes_ = 0;
};

}  // namespace vlpar
