// The public activation ops: every argument checked once here, then the device's implementation (CPU:
// src/kernels/cpu/activation.cpp through the CPU-path dispatch; CUDA: src/kernels/cuda/swiglu_*.cu).
// Test: tests/unit/test_activation.cpp, tests/gpu/test_cuda_kernels.cpp.
#include "vlpar/kernels/activation.hpp"

#include "../cpu_impl.hpp"
#include "vlpar/core/checks.hpp"
#include "vlpar/kernels/cuda_ops.hpp"

namespace vlpar {
namespace {

/// Every view collapses to the same rows × cols with one float storage dtype, non-null data, one device.
Status check_pointwise(const char* op, std::initializer_list<std::pair<const char*, const TensorView*>> views) {
  RowsView first_rows;
  const auto& [first_name, first] = *views.begin();
  for (const auto& [name, v] : views) {
    VLPAR_ASSIGN_OR_RETURN(RowsView r, as_rows(*v, op));
    VLPAR_RETURN_IF_ERROR(check_storage_dtype(op, name, *v));
    VLPAR_CHECK(v->dtype == first->dtype, "{}: {} is {} but {} is {}", op, name, dtype_name(v->dtype), first_name,
                dtype_name(first->dtype));
    VLPAR_CHECK(v->data != nullptr || v->numel() == 0, "{}: {} has null data", op, name);
    if (v == first) first_rows = r;
    else VLPAR_RETURN_IF_ERROR(check_same_rows(op, name, r, first_name, first_rows));
  }
  return check_same_device(op, views);
}

Status no_cuda_kernel(const char* op) {
  return VLPAR_STATUS(StatusCode::kNotSupported, "{}: no CUDA kernel yet", op);
}

}  // namespace

Status gelu_forward(const Context& ctx, TensorView y, TensorView x, GeluKind kind) {
  VLPAR_RETURN_IF_ERROR(check_pointwise("gelu_forward", {{"y", &y}, {"x", &x}}));
  if (x.device.is_cuda()) return no_cuda_kernel("gelu_forward");
  return cpu_impl::gelu_forward(ctx, y, x, kind);
}

Status gelu_backward(const Context& ctx, TensorView dx, TensorView dy, TensorView x, GeluKind kind) {
  VLPAR_RETURN_IF_ERROR(check_pointwise("gelu_backward", {{"dx", &dx}, {"dy", &dy}, {"x", &x}}));
  if (x.device.is_cuda()) return no_cuda_kernel("gelu_backward");
  return cpu_impl::gelu_backward(ctx, dx, dy, x, kind);
}

Status silu_forward(const Context& ctx, TensorView y, TensorView x) {
  VLPAR_RETURN_IF_ERROR(check_pointwise("silu_forward", {{"y", &y}, {"x", &x}}));
  if (x.device.is_cuda()) return no_cuda_kernel("silu_forward");
  return cpu_impl::silu_forward(ctx, y, x);
}

Status silu_backward(const Context& ctx, TensorView dx, TensorView dy, TensorView x) {
  VLPAR_RETURN_IF_ERROR(check_pointwise("silu_backward", {{"dx", &dx}, {"dy", &dy}, {"x", &x}}));
  if (x.device.is_cuda()) return no_cuda_kernel("silu_backward");
  return cpu_impl::silu_backward(ctx, dx, dy, x);
}

Status swiglu_forward(const Context& ctx, TensorView y, TensorView gate, TensorView up) {
  VLPAR_RETURN_IF_ERROR(check_pointwise("swiglu_forward", {{"y", &y}, {"gate", &gate}, {"up", &up}}));
  if (gate.device.is_cuda()) return cuda_impl::swiglu_forward(ctx, y, gate, up);
  return cpu_impl::swiglu_forward(ctx, y, gate, up);
}

Status swiglu_backward(const Context& ctx, TensorView dgate, TensorView dup, TensorView dy, TensorView gate,
                       TensorView up) {
  VLPAR_RETURN_IF_ERROR(check_pointwise("swiglu_backward",
                                        {{"dgate", &dgate}, {"dup", &dup}, {"dy", &dy}, {"gate", &gate}, {"up", &up}}));
  if (gate.device.is_cuda()) return cuda_impl::swiglu_backward(ctx, dgate, dup, dy, gate, up);
  return cpu_impl::swiglu_backward(ctx, dgate, dup, dy, gate, up);
}

}  // namespace vlpar
