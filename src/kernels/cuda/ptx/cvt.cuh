#pragma once
// Packed float → 16-bit conversions, one wrapper per PTX instruction with the same call site in both builds: inline
// PTX under __CUDA_ARCH__ (sm_80+); elsewhere (the emulated build, host code) vlpar's round-to-nearest-even
// conversions of vlpar/core/dtype.hpp, which give the same bits (NaN stays NaN, overflow rounds to ±inf).
//   cvt_pack_bf16x2(lo, hi) / cvt_pack_f16x2(lo, hi) : {round(lo) in bits 0..15, round(hi) in bits 16..31}
// One instruction per pair where the software conversion takes a dozen integer operations per element (the
// f16 one more). SASS: F2FP.BF16.F32.PACK_AB / F2FP.F16.F32.PACK_AB.
// Test: tests/gpu/test_cuda_attention.cpp (the flash kernels round P, dS and their outputs through these)
#include "../cuda_compat.cuh"  // first: the prelude of every CUDA source

#include <cstdint>

#include "vlpar/core/dtype.hpp"

namespace vlpar::ptx {

__device__ __forceinline__ uint32_t cvt_pack_bf16x2(float lo, float hi) {
#if defined(__CUDA_ARCH__)
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));  // a → upper half, b → lower half
  return r;
#else
  return uint32_t(float_to_bf16(lo).bits) | uint32_t(float_to_bf16(hi).bits) << 16;
#endif
}

__device__ __forceinline__ uint32_t cvt_pack_f16x2(float lo, float hi) {
#if defined(__CUDA_ARCH__)
  uint32_t r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
#else
  return uint32_t(float_to_f16(lo).bits) | uint32_t(float_to_f16(hi).bits) << 16;
#endif
}

}  // namespace vlpar::ptx
