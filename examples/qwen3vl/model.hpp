#pragma once
// Qwen3-VL (dense and MoE) built from vlpar's public nn blocks, with a hand-written backward for every parameter
// (spec qwen3vl.md §3–§6):
//
//   images/videos ─ VisionEncoder ─┬─ merged [n_vis, D] ──── scatter at <|image_pad|>/<|video_pad|> ─┐
//                                  └─ deepstack_j [n_vis, D] ─ added after text layer j at those rows │
//   input_ids ─ embed_tokens ───────────────────────────────────────────────────────────────────────┴─►
//   L × (AttentionBlock[q/k norm, interleaved MRoPE, GQA, causal varlen] → MlpBlock | MoeBlock) → LmHead
//   loss = CE(shifted labels per sample, ignore −100, mean over valid) + router_aux_loss_coef · aux (MoE)
//
// The batch is packed (DESIGN §4): several samples in one row with cu_seqlens; attention never crosses samples,
// MRoPE positions restart per sample (data/mrope_positions.hpp), labels shift within each sample. Images are
// encoded in one vision call and videos in another (as HF does), each image and each video frame its own
// attention segment.
//
// Parameters live in one nn::ParamRegistry (DESIGN §2) under their HF names, except the dense SwiGLU, which vlpar
// stores fused as `mlp.gate_up_proj.weight` [2I, H] (HF: gate_proj and up_proj; hf_checkpoint.hpp converts) and
// the patch embedding stored as [Hv, C·Tp·P·P] (HF: [Hv, C, Tp, P, P], same bytes). Freeze groups: "vision"
// (patch embed, position table, blocks), "merger" (final and deepstack mergers), "language_model" (the rest).
// A frozen group allocates no gradient and its weight-gradient GEMMs are skipped; the backward stops where
// nothing upstream is trainable.
// Tensor parallelism: the language model is sharded over `tp` as the nn blocks do it (heads, SwiGLU width, vocab;
// HF tensors are converted to vlpar's full layout, then each rank takes its shard). Without sequence parallelism
// the MoE blocks run replicated on every tp rank (same inputs, same weights, same gradients); expert parallelism
// splits the experts (`ep`), vision tensor parallelism the vision blocks (`vision_tp`, Model::create); without it
// the vision tower runs replicated. A vision tp group wider than tp (m · tp ranks, m data-parallel batches) runs
// the tower on the images of all m batches and each rank keeps its own visual tokens (vision_slots.hpp). With
// sequence parallelism (tp.sequence_parallel) the decoder layers hold N / tp tokens per rank (rank r: rows
// [r·N/tp, (r+1)·N/tp)): the embeddings and visual tokens are made whole on every rank as without SP and each rank
// keeps its rows (layer 0's input, stash.x0); each deepstack level is added to the rows a rank holds; the MoE
// layers route each rank's own tokens (nn/moe_block.hpp); backward all-gathers the gradient at layer 0's input
// (and at the deepstack layers' outputs) so that the vision tower and the embedding see the whole sequence. N
// must be a multiple of tp (the trainer pads: pad_for_sequence_parallel). Storage f32 on CPU.
// Test: examples/qwen3vl/tests/test_parity.cpp (vs transformers fixtures), test_packing.cpp, test_freeze.cpp.
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "config.hpp"
#include "vision_slots.hpp"
#include "vlpar/core/batch.hpp"
#include "vlpar/core/allocator.hpp"
#include "vlpar/core/context.hpp"
#include "vlpar/core/tensor.hpp"
#include "vlpar/kernels/router.hpp"
#include "vlpar/nn/attention_block.hpp"
#include "vlpar/nn/decoder_layer.hpp"
#include "vlpar/nn/expert_dispatch.hpp"
#include "vlpar/nn/layer.hpp"
#include "vlpar/nn/lm_head.hpp"
#include "vlpar/nn/mlp_block.hpp"
#include "vlpar/nn/moe_block.hpp"
#include "vlpar/nn/param_registry.hpp"
#include "vlpar/nn/vision_encoder.hpp"
#include "vlpar/obs/trace_recorder.hpp"

