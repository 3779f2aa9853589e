#pragma once
// The Qwen3-VL trainer (issue 6): micro-batches from a BatchSource, gradient accumulation, AdamW with fp32 state,
// warmup + cosine schedule, global-norm clipping, freezing, activation recompute, tensor and data parallelism
// over MPI ranks, per-step metrics (console line, JSONL, TensorBoard, Chrome trace, plot), atomic sharded
// checkpoints with bit-exact resume, and non-finite-step handling.
//
// One optimizer step:
//   fetch grad_accum micro-batches (time waiting for them = data wait) → token counts n_i, all-reduced over dp →
//   for each micro-batch: forward, backward with grad_loss = n_i / N_global (the gradient of the global
//   token-weighted mean loss); the last micro-batch's backward reports each gradient ready to the library's
//   parallel::DistributedOptimizer, whose buckets start their dp reduction during that backward → a non-finite
//   loss skips the step → DistributedOptimizer::step (finish the reduction, tp-aware global norm, clip, AdamW with
//   replicated or ZeRO-1 sharded state) → a non-finite norm skips the step → every training.eval_interval steps the
//   held-out loss (evaluate()) → metrics → checkpoint every checkpoint.interval steps.
// training.max_nonfinite_in_a_row consecutive skipped steps abort with an error naming what was non-finite.
//
// Pipeline (parallel.pp > 1 or vpp > 1, pipeline_runner.hpp): each rank builds only its stages' part of the model;
// step 1 reads the micro-batches on pipeline rank 0 only and sends them to the other stages without vision input;
// step 2 is one run of the pipeline engine over them instead of the per-micro-batch loop; a tied embedding's two
// copies (first and last stage) are summed after it and count ½ each in the norm; the norm sums over the stages (OptimizerGroups::stages); the loss comes
// from the last stage (all-reduced over pp). Checkpoints name every tensor, so any pp loads any other.
//
// Layout: world = tp · dp · pp ranks (mpirun), the library's mesh and process groups (parallel::ProcessGroups,
// order "tp-cp-ep-dp-pp": rank = (pp_rank · dp + dp_rank) · tp + tp_rank, tp ranks adjacent); the vision tower and
// MoE experts are replicated (vision tp 1, etp 1). Rank 0 writes the logs; every rank writes its checkpoint shard. The optimizer
// state in checkpoints is per parameter in both modes (ZeRO-1 gathers it), so parallel.zero1 may change on resume. Resume: the latest committed checkpoint in checkpoint.dir is loaded
// (parameters, m, v, step, each rank's data-source state), so 2N steps equal N steps, a resume and N more, bit for
// bit (same layout, CPU, fixed thread count).
// Test: examples/qwen3vl/tests/test_trainer.cpp (resume, kill during save, faults, recompute), and the README main
// job (scripts/demo.sh) end to end.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "batch_io.hpp"
#include "model.hpp"
#include "pipeline_runner.hpp"
#include "train_config.hpp"
#include "vlpar/comm/communicator.hpp"
#include "vlpar/io/checkpoint.hpp"
#include "vlpar/obs/metrics_line.hpp"
#include "vlpar/parallel/distributed_optimizer.hpp"
#include "vlpar/parallel/process_groups.hpp"

