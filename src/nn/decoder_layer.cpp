// One decoder layer (attention + dense MLP or MoE) as an nn::Layer. See include/vlpar/nn/decoder_layer.hpp.
#include "vlpar/nn/decoder_layer.hpp"

#include "nn_util.hpp"

namespace vlpar::nn {

Status DecoderLayer::feed_forward(const Context& ctx, TensorView out, const PackedSeq& seq, Stash& st,
                                  RouterAuxStats* stats) const {
  if (moe_) return moe_->forward(ctx, out, st.mid, seq.num_tokens(), st.moe, stats, seq.cu_seqlens);
  return mlp_->forward(ctx, out, st.mid, seq.num_tokens(), st.mlp);
}

Status DecoderLayer::forward(const Context& ctx, TensorView out, TensorView in, const PackedSeq& seq,
                             Stash& st) const {
  VLPAR_ASSIGN_OR_RETURN(st.mid, detail::scratch(ctx, {in.size(0), in.size(1)}, in.dtype));
  VLPAR_RETURN_IF_ERROR(attn_.forward(ctx, st.mid, in, seq, st.attn));
  VLPAR_RETURN_IF_ERROR(feed_forward(ctx, out, seq, st, moe_loss_.stats));
  if (moe_ && moe_loss_.load) {  // indices [N, K] i32, ids checked by the router
    const TensorView idx = st.moe.indices;
    for (int64_t i = 0; i < idx.numel(); ++i) moe_loss_.load[idx.ptr<int32_t>()[i]] += 1.0;
  }
  if (moe_ && moe_loss_.dropped) *moe_loss_.dropped += double(st.moe.dispatch.dropped);
  return Status::Ok();
}

Status DecoderLayer::backward(const Context& ctx, TensorView dx, TensorView dout, const PackedSeq& seq, Stash& st,
                              const GradReadyFn& ready) const {
  VLPAR_ASSIGN_OR_RETURN(Tensor dmid, detail::scratch(ctx, {dout.size(0), dout.size(1)}, dout.dtype));
  if (moe_) {
    VLPAR_RETURN_IF_ERROR(
        moe_->backward(ctx, dmid, dout, seq.num_tokens(), st.moe, ready,
                       RouterLossGrads{moe_loss_.stats, moe_loss_.grad, moe_loss_.grad_z, moe_loss_.grad_seq_aux}));
  } else {
    VLPAR_RETURN_IF_ERROR(mlp_->backward(ctx, dmid, dout, seq.num_tokens(), st.mlp, ready));
  }
  return attn_.backward(ctx, dx, dmid, seq, st.attn, ready);
}

void DecoderLayer::drop(Stash& st, Recompute mode) const {
  if (mode == Recompute::kNone) return;
  st.mlp = MlpStash{};
  st.moe = MoeStash{};
  if (mode == Recompute::kFull) st = Stash{};
}

Status DecoderLayer::recompute(const Context& ctx, TensorView in, const PackedSeq& seq, Stash& st,
                               Recompute mode) const {
  if (mode == Recompute::kNone) return Status::Ok();
  if (mode == Recompute::kFull) {
    VLPAR_ASSIGN_OR_RETURN(st.mid, detail::scratch(ctx, {in.size(0), in.size(1)}, in.dtype));
    VLPAR_RETURN_IF_ERROR(attn_.forward(ctx, st.mid, in, seq, st.attn));
  }
  // The layer output is not needed again (the next layer's backward is done): write it to scratch. The step's
  // router statistics are final already, so the MoE forward does not add to them again.
  VLPAR_ASSIGN_OR_RETURN(Tensor scratch, detail::scratch(ctx, {in.size(0), in.size(1)}, in.dtype));
  return feed_forward(ctx, scratch, seq, st, nullptr);
}

int64_t DecoderLayer::stash_bytes(int64_t tokens, Recompute mode) const {
  if (mode == Recompute::kFull) return 0;
  // Every stash tensor of AttentionStash, MlpStash / MoeStash and mid (the blocks' headers): activations in the
  // config's activation dtype (a bytes), statistics, router tensors and indices 4 bytes.
  const int64_t N = tokens, Nl = tp_.local_tokens(N), H = cfg_.hidden, D = cfg_.head_dim;
  const int64_t hq = attn_.local_heads(), hkv = attn_.local_kv_heads(), a = int64_t(dtype_size(cfg_.activation));
  int64_t bytes = a * Nl * H;                                                    // mid
  bytes += 4 * (Nl + hq * N);                                                    // rstd, lse
  bytes += a * (N * H + N * hq * D + 2 * N * hkv * D + N * hq * D);              // h, q, k, v, attn
  if (cfg_.qk_norm) bytes += a * (N * hq * D + N * hkv * D) + 4 * (N * hq + N * hkv);  // q_raw, k_raw; q/k rstd
  if (mode == Recompute::kSelective) return bytes;
  if (moe_) {
    // R = N_loc·K expert rows (· etp gathered, each of width I / etp): exact without expert parallelism, balanced
    // routing assumed with it (the rows a rank's experts receive depend on the router).
    const MoeConfig& m = moe_->moe_config();
    const int T = moe_->expert_parallel().etp_size();
    const int64_t E = m.num_experts, K = m.top_k, I = m.intermediate / T, Rl = Nl * K, R = Rl * T;
    const int P = moe_->expert_parallel().size();
    bytes += 4 * (Nl + Nl * E + Nl * K + Nl * K + Nl) + a * Nl * H;  // rstd, probs, weights, indices, lse; h
    bytes += 4 * R + a * (R * 2 * I + R * I);          // row weights; gate|up, act (the experts' rows)
    bytes += 4 * 2 * Rl + (P > 1 ? 4 * Rl : 0);        // row → token / assignment; under EP the received order
    bytes += 8 * (E + 1) + 4 * 2 * Rl + 8 * (2 * P + E + E / P + 1);  // host plan (ExpertDispatch::host_bytes)
    if (T > 1) bytes += 4 * (3 * R) + 8 * (T * (E / P + 1) + E / P + 1);  // the etp layout (ExpertTpRows)
  } else {
    const int64_t Il = cfg_.intermediate / tp_.size();
    bytes += 4 * Nl + a * (N * H + N * 2 * Il + N * Il);  // rstd; h, gate|up, act
  }
  return bytes;
}

int64_t DecoderLayer::weight_stash_bytes(int64_t tokens) const {
  const int64_t N = tokens, H = cfg_.hidden, D = cfg_.head_dim, a = int64_t(dtype_size(cfg_.activation));
  const int64_t hq = attn_.local_heads(), hkv = attn_.local_kv_heads();
  int64_t bytes = a * (2 * N * H + 2 * N * hq * D + 2 * N * hkv * D);  // h, dpartial; attn, dq; dk, dv
  if (moe_) {
    const MoeConfig& m = moe_->moe_config();
    const int T = moe_->expert_parallel().etp_size();  // rows gathered over etp, each of width I / etp
    const int64_t Nl = tp_.local_tokens(N), E = m.num_experts, I = m.intermediate / T, R = Nl * m.top_k * T;
    return bytes + a * (R * I + 2 * R * H + 2 * R * I + Nl * H) + 4 * Nl * E;  // act, dyp, hp, dgu, h; dlogits
  }
  const int64_t Il = cfg_.intermediate / tp_.size();
  return bytes + a * (2 * N * H + 3 * N * Il);  // h, dpartial; act, d(gate|up)
}

double DecoderLayer::flops(const PackedSeq& seq) const {
  const double N = double(seq.num_tokens()), H = double(cfg_.hidden), D = double(cfg_.head_dim);
  const double hq = attn_.local_heads(), hkv = attn_.local_kv_heads();
  double f = 2 * N * H * (hq + 2 * hkv) * D + 2 * N * hq * D * H;  // q, k, v, o
  if (moe_) {
    const MoeConfig& m = moe_->moe_config();
    const double E = m.num_experts, K = m.top_k, I = double(m.intermediate);
    const double Nm = double(tp_.local_tokens(seq.num_tokens()));  // the rows this rank routes
    f += 2 * Nm * H * E + K * (2 * Nm * H * 2 * I + 2 * Nm * I * H);  // router, K experts' gate|up and down
  } else {
    const double Il = double(cfg_.intermediate / tp_.size());
    f += 2 * N * H * 2 * Il + 2 * N * Il * H;  // gate|up, down
  }
  const TensorView cu = seq.cu_seqlens;
  for (int64_t s = 0; s + 1 < cu.numel(); ++s) {
    const double len = double(index_at(cu, s + 1) - index_at(cu, s));
    f += 4 * D * hq * len * (len + 1) / 2;  // QKᵀ and PV over the causal pairs
  }
  return f;
}

}  // namespace vlpar::nn
