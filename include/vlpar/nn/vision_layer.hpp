#pragma once
// One vision-tower block as an nn::Layer (nn/layer.hpp): VisionBlock (LN → qkv → 2D rotary → attention per image /
// frame segment → proj → residual; LN → fc1 → GELU-tanh → fc2 → residual) over the patches of a vision pass, with
// its registry range, stash bytes and FLOPs. The vision encoder runs LayerStack<VisionLayer>; a pipeline stage
// can own any range of the tower's blocks the same way.
// backward accepts an empty dx (nothing below the block needs a gradient: the input-gradient work is skipped) and
// reports ready(i) for its non-frozen parameters, last to first (registry order: norm1 w/b, qkv w/b, proj w/b,
// norm2 w/b, fc1 w/b, fc2 w/b). Callers that run the tower more than once per step (Qwen3-VL encodes images and
// videos in separate passes) pass no ready callback and report the tower's gradients after the last pass.
// Test: tests/unit/test_vision_encoder.cpp (VisionLayer: stash bytes, FLOPs, a stack of blocks = the encoder).
#include <array>
#include <cstdint>

#include "vlpar/nn/layer.hpp"
#include "vlpar/nn/vision_block.hpp"
#include "vlpar/nn/vision_config.hpp"

namespace vlpar::nn {

class VisionLayer {
 public:
  using Seq = VisionSeq;
  using Stash = VisionBlockStash;
  static constexpr size_t kNumParams = 12;

  VisionLayer(const VisionConfig& cfg, VisionBlockWeights w, VisionBlockWeights grads, ParamRange params,
              TensorParallel tp = {});

  Status forward(const Context& ctx, TensorView out, TensorView in, const Seq& seq, Stash& st) const {
    return block_.forward(ctx, out, in, seq, st);
  }
  Status backward(const Context& ctx, TensorView dx, TensorView dout, const Seq& seq, Stash& st,
                  const GradReadyFn& ready) const;
  ParamRange params() const { return params_; }
  /// True when some parameter of the block is trainable.
  bool trainable() const;
  /// Bytes of VisionBlockStash for `tokens` patches (0 under kFull; no selective recompute: kSelective = kNone;
  /// this tp rank's heads and MLP width).
  int64_t stash_bytes(int64_t tokens, Recompute mode) const;
  /// Forward FLOPs: qkv, proj, fc1, fc2 (2·in·out per patch) and bidirectional attention over every segment
  /// (2·2·Hv per query-key pair, s² pairs per segment of s patches); this tp rank's share of them.
  double flops(const Seq& seq) const;

 private:
  VisionConfig cfg_;
  int tp_ = 1;
  VisionBlock block_;
  ParamRange params_;
  std::array<bool, kNumParams> has_grad_{};  // per parameter, registry order
};
static_assert(Layer<VisionLayer>);

}  // namespace vlpar::nn
