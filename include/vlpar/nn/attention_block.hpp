#pragma once
// Pre-norm self-attention block with its residual, sharded by heads over the tp group:
//   out = x + o_proj( attention( rope(qn(q_proj(h))), rope(kn(k_proj(h))), v_proj(h) ) ),  h = RMSNorm(x)
// qn/kn are the Qwen3 q/k norms (cfg.qk_norm; identity otherwise): RMSNorm over D of every head, eps = cfg.eps,
// one weight [D] shared by all q heads and one by all k heads, applied before the rotary (spec qwen3vl.md §4.2).
// rope is 1D rotary or interleaved MRoPE (cfg.rope, positions [N_tok] or [3, N_tok]: nn/block.hpp).
// q/k/v are column-parallel (each rank computes its heads), o is row-parallel (partial sums over the heads,
// closed by region_exit). GQA: rank r holds query heads [r·heads/tp, (r+1)·heads/tp) and the kv heads they
// read (kv_head_shard); when tp > H_kv each kv head is replicated on tp/H_kv ranks and backward sums its weight
// gradient over the tp group. Replicated weights whose gradient is a partial sum over tp are all-reduced inside
// backward: the input RMSNorm under SP (each rank saw its tokens), q_norm/k_norm whenever tp > 1 (each rank saw
// its heads). Attention is varlen causal over the packed batch (cu_seqlens).
// An empty gradient view freezes that parameter (nn/block.hpp). Activations in cfg.activation (f32 or bf16), weights
// f32 or bf16, gradients f32; decoding (forward_decode, the KV cache) in f32.
// Incremental decoding (fill_kv_cache, forward_decode) runs the same ops over a KvCache (nn/kv_cache.hpp).
// Test: tests/unit/test_nn_stack.cpp, tests/mpi/test_tp_equivalence.cpp; decoding: examples/qwen3vl/tests/
// test_generate.cpp.
#include <cstddef>

#include "vlpar/core/context.hpp"
#include "vlpar/core/tensor.hpp"
#include "vlpar/nn/block.hpp"
#include "vlpar/nn/config.hpp"
#include "vlpar/nn/tensor_parallel.hpp"

namespace vlpar::nn {

/// Weights (or their gradients, same shapes; an empty gradient view = frozen) of one attention block on one rank;
/// hq = heads/tp, hkv = max(1, H_kv/tp).
struct AttentionWeights {
  TensorView norm;    // [H]            input RMSNorm weight, replicated
  TensorView q;       // [hq·D, H]      rows of the full [heads·D, H]
  TensorView k;       // [hkv·D, H]     rows of the full [H_kv·D, H]
  TensorView v;       // [hkv·D, H]
  TensorView o;       // [H, hq·D]      columns of the full [H, heads·D]
  TensorView q_norm;  // [D]            cfg.qk_norm only (else unused), replicated
  TensorView k_norm;  // [D]            cfg.qk_norm only (else unused), replicated
};

/// What backward needs from forward. x is the caller's input view: it must stay alive until backward.
struct AttentionStash {
  TensorView x;   // [N_loc, H]      block input
  Tensor rstd;    // [N_loc] f32     RMSNorm statistics
  Tensor h;       // [N_tok, H]      normed input after region entry (all tokens, also under SP)
  Tensor q;       // [N_tok, hq, D]  after q norm and rotary
  Tensor k;       // [N_tok, hkv, D] after k norm and rotary
  Tensor v;       // [N_tok, hkv, D]
  Tensor attn;    // [N_tok, hq, D]  attention output
  Tensor lse;     // [hq, N_tok] f32
  Tensor q_raw;   // [N_tok, hq, D]  cfg.qk_norm only: q_proj output (the q norm's input)
  Tensor k_raw;   // [N_tok, hkv, D] cfg.qk_norm only: k_proj output
  Tensor q_rstd;  // [N_tok·hq] f32  cfg.qk_norm only: q norm statistics, one per (token, head)
  Tensor k_rstd;  // [N_tok·hkv] f32 cfg.qk_norm only
};

class AttentionBlock {
 public:
  /// Model-wide parameter index of each weight, as offsets from first_param (also the reverse of the order in
  /// which backward reports them ready). Without qk_norm: norm, q, k, v, o = 0..4. With qk_norm: norm, q, k, v,
  /// q_norm, k_norm, o = 0..6.
  static size_t num_params(const TransformerConfig& cfg) { return cfg.qk_norm ? 7 : 5; }
  static size_t o_offset(const TransformerConfig& cfg) { return cfg.qk_norm ? 6 : 4; }
  static constexpr size_t kQNormOffset = 4, kKNormOffset = 5;

  /// @param first_param model-wide index of `norm` (see num_params for the others).
  AttentionBlock(const TransformerConfig& cfg, TensorParallel tp, AttentionWeights w, AttentionWeights grads,
                 size_t first_param);

  /// @param out [N_loc, H] written; x [N_loc, H]; N_loc = tp.local_tokens(seq.num_tokens())
  Status forward(const Context& ctx, TensorView out, TensorView x, const PackedSeq& seq, AttentionStash& stash) const;
  /// @brief dx = dout + ∂(attention path)/∂x; parameter gradients accumulated (frozen ones skipped); calls
  /// ready(o, [k_norm, q_norm,] v, k, q, norm) in that order as each becomes final (never for a frozen one).
  /// dx [N_loc, H] written (may not alias dout).
  Status backward(const Context& ctx, TensorView dx, TensorView dout, const PackedSeq& seq,
                  const AttentionStash& stash, const GradReadyFn& ready) const;

  // ---- incremental decoding (inference: no stash, no gradients) --------------------------------------------
  /// @brief Writes cache rows [row0, row0 + n) with the keys and values of n tokens: x [n, H] is the block input,
  /// positions [n] or [3, n]; k = rotary(k_norm(RMSNorm(x)·Wkᵀ)) and v = RMSNorm(x)·Wvᵀ, as in forward (the
  /// prefill after a full forward, which keeps every layer's input). k_cache, v_cache: [capacity, hkv, D] f32.
  Status fill_kv_cache(const Context& ctx, TensorView x, TensorView positions, TensorView k_cache, TensorView v_cache,
                       int64_t row0) const;
  /// @brief n new tokens at cache rows [row0, row0 + n): writes their keys and values, then out [n, H] = x +
  /// o_proj(attention of each over cache rows [0, its row]) (kv_cache_attention_forward). Ops touching fewer than
  /// kDecodeParallelWork elements run on one thread (a parallel op costs more than a one-token op saves).
  /// Tensor parallelism is not supported here (kNotSupported).
  Status forward_decode(const Context& ctx, TensorView out, TensorView x, TensorView positions, TensorView k_cache,
                        TensorView v_cache, int64_t row0) const;
  static constexpr int64_t kDecodeParallelWork = int64_t(1) << 22;

  int local_heads() const { return hq_; }
  int local_kv_heads() const { return hkv_; }

 private:
  Status projection_weight_grad(const Context& ctx, TensorView dw, TensorView dy, const Tensor& dy_owner,
                                const Tensor& h, bool kv) const;

  TransformerConfig cfg_;
  TensorParallel tp_;
  AttentionWeights w_, g_;
  size_t first_param_ = 0;
  int hq_ = 0, hkv_ = 0;
  int64_t kv_begin_ = 0;  // first kv head this rank holds
};

}  // namespace vlpar::nn
