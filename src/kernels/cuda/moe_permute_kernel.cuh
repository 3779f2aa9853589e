#pragma once
// CUDA MoE token path (the local half of token dispatch; layout in include/vlpar/kernels/moe.hpp, parameters in
// include/vlpar/kernels/cuda/moe_permute_params.hpp):
//   plan (src/kernels/cuda/moe_plan.cu, compiled once)
//            moe_plan_count_kernel  grid (chunk c, expert e): assignments of e in chunk c (block sum), and the
//                                   id checks (e = 0 blocks: out-of-range and repeated ids → *bad = min a)
//            moe_plan_scan_kernel   one block: exclusive scan of the counts in (expert, chunk) order → the first
//                                   row of every (expert, chunk), offsets[e] = first row of (e, chunk 0)
//            moe_plan_place_kernel  grid (c, e): walks chunk c in ascending a, a block scan of (id == e) gives each
//                                   assignment's row: rows inside an expert in ascending a (stable by token)
//   No result depends on scheduling: every count is a block sum, every row a prefix sum in a fixed order; the only
//   atomic is the integer atomicMin of the error word (its value is the minimum, whatever the order).
//   rows     moe_permute_kernel     one block per output row: out[r] = (w ·) in[a / K] (scale_rows: in[r])
//            moe_unpermute_kernel   one block per token: its K rows sorted ascending in smem, then per column
//                                   acc = 0 + w·x_1 + w·x_2 + … in fp32 (ascending row = ascending expert, the CPU
//                                   path's and HF's order), one rounding to T
//            moe_row_dot_kernel     one warp per assignment: lane-strided fp32 partial sums, butterfly warp sum
//   A dropped assignment (row −1, moe_capacity_plan) is left out of its token's sum and its dot is 0.
//   kVec = 16 / sizeof(T) when every row is 16-byte aligned (one 16-byte access per thread and step), else 1.
// SASS (tools/check_sass.py, CI stage cuda): the vector instantiations move rows in 16-byte loads and stores.
// SASS moe_permute_kernel<*, 8> moe_permute_kernel<float, 4> moe_unpermute_kernel<*, 8> moe_unpermute_kernel<float, 4>: LDG.E.128 STG.E.128 stack<=0 threads=128
// SASS moe_permute_kernel<*, 1> moe_unpermute_kernel<*, 1>: stack<=0 threads=128
// SASS moe_row_dot_kernel<*>: SHFL.BFLY stack<=0 threads=128
// Test: tests/gpu/test_cuda_moe_permute.cpp (ctest -L gpu; -L emu in the emulated build)
#include "cuda_compat.cuh"  // first: the prelude of every CUDA source

#include <cstdint>

#include "reduce.cuh"
#include "vector_io.cuh"
#include "vlpar/core/dtype.hpp"
#include "vlpar/kernels/cuda/moe_permute_params.hpp"

namespace vlpar::cuda_kernels {

inline constexpr int kMoeRowThreads = 128;
inline constexpr int kMoeDotWarps = 4;

/// out[r] = w · in[src] for the output rows of this block (permute: src = a / K; scale_rows: src = r).
template <class T, int kVec>
__global__ void __launch_bounds__(kMoeRowThreads) moe_permute_kernel(const MoeRowsParams p) {
  for (int64_t r = blockIdx.x; r < p.items; r += gridDim.x) {
    const int32_t a = p.map[r];  // −1: a padding row (moe_pad_plan), written as zeros
    const float w = a < 0 ? 0.f : (p.weights != nullptr ? p.weights[a] : 1.f);
    const T* src = static_cast<const T*>(p.in) + (p.gather && a >= 0 ? a / p.top_k : r) * p.ld_in;
    T* dst = static_cast<T*>(p.out) + r * p.ld_out;
    for (int64_t f = int64_t(threadIdx.x) * kVec; f < p.cols; f += int64_t(kMoeRowThreads) * kVec) {
      float x[kVec] = {};
      if (a >= 0) load_pack<T, kVec>(x, src + f);
#pragma unroll
      for (int v = 0; v < kVec; ++v) x[v] *= w;
      store_pack<T, kVec>(dst + f, x);
    }
  }
}

/// out[t] = Σ over token t's rows in ascending row order of w · in[row] (fp32, one rounding).
template <class T, int kVec>
__global__ void __launch_bounds__(kMoeRowThreads) moe_unpermute_kernel(const MoeRowsParams p) {
  VLPAR_DYN_SMEM(int32_t, smem);  // [K] rows ascending, then [K] their weights (float bits)
  int32_t* rows = smem;
  float* ws = reinterpret_cast<float*>(smem + p.top_k);
  for (int64_t t = blockIdx.x; t < p.items; t += gridDim.x) {
    if (threadIdx.x == 0) {  // insertion sort of the token's K (row, weight) pairs by row
      for (int k = 0; k < p.top_k; ++k) {
        const int32_t r = p.map[t * p.top_k + k];
        const float w = p.weights != nullptr ? p.weights[t * p.top_k + k] : 1.f;
        int j = k;
        for (; j > 0 && rows[j - 1] > r; --j) rows[j] = rows[j - 1], ws[j] = ws[j - 1];
        rows[j] = r;
        ws[j] = w;
      }
    }
    __syncthreads();
    T* dst = static_cast<T*>(p.out) + t * p.ld_out;
    for (int64_t f = int64_t(threadIdx.x) * kVec; f < p.cols; f += int64_t(kMoeRowThreads) * kVec) {
      float acc[kVec] = {};
      for (int j = 0; j < p.top_k; ++j) {
        if (rows[j] < 0) continue;  // dropped (capacity): not part of the sum (sorted first)
        float x[kVec];
        load_pack<T, kVec>(x, static_cast<const T*>(p.in) + int64_t(rows[j]) * p.ld_in + f);
#pragma unroll
        for (int v = 0; v < kVec; ++v) acc[v] += ws[j] * x[v];
      }
      store_pack<T, kVec>(dst + f, acc);
    }
    __syncthreads();  // every thread is done with rows/ws before the next token's sort
  }
}

/// dots[a] = Σ_f in[row, f] · in2[row, f], row = map[a]: one warp per assignment, fixed order.
template <class T>
__global__ void __launch_bounds__(kMoeDotWarps * kWarpSize) moe_row_dot_kernel(const MoeRowsParams p) {
  const int lane = int(threadIdx.x) % kWarpSize, warp = int(threadIdx.x) / kWarpSize;
  for (int64_t a = int64_t(blockIdx.x) * kMoeDotWarps + warp; a < p.items; a += int64_t(gridDim.x) * kMoeDotWarps) {
    const int64_t r = p.map[a];  // −1: dropped (capacity), its dot is 0
    const T* x = static_cast<const T*>(p.in) + (r < 0 ? 0 : r) * p.ld_in;
    const T* y = static_cast<const T*>(p.in2) + (r < 0 ? 0 : r) * p.ld_in2;
    float s = 0.f;
    for (int64_t f = lane; f < p.cols && r >= 0; f += kWarpSize) s += to_float(x[f]) * to_float(y[f]);
    s = warp_sum(s);
    if (lane == 0) static_cast<float*>(p.out)[a] = s;
  }
}

}  // namespace vlpar::cuda_kernels
