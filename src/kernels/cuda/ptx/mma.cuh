#pragma once
// Warp-level MMA, one wrapper per PTX instruction with the same call site in both builds: inline PTX under
// __CUDA_ARCH__ (sm_80+), the emulator's warp collective under VLPAR_CUDA_EMU (emu/warp_matrix.cpp). Operands are
// the PTX registers: two 16-bit values per uint32_t, the lower-indexed element in bits 0..15.
//   mma_m16n8k16_bf16 / _f16 : D(16×8, f32) = A(16×16, row) · B(16×8, col) + C; a[4], b[2], c[4], d[4] per lane
// Fragment layouts (g = lane >> 2, t = lane & 3): a_i at (g + 8((i>>1)&1), 2t + (i&1) + 8(i>>2)); b_i at
// (k = 2t + (i&1) + 8(i>>1), n = g); c_i/d_i at (g + 8(i>>1), 2t + (i&1)). SASS: HMMA.16816.F32.BF16 /
// HMMA.16816.F32. Later families (wgmma on sm_90a) get their own header in this directory the same way.
// Test: tests/emu/test_emu_warp_matrix.cpp (ctest -L emu)
#include "../cuda_compat.cuh"  // first: the prelude of every CUDA source

#include <cstdint>

namespace vlpar::ptx {

__device__ __forceinline__ void mma_m16n8k16_bf16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2],
                                                  const float (&c)[4] VLPAR_EMU_LOC) {
#if defined(__CUDA_ARCH__)
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%10,%11,%12,%13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]),
        "f"(c[3]));
#elif defined(VLPAR_CUDA_EMU)
  ::vlpar::emu::mma_m16n8k16(true, d, a, b, c, loc);
#endif
}

__device__ __forceinline__ void mma_m16n8k16_f16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2],
                                                 const float (&c)[4] VLPAR_EMU_LOC) {
#if defined(__CUDA_ARCH__)
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%10,%11,%12,%13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]),
        "f"(c[3]));
#elif defined(VLPAR_CUDA_EMU)
  ::vlpar::emu::mma_m16n8k16(false, d, a, b, c, loc);
#endif
}

}  // namespace vlpar::ptx
