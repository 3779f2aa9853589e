#pragma once
// CUDA implementations behind the public op API. The public functions (norm.hpp, activation.hpp, rotary.hpp)
// (and attention.hpp) check their arguments and dispatch here when the views live on a CUDA device; call those, not these.
// In a build without CUDA these return kNotSupported ("this build of vlpar has no CUDA kernels").
// Implementations: src/kernels/cuda/*.cu; CPU-only stubs: src/kernels/cpu/cuda_stubs.cpp.
#include "vlpar/core/context.hpp"
#include "vlpar/core/tensor.hpp"
#include <cstdint>
#include <span>

#include "vlpar/kernels/attention.hpp"
#include "vlpar/kernels/gemm.hpp"
#include "vlpar/kernels/moe.hpp"
#include "vlpar/kernels/rotary_math.hpp"

namespace vlpar::cuda_impl {

Status rmsnorm_forward(const Context& ctx, TensorView y, TensorView rstd, TensorView x, TensorView w, float eps);
Status rmsnorm_backward(const Context& ctx, TensorView dx, TensorView dw, TensorView dy, TensorView x,
                        TensorView w, TensorView rstd);
Status swiglu_forward(const Context& ctx, TensorView y, TensorView gate, TensorView up);
Status swiglu_backward(const Context& ctx, TensorView dgate, TensorView dup, TensorView dy, TensorView gate,
                       TensorView up);
Status rotary_forward(const Context& ctx, TensorView y, TensorView x, TensorView positions, const RotaryDesc& desc);
Status rotary_backward(const Context& ctx, TensorView dx, TensorView dy, TensorView positions,
                       const RotaryDesc& desc);
/// cu_seqlens_q/k in host memory; the other views on one CUDA device (src/kernels/cuda/attention_ops.cu).
Status varlen_attention_forward(const Context& ctx, TensorView out, TensorView lse, TensorView q, TensorView k,
                                TensorView v, TensorView cu_seqlens_q, TensorView cu_seqlens_k,
                                const VarlenAttentionDesc& desc);
Status varlen_attention_backward(const Context& ctx, TensorView dq, TensorView dk, TensorView dv, TensorView dout,
                                 TensorView q, TensorView k, TensorView v, TensorView out, TensorView lse,
                                 TensorView cu_seqlens_q, TensorView cu_seqlens_k, const VarlenAttentionDesc& desc);
/// Dense (batched) GEMM on the grouped GEMM kernels with one group per batch entry: bf16/f16 a and b, c in their
/// dtype or f32; op(A)ᵀ (trans_a) only with B untransposed and c f32 (the weight-gradient kernel).
Status gemm(const Context& ctx, TensorView c, TensorView a, TensorView b, GemmDesc desc);
/// bf16/f16 a and b, c in their dtype or f32; offsets in host memory (src/kernels/cuda/moe_ops.cu).
Status grouped_gemm(const Context& ctx, TensorView c, TensorView a, TensorView b, std::span<const int64_t> offsets,
                    GemmDesc desc);
/// The MoE dispatch plan from device i32 indices [T, K]: built on the device, mirrored into the host plan (the
/// offsets size the grouped GEMMs); the row ops take bf16/f16/f32 rows and f32 weights (src/kernels/cuda/moe_ops.cu).
Status moe_dispatch_plan(const Context& ctx, MoeDispatch& plan, TensorView indices, int num_experts);
Status moe_permute(const Context& ctx, TensorView out, TensorView in, TensorView weights, const MoeDispatch& plan);
Status moe_unpermute(const Context& ctx, TensorView out, TensorView rows, TensorView weights,
                     const MoeDispatch& plan);
Status moe_row_dot(const Context& ctx, TensorView dweights, TensorView a, TensorView b, const MoeDispatch& plan);
Status moe_scale_rows(const Context& ctx, TensorView rows, TensorView weights, const MoeDispatch& plan);
/// bf16/f16 a and dc, dw f32 (accumulated); offsets in host memory (src/kernels/cuda/moe_ops.cu).
Status grouped_weight_grad(const Context& ctx, TensorView dw, TensorView a, TensorView dc,
                           std::span<const int64_t> offsets);

}  // namespace vlpar::cuda_impl
