// Tensor-parallel attention block. See include/vlpar/nn/attention_block.hpp.
#include "vlpar/nn/attention_block.hpp"

#include "nn_util.hpp"
#include "vlpar/kernels/attention.hpp"
#include "vlpar/kernels/gemm.hpp"
#include "vlpar/kernels/norm.hpp"
#include "vlpar/kernels/rotary.hpp"
#include "vlpar/core/shard.hpp"

namespace vlpar::nn {

using detail::as_shape;
using detail::check_grad;
using detail::check_shape;
using detail::check_weight;
using detail::frozen;
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
VarlenAttentionDesc attention_desc(int hq, int hkv, int64_t D) {
  VarlenAttentionDesc ad;
  ad.num_heads = hq;
  ad.num_kv_heads = hkv;
  ad.head_dim = int(D);
  ad.causal = true;
  return ad;
}

// The q or k projection of `heads` heads for n tokens of normed input h [n, H]: out [n, heads, D] = qn(h·Wᵀ),
// with qn the per-head RMSNorm of cfg.qk_norm, whose input lands in raw [n, heads·D] and statistics in rstd
// (optional); without qk_norm h·Wᵀ lands in out directly. The GEMM runs on gemm_ctx, the norm on norm_ctx (a decode
// step runs its small ops on one thread). Shared by forward and the decoding path, so both project alike.
Status project_heads(const Context& gemm_ctx, const Context& norm_ctx, const TransformerConfig& cfg, TensorView out,
                     TensorView raw, TensorView rstd, TensorView h, TensorView w, TensorView norm_w, int64_t heads) {
  const int64_t n = h.size(0), D = cfg.head_dim;
  if (!cfg.qk_norm) return linear_forward(gemm_ctx, as_shape(out, {n, heads * D}), h, w, {});
  VLPAR_RETURN_IF_ERROR(linear_forward(gemm_ctx, as_shape(raw, {n, heads * D}), h, w, {}));
  return rmsnorm_forward(norm_ctx, as_shape(out, {n * heads, D}), rstd, as_shape(raw, {n * heads, D}), norm_w,
                         cfg.eps);
}
}  // namespace

