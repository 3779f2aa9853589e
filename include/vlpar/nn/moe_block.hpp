#pragma once
// Pre-norm sparse MoE block with its residual (Qwen3-VL-MoE text layer MLP, spec qwen3vl.md §5):
//   h = RMSNorm(x);  logits = h · Wrᵀ;  p = softmax(logits) (fp32);  (w, idx) = top-k(p) (descending, ties to
//   the lower expert id);  w /= Σw (always; norm_topk_prob is ignored, as in HF);
//   out[t] = x[t] + Σ_{k, ascending expert e = idx[t,k]} w[t,k] · ( silu(h[t]·G_e) ⊙ (h[t]·U_e) ) · D_e
// No shared expert, no routed scaling factor. The expert sum starts from 0 and adds experts in ascending id, the
// order of HF v4.57's train-mode loop (index_add_ per hit expert); the residual is added after it.
// Weights use the HF v4.57 on-disk layout, so checkpoints load without reshuffling, applied as x @ W:
//   mlp.gate.weight [E, H], mlp.experts.gate_up_proj [E, H, 2I] (gate = [..., :I], up = [..., I:]),
//   mlp.experts.down_proj [E, I, H].
// Token path (kernels/moe.hpp, nn/expert_dispatch.hpp): router → dispatch plan (stable sort of (token, slot) by
// expert; with expert parallelism also the count exchange) → dispatch h to the experts' rows → grouped GEMM
// gate_up → SwiGLU → grouped GEMM down → combine with the routing weights at the source, ascending expert → + x.
//
// Load-balancing loss (Switch, spec §5): forward adds this layer's probs and top-k counts to a RouterAuxStats
// shared by every MoE layer of the step, so aux = router_aux_loss(stats) = E · Σ_e f_e · P̄_e with f and P̄ means
// over all layers' rows. The model defines the total loss = CE + coef · aux and passes grad_aux = coef · dL/dloss
// to every MoE block's backward, which adds grad_aux · ∂aux/∂logits (through P̄ only) to the router gradient.
// Backward needs the finished statistics: run every layer's forward before the first MoE backward.
// With an expert bias (MoeWeights::expert_bias) the router selects the top-k of p + bias and weighs by p alone.
// Router z-loss: forward adds this layer's mean_t lse_t² to aux->z_sum; backward adds grad_z times its gradient.
// Sequence-level aux (given the sample bounds): forward adds this layer's value to aux->seq_aux_sum, backward its
// gradient times grad_seq_aux.
//
// Gradients: every parameter by hand (router through the renormalised top-k weights and the aux term; an expert
// gets weight gradients only from the rows routed to it, so an unused expert's gradient is untouched). An empty
// gradient view freezes that parameter: its weight-gradient GEMMs are skipped, input gradients still flow.
// Determinism: fixed work items (kernels/moe.hpp tiles, fixed 64-row chunks for the norm weight gradient), no
// float atomics: outputs and gradients are bitwise identical for any ctx.num_threads.
//
// Expert parallelism (ExpertParallel, ep ranks): this rank holds E_l = E / ep experts (ids ep_rank · E_l …; the
// expert weights are [E_l, …] slices of the full [E, …]) and the router whole; its tokens' rows travel to the ranks
// owning their experts and back (all-to-all-v), each expert sees its rows in (source rank, token) order and a token's
// outputs are summed at its source in ascending expert order, so outputs and input gradients equal one rank holding
// every expert bitwise. The ep ranks must hold different tokens (EP folded over data parallelism; tp > 1 needs SP).
// Backward re-dispatches h for the gate_up weight gradient instead of stashing the [N·K, H] rows.
// Expert tensor parallelism (ExpertParallel::etp, spec B6 steps 7 and 11): each expert's SwiGLU width I is split
// over the etp ranks (this rank's gate_up [E_l, H, 2I/etp] = its columns of gate, then of up; down [E_l, I/etp, H]),
// which hold different tokens: after the dispatch every etp rank gathers the group's rows of its local experts
// ([expert][etp rank] order), runs its width on all of them, and the down projection's partial sums go back to
// the rows' rank, added in etp-rank order (reduce_scatter_expert_rows); so do the routing-weight gradient and the
// input gradient in backward. The expert weight gradients are then whole for this rank's width.
// Under tensor parallelism without SP the residual stream is replicated, so the block runs replicated
// on every tp rank (same inputs, same weights, same gradients).
// Sequence parallelism (spec B7.1): x and out are this tp rank's N / tp tokens, which it routes itself (no
// collective over tp on the token path). The step-global quantities are made whole over tp: each layer's router
// statistics (counts, probability sums, rows, Σ lse²) are gathered and added in tp-rank order, so every tp rank
// holds the same aux loss; the z-loss divides by all N tokens; the sequence-level aux gathers the layer's probs and
// ids over tp (a sample spans ranks). The router and norm weight gradients are summed over tp here (they are
// replicated parameters); the expert weight gradients stay per-rank parts of one sum, which the optimizer adds over
// the expert-data-parallel group (it spans the tp ranks: parallel::OptimizerGroups).
// Non-finite router logits (a NaN input row, say) are a kNonFinite error naming the token, agreed (before any
// collective) over the tp group under SP, the etp group and the ep group in that order, so every rank of them
// returns an error and none waits, provided the ep groups nest with the tp groups (ParallelConfig::validate
// requires it under SP); the trainer skips such a step as it skips a non-finite loss (pipeline stages poison the
// micro-batch: examples/qwen3vl/pipeline_stage.hpp).
// Activations in cfg.activation (f32 or bf16; router logits, probabilities and weights f32), weights f32 or bf16,
// gradients and the expert bias f32. Test: tests/unit/test_moe.cpp (./build/cpu/tests/test_moe).
#include <cstddef>
#include <cstdint>

