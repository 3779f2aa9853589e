// Tensor-parallel attention block. See include/vlpar/nn/attention_block.hpp.
#include "vlpar/nn/attention_block.hpp"

#include "nn_util.hpp"
#include "vlpar/kernels/attention.hpp"
#include "vlpar/kernels/gemm.hpp"
#include "vlpar/kernels/norm.hpp"
#include "vlpar/kernels/rotary.hpp"
#include "vlpar/nn/shard.hpp"

namespace vlpar::nn {

using detail::as_shape;
using detail::check_shape;
using detail::scratch;
using detail::scratch_zeros;

AttentionBlock::AttentionBlock(const TransformerConfig& cfg, TensorParallel tp, AttentionWeights w,
                               AttentionWeights grads, size_t first_param)
    : cfg_(cfg), tp_(tp), w_(w), g_(grads), first_param_(first_param) {
  hq_ = cfg.heads / tp.size();
  const Range kv = kv_head_shard(cfg.kv_heads, tp.size(), tp.rank());
  hkv_ = int(kv.size());
  kv_begin_ = kv.begin;
}

namespace {
RotaryDesc rotary_desc(const TransformerConfig& cfg) {
  RotaryDesc d;
  d.kind = RotaryKind::k1D;
  d.head_dim = cfg.head_dim;
  d.theta = cfg.rope_theta;
  return d;
}
}  // namespace

Status AttentionBlock::forward(const Context& ctx, TensorView out, TensorView x, const PackedSeq& seq,
                               AttentionStash& st) const {
  const char* kName = "attention block forward";
  VLPAR_RETURN_IF_ERROR(cfg_.validate_tp(tp_.size()));
  const int64_t N = seq.num_tokens(), Nl = tp_.local_tokens(N), H = cfg_.hidden, D = cfg_.head_dim;
  VLPAR_CHECK(!tp_.sp() || N % tp_.size() == 0, "{}: {} tokens do not split evenly over tp={} for sequence "
              "parallelism", kName, N, tp_.size());
  VLPAR_RETURN_IF_ERROR(check_shape(kName, "x", x, {Nl, H}));
  VLPAR_RETURN_IF_ERROR(check_shape(kName, "out", out, {Nl, H}));
  VLPAR_RETURN_IF_ERROR(check_shape(kName, "norm weight", w_.norm, {H}));
  VLPAR_RETURN_IF_ERROR(check_shape(kName, "q weight", w_.q, {hq_ * D, H}));
  VLPAR_RETURN_IF_ERROR(check_shape(kName, "k weight", w_.k, {hkv_ * D, H}));
  VLPAR_RETURN_IF_ERROR(check_shape(kName, "v weight", w_.v, {hkv_ * D, H}));
  VLPAR_RETURN_IF_ERROR(check_shape(kName, "o weight", w_.o, {H, hq_ * D}));

  st.x = x;
  VLPAR_ASSIGN_OR_RETURN(st.rstd, scratch(ctx, {Nl}));
  VLPAR_ASSIGN_OR_RETURN(st.h, scratch(ctx, {N, H}));
  VLPAR_ASSIGN_OR_RETURN(st.q, scratch(ctx, {N, hq_, D}));
  VLPAR_ASSIGN_OR_RETURN(st.k, scratch(ctx, {N, hkv_, D}));
  VLPAR_ASSIGN_OR_RETURN(st.v, scratch(ctx, {N, hkv_, D}));
  VLPAR_ASSIGN_OR_RETURN(st.attn, scratch(ctx, {N, hq_, D}));
  VLPAR_ASSIGN_OR_RETURN(st.lse, scratch(ctx, {hq_, N}));
  VLPAR_ASSIGN_OR_RETURN(Tensor hn, scratch(ctx, {Nl, H}));
  VLPAR_ASSIGN_OR_RETURN(Tensor partial, scratch(ctx, {N, H}));

  VLPAR_RETURN_IF_ERROR(rmsnorm_forward(ctx, hn, st.rstd, x, w_.norm, cfg_.eps));
  VLPAR_RETURN_IF_ERROR(region_enter_forward(tp_, st.h, hn));
  VLPAR_RETURN_IF_ERROR(linear_forward(ctx, as_shape(st.q, {N, hq_ * D}), st.h, w_.q, {}));
  VLPAR_RETURN_IF_ERROR(linear_forward(ctx, as_shape(st.k, {N, hkv_ * D}), st.h, w_.k, {}));
  VLPAR_RETURN_IF_ERROR(linear_forward(ctx, as_shape(st.v, {N, hkv_ * D}), st.h, w_.v, {}));
  const RotaryDesc rd = rotary_desc(cfg_);
  VLPAR_RETURN_IF_ERROR(rotary_forward(ctx, st.q, st.q, seq.positions, rd));
  VLPAR_RETURN_IF_ERROR(rotary_forward(ctx, st.k, st.k, seq.positions, rd));
  VarlenAttentionDesc ad;
  ad.num_heads = hq_;
  ad.num_kv_heads = hkv_;
  ad.head_dim = int(D);
  ad.causal = true;
  VLPAR_RETURN_IF_ERROR(varlen_attention_forward(ctx, st.attn, st.lse, st.q, st.k, st.v, seq.cu_seqlens, ad));
  VLPAR_RETURN_IF_ERROR(linear_forward(ctx, partial, as_shape(st.attn, {N, hq_ * D}), w_.o, {}));
  VLPAR_RETURN_IF_ERROR(region_exit_forward(tp_, out, partial));
  return detail::add_(ctx, out, x);
}

Status AttentionBlock::backward(const Context& ctx, TensorView dx, TensorView dout, const PackedSeq& seq,
                                const AttentionStash& st, const GradReadyFn& ready) const {
  const char* kName = "attention block backward";
  const int64_t N = seq.num_tokens(), Nl = tp_.local_tokens(N), H = cfg_.hidden, D = cfg_.head_dim;
  VLPAR_RETURN_IF_ERROR(check_shape(kName, "dx", dx, {Nl, H}));
  VLPAR_RETURN_IF_ERROR(check_shape(kName, "dout", dout, {Nl, H}));
  VLPAR_CHECK(st.attn.defined() && st.attn.shape() == Shape({N, hq_, D}),
              "{}: the stash does not come from a forward over {} tokens", kName, N);
  auto mark = [&](size_t k) { return ready ? ready(first_param_ + k) : Status::Ok(); };

  // o projection (row-parallel): dpartial = exit⁻¹(dout); dattn = dpartial · Wo; dWo += dpartialᵀ · attn.
  VLPAR_ASSIGN_OR_RETURN(Tensor dpartial, scratch(ctx, {N, H}));
  VLPAR_ASSIGN_OR_RETURN(Tensor dattn, scratch(ctx, {N, hq_, D}));
  VLPAR_RETURN_IF_ERROR(region_exit_backward(tp_, dpartial, dout));
  VLPAR_RETURN_IF_ERROR(linear_backward(ctx, as_shape(dattn, {N, hq_ * D}), g_.o, {}, dpartial,
                                        as_shape(st.attn, {N, hq_ * D}), w_.o));
  VLPAR_RETURN_IF_ERROR(mark(4));

  VLPAR_ASSIGN_OR_RETURN(Tensor dq, scratch(ctx, {N, hq_, D}));
  VLPAR_ASSIGN_OR_RETURN(Tensor dk, scratch(ctx, {N, hkv_, D}));
  VLPAR_ASSIGN_OR_RETURN(Tensor dv, scratch(ctx, {N, hkv_, D}));
  VarlenAttentionDesc ad;
  ad.num_heads = hq_;
  ad.num_kv_heads = hkv_;
  ad.head_dim = int(D);
  ad.causal = true;
  VLPAR_RETURN_IF_ERROR(
      varlen_attention_backward(ctx, dq, dk, dv, dattn, st.q, st.k, st.v, st.attn, st.lse, seq.cu_seqlens, ad));
  const RotaryDesc rd = rotary_desc(cfg_);
  VLPAR_RETURN_IF_ERROR(rotary_backward(ctx, dq, dq, seq.positions, rd));
  VLPAR_RETURN_IF_ERROR(rotary_backward(ctx, dk, dk, seq.positions, rd));

  // k/v weight gradients: a replicated kv head (tp > H_kv) gets contributions from every rank whose query
  // heads read it, so the local contribution is placed in a full-size [H_kv·D, H] buffer and summed over tp.
  const bool kv_replicated = kv_head_replicas(cfg_.kv_heads, tp_.size()) > 1;
  auto kv_weight_grad = [&](TensorView dw_local, TensorView dy) -> Status {
    if (!kv_replicated) return detail::weight_grad(ctx, dw_local, dy, st.h);
    VLPAR_ASSIGN_OR_RETURN(Tensor full, scratch_zeros(ctx, {int64_t(cfg_.kv_heads) * D, H}));
    TensorView mine = full.view().slice(0, kv_begin_ * D, (kv_begin_ + hkv_) * D);
    VLPAR_RETURN_IF_ERROR(detail::weight_grad(ctx, mine, dy, st.h));
    VLPAR_RETURN_IF_ERROR(tp_sum_partial_grad(tp_, full));
    return detail::add_(ctx, dw_local, mine);
  };
  // dh = dv·Wv + dk·Wk + dq·Wq (the column-parallel input gradient, partial over tp until region_enter⁻¹).
  VLPAR_ASSIGN_OR_RETURN(Tensor dh, scratch(ctx, {N, H}));
  const TensorView dv2 = as_shape(dv, {N, hkv_ * D}), dk2 = as_shape(dk, {N, hkv_ * D}),
                   dq2 = as_shape(dq, {N, hq_ * D});
  GemmDesc acc;
  acc.beta = 1.f;
  VLPAR_RETURN_IF_ERROR(gemm(ctx, dh, dv2, w_.v, GemmDesc{}));
  VLPAR_RETURN_IF_ERROR(kv_weight_grad(g_.v, dv2));
  VLPAR_RETURN_IF_ERROR(mark(3));
  VLPAR_RETURN_IF_ERROR(gemm(ctx, dh, dk2, w_.k, acc));
  VLPAR_RETURN_IF_ERROR(kv_weight_grad(g_.k, dk2));
  VLPAR_RETURN_IF_ERROR(mark(2));
  VLPAR_RETURN_IF_ERROR(gemm(ctx, dh, dq2, w_.q, acc));
  VLPAR_RETURN_IF_ERROR(detail::weight_grad(ctx, g_.q, dq2, st.h));
  VLPAR_RETURN_IF_ERROR(mark(1));

  // Back through region entry and the RMSNorm; under SP the norm weight gradient is a partial sum over tokens.
  VLPAR_RETURN_IF_ERROR(detail::pre_norm_residual_backward(ctx, tp_, dx, g_.norm, dh, dout, st.x, w_.norm, st.rstd));
  return mark(0);
}

}  // namespace vlpar::nn
