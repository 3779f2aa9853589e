#pragma once
// Host launch code of the CUDA RMSNorm family: picks the vectorised or scalar instantiation from pointer
// alignment, the block shape from rmsnorm_heuristics.hpp, and launches on the caller's stream. The templates
// below are explicitly instantiated per (T, W) in the generated src/kernels/cuda/rmsnorm_<dtype>.cu
// (tools/gen_instantiations.py); rmsnorm_dw_reduce_run lives in rmsnorm_dw_reduce.cu.
// Test: tests/gpu/test_cuda_kernels.cpp (ctest -L gpu)
#include "cuda_compat.cuh"  // first: the prelude of every CUDA source

#include <cstdint>
#include <initializer_list>
#include <utility>

#include "launch.cuh"
#include "launch_utils.hpp"
#include "rmsnorm_heuristics.hpp"
#include "rmsnorm_kernel.cuh"
#include "vector_io.cuh"
#include "vlpar/core/dispatch.hpp"
#include "vlpar/core/log.hpp"
#include "vlpar/core/status.hpp"
#include "vlpar/kernels/cuda/rmsnorm_params.hpp"

namespace vlpar::cuda_kernels {

/// True when 16-byte packs of T (and the matching packs of W) are aligned on every row of every operand.
template <class T, class W>
bool rmsnorm_vectorizable(int64_t cols, const void* w,
                          std::initializer_list<std::pair<const void*, int64_t>> rows_and_strides) {
  constexpr int kVec = kVec16<T>;
  if (cols % kVec != 0 || !is_aligned(w, sizeof(W) * kVec)) return false;
  for (const auto& [ptr, stride] : rows_and_strides)
    if (!is_aligned(ptr, 16) || stride % kVec != 0) return false;
  return true;
}

inline Status check_rmsnorm_cols(const char* op, int64_t cols) {
  VLPAR_CHECK(cols >= 0 && cols <= INT32_MAX, "{}: H = {} exceeds the CUDA kernels' int32 column index", op, cols);
  return Status::Ok();
}

template <class T, class W>
Status rmsnorm_forward_run(const RmsNormForwardParams& p, void* stream) {
  if (p.rows == 0) return Status::Ok();
  VLPAR_RETURN_IF_ERROR(check_rmsnorm_cols("rmsnorm_forward", p.cols));
  const bool vec = rmsnorm_vectorizable<T, W>(p.cols, p.w, {{p.x, p.x_row_stride}, {p.y, p.y_row_stride}});
  const RmsNormConfig cfg = rmsnorm_forward_config(p.rows, p.cols, vec ? kVec16<T> : 1);
  if (print_configs())
    log_info("rmsnorm_forward x {} w {}: rows {} H {} vec {} {} threads {} grid {}", dtype_name(dtype_of_v<T>),
             dtype_name(dtype_of_v<W>), p.rows, p.cols, vec ? kVec16<T> : 1,
             cfg.block_per_row ? "block-per-row" : "warp-per-row", cfg.threads, cfg.grid);
  const LaunchConfig lc{dim3(unsigned(cfg.grid)), dim3(unsigned(cfg.threads)), 0, stream};
  VLPAR_BOOL_SWITCH(vec, kVectorized, {
    VLPAR_BOOL_SWITCH(cfg.block_per_row, kBlockPerRow, {
      return launch<rmsnorm_forward_kernel<T, W, kVectorized ? kVec16<T> : 1, kBlockPerRow>>(lc, p);
    });
  });
}

template <class T, class W>
Status rmsnorm_backward_run(const RmsNormBackwardParams& p, void* stream) {
  if (p.rows == 0) return Status::Ok();
  VLPAR_RETURN_IF_ERROR(check_rmsnorm_cols("rmsnorm_backward", p.cols));
  const bool with_dw = p.dw != nullptr;
  const bool vec = rmsnorm_vectorizable<T, W>(
      p.cols, p.w, {{p.x, p.x_row_stride}, {p.dy, p.dy_row_stride}, {p.dx, p.dx_row_stride}});
  const RmsNormConfig cfg = rmsnorm_backward_config(p.rows, p.cols, vec ? kVec16<T> : 1, with_dw);
  VLPAR_CHECK_CODE(cfg.grid == p.num_blocks, StatusCode::kInternal,
                   "rmsnorm_backward: params.num_blocks {} differs from the heuristic grid {}", p.num_blocks, cfg.grid);
  VLPAR_CHECK_CODE(!with_dw || p.dw_partial != nullptr, StatusCode::kInternal,
                   "rmsnorm_backward: dw requested without a dw_partial workspace");
  if (print_configs())
    log_info("rmsnorm_backward x {} w {}: rows {} H {} vec {} {} threads {} grid {} smem {} B dw {}",
             dtype_name(dtype_of_v<T>), dtype_name(dtype_of_v<W>), p.rows, p.cols, vec ? kVec16<T> : 1,
             cfg.block_per_row ? "block-per-row" : "warp-per-row", cfg.threads, cfg.grid, cfg.smem_bytes, with_dw);
  // Above 48 KiB of dw accumulators launch() opts in, or names the device's limit (H too large for this GPU).
  const LaunchConfig lc{dim3(unsigned(cfg.grid)), dim3(unsigned(cfg.threads)), cfg.smem_bytes, stream};
  VLPAR_BOOL_SWITCH(vec, kVectorized, {
    VLPAR_BOOL_SWITCH(cfg.block_per_row, kBlockPerRow, {
      VLPAR_RETURN_IF_ERROR(
          (launch<rmsnorm_backward_kernel<T, W, kVectorized ? kVec16<T> : 1, kBlockPerRow>>(lc, p)));
    });
  });
  if (with_dw) return rmsnorm_dw_reduce_run(p, stream);
  return Status::Ok();
}

}  // namespace vlpar::cuda_kernels
