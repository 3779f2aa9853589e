#pragma once
// Pre-norm vision transformer block of Qwen3-VL (spec qwen3vl.md §3.4), HF Qwen3VLVisionBlock:
//   x1  = x + proj( attention( rot(q), rot(k), v ) ),  [q | k | v] = qkv(LN1(x)) viewed [N, 3, heads, hd]
//   out = x1 + fc2( gelu_tanh( fc1( LN2(x1) ) ) )
// LayerNorms with weight and bias (eps cfg.eps), every linear with a bias, vision 2D rotary on q and k
// (rows: head dims [0, hd/4) ∪ [hd/2, 3hd/4), columns: the rest; kernels/rotary_math.hpp), bidirectional
// attention inside each segment of seq.cu_seqlens (one per image / video frame), scale hd^-0.5.
// TP = 1 only: vision tensor parallelism (ParallelConfig::vision_tp) is not implemented for this block yet.
// Storage f32 (CPU). Test: tests/unit/test_vision_block.cpp (reference: include/vlpar/reference/vision.hpp).
#include "vlpar/core/context.hpp"
#include "vlpar/core/tensor.hpp"
#include "vlpar/nn/vision_config.hpp"

namespace vlpar::nn {

/// Weights of one block in HF shapes (or their gradients; an empty gradient view means that parameter is frozen:
/// no gradient is computed for it and its weight-gradient GEMM is skipped).
struct VisionBlockWeights {
  TensorView norm1_w, norm1_b;  // [Hv]          norm1.{weight,bias}
  TensorView qkv_w;             // [3Hv, Hv]     attn.qkv.weight: rows q (head-major), then k, then v
  TensorView qkv_b;             // [3Hv]         attn.qkv.bias
  TensorView proj_w;            // [Hv, Hv]      attn.proj.weight
  TensorView proj_b;            // [Hv]
  TensorView norm2_w, norm2_b;  // [Hv]          norm2.{weight,bias}
  TensorView fc1_w;             // [Iv, Hv]      mlp.linear_fc1.weight
  TensorView fc1_b;             // [Iv]
  TensorView fc2_w;             // [Hv, Iv]      mlp.linear_fc2.weight
  TensorView fc2_b;             // [Hv]

  /// True if any view is non-empty (for gradients: the block has a trainable parameter).
  bool any() const;
};

/// What backward needs from forward. x is the caller's input view: it must stay alive until backward.
struct VisionBlockStash {
  TensorView x;        // [N, Hv]          block input
  Tensor mean1, rstd1;  // [N] f32         LN1 statistics
  Tensor h1;           // [N, Hv]          LN1 output
  Tensor qkv;          // [N, 3Hv]         qkv output; the q and k thirds rotated in place
  Tensor attn;         // [N, heads, hd]   attention output
  Tensor lse;          // [heads, N] f32
  Tensor x1;           // [N, Hv]          after the attention residual
  Tensor mean2, rstd2;  // [N] f32
  Tensor h2;           // [N, Hv]          LN2 output
  Tensor f1;           // [N, Iv]          fc1 output (GELU input)
  Tensor act;          // [N, Iv]          GELU-tanh output
};

class VisionBlock {
 public:
  VisionBlock(const VisionConfig& cfg, VisionBlockWeights w, VisionBlockWeights grads);

  /// @brief Checks the weights (present, HF shapes, contiguous f32) and the non-empty gradients (same shapes).
  Status check_weights() const;

  /// @param out [N, Hv] written (may not alias x); x [N, Hv]; N = seq.num_patches
  Status forward(const Context& ctx, TensorView out, TensorView x, const VisionSeq& seq, VisionBlockStash& st) const;

  /// @brief Accumulates the non-frozen parameter gradients and writes dx = ∂L/∂x.
  /// @param dx   [N, Hv] written, or an empty view when nothing below needs it (then the input-gradient work that
  ///             only feeds dx is skipped)
  /// @param dout [N, Hv] ∂L/∂out (may not alias dx)
  Status backward(const Context& ctx, TensorView dx, TensorView dout, const VisionSeq& seq,
                  const VisionBlockStash& st) const;

 private:
  VisionConfig cfg_;
  VisionBlockWeights w_, g_;
};

}  // namespace vlpar::nn
