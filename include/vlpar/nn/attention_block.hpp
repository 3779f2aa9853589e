#pragma once
// Pre-norm self-attention block with its residual, sharded by heads over the tp group:
//   out = x + o_proj( attention( rotary(q_proj(h)), rotary(k_proj(h)), v_proj(h) ) ),  h = RMSNorm(x)
// q/k/v are column-parallel (each rank computes its heads), o is row-parallel (partial sums over the heads,
// closed by region_exit). GQA: rank r holds query heads [r·heads/tp, (r+1)·heads/tp) and the kv heads they
// read (kv_head_shard); when tp > H_kv each kv head is replicated on tp/H_kv ranks and backward sums its weight
// gradient over the tp group. Under SP the RMSNorm runs on the rank's token slice and its weight gradient is
// summed over the tp group too. Attention is varlen causal over the packed batch (cu_seqlens), 1D rotary.
// Storage f32 (CPU). Test: tests/unit/test_nn_stack.cpp, tests/mpi/test_tp_equivalence.cpp.
#include <cstddef>

#include "vlpar/core/context.hpp"
#include "vlpar/core/tensor.hpp"
#include "vlpar/nn/block.hpp"
#include "vlpar/nn/config.hpp"
#include "vlpar/nn/tensor_parallel.hpp"

namespace vlpar::nn {

/// Weights (or their gradients, same shapes) of one attention block on one rank; hq = heads/tp,
/// hkv = max(1, H_kv/tp).
struct AttentionWeights {
  TensorView norm;  // [H]            input RMSNorm weight, replicated
  TensorView q;     // [hq·D, H]      rows of the full [heads·D, H]
  TensorView k;     // [hkv·D, H]     rows of the full [H_kv·D, H]
  TensorView v;     // [hkv·D, H]
  TensorView o;     // [H, hq·D]      columns of the full [H, heads·D]
};

/// What backward needs from forward. x is the caller's input view: it must stay alive until backward.
struct AttentionStash {
  TensorView x;  // [N_loc, H]      block input
  Tensor rstd;   // [N_loc] f32     RMSNorm statistics
  Tensor h;      // [N_tok, H]      normed input after region entry (all tokens, also under SP)
  Tensor q;      // [N_tok, hq, D]  after rotary
  Tensor k;      // [N_tok, hkv, D] after rotary
  Tensor v;      // [N_tok, hkv, D]
  Tensor attn;   // [N_tok, hq, D]  attention output
  Tensor lse;    // [hq, N_tok] f32
};

class AttentionBlock {
 public:
  /// @param first_param model-wide index of `norm`; backward reports q, k, v, o as first_param + 1..4.
  AttentionBlock(const TransformerConfig& cfg, TensorParallel tp, AttentionWeights w, AttentionWeights grads,
                 size_t first_param);

  /// @param out [N_loc, H] written; x [N_loc, H]; N_loc = tp.local_tokens(seq.num_tokens())
  Status forward(const Context& ctx, TensorView out, TensorView x, const PackedSeq& seq, AttentionStash& stash) const;
  /// @brief dx = dout + ∂(attention path)/∂x; parameter gradients accumulated; calls ready(o, v, k, q, norm) in
  /// that order as each becomes final. dx [N_loc, H] written (may not alias dout).
  Status backward(const Context& ctx, TensorView dx, TensorView dout, const PackedSeq& seq,
                  const AttentionStash& stash, const GradReadyFn& ready) const;

  int local_heads() const { return hq_; }
  int local_kv_heads() const { return hkv_; }

 private:
  TransformerConfig cfg_;
  TensorParallel tp_;
  AttentionWeights w_, g_;
  size_t first_param_ = 0;
  int hq_ = 0, hkv_ = 0;
  int64_t kv_begin_ = 0;  // first kv head this rank holds
};

}  // namespace vlpar::nn
