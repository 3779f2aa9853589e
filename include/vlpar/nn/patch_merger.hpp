#pragma once
// Qwen3-VL patch merger (spec qwen3vl.md §3.6), HF Qwen3VLPatchMerger: m² = 4 contiguous patches (one merge window)
// become one LLM token.
//   final merger    (postshuffle = false): LayerNorm(Hv) per patch, then view [N/m², m²·Hv]
//   deepstack merger (postshuffle = true): view [N/m², m²·Hv], then LayerNorm(m²·Hv)
//   then fc1 (m²Hv → m²Hv, bias) → exact erf GELU → fc2 (m²Hv → D, bias).
// TP = 1 only. Activations in cfg.activation (f32 or bf16), weights f32 or bf16, gradients f32. Test:
// tests/unit/test_vision_block.cpp (reference: reference/vision.hpp).
#include "vlpar/core/context.hpp"
#include "vlpar/core/tensor.hpp"
#include "vlpar/nn/vision_config.hpp"

namespace vlpar::nn {

/// HF shapes, K = m²·Hv (or their gradients; an empty gradient view = frozen parameter).
struct PatchMergerWeights {
  TensorView norm_w, norm_b;  // [Hv] (final) or [K] (deepstack)   norm.{weight,bias}
  TensorView fc1_w;           // [K, K]                            linear_fc1.weight
  TensorView fc1_b;           // [K]
  TensorView fc2_w;           // [D, K]                            linear_fc2.weight
  TensorView fc2_b;           // [D]

  /// True if any view is non-empty (for gradients: the merger has a trainable parameter).
  bool any() const;
};

/// What backward needs from forward. x is the caller's input view: it must stay alive until backward.
struct PatchMergerStash {
  TensorView x;        // [N, Hv]        merger input
  Tensor mean, rstd;   // [N] or [N/m²] f32 LayerNorm statistics (per patch / per window)
  Tensor h;            // [N/m², K]      LayerNorm output, windows concatenated
  Tensor f1;           // [N/m², K]      fc1 output (GELU input)
  Tensor act;          // [N/m², K]      GELU output
};

class PatchMerger {
 public:
  PatchMerger(const VisionConfig& cfg, bool postshuffle, PatchMergerWeights w, PatchMergerWeights grads);

  /// @brief Checks the weights (present, HF shapes, contiguous f32 or bf16) and the non-empty gradients (same shapes).
  Status check_weights() const;

  /// @param out [N/m², D] written; x [N, Hv], N a multiple of m²
  Status forward(const Context& ctx, TensorView out, TensorView x, PatchMergerStash& st) const;

  /// @brief Accumulates the non-frozen parameter gradients; writes dx.
  /// @param dx   [N, Hv] written, or an empty view when nothing below needs it
  /// @param dout [N/m², D]
  Status backward(const Context& ctx, TensorView dx, TensorView dout, const PatchMergerStash& st) const;

  bool postshuffle() const { return postshuffle_; }

 private:
  VisionConfig cfg_;
  bool postshuffle_ = false;
  PatchMergerWeights w_, g_;
};

}  // namespace vlpar::nn
