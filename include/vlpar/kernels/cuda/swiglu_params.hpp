#pragma once
// Parameters and launcher declarations of the CUDA SwiGLU kernels (STYLE §2: the params part of the family
//   swiglu_params.hpp (this file) · src/kernels/cuda/swiglu_kernel.cuh · src/kernels/cuda/swiglu_launch.cuh ·
//   public API include/vlpar/kernels/activation.hpp).
// Every operand is a row view (RowsView): gate and up may be the two halves of one fused [N, 2I] tensor, so
// each carries its own row stride. Launchers are explicitly instantiated per T in the generated
// src/kernels/cuda/swiglu_<dtype>.cu. Test: tests/gpu/test_cuda_kernels.cpp (ctest -L gpu)
#include <cstdint>

#include "vlpar/core/status.hpp"

namespace vlpar::cuda_kernels {

struct SwigluForwardParams {
  void* y;                  // [rows, I] T
  const void* gate;         // [rows, I] T
  const void* up;           // [rows, I] T
  int64_t rows;             // N (tokens)
  int64_t cols;             // I (intermediate size)
  int64_t y_row_stride;     // elements
  int64_t gate_row_stride;  // elements (2I when gate is the first half of a fused [N, 2I] tensor)
  int64_t up_row_stride;    // elements
};

struct SwigluBackwardParams {
  void* dgate;              // [rows, I] T, written: dy·up·silu'(gate)
  void* dup;                // [rows, I] T, written: dy·silu(gate)
  const void* dy;           // [rows, I] T
  const void* gate;         // [rows, I] T
  const void* up;           // [rows, I] T
  int64_t rows;
  int64_t cols;
  int64_t dgate_row_stride;  // elements
  int64_t dup_row_stride;
  int64_t dy_row_stride;
  int64_t gate_row_stride;
  int64_t up_row_stride;
};

/// @brief y = silu(gate)·up elementwise, fp32 math, one rounding to T.
template <class T>
Status swiglu_forward_run(const SwigluForwardParams& p, void* stream);

/// @brief dgate = dy·up·σ(g)·(1 + g·(1 − σ(g))), dup = dy·silu(g). Each element reads all its inputs before
/// writing, so outputs may alias inputs element for element.
template <class T>
Status swiglu_backward_run(const SwigluBackwardParams& p, void* stream);

}  // namespace vlpar::cuda_kernels
