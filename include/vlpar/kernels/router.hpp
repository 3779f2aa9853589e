#pragma once
// MoE router (spec §5): p = softmax(logits) in fp32; (w, idx) = top-k(p) in descending order, ties to the
// lower expert index; w /= Σw (always renormalised). Plus the Switch-style load-balancing loss
//   aux = E · Σ_e f_e · P̄_e,  f_e = (# (row, slot) assignments to e) / R,  P̄_e = mean_rows p[:, e]
// over all R rows of every MoE layer (RouterAuxStats accumulates layers, then one finalisation).
// The gradient of aux flows through P̄ only (the counts are constants).
// Aux-loss-free balancing (DeepSeek-V3; Megatron --moe-router-enable-expert-bias, spec B8): an fp32 expert bias b
// [E] steers the selection only, top-k of p + b, while the weights stay p renormalised over the chosen experts (so
// the backward is unchanged); after each optimizer step b_e += u · sign(mean load − load_e) over the global batch's
// assignment counts (router_bias_update), no gradient.
// Router z-loss (ST-MoE; Megatron --moe-z-loss-coeff, spec B8): z = Σ over MoE layers of mean_t lse_t², lse_t =
// logsumexp of token t's logits (router_forward writes it), pooled in RouterAuxStats::z_sum; its gradient
// ∂/∂logits[t, e] = 2 · lse_t · p[t, e] / N per layer (router_z_backward).
#include <cstdint>
#include <span>
#include <vector>

#include "vlpar/core/context.hpp"
#include "vlpar/core/tensor.hpp"

namespace vlpar {

struct RouterDesc {
  int num_experts = 0;  // E
  int top_k = 0;        // K ≤ E
};

/// @param weights [T, K] f32 written, renormalised top-k probabilities
/// @param indices [T, K] i32 written, expert ids in descending probability
/// @param probs   [T, E] f32 written, full softmax (stash for backward and aux)
/// @param logits  [T, E] any float dtype
/// @param expert_bias [E] f32, finite (empty: none): the selection ranks p + bias, ties to the lower expert id
/// @param lse     [T] f32 written unless empty: logsumexp of each row of logits (the z-loss)
Status router_forward(const Context& ctx, TensorView weights, TensorView indices, TensorView probs,
                      TensorView logits, const RouterDesc& desc, TensorView expert_bias = {}, TensorView lse = {});

/// @brief The aux-loss-free bias step: bias[e] += rate · sign(mean(load) − load[e]) (sign 0 = no change), in f32
/// on the host. `load` [E] = assignments per expert over the global batch (the same numbers on every rank, so the
/// bias stays identical everywhere).
Status router_bias_update(TensorView bias, std::span<const double> load, float rate);

/// @brief Backpropagates dweights [T, K] through renormalisation, gather and softmax.
/// @param dlogits [T, E] f32 written
Status router_backward(const Context& ctx, TensorView dlogits, TensorView dweights, TensorView probs,
                       TensorView indices, TensorView weights, const RouterDesc& desc);

/// Per-expert sums over the rows of every MoE layer seen so far.
struct RouterAuxStats {
  std::vector<double> counts;    // [E] assignments per expert
  std::vector<double> prob_sum;  // [E] Σ_rows p[:, e]
  int64_t rows = 0;              // R
  int top_k = 0;
  double z_sum = 0;              // Σ over the layers of mean_t lse_t² (the router z-loss), added by the caller
  double seq_aux_sum = 0;        // Σ over the layers of router_seq_aux_loss, added by the caller
};

/// @brief Adds one layer's probs [T, E] and indices [T, K] to the statistics (stats sized on first use).
Status router_aux_accumulate(RouterAuxStats& stats, TensorView probs, TensorView indices, const RouterDesc& desc);
/// @brief aux = E · Σ_e (counts_e / R) · (prob_sum_e / R).
Result<double> router_aux_loss(const RouterAuxStats& stats);
/// @brief The sequence-level aux loss of one layer's rows (DeepSeek-V2/V3's sequence-wise balance loss, Megatron's
/// seq_aux_loss; spec B8): the Switch formula per sequence b (rows cu_seqlens[b] … cu_seqlens[b + 1]) with f and P
/// over that sequence only and Megatron's 1/K, averaged over the B non-empty sequences:
///   (1/B) Σ_b E · Σ_e (c_{b,e} / (K · T_b)) · (Σ_{t ∈ b} p[t, e] / T_b)
/// @param cu_seqlens [B + 1] i32 host: 0 first, T last, non-decreasing (the packed batch's sample bounds)
Result<double> router_seq_aux_loss(TensorView probs, TensorView indices, TensorView cu_seqlens,
                                   const RouterDesc& desc);
/// @brief dlogits [T, E] += grad · ∂(router_seq_aux_loss)/∂logits, the counts constant: ∂/∂p[t, e] =
/// E · c_{b,e} / (K · T_b² · B) for t in sequence b, through the softmax.
Status router_seq_aux_backward(const Context& ctx, TensorView dlogits, TensorView probs, TensorView indices,
                               TensorView cu_seqlens, const RouterDesc& desc, float grad);
/// @brief dlogits [T, E] += scale · 2 · lse[t] · probs[t, e]: the z-loss gradient of one layer's rows for
/// scale = dLoss/dz / T (probs [T, E] and lse [T] from router_forward).
Status router_z_backward(const Context& ctx, TensorView dlogits, TensorView probs, TensorView lse, float scale);
/// @brief dlogits += grad_aux · ∂aux/∂logits for one layer's rows (softmax Jacobian applied to
/// ∂aux/∂p[t, e] = E · f_e / R).
Status router_aux_backward(const Context& ctx, TensorView dlogits, TensorView probs, const RouterAuxStats& stats,
                           float grad_aux);

}  // namespace vlpar
