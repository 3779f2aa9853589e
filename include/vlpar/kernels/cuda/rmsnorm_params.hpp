#pragma once
// Parameters and launcher declarations of the CUDA RMSNorm kernels (STYLE §2: the params part of the family
//   rmsnorm_params.hpp (this file) · src/kernels/cuda/rmsnorm_kernel.cuh · src/kernels/cuda/rmsnorm_launch.cuh ·
//   public API include/vlpar/kernels/norm.hpp).
// Host-compilable (no CUDA headers): streams travel as void* (a cudaStream_t). cuda_ops.cu fills these
// structs from validated views; the launchers are defined in rmsnorm_launch.cuh and explicitly instantiated
// once per (T, W) in the generated src/kernels/cuda/rmsnorm_<dtype>.cu, so no other translation unit can
// instantiate them implicitly.
//   T : storage of x, y, dy, dx (float, bf16, f16)      W : storage of the weight (T or float)
// Test: tests/gpu/test_cuda_kernels.cpp (ctest -L gpu)
#include <cstdint>

#include "vlpar/core/status.hpp"

namespace vlpar::cuda_kernels {

struct RmsNormForwardParams {
  void* y;               // [rows, H] T, rows y_row_stride apart
  float* rstd;           // [rows] f32, written; nullptr: not stashed
  const void* x;         // [rows, H] T, rows x_row_stride apart
  const void* w;         // [H] W, contiguous
  int64_t rows;          // product of the leading dims of x
  int64_t cols;          // H
  int64_t x_row_stride;  // elements
  int64_t y_row_stride;  // elements
  float eps;
};

struct RmsNormBackwardParams {
  void* dx;               // [rows, H] T, written, rows dx_row_stride apart
  float* dw;              // [H] f32, accumulated (dw += Σ_rows dy·x·rstd); nullptr: weight frozen
  float* dw_partial;      // [num_blocks, H] f32 workspace: one deterministic partial sum per block
  const void* dy;         // [rows, H] T
  const void* x;          // [rows, H] T
  const void* w;          // [H] W
  const float* rstd;      // [rows] f32, from the forward
  int64_t rows;
  int64_t cols;           // H
  int64_t dx_row_stride;  // elements
  int64_t dy_row_stride;
  int64_t x_row_stride;
  int num_blocks;         // grid of the dx kernel = rows of dw_partial (rmsnorm_backward_config)
};

/// @brief y = x·rstd·w per row, rstd = 1/sqrt(mean(x²) + eps) in fp32; y rounded once to T.
template <class T, class W>
Status rmsnorm_forward_run(const RmsNormForwardParams& p, void* stream);

/// @brief dx per row and, when p.dw is set, per-block dw partials followed by rmsnorm_dw_reduce_run.
/// p.dw_partial must hold rmsnorm_backward_config(...).workspace_bytes.
template <class T, class W>
Status rmsnorm_backward_run(const RmsNormBackwardParams& p, void* stream);

/// @brief dw[c] += Σ_b dw_partial[b][c] in a fixed order (no float atomics, DESIGN §7).
/// Defined in src/kernels/cuda/rmsnorm_dw_reduce.cu (independent of T).
Status rmsnorm_dw_reduce_run(const RmsNormBackwardParams& p, void* stream);

}  // namespace vlpar::cuda_kernels
