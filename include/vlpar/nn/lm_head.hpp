#pragma once
// The end of a decoder: final RMSNorm → vocab-parallel LM head → cross-entropy, as one block with an explicit
// forward (returns the loss) and backward (returns the gradient of the last layer's output):
//   loss = mean_{n: labels[n] != ignore_index} CE( RMSNorm(x)[n] · Wᵀ, labels[n] )
// labels are aligned with rows: row n predicts labels[n]. For HF causal-LM labels, shift them per sample first
// (kernels/cross_entropy.hpp shift_labels_for_causal_lm: ignore_index at each sample's last token).
// Tensor parallelism: W is split by vocab rows over tp (vocab_parallel.hpp; full logits never exist); under SP
// the RMSNorm runs on the rank's token slice and its weight gradient is summed over tp.
// Tied embeddings (cfg.tie_word_embeddings): pass the embedding table's shard as `weight` and the embedding
// gradient's shard as its gradient; the head's dW is accumulated into it (the embedding backward adds its own),
// and the head does not report the weight ready (the embedding's owner does, after the embedding backward).
// An empty gradient view freezes the norm or the head (nn/block.hpp).
// Used by DecoderModel and by models that compose the nn blocks themselves (examples/qwen3vl).
// Test: tests/unit/test_nn_stack.cpp (tied and untied, vs the fp64 reference), tests/mpi/test_tp_equivalence.cpp.
#include <cstddef>

#include "vlpar/core/context.hpp"
#include "vlpar/core/tensor.hpp"
#include "vlpar/kernels/cross_entropy.hpp"
#include "vlpar/nn/block.hpp"
#include "vlpar/nn/config.hpp"
#include "vlpar/core/shard.hpp"
#include "vlpar/nn/tensor_parallel.hpp"
#include "vlpar/nn/vocab_parallel.hpp"

namespace vlpar::nn {

/// Weights (or gradients; an empty gradient view = frozen) of the final norm and LM head on one rank.
struct LmHeadWeights {
  TensorView norm;    // [H]        final RMSNorm weight (model.norm.weight), replicated
  TensorView weight;  // [V/tp, H]  lm_head.weight rows of this rank's vocab block (tied: embed_tokens' rows)
};

/// What backward needs from forward. x is the caller's input view: it must stay alive until backward.
struct LmHeadStash {
  TensorView x;          // [N_loc, H] last layer's output
  Tensor rstd;           // [N_loc] f32
  Tensor hn;             // [N_loc, H] final RMSNorm output
  LmHeadLossStash loss;  // gathered hidden states, local logits, lse, num_valid
};

class LmHead {
 public:
  /// @param norm_param model-wide index of the final norm weight; the LM head weight is norm_param + 1 (reported
  /// only when untied).
  LmHead(const TransformerConfig& cfg, TensorParallel tp, LmHeadWeights w, LmHeadWeights grads, size_t norm_param);

  /// @brief The mean loss over labels != cfg.ignore_index (the same value on every tp rank).
  /// @param x      [N_loc, H] last layer's output; N_loc = tp.local_tokens(N_tok)
  /// @param labels i32/i64 [N_tok] (every tp rank holds all of them), each in [0, V) or cfg.ignore_index
  Result<CrossEntropyResult> forward(const Context& ctx, TensorView x, TensorView labels, LmHeadStash& stash) const;
  /// @brief dx [N_loc, H] written = ∂(grad_loss · loss)/∂x; gradients accumulated; ready(weight) (untied only),
  /// then ready(norm). Consumes the stash's logits.
  Status backward(const Context& ctx, TensorView dx, TensorView labels, LmHeadStash& stash, float grad_loss,
                  const GradReadyFn& ready) const;

  /// @brief Number of model-wide parameter indices this block owns: norm and, untied, the head weight.
  static size_t num_params(const TransformerConfig& cfg) { return cfg.tie_word_embeddings ? 1 : 2; }

 private:
  TransformerConfig cfg_;
  TensorParallel tp_;
  LmHeadWeights w_, g_;
  size_t norm_param_ = 0;
  Range vocab_block_;
};

}  // namespace vlpar::nn
