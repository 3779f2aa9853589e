#pragma once
// Named barriers (PTX "bar, barrier"), one call site for both builds: inline PTX under __CUDA_ARCH__, the
// emulator's barrier under VLPAR_CUDA_EMU (emu/runtime.cpp).
//   named_barrier_sync(id, threads)   : bar.sync id, threads — arrive and wait until `threads` have arrived
//   named_barrier_arrive(id, threads) : bar.arrive id, threads — arrive without waiting (a producer's signal)
// id 1..15 (0 is __syncthreads'); threads a multiple of 32, the same at every arrival of one use. Barriers between
// some warps order exactly those warps' shared-memory accesses (the emulator's race shadow merges their vector
// clocks), as warp-specialised producer/consumer kernels need. SASS: BAR.SYNC / BAR.ARV.
// Test: tests/emu/test_emu_runtime.cpp (EmuNamedBarrier.*)
#include "../cuda_compat.cuh"  // first: the prelude of every CUDA source

namespace vlpar::ptx {

__device__ __forceinline__ void named_barrier_sync(int id, int threads VLPAR_EMU_LOC) {
#if defined(__CUDA_ARCH__)
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
#elif defined(VLPAR_CUDA_EMU)
  ::vlpar::emu::named_barrier(id, threads, true, loc);
#else
  (void)id, (void)threads;
#endif
}

__device__ __forceinline__ void named_barrier_arrive(int id, int threads VLPAR_EMU_LOC) {
#if defined(__CUDA_ARCH__)
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
#elif defined(VLPAR_CUDA_EMU)
  ::vlpar::emu::named_barrier(id, threads, false, loc);
#else
  (void)id, (void)threads;
#endif
}

}  // namespace vlpar::ptx
