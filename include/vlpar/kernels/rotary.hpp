#pragma once
// Rotary position embeddings on [N_tok, H, D] (1D RoPE, interleaved MRoPE, vision 2D RoPE); see
// rotary_math.hpp for the exact angle conventions. Math in fp32 (angles, cos/sin, rotation), result
// rounded once to the storage dtype. y may alias x (in place). CUDA views run src/kernels/cuda/rotary*.cu.
#include "vlpar/core/context.hpp"
#include "vlpar/core/tensor.hpp"
#include "vlpar/kernels/rotary_math.hpp"

namespace vlpar {

/// @param y, x      [N_tok, H, D] (D == desc.head_dim), last dim contiguous
/// @param positions i32 or i64, [num_axes, N_tok] (or [N_tok] for k1D)
Status rotary_forward(const Context& ctx, TensorView y, TensorView x, TensorView positions, const RotaryDesc& desc);
/// @brief dx = Rᵀ(θ) dy (rotation by −θ). dx may alias dy.
Status rotary_backward(const Context& ctx, TensorView dx, TensorView dy, TensorView positions,
                       const RotaryDesc& desc);

/// @brief Checks a RotaryDesc ("head_dim 70 is not a multiple of 4 for vision 2D rotary").
Status check_rotary_desc(const RotaryDesc& desc);

}  // namespace vlpar
