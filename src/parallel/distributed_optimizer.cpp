// The data-parallel optimizer (replicated or ZeRO-1). See include/vlpar/parallel/distributed_optimizer.hpp.
#include "vlpar/parallel/distributed_optimizer.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace vlpar::parallel {

Status OptimizerConfig::validate() const {
  VLPAR_RETURN_IF_ERROR(adamw.validate());
  VLPAR_CHECK(max_grad_norm >= 0.0 && std::isfinite(max_grad_norm),
              "optimizer: max_grad_norm must be a finite number >= 0, got {}", max_grad_norm);
  VLPAR_CHECK(bucket_bytes >= 4, "optimizer: bucket_bytes must be at least 4, got {}", bucket_bytes);
  return Status::Ok();
}

Result<DistributedOptimizer> DistributedOptimizer::create(const Context& ctx, comm::Communicator* dp,
                                                          comm::Communicator* norm_group,
                                                          std::vector<OptimParam> params, OptimizerConfig cfg,
                                                          Allocator& alloc) {
  VLPAR_RETURN_IF_ERROR(cfg.validate());
  VLPAR_CHECK(dp != nullptr || !cfg.zero1, "optimizer: zero1 shards the optimizer state over a data-parallel group, "
                                           "but none was given");
  DistributedOptimizer o;
  o.dp_ = dp;
  o.norm_group_ = norm_group != nullptr && norm_group->size() > 1 ? norm_group : nullptr;
  o.cfg_ = cfg;
  o.alloc_ = &alloc;
  for (size_t i = 0; i < params.size(); ++i) {
    const OptimParam& p = params[i];
    VLPAR_CHECK(p.value.data != nullptr && p.value.is_contiguous() && p.value.device.is_cpu() &&
                    is_floating(p.value.dtype) && p.value.dtype != DType::kF64,
                "optimizer: parameter {} '{}' ({}) must be a contiguous f32/bf16/f16 CPU tensor", i, p.name,
                p.value.to_string());
    VLPAR_CHECK(p.grad.data != nullptr && p.grad.dtype == DType::kF32 && p.grad.is_contiguous() &&
                    p.grad.numel() == p.value.numel(),
                "optimizer: the gradient of parameter {} '{}' ({}) must be a contiguous f32 tensor of {} elements "
                "(a frozen parameter has no gradient and must not be given to the optimizer)",
                i, p.name, p.grad.to_string(), p.value.numel());
    VLPAR_CHECK(cfg.zero1 || p.value.dtype == DType::kF32,
                "optimizer: parameter {} '{}' is stored as {}; without zero1 AdamW updates the values in place and "
                "needs f32 storage (zero1 keeps an fp32 master copy)",
                i, p.name, dtype_name(p.value.dtype));
    VLPAR_CHECK(p.norm_weight > 0.0 && p.norm_weight <= 1.0, "optimizer: parameter {} '{}' has norm_weight {}", i,
                p.name, p.norm_weight);
  }
  o.params_ = std::move(params);
  const bool reduce = dp != nullptr && (dp->size() > 1 || cfg.zero1);
  if (reduce) {
    std::vector<TensorView> grads;
    for (const OptimParam& p : o.params_) grads.push_back(p.grad);
    BucketConfig bc{.bucket_bytes = cfg.bucket_bytes, .average = cfg.average_grads, .shard = cfg.zero1};
    VLPAR_ASSIGN_OR_RETURN(GradBuckets b, GradBuckets::create(*dp, std::move(grads), bc, alloc));
    o.buckets_.emplace(std::move(b));
  }
  if (cfg.zero1) {
    VLPAR_RETURN_IF_ERROR(o.build_shards(alloc));
    VLPAR_RETURN_IF_ERROR(o.read_master_from_params());
  } else {
    for (const OptimParam& p : o.params_) {
      VLPAR_ASSIGN_OR_RETURN(Tensor m, Tensor::zeros(alloc, p.value.shape, DType::kF32, ctx.device));
      VLPAR_ASSIGN_OR_RETURN(Tensor v, Tensor::zeros(alloc, p.value.shape, DType::kF32, ctx.device));
      o.m_.push_back(std::move(m));
      o.v_.push_back(std::move(v));
    }
  }
  return o;
}

Status DistributedOptimizer::build_shards(Allocator& alloc) {
  bucket_offset_.assign(params_.size(), 0);
  for (size_t b = 0; b < buckets_->num_buckets(); ++b) {
    const BucketInfo info = buckets_->bucket(b);
    ShardState s;
    const int64_t n = info.shard.numel(), lo = info.shard_begin, hi = lo + n;
    VLPAR_ASSIGN_OR_RETURN(s.master, Tensor::zeros(alloc, {n}, DType::kF32));
    VLPAR_ASSIGN_OR_RETURN(s.m, Tensor::zeros(alloc, {n}, DType::kF32));
    VLPAR_ASSIGN_OR_RETURN(s.v, Tensor::zeros(alloc, {n}, DType::kF32));
    int64_t offset = 0;  // of parameter i in the bucket's flat buffer
    for (size_t i = info.first; i < info.last; ++i) {
      const int64_t len = params_[i].value.numel();
      bucket_offset_[i] = offset;
      const int64_t a = std::max(lo, offset), e = std::min(hi, offset + len);
      if (a < e) s.segments.push_back({i, a - offset, a - lo, e - a});
      offset += len;
    }
    shards_.push_back(std::move(s));
  }
  return Status::Ok();
}