namespace qwen3vl {

/// Label of a position that is not supervised (HF's ignore_index; the data pipeline's kIgnoreLabel).
inline constexpr int64_t kIgnoreIndex = -100;

using vlpar::Allocator;
using vlpar::Context;
using vlpar::Tensor;
using vlpar::TensorView;

/// The packed batch (vlpar/core/batch.hpp): MRoPE positions [3, N] come with it (the data pipeline computes them
/// once); data::PackedBatch::view() gives one. It must outlive the forward's stash.
using vlpar::Batch;

/// Activation recompute (the trainer's training.recompute), nn/layer.hpp's policies over the decoder layers:
///   kNone      keep every layer's stash from forward to backward;
///   kSelective drop each layer's MLP / MoE stash (gate|up and the activation: the largest per-token tensors,
///              3·I floats a token against the attention stash's ~5·H) and recompute that block in backward;
///   kFull      keep only each layer's input; recompute both blocks of the layer in backward.
/// Gradients are bitwise the same in every mode.
using vlpar::nn::Recompute;

/// Which parameter groups are frozen.
struct Freeze {
  bool vision = false;          // patch embed, position table, ViT blocks
  bool merger = false;          // final merger and deepstack mergers
  bool language_model = false;  // embeddings, decoder layers, final norm, LM head
};

/// Which part of the model this Model object holds (pipeline parallelism: each rank builds only its stages' parts;
/// pipeline_stage.hpp). Every parameter keeps the registry name, shard and Philox init key it has in the whole
/// model, so a part's values equal the whole model's. Default: the whole model.
struct PipelinePart {
  bool whole = true;                         // ignore the fields below: every parameter
  std::vector<std::pair<int, int>> layers;   // decoder layers [a, b) held (several ranges: interleaved stages)
  bool vision_and_embedding = true;          // vision tower, mergers, embed_tokens (stage 0)
  bool head = true;                          // final norm and lm_head (the last stage; a tied head is embed_tokens)

