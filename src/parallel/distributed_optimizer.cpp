// The data-parallel optimizer (replicated or ZeRO-1). See include/vlpar/parallel/distributed_optimizer.hpp.
#include "vlpar/parallel/distributed_optimizer.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace vlpar::parallel {

namespace {

/// A parameter the optimizer can update: contiguous float values, a contiguous f32 gradient of the same size.
Status check_param(size_t i, const OptimParam& p) {
  VLPAR_CHECK(p.value.data != nullptr && p.value.is_contiguous() && p.value.device.is_cpu() &&
                  is_floating(p.value.dtype) && p.value.dtype != DType::kF64,
              "optimizer: parameter {} '{}' ({}) must be a contiguous f32/bf16/f16 CPU tensor", i, p.name,
              p.value.to_string());
  VLPAR_CHECK(p.grad.data != nullptr && p.grad.dtype == DType::kF32 && p.grad.is_contiguous() &&
                  p.grad.numel() == p.value.numel(),
              "optimizer: the gradient of parameter {} '{}' ({}) must be a contiguous f32 tensor of {} elements "
              "(a frozen parameter has no gradient and must not be given to the optimizer)",
              i, p.name, p.grad.to_string(), p.value.numel());
  VLPAR_CHECK(p.norm_weight > 0.0 && p.norm_weight <= 1.0, "optimizer: parameter {} '{}' has norm_weight {}", i,
              p.name, p.norm_weight);
  VLPAR_CHECK(size_t(p.replica) < kNumReplicaGroups, "optimizer: parameter {} '{}' has replica group {}", i,
              p.name, int(p.replica));
  return Status::Ok();
}

}  // namespace

Result<DistributedOptimizer> DistributedOptimizer::create(const Context& ctx, const OptimizerGroups& groups,
                                                          std::vector<OptimParam> params, OptimizerConfig cfg,
                                                          Allocator& alloc) {
  VLPAR_RETURN_IF_ERROR(cfg.validate());
  DistributedOptimizer o;
  o.cfg_ = cfg;
  o.alloc_ = &alloc;
  o.stages_ = groups.stages;
  for (size_t i = 0; i < params.size(); ++i) VLPAR_RETURN_IF_ERROR(check_param(i, params[i]));
  o.params_ = std::move(params);
  o.slot_.resize(o.params_.size());
  for (size_t k = 0; k < kNumReplicaGroups; ++k) {  // groups in enum order: the same on every rank
    Group g;
    g.kind = ReplicaGroup(k);
    g.comms = groups.by_group[k];
    for (size_t i = 0; i < o.params_.size(); ++i)
      if (o.params_[i].replica == g.kind) {
        o.slot_[i] = {o.groups_.size(), g.members.size()};
        g.members.push_back(i);
      }
    if (g.members.empty()) continue;
    comm::Communicator* rep = g.comms.replicas;
    VLPAR_CHECK(rep != nullptr || !cfg.zero1,
                "optimizer: zero1 shards the optimizer state over the {} parameters' replicas, but no communicator "
                "was given for them (OptimizerGroups)",
                replica_group_name(g.kind));
    // (One replica still averages when its gradients sum several batches: the ÷ batches.)
    if (rep != nullptr && (rep->size() > 1 || cfg.zero1 || (cfg.average_grads && g.comms.batches > 1))) {
      std::vector<TensorView> grads;
      for (size_t i : g.members) grads.push_back(o.params_[i].grad);
      BucketConfig bc{.bucket_bytes = cfg.bucket_bytes, .average = cfg.average_grads, .shard = cfg.zero1,
                      .duplicates = g.comms.duplicates, .parts = g.comms.parts, .batches = g.comms.batches};
      VLPAR_ASSIGN_OR_RETURN(GradBuckets b, GradBuckets::create(*rep, std::move(grads), bc, alloc));
      g.buckets.emplace(std::move(b));
    }
    o.groups_.push_back(std::move(g));
  }
  if (cfg.zero1) {
    o.bucket_offset_.assign(o.params_.size(), 0);
    for (Group& g : o.groups_) VLPAR_RETURN_IF_ERROR(o.build_shards(g, alloc));
    VLPAR_RETURN_IF_ERROR(o.read_master_from_params());
  } else {
    for (const OptimParam& p : o.params_) {
      VLPAR_ASSIGN_OR_RETURN(Tensor m, Tensor::zeros(alloc, p.value.shape, DType::kF32, ctx.device));
      VLPAR_ASSIGN_OR_RETURN(Tensor v, Tensor::zeros(alloc, p.value.shape, DType::kF32, ctx.device));
      o.m_.push_back(std::move(m));
      o.v_.push_back(std::move(v));
      Tensor master;  // an f32 value is its own master
      if (p.value.dtype != DType::kF32) {
        VLPAR_ASSIGN_OR_RETURN(master, Tensor::empty(alloc, p.value.shape, DType::kF32, ctx.device));
        VLPAR_RETURN_IF_ERROR(convert_(master, p.value));
      }
      o.master_.push_back(std::move(master));
    }
  }
  return o;
}

