#pragma once
// Model FLOPs of a Qwen3-VL training step, for MFU (spec qwen3vl.md §8). Conventions:
//   1 multiply-add = 2 FLOPs; training = 3 × forward (backward = 2 × forward; recompute not counted);
//   attention at the full sample length S (no causal halving; torchtitan / PaLM), 4·nH·hd·S per token per layer
//   (QKᵀ and PV); the vision attention over the patch's segment S_seg = h·w (one image, or one video frame);
//   norms, activations, softmax, rotary, the router softmax and the embedding lookup are free.
// Language model, per token:  2·N_act + 2·H·V + 4·L·nH·hd·S
//   N_act = Σ_layers [ H·nH·hd + 2·H·nKV·hd + nH·hd·H + MLP_act ],
//   MLP_act = 3·H·I (dense layer) or H·E + k·3·H·I_moe (MoE layer: router + k experts), per is_moe_layer(l).
// Vision, per patch:  2·(C·Tp·P²)·Hv + depth·(8·Hv² + 4·Hv·Iv) + depth·4·Hv·S_seg
//                     + (1 + n_deepstack)·(2·(m²Hv)² + 2·m²Hv·D)/m²     (mergers run once per m² patches)
// Test: examples/qwen3vl/tests/test_flops.cpp (spec §8 table for every preset, a hand-computed tiny step).
#include <cstdint>
#include <span>

#include "config.hpp"
#include "vlpar/kernels/pos_embed.hpp"  // VisionGrid

namespace qwen3vl {

/// FLOPs that grow linearly with a context length: a + b·S.
struct LinearFlops {
  double a = 0;  // independent of S
  double b = 0;  // per unit of S
  double at(double s) const { return a + b * s; }
};

/// @brief Decoder layer l's share of N_act: attention projections plus its dense MLP or router + top-k experts.
int64_t text_layer_active_params(const Config& c, int l);

/// @brief N_act: the non-embedding weights one token multiplies through in the language model (attention
/// projections and the dense MLP or router + top-k experts of every layer; norms excluded).
int64_t text_active_params(const Config& c);

/// @brief Forward FLOPs of one LLM token attending to a context of S tokens, LM head included:
/// a = 2·N_act + 2·H·V, b = 4·L·nH·hd.
LinearFlops text_fwd_flops_per_token(const Config& c);

/// @brief Forward FLOPs of one ViT patch in a segment (image or video frame) of S_seg = h·w patches, its share of
/// the final and deepstack mergers included.
LinearFlops vision_fwd_flops_per_patch(const Config& c);

/// Forward FLOPs of one step (one or more packed micro-batches), split by where they are spent.
struct StepFlops {
  double vision_fwd = 0;   // ViT blocks, patch embedding, final and deepstack mergers
  double llm_fwd = 0;      // decoder layers (projections, MLP or experts, attention)
  double lm_head_fwd = 0;  // 2·H·V per token
  int64_t tokens = 0;      // Σ sample lengths
  int64_t patches = 0;     // Σ t·h·w over the grids
  double total_fwd() const { return vision_fwd + llm_fwd + lm_head_fwd; }
  /// Forward + backward = 3 × forward.
  double train() const { return 3.0 * total_fwd(); }
};

/// @brief Model FLOPs of a step.
/// @param sample_lengths tokens of each packed sample (attention spans exactly one sample), vision pads included
/// @param grids          every image and video of the step, (t, h, w) in patch units: each gives t attention
///                       segments of h·w patches (video frames and, as HF's vision cu_seqlens do, images too)
StepFlops count_flops(const Config& c, std::span<const int64_t> sample_lengths,
                      std::span<const vlpar::VisionGrid> grids);

}  // namespace qwen3vl
