#pragma once
// The prelude of every vlpar CUDA source (.cu/.cuh under src/kernels/cuda/): included first, before any CUDA
// header, so that the same kernel source compiles in three worlds (../shared/spec/cuda-emulation.md §1.1):
//   nvcc device pass (__CUDA_ARCH__)  : real built-ins; VLPAR_SHARED → __shared__
//   nvcc host pass                    : launch code only
//   g++ emulation (VLPAR_CUDA_EMU)    : built-ins from emu/device_api.hpp, run by the fiber runtime
// Raw `__shared__` is an error in the emulated build (g++ would silently make it a per-thread local): kernels
// declare shared memory with VLPAR_SHARED(T, name, dims) and VLPAR_DYN_SMEM(T, name). tools/check_cuda_sources.py
// checks that every CUDA source includes this header first. Test: tests/emu/test_emu_runtime.cpp (ctest -L emu)
#if defined(VLPAR_CUDA_EMU)
#if defined(__CUDACC__)
#error "VLPAR_CUDA_EMU is the g++ build of the CUDA sources; nvcc must not see it"
#endif
// Qualifiers that <cuda_runtime.h> leaves undefined or empty under a host compiler. (__noinline__ stays
// undefined: libstdc++ spells __attribute__((__noinline__)), which a macro would break.)
#define __shared__ static_assert(false, "raw __shared__ in an emulated kernel: use VLPAR_SHARED / VLPAR_DYN_SMEM");
#define __launch_bounds__(...)
#include <cuda_runtime.h>

#include "emu/device_api.hpp"
// The caller's source location, an extra defaulted parameter of the PTX wrappers (src/kernels/cuda/ptx/) in the
// emulated build, so that the emulator's reports name the kernel line: `f(int x VLPAR_EMU_LOC)`, `g(VLPAR_EMU_LOC1)`.
#define VLPAR_EMU_LOC , ::vlpar::emu::Loc loc = ::vlpar::emu::Loc::current()
#define VLPAR_EMU_LOC1 ::vlpar::emu::Loc loc = ::vlpar::emu::Loc::current()
#else
#include <cuda_runtime.h>

#define VLPAR_SHARED(T, name, dims) __shared__ T name dims
// Kernels of one translation unit that declare the same name must use the same T (nvcc rejects differently
// typed extern __shared__ arrays of one name).
#define VLPAR_DYN_SMEM(T, name) extern __shared__ __align__(16) T name[]
#define VLPAR_EMU_CHECK_ALIGNED(p, bytes) ((void)0)
#define VLPAR_EMU_LOC
#define VLPAR_EMU_LOC1
#endif
