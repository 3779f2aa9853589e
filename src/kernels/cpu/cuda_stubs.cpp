// CPU-only builds: the CUDA entry points of cuda_ops.hpp exist but report that this build has no CUDA.
#include "vlpar/kernels/cuda_ops.hpp"

#ifndef VLPAR_WITH_CUDA
namespace vlpar::cuda_impl {

#define VLPAR_NO_CUDA(op) \
  return VLPAR_STATUS(StatusCode::kNotSupported, "{}: this build of vlpar has no CUDA kernels", op)

Status rmsnorm_forward(const Context&, TensorView, TensorView, TensorView, TensorView, float) {
  VLPAR_NO_CUDA("rmsnorm_forward");
}
Status rmsnorm_backward(const Context&, TensorView, TensorView, TensorView, TensorView, TensorView, TensorView) {
  VLPAR_NO_CUDA("rmsnorm_backward");
}
Status swiglu_forward(const Context&, TensorView, TensorView, TensorView) { VLPAR_NO_CUDA("swiglu_forward"); }
Status swiglu_backward(const Context&, TensorView, TensorView, TensorView, TensorView, TensorView) {
  VLPAR_NO_CUDA("swiglu_backward");
}
Status rotary_forward(const Context&, TensorView, TensorView, TensorView, const RotaryDesc&) {
  VLPAR_NO_CUDA("rotary_forward");
}
Status rotary_backward(const Context&, TensorView, TensorView, TensorView, const RotaryDesc&) {
  VLPAR_NO_CUDA("rotary_backward");
}

#undef VLPAR_NO_CUDA

}  // namespace vlpar::cuda_impl
#endif
