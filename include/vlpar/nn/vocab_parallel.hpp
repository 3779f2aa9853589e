#pragma once
// Vocab-parallel embedding, LM head and cross-entropy: the vocab V is split evenly over the tp group, rank r
// holding token ids [r·V/tp, (r+1)·V/tp) (even_shard). Full logits [N_tok, V] never exist anywhere.
//   embedding      : each rank looks up the ids in its range (zero rows elsewhere), region_exit sums over tp
//                    (all-reduce; reduce-scatter to the rank's token slice under SP).
//   cross-entropy  : logits_loc = h · W_locᵀ [N_tok, V/tp]; the row max is all-reduced (max), then Σ exp(z − max)
//                    and the target logit (non-zero only on the rank owning the label) are all-reduced (sum)
//                    in one [2, N_tok] buffer; lse = max + log Σ. Backward is local:
//                    dz = grad·(exp(z − lse) − onehot)/num_valid.
//   LM head        : region_enter (all-gather under SP) → local logits → CE; backward dh = dz·W_loc, partial
//                    over tp until region_enter⁻¹ (all-reduce or reduce-scatter).
// The embedding and the LM head split the vocab the same way, so a tied LM head (tie_word_embeddings) passes the
// embedding table's shard as its weight and the embedding gradient's shard as its gradient: both backwards
// accumulate into it and the gradients add. An empty gradient view freezes the table / head (no gradient, no
// weight-gradient GEMM, no communication for it). The final RMSNorm + LM head + loss as one block: nn/lm_head.hpp.
// Storage f32 (CPU); the per-row math is the embedding and cross-entropy ops' (kernels/embedding.hpp,
// kernels/cross_entropy.hpp: vocab_shard_*, with a VocabBlock), so nothing here loops over tensor data.
// Test: tests/unit/test_shard.cpp (index arithmetic), tests/unit/test_nn_stack.cpp,
// tests/mpi/test_tp_equivalence.cpp.
#include <cstddef>
#include <cstdint>

#include "vlpar/core/context.hpp"
#include "vlpar/core/tensor.hpp"
#include "vlpar/kernels/cross_entropy.hpp"
#include "vlpar/nn/block.hpp"
#include "vlpar/core/shard.hpp"
#include "vlpar/nn/tensor_parallel.hpp"

namespace vlpar::nn {

/// @brief out [N_loc, H] = Σ_tp (table_loc[id − block.begin] for ids in block, else 0), then region_exit.
/// @param table [V/tp, H] this rank's rows;  ids i32/i64 [N_tok], every id in [0, V) (checked)
Status vocab_parallel_embedding_forward(const Context& ctx, const TensorParallel& tp, TensorView out,
                                        TensorView table, TensorView ids, Range block, int64_t vocab);
/// @brief dtable [V/tp, H] += rows of region_exit⁻¹(dout) for the ids in block, skipping overwritten tokens.
/// @param dtable      [V/tp, H] accumulated; an empty view means a frozen table: nothing is done (no communication;
///                    every tp rank must agree)
/// @param dout        [N_loc, H] gradient of the forward's output
/// @param ids         i32/i64 [N_tok], the forward's ids
/// @param overwritten i32/i64 [N_tok] or an empty view: a non-zero entry marks a token whose embedding the caller
///                    replaced after the lookup (Qwen3-VL masked_scatter of visual embeddings, spec §4.1); its row
///                    of dout then adds nothing to dtable. (Zeroing those rows of dout before the call is equivalent.)
/// @param padding_idx an id whose row never gets a gradient (torch's nn.Embedding padding_idx, HF's
///                    text_config.pad_token_id), on whichever rank's block holds it; −1 for none
Status vocab_parallel_embedding_backward(const Context& ctx, const TensorParallel& tp, TensorView dtable,
                                         TensorView dout, TensorView ids, Range block,
                                         TensorView overwritten = TensorView{}, int64_t padding_idx = -1);

/// @brief Mean (over labels != ignore_index) cross-entropy of logits split by vocab over tp.
/// @param lse    [N_tok] f32 written: the full-vocab log-sum-exp of each row (stash for backward)
/// @param logits [N_tok, V/tp] f32, this rank's vocab block `block`
/// @param labels [N_tok] i32/i64 in [0, V) or ignore_index; the same on every tp rank
Result<CrossEntropyResult> vocab_parallel_cross_entropy_forward(const Context& ctx, const TensorParallel& tp,
                                                                TensorView lse, TensorView logits, TensorView labels,
                                                                Range block, int64_t ignore_index);
/// @brief dlogits [N_tok, V/tp] = grad_loss·(softmax − onehot)/num_valid on this rank's block (no communication);
/// zero rows for ignored labels. dlogits may alias logits. tp gives the vocabulary's size (tp blocks).
Status vocab_parallel_cross_entropy_backward(const Context& ctx, const TensorParallel& tp, TensorView dlogits,
                                             TensorView logits, TensorView labels, TensorView lse, Range block,
                                             int64_t ignore_index, int64_t num_valid, float grad_loss);

/// What lm_head_loss_backward needs.
struct LmHeadLossStash {
  Tensor h;       // [N_tok, H]    final hidden states after region entry
  Tensor logits;  // [N_tok, V/tp] f32 (overwritten by dlogits in backward)
  Tensor lse;     // [N_tok] f32
  int64_t num_valid = 0;
};

/// @brief Vocab-parallel LM head and loss: returns the mean loss (the same on every tp rank).
/// @param x [N_loc, H] final normed hidden states; weight [V/tp, H]
Result<CrossEntropyResult> lm_head_loss_forward(const Context& ctx, const TensorParallel& tp, TensorView x,
                                                TensorView weight, TensorView labels, Range block,
                                                int64_t ignore_index, LmHeadLossStash& stash);
/// @brief dx [N_loc, H] written; dweight [V/tp, H] accumulated (empty view: frozen head, its GEMM skipped).
/// Consumes the stash's logits.
Status lm_head_loss_backward(const Context& ctx, const TensorParallel& tp, TensorView dx, TensorView dweight,
                             TensorView weight, TensorView labels, Range block, int64_t ignore_index,
                             LmHeadLossStash& stash, float grad_loss);

}  // namespace vlpar::nn