namespace qwen3vl {

/// One packed micro-batch: the data pipeline's pack (the model takes pack.view()).
struct MicroBatch {
  vlpar::data::PackedBatch pack;
  int64_t real_tokens = 0;  // tokens in the pack (no padding exists)
  int64_t images = 0;       // images + video clips
};

/// Where micro-batches come from. Deterministic and resumable: state() after k next() calls, given to restore()
/// on a fresh source, makes it yield exactly what the (k+1)-th call would have.
class BatchSource {
 public:
  virtual ~BatchSource() = default;
  virtual Result<MicroBatch> next() = 0;
  virtual Result<std::string> state() const = 0;  // JSON
  virtual Status restore(std::string_view state) = 0;
  virtual std::string describe() const = 0;
  /// Counts worth reporting at the end of training (skipped samples, packing efficiency); "" = nothing.
  virtual std::string summary() const { return {}; }
  /// Called by the trainer before the first next(): the data-parallel group (null at dp 1), the micro-batches of
  /// one optimizer step and the model's vision cost per pack. Sources that balance work across ranks use it;
  /// state() is then only asked for at step boundaries. Default: ignored.
  virtual Status set_data_parallel(vlpar::comm::Communicator* dp, int micro_batches_per_step,
                                   const vlpar::data::VisionCostModel& vision_cost) {
    (void)dp;
    (void)micro_batches_per_step;
    (void)vision_cost;
    return Status::Ok();
  }
};

/// Pre-packed batch files (batch_io.hpp format), cycled in order; data-parallel rank r of d takes files
/// r, r + d, r + 2d, ... (so each rank sees a disjoint share). State: {"position": k, "files": [this rank's
/// files]}; restoring a state of another share is an error.
class FileBatchSource : public BatchSource {
 public:
  /// `desc`: the model's MRoPE ids (Config::mrope_desc()), for the positions load_batch computes.
  static Result<std::unique_ptr<FileBatchSource>> create(std::vector<std::string> files,
                                                         const vlpar::data::MropeDesc& desc, int dp_rank, int dp_size);
  Result<MicroBatch> next() override;
  Result<std::string> state() const override;
  Status restore(std::string_view state) override;
  std::string describe() const override;

 private:
  std::vector<std::string> files_;  // this rank's share
  vlpar::data::MropeDesc desc_;
  int64_t position_ = 0;            // micro-batches handed out
};

/// This rank's data-parallel rank and the dp size under the config's layout, and whether it reads data: every tp
/// rank of a data replica reads the same micro-batches; with pipeline stages only pipeline rank 0 (stage 0's,
/// which needs the pixels) reads them and the other stages receive them without vision input
/// (data::share_packs_without_vision). For building the BatchSources before the Trainer.
struct DataRank {
  int rank = 0, size = 1;
  bool loads = true;  // false: give the Trainer no sources (it receives its micro-batches from pipeline rank 0)
};
Result<DataRank> data_rank_of(const TrainConfig& cfg, int world_rank, int world_size);

/// What a finished run reports.
struct TrainSummary {
  int64_t first_step = 0;          // 0, or the step resumed from
  int64_t steps_done = 0;          // optimizer steps attempted in this run (applied + skipped)
  int64_t skipped_steps = 0;
  std::vector<double> losses;      // loss of every step of this run (NaN for skipped ones)
  std::vector<double> grad_norms;
  std::vector<std::pair<int64_t, double>> eval_losses;  // (step, held-out loss) of every evaluation of this run
  std::string last_checkpoint;     // directory of the last checkpoint written ("" if none)
  double seconds = 0;
};

class Trainer {
 public:
  /// @param world  all ranks (null or size 1: one process); tp and pp from the config, dp = world / (tp · pp)
  /// @param source micro-batch source of this rank (null allowed only where DataRank::loads is false; given there,
  ///               it is not read)
  /// @param held_out this rank's held-out micro-batches for training.eval_interval (needed when it is > 0, on the
  ///               ranks that load data)
  static Result<std::unique_ptr<Trainer>> create(const TrainConfig& cfg, vlpar::comm::Communicator* world,
                                                 std::unique_ptr<BatchSource> source,
                                                 std::unique_ptr<BatchSource> held_out = nullptr);
  ~Trainer();

  /// @brief Trains until training.steps (resuming first when configured), saving checkpoints as configured.
  Result<TrainSummary> run();
  /// @brief The held-out loss of the current parameters: the token-weighted mean cross-entropy (router terms not
  /// included) over the first training.eval_batches micro-batches of the held-out source on every dp rank (the
  /// same ones at each call), forward only (under a pipeline: the forward-only schedule on the training
  /// placement). Collective over every rank; changes no parameter, gradient, optimizer or training-data state.
  Result<double> evaluate();