Status DistributedOptimizer::build_shards(Group& g, Allocator& alloc) {
  for (size_t b = 0; b < g.buckets->num_buckets(); ++b) {
    const BucketInfo info = g.buckets->bucket(b);
    ShardState s;
    const int64_t n = info.shard.numel(), lo = info.shard_begin, hi = lo + n;
    VLPAR_ASSIGN_OR_RETURN(s.master, Tensor::zeros(alloc, {n}, DType::kF32));
    VLPAR_ASSIGN_OR_RETURN(s.m, Tensor::zeros(alloc, {n}, DType::kF32));
    VLPAR_ASSIGN_OR_RETURN(s.v, Tensor::zeros(alloc, {n}, DType::kF32));
    int64_t offset = 0;  // of the parameter in the bucket's flat buffer
    for (size_t k = info.first; k < info.last; ++k) {
      const size_t i = g.members[k];
      const int64_t len = params_[i].value.numel();
      bucket_offset_[i] = offset;
      const int64_t a = std::max(lo, offset), e = std::min(hi, offset + len);
      if (a < e) s.segments.push_back({i, a - offset, a - lo, e - a});
      offset += len;
    }
    g.shards.push_back(std::move(s));
  }
  return Status::Ok();
}

Status DistributedOptimizer::read_master_from_params() {
  for (Group& grp : groups_) {
    for (ShardState& s : grp.shards) {
      for (const Segment& g : s.segments) {
        const TensorView& p = params_[g.param].value;
        const TensorView src(static_cast<char*>(p.data) + g.param_offset * int64_t(dtype_size(p.dtype)), p.dtype,
                             {g.length});
        VLPAR_RETURN_IF_ERROR(
            convert_(TensorView(s.master.ptr<float>() + g.shard_offset, DType::kF32, {g.length}), src));
      }
    }
  }
  return Status::Ok();
}

size_t DistributedOptimizer::num_buckets() const {
  size_t n = 0;
  for (const Group& g : groups_) n += g.buckets ? g.buckets->num_buckets() : 0;
  return n;
}

Status DistributedOptimizer::grad_ready(size_t i) {
  VLPAR_CHECK(i < params_.size(), "optimizer: grad_ready({}) but there are {} parameters", i, params_.size());
  Group& g = groups_[slot_[i].first];
  return g.buckets ? g.buckets->mark_ready(slot_[i].second) : Status::Ok();
}

Status DistributedOptimizer::grad_ready_remaining() {
  for (Group& g : groups_)
    if (g.buckets) VLPAR_RETURN_IF_ERROR(g.buckets->mark_remaining());
  return Status::Ok();
}

Status DistributedOptimizer::finish_reductions() {
  for (Group& g : groups_)
    if (g.buckets) VLPAR_RETURN_IF_ERROR(g.buckets->finish());
  return Status::Ok();
}

AdamWConfig DistributedOptimizer::adamw_for(size_t param, const AdamWConfig& base) const {
  AdamWConfig c = base;
  if (!params_[param].weight_decay) c.weight_decay = 0.f;
  return c;
}

