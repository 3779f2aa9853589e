// ZeRO-1 distributed optimizer. See include/vlpar/parallel/distributed_optimizer.hpp.
#include "vlpar/parallel/distributed_optimizer.hpp"

#include <cmath>
#include <cstring>

#include "vlpar/core/dispatch.hpp"

namespace vlpar::parallel {

Status ZeroConfig::validate() const {
  VLPAR_RETURN_IF_ERROR(adamw.validate());
  VLPAR_CHECK(max_grad_norm >= 0.0, "zero: max_grad_norm must be >= 0, got {}", max_grad_norm);
  VLPAR_CHECK(offload_fraction >= 0.0 && offload_fraction <= 1.0, "zero: offload_fraction must be in [0, 1], got {}",
              offload_fraction);
  return Status::Ok();
}

Result<DistributedOptimizer> DistributedOptimizer::create(const Context& ctx, comm::Communicator& dp,
                                                          std::vector<TensorView> params, ZeroConfig cfg,
                                                          Allocator& alloc) {
  VLPAR_RETURN_IF_ERROR(cfg.validate());
  DistributedOptimizer o;
  o.ctx_ = ctx;
  o.dp_ = &dp;
  o.cfg_ = cfg;
  for (size_t i = 0; i < params.size(); ++i) {
    const TensorView& p = params[i];
    VLPAR_CHECK(p.is_contiguous() && p.device.is_cpu() && p.data != nullptr && is_floating(p.dtype) &&
                    p.dtype != DType::kF64,
                "DistributedOptimizer: parameter {} ({}) must be a contiguous f32/bf16/f16 CPU tensor", i,
                p.to_string());
    o.total_ += p.numel();
  }
  o.params_ = std::move(params);
  const int64_t world = dp.size();
  o.padded_ = (o.total_ + world - 1) / world * world;
  o.shard_ = o.padded_ / world;
  VLPAR_ASSIGN_OR_RETURN(o.flat_grad_, Tensor::zeros(alloc, {o.padded_}, DType::kF32));
  VLPAR_ASSIGN_OR_RETURN(o.flat_param_, Tensor::zeros(alloc, {o.padded_}, DType::kF32));
  VLPAR_ASSIGN_OR_RETURN(o.shard_grad_, Tensor::zeros(alloc, {o.shard_}, DType::kF32));
  VLPAR_ASSIGN_OR_RETURN(o.master_, Tensor::zeros(alloc, {o.shard_}, DType::kF32));
  VLPAR_ASSIGN_OR_RETURN(o.m_, Tensor::zeros(alloc, {o.shard_}, DType::kF32));
  VLPAR_ASSIGN_OR_RETURN(o.v_, Tensor::zeros(alloc, {o.shard_}, DType::kF32));
  // Master shard ← this rank's slice of the current parameters.
  float* flat = o.flat_param_.ptr<float>();
  for (const TensorView& p : o.params_) {
    VLPAR_RETURN_IF_ERROR(convert_(TensorView(flat, DType::kF32, {p.numel()}), TensorView(p.data, p.dtype, {p.numel()})));
    flat += p.numel();
  }
  std::memcpy(o.master_.ptr<float>(), o.flat_param_.ptr<float>() + dp.rank() * o.shard_, size_t(o.shard_) * 4);
  return o;
}

Status DistributedOptimizer::pack_grads(std::span<const TensorView> grads) {
  VLPAR_CHECK(grads.size() == params_.size(), "DistributedOptimizer::step: {} gradients for {} parameters",
              grads.size(), params_.size());
  float* flat = flat_grad_.ptr<float>();
  for (size_t i = 0; i < grads.size(); ++i) {
    const TensorView& g = grads[i];
    VLPAR_CHECK(g.numel() == params_[i].numel() && g.is_contiguous() && g.device.is_cpu(),
                "DistributedOptimizer::step: gradient {} ({}) does not match parameter {} ({})", i, g.to_string(), i,
                params_[i].to_string());
    VLPAR_RETURN_IF_ERROR(convert_(TensorView(flat, DType::kF32, {g.numel()}), TensorView(g.data, g.dtype, {g.numel()})));
    flat += g.numel();
  }
  return Status::Ok();  // the padding tail stays zero
}

Status DistributedOptimizer::unpack_params() {
  const float* flat = flat_param_.ptr<float>();
  for (const TensorView& p : params_) {
    VLPAR_RETURN_IF_ERROR(convert_(TensorView(p.data, p.dtype, {p.numel()}),
                                   TensorView(const_cast<float*>(flat), DType::kF32, {p.numel()})));
    flat += p.numel();
  }
  return Status::Ok();
}

Result<double> DistributedOptimizer::step(std::span<const TensorView> grads, int64_t step) {
  VLPAR_RETURN_IF_ERROR(pack_grads(grads));
  VLPAR_RETURN_IF_ERROR(dp_->reduce_scatter(shard_grad_.view(), flat_grad_.view(), comm::ReduceOp::kSum));
  VLPAR_RETURN_IF_ERROR(scale_(ctx_, shard_grad_.view(), 1.0f / float(dp_->size())));
  // Global norm of the mean gradient: Σ over shards of the shard's sum of squares.
  VLPAR_ASSIGN_OR_RETURN(const double shard_norm, global_grad_norm(ctx_, std::span(&shard_grad_.view(), 1)));
  double sq = shard_norm * shard_norm;
  VLPAR_RETURN_IF_ERROR(dp_->all_reduce(TensorView(&sq, DType::kF64, {1}), comm::ReduceOp::kSum));
  const double norm = std::sqrt(sq);
  if (cfg_.max_grad_norm > 0.0 && std::isfinite(norm) && norm > cfg_.max_grad_norm)
    VLPAR_RETURN_IF_ERROR(scale_(ctx_, shard_grad_.view(), float(cfg_.max_grad_norm / (norm + 1e-6))));
  VLPAR_RETURN_IF_ERROR(adamw_step(ctx_, master_.view(), TensorView(), shard_grad_.view(), m_.view(), v_.view(),
                                   cfg_.adamw, step));
  VLPAR_RETURN_IF_ERROR(dp_->all_gather(flat_param_.view(), master_.view()));
  VLPAR_RETURN_IF_ERROR(unpack_params());
  return norm;
}

}  // namespace vlpar::parallel
