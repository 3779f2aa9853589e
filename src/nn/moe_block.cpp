// Pre-norm sparse MoE block (router, top-k experts, combine, residual). See include/vlpar/nn/moe_block.hpp.
#include "vlpar/nn/moe_block.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "nn_util.hpp"
#include "vlpar/kernels/activation.hpp"
#include "vlpar/kernels/norm.hpp"

namespace vlpar::nn {

using detail::check_grad;
using detail::check_shape;
using detail::check_weight;
using detail::scratch;

namespace {

/// The one group covering all N rows (the router's dense GEMMs run through the grouped GEMM, which is
/// thread-count invariant).
std::vector<int64_t> one_group(int64_t n) { return {0, n}; }

// grouped_weight_grad (dw[g] += aᵀ·dc over each group's rows) now, or queued for a split backward's W with a and
// dc_owner (which owns dc) kept alive.
Status grouped_weight_grad_split(const Context& ctx, TensorView dw, const Tensor& a, TensorView dc,
                                 const Tensor& dc_owner, std::vector<int64_t> offsets) {
  const TensorView av = a;
  return detail::weight_work(ctx, {a, dc_owner}, [dw, av, dc, offsets = std::move(offsets)](const Context& c) {
    return grouped_weight_grad(c, dw, av, dc, offsets);
  });
}

/// Every tp rank's rows of `local` [N_loc, F] in rank order: full [N, F] (the SP region entry's all-gather).
Result<Tensor> gather_over_tp(const Context& ctx, const TensorParallel& tp, const Tensor& local) {
  VLPAR_ASSIGN_OR_RETURN(Tensor full, scratch(ctx, {local.shape()[0] * tp.size(), local.shape()[1]}, local.dtype()));
  VLPAR_RETURN_IF_ERROR(region_enter_forward(tp, full, local));
  return full;
}

/// This rank's rows [R, F] → the etp group's gathered rows [R_g, F] (`rows` itself without etp).
Result<Tensor> gathered(const Context& ctx, comm::Communicator* etp, const ExpertTpRows& g, Tensor rows) {
  if (g.etp == 1) return rows;
  VLPAR_ASSIGN_OR_RETURN(Tensor out, scratch(ctx, {g.gathered(), rows.shape()[1]}, rows.dtype()));
  VLPAR_RETURN_IF_ERROR(gather_expert_rows(etp, g, out, rows));
  return out;
}

/// Partial results of the gathered rows [R_g, F] → this rank's rows [R, F], the etp ranks' parts added in rank
/// order (`partial` itself without etp).
Result<Tensor> scattered(const Context& ctx, comm::Communicator* etp, const ExpertTpRows& g, Tensor partial) {
  if (g.etp == 1) return partial;
  VLPAR_ASSIGN_OR_RETURN(Tensor out, scratch(ctx, {g.rows[size_t(g.etp_rank)], partial.shape()[1]}, partial.dtype()));
  VLPAR_RETURN_IF_ERROR(reduce_scatter_expert_rows(ctx, etp, g, out, partial));
  return out;
}

/// a[i] += b[i] over the statistics' vectors (a sized from b on first use).
void add_stats(RouterAuxStats& a, const RouterAuxStats& b) {
  if (a.counts.empty()) {
    a.counts.assign(b.counts.size(), 0.0);
    a.prob_sum.assign(b.prob_sum.size(), 0.0);
    a.top_k = b.top_k;
  }
  for (size_t e = 0; e < b.counts.size(); ++e) {
    a.counts[e] += b.counts[e];
    a.prob_sum[e] += b.prob_sum[e];
  }
  a.rows += b.rows;
}

}  // namespace

Status MoeConfig::validate() const {
  VLPAR_CHECK(num_experts > 0, "moe config: num_experts must be positive, got {}", num_experts);
  VLPAR_CHECK(top_k > 0, "moe config: top_k must be positive, got {}", top_k);
  VLPAR_CHECK(top_k <= num_experts, "moe config: top_k {} exceeds num_experts {}", top_k, num_experts);
  VLPAR_CHECK(intermediate > 0, "moe config: intermediate (per-expert width) must be positive, got {}", intermediate);
  VLPAR_CHECK(capacity_factor >= 0 && std::isfinite(capacity_factor), "moe config: capacity_factor must be finite "
              "and >= 0 (0: dropless), got {}", capacity_factor);
  return Status::Ok();
}

MoeBlock::MoeBlock(const TransformerConfig& cfg, const MoeConfig& moe, TensorParallel tp, MoeWeights w,
                   MoeWeights grads, size_t first_param, ExpertParallel ep)
    : cfg_(cfg), moe_(moe), tp_(tp), ep_(ep), w_(w), g_(grads), first_param_(first_param) {}

Status MoeBlock::check(const char* name, int64_t N) const {
  VLPAR_RETURN_IF_ERROR(moe_.validate());
  VLPAR_CHECK(cfg_.hidden > 0 && cfg_.eps > 0.f, "{}: hidden {} and eps {} must be positive", name, cfg_.hidden,
              cfg_.eps);
  VLPAR_CHECK(N >= 0, "{}: num_tokens must be non-negative, got {}", name, N);
  VLPAR_CHECK(!tp_.sp() || N % tp_.size() == 0, "{}: {} tokens do not split evenly over tp={} for sequence "
              "parallelism", name, N, tp_.size());
  VLPAR_CHECK(moe_.num_experts % ep_.size() == 0, "{}: {} experts cannot be split evenly over {} expert-parallel "
              "ranks", name, moe_.num_experts, ep_.size());
  VLPAR_CHECK(ep_.etp_size() == 1 || !tp_.active() || tp_.sp(), "{}: expert tensor parallelism (etp {}) with tp {} "
              "needs sequence parallelism: the etp ranks must hold different tokens", name, ep_.etp_size(),
              tp_.size());
  VLPAR_CHECK(moe_.intermediate % ep_.etp_size() == 0, "{}: the expert width {} does not split over {} "
              "expert-tensor-parallel ranks", name, moe_.intermediate, ep_.etp_size());
  const int64_t H = cfg_.hidden, E = moe_.num_experts, I = moe_.intermediate / ep_.etp_size(), El = E / ep_.size();
  VLPAR_RETURN_IF_ERROR(check_weight(name, "norm weight", w_.norm, {H}));
  VLPAR_RETURN_IF_ERROR(check_weight(name, "router weight", w_.router, {E, H}));
  VLPAR_RETURN_IF_ERROR(check_weight(name, "gate_up weight", w_.gate_up, {El, H, 2 * I}));
  VLPAR_RETURN_IF_ERROR(check_weight(name, "down weight", w_.down, {El, I, H}));
  if (!w_.expert_bias.empty())
    VLPAR_RETURN_IF_ERROR(check_shape(name, "expert bias", w_.expert_bias, {E}, DType::kF32));
  VLPAR_RETURN_IF_ERROR(check_grad(name, "norm gradient", g_.norm, {H}));
  VLPAR_RETURN_IF_ERROR(check_grad(name, "router gradient", g_.router, {E, H}));
  VLPAR_RETURN_IF_ERROR(check_grad(name, "gate_up gradient", g_.gate_up, {El, H, 2 * I}));
  VLPAR_RETURN_IF_ERROR(check_grad(name, "down gradient", g_.down, {El, I, H}));
  return Status::Ok();
}

Status MoeBlock::forward(const Context& ctx, TensorView out, TensorView x, int64_t N, MoeStash& st,
                         RouterAuxStats* aux, TensorView cu_seqlens) const {
  const char* kName = "moe block forward";
  VLPAR_RETURN_IF_ERROR(check(kName, N));
  const int64_t Ntok = N, H = cfg_.hidden, E = moe_.num_experts, K = moe_.top_k;
  const int64_t I = moe_.intermediate / ep_.etp_size();  // this etp rank's width of every expert
  N = tp_.local_tokens(Ntok);  // this rank's rows from here on
  VLPAR_ASSIGN_OR_RETURN(const DType act, detail::activation_dtype(kName, "x", x, cfg_.activation));
  VLPAR_RETURN_IF_ERROR(check_shape(kName, "x", x, {N, H}, act));
  VLPAR_RETURN_IF_ERROR(check_shape(kName, "out", out, {N, H}, act));
  const RouterDesc rdesc{int(E), int(K)};

  st.x = x;
  st.cu_seqlens = cu_seqlens;
  // The router's logits, probabilities, lse and routing weights are f32 whatever the activation dtype.
  VLPAR_ASSIGN_OR_RETURN(st.rstd, scratch(ctx, {N}, DType::kF32));
  VLPAR_ASSIGN_OR_RETURN(st.h, scratch(ctx, {N, H}, act));
  VLPAR_ASSIGN_OR_RETURN(st.probs, scratch(ctx, {N, E}, DType::kF32));
  VLPAR_ASSIGN_OR_RETURN(st.lse, scratch(ctx, {N}, DType::kF32));
  VLPAR_ASSIGN_OR_RETURN(st.weights, scratch(ctx, {N, K}, DType::kF32));
  VLPAR_ASSIGN_OR_RETURN(st.indices, scratch(ctx, {N, K}, DType::kI32));
  VLPAR_ASSIGN_OR_RETURN(Tensor logits, scratch(ctx, {N, E}, DType::kF32));

  // Router: logits [N, E] = h · routerᵀ (f32 out), then fp32 softmax, top-k, renormalisation.
  VLPAR_RETURN_IF_ERROR(rmsnorm_forward(ctx, st.h, st.rstd, x, w_.norm, cfg_.eps));
  const TensorView router3 = detail::as_shape(w_.router, {1, E, H});
  VLPAR_RETURN_IF_ERROR(grouped_gemm(ctx, logits, st.h, router3, one_group(N), GemmDesc{false, true, 1.f, 0.f}));
  // Non-finite logits are a kNonFinite error that every rank meeting this one in a collective below must share:
  // the tp ranks under SP (the statistics' gather), the etp ranks (the rows' gather) and the ep ranks (the
  // dispatch plan agrees on it).
  Status routed = router_forward(ctx, st.weights, st.indices, st.probs, logits, rdesc, w_.expert_bias, st.lse);
  if (tp_.sp()) routed = agree_on_outcome(tp_.comm, routed, "moe block: tp", "failed to route their tokens");
  if (ep_.etp_size() > 1) routed = agree_on_outcome(ep_.etp, routed, "moe block: etp", "failed to route their tokens");
  if (!ep_.active()) VLPAR_RETURN_IF_ERROR(routed);
  if (aux && routed.ok()) VLPAR_RETURN_IF_ERROR(add_router_stats(ctx, *aux, st, Ntok));

  // Rows to the experts (this rank's, or the ep group's), the experts, then the weighted combine at the source in
  // ascending expert order and the residual.
  DispatchOptions dispatch_options;
  dispatch_options.capacity_factor = moe_.capacity_factor;
  VLPAR_ASSIGN_OR_RETURN(st.dispatch, plan_expert_dispatch(ctx, ep_.comm, st.indices, int(E), dispatch_options,
                                                           routed));
  const ExpertDispatch& d = st.dispatch;
  const int64_t R = d.received();
  VLPAR_ASSIGN_OR_RETURN(st.etp, plan_expert_tp(ep_.etp, d.expert_offsets));
  const int64_t Rg = st.etp.gathered();
  const std::vector<int64_t>& offsets = st.etp.offsets;  // d.expert_offsets without etp
  VLPAR_ASSIGN_OR_RETURN(Tensor hp, scratch(ctx, {R, H}, act));
  VLPAR_ASSIGN_OR_RETURN(Tensor rw, scratch(ctx, {R, 1}, DType::kF32));
  VLPAR_RETURN_IF_ERROR(dispatch_rows(ctx, ep_.comm, d, hp, st.h));
  VLPAR_RETURN_IF_ERROR(dispatch_assignments(ctx, ep_.comm, d, rw, detail::as_shape(st.weights.view(), {N * K, 1})));
  VLPAR_ASSIGN_OR_RETURN(Tensor hg, gathered(ctx, ep_.etp, st.etp, std::move(hp)));
  VLPAR_ASSIGN_OR_RETURN(st.row_weights, gathered(ctx, ep_.etp, st.etp, std::move(rw)));
  VLPAR_ASSIGN_OR_RETURN(st.gu, scratch(ctx, {Rg, 2 * I}, act));
  VLPAR_ASSIGN_OR_RETURN(st.act, scratch(ctx, {Rg, I}, act));
  VLPAR_RETURN_IF_ERROR(grouped_gemm(ctx, st.gu, hg, w_.gate_up, offsets, GemmDesc{}));
  const TensorView gate = st.gu.view().slice(1, 0, I), up = st.gu.view().slice(1, I, 2 * I);
  VLPAR_RETURN_IF_ERROR(swiglu_forward(ctx, st.act, gate, up));
  Tensor y = std::move(hg);  // [R_g, H] again: the gate_up input is no longer needed
  VLPAR_RETURN_IF_ERROR(grouped_gemm(ctx, y, st.act, w_.down, offsets, GemmDesc{}));
  // [R, H]: the etp ranks' partial sums of this rank's rows added
  VLPAR_ASSIGN_OR_RETURN(y, scattered(ctx, ep_.etp, st.etp, std::move(y)));
  VLPAR_RETURN_IF_ERROR(combine_rows(ctx, ep_.comm, d, out, y, st.weights));
  return add_(ctx, out, x);
}

// This layer's router statistics over the micro-batch's N tokens into aux: HF's pooled counts and probability
// sums, the z-loss term mean_t lse_t² and (with sample bounds) the sequence-level aux. Without SP this rank's rows
// are all N. Under SP each tp rank's sums are gathered and added in tp-rank order (the same value on every rank)
// and the sequence-level aux is computed from the layer's probs and ids gathered over tp.
Status MoeBlock::add_router_stats(const Context& ctx, RouterAuxStats& aux, const MoeStash& st, int64_t Ntok) const {
  const RouterDesc rdesc{int(moe_.num_experts), int(moe_.top_k)};
  const int64_t N = st.lse.numel();
  double z = 0;  // this rank's Σ_t lse_t², in token order
  for (int64_t t = 0; t < N; ++t) z += double(st.lse.ptr<float>()[t]) * double(st.lse.ptr<float>()[t]);
  if (!tp_.sp()) {
    VLPAR_RETURN_IF_ERROR(router_aux_accumulate(aux, st.probs, st.indices, rdesc));
  } else {
    RouterAuxStats mine;
    VLPAR_RETURN_IF_ERROR(router_aux_accumulate(mine, st.probs, st.indices, rdesc));
    const auto E = size_t(moe_.num_experts), W = 2 * E + 2, P = size_t(tp_.size());
    std::vector<double> row(W), all(W * P);  // counts, prob_sum, rows, Σ lse²
    std::copy(mine.counts.begin(), mine.counts.end(), row.begin());
    std::copy(mine.prob_sum.begin(), mine.prob_sum.end(), row.begin() + int64_t(E));
    row[2 * E] = double(mine.rows);
    row[2 * E + 1] = z;
    VLPAR_RETURN_IF_ERROR(tp_.comm->all_gather(TensorView(all.data(), DType::kF64, Shape{int64_t(W * P)}),
                                               TensorView(row.data(), DType::kF64, Shape{int64_t(W)})));
    RouterAuxStats sum;
    sum.counts.assign(E, 0.0);
    sum.prob_sum.assign(E, 0.0);
    sum.top_k = mine.top_k;
    z = 0;
    for (size_t p = 0; p < P; ++p) {
      const double* r = all.data() + p * W;
      for (size_t e = 0; e < E; ++e) {
        sum.counts[e] += r[e];
        sum.prob_sum[e] += r[E + e];
      }
      sum.rows += int64_t(r[2 * E]);
      z += r[2 * E + 1];
    }
    add_stats(aux, sum);
  }
  if (Ntok > 0) aux.z_sum += z / double(Ntok);
  if (st.cu_seqlens.empty()) return Status::Ok();
  if (!tp_.sp()) {
    VLPAR_ASSIGN_OR_RETURN(const double seq, router_seq_aux_loss(st.probs, st.indices, st.cu_seqlens, rdesc));
    aux.seq_aux_sum += seq;
    return Status::Ok();
  }
  VLPAR_ASSIGN_OR_RETURN(const Tensor probs, gather_over_tp(ctx, tp_, st.probs));
  VLPAR_ASSIGN_OR_RETURN(const Tensor indices, gather_over_tp(ctx, tp_, st.indices));
  VLPAR_ASSIGN_OR_RETURN(const double seq, router_seq_aux_loss(probs, indices, st.cu_seqlens, rdesc));
  aux.seq_aux_sum += seq;
  return Status::Ok();
}

// dlogits [N, E] += grad · ∂(sequence-level aux)/∂logits of this rank's rows. Under SP the samples span the tp
// ranks: the gradient of all N rows is computed from the gathered probs and ids, into a full-size buffer holding
// this rank's dlogits in its rows (the same accumulation as without SP, bit for bit), whose rows are copied back.
Status MoeBlock::seq_aux_grad(const Context& ctx, TensorView dlogits, const MoeStash& st, float grad) const {
  const RouterDesc rdesc{int(moe_.num_experts), int(moe_.top_k)};
  if (!tp_.sp()) return router_seq_aux_backward(ctx, dlogits, st.probs, st.indices, st.cu_seqlens, rdesc, grad);
  VLPAR_ASSIGN_OR_RETURN(const Tensor probs, gather_over_tp(ctx, tp_, st.probs));
  VLPAR_ASSIGN_OR_RETURN(const Tensor indices, gather_over_tp(ctx, tp_, st.indices));
  VLPAR_ASSIGN_OR_RETURN(Tensor full, detail::scratch_zeros(ctx, probs.shape(), DType::kF32));
  const int64_t N = dlogits.size(0), first = int64_t(tp_.rank()) * N;
  const TensorView mine = full.view().slice(0, first, first + N);
  VLPAR_RETURN_IF_ERROR(copy_(mine, dlogits));
  VLPAR_RETURN_IF_ERROR(router_seq_aux_backward(ctx, full, probs, indices, st.cu_seqlens, rdesc, grad));
  return copy_(dlogits, mine);
}

// Router: dlogits through the renormalised top-k weights and the softmax, plus the router loss terms (each
// dLoss/d(term) in `losses`); the router weight gradient drouter [E, H] += dlogitsᵀ · h (now, or queued for a split
// backward's W) and dh [N, H] += dlogits · router.
Status MoeBlock::router_grads(const Context& ctx, TensorView dh, TensorView dweights, const MoeStash& st,
                              const RouterLossGrads& losses, int64_t Ntok) const {
  const int64_t N = dh.size(0), H = cfg_.hidden, E = moe_.num_experts;
  const RouterDesc rdesc{int(E), int(moe_.top_k)};
  VLPAR_ASSIGN_OR_RETURN(Tensor dlogits, scratch(ctx, {N, E}, DType::kF32));
  VLPAR_RETURN_IF_ERROR(router_backward(ctx, dlogits, dweights, st.probs, st.indices, st.weights, rdesc));
  // (A rank without tokens has no router rows; under expert parallelism it still served the others' rows.)
  if (losses.aux != 0.f && N > 0)
    VLPAR_RETURN_IF_ERROR(router_aux_backward(ctx, dlogits, st.probs, *losses.stats, losses.aux));
  if (losses.z != 0.f && N > 0)  // the z-loss is a mean over all Ntok tokens of the micro-batch
    VLPAR_RETURN_IF_ERROR(router_z_backward(ctx, dlogits, st.probs, st.lse, losses.z / float(Ntok)));
  if (losses.seq_aux != 0.f && (N > 0 || tp_.sp()))  // under SP every tp rank takes part in the gather
    VLPAR_RETURN_IF_ERROR(seq_aux_grad(ctx, dlogits, st, losses.seq_aux));
  if (!g_.router.empty() && !tp_.sp())
    VLPAR_RETURN_IF_ERROR(
        grouped_weight_grad_split(ctx, detail::as_shape(g_.router, {1, E, H}), dlogits, st.h, st.h, one_group(N)));
  if (!g_.router.empty() && tp_.sp()) {  // this rank's part of dWr, summed over tp (now or in the W)
    const TensorView dr = detail::as_shape(g_.router, {1, E, H}), dl = dlogits, hv = st.h;
    VLPAR_RETURN_IF_ERROR(detail::weight_work(ctx, {dlogits, st.h}, [=, tp = tp_](const Context& c) -> Status {
      VLPAR_ASSIGN_OR_RETURN(Tensor part, detail::scratch_zeros(c, {1, E, H}, DType::kF32));
      VLPAR_RETURN_IF_ERROR(grouped_weight_grad(c, part, dl, hv, one_group(N)));
      VLPAR_RETURN_IF_ERROR(tp_sum_partial_grad(tp, part));
      return add_(c, dr, part);
    }));
  }
  return grouped_gemm(ctx, dh, dlogits, detail::as_shape(w_.router, {1, E, H}), one_group(N),
                      GemmDesc{false, false, 1.f, 1.f});
}

Status MoeBlock::backward(const Context& ctx, TensorView dx, TensorView dout, int64_t N, const MoeStash& st,
                          const GradReadyFn& ready, const RouterLossGrads& losses) const {
  const char* kName = "moe block backward";
  VLPAR_RETURN_IF_ERROR(check(kName, N));
  const int64_t Ntok = N, H = cfg_.hidden, K = moe_.top_k, I = moe_.intermediate / ep_.etp_size();
  N = tp_.local_tokens(Ntok);  // this rank's rows from here on
  VLPAR_ASSIGN_OR_RETURN(const DType act, detail::activation_dtype(kName, "dout", dout, cfg_.activation));
  VLPAR_RETURN_IF_ERROR(check_shape(kName, "dx", dx, {N, H}, act));
  VLPAR_RETURN_IF_ERROR(check_shape(kName, "dout", dout, {N, H}, act));
  const ExpertDispatch& d = st.dispatch;
  const int64_t R = d.received(), Rg = st.etp.gathered();
  VLPAR_CHECK(st.gu.defined() && st.gu.shape() == Shape({Rg, 2 * I}) && st.gu.dtype() == act && d.num_tokens() == N &&
                  st.x.shape == Shape({N, H}),
              "{}: the stash does not come from a forward over {} tokens", kName, N);
  const RouterAuxStats* aux = losses.stats;
  VLPAR_CHECK(losses.aux == 0.f || (aux != nullptr && aux->rows >= Ntok),
              "{}: grad_aux = {} needs the finished aux statistics of every MoE layer (got {})", kName, losses.aux,
              aux ? fmt::format("{} rows", aux->rows) : std::string("none"));
  VLPAR_CHECK(losses.seq_aux == 0.f || !st.cu_seqlens.empty(), "{}: the sequence-level aux gradient needs the "
              "sample bounds (cu_seqlens) in forward", kName);
  // ready(first_param + k) once that gradient is final; never for a frozen parameter (empty gradient view).
  const TensorView grads_by_offset[4] = {g_.norm, g_.router, g_.gate_up, g_.down};
  auto mark = [&](size_t k) {
    return grads_by_offset[k].empty() ? Status::Ok() : detail::mark_ready(ctx, ready, first_param_ + k);
  };
  const auto& offsets = st.etp.offsets;
  const MoeDispatch rows_plan = st.etp.gathered_plan();  // per-row ops on the experts' rows ([R_g, 1] values)

  // Down projection on the experts' rows. dyp = dout sent to them (unweighted, gathered over etp); dact_u =
  // dyp · D_eᵀ gives both the routing-weight gradient dw[row] = <dout[t], y_row> = <dact_u[row], act[row]> (a
  // partial sum over the etp ranks' widths, added back at the row's rank) and, scaled by w, the activation
  // gradient. The per-row dw go back to their (token, slot).
  VLPAR_ASSIGN_OR_RETURN(Tensor dyp_mine, scratch(ctx, {R, H}, act));
  VLPAR_ASSIGN_OR_RETURN(Tensor dact, scratch(ctx, {Rg, I}, act));
  VLPAR_ASSIGN_OR_RETURN(Tensor drow_g, scratch(ctx, {Rg, 1}, DType::kF32));
  VLPAR_ASSIGN_OR_RETURN(Tensor dweights, scratch(ctx, {N, K}, DType::kF32));
  VLPAR_RETURN_IF_ERROR(dispatch_rows(ctx, ep_.comm, d, dyp_mine, dout));
  VLPAR_ASSIGN_OR_RETURN(Tensor dyp, gathered(ctx, ep_.etp, st.etp, std::move(dyp_mine)));
  VLPAR_RETURN_IF_ERROR(grouped_gemm(ctx, dact, dyp, w_.down, offsets, GemmDesc{false, true, 1.f, 0.f}));
  VLPAR_RETURN_IF_ERROR(moe_row_dot(ctx, drow_g, dact, st.act, rows_plan));
  VLPAR_ASSIGN_OR_RETURN(const Tensor drow_w, scattered(ctx, ep_.etp, st.etp, std::move(drow_g)));
  VLPAR_RETURN_IF_ERROR(combine_assignments(ctx, ep_.comm, d, detail::as_shape(dweights.view(), {N * K, 1}), drow_w));
  VLPAR_RETURN_IF_ERROR(moe_scale_rows(ctx, dact, st.row_weights, rows_plan));
  if (!g_.down.empty()) {  // dD_e += act_eᵀ · (w ⊙ dout)_e
    VLPAR_RETURN_IF_ERROR(moe_scale_rows(ctx, dyp, st.row_weights, rows_plan));
    VLPAR_RETURN_IF_ERROR(grouped_weight_grad_split(ctx, g_.down, st.act, dyp, dyp, offsets));
  }
  VLPAR_RETURN_IF_ERROR(mark(3));

  // SwiGLU and gate/up projection; the input gradient goes back to the tokens, summed per token in ascending
  // expert order.
  // Reuse dyp's [R_g, H] storage only if it fits and no queued down gradient still reads it; otherwise allocate.
  const bool dyp_queued = ctx.weight_grads != nullptr && !g_.down.empty();
  Tensor dgu = dyp_queued ? Tensor{} : std::move(dyp);
  if (dgu.numel() < Rg * 2 * I) {
    VLPAR_ASSIGN_OR_RETURN(dgu, scratch(ctx, {Rg, 2 * I}, act));
  }
  const TensorView dgu_v = detail::as_shape(dgu.view(), {Rg, 2 * I});
  const TensorView gate = st.gu.view().slice(1, 0, I), up = st.gu.view().slice(1, I, 2 * I);
  VLPAR_RETURN_IF_ERROR(swiglu_backward(ctx, dgu_v.slice(1, 0, I), dgu_v.slice(1, I, 2 * I), dact, gate, up));
  if (!g_.gate_up.empty()) {  // dGU_e += h_eᵀ · dgu_e, h sent to the experts again (not stashed: [R_g, H])
    VLPAR_ASSIGN_OR_RETURN(Tensor hp_mine, scratch(ctx, {R, H}, act));
    VLPAR_RETURN_IF_ERROR(dispatch_rows(ctx, ep_.comm, d, hp_mine, st.h));
    VLPAR_ASSIGN_OR_RETURN(const Tensor hp, gathered(ctx, ep_.etp, st.etp, std::move(hp_mine)));
    VLPAR_RETURN_IF_ERROR(grouped_weight_grad_split(ctx, g_.gate_up, hp, dgu_v, dgu, offsets));
  }
  VLPAR_RETURN_IF_ERROR(mark(2));
  VLPAR_ASSIGN_OR_RETURN(Tensor dhp_g, scratch(ctx, {Rg, H}, act));
  VLPAR_ASSIGN_OR_RETURN(Tensor dh, scratch(ctx, {N, H}, act));
  VLPAR_RETURN_IF_ERROR(grouped_gemm(ctx, dhp_g, dgu_v, w_.gate_up, offsets, GemmDesc{false, true, 1.f, 0.f}));
  VLPAR_ASSIGN_OR_RETURN(const Tensor dhp, scattered(ctx, ep_.etp, st.etp, std::move(dhp_g)));
  VLPAR_RETURN_IF_ERROR(combine_rows(ctx, ep_.comm, d, dh, dhp));

  VLPAR_RETURN_IF_ERROR(router_grads(ctx, dh, dweights, st, losses, Ntok));
  VLPAR_RETURN_IF_ERROR(mark(1));

  // RMSNorm (input gradient per row; weight gradient in fixed chunks) and the residual.
  VLPAR_RETURN_IF_ERROR(rmsnorm_backward(ctx, dx, {}, dh, st.x, w_.norm, st.rstd));
  if (!g_.norm.empty() && !tp_.sp()) VLPAR_RETURN_IF_ERROR(rmsnorm_weight_grad(ctx, g_.norm, dh, st.x, st.rstd));
  if (!g_.norm.empty() && tp_.sp()) {  // this rank's tokens' part, summed over tp
    VLPAR_ASSIGN_OR_RETURN(Tensor part, detail::scratch_zeros(ctx, {H}, DType::kF32));
    VLPAR_RETURN_IF_ERROR(rmsnorm_weight_grad(ctx, part, dh, st.x, st.rstd));
    VLPAR_RETURN_IF_ERROR(tp_sum_partial_grad(tp_, part));
    VLPAR_RETURN_IF_ERROR(add_(ctx, g_.norm, part));
  }
  VLPAR_RETURN_IF_ERROR(add_(ctx, dx, dout));
  return mark(0);
}

}  // namespace vlpar::nn
