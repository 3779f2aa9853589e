#pragma once
// Kernel launches, the same call in both builds: `VLPAR_RETURN_IF_ERROR(launch<kernel<T>>(cfg, params));`
//   - checks the configuration first and returns a Status naming the kernel and the limit it breaks (block
//     shape, grid shape, dynamic shared memory against the device's opt-in limit), in both builds;
//   - above 48 KiB of dynamic shared memory, opts the kernel in (cudaFuncSetAttribute) before launching;
//   - nvcc build: Kernel<<<grid, block, smem, stream>>>(args...), then cudaGetLastError;
//     emulated build: the fiber runtime runs the grid now (emu/launch.hpp), and a broken rule comes back as the
//     Status, naming block, thread, rule and source location.
// kernel_name<Kernel>() is the qualified name with template arguments, e.g.
// "vlpar::cuda_kernels::rmsnorm_forward_kernel<float, float, 4, false>": the emulator records it so that CI can
// check that every kernel of the real build ran under emulation (tools/check_emu_coverage.py).
// Test: tests/emu/test_emu_runtime.cpp (EmuLaunch.*), tests/gpu/test_cuda_kernels.cpp
#include "cuda_compat.cuh"

#include <cstddef>
#include <string_view>

#include "vlpar/core/status.hpp"
#ifdef VLPAR_CUDA_EMU
#include "emu/launch.hpp"
#endif

namespace vlpar::cuda_kernels {

struct LaunchConfig {
  dim3 grid;
  dim3 block;
  size_t smem_bytes = 0;  // dynamic shared memory
  void* stream = nullptr;
};

/// The name of the kernel Kernel, from the compiler's signature of this function ("[with auto Kernel = ...]").
template <auto Kernel>
constexpr std::string_view kernel_name() {
  constexpr std::string_view sig = __PRETTY_FUNCTION__;
  constexpr std::string_view key = "Kernel = ";
  constexpr size_t begin = sig.find(key) + key.size();
  constexpr size_t end = sig.find_first_of(";]", begin);
  return sig.substr(begin, end - begin);
}

/// Block and grid shape and dynamic shared memory against the current device's limits; opts in above 48 KiB.
inline Status prepare_launch(std::string_view name, const void* func, const LaunchConfig& cfg) {
  const unsigned long long threads = 1ull * cfg.block.x * cfg.block.y * cfg.block.z;
  VLPAR_CHECK(threads >= 1 && threads <= 1024 && cfg.block.x <= 1024 && cfg.block.y <= 1024 && cfg.block.z <= 64,
              "kernel {}: block ({},{},{}) = {} threads; the limit is 1024 per block (x, y <= 1024, z <= 64)", name,
              cfg.block.x, cfg.block.y, cfg.block.z, threads);
  VLPAR_CHECK(cfg.grid.x >= 1 && cfg.grid.y >= 1 && cfg.grid.y <= 65535 && cfg.grid.z >= 1 && cfg.grid.z <= 65535 &&
                  cfg.grid.x <= 2147483647u,
              "kernel {}: grid ({},{},{}) outside [1, 2^31-1] x [1, 65535] x [1, 65535]", name, cfg.grid.x,
              cfg.grid.y, cfg.grid.z);
  if (cfg.smem_bytes <= 48 * 1024) return Status::Ok();
  int device = 0, max_optin = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&max_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  VLPAR_CHECK_CODE(err == cudaSuccess, StatusCode::kCudaError, "kernel {}: reading the shared-memory limit failed: {}",
                   name, cudaGetErrorString(err));
  VLPAR_CHECK_CODE(cfg.smem_bytes <= size_t(max_optin), StatusCode::kNotSupported,
                   "kernel {}: needs {} bytes of dynamic shared memory, this device allows {} per block", name,
                   cfg.smem_bytes, max_optin);
  err = cudaFuncSetAttribute(func, cudaFuncAttributeMaxDynamicSharedMemorySize, int(cfg.smem_bytes));
  VLPAR_CHECK_CODE(err == cudaSuccess, StatusCode::kCudaError, "kernel {}: opting in to {} bytes of shared memory "
                   "failed: {}", name, cfg.smem_bytes, cudaGetErrorString(err));
  return Status::Ok();
}

template <auto Kernel, class... Args>
Status launch(const LaunchConfig& cfg, const Args&... args) {
  constexpr std::string_view name = kernel_name<Kernel>();
  const void* func = reinterpret_cast<const void*>(Kernel);
  VLPAR_RETURN_IF_ERROR(prepare_launch(name, func, cfg));
#ifdef VLPAR_CUDA_EMU
  const auto body = [&] { Kernel(args...); };
  using Body = decltype(body);
  return emu::run_kernel(name, func, cfg.grid, cfg.block, cfg.smem_bytes,
                         emu::KernelBody{&body, [](const void* b) { (*static_cast<const Body*>(b))(); }});
#else
  Kernel<<<cfg.grid, cfg.block, cfg.smem_bytes, static_cast<cudaStream_t>(cfg.stream)>>>(args...);
  const cudaError_t err = cudaGetLastError();
  VLPAR_CHECK_CODE(err == cudaSuccess, StatusCode::kCudaError, "kernel {}: launch failed: {}", name,
                   cudaGetErrorString(err));
  return Status::Ok();
#endif
}

}  // namespace vlpar::cuda_kernels
