#pragma once
// Device code of the CUDA SwiGLU family (launch setup in swiglu_launch.cuh).
//   swiglu_forward_kernel<T, kVec>  : y = silu(gate)·up
//   swiglu_backward_kernel<T, kVec> : dgate = dy·up·silu'(gate), dup = dy·silu(gate)
// Grid-stride over rows × (I / kVec) packs; every operand has its own row stride (gate and up may be the
// halves of a fused [N, 2I] tensor). fp32 math with the CPU kernel's expressions (src/kernels/cpu/
// activation.cpp): σ(x) = 1/(1 + exp(−x)) with the accurate expf, not __expf. Each pack is read completely
// before its outputs are stored, so outputs may alias inputs element for element.
// Test: tests/gpu/test_cuda_kernels.cpp (ctest -L gpu)
// SASS (tools/check_sass.py): 16-byte loads and stores on the vectorised paths.
// SASS swiglu_forward_kernel<*> swiglu_backward_kernel<*>: LDG.E STG.E regs<=64 threads=256
// SASS swiglu_forward_kernel<*, 4> swiglu_forward_kernel<*, 8>: LDG.E.128 STG.E.128
// SASS swiglu_backward_kernel<*, 4> swiglu_backward_kernel<*, 8>: LDG.E.128 STG.E.128
#include "cuda_compat.cuh"  // first: the prelude of every CUDA source

#include <cstdint>

#include "vector_io.cuh"
#include "vlpar/core/dtype.hpp"
#include "vlpar/kernels/cuda/swiglu_params.hpp"

namespace vlpar::cuda_kernels {

inline constexpr int kSwigluThreads = 256;

__device__ __forceinline__ float sigmoid_f32(float x) { return 1.f / (1.f + expf(-x)); }

/// y[r, c..c+kVec) = silu(gate)·up.
template <class T, int kVec>
__device__ __forceinline__ void swiglu_forward_pack(const SwigluForwardParams& p, int64_t r, int64_t c) {
  float g[kVec], u[kVec], y[kVec];
  load_pack<T, kVec>(g, static_cast<const T*>(p.gate) + r * p.gate_row_stride + c);
  load_pack<T, kVec>(u, static_cast<const T*>(p.up) + r * p.up_row_stride + c);
#pragma unroll
  for (int k = 0; k < kVec; ++k) y[k] = g[k] * sigmoid_f32(g[k]) * u[k];
  store_pack<T, kVec>(static_cast<T*>(p.y) + r * p.y_row_stride + c, y);
}

/// dgate, dup at [r, c..c+kVec).
template <class T, int kVec>
__device__ __forceinline__ void swiglu_backward_pack(const SwigluBackwardParams& p, int64_t r, int64_t c) {
  float dy[kVec], g[kVec], u[kVec], dg[kVec], du[kVec];
  load_pack<T, kVec>(dy, static_cast<const T*>(p.dy) + r * p.dy_row_stride + c);
  load_pack<T, kVec>(g, static_cast<const T*>(p.gate) + r * p.gate_row_stride + c);
  load_pack<T, kVec>(u, static_cast<const T*>(p.up) + r * p.up_row_stride + c);
#pragma unroll
  for (int k = 0; k < kVec; ++k) {
    const float s = sigmoid_f32(g[k]);
    dg[k] = dy[k] * u[k] * (s * (1.f + g[k] * (1.f - s)));
    du[k] = dy[k] * (g[k] * s);
  }
  store_pack<T, kVec>(static_cast<T*>(p.dgate) + r * p.dgate_row_stride + c, dg);
  store_pack<T, kVec>(static_cast<T*>(p.dup) + r * p.dup_row_stride + c, du);
}

template <class T, int kVec>
__global__ void __launch_bounds__(kSwigluThreads) swiglu_forward_kernel(const SwigluForwardParams p) {
  const int64_t packs_per_row = p.cols / kVec, n = p.rows * packs_per_row;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / packs_per_row;
    swiglu_forward_pack<T, kVec>(p, r, (i - r * packs_per_row) * kVec);
  }
}

template <class T, int kVec>
__global__ void __launch_bounds__(kSwigluThreads) swiglu_backward_kernel(const SwigluBackwardParams p) {
  const int64_t packs_per_row = p.cols / kVec, n = p.rows * packs_per_row;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / packs_per_row;
    swiglu_backward_pack<T, kVec>(p, r, (i - r * packs_per_row) * kVec);
  }
}

}  // namespace vlpar::cuda_kernels
