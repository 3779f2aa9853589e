#pragma once
// cp.async (sm_80+) with one call site for both builds (inline PTX under __CUDA_ARCH__; the emulator's per-thread
// copy queue under VLPAR_CUDA_EMU, emu/async_copy.cpp).
//   cp_async_cg16(dst, src, src_bytes = 16) : 16 bytes global → shared, L2 only; bytes beyond src_bytes are zeros
//   cp_async_ca<B>(dst, src, src_bytes = B) : B = 4, 8 or 16 bytes, L1 + L2
//   cp_async_commit()                      : closes this thread's current group (an empty group is legal)
//   cp_async_wait<N>()                     : waits until at most this thread's N newest groups are in flight
// Completion is per issuing thread: other threads read the data after the issuer's wait AND a __syncthreads.
// dst and src aligned to the copy size. SASS: LDGSTS.E.BYPASS.128 / LDGSTS.E{.64,.128}, LDGDEPBAR, DEPBAR.LE SB0.
// Test: tests/emu/test_emu_warp_matrix.cpp (ctest -L emu)
#include "../cuda_compat.cuh"  // first: the prelude of every CUDA source

#include <cstdint>

namespace vlpar::ptx {

__device__ __forceinline__ void cp_async_cg16(void* dst, const void* src, int src_bytes = 16 VLPAR_EMU_LOC) {
#if defined(__CUDA_ARCH__)
  const auto s = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(src), "r"(src_bytes));
#elif defined(VLPAR_CUDA_EMU)
  ::vlpar::emu::cp_async(dst, src, 16, src_bytes, true, loc);
#else
  (void)dst, (void)src, (void)src_bytes;
#endif
}

template <int kBytes>
__device__ __forceinline__ void cp_async_ca(void* dst, const void* src, int src_bytes = kBytes VLPAR_EMU_LOC) {
  static_assert(kBytes == 4 || kBytes == 8 || kBytes == 16, "cp.async.ca copies 4, 8 or 16 bytes");
#if defined(__CUDA_ARCH__)
  const auto s = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(s), "l"(src), "n"(kBytes), "r"(src_bytes));
#elif defined(VLPAR_CUDA_EMU)
  ::vlpar::emu::cp_async(dst, src, kBytes, src_bytes, false, loc);
#else
  (void)dst, (void)src, (void)src_bytes;
#endif
}

__device__ __forceinline__ void cp_async_commit(VLPAR_EMU_LOC1) {
#if defined(__CUDA_ARCH__)
  asm volatile("cp.async.commit_group;\n" ::);
#elif defined(VLPAR_CUDA_EMU)
  ::vlpar::emu::cp_async_commit(loc);
#endif
}

template <int N>
__device__ __forceinline__ void cp_async_wait(VLPAR_EMU_LOC1) {
#if defined(__CUDA_ARCH__)
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#elif defined(VLPAR_CUDA_EMU)
  ::vlpar::emu::cp_async_wait(N, loc);
#endif
}

}  // namespace vlpar::ptx
