#pragma once
// Host launch code of the CUDA SwiGLU family: 16-byte packs when every operand's base pointer and row stride
// allow it (and I is a multiple of the pack), scalar otherwise; one pack per thread, 256 threads per block
// (an elementwise kernel: the block size only needs to fill warps, and one pack per thread keeps every load in
// flight without a loop-carried dependence). Explicitly instantiated per T in the generated
// src/kernels/cuda/swiglu_<dtype>.cu. Test: tests/gpu/test_cuda_kernels.cpp (ctest -L gpu)
#include "cuda_compat.cuh"  // first: the prelude of every CUDA source

#include <cstdint>
#include <initializer_list>
#include <utility>

#include "launch.cuh"
#include "launch_utils.hpp"
#include "swiglu_kernel.cuh"
#include "vector_io.cuh"
#include "vlpar/core/dispatch.hpp"
#include "vlpar/core/log.hpp"
#include "vlpar/core/status.hpp"
#include "vlpar/kernels/cuda/swiglu_params.hpp"

namespace vlpar::cuda_kernels {

template <class T>
bool swiglu_vectorizable(int64_t cols, std::initializer_list<std::pair<const void*, int64_t>> rows_and_strides) {
  constexpr int kVec = kVec16<T>;
  if (cols % kVec != 0) return false;
  for (const auto& [ptr, stride] : rows_and_strides)
    if (!is_aligned(ptr, 16) || stride % kVec != 0) return false;
  return true;
}

/// Grid for `n_items` items, one per thread, capped at the grid limit (the kernels grid-stride past it).
inline unsigned elementwise_grid(int64_t n_items, int threads) {
  return unsigned(ceil_div(n_items, threads) < kMaxGridX ? ceil_div(n_items, threads) : kMaxGridX);
}

template <class T>
Status swiglu_forward_run(const SwigluForwardParams& p, void* stream) {
  if (p.rows == 0 || p.cols == 0) return Status::Ok();
  const bool vec = swiglu_vectorizable<T>(
      p.cols, {{p.y, p.y_row_stride}, {p.gate, p.gate_row_stride}, {p.up, p.up_row_stride}});
  const int kv = vec ? kVec16<T> : 1;
  const unsigned grid = elementwise_grid(p.rows * (p.cols / kv), kSwigluThreads);
  if (print_configs())
    log_info("swiglu_forward {}: rows {} I {} vec {} threads {} grid {}", dtype_name(dtype_of_v<T>), p.rows, p.cols,
             kv, kSwigluThreads, grid);
  const LaunchConfig lc{dim3(grid), dim3(kSwigluThreads), 0, stream};
  VLPAR_BOOL_SWITCH(vec, kVectorized, { return launch<swiglu_forward_kernel<T, kVectorized ? kVec16<T> : 1>>(lc, p); });
}

template <class T>
Status swiglu_backward_run(const SwigluBackwardParams& p, void* stream) {
  if (p.rows == 0 || p.cols == 0) return Status::Ok();
  const bool vec = swiglu_vectorizable<T>(p.cols, {{p.dgate, p.dgate_row_stride},
                                                   {p.dup, p.dup_row_stride},
                                                   {p.dy, p.dy_row_stride},
                                                   {p.gate, p.gate_row_stride},
                                                   {p.up, p.up_row_stride}});
  const int kv = vec ? kVec16<T> : 1;
  const unsigned grid = elementwise_grid(p.rows * (p.cols / kv), kSwigluThreads);
  if (print_configs())
    log_info("swiglu_backward {}: rows {} I {} vec {} threads {} grid {}", dtype_name(dtype_of_v<T>), p.rows,
             p.cols, kv, kSwigluThreads, grid);
  const LaunchConfig lc{dim3(grid), dim3(kSwigluThreads), 0, stream};
  VLPAR_BOOL_SWITCH(vec, kVectorized, { return launch<swiglu_backward_kernel<T, kVectorized ? kVec16<T> : 1>>(lc, p); });
}

}  // namespace vlpar::cuda_kernels