Status AttentionBlock::forward(const Context& ctx, TensorView out, TensorView x, const PackedSeq& seq,
                               AttentionStash& st) const {
  const char* kName = "attention block forward";
  VLPAR_RETURN_IF_ERROR(cfg_.validate_tp(tp_.size()));
  const int64_t N = seq.num_tokens(), Nl = tp_.local_tokens(N), H = cfg_.hidden, D = cfg_.head_dim;
  VLPAR_CHECK(!tp_.sp() || N % tp_.size() == 0, "{}: {} tokens do not split evenly over tp={} for sequence "
              "parallelism", kName, N, tp_.size());
  VLPAR_ASSIGN_OR_RETURN(const RotaryDesc rd, detail::rotary_desc_for(kName, cfg_, seq.positions, N));
  VLPAR_ASSIGN_OR_RETURN(const DType act, detail::activation_dtype(kName, "x", x, cfg_.activation));
  VLPAR_RETURN_IF_ERROR(check_shape(kName, "x", x, {Nl, H}, act));
  VLPAR_RETURN_IF_ERROR(check_shape(kName, "out", out, {Nl, H}, act));
  VLPAR_RETURN_IF_ERROR(check_weight(kName, "norm weight", w_.norm, {H}));
  VLPAR_RETURN_IF_ERROR(check_weight(kName, "q weight", w_.q, {hq_ * D, H}));
  VLPAR_RETURN_IF_ERROR(check_weight(kName, "k weight", w_.k, {hkv_ * D, H}));
  VLPAR_RETURN_IF_ERROR(check_weight(kName, "v weight", w_.v, {hkv_ * D, H}));
  VLPAR_RETURN_IF_ERROR(check_weight(kName, "o weight", w_.o, {H, hq_ * D}));
  if (cfg_.qk_norm) {
    VLPAR_RETURN_IF_ERROR(check_weight(kName, "q_norm weight", w_.q_norm, {D}));
    VLPAR_RETURN_IF_ERROR(check_weight(kName, "k_norm weight", w_.k_norm, {D}));
  }

  st.x = x;
  VLPAR_ASSIGN_OR_RETURN(st.rstd, scratch(ctx, {Nl}, DType::kF32));
  VLPAR_ASSIGN_OR_RETURN(st.h, scratch(ctx, {N, H}, act));
  VLPAR_ASSIGN_OR_RETURN(st.q, scratch(ctx, {N, hq_, D}, act));
  VLPAR_ASSIGN_OR_RETURN(st.k, scratch(ctx, {N, hkv_, D}, act));
  VLPAR_ASSIGN_OR_RETURN(st.v, scratch(ctx, {N, hkv_, D}, act));
  VLPAR_ASSIGN_OR_RETURN(st.attn, scratch(ctx, {N, hq_, D}, act));
  VLPAR_ASSIGN_OR_RETURN(st.lse, scratch(ctx, {hq_, N}, DType::kF32));
  if (cfg_.qk_norm) {
    VLPAR_ASSIGN_OR_RETURN(st.q_raw, scratch(ctx, {N, hq_, D}, act));
    VLPAR_ASSIGN_OR_RETURN(st.k_raw, scratch(ctx, {N, hkv_, D}, act));
    VLPAR_ASSIGN_OR_RETURN(st.q_rstd, scratch(ctx, {N * hq_}, DType::kF32));
    VLPAR_ASSIGN_OR_RETURN(st.k_rstd, scratch(ctx, {N * hkv_}, DType::kF32));
  } else {
    st.q_raw = Tensor();
    st.k_raw = Tensor();
    st.q_rstd = Tensor();
    st.k_rstd = Tensor();
  }
  VLPAR_ASSIGN_OR_RETURN(Tensor hn, scratch(ctx, {Nl, H}, act));
  VLPAR_ASSIGN_OR_RETURN(Tensor partial, scratch(ctx, {N, H}, act));

  VLPAR_RETURN_IF_ERROR(rmsnorm_forward(ctx, hn, st.rstd, x, w_.norm, cfg_.eps));
  VLPAR_RETURN_IF_ERROR(region_enter_forward(tp_, st.h, hn));
  // With qk_norm the projections land in q_raw/k_raw and the per-head RMSNorm (rows = (token, head), width D)
  // writes q/k; without it they land in q/k directly (project_heads). Rotary then runs in place on q/k.
  VLPAR_RETURN_IF_ERROR(project_heads(ctx, ctx, cfg_, st.q, st.q_raw, st.q_rstd, st.h, w_.q, w_.q_norm, hq_));
  VLPAR_RETURN_IF_ERROR(project_heads(ctx, ctx, cfg_, st.k, st.k_raw, st.k_rstd, st.h, w_.k, w_.k_norm, hkv_));
  VLPAR_RETURN_IF_ERROR(linear_forward(ctx, as_shape(st.v, {N, hkv_ * D}), st.h, w_.v, {}));
  VLPAR_RETURN_IF_ERROR(rotary_forward(ctx, st.q, st.q, seq.positions, rd));
  VLPAR_RETURN_IF_ERROR(rotary_forward(ctx, st.k, st.k, seq.positions, rd));
  const VarlenAttentionDesc ad = attention_desc(hq_, hkv_, D);
  VLPAR_RETURN_IF_ERROR(varlen_attention_forward(ctx, st.attn, st.lse, st.q, st.k, st.v, seq.cu_seqlens, ad));
  VLPAR_RETURN_IF_ERROR(linear_forward(ctx, partial, as_shape(st.attn, {N, hq_ * D}), w_.o, {}));
  VLPAR_RETURN_IF_ERROR(region_exit_forward(tp_, out, partial));
  return add_(ctx, out, x);
}

