#pragma once
// The trainer's optimizer over the parameter registry: AdamW (PyTorch semantics, kernels/optimizer.hpp) with fp32
// m and v per trainable parameter shard, decoupled weight decay on matrices only (not on norms, biases, or any
// 1-D parameter), global-norm clipping, and the reductions a data- and tensor-parallel run needs:
//   - gradients are summed over the dp group (the model's backward is scaled by each micro-batch's share of the
//     global token count, so the sum is the gradient of the global token-weighted mean loss);
//   - the global grad norm sums each shard's Σg² over the tp group, weighting a parameter held by several tp ranks
//     (replicated norms, replicated kv heads) by 1/replicas so every element counts once.
// A non-finite grad norm skips the update (the caller counts consecutive skips). State for checkpoints:
// tensors() lists m and v under "optim.m.<name>" / "optim.v.<name>" with the parameter's shard description.
// Test: examples/qwen3vl/tests/test_trainer_parts.cpp (against a plain per-tensor AdamW loop).
#include <cstdint>
#include <string>
#include <vector>

#include "model.hpp"
#include "vlpar/comm/communicator.hpp"
#include "vlpar/kernels/optimizer.hpp"

namespace qwen3vl {

struct OptimizerTensor {  // for checkpoints
  std::string name;
  TensorView local;
  vlpar::nn::ParamShard shard;
};

struct StepReport {
  double grad_norm = 0;   // before clipping (global)
  bool applied = false;   // false: non-finite norm, no update
};

class TrainOptimizer {
 public:
  /// @param dp data-parallel group (null = none); tp the model's tensor-parallel group is read from the model.
  static Result<TrainOptimizer> create(const Context& ctx, Model& model, const vlpar::AdamWConfig& adamw,
                                       vlpar::comm::Communicator* dp, Allocator& alloc);

  /// @brief dp-sum the gradients, global norm, clip to max_norm (0 = off), AdamW at learning rate lr.
  Result<StepReport> step(const Context& ctx, double lr, double max_norm);

  int64_t steps_taken() const { return step_; }
  void set_steps_taken(int64_t s) { step_ = s; }
  std::vector<OptimizerTensor> tensors() const;

 private:
  Result<double> grad_norm(const Context& ctx) const;

  Model* model_ = nullptr;
  vlpar::AdamWConfig adamw_;
  vlpar::comm::Communicator* dp_ = nullptr;
  std::vector<size_t> params_;         // trainable registry indices
  std::vector<Tensor> m_, v_;          // per trainable parameter, f32, local shard shape
  std::vector<bool> decay_;            // weight decay applies (ndim >= 2)
  std::vector<double> norm_weight_;    // 1 / (tp ranks holding each element)
  int64_t step_ = 0;
};

}  // namespace qwen3vl