  bool holds(int layer) const {
    for (const auto& [a, b] : layers)
      if (layer >= a && layer < b) return true;
    return false;
  }
  static PipelinePart of(std::vector<std::pair<int, int>> layers, bool first, bool last) {
    return PipelinePart{false, std::move(layers), first, last};
  }
};

struct StepLoss {
  double loss = 0.0;          // ce_loss + the router terms, each times its coefficient (aux, z, seq_aux)
  double ce_loss = 0.0;       // mean over valid shifted labels
  double aux_loss = 0.0;      // Switch load-balancing loss over every MoE layer's tokens (0 for dense)
  double z_loss = 0.0;        // router z-loss: Σ over MoE layers of mean_t logsumexp(logits_t)² (0 for dense)
  double seq_aux_loss = 0.0;  // sequence-level aux: Σ over MoE layers of the per-sample Switch loss (0 for dense)
  int64_t num_label_tokens = 0;
};

/// One modality's vision pass and where its outputs go in the sequence.
struct VisionPass {
  std::vector<vlpar::nn::VisionGrid> grids;
  vlpar::nn::VisionStash stash;
  vlpar::nn::VisionOutput out;    // merged [n, D] and deepstack [n, D] each
  std::vector<int64_t> rows;      // sequence positions of its pad tokens, in order (n of them)
  std::vector<int64_t> visual_index;  // where each of its rows sits in Stash::visual_rows (n of them)
  // A vision tp group wider than tp (vision_slots.hpp): the tower ran on every slot's images (`pixels`, all
  // grids), `out` holds this slot's rows of it, slot s's at [slot_tokens[s], slot_tokens[s + 1]) of the whole.
  Tensor pixels;
  std::vector<int64_t> slot_tokens;
};

/// The decoder layers as LayerStacks: cut after each deepstack layer j (where the visual features of level j are
/// added to the layer output), so segments are [0, 1), [1, 2), …, [n_ds − 1, n_ds), [n_ds, L).
using DecoderStack = vlpar::nn::LayerStack<vlpar::nn::DecoderLayer>;

/// Per decoder layer, the width of the expert-load counters (Stash::expert_load): E loads, then the dropped count.
inline size_t expert_load_width(const TextConfig& t) { return size_t(t.num_experts) + 1; }

/// Everything backward needs from forward, for one micro-batch.
struct Stash {
  vlpar::nn::CausalTargets targets;  // i32 cu_seqlens [B + 1], labels [N] shifted per sample
  TensorView positions;              // i64 [3, N] MRoPE rows T, H, W: the batch's
  Tensor embeds;        // [N, H] embedding output with visual rows scattered in
  TensorView x0;        // layer 0's input: embeds, or this tp rank's N / tp rows of it under sequence parallelism
  std::optional<VisionPass> image, video;
  std::vector<int64_t> visual_rows;          // image and video rows in sequence order (deepstack targets)
  std::vector<Tensor> deepstack;             // [n_here, D] per level: the rows added on this rank, in the order
                                             // of deepstack_rows (all visual rows, in visual_rows order, without SP)
  std::vector<int64_t> deepstack_rows;       // where they are added: rows of this rank's layer outputs
  std::pair<int, int> layers{0, 0};          // the decoder layers [a, b) forward_layers ran
  std::vector<DecoderStack::Stash> segments;  // one per decoder segment of those layers (DecoderStack above)
  std::vector<Tensor> d_deepstack;           // backward: ∂loss/∂deepstack per level, for the vision backward
  vlpar::nn::LmHeadStash head;
  vlpar::RouterAuxStats aux;
  std::vector<double> expert_load;  // [L · (E + 1)] this forward's assignments per (decoder layer, expert), each
                                    // layer's E followed by its assignments dropped by the capacity (if any),
                                    // counted by the MoE layers the forward ran
  StepLoss loss;
};

class Model {
 public:
  /// @brief Registers every parameter, applies `freeze`, allocates and initialises (Philox, `seed`;
  /// init std = initializer_range, norms one, biases zero). Without a seed the values are zeros, for a checkpoint
  /// load to fill.
  /// `part`: the layers and sections this object holds (pipeline stages); forward() and backward() need the whole
  /// model, a part runs the pieces below for its own layers.
  /// `ep`: expert parallelism of the MoE layers (each rank holds E / ep experts, ids ep_rank · E / ep …, as
  /// [E / ep, …] shards of the HF tensors; the ep ranks must hold different tokens: tp 1, or sequence parallelism).
  /// `vision_tp`: tensor parallelism of the vision tower's blocks, its own group (ParallelConfig::vision_tp; may
  /// differ from `tp`, no sequence parallelism); the patch embedding, position table and mergers stay whole. Its
  /// ranks hold the same images, unless `vision_spans_batches`: then the group is vision_tp / tp times wider than
  /// tp, its ranks s·tp … s·tp + tp − 1 hold data-parallel batch s, and the tower runs on every batch's images,
  /// exchanged over the group (vision_slots.hpp; the trainer's parallel.vision_tp > tp).
  static Result<Model> create(const Context& ctx, const Config& cfg, const Freeze& freeze,
                              std::optional<uint64_t> seed, Allocator& alloc, vlpar::nn::TensorParallel tp = {},
                              PipelinePart part = {}, vlpar::nn::ExpertParallel ep = {},
                              vlpar::nn::TensorParallel vision_tp = {}, bool vision_spans_batches = false);

  const Config& config() const { return cfg_; }
  const PipelinePart& part() const { return part_; }
  const vlpar::nn::TensorParallel& tensor_parallel() const { return tp_; }
  const vlpar::nn::ExpertParallel& expert_parallel() const { return ep_; }
  const vlpar::nn::TensorParallel& vision_tensor_parallel() const { return vtp_; }
  void set_recompute(Recompute r) { recompute_ = r; }
  /// @brief Spans for the vision encoder (mergers included), decoder and loss go to `trace` (null = none).
  void set_trace(vlpar::obs::TraceRecorder* trace) { trace_ = trace; }
  Recompute recompute() const { return recompute_; }
  vlpar::nn::ParamRegistry& registry() { return reg_; }
  const vlpar::nn::ParamRegistry& registry() const { return reg_; }

  /// @brief Forward over a packed batch: the loss, with everything backward needs in `stash`.
  /// ctx.allocator must be set (blocks take their scratch from it).
  Result<StepLoss> forward(const Context& ctx, const Batch& batch, Stash& stash) const;
  /// @brief Accumulates grad_loss · ∂loss/∂θ into every trainable parameter's gradient. Consumes the stash
  /// (each layer's activations are freed as soon as its backward is done). `ready` (optional) is called with each
  /// trainable parameter's registry index as soon as its gradient is final, in backward_order() (where a
  /// data-parallel optimizer starts the reduction of a full bucket); give it on a step's last micro-batch only.
  Status backward(const Context& ctx, const Batch& batch, Stash& stash, float grad_loss = 1.f,
                  const vlpar::nn::GradReadyFn& ready = {}) const;
  /// Every registry index in the order backward() finishes the gradients: LM head, final norm, decoder layers
  /// last to first (each block's parameters in reverse), vision tower and mergers in reverse, the embedding last
  /// (its gradient is complete only after the vision passes, and the tied LM head adds to it first).
  std::vector<size_t> backward_order() const;

