// Private helpers of the nn blocks: scratch tensors from ctx.allocator, residual add, reshapes.
#pragma once
#include "vlpar/core/context.hpp"
#include "vlpar/core/tensor.hpp"
#include "vlpar/kernels/gemm.hpp"
#include "vlpar/kernels/norm.hpp"
#include "vlpar/nn/tensor_parallel.hpp"

namespace vlpar::nn::detail {

/// @brief An uninitialised tensor from ctx.allocator (the blocks' stash and scratch).
inline Result<Tensor> scratch(const Context& ctx, Shape shape, DType dtype = DType::kF32) {
  VLPAR_CHECK(ctx.allocator != nullptr, "nn: the context has no allocator for stash and scratch tensors");
  return Tensor::empty(*ctx.allocator, shape, dtype);
}
inline Result<Tensor> scratch_zeros(const Context& ctx, Shape shape, DType dtype = DType::kF32) {
  VLPAR_CHECK(ctx.allocator != nullptr, "nn: the context has no allocator for stash and scratch tensors");
  return Tensor::zeros(*ctx.allocator, shape, dtype);
}

/// @brief dst += src, contiguous f32 views of equal numel.
inline Status add_(const Context& ctx, TensorView dst, TensorView src) {
  VLPAR_CHECK(dst.dtype == DType::kF32 && src.dtype == DType::kF32 && dst.numel() == src.numel() &&
                  dst.is_contiguous() && src.is_contiguous(),
              "nn add_: {} += {} needs contiguous f32 views of equal size", dst.to_string(), src.to_string());
  float* d = dst.ptr<float>();
  const float* s = src.ptr<float>();
  parallel_for(ctx, dst.numel(), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) d[i] += s[i];
  });
  return Status::Ok();
}

/// @brief dw [out, in] += dyᵀ [out, N] · x [N, in] (a linear layer's weight gradient alone).
inline Status weight_grad(const Context& ctx, TensorView dw, TensorView dy, TensorView x) {
  return gemm(ctx, dw, dy, x, GemmDesc{true, false, 1.f, 1.f});
}

/// @brief The same contiguous memory as [d0, d1] or [d0, d1, d2].
inline TensorView as_shape(TensorView v, Shape s) {
  TensorView out(v.data, v.dtype, s, v.device);
  return out;
}

/// @brief Checks a view's shape, naming the block and the argument.
inline Status check_shape(const char* block, const char* what, const TensorView& v, const Shape& want) {
  VLPAR_CHECK(v.shape == want && v.is_contiguous() && v.dtype == DType::kF32,
              "{}: {} is {} but must be a contiguous f32 {}", block, what, v.to_string(), want.to_string());
  return Status::Ok();
}

/// @brief The common tail of a pre-norm residual block's backward: dh [N, H] (the gradient at the TP region's
/// input) goes back through the region entry and the RMSNorm into dx [Nl, H], the norm weight gradient is
/// accumulated into dnorm_w (summed over the TP group under SP, where each rank saw only its tokens), and the
/// residual branch's dout is added to dx.
inline Status pre_norm_residual_backward(const Context& ctx, const TensorParallel& tp, TensorView dx,
                                         TensorView dnorm_w, TensorView dh, TensorView dout, TensorView x,
                                         TensorView norm_w, TensorView rstd) {
  VLPAR_ASSIGN_OR_RETURN(Tensor dhn, scratch(ctx, x.shape));
  VLPAR_RETURN_IF_ERROR(region_enter_backward(tp, dhn, dh));
  if (tp.sp()) {
    VLPAR_ASSIGN_OR_RETURN(Tensor dnorm, scratch_zeros(ctx, norm_w.shape));
    VLPAR_RETURN_IF_ERROR(rmsnorm_backward(ctx, dx, dnorm, dhn, x, norm_w, rstd));
    VLPAR_RETURN_IF_ERROR(tp_sum_partial_grad(tp, dnorm));
    VLPAR_RETURN_IF_ERROR(add_(ctx, dnorm_w, dnorm));
  } else {
    VLPAR_RETURN_IF_ERROR(rmsnorm_backward(ctx, dx, dnorm_w, dhn, x, norm_w, rstd));
  }
  return add_(ctx, dx, dout);
}

}  // namespace vlpar::nn::detail
