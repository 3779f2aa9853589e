#pragma once
// Device code of the CUDA RMSNorm family (no host code; launch setup lives in rmsnorm_launch.cuh).
//   rmsnorm_forward_kernel<T, W, kVec, kBlockPerRow>  : y = x·rstd·w, rstd = 1/sqrt(mean(x²) + eps)
//   rmsnorm_backward_kernel<T, W, kVec, kBlockPerRow> : dx per row + one dw partial row per block
//   rmsnorm_dw_reduce_kernel<kSplit>                  : dw[c] += Σ_b partial[b][c], fixed order
// A "row group" (a warp, or the whole block when kBlockPerRow) owns one row at a time: its `lane`s stride
// over the columns kVec elements at a time (kVec = 16 bytes / sizeof(T) when every pointer and row stride is
// aligned, else 1). Statistics accumulate in fp32; each output element is rounded once. The fp32 expressions
// follow the CPU kernel (src/kernels/cpu/norm.cpp) term for term, so the two differ only by summation order
// and FMA contraction. Test: tests/gpu/test_cuda_kernels.cpp (ctest -L gpu)
// What the SASS of every architecture must show (tools/check_sass.py, CI stage cuda): butterfly shuffles for the
// row sums, a block barrier where a row spans the block, 16-byte global accesses on the vectorised paths;
// registers: ≤ 64 for block-per-row (1024-thread blocks need it), ≤ 128 for warp-per-row (128-thread blocks);
// occupancy at the largest block each launches (rmsnorm_heuristics.hpp).
// SASS rmsnorm_forward_kernel<*> rmsnorm_backward_kernel<*>: SHFL.BFLY regs<=128 threads=128
// SASS rmsnorm_forward_kernel<*, true> rmsnorm_backward_kernel<*, true>: BAR.SYNC regs<=64 threads=1024
// SASS rmsnorm_forward_kernel<*, 4, *> rmsnorm_forward_kernel<*, 8, *>: LDG.E.128 STG.E.128
// SASS rmsnorm_backward_kernel<*, 4, *> rmsnorm_backward_kernel<*, 8, *>: LDG.E.128 STG.E.128
// SASS rmsnorm_dw_reduce_kernel<*>: BAR.SYNC regs<=32 threads=256
#include "cuda_compat.cuh"  // first: the prelude of every CUDA source

#include <cstdint>

#include "reduce.cuh"
#include "rmsnorm_heuristics.hpp"
#include "vector_io.cuh"
#include "vlpar/core/dtype.hpp"
#include "vlpar/kernels/cuda/rmsnorm_params.hpp"

