#pragma once
// The trainer's pipeline-parallel step (parallel.pp > 1 or parallel.vpp > 1; docs/pipeline.md "The trainer"):
// the plan (schedule, layer split, this rank's stages and model part) and one step's forward and backward over the
// step's micro-batches on the library's pipeline engine.
//
//   plan_pipeline   parallel.schedule over pp ranks × vpp chunks with training.grad_accum micro-batches, lowered;
//                   the layer split from parallel.pipeline_layout, else the cost-model split (balanced_layout) of a
//                   representative micro-batch: data.token_budget tokens, half of them image tokens (m² patches
//                   each, at most data.patch_budget), images of data.max_pixels; per decoder layer its forward
//                   FLOPs (flops.hpp), the vision tower on stage 0, the LM head on the last stage;
//   PipelineRunner  this rank's PipelineStage objects and the Engine over the pp group; step() runs the rank's
//                   action list; the last stage's losses; a tied embedding's two copies (stage 0's lookup and the
//                   last stage's head, on different ranks) summed after the step (pipeline_tied.hpp); the step's
//                   compute and wait seconds for the metrics line; evaluate() runs the forward-only schedule on
//                   the same stages (the trainer's held-out loss).
// Test: examples/qwen3vl/tests/mpi_trainer_pipeline.cpp (through the Trainer).
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "pipeline_stage.hpp"
#include "train_config.hpp"
#include "vlpar/comm/communicator.hpp"
#include "vlpar/obs/trace_recorder.hpp"
#include "vlpar/parallel/pipeline_engine.hpp"
#include "vlpar/parallel/pipeline_schedule.hpp"

namespace qwen3vl {

struct PipelinePlan {
  vlpar::pipeline::Layout layout;
  vlpar::pipeline::Schedule lowered;  // generated and lowered: communication actions inserted
  std::vector<int> stages;            // this rank's stages, ascending
  PipelinePart part;                  // the model part those stages need
  std::vector<double> stage_share;    // [stages] each stage's share of the cost model's step cost
  int first_rank = 0, last_rank = 0;  // pipeline ranks of stage 0 and of the last stage

  /// One line: schedule, layout, cost shares ("1f1b over 2 ranks, layout 'V E t*2 | t L', cost 61% | 39%").
  std::string describe(std::string_view schedule) const;
};

/// @brief The plan of pipeline rank `pp_rank` of `pp` ranks (see the file comment).
Result<PipelinePlan> plan_pipeline(const TrainConfig& cfg, const Config& model, int pp, int pp_rank);

class PipelineRunner {
 public:
  /// `model` holds plan.part and outlives the runner; `pp` is the pipeline group (this rank is plan's pp_rank).
  static Result<std::unique_ptr<PipelineRunner>> create(PipelinePlan plan, const Model& model,
                                                        vlpar::comm::Communicator& pp);

  /// @brief One step's forward and backward: `micro` (every pipeline rank the same, outliving the call) weighted
  /// by `weights` (each micro-batch's share of the step's label tokens).
  Status step(const Context& ctx, std::vector<Batch> micro, std::vector<double> weights);
  /// @brief Forward only over `micro` (evaluation: the forward-only schedule on the training placement, built once
  /// per micro-batch count); losses() then holds their losses. Touches no gradient.
  Status evaluate(const Context& ctx, std::vector<Batch> micro);
  /// The last stage's per-micro-batch losses of the last step or evaluation; null when this rank does not hold the
  /// last stage.
  const std::vector<StepLoss>* losses() const;
  /// The last step's assignments per (decoder layer, expert) [L · (E + 1)] of this rank's MoE layers, each layer's
  /// dropped count last (empty: dense).
  std::vector<double> expert_load() const;
  /// True when the embedding is tied and its two copies sit on different ranks, this rank holding one of them.
  bool holds_tied_copy(const Model& model) const;
  /// True for the copy on the last stage's rank (it does not write the tensor to checkpoints).
  bool is_second_tied_copy(const Model& model) const;
  /// @brief Sums the tied embedding's gradient copies (no-op unless holds_tied_copy; a frozen embedding has none).
  Status sum_tied_gradient(const Context& ctx, Model& model);

  /// This rank's last step: seconds computing (forward/backward, waits excluded), waiting, and in all.
  struct Times {
    double compute_s = 0, wait_s = 0, span_s = 0;
  };
  Times times() const;
  /// @brief Adds the last step's actions of every pipeline rank to `trace` (category "pipeline": each compute
  /// action by its text form, "0F3" = stage 0's forward of micro-batch 3, with its wait for messages nested at its
  /// start as "wait"): this rank's on the calling thread's track, rank r's on the track "pipeline rank r", each
  /// placed from `step_start_ns` (= trace.now_ns() just before step()) by its own time since its step start (the
  /// ranks start a step together up to the skew of the previous step's loss all-reduce). Collective over the pp
  /// group (every rank calls it; a disabled trace records nothing).
  Status record_trace(vlpar::obs::TraceRecorder& trace, int64_t step_start_ns) const;
  const PipelinePlan& plan() const { return plan_; }

 private:
  PipelineRunner(PipelinePlan plan, vlpar::comm::Communicator& pp) : plan_(std::move(plan)), pp_(&pp) {}

  PipelinePlan plan_;
  vlpar::comm::Communicator* pp_;
  std::vector<PipelineStage> stages_;  // reserved up front: the engine keeps pointers to them
  std::optional<vlpar::pipeline::Engine<PipelineStage>> engine_;
  std::optional<vlpar::pipeline::Engine<PipelineStage>> eval_engine_;  // forward-only, for eval_m_ micro-batches
  int eval_m_ = 0;
};

}  // namespace qwen3vl