// dw [rows, H] += dyᵀ · h, now or queued for a split backward's W (the closure holds values and views with their
// owners kept: the block need not outlive the queue). A k/v projection (kv) whose heads are replicated over tp
// (tp > H_kv) gets contributions from every rank whose query heads read them, so the local contribution is placed
// in a full-size [H_kv·D, H] buffer, summed over tp, and this rank's rows are added.
Status AttentionBlock::projection_weight_grad(const Context& ctx, TensorView dw, TensorView dy, const Tensor& dy_owner,
                                              const Tensor& h, bool kv) const {
  const bool replicated = kv && kv_head_replicas(cfg_.kv_heads, tp_.size()) > 1;
  if (!replicated || frozen(dw)) return detail::weight_grad_split(ctx, dw, dy, dy_owner, h, h);
  const int64_t D = cfg_.head_dim, H = cfg_.hidden;
  const int64_t rows = int64_t(cfg_.kv_heads) * D, mine_begin = kv_begin_ * D, mine_end = (kv_begin_ + hkv_) * D;
  const TensorView hv = h;
  return detail::weight_work(ctx, {dy_owner, h}, [=, tp = tp_](const Context& c) -> Status {
    VLPAR_ASSIGN_OR_RETURN(Tensor full, scratch_zeros(c, {rows, H}, DType::kF32));
    TensorView mine = full.view().slice(0, mine_begin, mine_end);
    VLPAR_RETURN_IF_ERROR(detail::weight_grad(c, mine, dy, hv));
    VLPAR_RETURN_IF_ERROR(tp_sum_partial_grad(tp, full));
    return add_(c, dw, mine);
  });
}

