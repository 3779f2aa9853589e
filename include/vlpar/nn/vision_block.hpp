#pragma once
// Pre-norm vision transformer block of Qwen3-VL (spec qwen3vl.md §3.4), HF Qwen3VLVisionBlock:
//   x1  = x + proj( attention( rot(q), rot(k), v ) ),  [q | k | v] = qkv(LN1(x)) viewed [N, 3, heads, hd]
//   out = x1 + fc2( gelu_tanh( fc1( LN2(x1) ) ) )
// LayerNorms with weight and bias (eps cfg.eps), every linear with a bias, vision 2D rotary on q and k
// (rows: head dims [0, hd/4) ∪ [hd/2, 3hd/4), columns: the rest; kernels/rotary_math.hpp), bidirectional
// attention inside each segment of seq.cu_seqlens (one per image / video frame), scale hd^-0.5.
// Vision tensor parallelism (a TensorParallel over the vision tp group, ParallelConfig::vision_tp; no sequence
// parallelism: the patches are replicated): Megatron's column/row split of both halves. Rank r holds heads
// [r·heads/tp, (r+1)·heads/tp): qkv's rows of its heads (its q rows, then its k rows, then its v rows: [3·Hv/tp, Hv],
// HF tensors sliced per third), proj's columns of its heads [Hv, Hv/tp], fc1's rows [Iv/tp, Hv] and fc2's columns
// [Hv, Iv/tp]; norms and the proj / fc2 biases are whole on every rank. proj and fc2 give partial sums, all-reduced
// over tp (the bias added once, by tp rank 0, before the sum); in backward the partial input gradients of qkv and
// fc1 are all-reduced, so the norms' and biases' gradients are whole and equal on every rank.
// Storage f32 (CPU). Test: tests/unit/test_vision_block.cpp (reference: include/vlpar/reference/vision.hpp),
// tests/mpi/test_tp_equivalence.cpp (VisionTp.*: tp 2 and 4 against one rank).
#include "vlpar/core/context.hpp"
#include "vlpar/core/tensor.hpp"
#include "vlpar/nn/tensor_parallel.hpp"
#include "vlpar/nn/vision_config.hpp"

namespace vlpar::nn {

/// Weights of one block in HF shapes, this tp rank's shards of them (or their gradients; an empty gradient view
/// means that parameter is frozen: no gradient is computed for it and its weight-gradient GEMM is skipped).
struct VisionBlockWeights {
  TensorView norm1_w, norm1_b;  // [Hv]          norm1.{weight,bias}
  TensorView qkv_w;             // [3Hv, Hv]     attn.qkv.weight: rows q (head-major), then k, then v (tp: [3Hv/tp, Hv])
  TensorView qkv_b;             // [3Hv]         attn.qkv.bias (tp: [3Hv/tp])
  TensorView proj_w;            // [Hv, Hv]      attn.proj.weight (tp: [Hv, Hv/tp])
  TensorView proj_b;            // [Hv]
  TensorView norm2_w, norm2_b;  // [Hv]          norm2.{weight,bias}
  TensorView fc1_w;             // [Iv, Hv]      mlp.linear_fc1.weight (tp: [Iv/tp, Hv])
  TensorView fc1_b;             // [Iv]          (tp: [Iv/tp])
  TensorView fc2_w;             // [Hv, Iv]      mlp.linear_fc2.weight (tp: [Hv, Iv/tp])
  TensorView fc2_b;             // [Hv]

  /// True if any view is non-empty (for gradients: the block has a trainable parameter).
  bool any() const;
};

/// What backward needs from forward. x is the caller's input view: it must stay alive until backward.
struct VisionBlockStash {
  TensorView x;        // [N, Hv]          block input
  Tensor mean1, rstd1;  // [N] f32         LN1 statistics
  Tensor h1;           // [N, Hv]          LN1 output
  Tensor qkv;          // [N, 3Hv]         qkv output; the q and k thirds rotated in place (tp: this rank's heads,
                       //                  Hv → Hv/tp and heads → heads/tp here and below)
  Tensor attn;         // [N, heads, hd]   attention output
  Tensor lse;          // [heads, N] f32
  Tensor x1;           // [N, Hv]          after the attention residual
  Tensor mean2, rstd2;  // [N] f32
  Tensor h2;           // [N, Hv]          LN2 output
  Tensor f1;           // [N, Iv]          fc1 output (GELU input) (tp: Iv/tp)
  Tensor act;          // [N, Iv]          GELU-tanh output
};

class VisionBlock {
 public:
  /// @param tp the vision tp group (sequence_parallel must be false); default: none
  VisionBlock(const VisionConfig& cfg, VisionBlockWeights w, VisionBlockWeights grads, TensorParallel tp = {});

  /// @brief Checks the weights (present, HF shapes or their tp shards, contiguous f32 or bf16), the non-empty gradients
  /// (same shapes) and that tp divides the heads and the MLP width.
  Status check_weights() const;

  /// @param out [N, Hv] written (may not alias x); x [N, Hv]; N = seq.num_patches
  Status forward(const Context& ctx, TensorView out, TensorView x, const VisionSeq& seq, VisionBlockStash& st) const;

  /// @brief Accumulates the non-frozen parameter gradients and writes dx = ∂L/∂x. Collective over tp, as forward.
  /// @param dx   [N, Hv] written, or an empty view when nothing below needs it (then the input-gradient work that
  ///             only feeds dx is skipped)
  /// @param dout [N, Hv] ∂L/∂out (may not alias dx)
  Status backward(const Context& ctx, TensorView dx, TensorView dout, const VisionSeq& seq,
                  const VisionBlockStash& st) const;

 private:
  VisionConfig cfg_;
  VisionBlockWeights w_, g_;
  TensorParallel tp_;
  int heads_ = 0;      // this rank's heads (heads / tp)
  int64_t hv_ = 0;     // their width heads_ · hd (Hv / tp)
  int64_t iv_ = 0;     // this rank's MLP width (Iv / tp)
};

}  // namespace vlpar::nn