  const Model& model() const { return *model_; }
  /// Every tensor of this rank's training (parameters, gradients, optimizer state, scratch) comes from here.
  const Allocator& allocator() const { return alloc_; }
  Model& model() { return *model_; }
  int64_t step() const { return step_; }

 private:
  Trainer() = default;
  Status setup_groups();
  Status build_model();
  Status resume();
  Status save(int64_t step);
  std::vector<vlpar::io::CheckpointTensor> checkpoint_tensors(const vlpar::parallel::OptimizerState& optim);
  vlpar::comm::Communicator* dp_comm() const { return dp_size_ > 1 ? &groups_->dp() : nullptr; }
  Result<double> measure_peak_gflops();
  /// What step 2 (forward and backward over the step's micro-batches) leaves for the rest of the step.
  struct MicroResult {
    double loss_sum[5] = {0, 0, 0, 0, 0};  // Σ w·loss, Σ w·aux·coef, non-finite flag, Σ w·z·coef, Σ w·seq·coef
    std::string bad;                 // why the step must be skipped ("" = fine)
    std::vector<double> expert_load;  // [L · (E + 1)] this rank's assignments per (decoder layer, expert) and
                                      // dropped per layer (MoE models; expert_load_width)
    /// Adds micro-batch i of n (weight w); false, with the flag and the reason set, when its loss is not finite.
    bool add(const StepLoss& l, double w, const TextConfig& t, size_t i, size_t n);
  };
  /// `weights[i]`: micro-batch i's share of the step's label tokens (over every dp rank).
  Result<MicroResult> forward_backward(const std::vector<MicroBatch>& micro, const std::vector<double>& weights);
  Result<MicroResult> forward_backward_pipelined(const std::vector<MicroBatch>& micro,
                                                 const std::vector<double>& weights);
  Status pipeline_metrics(std::vector<vlpar::obs::NamedScalar>& extra);
  /// Fills the losses (loss_sum as MicroResult's), memory and throughput of `m` and writes it (rank 0).
  Status write_metrics(vlpar::obs::MetricsLine& m, const double* loss_sum, vlpar::obs::StepWork work);
  Result<std::vector<double>> balance_experts(std::vector<double> load);
  bool pipelined() const { return pipe_ != nullptr; }
  /// Pipeline rank 0 reads the data and sends it on (pp > 1); the others receive it.
  bool shares_data() const { return pipelined() && pp_size_ > 1; }
  bool loads_data() const { return !shares_data() || groups_->pp().rank() == 0; }
  /// @brief `count` checked micro-batches from `src` (`what` names them in errors; with `restart`, src is first
  /// restored to that state), read where this rank loads data and shared over the pipeline group (the later stages
  /// get them without vision input; a loading error reaches them as an error).
  Result<std::vector<MicroBatch>> fetch(BatchSource* src, int count, const std::string& what,
                                        const std::string* restart = nullptr);

  struct Logs;  // metrics writers (trainer.cpp)

  TrainConfig cfg_;
  vlpar::comm::Communicator* world_ = nullptr;
  std::unique_ptr<vlpar::comm::Communicator> own_world_;  // a SingleCommunicator when run without MPI
  std::unique_ptr<vlpar::parallel::ProcessGroups> groups_;
  int tp_rank_ = 0, dp_rank_ = 0, dp_size_ = 1, pp_size_ = 1;
  Allocator alloc_;
  Context ctx_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<vlpar::parallel::DistributedOptimizer> optim_;
  std::vector<size_t> optim_slot_;   // registry index → optimizer parameter (SIZE_MAX: frozen)
  std::unique_ptr<PipelineRunner> pipe_;  // null without pipeline parallelism
  std::unique_ptr<BatchSource> source_;
  std::unique_ptr<BatchSource> held_out_;  // null without evaluation
  std::string held_out_start_;             // its state before the first micro-batch (each evaluation restarts there)
  std::unique_ptr<Logs> logs_;
  int64_t step_ = 0;
  int64_t first_step_ = 0;
  std::string last_checkpoint_;
};

}  // namespace qwen3vl
