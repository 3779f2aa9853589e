// Qwen3-VL vision block (optionally tensor-parallel). See include/vlpar/nn/vision_block.hpp.
#include "vlpar/nn/vision_block.hpp"

#include <string>

#include "nn_util.hpp"
#include "vlpar/kernels/activation.hpp"
#include "vlpar/kernels/attention.hpp"
#include "vlpar/kernels/gemm.hpp"
#include "vlpar/kernels/norm.hpp"
#include "vlpar/kernels/rotary.hpp"

namespace vlpar::nn {

using detail::as_shape;
using detail::check_shape;
using detail::scratch;

bool VisionBlockWeights::any() const {
  for (const TensorView* v : {&norm1_w, &norm1_b, &qkv_w, &qkv_b, &proj_w, &proj_b, &norm2_w, &norm2_b, &fc1_w,
                              &fc1_b, &fc2_w, &fc2_b})
    if (!v->empty()) return true;
  return false;
}

VisionBlock::VisionBlock(const VisionConfig& cfg, VisionBlockWeights w, VisionBlockWeights grads, TensorParallel tp)
    : cfg_(cfg), w_(w), g_(grads), tp_(tp), heads_(cfg.heads / tp.size()), hv_(int64_t(heads_) * cfg.head_dim()),
      iv_(cfg.intermediate / tp.size()) {}

namespace {

constexpr const char* kBlockName = "vision block";

RotaryDesc vision_rotary(const VisionConfig& cfg) {
  RotaryDesc d;
  d.kind = RotaryKind::kVision2D;
  d.head_dim = cfg.head_dim();
  d.theta = cfg.rope_theta;
  return d;
}

VarlenAttentionDesc vision_attention(const VisionConfig& cfg, int heads) {
  VarlenAttentionDesc d;
  d.num_heads = heads;
  d.num_kv_heads = heads;
  d.head_dim = cfg.head_dim();
  d.causal = false;  // bidirectional inside each image / frame
  return d;
}

/// Third `which` (0 = q, 1 = k, 2 = v) of a [N, 3·hv] buffer as [N, heads, hd] with token stride 3·hv
/// (HF: qkv(x).reshape(N, 3, heads, hd); hv = heads · hd, this rank's heads under tp).
TensorView qkv_part(const Tensor& qkv, int which, int heads, int hd) {
  const TensorView all = qkv.view();
  const int64_t N = all.size(0), hv = int64_t(heads) * hd;
  TensorView v(static_cast<char*>(all.data) + size_t(which * hv) * dtype_size(all.dtype), all.dtype, {N, heads, hd},
               all.device);
  v.strides[0] = 3 * hv;
  return v;
}

/// A row-parallel linear of the vision block: out [N, Hv] = Σ_tp (a · wᵀ) + b, the bias added once (tp rank 0,
/// before the sum); at tp 1 the one fused linear.
Status row_parallel_forward(const Context& ctx, const TensorParallel& tp, TensorView out, TensorView a, TensorView w,
                            TensorView b) {
  VLPAR_RETURN_IF_ERROR(linear_forward(ctx, out, a, w, tp.rank() == 0 ? b : TensorView{}));
  return tp_sum_partial_grad(tp, out);  // the in-place sum over tp (nothing at tp 1)
}

/// A gradient view is either empty (frozen) or an f32 tensor shaped like its weight.
Status check_grad(const char* what, const TensorView& g, const Shape& want) {
  return detail::check_grad(kBlockName, (std::string(what) + " gradient").c_str(), g, want);
}

bool any_of(std::initializer_list<const TensorView*> vs) {
  for (const TensorView* v : vs)
    if (!v->empty()) return true;
  return false;
}

}  // namespace

Status VisionBlock::check_weights() const {
  VLPAR_RETURN_IF_ERROR(cfg_.validate());
  const int64_t Hv = cfg_.hidden, Iv = cfg_.intermediate;
  struct Entry {
    const char* name;
    const TensorView* w;
    const TensorView* g;
    Shape shape;
  };
  VLPAR_CHECK(!tp_.sequence_parallel, "{}: sequence parallelism is not supported in the vision tower", kBlockName);
  VLPAR_CHECK(cfg_.heads % tp_.size() == 0 && Iv % tp_.size() == 0, "{}: vision tp={} must divide the {} heads and "
              "the MLP width {}", kBlockName, tp_.size(), cfg_.heads, Iv);
  const int64_t hv = hv_, iv = iv_;  // this rank's attention and MLP widths
  const Entry entries[] = {
      {"norm1 weight", &w_.norm1_w, &g_.norm1_w, {Hv}},  {"norm1 bias", &w_.norm1_b, &g_.norm1_b, {Hv}},
      {"qkv weight", &w_.qkv_w, &g_.qkv_w, {3 * hv, Hv}}, {"qkv bias", &w_.qkv_b, &g_.qkv_b, {3 * hv}},
      {"proj weight", &w_.proj_w, &g_.proj_w, {Hv, hv}}, {"proj bias", &w_.proj_b, &g_.proj_b, {Hv}},
      {"norm2 weight", &w_.norm2_w, &g_.norm2_w, {Hv}},  {"norm2 bias", &w_.norm2_b, &g_.norm2_b, {Hv}},
      {"fc1 weight", &w_.fc1_w, &g_.fc1_w, {iv, Hv}},    {"fc1 bias", &w_.fc1_b, &g_.fc1_b, {iv}},
      {"fc2 weight", &w_.fc2_w, &g_.fc2_w, {Hv, iv}},    {"fc2 bias", &w_.fc2_b, &g_.fc2_b, {Hv}},
  };
  for (const Entry& e : entries) {
    VLPAR_RETURN_IF_ERROR(detail::check_weight(kBlockName, e.name, *e.w, e.shape));
    VLPAR_RETURN_IF_ERROR(check_grad(e.name, *e.g, e.shape));
  }
  return Status::Ok();
}

Status VisionBlock::forward(const Context& ctx, TensorView out, TensorView x, const VisionSeq& seq,
                            VisionBlockStash& st) const {
  VLPAR_RETURN_IF_ERROR(check_weights());
  const int64_t N = seq.num_patches, Hv = cfg_.hidden, Iv = iv_, hv = hv_;
  const int heads = heads_, hd = cfg_.head_dim();
  VLPAR_ASSIGN_OR_RETURN(const DType act, detail::activation_dtype(kBlockName, "x", x, cfg_.activation));
  VLPAR_RETURN_IF_ERROR(check_shape(kBlockName, "x", x, {N, Hv}, act));
  VLPAR_RETURN_IF_ERROR(check_shape(kBlockName, "out", out, {N, Hv}, act));
  VLPAR_CHECK(out.data != x.data, "{}: out may not alias x", kBlockName);

  st.x = x;
  VLPAR_ASSIGN_OR_RETURN(st.mean1, scratch(ctx, {N}, DType::kF32));
  VLPAR_ASSIGN_OR_RETURN(st.rstd1, scratch(ctx, {N}, DType::kF32));
  VLPAR_ASSIGN_OR_RETURN(st.h1, scratch(ctx, {N, Hv}, act));
  VLPAR_ASSIGN_OR_RETURN(st.qkv, scratch(ctx, {N, 3 * hv}, act));
  VLPAR_ASSIGN_OR_RETURN(st.attn, scratch(ctx, {N, heads, hd}, act));
  VLPAR_ASSIGN_OR_RETURN(st.lse, scratch(ctx, {heads, N}, DType::kF32));
  VLPAR_ASSIGN_OR_RETURN(st.x1, scratch(ctx, {N, Hv}, act));
  VLPAR_ASSIGN_OR_RETURN(st.mean2, scratch(ctx, {N}, DType::kF32));
  VLPAR_ASSIGN_OR_RETURN(st.rstd2, scratch(ctx, {N}, DType::kF32));
  VLPAR_ASSIGN_OR_RETURN(st.h2, scratch(ctx, {N, Hv}, act));
  VLPAR_ASSIGN_OR_RETURN(st.f1, scratch(ctx, {N, Iv}, act));
  VLPAR_ASSIGN_OR_RETURN(st.act, scratch(ctx, {N, Iv}, act));

  // Attention half.
  VLPAR_RETURN_IF_ERROR(layernorm_forward(ctx, st.h1, st.mean1, st.rstd1, x, w_.norm1_w, w_.norm1_b, cfg_.eps));
  VLPAR_RETURN_IF_ERROR(linear_forward(ctx, st.qkv, st.h1, w_.qkv_w, w_.qkv_b));
  const TensorView q = qkv_part(st.qkv, 0, heads, hd), k = qkv_part(st.qkv, 1, heads, hd);
  const TensorView v = qkv_part(st.qkv, 2, heads, hd);
  const RotaryDesc rd = vision_rotary(cfg_);
  VLPAR_RETURN_IF_ERROR(rotary_forward(ctx, q, q, seq.positions, rd));
  VLPAR_RETURN_IF_ERROR(rotary_forward(ctx, k, k, seq.positions, rd));
  VLPAR_RETURN_IF_ERROR(
      varlen_attention_forward(ctx, st.attn, st.lse, q, k, v, seq.cu_seqlens, vision_attention(cfg_, heads)));
  VLPAR_RETURN_IF_ERROR(row_parallel_forward(ctx, tp_, st.x1, as_shape(st.attn, {N, hv}), w_.proj_w, w_.proj_b));
  VLPAR_RETURN_IF_ERROR(add_(ctx, st.x1, x));

  // MLP half.
  VLPAR_RETURN_IF_ERROR(layernorm_forward(ctx, st.h2, st.mean2, st.rstd2, st.x1, w_.norm2_w, w_.norm2_b, cfg_.eps));
  VLPAR_RETURN_IF_ERROR(linear_forward(ctx, st.f1, st.h2, w_.fc1_w, w_.fc1_b));
  VLPAR_RETURN_IF_ERROR(gelu_forward(ctx, st.act, st.f1, GeluKind::kTanh));
  VLPAR_RETURN_IF_ERROR(row_parallel_forward(ctx, tp_, out, st.act, w_.fc2_w, w_.fc2_b));
  return add_(ctx, out, st.x1);
}

Status VisionBlock::backward(const Context& ctx, TensorView dx, TensorView dout, const VisionSeq& seq,
                             const VisionBlockStash& st) const {
  const int64_t N = seq.num_patches, Hv = cfg_.hidden, Iv = iv_, hv = hv_;
  const int heads = heads_, hd = cfg_.head_dim();
  VLPAR_ASSIGN_OR_RETURN(const DType act, detail::activation_dtype(kBlockName, "dout", dout, cfg_.activation));
  VLPAR_RETURN_IF_ERROR(check_shape(kBlockName, "dout", dout, {N, Hv}, act));
  if (!dx.empty()) {
    VLPAR_RETURN_IF_ERROR(check_shape(kBlockName, "dx", dx, {N, Hv}, act));
    VLPAR_CHECK(dx.data != dout.data, "{}: dx may not alias dout", kBlockName);
  }
  VLPAR_CHECK(st.attn.defined() && st.attn.shape() == Shape({N, heads, hd}) && st.attn.dtype() == act &&
                  st.act.defined(),
              "{}: the stash does not come from a forward over {} patches", kBlockName, N);

  // What has to be computed, from the top down: a gradient flows to a point only if something at or below it
  // (a trainable parameter or the caller's dx) needs it.
  const bool need_dx = !dx.empty();
  const bool need_dh1 = need_dx || any_of({&g_.norm1_w, &g_.norm1_b});
  const bool need_dqkv = need_dh1 || any_of({&g_.qkv_w, &g_.qkv_b});
  const bool need_dx1 = need_dqkv || any_of({&g_.proj_w, &g_.proj_b});
  const bool need_dh2 = need_dx1 || any_of({&g_.norm2_w, &g_.norm2_b});
  const bool need_df1 = need_dh2 || any_of({&g_.fc1_w, &g_.fc1_b});

  // MLP half: out = x1 + fc2(gelu(fc1(h2))).
  Tensor dact, df1, dh2, dx1;
  if (need_df1) {
    VLPAR_ASSIGN_OR_RETURN(dact, scratch(ctx, {N, Iv}, act));
  }
  VLPAR_RETURN_IF_ERROR(linear_backward(ctx, dact, g_.fc2_w, g_.fc2_b, dout, st.act, w_.fc2_w));
  if (!need_df1) return Status::Ok();
  VLPAR_ASSIGN_OR_RETURN(df1, scratch(ctx, {N, Iv}, act));
  VLPAR_RETURN_IF_ERROR(gelu_backward(ctx, df1, dact, st.f1, GeluKind::kTanh));
  if (need_dh2) {
    VLPAR_ASSIGN_OR_RETURN(dh2, scratch(ctx, {N, Hv}, act));
  }
  VLPAR_RETURN_IF_ERROR(linear_backward(ctx, dh2, g_.fc1_w, g_.fc1_b, df1, st.h2, w_.fc1_w));
  if (!need_dh2) return Status::Ok();
  VLPAR_RETURN_IF_ERROR(tp_sum_partial_grad(tp_, dh2));  // Σ over tp of the column-parallel parts
  VLPAR_ASSIGN_OR_RETURN(dx1, scratch(ctx, {N, Hv}, act));
  VLPAR_RETURN_IF_ERROR(
      layernorm_backward(ctx, dx1, g_.norm2_w, g_.norm2_b, dh2, st.x1, w_.norm2_w, st.mean2, st.rstd2));
  if (!need_dx1) return Status::Ok();
  VLPAR_RETURN_IF_ERROR(add_(ctx, dx1, dout));  // the residual path

  // Attention half: x1 = x + proj(attn(rot(q), rot(k), v)).
  Tensor dattn, dqkv, dh1, dxs;
  if (need_dqkv) {
    VLPAR_ASSIGN_OR_RETURN(dattn, scratch(ctx, {N, heads, hd}, act));
  }
  VLPAR_RETURN_IF_ERROR(linear_backward(ctx, dattn.defined() ? as_shape(dattn, {N, hv}) : TensorView{}, g_.proj_w,
                                        g_.proj_b, dx1, as_shape(st.attn, {N, hv}), w_.proj_w));
  if (!need_dqkv) return Status::Ok();
  VLPAR_ASSIGN_OR_RETURN(dqkv, scratch(ctx, {N, 3 * hv}, act));
  const TensorView dq = qkv_part(dqkv, 0, heads, hd), dk = qkv_part(dqkv, 1, heads, hd);
  const TensorView dv = qkv_part(dqkv, 2, heads, hd);
  VLPAR_RETURN_IF_ERROR(varlen_attention_backward(ctx, dq, dk, dv, dattn, qkv_part(st.qkv, 0, heads, hd),
                                                  qkv_part(st.qkv, 1, heads, hd), qkv_part(st.qkv, 2, heads, hd),
                                                  st.attn, st.lse, seq.cu_seqlens, vision_attention(cfg_, heads)));
  const RotaryDesc rd = vision_rotary(cfg_);
  VLPAR_RETURN_IF_ERROR(rotary_backward(ctx, dq, dq, seq.positions, rd));
  VLPAR_RETURN_IF_ERROR(rotary_backward(ctx, dk, dk, seq.positions, rd));
  if (need_dh1) {
    VLPAR_ASSIGN_OR_RETURN(dh1, scratch(ctx, {N, Hv}, act));
  }
  VLPAR_RETURN_IF_ERROR(linear_backward(ctx, dh1, g_.qkv_w, g_.qkv_b, dqkv, st.h1, w_.qkv_w));
  if (!need_dh1) return Status::Ok();
  VLPAR_RETURN_IF_ERROR(tp_sum_partial_grad(tp_, dh1));  // Σ over tp of the column-parallel parts
  TensorView dxv = dx;
  if (!need_dx) {  // only the LN1 parameters want this gradient; its input gradient goes to a scratch
    VLPAR_ASSIGN_OR_RETURN(dxs, scratch(ctx, {N, Hv}, act));
    dxv = dxs;
  }
  VLPAR_RETURN_IF_ERROR(
      layernorm_backward(ctx, dxv, g_.norm1_w, g_.norm1_b, dh1, st.x, w_.norm1_w, st.mean1, st.rstd1));
  if (!need_dx) return Status::Ok();
  return add_(ctx, dx, dx1);  // the residual path
}

}  // namespace vlpar::nn
