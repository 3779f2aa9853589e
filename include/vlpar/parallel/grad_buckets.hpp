#pragma once
// Data-parallel gradient reduction in buckets, launched during the backward (DDP-style overlap).
//
// Gradients are registered in the order the backward finishes them (reverse of the forward). Consecutive
// gradients are grouped into buckets of about `bucket_bytes`; when every gradient of a bucket (and of every
// bucket before it: buckets start in index order on every rank) is marked ready, the bucket is packed into one
// fp32 buffer and its reduction starts, non-blocking, while the backward goes on. finish() waits for every bucket (launching any that were never completed) and then:
//   - all-reduce mode (shard = false): sum, optionally ÷ dp (average), unpacked into the gradients;
//   - ZeRO mode (shard = true): each bucket's flat buffer is padded to a multiple of dp and reduce-scattered:
//     rank r receives elements [r·s, (r+1)·s) of the bucket (s = padded / dp) in shard(b), optionally ÷ dp; the
//     gradients themselves are left as they were (DistributedOptimizer reads the shards). The flat buffer is free
//     until the next launch, so ZeRO's parameter all-gather lands in it.
// Exposed communication = the wall time finish() spends blocked in wait(); the trainer reports it as the part
// of the step that overlap did not hide.
// Tests: tests/mpi/test_data_parallel.cpp (mpirun -np 2 and 4), tests/mpi/test_distributed_optimizer.cpp.
#include <chrono>
#include <cstddef>
#include <vector>

#include "vlpar/comm/communicator.hpp"
#include "vlpar/core/allocator.hpp"
#include "vlpar/core/tensor.hpp"

namespace vlpar::parallel {

struct BucketConfig {
  size_t bucket_bytes = size_t(25) << 20;  // fp32 bytes per bucket (PyTorch DDP's default 25 MiB)
  bool average = true;  // ÷ dp after the sum; false when the loss was already scaled by each rank's share
  bool shard = false;   // ZeRO: reduce-scatter each bucket instead of all-reducing it
  int duplicates = 1;   // ranks among the dp group that computed the same gradient from the same data (a vision
                        // tower replicated over the language model's tp ranks): the sum is ÷ duplicates (when not
                        // averaging; an average already divides by them)
  int parts = 1;        // ranks among the dp group whose gradients are parts of one replica's gradient (experts
                        // under sequence parallelism: each tp rank routed its share of the same micro-batch); an
                        // average is then ÷ (dp / parts), the number of data replicas
  int batches = 1;      // data replicas' batches each rank's gradient already sums (a vision tower whose tp group
                        // spans several data-parallel batches, examples/qwen3vl/vision_slots.hpp): an average is
                        // then ÷ (dp · batches)
};

/// One bucket as finish() leaves it. Elements of the flat buffer follow the gradients [first, last) in order.
struct BucketInfo {
  size_t first = 0, last = 0;  // gradient index range
  int64_t shard_begin = 0;     // this rank's slice of the flat buffer: [shard_begin, shard_begin + shard.numel())
  TensorView flat;             // [Σ numel of its gradients, rounded up to a multiple of dp in shard mode] f32
  TensorView shard;            // [padded / dp] f32 (shard mode; empty otherwise)
};

class GradBuckets {
 public:
  /// @param dp    the data-parallel group (grads are reduced over it)
  /// @param grads contiguous f32 CPU gradients in backward-completion order; they must outlive this object
  static Result<GradBuckets> create(comm::Communicator& dp, std::vector<TensorView> grads, BucketConfig cfg,
                                    Allocator& alloc);

  /// @brief Gradient i is final for this step; starts its bucket's reduction when the bucket is complete.
  Status mark_ready(size_t i);
  /// @brief Marks every gradient not yet marked this step (every bucket has then started, in index order).
  Status mark_remaining();
  /// @brief Waits for all buckets (launching any incomplete ones), scales, and (all-reduce mode) unpacks.
  /// Resets for the next step.
  Status finish();

  size_t num_buckets() const { return buckets_.size(); }
  BucketInfo bucket(size_t b) const;
  /// Seconds the last finish() spent blocked waiting for communication (the exposed part).
  double exposed_seconds() const { return exposed_seconds_; }

 private:
  struct Bucket {
    size_t first = 0, last = 0;  // gradient index range [first, last)
    int64_t numel = 0;
    Tensor flat;                 // [padded] f32
    Tensor shard;                // [padded / dp] f32, shard mode only
    size_t ready = 0;
    comm::WorkHandle work;
  };
  Status launch(Bucket& b);

  comm::Communicator* dp_ = nullptr;
  BucketConfig cfg_;
  std::vector<TensorView> grads_;
  std::vector<size_t> bucket_of_;
  std::vector<Bucket> buckets_;
  std::vector<bool> marked_;
  size_t next_launch_ = 0;  // buckets [0, next_launch_) have started this step
  double exposed_seconds_ = 0.0;
};

}  // namespace vlpar::parallel
