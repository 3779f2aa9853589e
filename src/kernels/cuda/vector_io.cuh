#pragma once
// 16-byte vector loads and stores for the elementwise and row kernels, with conversion to and from fp32.
//   Pack<T, N>        : N elements of storage T moved as one aligned unit (N·sizeof(T) bytes)
//   load_pack/store_pack : device, convert on the fly (one rounding per stored element)
//   is_aligned        : host, decides whether a launcher may pick the vectorised instantiation
// Used by rmsnorm_kernel.cuh and swiglu_kernel.cuh. Test: tests/gpu/test_cuda_kernels.cpp (ctest -L gpu)
#include "cuda_compat.cuh"  // first: the prelude of every CUDA source

#include <cstddef>
#include <cstdint>

#include "vlpar/core/dtype.hpp"

namespace vlpar::cuda_kernels {

/// Elements of T in one 16-byte transaction (the widest global load on sm_80/sm_90).
template <class T>
inline constexpr int kVec16 = int(16 / sizeof(T));

template <class T, int N>
struct alignas(sizeof(T) * N) Pack {
  T v[N];
};

/// out[k] = float(p[k]) for k < N; p must be aligned to N·sizeof(T) bytes.
template <class T, int N>
__device__ __forceinline__ void load_pack(float (&out)[N], const T* p) {
  VLPAR_EMU_CHECK_ALIGNED(p, sizeof(Pack<T, N>));
  const Pack<T, N> pk = *reinterpret_cast<const Pack<T, N>*>(p);
#pragma unroll
  for (int k = 0; k < N; ++k) out[k] = to_float(pk.v[k]);
}

/// 32-bit word i of a pack of 4-byte or 2-byte elements (little-endian: the lower-indexed element in bits 0..15).
__device__ __forceinline__ uint32_t pack_word(const float* v, int i) { return float_bits(v[i]); }
__device__ __forceinline__ uint32_t pack_word(const bf16* v, int i) {
  return uint32_t(v[2 * i].bits) | uint32_t(v[2 * i + 1].bits) << 16;
}
__device__ __forceinline__ uint32_t pack_word(const f16* v, int i) {
  return uint32_t(v[2 * i].bits) | uint32_t(v[2 * i + 1].bits) << 16;
}

/// One 16-byte global store (STG.E.128). A C++ uint4 store is split by nvcc into four STG.E in the row kernels
/// even when 16-byte aligned (tools/check_sass.py found it), hence the PTX.
__device__ __forceinline__ void store_global_16(void* p, const uint32_t (&w)[4]) {
#if defined(__CUDA_ARCH__)
  asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"l"(p), "r"(w[0]), "r"(w[1]), "r"(w[2]), "r"(w[3])
               : "memory");
#else
  *reinterpret_cast<uint4*>(p) = make_uint4(w[0], w[1], w[2], w[3]);
#endif
}

/// p[k] = round_T(in[k]) for k < N; p must be aligned to N·sizeof(T) bytes.
template <class T, int N>
__device__ __forceinline__ void store_pack(T* p, const float (&in)[N]) {
  VLPAR_EMU_CHECK_ALIGNED(p, sizeof(Pack<T, N>));
  Pack<T, N> pk;
#pragma unroll
  for (int k = 0; k < N; ++k) pk.v[k] = from_float<T>(in[k]);
  if constexpr (sizeof(Pack<T, N>) == 16) {
    uint32_t w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) w[i] = pack_word(pk.v, i);
    store_global_16(p, w);
  } else {
    *reinterpret_cast<Pack<T, N>*>(p) = pk;
  }
}

inline bool is_aligned(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

}  // namespace vlpar::cuda_kernels