Status DistributedOptimizer::read_master_from_params() {
  for (ShardState& s : shards_) {
    for (const Segment& g : s.segments) {
      const TensorView& p = params_[g.param].value;
      const TensorView src(static_cast<char*>(p.data) + g.param_offset * int64_t(dtype_size(p.dtype)), p.dtype,
                           {g.length});
      VLPAR_RETURN_IF_ERROR(convert_(TensorView(s.master.ptr<float>() + g.shard_offset, DType::kF32, {g.length}), src));
    }
  }
  return Status::Ok();
}

Status DistributedOptimizer::grad_ready(size_t i) {
  VLPAR_CHECK(i < params_.size(), "optimizer: grad_ready({}) but there are {} parameters", i, params_.size());
  return buckets_ ? buckets_->mark_ready(i) : Status::Ok();
}

Status DistributedOptimizer::grad_ready_remaining() { return buckets_ ? buckets_->mark_remaining() : Status::Ok(); }

AdamWConfig DistributedOptimizer::adamw_for(size_t param, const AdamWConfig& base) const {
  AdamWConfig c = base;
  if (!params_[param].weight_decay) c.weight_decay = 0.f;
  return c;
}

Result<double> DistributedOptimizer::local_sum_of_squares(const Context& ctx) const {
  // Σ norm_weight · Σg² in a fixed order (fp64), over whole parameters or over this rank's slices.
  double sum = 0.0;
  auto add = [&](const TensorView& g, double weight) -> Status {
    VLPAR_ASSIGN_OR_RETURN(const double n, global_grad_norm(ctx, std::span<const TensorView>(&g, 1)));
    sum += weight * n * n;
    return Status::Ok();
  };
  if (!cfg_.zero1) {
    for (const OptimParam& p : params_) VLPAR_RETURN_IF_ERROR(add(p.grad, p.norm_weight));
    return sum;
  }
  for (size_t b = 0; b < shards_.size(); ++b) {
    const float* shard = buckets_->bucket(b).shard.ptr<float>();
    for (const Segment& g : shards_[b].segments)
      VLPAR_RETURN_IF_ERROR(add(TensorView(const_cast<float*>(shard) + g.shard_offset, DType::kF32, {g.length}),
                                params_[g.param].norm_weight));
  }
  return sum;
}

Status DistributedOptimizer::apply_replicated(const Context& ctx, const AdamWConfig& c, float clip) {
  for (size_t i = 0; i < params_.size(); ++i) {
    const OptimParam& p = params_[i];
    if (clip != 1.0f) VLPAR_RETURN_IF_ERROR(scale_(ctx, p.grad, clip));
    VLPAR_RETURN_IF_ERROR(adamw_step(ctx, p.value, TensorView{}, p.grad, m_[i], v_[i], adamw_for(i, c), step_));
  }
  return Status::Ok();
}

Status DistributedOptimizer::apply_sharded(const Context& ctx, const AdamWConfig& c, float clip) {
  for (size_t b = 0; b < shards_.size(); ++b) {
    const BucketInfo info = buckets_->bucket(b);
    if (clip != 1.0f) VLPAR_RETURN_IF_ERROR(scale_(ctx, info.shard, clip));
    ShardState& s = shards_[b];
    for (const Segment& g : s.segments) {
      auto seg = [&](const TensorView& t) {
        return TensorView(t.ptr<float>() + g.shard_offset, DType::kF32, {g.length});
      };
      VLPAR_RETURN_IF_ERROR(adamw_step(ctx, seg(s.master.view()), TensorView{}, seg(info.shard), seg(s.m.view()),
                                       seg(s.v.view()), adamw_for(g.param, c), step_));
    }
  }
  return gather_into_params();
}

Status DistributedOptimizer::gather_into_params() {
  // Every bucket's all-gather is started before any is waited for; each lands in the bucket's flat buffer (free
  // until the next step's gradients are packed) and is unpacked into the values (rounded to their dtype).
  std::vector<comm::WorkHandle> work;
  for (size_t b = 0; b < shards_.size(); ++b) {
    VLPAR_ASSIGN_OR_RETURN(comm::WorkHandle w, dp_->iall_gather(buckets_->bucket(b).flat, shards_[b].master.view()));
    work.push_back(std::move(w));
  }
  for (size_t b = 0; b < shards_.size(); ++b) {
    VLPAR_RETURN_IF_ERROR(work[b]->wait());
    const BucketInfo info = buckets_->bucket(b);
    for (size_t i = info.first; i < info.last; ++i) {
      const TensorView& p = params_[i].value;
      VLPAR_RETURN_IF_ERROR(
          convert_(TensorView(p.data, p.dtype, {p.numel()}), TensorView(info.flat.ptr<float>() + bucket_offset_[i], DType::kF32, {p.numel()})));
    }
  }
  return Status::Ok();
}