Result<double> DistributedOptimizer::group_sum_of_squares(const Context& ctx, const Group& grp) const {
  // Σ norm_weight · Σg² in a fixed order (fp64), over whole parameters or over this rank's slices, then summed over
  // the group's replicas (ZeRO: each holds different slices) and its norm groups.
  double sum = 0.0;
  auto add = [&](const TensorView& g, double weight) -> Status {
    VLPAR_ASSIGN_OR_RETURN(const double n, global_grad_norm(ctx, std::span<const TensorView>(&g, 1)));
    sum += weight * n * n;
    return Status::Ok();
  };
  if (!cfg_.zero1) {
    for (size_t i : grp.members) VLPAR_RETURN_IF_ERROR(add(params_[i].grad, params_[i].norm_weight));
  } else {
    for (size_t b = 0; b < grp.shards.size(); ++b) {
      const float* shard = grp.buckets->bucket(b).shard.ptr<float>();
      for (const Segment& g : grp.shards[b].segments)
        VLPAR_RETURN_IF_ERROR(add(TensorView(const_cast<float*>(shard) + g.shard_offset, DType::kF32, {g.length}),
                                  params_[g.param].norm_weight));
    }
  }
  const TensorView sq(&sum, DType::kF64, {1});
  if (cfg_.zero1 && grp.comms.replicas->size() > 1)
    VLPAR_RETURN_IF_ERROR(grp.comms.replicas->all_reduce(sq, comm::ReduceOp::kSum));
  for (comm::Communicator* c : grp.comms.norm)
    if (c != nullptr && c->size() > 1) VLPAR_RETURN_IF_ERROR(c->all_reduce(sq, comm::ReduceOp::kSum));
  return sum;
}

Status DistributedOptimizer::apply_replicated(const Context& ctx, const AdamWConfig& c, float clip) {
  for (size_t i = 0; i < params_.size(); ++i) {
    const OptimParam& p = params_[i];
    if (clip != 1.0f) VLPAR_RETURN_IF_ERROR(scale_(ctx, p.grad, clip));
    // A low-precision value gets the updated master rounded once (adamw_step's param_copy).
    const bool own = master_[i].defined();
    const TensorView master = own ? master_[i].view() : p.value, copy = own ? p.value : TensorView{};
    VLPAR_RETURN_IF_ERROR(adamw_step(ctx, master, copy, p.grad, m_[i], v_[i], adamw_for(i, c), step_));
  }
  return Status::Ok();
}

Status DistributedOptimizer::apply_sharded(const Context& ctx, Group& grp, const AdamWConfig& c, float clip) {
  for (size_t b = 0; b < grp.shards.size(); ++b) {
    const BucketInfo info = grp.buckets->bucket(b);
    if (clip != 1.0f) VLPAR_RETURN_IF_ERROR(scale_(ctx, info.shard, clip));
    ShardState& s = grp.shards[b];
    for (const Segment& g : s.segments) {
      auto seg = [&](const TensorView& t) {
        return TensorView(t.ptr<float>() + g.shard_offset, DType::kF32, {g.length});
      };
      VLPAR_RETURN_IF_ERROR(adamw_step(ctx, seg(s.master.view()), TensorView{}, seg(info.shard), seg(s.m.view()),
                                       seg(s.v.view()), adamw_for(g.param, c), step_));
    }
  }
  return gather_into_params(grp);
}

Status DistributedOptimizer::gather_into_params(Group& grp) {
  // Every bucket's all-gather is started before any is waited for; each lands in the bucket's flat buffer (free
  // until the next step's gradients are packed) and is unpacked into the values (rounded to their dtype).
  std::vector<comm::WorkHandle> work;
  for (size_t b = 0; b < grp.shards.size(); ++b) {
    VLPAR_ASSIGN_OR_RETURN(comm::WorkHandle w,
                           grp.comms.replicas->iall_gather(grp.buckets->bucket(b).flat, grp.shards[b].master.view()));
    work.push_back(std::move(w));
  }
  for (size_t b = 0; b < grp.shards.size(); ++b) {
    VLPAR_RETURN_IF_ERROR(work[b]->wait());
    const BucketInfo info = grp.buckets->bucket(b);
    for (size_t k = info.first; k < info.last; ++k) {
      const size_t i = grp.members[k];
      const TensorView& p = params_[i].value;
      VLPAR_RETURN_IF_ERROR(
          convert_(TensorView(p.data, p.dtype, {p.numel()}), TensorView(info.flat.ptr<float>() + bucket_offset_[i], DType::kF32, {p.numel()})));
    }
  }
  return Status::Ok();
}

