// Bucketed, overlapped data-parallel gradient reduction. See include/vlpar/parallel/grad_buckets.hpp.
#include "vlpar/parallel/grad_buckets.hpp"

#include <cstring>

namespace vlpar::parallel {

Result<GradBuckets> GradBuckets::create(comm::Communicator& dp, std::vector<TensorView> grads, BucketConfig cfg,
                                        Allocator& alloc) {
  VLPAR_CHECK(cfg.bucket_bytes >= 4, "GradBuckets: bucket_bytes must be at least 4, got {}", cfg.bucket_bytes);
  VLPAR_CHECK(cfg.parts >= 1 && dp.size() % cfg.parts == 0, "GradBuckets: {} ranks holding parts of one gradient do "
              "not divide the {} ranks reducing the gradients", cfg.parts, dp.size());
  VLPAR_CHECK(cfg.batches >= 1, "GradBuckets: batches must be at least 1, got {}", cfg.batches);
  VLPAR_CHECK(cfg.duplicates >= 1 && dp.size() % cfg.duplicates == 0,
              "GradBuckets: {} duplicate ranks do not divide the {} ranks reducing the gradients", cfg.duplicates,
              dp.size());
  GradBuckets g;
  g.dp_ = &dp;
  g.cfg_ = cfg;
  g.grads_ = std::move(grads);
  g.bucket_of_.resize(g.grads_.size());
  g.marked_.assign(g.grads_.size(), false);
  const int64_t world = dp.size();
  size_t i = 0;
  while (i < g.grads_.size()) {
    Bucket b;
    b.first = i;
    size_t bytes = 0;
    do {
      const TensorView& t = g.grads_[i];
      VLPAR_CHECK(t.dtype == DType::kF32 && t.is_contiguous() && t.device.is_cpu() && t.data != nullptr,
                  "GradBuckets: gradient {} ({}) must be a contiguous f32 CPU tensor", i, t.to_string());
      bytes += t.nbytes();
      b.numel += t.numel();
      g.bucket_of_[i] = g.buckets_.size();
      ++i;
    } while (i < g.grads_.size() && bytes + g.grads_[i].nbytes() <= cfg.bucket_bytes);
    b.last = i;
    const int64_t padded = cfg.shard ? (b.numel + world - 1) / world * world : b.numel;
    VLPAR_ASSIGN_OR_RETURN(b.flat, Tensor::zeros(alloc, {padded}, DType::kF32));  // padding tail stays zero
    if (cfg.shard) {
      VLPAR_ASSIGN_OR_RETURN(b.shard, Tensor::zeros(alloc, {padded / world}, DType::kF32));
    }
    g.buckets_.push_back(std::move(b));
  }
  return g;
}

BucketInfo GradBuckets::bucket(size_t b) const {
  const Bucket& k = buckets_.at(b);
  BucketInfo info;
  info.first = k.first;
  info.last = k.last;
  info.flat = k.flat.view();
  if (cfg_.shard) {
    info.shard = k.shard.view();
    info.shard_begin = int64_t(dp_->rank()) * k.shard.numel();
  }
  return info;
}

Status GradBuckets::launch(Bucket& b) {
  float* dst = b.flat.ptr<float>();
  for (size_t i = b.first; i < b.last; ++i) {
    std::memcpy(dst, grads_[i].data, grads_[i].nbytes());
    dst += grads_[i].numel();
  }
  if (cfg_.shard) {
    // The tail beyond numel may hold the previous step's all-gathered parameters: zero it again.
    std::memset(dst, 0, size_t(b.flat.numel() - b.numel) * sizeof(float));
    VLPAR_ASSIGN_OR_RETURN(b.work, dp_->ireduce_scatter(b.shard.view(), b.flat.view(), comm::ReduceOp::kSum));
  } else {
    VLPAR_ASSIGN_OR_RETURN(b.work, dp_->iall_reduce(b.flat.view(), comm::ReduceOp::kSum));
  }
  return Status::Ok();
}

Status GradBuckets::mark_ready(size_t i) {
  VLPAR_CHECK(i < grads_.size(), "GradBuckets::mark_ready: gradient {} of {} does not exist", i, grads_.size());
  VLPAR_CHECK(!marked_[i], "GradBuckets::mark_ready: gradient {} marked twice in one step", i);
  marked_[i] = true;
  ++buckets_[bucket_of_[i]].ready;
  // Buckets start strictly in index order, so every rank issues its collectives in the same order whatever order
  // the gradients were reported in (MPI and NCCL match collectives by issue order).
  while (next_launch_ < buckets_.size() &&
         buckets_[next_launch_].ready == buckets_[next_launch_].last - buckets_[next_launch_].first) {
    VLPAR_RETURN_IF_ERROR(launch(buckets_[next_launch_]));
    ++next_launch_;
  }
  return Status::Ok();
}

Status GradBuckets::mark_remaining() {
  for (size_t i = 0; i < grads_.size(); ++i)
    if (!marked_[i]) VLPAR_RETURN_IF_ERROR(mark_ready(i));
  return Status::Ok();
}

Status GradBuckets::finish() {
  const float scale =
      cfg_.average ? float(cfg_.parts) / (float(dp_->size()) * float(cfg_.batches)) : 1.0f / float(cfg_.duplicates);
  exposed_seconds_ = 0.0;
  for (Bucket& b : buckets_) {
    if (!b.work) VLPAR_RETURN_IF_ERROR(launch(b));  // gradients never marked (e.g. unused params) still reduce
    const auto t0 = std::chrono::steady_clock::now();
    VLPAR_RETURN_IF_ERROR(b.work->wait());
    exposed_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    b.work.reset();
    b.ready = 0;
    if (cfg_.shard) {
      if (scale != 1.0f) {
        float* s = b.shard.ptr<float>();
        for (int64_t k = 0; k < b.shard.numel(); ++k) s[k] *= scale;
      }
      continue;
    }
    const float* src = b.flat.ptr<float>();
    for (size_t i = b.first; i < b.last; ++i) {
      float* g = grads_[i].ptr<float>();
      if (scale == 1.0f) {
        std::memcpy(g, src, grads_[i].nbytes());
      } else {
        for (int64_t k = 0; k < grads_[i].numel(); ++k) g[k] = src[k] * scale;
      }
      src += grads_[i].numel();
    }
  }
  std::fill(marked_.begin(), marked_.end(), false);
  next_launch_ = 0;
  return Status::Ok();
}

}  // namespace vlpar::parallel
