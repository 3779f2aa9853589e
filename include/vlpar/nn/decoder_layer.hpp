#pragma once
// One decoder layer as an nn::Layer (nn/layer.hpp): AttentionBlock then MlpBlock, each with its residual,
//   mid = x + attention(RMSNorm(x)),  out = mid + MLP(RMSNorm(mid))
// over the packed batch. The blocks' own forward/backward run; this type adds the stash that joins them, the
// layer's registry range, its stash bytes and its FLOPs.
// Test: tests/unit/test_layer_stack.cpp.
#include <cstdint>

#include "vlpar/nn/attention_block.hpp"
#include "vlpar/nn/layer.hpp"
#include "vlpar/nn/mlp_block.hpp"

namespace vlpar::nn {

class DecoderLayer {
 public:
  struct Stash {
    Tensor mid;  // [N_loc, H] the attention block's output, the MLP block's input
    AttentionStash attn;
    MlpStash mlp;
  };

  DecoderLayer(const TransformerConfig& cfg, TensorParallel tp, AttentionBlock attention, MlpBlock mlp,
               ParamRange params)
      : cfg_(cfg), tp_(tp), attn_(attention), mlp_(mlp), params_(params) {}

  Status forward(const Context& ctx, TensorView out, TensorView in, const PackedSeq& seq, Stash& st) const;
  Status backward(const Context& ctx, TensorView dx, TensorView dout, const PackedSeq& seq, Stash& st,
                  const GradReadyFn& ready) const;
  ParamRange params() const { return params_; }
  /// Bytes of the stash for `tokens` tokens (f32; the tp-local heads and MLP width).
  int64_t stash_bytes(int64_t tokens) const;
  /// Forward FLOPs on this rank: the projections (2·in·out per token) and causal attention (2·2·D per query-key
  /// pair and head, Σ_s s(s+1)/2 pairs per sample s of the packed batch).
  double flops(const PackedSeq& seq) const;

 private:
  TransformerConfig cfg_;
  TensorParallel tp_;
  AttentionBlock attn_;
  MlpBlock mlp_;
  ParamRange params_;
};
static_assert(Layer<DecoderLayer>);

}  // namespace vlpar::nn
