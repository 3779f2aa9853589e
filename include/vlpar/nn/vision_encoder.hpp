#pragma once
// The Qwen3-VL vision encoder (spec qwen3vl.md §3), HF Qwen3VLVisionModel, with explicit forward and backward:
//   x   = pixels · patch_wᵀ + patch_b + interp(pos_embed)      (Conv3d with kernel = stride is a linear layer)
//   x   = block_l(x) for l = 0 … depth−1                         (VisionLayer over VisionBlock; 2D rotary,
//                                                                 attention per segment; LayerStacks cut after
//                                                                 each block a deepstack merger reads)
//   deepstack_j = deepstack merger j (output of block deepstack_indexes[j])
//   merged      = final merger (output of the last block)
// Images and videos may be encoded in one call or in separate calls (HF encodes images and videos separately):
// every image and every temporal patch of a video is its own attention segment, so results per grid do not
// depend on what else is in the call.
//
// Gradients ACCUMULATE (+=) into the gradient views given at construction. Freezing: an empty gradient view
// means that parameter is frozen (no gradient, its weight-gradient GEMM skipped); the backward stops at the
// lowest point that still has a trainable parameter below it, e.g. a frozen ViT with trainable mergers runs only
// the mergers' backward.
// Vision tensor parallelism (a TensorParallel over ParallelConfig::vision_tp's group): every block's heads and MLP
// width split over it (nn/vision_block.hpp, weights given as this rank's shards); the patch embedding, position
// table and mergers stay whole and run replicated. Storage f32 (CPU). Scratch and stash tensors come from
// ctx.allocator.
// Test: tests/unit/test_vision_encoder.cpp (reference: include/vlpar/reference/vision.hpp).
#include <span>
#include <utility>
#include <vector>

#include "vlpar/core/context.hpp"
#include "vlpar/core/tensor.hpp"
#include "vlpar/nn/patch_merger.hpp"
#include "vlpar/nn/layer.hpp"
#include "vlpar/nn/vision_block.hpp"
#include "vlpar/nn/vision_config.hpp"
#include "vlpar/nn/vision_layer.hpp"

namespace vlpar::nn {

/// Every parameter of the encoder as views in HF shapes (or their gradients: then a view may be empty = frozen,
/// and `blocks` / `deepstack` may be empty vectors = all of them frozen).
struct VisionEncoderWeights {
  TensorView patch_w;    // [Hv, C·Tp·P·P]  patch_embed.proj.weight [Hv, C, Tp, P, P] flattened (c, t, row, col)
  TensorView patch_b;    // [Hv]            patch_embed.proj.bias
  TensorView pos_embed;  // [G², Hv]        pos_embed.weight
  std::vector<VisionBlockWeights> blocks;     // [depth]             blocks.{l}.*
  PatchMergerWeights merger;                  //                     merger.*
  std::vector<PatchMergerWeights> deepstack;  // [len(deepstack)]    deepstack_merger_list.{j}.*
};

/// The tower's blocks as LayerStacks, cut after each block a deepstack merger reads (nn/layer.hpp).
using VisionStack = LayerStack<VisionLayer>;

/// Everything backward needs from one forward call. Keep the pixels alive until backward.
struct VisionStash {
  std::vector<VisionGrid> grids;
  VisionSeq seq;                              // segments and rotary positions of `grids`
  TensorView pixels;                          // [Np, C·Tp·P·P]
  Tensor embeds;                              // [Np, Hv] patch + position embedding: block 0's input
  std::vector<VisionStack::Stash> segments;   // the blocks' inputs, outputs and stashes, one per segment
  PatchMergerStash merger;
  std::vector<PatchMergerStash> deepstack;    // [len(deepstack)]
};

struct VisionOutput {
  Tensor merged;                  // [Np/m², D]  in merged-token order (grid, frame, block_row, block_col)
  std::vector<Tensor> deepstack;  // len(deepstack) × [Np/m², D]
};

class VisionEncoder {
 public:
  /// @param first_block_param registry index of block 0's first parameter; block l's 12 are
  ///        first_block_param + 12·l … (consecutive, as HF's state dict orders them). Used for the layers' params().
  /// @param tp the vision tp group of the blocks (default: none)
  VisionEncoder(const VisionConfig& cfg, VisionEncoderWeights w, VisionEncoderWeights grads,
                size_t first_block_param = 0, TensorParallel tp = {});

  /// @brief Checks the config, every weight (present, HF shape, contiguous f32 or bf16) and every non-empty gradient.
  Status check_weights() const;

  /// @param pixels [Np, C·Tp·P·P] f32, Np = Σ t·h·w, rows in the processor's patch order (spec §2.1)
  /// @param grids  one {t, h, w} per image / video, in the order of the pixel rows (h, w multiples of merge)
  /// @param out    written: merged [Np/m², D] and deepstack outputs, allocated from ctx.allocator
  Status forward(const Context& ctx, TensorView pixels, std::span<const VisionGrid> grids, VisionStash& st,
                 VisionOutput& out) const;

  /// @brief Accumulates the gradients of every non-frozen parameter. Consumes the stash (the blocks' activations
  /// are freed segment by segment).
  /// @param d_merged    [Np/m², D] ∂L/∂merged
  /// @param d_deepstack len(deepstack) views [Np/m², D] (an empty view: no gradient for that output), or an empty
  ///                    span: no deepstack gradients at all
  Status backward(const Context& ctx, VisionStash& st, TensorView d_merged,
                  std::span<const TensorView> d_deepstack) const;

  const VisionConfig& config() const { return cfg_; }
  /// Blocks [a, b) as a LayerStack (no recompute): what forward/backward run, segment by segment.
  VisionStack blocks(int a, int b) const;
  /// Inspection of a forward's stash: hidden state k [Np, Hv] (0 = the embeddings, l + 1 = block l's output),
  /// and block l's own stash. Errors name k / l when outside the tower or consumed by backward.
  Result<TensorView> hidden(const VisionStash& st, int k) const;
  Result<VisionBlockStash*> block_stash(VisionStash& st, int l) const;

 private:
  /// Lowest stage with a trainable parameter: 0 = embeddings (patch_w, patch_b, pos_embed), l + 1 = block l;
  /// depth + 1 when no embedding or block parameter is trainable.
  int lowest_trainable_stage() const;
  /// [first, last) blocks of each segment: cut after every block a deepstack merger reads.
  std::vector<std::pair<int, int>> segments() const;
  /// Block l's (segment, index in the segment) in a forward's stash; errors when outside or consumed.
  Result<std::pair<size_t, size_t>> locate(const VisionStash& st, int l) const;
  /// Adds the input gradients of the deepstack mergers reading the output of block `block` into dh.
  Status deepstack_into(const Context& ctx, int block, TensorView dh, std::span<const TensorView> d_deepstack,
                        const VisionStash& st) const;

  VisionConfig cfg_;
  VisionEncoderWeights w_, g_;
  TensorParallel tp_;
  std::vector<VisionLayer> layers_;
  PatchMerger merger_;
  std::vector<PatchMerger> deepstack_;
};

}  // namespace vlpar::nn