#include "vlpar/core/context.hpp"
#include "vlpar/core/tensor.hpp"
#include "vlpar/kernels/moe.hpp"
#include "vlpar/kernels/router.hpp"
#include "vlpar/nn/expert_dispatch.hpp"
#include "vlpar/nn/block.hpp"
#include "vlpar/nn/config.hpp"
#include "vlpar/nn/tensor_parallel.hpp"

namespace vlpar::nn {

/// Sizes of one sparse MoE MLP (HF Qwen3VLMoeTextConfig: num_experts, num_experts_per_tok, moe_intermediate_size).
struct MoeConfig {
  int num_experts = 0;       // E
  int top_k = 0;             // K, 1 <= K <= E
  int64_t intermediate = 0;  // I, per-expert SwiGLU width
  double capacity_factor = 0;  // > 0: each expert takes at most ⌈factor · N·K / E⌉ of each rank's rows, the rest
                               // are dropped (DispatchOptions::capacity_factor); 0: dropless

  /// @brief "top_k 5 exceeds num_experts 4", ...
  Status validate() const;
};

/// Weights (or gradients, same shapes; an empty gradient view = frozen) of one MoE block, HF v4.57 layout.
/// E_l = E / ep local experts (all E without expert parallelism).
struct MoeWeights {
  TensorView norm;     // [H]            post_attention_layernorm.weight
  TensorView router;   // [E, H]         mlp.gate.weight (logits = h · routerᵀ)
  TensorView gate_up;  // [E_l, H, 2I]   mlp.experts.gate_up_proj: h @ gate_up[e] = [gate | up] (etp: [E_l, H,
                       //                2I/etp], this rank's gate columns then the same up columns)
  TensorView down;     // [E_l, I, H]    mlp.experts.down_proj: act @ down[e] (etp: [E_l, I/etp, H], those rows)
  TensorView expert_bias = {};  // [E] f32 or empty: the aux-loss-free selection bias (kernels/router.hpp; no gradient,
                           // so always empty in the gradient struct)
};

/// What backward needs from forward. x is the caller's input view: it must stay alive until backward.
/// R = the rows this rank's experts process (N·K without expert parallelism; nn/expert_dispatch.hpp).
/// N = the rows of this rank (N / tp under sequence parallelism).
struct MoeStash {
  TensorView x;             // [N, H]    block input
  Tensor rstd;              // [N] f32   RMSNorm statistics
  Tensor h;                 // [N, H]    normed input
  Tensor probs;             // [N, E]    router softmax
  Tensor lse;               // [N]       logsumexp of the router logits (the z-loss)
  TensorView cu_seqlens;    // [B + 1]   i32 sample bounds, when forward had them (the sequence-level aux)
  Tensor weights;           // [N, K]    renormalised top-k weights
  Tensor indices;           // [N, K]    i32 top-k expert ids, descending probability
  ExpertDispatch dispatch;  //           where each (token, slot) row goes and comes back
  ExpertTpRows etp;         //           the rows gathered over the expert-tensor-parallel group (R_g of them;
                            //           R_g = R without it)
  Tensor row_weights;       // [R_g, 1]  the routing weight of each expert row
  Tensor gu;                // [R_g, 2I/etp] expert gate | up pre-activations (this etp rank's width)
  Tensor act;               // [R_g, I/etp]  silu(gate) ⊙ up
};

/// The router terms a MoE block's backward adds to its router gradient, each as dLoss/d(term) (0: term off).
struct RouterLossGrads {
  const RouterAuxStats* stats = nullptr;  // the finished statistics of every MoE layer (needed when aux != 0)
  float aux = 0.f;      // HF's pooled load-balancing loss
  float z = 0.f;        // router z-loss
  float seq_aux = 0.f;  // sequence-level aux (needs forward's cu_seqlens)
};

class MoeBlock {
 public:
  /// Parameters as offsets from first_param: norm 0, router 1, gate_up 2, down 3 (backward reports them ready in
  /// the reverse order).
  static constexpr size_t kNumParams = 4;

