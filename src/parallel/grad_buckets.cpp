// Bucketed, overlapped data-parallel gradient all-reduce. See include/vlpar/parallel/grad_buckets.hpp.
#include "vlpar/parallel/grad_buckets.hpp"

#include <cstring>

namespace vlpar::parallel {

Result<GradBuckets> GradBuckets::create(comm::Communicator& dp, std::vector<TensorView> grads, BucketConfig cfg,
                                        Allocator& alloc) {
  VLPAR_CHECK(cfg.bucket_bytes >= 4, "GradBuckets: bucket_bytes must be at least 4, got {}", cfg.bucket_bytes);
  GradBuckets g;
  g.dp_ = &dp;
  g.grads_ = std::move(grads);
  g.bucket_of_.resize(g.grads_.size());
  g.marked_.assign(g.grads_.size(), false);
  size_t i = 0;
  while (i < g.grads_.size()) {
    Bucket b;
    b.first = i;
    size_t bytes = 0;
    int64_t elems = 0;
    do {
      const TensorView& t = g.grads_[i];
      VLPAR_CHECK(t.dtype == DType::kF32 && t.is_contiguous() && t.device.is_cpu() && t.data != nullptr,
                  "GradBuckets: gradient {} ({}) must be a contiguous f32 CPU tensor", i, t.to_string());
      bytes += t.nbytes();
      elems += t.numel();
      g.bucket_of_[i] = g.buckets_.size();
      ++i;
    } while (i < g.grads_.size() && bytes + g.grads_[i].nbytes() <= cfg.bucket_bytes);
    b.last = i;
    VLPAR_ASSIGN_OR_RETURN(b.flat, Tensor::empty(alloc, {elems}, DType::kF32));
    g.buckets_.push_back(std::move(b));
  }
  return g;
}

Status GradBuckets::launch(Bucket& b) {
  float* dst = b.flat.ptr<float>();
  for (size_t i = b.first; i < b.last; ++i) {
    std::memcpy(dst, grads_[i].data, grads_[i].nbytes());
    dst += grads_[i].numel();
  }
  VLPAR_ASSIGN_OR_RETURN(b.work, dp_->iall_reduce(b.flat.view(), comm::ReduceOp::kSum));
  return Status::Ok();
}

Status GradBuckets::mark_ready(size_t i) {
  VLPAR_CHECK(i < grads_.size(), "GradBuckets::mark_ready: gradient {} of {} does not exist", i, grads_.size());
  VLPAR_CHECK(!marked_[i], "GradBuckets::mark_ready: gradient {} marked twice in one step", i);
  marked_[i] = true;
  Bucket& b = buckets_[bucket_of_[i]];
  if (++b.ready == b.last - b.first) return launch(b);
  return Status::Ok();
}

Status GradBuckets::finish() {
  const float scale = 1.0f / float(dp_->size());
  exposed_seconds_ = 0.0;
  for (Bucket& b : buckets_) {
    if (!b.work) VLPAR_RETURN_IF_ERROR(launch(b));  // gradients never marked (e.g. unused params) still reduce
    const auto t0 = std::chrono::steady_clock::now();
    VLPAR_RETURN_IF_ERROR(b.work->wait());
    exposed_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    b.work.reset();
    const float* src = b.flat.ptr<float>();
    for (size_t i = b.first; i < b.last; ++i) {
      float* g = grads_[i].ptr<float>();
      for (int64_t k = 0; k < grads_[i].numel(); ++k) g[k] = src[k] * scale;
      src += grads_[i].numel();
    }
    b.ready = 0;
  }
  std::fill(marked_.begin(), marked_.end(), false);
  return Status::Ok();
}

}  // namespace vlpar::parallel