Status AttentionBlock::backward(const Context& ctx, TensorView dx, TensorView dout, const PackedSeq& seq,
                                const AttentionStash& st, const GradReadyFn& ready) const {
  const char* kName = "attention block backward";
  const int64_t N = seq.num_tokens(), Nl = tp_.local_tokens(N), H = cfg_.hidden, D = cfg_.head_dim;
  VLPAR_ASSIGN_OR_RETURN(const DType act, detail::activation_dtype(kName, "dout", dout, cfg_.activation));
  VLPAR_RETURN_IF_ERROR(check_shape(kName, "dx", dx, {Nl, H}, act));
  VLPAR_RETURN_IF_ERROR(check_shape(kName, "dout", dout, {Nl, H}, act));
  VLPAR_CHECK(st.attn.defined() && st.attn.shape() == Shape({N, hq_, D}) && st.attn.dtype() == act &&
                  st.q_raw.defined() == cfg_.qk_norm,
              "{}: the stash does not come from a {} forward of this block over {} tokens", kName,
              dtype_name(act), N);
  VLPAR_ASSIGN_OR_RETURN(const RotaryDesc rd, detail::rotary_desc_for(kName, cfg_, seq.positions, N));
  VLPAR_RETURN_IF_ERROR(check_grad(kName, "norm grad", g_.norm, {H}));
  VLPAR_RETURN_IF_ERROR(check_grad(kName, "q grad", g_.q, {hq_ * D, H}));
  VLPAR_RETURN_IF_ERROR(check_grad(kName, "k grad", g_.k, {hkv_ * D, H}));
  VLPAR_RETURN_IF_ERROR(check_grad(kName, "v grad", g_.v, {hkv_ * D, H}));
  VLPAR_RETURN_IF_ERROR(check_grad(kName, "o grad", g_.o, {H, hq_ * D}));
  if (cfg_.qk_norm) {
    VLPAR_RETURN_IF_ERROR(check_grad(kName, "q_norm grad", g_.q_norm, {D}));
    VLPAR_RETURN_IF_ERROR(check_grad(kName, "k_norm grad", g_.k_norm, {D}));
  }
  // ready(first_param + offset) once that gradient is final; never for a frozen parameter.
  auto mark = [&](size_t offset, const TensorView& grad) {
    return frozen(grad) ? Status::Ok() : detail::mark_ready(ctx, ready, first_param_ + offset);
  };

  // o projection (row-parallel): dpartial = exit⁻¹(dout); dattn = dpartial · Wo; dWo += dpartialᵀ · attn.
  VLPAR_ASSIGN_OR_RETURN(Tensor dpartial, scratch(ctx, {N, H}, act));
  VLPAR_ASSIGN_OR_RETURN(Tensor dattn, scratch(ctx, {N, hq_, D}, act));
  VLPAR_RETURN_IF_ERROR(region_exit_backward(tp_, dpartial, dout));
  VLPAR_RETURN_IF_ERROR(detail::linear_backward_split(ctx, as_shape(dattn, {N, hq_ * D}), g_.o, {}, dpartial, dpartial,
                                                      as_shape(st.attn, {N, hq_ * D}), st.attn, w_.o));
  VLPAR_RETURN_IF_ERROR(mark(o_offset(cfg_), g_.o));

  VLPAR_ASSIGN_OR_RETURN(Tensor dq, scratch(ctx, {N, hq_, D}, act));
  VLPAR_ASSIGN_OR_RETURN(Tensor dk, scratch(ctx, {N, hkv_, D}, act));
  VLPAR_ASSIGN_OR_RETURN(Tensor dv, scratch(ctx, {N, hkv_, D}, act));
  const VarlenAttentionDesc ad = attention_desc(hq_, hkv_, D);
  VLPAR_RETURN_IF_ERROR(
      varlen_attention_backward(ctx, dq, dk, dv, dattn, st.q, st.k, st.v, st.attn, st.lse, seq.cu_seqlens, ad));
  VLPAR_RETURN_IF_ERROR(rotary_backward(ctx, dq, dq, seq.positions, rd));
  VLPAR_RETURN_IF_ERROR(rotary_backward(ctx, dk, dk, seq.positions, rd));

  // q/k norms: dq_raw = RMSNorm⁻ᵀ(dq) row by row; the [D] weight gradients sum over every (token, head) row.
  // This rank's rows are its heads only, so with tp > 1 the sums are partial and all-reduced over tp. For kv heads
  // replicated over tp > H_kv, each replica's dk holds only its own query heads' part: the all-reduce adds those
  // parts too (the weight gradient is linear in dk). dq_raw/dk_raw replace dq/dk as the projections' gradients.
  Tensor dq_raw, dk_raw;
  if (cfg_.qk_norm) {
    VLPAR_ASSIGN_OR_RETURN(dq_raw, scratch(ctx, {N, hq_, D}, act));
    VLPAR_ASSIGN_OR_RETURN(dk_raw, scratch(ctx, {N, hkv_, D}, act));
    VLPAR_RETURN_IF_ERROR(detail::rmsnorm_backward_tp(ctx, tp_, as_shape(dk_raw, {N * hkv_, D}), g_.k_norm,
                                                      as_shape(dk, {N * hkv_, D}), as_shape(st.k_raw, {N * hkv_, D}),
                                                      w_.k_norm, st.k_rstd, true));
    VLPAR_RETURN_IF_ERROR(mark(kKNormOffset, g_.k_norm));
    VLPAR_RETURN_IF_ERROR(detail::rmsnorm_backward_tp(ctx, tp_, as_shape(dq_raw, {N * hq_, D}), g_.q_norm,
                                                      as_shape(dq, {N * hq_, D}), as_shape(st.q_raw, {N * hq_, D}),
                                                      w_.q_norm, st.q_rstd, true));
    VLPAR_RETURN_IF_ERROR(mark(kQNormOffset, g_.q_norm));
  }
  const TensorView dq_proj = cfg_.qk_norm ? dq_raw.view() : dq.view();
  const TensorView dk_proj = cfg_.qk_norm ? dk_raw.view() : dk.view();

  // dh = dv·Wv + dk·Wk + dq·Wq (the column-parallel input gradient, partial over tp until region_enter⁻¹).
  VLPAR_ASSIGN_OR_RETURN(Tensor dh, scratch(ctx, {N, H}, act));
  const TensorView dv2 = as_shape(dv, {N, hkv_ * D}), dk2 = as_shape(dk_proj, {N, hkv_ * D}),
                   dq2 = as_shape(dq_proj, {N, hq_ * D});
  GemmDesc acc;
  acc.beta = 1.f;
  VLPAR_RETURN_IF_ERROR(gemm(ctx, dh, dv2, w_.v, GemmDesc{}));
  VLPAR_RETURN_IF_ERROR(projection_weight_grad(ctx, g_.v, dv2, dv, st.h, true));
  VLPAR_RETURN_IF_ERROR(mark(3, g_.v));
  VLPAR_RETURN_IF_ERROR(gemm(ctx, dh, dk2, w_.k, acc));
  VLPAR_RETURN_IF_ERROR(projection_weight_grad(ctx, g_.k, dk2, cfg_.qk_norm ? dk_raw : dk, st.h, true));
  VLPAR_RETURN_IF_ERROR(mark(2, g_.k));
  VLPAR_RETURN_IF_ERROR(gemm(ctx, dh, dq2, w_.q, acc));
  VLPAR_RETURN_IF_ERROR(projection_weight_grad(ctx, g_.q, dq2, cfg_.qk_norm ? dq_raw : dq, st.h, false));
  VLPAR_RETURN_IF_ERROR(mark(1, g_.q));

  // Back through region entry and the RMSNorm; under SP the norm weight gradient is a partial sum over tokens.
  VLPAR_RETURN_IF_ERROR(detail::pre_norm_residual_backward(ctx, tp_, dx, g_.norm, dh, dout, st.x, w_.norm, st.rstd));
  return mark(0, g_.norm);
}

}  // namespace vlpar::nn

