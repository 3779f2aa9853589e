// One decoder layer (attention + MLP) as an nn::Layer. See include/vlpar/nn/decoder_layer.hpp.
#include "vlpar/nn/decoder_layer.hpp"

#include "nn_util.hpp"

namespace vlpar::nn {

Status DecoderLayer::forward(const Context& ctx, TensorView out, TensorView in, const PackedSeq& seq,
                             Stash& st) const {
  VLPAR_ASSIGN_OR_RETURN(st.mid, detail::scratch(ctx, {in.size(0), in.size(1)}));
  VLPAR_RETURN_IF_ERROR(attn_.forward(ctx, st.mid, in, seq, st.attn));
  return mlp_.forward(ctx, out, st.mid, seq.num_tokens(), st.mlp);
}

Status DecoderLayer::backward(const Context& ctx, TensorView dx, TensorView dout, const PackedSeq& seq, Stash& st,
                              const GradReadyFn& ready) const {
  VLPAR_ASSIGN_OR_RETURN(Tensor dmid, detail::scratch(ctx, {dout.size(0), dout.size(1)}));
  VLPAR_RETURN_IF_ERROR(mlp_.backward(ctx, dmid, dout, seq.num_tokens(), st.mlp, ready));
  return attn_.backward(ctx, dx, dmid, seq, st.attn, ready);
}

int64_t DecoderLayer::stash_bytes(int64_t tokens) const {
  // Every stash tensor of AttentionStash, MlpStash and mid (attention_block.hpp, mlp_block.hpp), f32.
  const int64_t N = tokens, Nl = tp_.local_tokens(N), H = cfg_.hidden, D = cfg_.head_dim;
  const int64_t hq = attn_.local_heads(), hkv = attn_.local_kv_heads(), Il = cfg_.intermediate / tp_.size();
  int64_t floats = Nl * H;                                             // mid
  floats += Nl + N * H + N * hq * D + 2 * N * hkv * D + N * hq * D + hq * N;  // rstd, h, q, k, v, attn, lse
  if (cfg_.qk_norm) floats += N * hq * D + N * hkv * D + N * hq + N * hkv;     // q_raw, k_raw, q/k rstd
  floats += Nl + N * H + N * 2 * Il + N * Il;                          // MLP: rstd, h, gate|up, act
  return floats * int64_t(sizeof(float));
}

double DecoderLayer::flops(const PackedSeq& seq) const {
  const double N = double(seq.num_tokens()), H = double(cfg_.hidden), D = double(cfg_.head_dim);
  const double hq = attn_.local_heads(), hkv = attn_.local_kv_heads(), Il = double(cfg_.intermediate / tp_.size());
  double f = 2 * N * H * (hq + 2 * hkv) * D + 2 * N * hq * D * H;  // q, k, v, o
  f += 2 * N * H * 2 * Il + 2 * N * Il * H;                          // gate|up, down
  const TensorView cu = seq.cu_seqlens;
  for (int64_t s = 0; s + 1 < cu.numel(); ++s) {
    const auto at = [&](int64_t i) {
      return cu.dtype == DType::kI64 ? double(cu.ptr<int64_t>()[i]) : double(cu.ptr<int32_t>()[i]);
    };
    const double len = at(s + 1) - at(s);
    f += 4 * D * hq * len * (len + 1) / 2;  // QKᵀ and PV over the causal pairs
  }
  return f;
}

}  // namespace vlpar::nn
