// Private helpers of the nn blocks: scratch tensors from ctx.allocator on ctx.device, reshapes, the rotary
// descriptor of a config, and the frozen-parameter convention (an empty gradient view: see nn/block.hpp).
#pragma once
#include <initializer_list>

#include "vlpar/core/context.hpp"
#include "vlpar/core/tensor.hpp"
#include "vlpar/core/weight_grad_queue.hpp"
#include "vlpar/kernels/elementwise.hpp"
#include "vlpar/kernels/gemm.hpp"
#include "vlpar/kernels/norm.hpp"
#include "vlpar/kernels/rotary_math.hpp"
#include "vlpar/nn/block.hpp"
#include "vlpar/nn/config.hpp"
#include "vlpar/nn/tensor_parallel.hpp"

namespace vlpar::nn::detail {

/// @brief An uninitialised tensor from ctx.allocator on ctx.device (the blocks' stash and scratch live where the
/// ops run).
/// The dtype says the tensor's category (DESIGN §6): the activation dtype of the call (the dtype of the block's
/// input, f32 or bf16) for activations, their gradients and stashes; f32 for statistics (rstd, mean, lse), router
/// probabilities and partial parameter gradients.
inline Result<Tensor> scratch(const Context& ctx, Shape shape, DType dtype) {
  VLPAR_CHECK(ctx.allocator != nullptr, "nn: the context has no allocator for stash and scratch tensors");
  return Tensor::empty(*ctx.allocator, shape, dtype, ctx.device);
}
inline Result<Tensor> scratch_zeros(const Context& ctx, Shape shape, DType dtype) {
  VLPAR_CHECK(ctx.allocator != nullptr, "nn: the context has no allocator for stash and scratch tensors");
  return Tensor::zeros(*ctx.allocator, shape, dtype, ctx.device);
}

/// @brief True when a parameter's gradient view is empty, i.e. the parameter is frozen (nn/block.hpp).
inline bool frozen(const TensorView& grad) { return grad.empty(); }

/// @brief dw [out, in] += dyᵀ [out, N] · x [N, in] (a linear layer's weight gradient alone); nothing when dw is
/// empty (frozen weight: the GEMM is skipped).
inline Status weight_grad(const Context& ctx, TensorView dw, TensorView dy, TensorView x) {
  if (frozen(dw)) return Status::Ok();
  return gemm(ctx, dw, dy, x, GemmDesc{true, false, 1.f, 1.f});
}

/// @brief Runs `work` (a Status(const Context&) that computes parameter gradients) now, or, in the I of a split
/// backward (ctx.weight_grads set), queues it with the tensors it reads (`keep`) for the W
/// (core/weight_grad_queue.hpp).
/// A queued work runs later on W's context: it must capture views and values, never the block or a local by
/// reference.
template <class Work>
Status weight_work(const Context& ctx, std::initializer_list<Tensor> keep, Work work) {
  if (ctx.weight_grads == nullptr) return work(ctx);
  ctx.weight_grads->push(WeightGradQueue::Work(std::move(work)), keep);
  return Status::Ok();
}

/// @brief `ready(index)` now, or queued behind the gradient work of a split backward's I (the gradient is final
/// only after W). Nothing without a hook.
inline Status mark_ready(const Context& ctx, const GradReadyFn& ready, size_t index) {
  if (!ready) return Status::Ok();
  if (ctx.weight_grads == nullptr) return ready(index);
  ctx.weight_grads->push([r = ready, index](const Context&) { return r(index); }, {});
  return Status::Ok();
}

/// @brief weight_grad (dw += dyᵀ·x) now, or queued for a split backward's W with dy_owner and x_owner kept alive
/// (dy and x may be reshaped views of them); nothing when dw is frozen.
inline Status weight_grad_split(const Context& ctx, TensorView dw, TensorView dy, const Tensor& dy_owner, TensorView x,
                                const Tensor& x_owner) {
  if (frozen(dw)) return Status::Ok();
  return weight_work(ctx, {dy_owner, x_owner}, [dw, dy, x](const Context& c) { return weight_grad(c, dw, dy, x); });
}

/// @brief linear_backward with the weight gradient run or queued by weight_work: dx = dy·W and dbias += Σ dy now
/// (empty views: skipped), dw += dyᵀ·x now or in W (empty dw: frozen). dy_owner / x_owner own dy / x (x may be a
/// reshaped view of its owner).
inline Status linear_backward_split(const Context& ctx, TensorView dx, TensorView dw, TensorView dbias,
                                    TensorView dy, const Tensor& dy_owner, TensorView x, const Tensor& x_owner,
                                    TensorView w) {
  if (ctx.weight_grads == nullptr || frozen(dw)) return linear_backward(ctx, dx, dw, dbias, dy, x, w);
  if (!dx.empty() || !dbias.empty()) VLPAR_RETURN_IF_ERROR(linear_backward(ctx, dx, {}, dbias, dy, x, w));
  return weight_grad_split(ctx, dw, dy, dy_owner, x, x_owner);
}

/// @brief rmsnorm_backward (dx [rows, D] written, dw [D] accumulated) for a replicated weight whose rows are split
/// over the tp group when `summed_over_tp` (tokens under SP, heads under TP): each rank's weight gradient is then a
/// partial sum, reduced locally into a scratch, all-reduced over tp and added to dw. An empty dw (frozen weight)
/// computes no weight gradient and communicates nothing; every rank of the group must agree on that.
inline Status rmsnorm_backward_tp(const Context& ctx, const TensorParallel& tp, TensorView dx, TensorView dw,
                                  TensorView dy, TensorView x, TensorView w, TensorView rstd, bool summed_over_tp) {
  if (!summed_over_tp || !tp.active() || frozen(dw)) return rmsnorm_backward(ctx, dx, dw, dy, x, w, rstd);
  VLPAR_ASSIGN_OR_RETURN(Tensor partial, scratch_zeros(ctx, w.shape, DType::kF32));
  VLPAR_RETURN_IF_ERROR(rmsnorm_backward(ctx, dx, partial, dy, x, w, rstd));
  VLPAR_RETURN_IF_ERROR(tp_sum_partial_grad(tp, partial));
  return add_(ctx, dw, partial);
}

/// @brief The rotary descriptor of cfg for a positions view of N_tok tokens, checking the view's shape against
/// cfg.rope: 1D takes [N_tok]; MRoPE takes [3, N_tok] (rows T, H, W) or [N_tok] (pure text: three equal rows,
/// for which MRoPE is 1D rotary bit for bit, so the 1D kernel runs).
inline Result<RotaryDesc> rotary_desc_for(const char* block, const TransformerConfig& cfg, const TensorView& pos,
                                          int64_t n_tok) {
  RotaryDesc d;
  d.kind = RotaryKind::k1D;
  d.head_dim = cfg.head_dim;
  d.theta = cfg.rope_theta;
  if (pos.ndim() == 1 && pos.size(0) == n_tok) return d;
  VLPAR_CHECK(cfg.rope == RopeKind::kMRoPE,
              "{}: positions are {} but 1D rotary takes [{}] (3-row positions need rope = kMRoPE)", block,
              pos.to_string(), n_tok);
  VLPAR_CHECK(pos.ndim() == 2 && pos.size(0) == 3 && pos.size(1) == n_tok,
              "{}: positions are {} but MRoPE takes [3, {}] (rows T, H, W) or [{}]", block, pos.to_string(), n_tok,
              n_tok);
  d.kind = RotaryKind::kMRoPE;
  for (int a = 0; a < 3; ++a) d.mrope_section[a] = cfg.mrope_section[size_t(a)];
  return d;
}

/// @brief The same contiguous memory as [d0, d1] or [d0, d1, d2].
inline TensorView as_shape(TensorView v, Shape s) {
  TensorView out(v.data, v.dtype, s, v.device);
  return out;
}

/// @brief The activation dtype of a block call, `want` (the config's `activation`), after checking that its input `x`
/// (forward) or output gradient (backward) has it.
inline Result<DType> activation_dtype(const char* block, const char* what, const TensorView& x, DType want) {
  VLPAR_CHECK(x.dtype == want, "{}: {} is {} but the config's activation dtype is {}", block, what, x.to_string(),
              dtype_name(want));
  return want;
}

/// @brief Checks an activation view: contiguous, of shape `want` and of the call's activation dtype.
inline Status check_shape(const char* block, const char* what, const TensorView& v, const Shape& want, DType act) {
  VLPAR_CHECK(v.shape == want && v.is_contiguous() && v.dtype == act, "{}: {} is {} but must be a contiguous {} {}",
              block, what, v.to_string(), dtype_name(act), want.to_string());
  return Status::Ok();
}

/// @brief Checks a parameter value: contiguous, of shape `want`, stored as f32 or bf16 (the model's parameter
/// dtype; the ops read any float dtype and accumulate in f32).
inline Status check_weight(const char* block, const char* what, const TensorView& v, const Shape& want) {
  VLPAR_CHECK(v.shape == want && v.is_contiguous() && (v.dtype == DType::kF32 || v.dtype == DType::kBF16),
              "{}: {} is {} but must be a contiguous f32 or bf16 {}", block, what, v.to_string(), want.to_string());
  return Status::Ok();
}

/// @brief Checks a gradient view: empty (frozen parameter) or an f32 tensor shaped like its weight (parameter
/// gradients accumulate in f32 whatever the parameter's dtype, DESIGN §6).
inline Status check_grad(const char* block, const char* what, const TensorView& g, const Shape& want) {
  if (frozen(g)) return Status::Ok();
  return check_shape(block, what, g, want, DType::kF32);
}

/// @brief The common tail of a pre-norm residual block's backward: dh [N, H] (the gradient at the TP region's
/// input) goes back through the region entry and the RMSNorm into dx [Nl, H], the norm weight gradient is
/// accumulated into dnorm_w (summed over the TP group under SP, where each rank saw only its tokens), and the
/// residual branch's dout is added to dx. An empty dnorm_w (frozen norm weight) skips that gradient.
inline Status pre_norm_residual_backward(const Context& ctx, const TensorParallel& tp, TensorView dx,
                                         TensorView dnorm_w, TensorView dh, TensorView dout, TensorView x,
                                         TensorView norm_w, TensorView rstd) {
  VLPAR_ASSIGN_OR_RETURN(Tensor dhn, scratch(ctx, x.shape, x.dtype));
  VLPAR_RETURN_IF_ERROR(region_enter_backward(tp, dhn, dh));
  VLPAR_RETURN_IF_ERROR(rmsnorm_backward_tp(ctx, tp, dx, dnorm_w, dhn, x, norm_w, rstd, tp.sp()));
  return add_(ctx, dx, dout);
}

}  // namespace vlpar::nn::detail
