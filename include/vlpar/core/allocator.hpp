#pragma once
// Allocator with per-device accounting of current and peak bytes (the trainer reports these).
// One Allocator object is created by the application and passed to whoever allocates; there is no global
// allocator. It must outlive every Tensor it allocated.
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "vlpar/core/device.hpp"
#include "vlpar/core/status.hpp"

namespace vlpar {

struct MemoryStats {
  int64_t current_bytes = 0;
  int64_t peak_bytes = 0;
  int64_t num_allocs = 0;  // live allocations
};

class Allocator {
 public:
  static constexpr int kMaxCudaDevices = 16;
  static constexpr size_t kHostAlignment = 64;  // one cache line; also AVX-512 aligned

  Allocator() = default;
  Allocator(const Allocator&) = delete;
  Allocator& operator=(const Allocator&) = delete;

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

  Counters host_;
  std::array<Counters, kMaxCudaDevices> cuda_;
};

}  // namespace vlpar
