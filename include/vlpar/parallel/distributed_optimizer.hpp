#pragma once
// The data-parallel optimizer: bucketed gradient reduction overlapped with the backward (GradBuckets), the global
// gradient norm, clipping and AdamW (PyTorch semantics, kernels/optimizer.hpp) with fp32 state — replicated on
// every dp rank, or sharded over dp (ZeRO-1, `zero1 = true`).
//
//   replicated (zero1 = false)            ZeRO-1 (zero1 = true)
//   buckets all-reduced into the grads    buckets reduce-scattered: rank r gets slice r of every bucket
//   m, v per parameter (2-3 × P fp32)      fp32 master, m, v of this rank's slices only (3 × P / dp)
//   AdamW in place on f32 values, on an   AdamW on the slices, then the slices are all-gathered into the
//   fp32 master of bf16 values (rounded    bucket buffers and unpacked into the values (any float dtype)
//   into the value after each step)
// Parameters are grouped by their replica group (OptimParam::replica: dense, expert, vision; optimizer_groups.hpp):
// each group has its own buckets over its own replicas communicator (and its own ZeRO-1 shards), so expert weights
// reduce over expert-dp and the vision tower over vision-dp while dense weights reduce over dp.
// The gradient norm: per group, Σ norm_weight · Σg² per parameter (or per slice), summed over the group's replicas
// (ZeRO) and over its norm groups (tp; etp and ep for experts); the groups' sums are added, then summed over the
// pipeline stages (OptimizerGroups::stages), so every element of the model counts once. A non-finite norm skips the update (the caller counts consecutive skips); max_grad_norm > 0
// clips to it.
//
// Use: params in the order the backward finishes them (optim_params_from_registry(reg, model order, groups));
// call grad_ready(i) from the backward of the step's last micro-batch (earlier micro-batches only accumulate),
// then step(ctx, lr). Without grad_ready calls every bucket is reduced inside step() (no overlap, same result).
//
// Checkpoints: state(gathered) returns m, v and (bf16 values) the fp32 master per parameter, shaped like the
// parameter, named by the caller (`optim.m.<name>`; the trainer saves a master as the parameter) — the same
// tensors in both modes, so a checkpoint written with ZeRO-1 loads
// without it and the other way round, at any dp. In ZeRO mode state(true) all-gathers (collective over dp) into
// staging tensors; for a load, state(false) gives staging to fill and load_state() takes this rank's slices and
// the given masters (rounding them into the values), or re-reads the fp32 master from the (just loaded) values.
// Tests: tests/mpi/test_distributed_optimizer.cpp (np 2, 4: both modes vs plain per-tensor AdamW, clipping,
// odd sizes, frozen parameters, state round trip across modes, two replica groups over different communicators),
// tests/mpi/test_data_parallel.cpp.
#include <cmath>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "vlpar/comm/communicator.hpp"
#include "vlpar/core/context.hpp"
#include "vlpar/core/tensor.hpp"
#include "vlpar/kernels/optimizer.hpp"
#include "vlpar/parallel/grad_buckets.hpp"
#include "vlpar/parallel/optim_params.hpp"
#include "vlpar/parallel/optimizer_groups.hpp"

namespace vlpar::parallel {

struct OptimizerConfig {
  AdamWConfig adamw;              // adamw.lr is replaced by step()'s lr (the schedule's value)
  double max_grad_norm = 0.0;     // > 0: clip the global gradient norm to this value
  bool zero1 = false;             // shard fp32 master weights, m and v over the dp group
  bool average_grads = true;      // ÷ dp after summing; false when each rank's loss is already scaled by its share
  size_t bucket_bytes = size_t(25) << 20;