Result<StepReport> DistributedOptimizer::step(const Context& ctx, double lr) {
  if (buckets_) VLPAR_RETURN_IF_ERROR(buckets_->finish());
  VLPAR_ASSIGN_OR_RETURN(double sq, local_sum_of_squares(ctx));
  if (cfg_.zero1 && dp_->size() > 1)
    VLPAR_RETURN_IF_ERROR(dp_->all_reduce(TensorView(&sq, DType::kF64, {1}), comm::ReduceOp::kSum));
  if (norm_group_ != nullptr)
    VLPAR_RETURN_IF_ERROR(norm_group_->all_reduce(TensorView(&sq, DType::kF64, {1}), comm::ReduceOp::kSum));
  StepReport r;
  r.grad_norm = std::sqrt(sq);
  if (!std::isfinite(r.grad_norm)) return r;  // skipped: the caller warns and counts
  const float clip = cfg_.max_grad_norm > 0 && r.grad_norm > cfg_.max_grad_norm
                         ? float(cfg_.max_grad_norm / (r.grad_norm + 1e-6))
                         : 1.0f;
  AdamWConfig c = cfg_.adamw;
  c.lr = float(lr);
  ++step_;
  VLPAR_RETURN_IF_ERROR(cfg_.zero1 ? apply_sharded(ctx, c, clip) : apply_replicated(ctx, c, clip));
  r.applied = true;
  return r;
}

Status DistributedOptimizer::skip_step() { return buckets_ ? buckets_->finish() : Status::Ok(); }

Result<OptimizerState> DistributedOptimizer::state(bool gathered) {
  OptimizerState s;
  if (!cfg_.zero1) {
    for (size_t i = 0; i < params_.size(); ++i) {
      s.m.push_back(m_[i].view());
      s.v.push_back(v_[i].view());
    }
    return s;
  }
  for (const OptimParam& p : params_) {
    for (int k = 0; k < 2; ++k) {
      VLPAR_ASSIGN_OR_RETURN(Tensor t, Tensor::zeros(*alloc_, p.value.shape, DType::kF32));
      (k == 0 ? s.m : s.v).push_back(t.view());
      s.staging.push_back(std::move(t));
    }
  }
  if (!gathered) return s;
  for (int k = 0; k < 2; ++k) {
    for (size_t b = 0; b < shards_.size(); ++b) {
      const BucketInfo info = buckets_->bucket(b);
      VLPAR_RETURN_IF_ERROR(dp_->all_gather(info.flat, (k == 0 ? shards_[b].m : shards_[b].v).view()));
      for (size_t i = info.first; i < info.last; ++i) {
        const TensorView& dst = (k == 0 ? s.m : s.v)[i];
        std::memcpy(dst.data, info.flat.ptr<float>() + bucket_offset_[i], size_t(dst.numel()) * sizeof(float));
      }
    }
  }
  return s;
}

Status DistributedOptimizer::load_state(const OptimizerState& s) {
  VLPAR_CHECK(s.m.size() == params_.size() && s.v.size() == params_.size(),
              "optimizer: load_state got state for {} parameters, the optimizer has {}", s.m.size(), params_.size());
  if (!cfg_.zero1) {
    for (size_t i = 0; i < params_.size(); ++i) {
      if (s.m[i].data != m_[i].view().data) VLPAR_RETURN_IF_ERROR(copy_(m_[i], s.m[i]));
      if (s.v[i].data != v_[i].view().data) VLPAR_RETURN_IF_ERROR(copy_(v_[i], s.v[i]));
    }
    return Status::Ok();
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    for (const TensorView& t : {s.m[i], s.v[i]})
      VLPAR_CHECK(t.data != nullptr && t.dtype == DType::kF32 && t.is_contiguous() && t.numel() == params_[i].value.numel(),
                  "optimizer: load_state: the state of parameter {} '{}' is {}, expected a contiguous f32 tensor of {} "
                  "elements", i, params_[i].name, t.to_string(), params_[i].value.numel());
  }
  for (ShardState& sh : shards_) {
    for (const Segment& g : sh.segments) {
      std::memcpy(sh.m.ptr<float>() + g.shard_offset, s.m[g.param].ptr<float>() + g.param_offset,
                  size_t(g.length) * sizeof(float));
      std::memcpy(sh.v.ptr<float>() + g.shard_offset, s.v[g.param].ptr<float>() + g.param_offset,
                  size_t(g.length) * sizeof(float));
    }
  }
  return read_master_from_params();
}

int64_t DistributedOptimizer::state_elements() const {
  int64_t n = 0;
  for (const Tensor& t : m_) n += 2 * t.numel();
  for (const ShardState& s : shards_) n += 3 * s.master.numel();
  return n;
}

}  // namespace vlpar::parallel
