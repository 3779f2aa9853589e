#pragma once
// Small host helpers shared by the CUDA launchers (host-compilable, no CUDA headers).
// Test: tests/gpu/test_cuda_kernels.cpp (ctest -L gpu)
#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace vlpar::cuda_kernels {

/// Largest gridDim.x; kernels grid-stride past it.
inline constexpr int64_t kMaxGridX = 2147483647;

constexpr int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/// @brief True when VLPAR_PRINT_CONFIGS=1: launchers then log the configuration they picked (STYLE §8).
inline bool print_configs() {
  const char* env = std::getenv("VLPAR_PRINT_CONFIGS");
  return env != nullptr && std::strcmp(env, "1") == 0;
}

}  // namespace vlpar::cuda_kernels
