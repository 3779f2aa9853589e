#pragma once
// Where a tensor lives. A Device is a value (kind + index); there is no "current device" global.
#include <cstdint>
#include <string>

namespace vlpar {

enum class DeviceKind : uint8_t { kCPU = 0, kCUDA = 1 };

struct Device {
  DeviceKind kind = DeviceKind::kCPU;
  int index = 0;  // CUDA ordinal; 0 for the host

  static constexpr Device cpu() { return {DeviceKind::kCPU, 0}; }
  static constexpr Device cuda(int i = 0) { return {DeviceKind::kCUDA, i}; }
  constexpr bool is_cpu() const { return kind == DeviceKind::kCPU; }
  constexpr bool is_cuda() const { return kind == DeviceKind::kCUDA; }
  friend constexpr bool operator==(Device a, Device b) { return a.kind == b.kind && a.index == b.index; }
  std::string to_string() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }
};

/// @brief True when this build of vlpar was compiled with CUDA kernels.
bool built_with_cuda();
/// @brief Number of usable CUDA devices at runtime (0 in CPU-only builds or on machines without a GPU).
int cuda_device_count();

}  // namespace vlpar