Result<StepReport> DistributedOptimizer::step(const Context& ctx, double lr) {
  VLPAR_RETURN_IF_ERROR(finish_reductions());
  double sq = 0.0;  // the groups' reduced sums, added in group order (the same on every rank)
  for (const Group& g : groups_) {
    VLPAR_ASSIGN_OR_RETURN(const double group_sq, group_sum_of_squares(ctx, g));
    sq += group_sq;
  }
  // Pipeline stages hold disjoint layers: their totals add (every rank of the pp group calls this, even one that
  // trains nothing, so that the collective matches).
  if (stages_ != nullptr && stages_->size() > 1) {
    VLPAR_RETURN_IF_ERROR(stages_->all_reduce(TensorView(&sq, DType::kF64, Shape{1}), comm::ReduceOp::kSum));
  }
  StepReport r;
  r.grad_norm = std::sqrt(sq);
  if (!std::isfinite(r.grad_norm)) return r;  // skipped: the caller warns and counts
  const float clip = cfg_.max_grad_norm > 0 && r.grad_norm > cfg_.max_grad_norm
                         ? float(cfg_.max_grad_norm / (r.grad_norm + 1e-6))
                         : 1.0f;
  AdamWConfig c = cfg_.adamw;
  c.lr = float(lr);
  ++step_;
  if (!cfg_.zero1) VLPAR_RETURN_IF_ERROR(apply_replicated(ctx, c, clip));
  for (Group& g : groups_)
    if (cfg_.zero1) VLPAR_RETURN_IF_ERROR(apply_sharded(ctx, g, c, clip));
  r.applied = true;
  return r;
}

Status DistributedOptimizer::skip_step() { return finish_reductions(); }

Result<OptimizerState> DistributedOptimizer::state(bool gathered) {
  OptimizerState s;
  if (!cfg_.zero1) {
    for (size_t i = 0; i < params_.size(); ++i) {
      s.m.push_back(m_[i].view());
      s.v.push_back(v_[i].view());
      s.master.push_back(master_[i].view());
    }
    return s;
  }
  for (const OptimParam& p : params_) {
    for (int k = 0; k < 3; ++k) {
      if (k == 2 && p.value.dtype == DType::kF32) {  // the value is the master
        s.master.push_back(TensorView{});
        continue;
      }
      VLPAR_ASSIGN_OR_RETURN(Tensor t, Tensor::zeros(*alloc_, p.value.shape, DType::kF32));
      (k == 0 ? s.m : k == 1 ? s.v : s.master).push_back(t.view());
      s.staging.push_back(std::move(t));
    }
  }
  if (!gathered) return s;
  // m, v and the masters of low-precision values: each bucket's shards all-gathered into its flat buffer (free
  // until the next step's gradients are packed), then copied out per parameter. The same collectives on every
  // replica (the dtypes of a bucket's parameters are the same on every replica).
  for (Group& grp : groups_) {
    for (int k = 0; k < 3; ++k) {
      for (size_t b = 0; b < grp.shards.size(); ++b) {
        const BucketInfo info = grp.buckets->bucket(b);
        const ShardState& sh = grp.shards[b];
        std::vector<TensorView>& out = k == 0 ? s.m : k == 1 ? s.v : s.master;
        bool wanted = false;
        for (size_t j = info.first; j < info.last; ++j) wanted = wanted || !out[grp.members[j]].empty();
        if (!wanted) continue;
        VLPAR_RETURN_IF_ERROR(
            grp.comms.replicas->all_gather(info.flat, (k == 0 ? sh.m : k == 1 ? sh.v : sh.master).view()));
        for (size_t j = info.first; j < info.last; ++j) {
          const size_t i = grp.members[j];
          const TensorView& dst = out[i];
          if (dst.empty()) continue;
          std::memcpy(dst.data, info.flat.ptr<float>() + bucket_offset_[i], size_t(dst.numel()) * sizeof(float));
        }
      }
    }
  }
  return s;
}

