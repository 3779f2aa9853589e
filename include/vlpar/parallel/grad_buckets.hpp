#pragma once
// Data-parallel gradient reduction in buckets, launched during the backward (DDP-style overlap).
//
// Gradients are registered in the order the backward finishes them (reverse of the forward). Consecutive
// gradients are grouped into buckets of about `bucket_bytes`; when the last gradient of a bucket is marked
// ready, the bucket is packed into one fp32 buffer and its all-reduce (sum) starts, non-blocking, while the
// backward goes on. finish() waits for every bucket, averages (÷ dp size) and unpacks into the gradients.
// Exposed communication = the wall time finish() spends blocked in wait(); the trainer reports it as the part
// of the step that overlap did not hide.
// Test: tests/mpi/test_data_parallel.cpp (mpirun -np 2 and 4).
#include <chrono>
#include <cstddef>
#include <vector>

#include "vlpar/comm/communicator.hpp"
#include "vlpar/core/allocator.hpp"
#include "vlpar/core/tensor.hpp"

namespace vlpar::parallel {

struct BucketConfig {
  size_t bucket_bytes = size_t(25) << 20;  // fp32 bytes per bucket (PyTorch DDP's default 25 MiB)
};

class GradBuckets {
 public:
  /// @param dp    the data-parallel group (grads are averaged over it)
  /// @param grads contiguous f32 CPU gradients in backward-completion order; they must outlive this object
  static Result<GradBuckets> create(comm::Communicator& dp, std::vector<TensorView> grads, BucketConfig cfg,
                                    Allocator& alloc);

  /// @brief Gradient i is final for this step; starts its bucket's all-reduce when the bucket is complete.
  Status mark_ready(size_t i);
  /// @brief Waits for all buckets (launching any incomplete ones), averages, unpacks. Resets for the next step.
  Status finish();

  size_t num_buckets() const { return buckets_.size(); }
  /// Seconds the last finish() spent blocked waiting for communication (the exposed part).
  double exposed_seconds() const { return exposed_seconds_; }

 private:
  struct Bucket {
    size_t first = 0, last = 0;  // gradient index range [first, last)
    Tensor flat;                 // [Σ numel] f32
    size_t ready = 0;
    comm::WorkHandle work;
  };
  Status launch(Bucket& b);

  comm::Communicator* dp_ = nullptr;
  std::vector<TensorView> grads_;
  std::vector<size_t> bucket_of_;
  std::vector<Bucket> buckets_;
  std::vector<bool> marked_;
  double exposed_seconds_ = 0.0;
};

}  // namespace vlpar::parallel
