#pragma once
// One decoder layer as an nn::Layer (nn/layer.hpp): AttentionBlock, then a feed-forward block (the dense SwiGLU
// MlpBlock or the sparse MoeBlock), each with its residual,
//   mid = x + attention(RMSNorm(x)),  out = mid + FF(RMSNorm(mid))
// over the packed batch. The blocks' own forward/backward run; this type adds the stash that joins them, the
// layer's registry range, its stash bytes and FLOPs, and the recompute hooks of LayerStack (selective: the
// feed-forward block's stash, the largest per-token tensors, is dropped after forward and rebuilt before backward;
// full: the whole layer is rebuilt from its input).
//
// MoE load balancing (moe_block.hpp): every MoE layer of a step adds its router statistics to one RouterAuxStats
// in forward, and backward needs the finished statistics and dLoss/daux. A MoE layer is therefore built for one
// step over a MoeLoss that points at that step's statistics (layers are views over the registry: cheap to build
// per step). Recompute never adds to the statistics again.
// Test: tests/unit/test_layer_stack.cpp (dense and MoE layers).
#include <cstdint>
#include <optional>

#include "vlpar/kernels/router.hpp"
#include "vlpar/nn/attention_block.hpp"
#include "vlpar/nn/layer.hpp"
#include "vlpar/nn/mlp_block.hpp"
#include "vlpar/nn/moe_block.hpp"

namespace vlpar::nn {

/// A step's load-balancing state as MoE layers see it: forward adds to *stats, backward reads the finished
/// *stats and applies grad (= router_aux_loss_coef · dLoss/dloss; 0 = no load-balancing term).
struct MoeLoss {
  RouterAuxStats* stats = nullptr;
  float grad = 0.f;          // dLoss/daux
  float grad_z = 0.f;        // dLoss/dz (router z-loss)
  float grad_seq_aux = 0.f;  // dLoss/d(sequence-level aux)
  double* load = nullptr;  // [E] if set, forward adds this layer's assignments per expert (its tokens' top-k)
  double* dropped = nullptr;  // if set, forward adds this layer's assignments dropped by the capacity
};

class DecoderLayer {
 public:
  using Seq = PackedSeq;
  struct Stash {
    Tensor mid;  // [N_loc, H] the attention block's output, the feed-forward block's input
    AttentionStash attn;
    MlpStash mlp;  // dense layers
    MoeStash moe;  // MoE layers
  };

  /// A dense layer.
  DecoderLayer(const TransformerConfig& cfg, TensorParallel tp, AttentionBlock attention, MlpBlock mlp,
               ParamRange params)
      : cfg_(cfg), tp_(tp), attn_(attention), mlp_(mlp), params_(params) {}
  /// A MoE layer over one step's load-balancing state (`loss.stats` null: the statistics are not collected).
  DecoderLayer(const TransformerConfig& cfg, TensorParallel tp, AttentionBlock attention, MoeBlock moe,
               ParamRange params, MoeLoss loss)
      : cfg_(cfg), tp_(tp), attn_(attention), moe_(moe), params_(params), moe_loss_(loss) {}

  Status forward(const Context& ctx, TensorView out, TensorView in, const PackedSeq& seq, Stash& st) const;
  Status backward(const Context& ctx, TensorView dx, TensorView dout, const PackedSeq& seq, Stash& st,
                  const GradReadyFn& ready) const;
  ParamRange params() const { return params_; }
  bool is_moe() const { return moe_.has_value(); }
  /// Bytes the stash holds between forward and backward for `tokens` tokens under `mode` (activations in
  /// cfg.activation, statistics f32; the tp-local heads and MLP width; a MoE layer's dispatch plan counted as i64
  /// offsets + two i32 row maps).
  int64_t stash_bytes(int64_t tokens, Recompute mode) const;
  /// Bytes a backward run with ctx.weight_grads set (the I of a split backward) leaves queued for the W, for
  /// `tokens` tokens with every parameter trainable: the operands of the projections' weight-gradient GEMMs
  /// (attention: normed input, attention output, dq, dk, dv and the o projection's output gradient; MLP: normed
  /// input, activation, d(gate|up) and the down projection's output gradient; MoE: the experts' rows of the
  /// activation, the weighted output gradient, the input and d(gate|up), and the router's dlogits and normed input;
  /// R = N·K rows as in stash_bytes). The norms' gradients are computed in I.
  int64_t weight_stash_bytes(int64_t tokens) const;
  /// Forward FLOPs on this rank: the projections (2·in·out per token; MoE: router and K experts per token) and
  /// causal attention (2·2·D per query-key pair and head, Σ_s s(s+1)/2 pairs per sample s of the packed batch).
  double flops(const PackedSeq& seq) const;

  // ---- LayerStack's recompute hooks ----
  /// Releases what `mode` recomputes (kSelective: the feed-forward stash; kFull: everything).
  void drop(Stash& st, Recompute mode) const;
  /// Rebuilds what drop(st, mode) released, from the layer input `in`, bitwise as forward built it; adds nothing
  /// to the MoE statistics.
  Status recompute(const Context& ctx, TensorView in, const PackedSeq& seq, Stash& st, Recompute mode) const;

 private:
  Status feed_forward(const Context& ctx, TensorView out, const PackedSeq& seq, Stash& st,
                      RouterAuxStats* stats) const;

  TransformerConfig cfg_;
  TensorParallel tp_;
  AttentionBlock attn_;
  std::optional<MlpBlock> mlp_;
  std::optional<MoeBlock> moe_;
  ParamRange params_;
  MoeLoss moe_loss_;
};
static_assert(RecomputableLayer<DecoderLayer>);

}  // namespace vlpar::nn
