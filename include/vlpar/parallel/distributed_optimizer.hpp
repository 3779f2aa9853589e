#pragma once
// ZeRO-1 distributed optimizer: fp32 master weights and AdamW state sharded over the data-parallel group.
//
// Layout: the parameters, in registration order, are concatenated into one flat fp32 vector of n elements,
// padded to n_pad = ceil(n / dp)·dp; rank r owns elements [r·s, (r+1)·s), s = n_pad / dp, and keeps the master
// copy, m and v of that shard only (memory per rank: 3·s fp32 instead of 3·n).
// step(): gradients are packed flat → reduce-scatter (sum) → ÷ dp gives this rank's shard of the mean
// gradient → optional global-norm clipping (shard sums of squares all-reduced) → AdamW on the shard →
// all-gather of the updated shards → unpacked into the model's parameter views (any float dtype).
// Offload: `offload_fraction` moves that fraction of the optimizer state to host memory on GPU runs; on the
// CPU the state already lives in host memory, so it is accepted and changes nothing.
// Test: tests/mpi/test_data_parallel.cpp (5 steps equal plain AdamW on the averaged gradients).
#include <span>
#include <vector>

#include "vlpar/comm/communicator.hpp"
#include "vlpar/core/context.hpp"
#include "vlpar/core/tensor.hpp"
#include "vlpar/kernels/optimizer.hpp"

namespace vlpar::parallel {

struct ZeroConfig {
  AdamWConfig adamw;
  double max_grad_norm = 0.0;     // > 0: clip the global gradient norm to this value
  double offload_fraction = 0.0;  // [0, 1]: share of optimizer state kept in host memory (GPU runs)

  Status validate() const;
};

class DistributedOptimizer {
 public:
  /// @param params model parameters (contiguous CPU views, any float dtype); they must outlive the optimizer.
  ///               Their current values initialise the fp32 master shard.
  static Result<DistributedOptimizer> create(const Context& ctx, comm::Communicator& dp,
                                             std::vector<TensorView> params, ZeroConfig cfg, Allocator& alloc);

  /// @brief One optimizer step from this rank's local gradients (same shapes and order as params).
  /// @return the global L2 norm of the mean gradient before clipping.
  Result<double> step(std::span<const TensorView> grads, int64_t step);

  int64_t shard_elements() const { return shard_; }
  int64_t total_elements() const { return total_; }

 private:
  Status pack_grads(std::span<const TensorView> grads);
  Status unpack_params();

  Context ctx_;
  comm::Communicator* dp_ = nullptr;
  std::vector<TensorView> params_;
  ZeroConfig cfg_;
  int64_t total_ = 0, padded_ = 0, shard_ = 0;
  Tensor flat_grad_, flat_param_;     // [padded] f32: packing buffers
  Tensor shard_grad_, master_, m_, v_;  // [shard] f32: this rank's slice
};

}  // namespace vlpar::parallel
