// The trainer's AdamW over the parameter registry. See train_optimizer.hpp.
#include "train_optimizer.hpp"

#include <cmath>

namespace qwen3vl {

using vlpar::DType;
namespace nn = vlpar::nn;

Result<TrainOptimizer> TrainOptimizer::create(const Context& ctx, Model& model, const vlpar::AdamWConfig& adamw,
                                              vlpar::comm::Communicator* dp, Allocator& alloc) {
  VLPAR_RETURN_IF_ERROR(adamw.validate());
  TrainOptimizer o;
  o.model_ = &model;
  o.adamw_ = adamw;
  o.dp_ = dp && dp->size() > 1 ? dp : nullptr;
  const nn::ParamRegistry& reg = model.registry();
  const int tp = model.tensor_parallel().size();
  for (size_t i : reg.trainable()) {
    const nn::ParamShard& p = reg.entry(i).shard;
    o.params_.push_back(i);
    VLPAR_ASSIGN_OR_RETURN(Tensor m, Tensor::zeros(alloc, p.local_shape(), DType::kF32, ctx.device));
    VLPAR_ASSIGN_OR_RETURN(Tensor v, Tensor::zeros(alloc, p.local_shape(), DType::kF32, ctx.device));
    o.m_.push_back(std::move(m));
    o.v_.push_back(std::move(v));
    o.decay_.push_back(p.full_shape.ndim >= 2);
    // tp ranks holding each element: full / (tp · local) is 1 for split, 1/tp for replicated, 1/r for r replicas.
    o.norm_weight_.push_back(double(p.local_shape().numel()) * tp / double(p.full_shape.numel()));
    o.norm_weight_.back() = 1.0 / o.norm_weight_.back();
  }
  return o;
}

Result<double> TrainOptimizer::grad_norm(const Context& ctx) const {
  // Σ over parameters of weight · Σg² (each in fp64, fixed order), then summed over tp.
  double sum = 0;
  for (size_t k = 0; k < params_.size(); ++k) {
    const TensorView g = model_->registry().grad(params_[k]);
    VLPAR_ASSIGN_OR_RETURN(double n, vlpar::global_grad_norm(ctx, std::span<const TensorView>(&g, 1)));
    sum += norm_weight_[k] * n * n;
  }
  const nn::TensorParallel& tp = model_->tensor_parallel();
  if (tp.active()) {
    VLPAR_RETURN_IF_ERROR(tp.comm->all_reduce(TensorView(&sum, DType::kF64, vlpar::Shape{1}), vlpar::comm::ReduceOp::kSum));
  }
  return std::sqrt(sum);
}

Result<StepReport> TrainOptimizer::step(const Context& ctx, double lr, double max_norm) {
  const nn::ParamRegistry& reg = model_->registry();
  if (dp_ != nullptr) {
    for (size_t i : params_) VLPAR_RETURN_IF_ERROR(dp_->all_reduce(reg.grad(i), vlpar::comm::ReduceOp::kSum));
  }
  StepReport r;
  VLPAR_ASSIGN_OR_RETURN(r.grad_norm, grad_norm(ctx));
  if (!std::isfinite(r.grad_norm)) return r;  // skipped: the caller warns and counts
  if (max_norm > 0 && r.grad_norm > max_norm) {
    const auto scale = float(max_norm / (r.grad_norm + 1e-6));
    for (size_t i : params_) VLPAR_RETURN_IF_ERROR(vlpar::scale_(ctx, reg.grad(i), scale));
  }
  ++step_;
  for (size_t k = 0; k < params_.size(); ++k) {
    vlpar::AdamWConfig c = adamw_;
    c.lr = float(lr);
    if (!decay_[k]) c.weight_decay = 0.f;
    VLPAR_RETURN_IF_ERROR(vlpar::adamw_step(ctx, reg.value(params_[k]), TensorView{}, reg.grad(params_[k]), m_[k],
                                            v_[k], c, step_));
  }
  r.applied = true;
  return r;
}

std::vector<OptimizerTensor> TrainOptimizer::tensors() const {
  std::vector<OptimizerTensor> out;
  const nn::ParamRegistry& reg = model_->registry();
  for (size_t k = 0; k < params_.size(); ++k) {
    const nn::ParamShard& p = reg.entry(params_[k]).shard;
    out.push_back({"optim.m." + p.name, m_[k].view(), p});
    out.push_back({"optim.v." + p.name, v_[k].view(), p});
  }
  return out;
}

}  // namespace qwen3vl
