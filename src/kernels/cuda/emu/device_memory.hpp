#pragma once
// Device memory of the emulated build: cudaMalloc'd blocks live in one reserved range of host address space,
// each followed by at least one inaccessible guard page, so that a kernel's (or cudaMemcpy's) access outside its
// allocation is caught: by the access hooks with the exact bounds (check_global_access), else by the guard page.
// The CUDA runtime API that vlpar uses (cudaMalloc/Free(Async), cudaMemcpy/Memset(Async), streams, events,
// devices and their attributes, function attributes, errors) is defined in device_memory.cpp over this memory,
// so host code is the same in both builds. Test: tests/emu/test_emu_runtime.cpp (EmuDeviceMemory.*)
#include <cstddef>
#include <cstdint>
#include <string>

namespace vlpar::emu {

/// "" when [addr, addr+n) is not device memory or lies inside one live allocation; else what is wrong.
std::string check_global_access(uintptr_t addr, size_t n);

/// A launch failed: cudaGetLastError() returns cudaErrorLaunchFailure next (as after a device fault).
void record_launch_failure();

/// Forget the per-thread cache of the last allocation hit (called at each launch: allocations may change).
void reset_global_access_cache();

}  // namespace vlpar::emu
