#pragma once
// Typed configuration of the decoder-only transformer blocks in nn/ (STYLE §25: one struct per component,
// validate() explains a conflict in one sentence). Sizes use the STYLE §19 vocabulary:
//   H = hidden, heads = query heads, kv_heads = H_kv, D = head_dim, I = intermediate, V = vocab.
// The defaults describe a Llama-style decoder (1D rotary, no q/k norm, untied head); Qwen3-VL's language model
// (spec qwen3vl.md §4) sets qk_norm = true, rope = kMRoPE with mrope_section {24, 20, 20} and, for 2B/4B,
// tie_word_embeddings = true.
// Test: tests/unit/test_shard.cpp (validation messages), tests/unit/test_nn_stack.cpp.
#include <array>
#include <cstdint>

#include "vlpar/core/dtype.hpp"
#include "vlpar/core/status.hpp"

namespace vlpar::nn {

/// How the attention block rotates q and k (kernels/rotary_math.hpp has the exact angle conventions).
enum class RopeKind : uint8_t {
  k1D = 0,     // θ_j = pos · inv_freq(j); positions [N_tok]
  kMRoPE = 1,  // Qwen3-VL interleaved MRoPE (spec §4.4): θ_j = pos[axis(j)] · inv_freq(j), axis ∈ {T, H, W} by
               // j mod 3 and mrope_section; positions [3, N_tok] (rows T, H, W), or [N_tok] = three equal rows
};

struct TransformerConfig {
  int64_t hidden = 0;        // H
  int heads = 0;             // query heads
  int kv_heads = 0;          // H_kv (GQA); divides heads
  int head_dim = 0;          // D (even: rotary pairs j and j + D/2)
  int64_t intermediate = 0;  // I, SwiGLU width
  int64_t vocab = 0;         // V
  int num_layers = 2;
  float eps = 1e-6f;             // every text RMSNorm's epsilon (input/post-attention/final norms, q/k norm)
  float rope_theta = 10000.f;    // rotary base (Qwen3-VL: 5e6)
  float init_std = 0.02f;        // std of the normal init of every projection, embedding and LM head
  int64_t ignore_index = -100;   // label value that contributes nothing to the loss
  /// Qwen3: RMSNorm over head_dim of every q head and every k head, after the projections and before rotary;
  /// one weight [D] shared by all q heads (q_norm) and one by all k heads (k_norm).
  bool qk_norm = false;
  RopeKind rope = RopeKind::k1D;
  /// kMRoPE only: frequencies driven by (T, H, W). Only H and W are read (j ≡ 1 mod 3 and j < 3·sec[1] is H,
  /// j ≡ 2 mod 3 and j < 3·sec[2] is W, every other j is T); by convention Σ = D/2 (Qwen3-VL: {24, 20, 20}).
  std::array<int, 3> mrope_section = {24, 20, 20};
  /// The LM head weight IS the embedding table (one parameter; both uses add their gradients into it).
  bool tie_word_embeddings = false;
  /// Activations, their gradients and the stashes: f32 or bf16 (DESIGN §6). Parameters may be stored in either
  /// (the blocks check each weight's dtype, the ops accumulate in f32); parameter gradients are always f32.
  DType activation = DType::kF32;

  /// @brief Checks the sizes themselves ("kv_heads 3 does not divide heads 4").
  Status validate() const;
  /// @brief Checks that tensor parallelism of size tp can shard this model ("tp=3 does not divide 4 heads").
  Status validate_tp(int tp) const;
};

}  // namespace vlpar::nn