  // ---- The pieces forward() and backward() are made of (pipeline stages run a part of them) -----------------
  //   forward  = prepare → embed → forward_layers(0, L) → forward_head
  //   backward = backward_head → backward_layers → backward_embed
  /// Checks the batch; sample boundaries, shifted labels and MRoPE positions into the stash (every stage).
  Status prepare(const Context& ctx, const Batch& batch, Stash& stash) const;
  /// Vision passes, token embeddings with the merged visual tokens scattered in (stash.embeds, [N, H]; layer 0's
  /// input stash.x0, [N_loc, H]) and the deepstack features (stage 0).
  Status embed(const Context& ctx, const Batch& batch, Stash& stash) const;
  /// Decoder layers [a, b) from x [N_loc, H] (N_loc = N / tp under SP, else N); the deepstack features of level j
  /// are added after layer j (for j < a deepstack level count they come from embed() in the same stash); MoE
  /// statistics accumulate in stash.aux.
  /// @return the output of layer b − 1 (owned by the stash).
  Result<TensorView> forward_layers(const Context& ctx, TensorView x, int a, int b, Stash& stash) const;
  /// Final norm, LM head and loss over x [N_loc, H]; the MoE aux loss from stash.aux (the totals of every layer).
  Result<StepLoss> forward_head(const Context& ctx, TensorView x, Stash& stash) const;
  /// dx [N_loc, H] written: ∂(grad_loss · loss)/∂(head input).
  Status backward_head(const Context& ctx, TensorView dx, Stash& stash, float grad_loss,
                       const vlpar::nn::GradReadyFn& ready) const;
  /// Backward through the layers forward_layers ran: din [N_loc, H] written (gradient at layer a's input) from dout
  /// (at layer b − 1's output); deepstack gradients kept in the stash; stash.aux must hold the totals over every
  /// MoE layer of the model (the aux loss's backward reads them).
  Status backward_layers(const Context& ctx, TensorView din, TensorView dout, Stash& stash, float grad_loss,
                         const vlpar::nn::GradReadyFn& ready) const;
  /// Vision passes and token embeddings from dx [N_loc, H] (the gradient at layer 0's input; clobbered).
  /// Collective over tp under SP.
  Status backward_embed(const Context& ctx, const Batch& batch, TensorView dx, Stash& stash,
                        const vlpar::nn::GradReadyFn& ready) const;
  /// Whether the vision passes exchange images with other data-parallel ranks (a vision tp wider than tp): then a
  /// micro-batch whose forward failed after embed() still owes its group the backward's exchange.
  bool vision_spans_batches() const { return slots_.active(); }
  /// @brief Runs the vision passes' backward exchange with zero gradients (a micro-batch given up after embed()
  /// under vision_spans_batches(): the step is skipped, the peers must not wait). Nothing without wide vision.
  Status release_vision(const Context& ctx, Stash& stash) const;
  /// @brief logits [N, V/tp] f32 of the last forward (final normed hidden states · lm_headᵀ, this rank's vocab
  /// block), for parity checks and the forward CLI; training never materialises them.
  Result<Tensor> logits(const Context& ctx, const Stash& stash, Allocator& alloc) const;
  /// @brief out [1, V/tp] f32 written: the last position's row of logits() (what greedy decoding reads).
  /// Both need the whole sequence on this rank: a named error under sequence parallelism.
  Status last_logits(const Context& ctx, const Stash& stash, TensorView out) const;

  /// The decoder layers [a, b) as an nn::LayerStack under this model's recompute policy; MoE layers read and
  /// write `moe_loss` (nn/decoder_layer.hpp) and, with `expert_load` ([L · (E + 1)], expert_load_width), count
  /// their assignments per expert and the dropped ones
  /// there in forward. forward/backward run the stack cut at the deepstack layers.
  DecoderStack decoder_layers(int a, int b, vlpar::nn::MoeLoss moe_loss, double* expert_load = nullptr) const;
  /// Decoder layer `layer`'s router expert bias [E] f32 (text.router_expert_bias), or an empty view (no bias, a
  /// dense layer, or a layer this part does not hold). The trainer's balancing step writes it.
  TensorView expert_bias(int layer) const {
    const size_t b = layers_.at(size_t(layer)).expert_bias;
    return b == kNoBias ? TensorView{} : reg_.value(b);
  }
  /// Layer `layer`'s input [N_loc, H] in a forward's stash (the embeddings for layer 0; deepstack adds included).
  Result<TensorView> layer_input(const Stash& stash, int layer) const;

