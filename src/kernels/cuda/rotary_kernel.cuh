#pragma once
// Device code of the CUDA rotary family (launch setup in rotary_launch.cuh).
//   rotary_kernel<T> : y = R(sign·θ) x on [N_tok, H, D], θ_j = pos[axis_j][t] · inv_freq_j (rotary_math.hpp)
// One thread per (token t, pair j), looping over the H heads: the angle, cosf and sinf are evaluated once per
// (t, j) and reused by every head, as the CPU kernel does (src/kernels/cpu/rotary.cpp). Consecutive threads
// take consecutive j, so a warp reads 32 consecutive elements of each half of a head row. The rotation itself
// is rotate_pair() from rotary_math.hpp, shared with the CPU. Angles and cos/sin are fp32 with the accurate
// sincosf (≤ 2 ulp from glibc's), never __sinf/__cosf, whose error grows with |θ| (θ reaches 3e4 rad).
// Test: tests/gpu/test_cuda_kernels.cpp (ctest -L gpu)
// SASS (tools/check_sass.py): the barrier after the frequency table is staged in shared memory. stack<=32: the
// accurate sincosf keeps its Payne-Hanek reduction table (7 words) in local memory, used only for |θ| > 105615.
// SASS rotary_kernel<*>: BAR.SYNC regs<=64 stack<=32 threads=256
#include "cuda_compat.cuh"  // first: the prelude of every CUDA source

#include <cstdint>

#include "vlpar/core/dtype.hpp"
#include "vlpar/kernels/cuda/rotary_params.hpp"
#include "vlpar/kernels/rotary_math.hpp"

namespace vlpar::cuda_kernels {

inline constexpr int kRotaryThreads = 256;

/// Position of token t on `axis` (positions are contiguous along tokens).
__device__ __forceinline__ float rotary_position(const RotaryParams& p, int axis, int64_t t) {
  const int64_t i = axis * p.pos_axis_stride + t;
  return p.pos_is_i64 ? float(static_cast<const int64_t*>(p.pos)[i]) : float(static_cast<const int32_t*>(p.pos)[i]);
}

/// Rotates pair j of token t in every head by the angle whose cos and sin (already signed) are c, s.
template <class T>
__device__ __forceinline__ void rotary_pair_all_heads(const RotaryParams& p, int64_t t, int j, float c, float s) {
  const T* x = static_cast<const T*>(p.x) + t * p.x_tok_stride + j;
  T* y = static_cast<T*>(p.y) + t * p.y_tok_stride + j;
#pragma unroll 4
  for (int64_t h = 0; h < p.n_heads; ++h) {
    const T* xh = x + h * p.x_head_stride;
    T* yh = y + h * p.y_head_stride;
    float lo, hi;
    rotate_pair(to_float(xh[0]), to_float(xh[p.half]), c, s, lo, hi);
    yh[0] = from_float<T>(lo);  // safe in place: both inputs of the pair were read above
    yh[p.half] = from_float<T>(hi);
  }
}

template <class T>
__global__ void __launch_bounds__(kRotaryThreads) rotary_kernel(const __grid_constant__ RotaryParams p) {
  // The (axis, inv_freq) table sits in the constant bank, where lanes reading different entries serialise;
  // one staged copy per block turns those reads into conflict-free shared-memory loads.
  VLPAR_SHARED(float, inv_freq, [kRotaryMaxPairs]);
  VLPAR_SHARED(uint8_t, axis, [kRotaryMaxPairs]);
  for (int k = int(threadIdx.x); k < p.half; k += int(blockDim.x)) {
    inv_freq[k] = p.inv_freq[k];
    axis[k] = p.axis[k];
  }
  __syncthreads();
  const int64_t n = p.n_tok * p.half;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = i / p.half;
    const int j = int(i - t * p.half);
    const float angle = rotary_position(p, axis[j], t) * inv_freq[j];
    float s, c;
    sincosf(angle, &s, &c);
    rotary_pair_all_heads<T>(p, t, j, c, p.sign * s);
  }
}

}  // namespace vlpar::cuda_kernels
