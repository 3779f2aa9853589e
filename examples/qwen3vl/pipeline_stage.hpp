#pragma once
// Qwen3-VL as pipeline stages (a vlpar::pipeline::Stage, vlpar/parallel/pipeline_stage.hpp; docs/pipeline.md):
// stage s of a pipeline::Layout runs decoder layers [bounds[s], bounds[s + 1]); stage 0 also the vision tower, the
// mergers and the token embedding; the last stage the final norm, LM head and loss (spec A5).
//
//   boundary (spec A5.2), per micro-batch j of N_j tokens:
//     act   hidden [N_j, H] f32, and for MoE models the running router statistics [2E + 4] f64 (counts, prob
//           sums, rows, top_k: RouterAuxStats) so the last stage's aux loss pools every layer (A5.4);
//     grad  dhidden [N_j, H] f32, and for MoE the final statistics, which every MoE layer's backward reads.
//   Not sent per hop: every rank holds the step's micro-batches (sample boundaries, MRoPE positions, labels derive
//   from them on each stage); the trainer reads them on stage 0's rank, which alone has pixels and grids, and
//   shares them without vision input once per step (data::share_packs_without_vision).
//   deepstack: its features are added after layers 0 … n_ds − 1, so stage 0 must hold those layers (create()
//   rejects a layout that cuts them, naming the fix); their gradients return to the vision tower on stage 0.
//   loss: micro-batch j's loss is scaled by weights[j] in backward (its share of the step's label tokens, as the
//   trainer weighs micro-batches), so the step's gradient equals the single-process one.
//   non-finite router logits (a kNonFinite error of a MoE layer, agreed within the stage's tp / ep groups) poison
//   the micro-batch instead of failing the schedule: the stage sends NaN activations and NaN statistics (the
//   marker the next stage checks before running anything), the last stage records a NaN loss, and backward sends
//   NaN gradients upstream without running its layers. Every stage thus runs the whole schedule and the trainer
//   skips the step, as for a non-finite loss.
// Each rank builds only its stages' part of the model (PipelineStage::part_for → Model::create): its decoder
// layers, the vision tower and embedding on stage 0's rank, the final norm and head on the last stage's rank (a
// tied head is embed_tokens, so both ranks hold it and its gradient is the sum of their two copies, spec A5.3).
// Test: examples/qwen3vl/tests/mpi_pipeline.cpp (np 2 and 4: 1F1B, GPipe, interleaved; dense, MoE and tied
// embeddings; bitwise).
#include <span>
#include <vector>

#include "model.hpp"
#include "vlpar/core/weight_grad_queue.hpp"
#include "vlpar/parallel/pipeline_split.hpp"
#include "vlpar/parallel/pipeline_stage.hpp"

namespace qwen3vl {

class PipelineStage {
 public:
  struct Stash {
    qwen3vl::Stash model;
    vlpar::WeightGradQueue weight_grads;  // between I and W: the decoder layers' weight-gradient work
    bool poisoned = false;                // non-finite router logits here or upstream: no backward runs
  };

  /// @brief Stage `stage` of `layout` over `model` (which must outlive it and hold the stage's part).
  static Result<PipelineStage> create(const Model& model, const vlpar::pipeline::Layout& layout, int stage);
  /// The part of the model a rank holding `stages` of `layout` builds (Model::create's PipelinePart).
  static PipelinePart part_for(const vlpar::pipeline::Layout& layout, std::span<const int> stages);

  /// @brief The step's micro-batches (every rank the same; they must outlive the step) and their loss weights.
  Status set_step(std::vector<Batch> micro, std::vector<double> weights);
  /// Micro-batch j's loss (the last stage, after its forward).
  const std::vector<StepLoss>& losses() const { return losses_; }
  /// With `keep`, the last stage's forward also keeps the logits [V] of each micro-batch's last position
  /// (generation: pipeline_generate.hpp); last_logits(j) is empty before that forward ran or elsewhere.
  void set_keep_last_logits(bool keep) { keep_last_logits_ = keep; }
  const std::vector<float>& last_logits(int j) const { return last_logits_.at(size_t(j)); }
  /// The step's assignments per (decoder layer, expert) [L · (E + 1)] of this stage's MoE layers (zeros elsewhere;
  /// each layer's dropped count last: expert_load_width).
  const std::vector<double>& expert_load() const { return expert_load_; }
  int stage() const { return stage_; }
  std::pair<int, int> layers() const { return {first_, last_}; }

  vlpar::pipeline::Port input_port(int j) const;
  vlpar::pipeline::Port output_port(int j) const;
  Status forward(const Context& ctx, std::span<const TensorView> out, std::span<const TensorView> in, int j,
                 Stash& st);
  Status backward(const Context& ctx, std::span<const TensorView> din, std::span<const TensorView> dout, int j,
                  Stash& st);
  /// The decoder layers' stash plus the stage's output (the vision tower's and the head's stashes not counted).
  int64_t stash_bytes(int j) const;

  // ---- the split backward of the zero-bubble schedules (a pipeline::SplitStage) ----
  /// I: backward() with the decoder layers' weight-gradient GEMMs queued in the stash (core/weight_grad_queue.hpp);
  /// din written as backward() writes it. The vision tower, embedding, final norm and head compute their
  /// gradients here (stage 0 and the last stage), and so do the norms.
  Status backward_input(const Context& ctx, std::span<const TensorView> din, std::span<const TensorView> dout, int j,
                        Stash& st);
  /// W: the queued work, in order; I then W gives every gradient bitwise equal to backward().
  Status backward_weight(const Context& ctx, int j, Stash& st);
  /// What the queue holds between I and W: the decoder layers' DecoderLayer::weight_stash_bytes (exact with every
  /// parameter trainable and no expert parallelism; an upper bound with frozen parameters, an estimate under EP).
  int64_t weight_stash_bytes(int j) const;

 private:
  PipelineStage(const Model& m, int stage, int stages, int first, int last)
      : model_(&m), stage_(stage), stages_(stages), first_(first), last_(last) {}
  bool is_last() const { return stage_ + 1 == stages_; }
  bool moe() const { return model_->config().text.num_moe_layers() > 0; }
  vlpar::pipeline::Port boundary(int j) const;
  Status keep_last_logits(const Context& ctx, int j, const Stash& st);
  Status check_j(int j) const;
  /// The micro-batch's forward found non-finite router logits (`why`): NaN to the next stage, or a NaN loss.
  Status poison(int j, std::span<const TensorView> out, Stash& st, const Status& why);

  const Model* model_;
  int stage_, stages_, first_, last_;
  std::vector<Batch> micro_;
  std::vector<double> weights_;
  std::vector<StepLoss> losses_;
  std::vector<double> expert_load_;
  bool keep_last_logits_ = false;
  std::vector<std::vector<float>> last_logits_;  // [m][V] (set_keep_last_logits)
};

static_assert(vlpar::pipeline::SplitStage<PipelineStage>);

}  // namespace qwen3vl
