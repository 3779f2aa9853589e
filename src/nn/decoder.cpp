// Decoder-only transformer stack. See include/vlpar/nn/decoder.hpp.
#include "vlpar/nn/decoder.hpp"

#include <fmt/core.h>

#include "nn_util.hpp"

namespace vlpar::nn {

using detail::scratch;

size_t DecoderModel::params_per_layer(const TransformerConfig& cfg) { return AttentionBlock::num_params(cfg) + 3; }

std::vector<ParamShard> DecoderModel::param_layout(const TransformerConfig& cfg, int tp, int rank,
                                                   bool sequence_parallel) {
  const int64_t H = cfg.hidden, D = cfg.head_dim, I = cfg.intermediate, V = cfg.vocab;
  const InitRule w = InitRule::normal(0.f, cfg.init_std), ones = InitRule::ones();
  const Range vocab = even_shard(V, tp, rank), heads = even_shard(cfg.heads, tp, rank),
              kv = kv_head_shard(cfg.kv_heads, tp, rank), inter = even_shard(I, tp, rank);
  const bool sp = sequence_parallel && tp > 1;
  const bool kv_summed = kv_head_replicas(cfg.kv_heads, tp) > 1;
  std::vector<ParamShard> out;
  auto id = [&]() { return uint32_t(out.size()); };
  out.push_back(make_split_param("model.embed_tokens.weight", {V, H}, 0, vocab, id(), w));
  for (int l = 0; l < cfg.num_layers; ++l) {
    const std::string p = fmt::format("model.layers.{}.", l);
    out.push_back(make_replicated_param(p + "input_layernorm.weight", {H}, id(), ones));
    out.back().grad_summed_over_tp = sp;
    out.push_back(make_split_param(p + "self_attn.q_proj.weight", {cfg.heads * D, H}, 0,
                                   {heads.begin * D, heads.end * D}, id(), w));
    for (const char* name : {"self_attn.k_proj.weight", "self_attn.v_proj.weight"}) {
      out.push_back(make_split_param(p + name, {cfg.kv_heads * D, H}, 0, {kv.begin * D, kv.end * D}, id(), w));
      out.back().grad_summed_over_tp = kv_summed;
    }
    if (cfg.qk_norm) {
      // Each rank normalises only its own heads, so the [D] weight gradient is a partial sum whenever tp > 1.
      for (const char* name : {"self_attn.q_norm.weight", "self_attn.k_norm.weight"}) {
        out.push_back(make_replicated_param(p + name, {D}, id(), ones));
        out.back().grad_summed_over_tp = tp > 1;
      }
    }
    out.push_back(make_split_param(p + "self_attn.o_proj.weight", {H, cfg.heads * D}, 1,
                                   {heads.begin * D, heads.end * D}, id(), w));
    out.push_back(make_replicated_param(p + "post_attention_layernorm.weight", {H}, id(), ones));
    out.back().grad_summed_over_tp = sp;
    out.push_back(make_fused_gate_up_param(p + "mlp.gate_up_proj.weight", I, H, inter, id(), w));
    out.push_back(make_split_param(p + "mlp.down_proj.weight", {H, I}, 1, inter, id(), w));
  }
  out.push_back(make_replicated_param("model.norm.weight", {H}, id(), ones));
  out.back().grad_summed_over_tp = sp;
  if (!cfg.tie_word_embeddings) out.push_back(make_split_param("lm_head.weight", {V, H}, 0, vocab, id(), w));
  return out;
}

Result<DecoderModel> DecoderModel::create(const Context& ctx, const TransformerConfig& cfg, TensorParallel tp,
                                          uint64_t seed, Allocator& alloc) {
  VLPAR_RETURN_IF_ERROR(cfg.validate_tp(tp.size()));
  DecoderModel m;
  m.cfg_ = cfg;
  m.tp_ = tp;
  m.layout_ = param_layout(cfg, tp.size(), tp.rank(), tp.sequence_parallel);
  m.vocab_block_ = even_shard(cfg.vocab, tp.size(), tp.rank());
  // Parameters are stored in the activation dtype (a bf16 model, as HF's); their gradients are f32.
  for (const ParamShard& p : m.layout_)
    VLPAR_RETURN_IF_ERROR(m.reg_.add(p, "language_model", cfg.activation).status());
  VLPAR_RETURN_IF_ERROR(m.reg_.materialize(ctx, alloc, seed));
  return m;
}

std::vector<TensorView> DecoderModel::params() const {
  std::vector<TensorView> v;
  for (size_t i = 0; i < reg_.size(); ++i) v.push_back(reg_.value(i));
  return v;
}

std::vector<TensorView> DecoderModel::grads() const {
  std::vector<TensorView> v;
  for (size_t i = 0; i < reg_.size(); ++i) v.push_back(reg_.grad(i));
  return v;
}

std::vector<size_t> DecoderModel::backward_order() const {
  std::vector<size_t> order;
  for (size_t i = reg_.size(); i-- > 0;) order.push_back(i);
  return order;
}

Status DecoderModel::zero_grads() { return reg_.zero_grads(); }

AttentionBlock DecoderModel::attention(int l) const {
  const size_t b = layer_base(l), o = b + AttentionBlock::o_offset(cfg_);
  auto pick = [&](auto t) {
    AttentionWeights a{t(b), t(b + 1), t(b + 2), t(b + 3), t(o), {}, {}};
    if (cfg_.qk_norm) {
      a.q_norm = t(b + AttentionBlock::kQNormOffset);
      a.k_norm = t(b + AttentionBlock::kKNormOffset);
    }
    return a;
  };
  return AttentionBlock(cfg_, tp_, pick(value()), pick(grad()), b);
}

MlpBlock DecoderModel::mlp(int l) const {
  const size_t b = layer_base(l) + AttentionBlock::num_params(cfg_);
  auto pick = [&](auto t) { return MlpWeights{t(b), t(b + 1), t(b + 2)}; };
  return MlpBlock(cfg_, tp_, pick(value()), pick(grad()), b);
}

LmHead DecoderModel::head() const {
  const size_t fn = layer_base(cfg_.num_layers), w = cfg_.tie_word_embeddings ? 0 : fn + 1;
  return LmHead(cfg_, tp_, LmHeadWeights{reg_.value(fn), reg_.value(w)}, LmHeadWeights{reg_.grad(fn), reg_.grad(w)},
                fn);
}

DecoderLayer DecoderModel::layer(int l) const {
  return DecoderLayer(cfg_, tp_, attention(l), mlp(l), ParamRange{layer_base(l), params_per_layer(cfg_)});
}

LayerStack<DecoderLayer> DecoderModel::layers() const {
  std::vector<DecoderLayer> v;
  for (int l = 0; l < cfg_.num_layers; ++l) v.push_back(layer(l));
  return LayerStack<DecoderLayer>(std::move(v), recompute_);
}

Result<CrossEntropyResult> DecoderModel::forward(const Context& ctx, const Batch& batch, DecoderStash& st) const {
  VLPAR_RETURN_IF_ERROR(batch.validate());
  const int64_t N = batch.num_tokens(), Nl = tp_.local_tokens(N), H = cfg_.hidden;
  VLPAR_ASSIGN_OR_RETURN(st.targets, causal_targets(ctx, batch, cfg_.ignore_index));
  const PackedSeq s = seq(batch, st);
  VLPAR_CHECK(!tp_.sp() || N % tp_.size() == 0,
              "decoder forward: {} tokens do not split evenly over tp={} for sequence parallelism", N, tp_.size());
  VLPAR_ASSIGN_OR_RETURN(st.embed, scratch(ctx, {Nl, H}, cfg_.activation));
  VLPAR_RETURN_IF_ERROR(vocab_parallel_embedding_forward(ctx, tp_, st.embed, reg_.value(0), batch.input_ids,
                                                         vocab_block_, cfg_.vocab));
  VLPAR_ASSIGN_OR_RETURN(const TensorView last, layers().forward(ctx, st.embed, s, st.layers));
  return head().forward(ctx, last, st.targets.labels, st.head);
}

Status DecoderModel::backward(const Context& ctx, const Batch& batch, DecoderStash& st, float grad_loss,
                              const GradReadyFn& ready) const {
  const int64_t N = batch.num_tokens(), Nl = tp_.local_tokens(N), H = cfg_.hidden;
  VLPAR_CHECK(st.layers.inputs.size() == size_t(cfg_.num_layers + 1) && st.embed.shape() == Shape({Nl, H}),
              "decoder backward: the stash does not come from a forward over this batch");
  VLPAR_ASSIGN_OR_RETURN(Tensor ga, scratch(ctx, {Nl, H}, cfg_.activation));
  VLPAR_ASSIGN_OR_RETURN(Tensor dx, scratch(ctx, {Nl, H}, cfg_.activation));
  VLPAR_RETURN_IF_ERROR(head().backward(ctx, ga, st.targets.labels, st.head, grad_loss, ready));
  VLPAR_RETURN_IF_ERROR(layers().backward(ctx, dx, ga, seq(batch, st), st.layers, ready));
  VLPAR_RETURN_IF_ERROR(
      vocab_parallel_embedding_backward(ctx, tp_, reg_.grad(0), dx, batch.input_ids, vocab_block_));
  return ready ? ready(0) : Status::Ok();
}

}  // namespace vlpar::nn