Status DistributedOptimizer::load_state(const OptimizerState& s) {
  VLPAR_CHECK(s.m.size() == params_.size() && s.v.size() == params_.size() &&
                  (s.master.empty() || s.master.size() == params_.size()),
              "optimizer: load_state got state for {} parameters, the optimizer has {}", s.m.size(), params_.size());
  // Every check before anything changes: a bad state leaves the parameters and the optimizer as they were.
  auto master_of = [&](size_t i) { return s.master.empty() ? TensorView{} : s.master[i]; };
  for (size_t i = 0; i < params_.size(); ++i) {
    const OptimParam& p = params_[i];
    for (const TensorView& t : {s.m[i], s.v[i]})
      VLPAR_CHECK(t.data != nullptr && t.dtype == DType::kF32 && t.is_contiguous() && t.numel() == p.value.numel(),
                  "optimizer: load_state: the state of parameter {} '{}' is {}, expected a contiguous f32 tensor of {} "
                  "elements", i, p.name, t.to_string(), p.value.numel());
    const TensorView mi = master_of(i);
    if (mi.empty()) continue;
    VLPAR_CHECK(p.value.dtype != DType::kF32, "optimizer: load_state: parameter {} '{}' is f32, its own master, but "
                "a separate master {} was given (load it into the value)", i, p.name, mi.to_string());
    VLPAR_CHECK(mi.dtype == DType::kF32 && mi.is_contiguous() && mi.numel() == p.value.numel(),
                "optimizer: load_state: the master of parameter {} '{}' is {}, expected a contiguous f32 tensor of {} "
                "elements", i, p.name, mi.to_string(), p.value.numel());
  }
  // A given master of a low-precision value is the truth: the value becomes its rounding. Without one the master
  // is read from the (just loaded) value.
  for (size_t i = 0; i < params_.size(); ++i)
    if (!master_of(i).empty())
      VLPAR_RETURN_IF_ERROR(convert_(TensorView(params_[i].value.data, params_[i].value.dtype, master_of(i).shape),
                                     master_of(i)));
  if (!cfg_.zero1) {
    for (size_t i = 0; i < params_.size(); ++i) {
      if (s.m[i].data != m_[i].view().data) VLPAR_RETURN_IF_ERROR(copy_(m_[i], s.m[i]));
      if (s.v[i].data != v_[i].view().data) VLPAR_RETURN_IF_ERROR(copy_(v_[i], s.v[i]));
      if (!master_[i].defined()) continue;
      const TensorView mi = master_of(i);
      if (mi.empty()) VLPAR_RETURN_IF_ERROR(convert_(master_[i], params_[i].value));
      else if (mi.data != master_[i].view().data) VLPAR_RETURN_IF_ERROR(copy_(master_[i], mi));
    }
    return Status::Ok();
  }
  for (Group& grp : groups_) {
    for (ShardState& sh : grp.shards) {
      for (const Segment& g : sh.segments) {
        std::memcpy(sh.m.ptr<float>() + g.shard_offset, s.m[g.param].ptr<float>() + g.param_offset,
                    size_t(g.length) * sizeof(float));
        std::memcpy(sh.v.ptr<float>() + g.shard_offset, s.v[g.param].ptr<float>() + g.param_offset,
                    size_t(g.length) * sizeof(float));
      }
    }
  }
  VLPAR_RETURN_IF_ERROR(read_master_from_params());
  for (Group& grp : groups_)  // exact masters where given (the values hold only their rounding)
    for (ShardState& sh : grp.shards)
      for (const Segment& g : sh.segments)
        if (!master_of(g.param).empty())
          std::memcpy(sh.master.ptr<float>() + g.shard_offset, master_of(g.param).ptr<float>() + g.param_offset,
                      size_t(g.length) * sizeof(float));
  return Status::Ok();
}

int64_t DistributedOptimizer::state_elements() const {
  int64_t n = 0;
  for (const Tensor& t : m_) n += 2 * t.numel();
  for (const Tensor& t : master_) n += t.numel();
  for (const Group& g : groups_)
    for (const ShardState& s : g.shards) n += 3 * s.master.numel();
  return n;
}

}  // namespace vlpar::parallel
