// CPU-only builds: the cuda_impl:: entry points (include/vlpar/kernels/cuda_ops.hpp) answer kNotSupported, so
// a public op handed CUDA views fails with a Status instead of touching memory. With CUDA on (VLPAR_WITH_CUDA,
// a private definition of the vlpar target) the real ones come from src/kernels/cuda/cuda_ops.cu and this file
// is empty. Test: tests/gpu/test_cuda_kernels.cpp (CpuOnlyBuild.*)
#ifndef VLPAR_WITH_CUDA

#include "vlpar/kernels/cuda_ops.hpp"

namespace vlpar::cuda_impl {

Status rmsnorm_forward(const Context&, TensorView, TensorView, TensorView, TensorView, float) {
  return VLPAR_STATUS(StatusCode::kNotSupported, "rmsnorm_forward: this build of vlpar has no CUDA kernels");
}

Status rmsnorm_backward(const Context&, TensorView, TensorView, TensorView, TensorView, TensorView, TensorView) {
  return VLPAR_STATUS(StatusCode::kNotSupported, "rmsnorm_backward: this build of vlpar has no CUDA kernels");
}

Status swiglu_forward(const Context&, TensorView, TensorView, TensorView) {
  return VLPAR_STATUS(StatusCode::kNotSupported, "swiglu_forward: this build of vlpar has no CUDA kernels");
}

Status swiglu_backward(const Context&, TensorView, TensorView, TensorView, TensorView, TensorView) {
  return VLPAR_STATUS(StatusCode::kNotSupported, "swiglu_backward: this build of vlpar has no CUDA kernels");
}

Status rotary_forward(const Context&, TensorView, TensorView, TensorView, const RotaryDesc&) {
  return VLPAR_STATUS(StatusCode::kNotSupported, "rotary_forward: this build of vlpar has no CUDA kernels");
}

Status rotary_backward(const Context&, TensorView, TensorView, TensorView, const RotaryDesc&) {
  return VLPAR_STATUS(StatusCode::kNotSupported, "rotary_backward: this build of vlpar has no CUDA kernels");
}

Status varlen_attention_forward(const Context&, TensorView, TensorView, TensorView, TensorView, TensorView,
                                TensorView, TensorView, const VarlenAttentionDesc&) {
  return VLPAR_STATUS(StatusCode::kNotSupported, "varlen_attention_forward: this build of vlpar has no CUDA kernels");
}

Status varlen_attention_backward(const Context&, TensorView, TensorView, TensorView, TensorView, TensorView,
                                 TensorView, TensorView, TensorView, TensorView, TensorView, TensorView,
                                 const VarlenAttentionDesc&) {
  return VLPAR_STATUS(StatusCode::kNotSupported, "varlen_attention_backward: this build of vlpar has no CUDA kernels");
}

Status gemm(const Context&, TensorView, TensorView, TensorView, GemmDesc) {
  return VLPAR_STATUS(StatusCode::kNotSupported, "gemm: this build of vlpar has no CUDA kernels");
}

Status grouped_gemm(const Context&, TensorView, TensorView, TensorView, std::span<const int64_t>, GemmDesc) {
  return VLPAR_STATUS(StatusCode::kNotSupported, "grouped_gemm: this build of vlpar has no CUDA kernels");
}

Status moe_dispatch_plan(const Context&, MoeDispatch&, TensorView, int) {
  return VLPAR_STATUS(StatusCode::kNotSupported, "moe_dispatch_plan: this build of vlpar has no CUDA kernels");
}

Status moe_permute(const Context&, TensorView, TensorView, TensorView, const MoeDispatch&) {
  return VLPAR_STATUS(StatusCode::kNotSupported, "moe_permute: this build of vlpar has no CUDA kernels");
}

Status moe_unpermute(const Context&, TensorView, TensorView, TensorView, const MoeDispatch&) {
  return VLPAR_STATUS(StatusCode::kNotSupported, "moe_unpermute: this build of vlpar has no CUDA kernels");
}

Status moe_row_dot(const Context&, TensorView, TensorView, TensorView, const MoeDispatch&) {
  return VLPAR_STATUS(StatusCode::kNotSupported, "moe_row_dot: this build of vlpar has no CUDA kernels");
}

Status moe_scale_rows(const Context&, TensorView, TensorView, const MoeDispatch&) {
  return VLPAR_STATUS(StatusCode::kNotSupported, "moe_scale_rows: this build of vlpar has no CUDA kernels");
}

Status grouped_weight_grad(const Context&, TensorView, TensorView, TensorView, std::span<const int64_t>) {
  return VLPAR_STATUS(StatusCode::kNotSupported, "grouped_weight_grad: this build of vlpar has no CUDA kernels");
}

}  // namespace vlpar::cuda_impl

#endif  // VLPAR_WITH_CUDA