  // ---- Read access for inference paths outside forward/backward (generate.hpp's KV-cache decode) ----------
  /// Registry indices of decoder layer `layer`: the first of its attention block's 7 parameters (norm, q, k, v,
  /// q_norm, k_norm, o: AttentionBlock's order) and of its MLP block's 3 (norm, gate_up, down) or MoE block's 4
  /// (norm, router, gate_up, down).
  struct LayerParamIndex {
    size_t attn = 0;
    size_t mlp = 0;
    bool moe = false;
  };
  LayerParamIndex layer_param_index(int layer) const {
    const LayerParams& l = layers_.at(size_t(layer));
    return {l.attn, l.mlp, l.moe};
  }
  size_t embed_param_index() const { return embed_; }
  size_t final_norm_param_index() const { return final_norm_; }
  size_t lm_head_param_index() const { return lm_head_; }  // == embed_param_index() when tied
  /// The feed-forward block of layer `layer` over the registry, exactly as forward builds it.
  vlpar::nn::MlpBlock mlp_block(int layer) const { return mlp(layer); }
  vlpar::nn::AttentionBlock attention_block(int layer) const { return attention(layer); }
  vlpar::nn::MoeBlock moe_block(int layer) const { return moe(layer); }

 private:
  static constexpr size_t kNoBias = ~size_t{0};
  struct LayerParams {
    size_t attn = 0;   // first index of the attention block's parameters
    size_t mlp = 0;    // first index of the MLP / MoE block's parameters
    bool moe = false;
    size_t expert_bias = kNoBias;  // the MoE router's expert bias (registered after every other parameter)
  };
  struct VisionParams {
    size_t patch_w = 0, patch_b = 0, pos_embed = 0;
    std::vector<size_t> blocks;     // first index of each ViT block (12 parameters each)
    size_t merger = 0;              // first index of the final merger (6 parameters)
    std::vector<size_t> deepstack;  // first index of each deepstack merger (6 parameters)
  };

  Status register_params();
  vlpar::obs::Span span(std::string_view cat, std::string_view name) const;
  vlpar::nn::TransformerConfig text_block_config() const;
  vlpar::nn::AttentionBlock attention(int layer) const;
  vlpar::nn::MlpBlock mlp(int layer) const;
  vlpar::nn::MoeBlock moe(int layer) const;
  vlpar::nn::LmHead head() const;
  vlpar::nn::VisionEncoder vision() const;

  Status encode(const Context& ctx, TensorView pixels, const std::vector<vlpar::nn::VisionGrid>& grids,
                int64_t pad_id, TensorView ids, std::optional<VisionPass>& pass) const;
  Status vision_backward(const Context& ctx, VisionPass& pass, TensorView d_embeds,
                         const std::vector<Tensor>& d_deepstack) const;

  /// [first, last) layers of each decoder segment (DecoderStack) inside layers [a, b).
  std::vector<std::pair<int, int>> segments(int a, int b) const;
  Status deepstack_features(const Context& ctx, Stash& stash) const;

  Config cfg_;
  PipelinePart part_;
  Recompute recompute_ = Recompute::kNone;
  vlpar::obs::TraceRecorder* trace_ = nullptr;
  vlpar::nn::TensorParallel tp_;
  vlpar::nn::ExpertParallel ep_;
  vlpar::nn::TensorParallel vtp_;  // the vision tower's tp group (its blocks' heads and MLP width)
  VisionSlots slots_;              // active when vtp_ is wider than tp_ (vision_slots.hpp)
  vlpar::Range vocab_block_;  // this rank's rows of embed_tokens / lm_head
  vlpar::nn::ParamRegistry reg_;
  size_t embed_ = 0, final_norm_ = 0, lm_head_ = 0;  // lm_head_ == embed_ when tied
  std::vector<LayerParams> layers_;
  VisionParams vis_;
  vlpar::nn::VisionConfig vision_cfg_;
};

}  // namespace qwen3vl
