#pragma once
// Launch configuration of the CUDA RMSNorm kernels (STYLE §8): the one place that picks block shapes and the
// backward grid. Host-compilable and constexpr; cuda_ops.cu uses it to size the workspace, rmsnorm_launch.cuh
// to launch. VLPAR_PRINT_CONFIGS=1 makes the launchers print their choice.
//
// Row groups. A row is reduced by one warp (H ≤ kWarpRowMaxCols) or by a whole block (wider rows):
//   * warp per row, 4 warps per block: q/k-norm rows (H = D = 128) are 256 B in bf16, one 16-byte load per lane;
//     a block per row would leave 7 of 8 warps idle, and the reduction needs no shared memory or barrier.
//   * block per row for H > 1024 (hidden sizes 2048–8192): a warp alone would issue 8–32 sequential 16-byte
//     loads per lane per row. The block is sized for ~4 vector loads per thread (128 threads for bf16 H = 4096,
//     256 for f32), clamped to [128, 1024].
// Backward grid. Block b owns the contiguous rows [b·chunk, (b+1)·chunk) and writes one dw partial row; the
// grid depends only on (rows, H) — never on the GPU's SM count — so dw has the same bits on every GPU:
//   grid = min(ceil(rows / (row_groups_per_block · kMinRowsPerGroup)), kMaxBackwardBlocks).
// kMaxBackwardBlocks = 1024 keeps ≥ 7 blocks per SM on a 132-SM H100 while the dw_partial workspace stays at
// 1024·H·4 bytes (16 MiB at H = 4096, a quarter of dx itself for 8192 bf16 rows).
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "launch_utils.hpp"

namespace vlpar::cuda_kernels {

inline constexpr int64_t kWarpRowMaxCols = 1024;
inline constexpr int kWarpRowThreads = 128;  // 4 warps, 4 rows in flight per block
inline constexpr int kMinRowsPerGroup = 4;
inline constexpr int64_t kMaxBackwardBlocks = 1024;

struct RmsNormConfig {
  bool block_per_row = false;  // true: the block is one row group; false: each warp is one
  int threads = 0;             // block size
  int row_groups = 0;          // row groups per block (threads / 32 for warp per row, else 1)
  int64_t grid = 0;            // blocks
  size_t smem_bytes = 0;       // dynamic shared memory (backward: dw accumulators [row_groups, H] f32)
};

/// @brief Block shape for rows of `cols` elements read `vec` at a time.
constexpr RmsNormConfig rmsnorm_row_shape(int64_t cols, int vec) {
  RmsNormConfig c;
  c.block_per_row = cols > kWarpRowMaxCols;
  if (!c.block_per_row) {
    c.threads = kWarpRowThreads;
    c.row_groups = kWarpRowThreads / 32;
    return c;
  }
  const int64_t want = ceil_div(cols, int64_t(vec) * 4);  // ~4 vector loads per thread
  int threads = 128;
  while (threads < want && threads < 1024) threads *= 2;
  c.threads = threads;
  c.row_groups = 1;
  return c;
}

/// @brief Forward: one row group per row, grid-strided when rows exceed the grid limit.
constexpr RmsNormConfig rmsnorm_forward_config(int64_t rows, int64_t cols, int vec) {
  RmsNormConfig c = rmsnorm_row_shape(cols, vec);
  c.grid = std::min<int64_t>(ceil_div(rows, c.row_groups), kMaxGridX);
  return c;
}

/// @brief Backward grid (= rows of the dw workspace); independent of `vec` and of the device.
constexpr int64_t rmsnorm_backward_blocks(int64_t rows, int64_t cols) {
  const RmsNormConfig shape = rmsnorm_row_shape(cols, 1);
  return std::max<int64_t>(1, std::min(ceil_div(rows, int64_t(shape.row_groups) * kMinRowsPerGroup),
                                       kMaxBackwardBlocks));
}

/// @brief Backward: grid from rmsnorm_backward_blocks, shared dw accumulators when dw is wanted.
constexpr RmsNormConfig rmsnorm_backward_config(int64_t rows, int64_t cols, int vec, bool with_dw) {
  RmsNormConfig c = rmsnorm_row_shape(cols, vec);
  c.grid = rmsnorm_backward_blocks(rows, cols);
  c.smem_bytes = with_dw ? size_t(c.row_groups) * size_t(cols) * sizeof(float) : 0;
  return c;
}

/// @brief Bytes of the dw_partial workspace [grid, H] f32 (0 when the weight is frozen).
constexpr size_t rmsnorm_backward_workspace_bytes(int64_t rows, int64_t cols, bool with_dw) {
  return with_dw && rows > 0 ? size_t(rmsnorm_backward_blocks(rows, cols)) * size_t(cols) * sizeof(float) : 0;
}

}  // namespace vlpar::cuda_kernels
