#pragma once
// Deterministic fp32 sums across a warp or a block (butterfly shuffles, fixed order: the same inputs give the
// same bits on every run, DESIGN §7). Every thread receives the total.
// Used by rmsnorm_kernel.cuh. Test: tests/gpu/test_cuda_kernels.cpp (ctest -L gpu)
#include "cuda_compat.cuh"  // first: the prelude of every CUDA source

namespace vlpar::cuda_kernels {

inline constexpr int kWarpSize = 32;

/// Sum of v over the 32 lanes of a fully active warp.
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

/// Sum of v over the block. tid = thread index in the block, num_threads = block size (a multiple of 32,
/// ≤ 1024); red = 32 floats of shared memory. Contains two __syncthreads(): every thread must call it.
__device__ __forceinline__ float block_sum(float v, int tid, int num_threads, float* red) {
  const int lane = tid % kWarpSize, warp = tid / kWarpSize, num_warps = num_threads / kWarpSize;
  v = warp_sum(v);
  if (lane == 0) red[warp] = v;
  __syncthreads();
  // Every warp reduces the same per-warp partials in the same order, so all threads hold identical totals.
  float total = lane < num_warps ? red[lane] : 0.f;
  total = warp_sum(total);
  __syncthreads();  // red may be reused by the next call
  return total;
}

}  // namespace vlpar::cuda_kernels
