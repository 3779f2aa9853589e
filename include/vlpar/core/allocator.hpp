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
//
// Device block cache: every freed CUDA block (sizes rounded up to 512 bytes, from 1 MiB on to the same size
// classes) is kept for the next allocation of its size class on that device: no cudaMalloc per tensor, and no
// cudaFree, which waits for the whole device. A block is handed out again right away, which is safe because each
// device's work runs in one stream's order (the context's stream; the legacy default stream unless set): a kernel
// that still reads the freed block runs before anything queued later on the new owner's behalf. When an
// allocation fails, the device's cached blocks are freed and it is tried once more; the error then names the
// requested size, the bytes in use and the peak. Cached blocks are not available to other allocators of the
// device (NCCL, cudaMallocAsync, library workspaces): release_cached() returns them. Limit: device_cache_limit
// bytes per device; by default none, 0 (no cache: exact-size blocks freed at once) with VLPAR_DEVICE_CACHE=0 in
// the environment (compute-sanitizer runs) and in the emulated build, whose bounds checks need every block at its
// exact cudaMalloc size. Reuse in stream order assumes the legacy default stream (ctx.stream null), which orders
// the runtime's own copies and memsets too.
// Test: tests/unit/test_core.cpp (Allocator tests), tests/emu/test_emu_allocator.cpp (device blocks, emulated).
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
  int64_t cached_bytes = 0;  // freed blocks kept for reuse (not in current_bytes)
};

class Allocator {
 public:
  static constexpr int kMaxCudaDevices = 16;
  static constexpr size_t kHostAlignment = 64;  // one cache line; also AVX-512 aligned

  static constexpr size_t kHostCacheMinBytes = size_t(1) << 20;       // smaller blocks go straight to malloc
  static constexpr size_t kDefaultHostCacheLimit = size_t(2) << 30;   // 2 GiB kept at most
  static constexpr size_t kDeviceAlignment = 512;                      // cudaMalloc gives 256; 512 as PyTorch
  static constexpr size_t kNoCacheLimit = ~size_t(0);
  /// kNoCacheLimit; 0 (no device cache) in the emulated build.
  static size_t default_device_cache_limit();

  explicit Allocator(size_t host_cache_limit = kDefaultHostCacheLimit,
                     size_t device_cache_limit = default_device_cache_limit())
      : host_cache_limit_(host_cache_limit), device_cache_limit_(device_cache_limit) {}
  ~Allocator();
  Allocator(const Allocator&) = delete;
  Allocator& operator=(const Allocator&) = delete;

  /// The capacity a host allocation of `bytes` gets: 64-byte aligned, and from kHostCacheMinBytes on rounded up to
  /// its size class (a multiple of 1/8 of the largest power of two ≤ the size).
  static size_t host_capacity(size_t bytes);
  /// The capacity a CUDA allocation of `bytes` gets: a multiple of 512 bytes, from 1 MiB on its size class.
  static size_t device_capacity(size_t bytes);
  /// @brief Returns every cached block (host and devices) to the system.
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

  /// Free blocks of one device (pool 0: the host; pool 1 + i: CUDA device i), by capacity.
  struct Pool {
    std::unordered_map<size_t, std::vector<void*>> blocks;  // size class → free blocks of that capacity
    size_t bytes = 0;
  };
  static size_t pool_index(Device device) { return device.is_cpu() ? 0 : 1 + size_t(device.index); }
  void* take_cached(Device device, size_t capacity);
  bool keep_cached(Device device, void* ptr, size_t capacity);
  /// Frees the cached blocks of `device`; returns the bytes freed.
  size_t release_cached(Device device);
  Result<void*> allocate_device(size_t bytes, Device device, const Counters& c);

  Counters host_;
  std::array<Counters, kMaxCudaDevices> cuda_;
  size_t host_cache_limit_, device_cache_limit_;
  mutable std::mutex cache_mutex_;  // guards pools_
  std::array<Pool, 1 + kMaxCudaDevices> pools_;
};

}  // namespace vlpar
