#pragma once
// Parameters and launcher declaration of the CUDA grouped GEMM (STYLE §2: grouped_gemm_params.hpp (this file) ·
// src/kernels/cuda/grouped_gemm_kernel.cuh · src/kernels/cuda/grouped_gemm_launch.cuh · generated instantiation
// files src/kernels/cuda/grouped_gemm_<dtype>.cu · public API grouped_gemm in include/vlpar/kernels/moe.hpp).
// c[rows of g] = alpha · a[rows of g] · op(b[g]) + beta · c[rows of g] for every group g of a ragged row split
// (the MoE experts' token rows; empty groups allowed), 16-bit a and b, fp32 accumulation, c in T or f32; and the
// weight gradient dw[g] += a[rows of g]ᵀ · dc[rows of g] into fp32.
// Test: tests/gpu/test_cuda_grouped_gemm.cpp (ctest -L gpu; -L emu in the emulated build)
#include <cstdint>

#include "vlpar/core/status.hpp"

namespace vlpar::cuda_kernels {

struct GroupedGemmParams {
  void* c;                      // [R, N] OutT, row stride ldc
  const void* a;                // [R, Kd] T, row stride lda
  const void* b;                // per group [Kd, N] (row stride ldb), or [N, Kd] when trans_b; T
  const int64_t* offsets;       // [G + 1] device: rows [offsets[g], offsets[g+1]) form group g
  const int32_t* tile_offsets;  // [G + 1] device: the first output tile of group g (prefix sums of its tiles)
  int64_t lda, ldb, ldc;        // elements, multiples of 8 (16-byte cp.async rows)
  int64_t b_group_stride;       // elements between two groups' b (0: one b for every group)
  int64_t n, kd;                // N and the inner dimension Kd, multiples of 8
  int groups;                   // G
  int total_tiles;              // tile_offsets[G]
  int trans_b;                  // b stored [N, Kd] (a linear layer's weight) instead of [Kd, N]
  float alpha, beta;            // beta = 0: c is write-only (its old contents may be NaN)
};

/// The grouped weight gradient dw[g] += a[rows of g]ᵀ · dc[rows of g] (ragged inner dimension: the group's rows).
/// dw[g] = alpha · a[rows of g]ᵀ · dc[rows of g] + beta · dw[g]; the MoE backward uses alpha = beta = 1.
struct GroupedWgradParams {
  float* dw;                    // per group [Kd, N] fp32, row stride ldw, group stride dw_group_stride
  const void* a;                // [R, Kd] T, row stride lda
  const void* dc;               // [R, N] T, row stride lddc
  const int64_t* offsets;       // [G + 1] device: rows [offsets[g], offsets[g+1]) form group g
  const int32_t* tile_offsets;  // [G + 1] device: the first output tile of group g (an empty group has none when
                                // beta = 1: it would add nothing)
  int64_t lda, lddc;            // elements, multiples of 8 (16-byte cp.async rows)
  int64_t ldw, dw_group_stride; // elements; ldw even (8-byte stores of two fp32)
  int64_t kd, n;                // dw[g] is [Kd, N]; multiples of 8
  int groups;                   // G
  int total_tiles;              // tile_offsets[G]
  float alpha, beta;
};

/// Output tile of the grouped GEMM (rows × columns); a group of M rows has ceil(M / kRows)·ceil(N / kCols) tiles.
inline constexpr int kGroupedGemmTileRows = 128;
inline constexpr int kGroupedGemmTileCols = 128;

/// @brief The grouped GEMM on a persistent grid: CTAs walk the (group, row tile, column tile) list in order.
template <class T, class OutT>
Status grouped_gemm_run(const GroupedGemmParams& p, void* stream);

/// @brief The grouped weight gradient on a persistent grid over (group, Kd tile, N tile) of the non-empty groups;
/// each output element's sum runs over the group's rows in ascending order.
template <class T>
Status grouped_wgrad_run(const GroupedWgradParams& p, void* stream);

}  // namespace vlpar::cuda_kernels
