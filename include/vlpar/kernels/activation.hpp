#pragma once
// Pointwise activations, forward and backward (fp32 math, any float storage).
//   GELU tanh : 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))   (vision block MLP, gelu_pytorch_tanh)
//   GELU erf  : 0.5·x·(1 + erf(x/√2))                        (mergers, nn.GELU())
//   SiLU      : x·σ(x)
//   SwiGLU    : y = silu(gate) ⊙ up                          (text MLP, MoE experts)
// Views may be strided by rows (RowsView), so gate and up can be the halves of a fused [N, 2I] tensor.
// SwiGLU on a CUDA device runs src/kernels/cuda/swiglu*.cu.
#include "vlpar/core/context.hpp"
#include "vlpar/core/tensor.hpp"

namespace vlpar {

enum class GeluKind : uint8_t { kTanh, kErf };

Status gelu_forward(const Context& ctx, TensorView y, TensorView x, GeluKind kind);
/// dx = dy · gelu'(x)
Status gelu_backward(const Context& ctx, TensorView dx, TensorView dy, TensorView x, GeluKind kind);

Status silu_forward(const Context& ctx, TensorView y, TensorView x);
Status silu_backward(const Context& ctx, TensorView dx, TensorView dy, TensorView x);

/// @param y, gate, up [rows..., I]
Status swiglu_forward(const Context& ctx, TensorView y, TensorView gate, TensorView up);
/// dgate = dy · up · silu'(gate) ; dup = dy · silu(gate)
Status swiglu_backward(const Context& ctx, TensorView dgate, TensorView dup, TensorView dy, TensorView gate,
                       TensorView up);

}  // namespace vlpar