  MoeBlock(const TransformerConfig& cfg, const MoeConfig& moe, TensorParallel tp, MoeWeights w, MoeWeights grads,
           size_t first_param, ExpertParallel ep = {});

  /// @param out [N_loc, H] written (x + MoE(RMSNorm(x))); x [N_loc, H]; N = num_tokens of the micro-batch,
  ///            N_loc = N / tp under sequence parallelism, else N
  /// @param aux if not null, this layer's router statistics are added to it (the load-balancing losses)
  /// @param cu_seqlens [B + 1] i32 host sample bounds or empty: with aux, this layer's sequence-level aux is added
  ///                   to aux->seq_aux_sum (the view must outlive backward)
  Status forward(const Context& ctx, TensorView out, TensorView x, int64_t num_tokens, MoeStash& stash,
                 RouterAuxStats* aux = nullptr, TensorView cu_seqlens = {}) const;
  /// @brief dx [N_loc, H] written (= dout + MoE path); gradients accumulated; ready(down, gate_up, router, norm).
  /// @param losses the router terms (each coefficient · dLoss/dloss; default: none)
  Status backward(const Context& ctx, TensorView dx, TensorView dout, int64_t num_tokens, const MoeStash& stash,
                  const GradReadyFn& ready, const RouterLossGrads& losses = {}) const;

  const MoeConfig& moe_config() const { return moe_; }
  const ExpertParallel& expert_parallel() const { return ep_; }

 private:
  Status check(const char* name, int64_t num_tokens) const;
  Status router_grads(const Context& ctx, TensorView dh, TensorView dweights, const MoeStash& st,
                      const RouterLossGrads& losses, int64_t num_tokens) const;
  Status add_router_stats(const Context& ctx, RouterAuxStats& aux, const MoeStash& st, int64_t num_tokens) const;
  Status seq_aux_grad(const Context& ctx, TensorView dlogits, const MoeStash& st, float grad) const;

  TransformerConfig cfg_;
  MoeConfig moe_;
  TensorParallel tp_;
  ExpertParallel ep_;
  MoeWeights w_, g_;
  size_t first_param_ = 0;
};

}  // namespace vlpar::nn