  /// Inline: the trainer's TOML parser checks it without linking the optimizer (examples/qwen3vl, fuzz/).
  Status validate() const {
    VLPAR_RETURN_IF_ERROR(adamw.validate());
    VLPAR_CHECK(max_grad_norm >= 0.0 && std::isfinite(max_grad_norm),
                "optimizer: max_grad_norm must be a finite number >= 0, got {}", max_grad_norm);
    VLPAR_CHECK(bucket_bytes >= 4, "optimizer: bucket_bytes must be at least 4, got {}", bucket_bytes);
    return Status::Ok();
  }
};

struct StepReport {
  double grad_norm = 0.0;  // global, before clipping
  bool applied = false;    // false: non-finite norm, nothing was updated
};

/// m and v per parameter, in the optimizer's parameter order; views into live state or into `staging`. `master`:
/// the fp32 master weights of parameters stored in a lower precision (an empty view for an f32 parameter, whose
/// value is its master); load_state accepts an empty `master` (masters read from the values).
struct OptimizerState {
  std::vector<TensorView> m, v, master;
  std::vector<Tensor> staging;  // owns the gathered / to-be-loaded copies in ZeRO mode
};

class DistributedOptimizer {
 public:
  /// @param groups per replica group: the replicas communicator (gradient reduction, ZeRO-1) and the norm groups
  /// @param params in backward-completion order; their views must outlive the optimizer
  static Result<DistributedOptimizer> create(const Context& ctx, const OptimizerGroups& groups,
                                             std::vector<OptimParam> params, OptimizerConfig cfg, Allocator& alloc);

  /// @brief Parameter i's gradient is final for this step (starts its bucket's reduction when complete).
  Status grad_ready(size_t i);
  /// @brief Reports every gradient not yet reported this step (all buckets have then started). Call it on every
  /// rank before another collective on the dp group when some rank may not have reported all its gradients.
  Status grad_ready_remaining();
  /// @brief Finishes the reduction, computes the norm, clips, and applies AdamW at learning rate `lr`.
  Result<StepReport> step(const Context& ctx, double lr);
  /// @brief Ends the step without an update (the caller saw a non-finite loss): completes the reductions, so every
  /// rank has issued the same collectives, and resets for the next step.
  Status skip_step();

  Result<OptimizerState> state(bool gathered);
  Status load_state(const OptimizerState& s);

  size_t num_params() const { return params_.size(); }
  int64_t steps_taken() const { return step_; }
  void set_steps_taken(int64_t s) { step_ = s; }
  /// Buckets over all replica groups.
  size_t num_buckets() const;
  /// fp32 elements of optimizer state (master + m + v) this rank holds.
  int64_t state_elements() const;

 private:
  /// The part of parameter `param` inside one bucket's shard (ZeRO mode).
  struct Segment {
    size_t param = 0;
    int64_t param_offset = 0;  // first element within the parameter
    int64_t shard_offset = 0;  // first element within the bucket's shard
    int64_t length = 0;
  };
  struct ShardState {
    Tensor master, m, v;  // [shard] f32
    std::vector<Segment> segments;
  };
  /// The parameters of one replica group, with their buckets and (ZeRO) shards.
  struct Group {
    ReplicaGroup kind = ReplicaGroup::kDense;
    ReplicaComms comms;
    std::vector<size_t> members;         // indices into params_, in backward-completion order
    std::optional<GradBuckets> buckets;  // absent without a replicas communicator to reduce over
    std::vector<ShardState> shards;      // ZeRO mode: per bucket
  };

  Status build_shards(Group& g, Allocator& alloc);
  Result<double> group_sum_of_squares(const Context& ctx, const Group& g) const;
  Status apply_replicated(const Context& ctx, const AdamWConfig& c, float clip);
  Status apply_sharded(const Context& ctx, Group& g, const AdamWConfig& c, float clip);
  Status gather_into_params(Group& g);
  Status read_master_from_params();
  Status finish_reductions();
  AdamWConfig adamw_for(size_t param, const AdamWConfig& base) const;

  std::vector<OptimParam> params_;
  OptimizerConfig cfg_;
  Allocator* alloc_ = nullptr;
  std::vector<Group> groups_;                    // the replica groups that have parameters, in enum order
  comm::Communicator* stages_ = nullptr;         // OptimizerGroups::stages
  std::vector<std::pair<size_t, size_t>> slot_;  // parameter → (its group in groups_, its index in members)
  std::vector<Tensor> m_, v_;                    // replicated mode: per parameter
  std::vector<Tensor> master_;                   // replicated mode: f32 masters of non-f32 values (else undefined)
  std::vector<int64_t> bucket_offset_;           // ZeRO: element offset of each parameter in its bucket's buffer
  int64_t step_ = 0;
};

}  // namespace vlpar::parallel