// ---- incremental decoding ------------------------------------------------------------------------------------

namespace vlpar::nn {

namespace {
Status check_cache(const char* who, const TensorView& kc, const TensorView& vc, int hkv, int64_t D, int64_t row0,
                   int64_t n) {
  VLPAR_CHECK(kc.dtype == DType::kF32 && kc.is_contiguous() && kc.ndim() == 3 && kc.size(1) == hkv && kc.size(2) == D,
              "{}: k_cache must be a contiguous f32 [capacity, {}, {}] tensor, got {}", who, hkv, D, kc.to_string());
  VLPAR_CHECK(vc.shape == kc.shape && vc.dtype == DType::kF32 && vc.is_contiguous(),
              "{}: v_cache {} must be shaped like k_cache {}", who, vc.to_string(), kc.to_string());
  VLPAR_CHECK(row0 >= 0 && row0 + n <= kc.size(0), "{}: cache rows [{}, {}) exceed the capacity {}", who, row0,
              row0 + n, kc.size(0));
  return Status::Ok();
}
}  // namespace

// k/v of n tokens from their normed input h [n, H], into cache rows [row0, row0 + n).
static Status write_kv_rows(const Context& ctx, const TransformerConfig& cfg, const AttentionWeights& w, int hkv,
                            TensorView h, TensorView positions, const RotaryDesc& rd, TensorView kc, TensorView vc,
                            int64_t row0) {
  const int64_t n = h.size(0), D = cfg.head_dim;
  const TensorView kr = kc.slice(0, row0, row0 + n), vr = vc.slice(0, row0, row0 + n);  // [n, hkv, D]
  VLPAR_RETURN_IF_ERROR(linear_forward(ctx, as_shape(vr, {n, hkv * D}), h, w.v, {}));
  VLPAR_ASSIGN_OR_RETURN(Tensor k, scratch(ctx, {n, hkv, D}, DType::kF32));
  Tensor k_raw;
  if (cfg.qk_norm) {
    VLPAR_ASSIGN_OR_RETURN(k_raw, scratch(ctx, {n, hkv * D}, DType::kF32));
  }
  VLPAR_RETURN_IF_ERROR(project_heads(ctx, ctx, cfg, k, k_raw, {}, h, w.k, w.k_norm, hkv));
  return rotary_forward(ctx, kr, k, positions, rd);
}

Status AttentionBlock::fill_kv_cache(const Context& ctx, TensorView x, TensorView positions, TensorView k_cache,
                                     TensorView v_cache, int64_t row0) const {
  const char* kName = "attention block fill_kv_cache";
  VLPAR_CHECK_CODE(!tp_.active(), StatusCode::kNotSupported, "{}: tensor parallelism is not supported for decoding",
                   kName);
  const int64_t n = x.size(0), H = cfg_.hidden, D = cfg_.head_dim;
  VLPAR_RETURN_IF_ERROR(check_shape(kName, "x", x, {n, H}, DType::kF32));
  VLPAR_RETURN_IF_ERROR(check_cache(kName, k_cache, v_cache, hkv_, D, row0, n));
  VLPAR_ASSIGN_OR_RETURN(const RotaryDesc rd, detail::rotary_desc_for(kName, cfg_, positions, n));
  VLPAR_ASSIGN_OR_RETURN(Tensor h, scratch(ctx, {n, H}, DType::kF32));
  VLPAR_RETURN_IF_ERROR(rmsnorm_forward(ctx, h, {}, x, w_.norm, cfg_.eps));
  return write_kv_rows(ctx, cfg_, w_, hkv_, h, positions, rd, k_cache, v_cache, row0);
}

Status AttentionBlock::forward_decode(const Context& ctx, TensorView out, TensorView x, TensorView positions,
                                      TensorView k_cache, TensorView v_cache, int64_t row0) const {
  const char* kName = "attention block forward_decode";
  VLPAR_CHECK_CODE(!tp_.active(), StatusCode::kNotSupported, "{}: tensor parallelism is not supported for decoding",
                   kName);
  const int64_t n = x.size(0), H = cfg_.hidden, D = cfg_.head_dim;
  VLPAR_RETURN_IF_ERROR(check_shape(kName, "x", x, {n, H}, DType::kF32));
  VLPAR_RETURN_IF_ERROR(check_shape(kName, "out", out, {n, H}, DType::kF32));
  VLPAR_CHECK(out.data != x.data, "{}: out must not alias x (the residual is added after the projection)", kName);
  VLPAR_RETURN_IF_ERROR(check_cache(kName, k_cache, v_cache, hkv_, D, row0, n));
  VLPAR_ASSIGN_OR_RETURN(const RotaryDesc rd, detail::rotary_desc_for(kName, cfg_, positions, n));
  Context serial = ctx;
  serial.num_threads = 1;
  auto ctx_for = [&](int64_t work) -> const Context& { return work >= kDecodeParallelWork ? ctx : serial; };
  VLPAR_ASSIGN_OR_RETURN(Tensor h, scratch(ctx, {n, H}, DType::kF32));
  VLPAR_ASSIGN_OR_RETURN(Tensor q, scratch(ctx, {n, hq_, D}, DType::kF32));
  VLPAR_ASSIGN_OR_RETURN(Tensor attn, scratch(ctx, {n, hq_, D}, DType::kF32));
  VLPAR_RETURN_IF_ERROR(rmsnorm_forward(serial, h, {}, x, w_.norm, cfg_.eps));
  Tensor q_raw;
  if (cfg_.qk_norm) {
    VLPAR_ASSIGN_OR_RETURN(q_raw, scratch(ctx, {n, hq_ * D}, DType::kF32));
  }
  VLPAR_RETURN_IF_ERROR(project_heads(ctx_for(w_.q.numel()), serial, cfg_, q, q_raw, {}, h, w_.q, w_.q_norm, hq_));
  VLPAR_RETURN_IF_ERROR(rotary_forward(serial, q, q, positions, rd));
  VLPAR_RETURN_IF_ERROR(write_kv_rows(ctx_for(w_.k.numel()), cfg_, w_, hkv_, h, positions, rd, k_cache, v_cache, row0));
  VLPAR_RETURN_IF_ERROR(
      kv_cache_attention_forward(ctx_for(hq_ * (row0 + n) * D), attn, q, k_cache, v_cache, row0));
  VLPAR_RETURN_IF_ERROR(linear_forward(ctx_for(w_.o.numel()), out, as_shape(attn, {n, hq_ * D}), w_.o, {}));
  return add_(serial, out, x);
}

}  // namespace vlpar::nn
