#pragma once
// A decoder-only transformer stack built from the nn blocks, its parameters in a ParamRegistry (DESIGN §2, the
// same machinery as examples/qwen3vl and examples/minimal_decoder: the optimizer, gradient reduction and
// checkpoints read the registry):
//   vocab-parallel embedding → num_layers × (AttentionBlock → MlpBlock) → LmHead (final RMSNorm → vocab-parallel
//   LM head + cross-entropy, mean over labels != ignore_index).
// Parameters, in this order (the model-wide param index used by GradReadyFn and every list below), with
// P = 8 per layer, or 10 with cfg.qk_norm (q_norm/k_norm sit between v_proj and o_proj, and o_proj and the MLP
// move up by 2):
//   0                  model.embed_tokens.weight                   [V, H]        rows split over tp
//   1 + Pl + 0         model.layers.l.input_layernorm.weight       [H]           replicated
//   1 + Pl + 1..3      model.layers.l.self_attn.{q,k,v}_proj.weight [·, H]       column-parallel (GQA kv heads)
//  (1 + Pl + 4, 5      model.layers.l.self_attn.{q,k}_norm.weight  [D]           replicated; qk_norm only)
//   1 + Pl + 4 (6)     model.layers.l.self_attn.o_proj.weight      [H, heads·D]  row-parallel
//   1 + Pl + 5 (7)     model.layers.l.post_attention_layernorm.weight [H]        replicated
//   1 + Pl + 6 (8)     model.layers.l.mlp.gate_up_proj.weight      [2I, H]       fused column-parallel (gate rows
//                                                                                 0..I, up rows I..2I of HF's two)
//   1 + Pl + 7 (9)     model.layers.l.mlp.down_proj.weight         [H, I]        row-parallel
//   1 + PL             model.norm.weight                           [H]           replicated
//   2 + PL             lm_head.weight                              [V, H]        rows split over tp; absent when
//                                                                                 cfg.tie_word_embeddings (the head
//                                                                                 then uses embed_tokens.weight)
// Init: every parameter is init_param_shard(seed, param index) of its full logical shape (norms ones, the rest
// normal(0, init_std)), so the same seed gives the same full model at any tp. backward() reports gradients in
// exactly the reverse of this order (the order DDP buckets want); tied, embed_tokens is reported last, once both
// its uses have added their gradients.
// Rotary: cfg.rope (1D, or interleaved MRoPE with positions [3, N_tok]).
#include <cstdint>
#include <vector>

#include "vlpar/core/allocator.hpp"
#include "vlpar/core/batch.hpp"
#include "vlpar/core/context.hpp"
#include "vlpar/core/tensor.hpp"
#include "vlpar/kernels/cross_entropy.hpp"
#include "vlpar/nn/attention_block.hpp"
#include "vlpar/nn/block.hpp"
#include "vlpar/nn/config.hpp"
#include "vlpar/nn/decoder_layer.hpp"
#include "vlpar/nn/layer.hpp"
#include "vlpar/nn/lm_head.hpp"
#include "vlpar/nn/mlp_block.hpp"
#include "vlpar/nn/param_registry.hpp"
#include "vlpar/core/shard.hpp"
#include "vlpar/nn/tensor_parallel.hpp"
#include "vlpar/nn/vocab_parallel.hpp"

namespace vlpar::nn {

/// Everything backward needs, for one micro-batch. The batch must outlive it.
struct DecoderStash {
  CausalTargets targets;                    // i32 cu_seqlens and the labels shifted within each sample
  Tensor embed;                             // [N_loc, H] the embedding output (the first layer's input)
  LayerStack<DecoderLayer>::Stash layers;   // the layers' inputs and stashes (nn/layer.hpp)
  LmHeadStash head;                         // final norm, LM head and loss
};

class DecoderModel {
 public:
  /// @brief Registers this rank's parameter shards (group "language_model") and materialises them: values
  /// initialised from `seed`, gradients zeroed.
  static Result<DecoderModel> create(const Context& ctx, const TransformerConfig& cfg, TensorParallel tp,
                                     uint64_t seed, Allocator& alloc);
  /// @brief Parameters per decoder layer: 8, or 10 with qk_norm.
  static size_t params_per_layer(const TransformerConfig& cfg);
  /// @brief The parameter layout of rank `rank` of a tp group of size `tp` (pure; what create() allocates).
  static std::vector<ParamShard> param_layout(const TransformerConfig& cfg, int tp, int rank, bool sequence_parallel);

  /// @brief The mean loss over the batch's valid labels (the same value on every tp rank). `batch` is the packed
  /// batch (vlpar/core/batch.hpp; every tp rank holds all of it): HF labels, unshifted (shifted here within each
  /// sample), positions [N_tok] or, under MRoPE, [3, N_tok]; its vision fields are ignored.
  Result<CrossEntropyResult> forward(const Context& ctx, const Batch& batch, DecoderStash& stash) const;
  /// @brief Accumulates every parameter gradient of grad_loss · loss. ready (optional) is called with each
  /// param index once its gradient is final, in reverse param order.
  Status backward(const Context& ctx, const Batch& batch, DecoderStash& stash, float grad_loss = 1.f,
                  const GradReadyFn& ready = {}) const;
  Status zero_grads();
  /// Registry indices in the order backward() reports them ready (the reverse of the parameter order).
  std::vector<size_t> backward_order() const;
  ParamRegistry& registry() { return reg_; }
  const ParamRegistry& registry() const { return reg_; }

  /// The model as pre → layers → post: layer l (attention + MLP) as an nn::Layer, and all layers as a stack.
  DecoderLayer layer(int l) const;
  LayerStack<DecoderLayer> layers() const;
  /// Activation recompute of the layer stack (bitwise the same gradients; nn/layer.hpp).
  void set_recompute(Recompute r) { recompute_ = r; }

  const TransformerConfig& config() const { return cfg_; }
  const TensorParallel& tensor_parallel() const { return tp_; }
  const std::vector<ParamShard>& layout() const { return layout_; }
  std::vector<TensorView> params() const;
  std::vector<TensorView> grads() const;
  size_t num_params() const { return reg_.size(); }

 private:
  static PackedSeq seq(const Batch& b, const DecoderStash& st) { return PackedSeq{st.targets.cu_seqlens, b.positions}; }
  AttentionBlock attention(int layer) const;
  MlpBlock mlp(int layer) const;
  LmHead head() const;
  size_t layer_base(int layer) const { return 1 + params_per_layer(cfg_) * size_t(layer); }
  auto value() const { return [this](size_t i) { return reg_.value(i); }; }
  auto grad() const { return [this](size_t i) { return reg_.grad(i); }; }

  TransformerConfig cfg_;
  TensorParallel tp_;
  std::vector<ParamShard> layout_;
  ParamRegistry reg_;
  Range vocab_block_;
  Recompute recompute_ = Recompute::kNone;
};

}  // namespace vlpar::nn
