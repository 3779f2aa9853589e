#pragma once
// Warp-tile building blocks of the tensor-core kernels (flash_fwd_kernel.cuh, flash_bwd_kernel.cuh,
// grouped_gemm_kernel.cuh): the swizzled smem tile layout, cp.async tile loads with zero fill, and the m16n8k16
// operand loads from those tiles.
//   Every smem tile is [rows, kPitch] of 16-bit elements (kPitch: the head dim of attention tiles, the k or n
//   extent of GEMM tiles, a multiple of 32); the 16-byte chunk index of a row is XOR-swizzled inside groups of 8
//   chunks (kPitch a multiple of 64: chunk ^ (row & 7)) or 4 chunks (32, 96: chunk ^ ((row >> 1) & 3)), so the 8
//   row addresses of one ldmatrix phase fall into different bank groups; chunks stay whole.
//   Operand fragments (PTX m16n8k16, see ptx/mma.cuh): with g = lane / 4, t = lane % 4,
//     A 16×16: a0 (g, 2t..2t+1) a1 (g+8, 2t..) a2 (g, 2t+8..) a3 (g+8, 2t+8..)
//     C 16×8: c0,c1 (g, 2t..2t+1) c2,c3 (g+8, 2t..2t+1)
//   so the C fragments of two adjacent n8 tiles are, element for element, the A fragment of one k16 step
//   (acc_to_a): a product can feed the next MMA from registers.
// Test: tests/gpu/test_cuda_attention.cpp, tests/gpu/test_cuda_grouped_gemm.cpp (ctest -L gpu; -L emu)
#include "cuda_compat.cuh"  // first: the prelude of every CUDA source

#include <cstdint>
#include <type_traits>

#include "ptx/cp_async.cuh"
#include "ptx/cvt.cuh"
#include "ptx/ldmatrix.cuh"
#include "ptx/mma.cuh"
#include "vlpar/core/dtype.hpp"

namespace vlpar::cuda_kernels {

/// Element offset of (row, col) in a [rows, kPitch] 16-bit smem tile (see the file comment).
template <int kPitch>
__host__ __device__ constexpr int swizzled_offset(int row, int col) {
  constexpr int kChunks = kPitch / 8;
  constexpr int kGroup = kChunks % 8 == 0 ? 8 : 4;
  const int chunk = col >> 3;
  const int sw = kGroup == 8 ? (row & 7) : ((row >> 1) & 3);
  const int phys = (chunk & ~(kGroup - 1)) | ((chunk ^ sw) & (kGroup - 1));
  return row * kPitch + phys * 8 + (col & 7);
}

/// D = A·B + D for one m16n8k16 step in T's MMA flavour.
template <class T>
__device__ __forceinline__ void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  const uint32_t b[2] = {b0, b1};
  if constexpr (std::is_same_v<T, bf16>) {
    ptx::mma_m16n8k16_bf16(d, a, b, d);
  } else {
    ptx::mma_m16n8k16_f16(d, a, b, d);
  }
}

/// Two floats rounded to T and packed into one 32-bit register, the lower-indexed element in bits 0..15 (one
/// cvt.rn.{bf16,f16}x2.f32 on the device).
template <class T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (std::is_same_v<T, bf16>) {
    return ptx::cvt_pack_bf16x2(lo, hi);
  } else {
    return ptx::cvt_pack_f16x2(lo, hi);
  }
}

/// The A fragment of one k16 step from the C fragments of n8 tiles k and k+1, rounded to T.
template <class T>
__device__ __forceinline__ void acc_to_a(uint32_t (&a)[4], const float (&c0)[4], const float (&c1)[4]) {
  a[0] = pack2<T>(c0[0], c0[1]);
  a[1] = pack2<T>(c0[2], c0[3]);
  a[2] = pack2<T>(c1[0], c1[1]);
  a[3] = pack2<T>(c1[2], c1[3]);
}

/// Issues the cp.async copies of tile rows [0, rows) × columns [0, kPitch): row r from src + r·tok_stride when
/// r < valid_rows and the chunk lies below valid_cols (head_dim), else 16 zero bytes. kThreads threads share the
/// work; the caller commits.
template <int kPitch, int kThreads>
__device__ __forceinline__ void cp_async_tile(uint16_t* dst, const uint16_t* src, int64_t tok_stride, int rows,
                                                int valid_rows, int head_dim) {
  constexpr int kChunks = kPitch / 8;
  for (int i = int(threadIdx.x); i < rows * kChunks; i += kThreads) {
    const int r = i / kChunks, c = i % kChunks;
    const bool ok = r < valid_rows && c * 8 < head_dim;
    ptx::cp_async_cg16(dst + swizzled_offset<kPitch>(r, c * 8), ok ? src + r * tok_stride + c * 8 : src,
                       ok ? 16 : 0);
  }
}

/// A fragment of rows [row0, row0+16) × columns [k0, k0+16) of a tile (the operand's rows are the M index).
template <int kPitch>
__device__ __forceinline__ void load_a(uint32_t (&a)[4], const uint16_t* tile, int row0, int k0, int lane) {
  ptx::ldmatrix<4, false>(a, tile + swizzled_offset<kPitch>(row0 + lane % 16, k0 + (lane / 16) * 8));
}

/// A fragment of rows [m0, m0+16) × columns [k0, k0+16) from a tile whose rows are the K index (M-major, e.g. the
/// activations [tokens, Kd] of a weight gradient aᵀ·dc), through ldmatrix.trans: matrices (k0, m0), (k0, m0+8),
/// (k0+8, m0), (k0+8, m0+8) give a0..a3.
template <int kPitch>
__device__ __forceinline__ void load_a_km(uint32_t (&a)[4], const uint16_t* tile, int m0, int k0, int lane) {
  ptx::ldmatrix<4, true>(a, tile + swizzled_offset<kPitch>(k0 + (lane / 16) * 8 + lane % 8, m0 + ((lane / 8) % 2) * 8));
}

/// B fragments of two n8 tiles, n in [n0, n0+16), k in [k0, k0+16), from a tile whose rows are the N index
/// (K-major, e.g. K for Q·Kᵀ): b[0..1] tile n0, b[2..3] tile n0+8.
template <int kPitch>
__device__ __forceinline__ void load_b_nk(uint32_t (&b)[4], const uint16_t* tile, int n0, int k0, int lane) {
  ptx::ldmatrix<4, false>(
      b, tile + swizzled_offset<kPitch>(n0 + (lane / 16) * 8 + lane % 8, k0 + ((lane / 8) % 2) * 8));
}

/// B fragments of two n8 tiles from a tile whose rows are the K index (N-major, e.g. V for P·V), through
/// ldmatrix.trans: b[0..1] tile n0, b[2..3] tile n0+8.
template <int kPitch>
__device__ __forceinline__ void load_b_kn(uint32_t (&b)[4], const uint16_t* tile, int k0, int n0, int lane) {
  ptx::ldmatrix<4, true>(b, tile + swizzled_offset<kPitch>(k0 + lane % 16, n0 + (lane / 16) * 8));
}

}  // namespace vlpar::cuda_kernels
