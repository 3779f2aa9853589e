#pragma once
// GEMM and linear layers (CPU: Eigen, fp32 accumulation).
//   gemm            : C[b] = alpha · op(A[b]) · op(B[b]) + beta · C[b], all transpose combinations, strided batches.
//   linear_forward  : y[N, out] = x[N, in] · W[out, in]ᵀ + bias[out]
//   linear_backward : dx = dy · W ; dW += dyᵀ · x ; dbias += Σ_rows dy   (each output optional)
// Storage: f32, bf16 or f16 for every operand (low-precision operands are widened to f32 tile by tile).
// Test: tests/unit/test_gemm.cpp. Bench: bench/bench_ops.cpp (BM_Gemm).
#include "vlpar/core/context.hpp"
#include "vlpar/core/tensor.hpp"

namespace vlpar {

struct GemmDesc {
  bool trans_a = false;  // op(A) = Aᵀ; A is stored [K, M] instead of [M, K]
  bool trans_b = false;  // op(B) = Bᵀ; B is stored [N, K] instead of [K, N]
  float alpha = 1.f;
  float beta = 0.f;  // 0 means C is write-only (its old contents may be NaN)
};

/// @brief Batched GEMM over 2D views ([rows, cols], inner stride 1) or 3D views ([batch, rows, cols], any
/// batch stride). A batch of 1 broadcasts (e.g. one weight for every batch entry).
/// @param c [M, N] or [batch, M, N]
/// @param a [M, K] (or [K, M] if trans_a), optionally batched
/// @param b [K, N] (or [N, K] if trans_b), optionally batched
Status gemm(const Context& ctx, TensorView c, TensorView a, TensorView b, GemmDesc desc);

/// @param y    [N, out]
/// @param x    [N, in]
/// @param w    [out, in]   (PyTorch nn.Linear layout)
/// @param bias [out] or an empty view for no bias
Status linear_forward(const Context& ctx, TensorView y, TensorView x, TensorView w, TensorView bias);

/// @param dx    [N, in]  written (empty view: skip, e.g. first layer)
/// @param dw    [out, in] accumulated (empty view: frozen weight, the GEMM is skipped)
/// @param dbias [out]     accumulated (empty view: no bias or frozen)
Status linear_backward(const Context& ctx, TensorView dx, TensorView dw, TensorView dbias, TensorView dy,
                       TensorView x, TensorView w);

}  // namespace vlpar
