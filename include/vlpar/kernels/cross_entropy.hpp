#pragma once
// Cross-entropy over a large vocabulary with ignore_index, mean-over-valid or sum reduction.
// Labels are already aligned with rows (row n predicts labels[n]); shift HF-style causal labels with
// shift_labels_for_causal_lm() first.
//   cross_entropy_forward/backward : over given logits [N, V] (any float dtype), fp32 per-row math, no
//                                    [N, V] fp32 temporary.
//   linear_cross_entropy           : fused LM head + loss + gradients: logits = hidden · Wᵀ are produced and
//                                    consumed in token chunks, so memory is chunk·V fp32, never N·V.
//   vocab_shard_*                    : the forward when the logits hold one block of the vocabulary (desc.block,
//                                    vocab parallelism): row max, then Σ exp and the target logit, then lse and
//                                    the loss, with the caller's reductions over the vocab group in between
//                                    (nn/vocab_parallel.hpp); cross_entropy_backward takes the same block.
// Rows whose label is ignore_index contribute nothing; with zero valid rows the mean loss is 0 (HF gives NaN).
#include <cstdint>

#include "vlpar/core/context.hpp"
#include "vlpar/core/tensor.hpp"
#include "vlpar/kernels/vocab_block.hpp"

namespace vlpar {

enum class Reduction : uint8_t { kMean, kSum };

struct CrossEntropyDesc {
  int64_t ignore_index = -100;
  Reduction reduction = Reduction::kMean;
  int64_t chunk_tokens = 0;  // linear_cross_entropy: tokens per chunk; 0 picks ≤ 32 MiB of fp32 logits
  VocabBlock block;          // the vocab ids the logits hold (default: all; a block only in backward and vocab_shard_*)
};

struct CrossEntropyResult {
  double loss = 0.0;        // reduced loss
  int64_t num_valid = 0;    // rows whose label != ignore_index
};

/// @param lse    [N] f32 written (stash for backward; empty view: not stashed)
/// @param logits [N, V]
/// @param labels [N] i32 or i64, each in [0, V) or == ignore_index
Result<CrossEntropyResult> cross_entropy_forward(const Context& ctx, TensorView lse, TensorView logits,
                                                 TensorView labels, const CrossEntropyDesc& desc);
/// @brief dlogits = grad_loss · (softmax(logits) − onehot(label)) / norm, norm = num_valid (mean) or 1 (sum);
/// zero on ignored rows. dlogits may alias logits.
Status cross_entropy_backward(const Context& ctx, TensorView dlogits, TensorView logits, TensorView labels,
                              TensorView lse, const CrossEntropyDesc& desc, int64_t num_valid, float grad_loss);

/// @brief row_max [N] f32 = the max of each row of this block's logits [N, V_blk].
Status vocab_shard_row_max(const Context& ctx, TensorView row_max, TensorView logits);
/// @brief sums [2, N] f32: row 0 = Σ_j exp(logits[n, j] − row_max[n]) over the block, row 1 = the logit of
/// labels[n] when desc.block holds it, else 0. row_max is the max over the whole vocabulary (already reduced).
Status vocab_shard_sums(const Context& ctx, TensorView sums, TensorView logits, TensorView row_max,
                        TensorView labels, const CrossEntropyDesc& desc);
/// @brief lse [N] f32 = row_max + log sums[0] and the loss Σ_valid (lse − sums[1]) / norm, with row_max and sums
/// reduced over the whole vocabulary (the same result on every rank: rows in order, fp64 sum).
Result<CrossEntropyResult> vocab_shard_loss(const Context& ctx, TensorView lse, TensorView row_max, TensorView sums,
                                            TensorView labels, const CrossEntropyDesc& desc);

/// @brief Fused chunked LM-head cross-entropy, forward and backward in one pass.
/// @param dhidden [N, Hd] written (empty view: skip)
/// @param dweight [V, Hd] accumulated (empty view: frozen head)
/// @param hidden  [N, Hd]
/// @param weight  [V, Hd]
Result<CrossEntropyResult> linear_cross_entropy(const Context& ctx, TensorView dhidden, TensorView dweight,
                                                TensorView hidden, TensorView weight, TensorView labels,
                                                const CrossEntropyDesc& desc, float grad_loss);

/// @brief HF ForCausalLMLoss shift: out[s] = labels[s+1] within each segment of cu_seqlens, ignore_index
/// at each segment's last position (so packed samples never predict across a boundary).
Status shift_labels_for_causal_lm(TensorView out, TensorView labels, TensorView cu_seqlens, int64_t ignore_index);

}  // namespace vlpar
