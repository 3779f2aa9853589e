#pragma once
// Host side of the emulated CUDA build: running one kernel launch on the CPU, and the record of every kernel
// launched in this process (for the CI check that every compiled kernel ran under emulation).
//   run_kernel      : every block of the grid, one after another on the calling OS thread; the threads of a
//                     block as fibers (emu/runtime.cpp). Returns a Status naming kernel, block, thread and the
//                     broken rule when the kernel breaks one (races, out-of-bounds, divergent barriers, …).
//   launched_kernels: names in first-launch order; written to $VLPAR_EMU_LAUNCH_LOG at exit when set.
// Options come from the environment at each launch (docs/cuda-emulation.md):
//   VLPAR_EMU_SCHED=random|rr (default random), VLPAR_EMU_SEED (default 1), VLPAR_EMU_STACK_KB (default 256),
//   VLPAR_EMU_ARCH=80|90 (default 90: shared-memory limit), VLPAR_EMU_STRICT=0|1 (default 1),
//   VLPAR_EMU_TIMEOUT_S (default 600: a launch running longer aborts the process with a report).
// Test: tests/emu/test_emu_runtime.cpp (ctest -L emu)
#include <cuda_runtime.h>

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "vlpar/core/status.hpp"

namespace vlpar::emu {

/// The kernel body as each CUDA thread runs it: invoke(ctx) calls the kernel with its arguments.
struct KernelBody {
  const void* ctx;
  void (*invoke)(const void* ctx);
};

/// Runs the launch now. `func` identifies the kernel (its address) for cudaFuncSetAttribute.
Status run_kernel(std::string_view name, const void* func, dim3 grid, dim3 block, size_t dynamic_smem,
                  KernelBody body);

/// Names of the kernels launched in this process so far (each once).
std::vector<std::string> launched_kernels();

/// The opt-in dynamic shared memory limit set with cudaFuncSetAttribute for `func` (0 when never set).
int max_dynamic_smem_attribute(const void* func);

}  // namespace vlpar::emu