namespace vlpar::cuda_kernels {

/// Which row group a thread belongs to and its position in it (device components receive this, they do not
/// read threadIdx themselves).
struct RowGroup {
  int lane;       // index within the group
  int size;       // threads per group
  int index;      // group index within the block
  int per_block;  // groups per block
};

template <bool kBlockPerRow>
__device__ __forceinline__ RowGroup make_row_group(int tid, int block_threads) {
  if constexpr (kBlockPerRow) return RowGroup{tid, block_threads, 0, 1};
  else return RowGroup{tid % kWarpSize, kWarpSize, tid / kWarpSize, block_threads / kWarpSize};
}

/// Sum of v over the row group (a warp: shuffles only; a block: shuffles and `red`, 32 floats of smem).
template <bool kBlockPerRow>
__device__ __forceinline__ float row_group_sum(float v, int tid, int block_threads, float* red) {
  if constexpr (kBlockPerRow) return block_sum(v, tid, block_threads, red);
  else return warp_sum(v);
}

/// This lane's share of Σ x² over one row.
template <class T, int kVec>
__device__ __forceinline__ float row_sum_squares(const T* x, int cols, int lane, int group_size) {
  float ss = 0.f;
  for (int c = lane * kVec; c < cols; c += group_size * kVec) {
    float v[kVec];
    load_pack<T, kVec>(v, x + c);
#pragma unroll
    for (int k = 0; k < kVec; ++k) ss += v[k] * v[k];
  }
  return ss;
}

/// y = x·rs·w over one row (this lane's columns).
template <class T, class W, int kVec>
__device__ __forceinline__ void row_scale(T* y, const T* x, const W* w, float rs, int cols, int lane,
                                          int group_size) {
  for (int c = lane * kVec; c < cols; c += group_size * kVec) {
    float xv[kVec], wv[kVec], yv[kVec];
    load_pack<T, kVec>(xv, x + c);
    load_pack<W, kVec>(wv, w + c);
#pragma unroll
    for (int k = 0; k < kVec; ++k) yv[k] = xv[k] * rs * wv[k];
    store_pack<T, kVec>(y + c, yv);
  }
}

template <class T, class W, int kVec, bool kBlockPerRow>
__global__ void __launch_bounds__(kBlockPerRow ? 1024 : kWarpRowThreads)
    rmsnorm_forward_kernel(const RmsNormForwardParams p) {
  VLPAR_SHARED(float, red, [kWarpSize]);
  const int tid = int(threadIdx.x), nthreads = int(blockDim.x);
  const RowGroup g = make_row_group<kBlockPerRow>(tid, nthreads);
  const int cols = int(p.cols);
  const W* w = static_cast<const W*>(p.w);
  // Loop bounds are uniform across the row group, so the block-wide barriers in row_group_sum are safe.
  for (int64_t row = int64_t(blockIdx.x) * g.per_block + g.index; row < p.rows;
       row += int64_t(gridDim.x) * g.per_block) {
    const T* x = static_cast<const T*>(p.x) + row * p.x_row_stride;
    T* y = static_cast<T*>(p.y) + row * p.y_row_stride;
    const float ss = row_group_sum<kBlockPerRow>(row_sum_squares<T, kVec>(x, cols, g.lane, g.size), tid,
                                                 nthreads, red);
    const float rs = 1.0f / sqrtf(ss / float(cols) + p.eps);  // IEEE div and sqrt, as the CPU kernel
    if (g.lane == 0 && p.rstd != nullptr) p.rstd[row] = rs;
    row_scale<T, W, kVec>(y, x, w, rs, cols, g.lane, g.size);
  }
}

/// This lane's share of Σ dy·w·x over one row.
template <class T, class W, int kVec>
__device__ __forceinline__ float row_dot_dy_w_x(const T* dy, const W* w, const T* x, int cols, int lane,
                                                int group_size) {
  float dot = 0.f;
  for (int c = lane * kVec; c < cols; c += group_size * kVec) {
    float gv[kVec], wv[kVec], xv[kVec];
    load_pack<T, kVec>(gv, dy + c);
    load_pack<W, kVec>(wv, w + c);
    load_pack<T, kVec>(xv, x + c);
#pragma unroll
    for (int k = 0; k < kVec; ++k) dot += gv[k] * wv[k] * xv[k];
  }
  return dot;
}

/// dx = rs·dy·w − x·coef over one row; acc[c] += dy·x·rs when acc is set (this lane's columns only, so the
/// accumulators need no synchronisation between rows).
template <class T, class W, int kVec>
__device__ __forceinline__ void row_backward(T* dx, float* acc, const T* dy, const W* w, const T* x, float rs,
                                             float coef, int cols, int lane, int group_size) {
  for (int c = lane * kVec; c < cols; c += group_size * kVec) {
    float gv[kVec], wv[kVec], xv[kVec], dv[kVec];
    load_pack<T, kVec>(gv, dy + c);
    load_pack<W, kVec>(wv, w + c);
    load_pack<T, kVec>(xv, x + c);
#pragma unroll
    for (int k = 0; k < kVec; ++k) dv[k] = rs * gv[k] * wv[k] - xv[k] * coef;
    store_pack<T, kVec>(dx + c, dv);
    if (acc != nullptr) {
#pragma unroll
      for (int k = 0; k < kVec; ++k) acc[c + k] += gv[k] * xv[k] * rs;
    }
  }
}

/// Block b handles rows [b·chunk, min(rows, (b+1)·chunk)); its row groups take every per_block-th row of that
/// range. dw partials: each group accumulates its rows into its own smem row acc[group][:], then the block adds
/// the groups in index order and writes dw_partial[b][:]. Every order is fixed by (rows, H, grid).
template <class T, class W, int kVec, bool kBlockPerRow>
__global__ void __launch_bounds__(kBlockPerRow ? 1024 : kWarpRowThreads)
    rmsnorm_backward_kernel(const RmsNormBackwardParams p) {
  VLPAR_DYN_SMEM(float, acc_smem);  // [row groups, H] f32 when p.dw is set
  VLPAR_SHARED(float, red, [kWarpSize]);
  const int tid = int(threadIdx.x), nthreads = int(blockDim.x);
  const RowGroup g = make_row_group<kBlockPerRow>(tid, nthreads);
  const int cols = int(p.cols);
  const W* w = static_cast<const W*>(p.w);
  const bool with_dw = p.dw != nullptr;
  float* acc = with_dw ? acc_smem + int64_t(g.index) * cols : nullptr;
  if (with_dw) {
    for (int c = g.lane * kVec; c < cols; c += g.size * kVec) {
#pragma unroll
      for (int k = 0; k < kVec; ++k) acc[c + k] = 0.f;
    }
  }
  const int64_t chunk = (p.rows + gridDim.x - 1) / gridDim.x;
  const int64_t begin = int64_t(blockIdx.x) * chunk;
  const int64_t end = begin + chunk < p.rows ? begin + chunk : p.rows;
  for (int64_t row = begin + g.index; row < end; row += g.per_block) {
    const T* x = static_cast<const T*>(p.x) + row * p.x_row_stride;
    const T* dy = static_cast<const T*>(p.dy) + row * p.dy_row_stride;
    T* dx = static_cast<T*>(p.dx) + row * p.dx_row_stride;
    const float rs = p.rstd[row];
    const float dot = row_group_sum<kBlockPerRow>(row_dot_dy_w_x<T, W, kVec>(dy, w, x, cols, g.lane, g.size),
                                                  tid, nthreads, red);
    const float coef = rs * rs * rs * dot / float(cols);  // as the CPU kernel: rs³·dot/H
    row_backward<T, W, kVec>(dx, acc, dy, w, x, rs, coef, cols, g.lane, g.size);
  }
  if (!with_dw) return;
  __syncthreads();
  float* out = p.dw_partial + int64_t(blockIdx.x) * cols;
  for (int c = tid; c < cols; c += nthreads) {
    float s = 0.f;
    for (int gi = 0; gi < g.per_block; ++gi) s += acc_smem[int64_t(gi) * cols + c];
    out[c] = s;
  }
}

/// One column of dw: this thread (split index `part` of kSplit) sums partial rows part, part + kSplit, ...;
/// the kSplit sums of a column are then added in part order by part 0.
template <int kSplit>
__device__ __forceinline__ float dw_column_part(const float* partial, int num_blocks, int cols, int col, int part) {
  float s = 0.f;
  for (int b = part; b < num_blocks; b += kSplit) s += partial[int64_t(b) * cols + col];
  return s;
}

/// Block (32, kSplit): threadIdx.x picks the column within a 32-column tile, threadIdx.y the split.
template <int kSplit>
__global__ void __launch_bounds__(32 * kSplit)
    rmsnorm_dw_reduce_kernel(float* dw, const float* partial, int num_blocks, int cols) {
  VLPAR_SHARED(float, sums, [kSplit][kWarpSize + 1]);  // +1: no bank conflicts when part 0 reads a column
  const int lane = int(threadIdx.x), part = int(threadIdx.y);
  const int col = int(blockIdx.x) * kWarpSize + lane;
  sums[part][lane] = col < cols ? dw_column_part<kSplit>(partial, num_blocks, cols, col, part) : 0.f;
  __syncthreads();
  if (part != 0 || col >= cols) return;
  float total = 0.f;
#pragma unroll
  for (int k = 0; k < kSplit; ++k) total += sums[k][lane];
  dw[col] += total;
}

}  // namespace vlpar::cuda_kernels
