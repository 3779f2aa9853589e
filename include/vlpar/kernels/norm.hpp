#pragma once
// Row normalisations over the last dim H; leading dims are rows (see RowsView).
//   RMSNorm  : y = x · rstd · w,            rstd = 1/sqrt(mean(x²) + eps)          (Qwen3 text, q/k norm)
//   LayerNorm: y = (x − mean) · rstd · w + b, rstd = 1/sqrt(var(x) + eps)          (Qwen3-VL vision)
// Statistics and the affine run in fp32; the output is rounded once to its storage dtype.
// The forward stashes rstd (and mean) in fp32 [rows] for the backward.
// CPU and CUDA behind one API: views on a CUDA device run the CUDA kernel (src/kernels/cuda/rmsnorm*.cu).
#include "vlpar/core/context.hpp"
#include "vlpar/core/tensor.hpp"

namespace vlpar {

/// @param y    [rows..., H]
/// @param rstd [rows] f32, written (empty view: not stashed)
/// @param x    [rows..., H]
/// @param w    [H]
Status rmsnorm_forward(const Context& ctx, TensorView y, TensorView rstd, TensorView x, TensorView w, float eps);
/// @param dx [rows..., H] written
/// @param dw [H] f32, accumulated (empty view: frozen)
Status rmsnorm_backward(const Context& ctx, TensorView dx, TensorView dw, TensorView dy, TensorView x,
                        TensorView w, TensorView rstd);

/// @brief dw [H] f32 += Σ_rows dy · x · rstd: RMSNorm's weight gradient alone, summed in fixed 64-row chunks
/// added in chunk order, so the result is bitwise the same for any thread count (the MoE block's
/// thread-count-invariant backward; rmsnorm_backward's dw partitions by thread).
Status rmsnorm_weight_grad(const Context& ctx, TensorView dw, TensorView dy, TensorView x, TensorView rstd);

/// @param mean, rstd [rows] f32, written
Status layernorm_forward(const Context& ctx, TensorView y, TensorView mean, TensorView rstd, TensorView x,
                         TensorView w, TensorView b, float eps);
/// @param dw, db [H] f32, accumulated (empty views: frozen)
Status layernorm_backward(const Context& ctx, TensorView dx, TensorView dw, TensorView db, TensorView dy,
                          TensorView x, TensorView w, TensorView mean, TensorView rstd);

}  // namespace vlpar
