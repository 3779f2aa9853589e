// The public RMSNorm / LayerNorm ops: every argument checked once here, then the device's implementation (CPU:
// src/kernels/cpu/norm.cpp through the CPU-path dispatch; CUDA: src/kernels/cuda/rmsnorm_*.cu).
// Test: tests/unit/test_norm.cpp, tests/gpu/test_cuda_kernels.cpp.
#include "vlpar/kernels/norm.hpp"

#include "../cpu_impl.hpp"
#include "vlpar/core/checks.hpp"
#include "vlpar/kernels/cuda_ops.hpp"

namespace vlpar {
namespace {

/// x and the output collapse to the same rows × H with one float storage dtype; the weight is a float [H].
Result<RowsView> check_norm_io(const char* op, const TensorView& y, const TensorView& x, const TensorView& w) {
  VLPAR_ASSIGN_OR_RETURN(RowsView xr, as_rows(x, op));
  VLPAR_ASSIGN_OR_RETURN(RowsView yr, as_rows(y, op));
  VLPAR_RETURN_IF_ERROR(check_same_rows(op, "output", yr, "x", xr));
  VLPAR_RETURN_IF_ERROR(check_storage_dtype(op, "x", x));
  VLPAR_CHECK(y.dtype == x.dtype, "{}: output dtype {} differs from x dtype {}", op, dtype_name(y.dtype),
              dtype_name(x.dtype));
  VLPAR_RETURN_IF_ERROR(check_float_vector(op, "weight", w, xr.cols));
  return xr;
}

/// dy has x's rows and dtype.
Status check_dy(const char* op, const TensorView& dy, const TensorView& x, const RowsView& xr) {
  VLPAR_ASSIGN_OR_RETURN(RowsView g, as_rows(dy, op));
  VLPAR_RETURN_IF_ERROR(check_same_rows(op, "dy", g, "x", xr));
  VLPAR_CHECK(dy.dtype == x.dtype, "{}: dy dtype {} differs from x dtype {}", op, dtype_name(dy.dtype),
              dtype_name(x.dtype));
  return Status::Ok();
}

}  // namespace

Status rmsnorm_forward(const Context& ctx, TensorView y, TensorView rstd, TensorView x, TensorView w, float eps) {
  const char* op = "rmsnorm_forward";
  VLPAR_ASSIGN_OR_RETURN(const RowsView xr, check_norm_io(op, y, x, w));
  if (!rstd.empty()) VLPAR_RETURN_IF_ERROR(check_vector(op, "rstd", rstd, xr.rows, DType::kF32));
  VLPAR_CHECK(eps >= 0.f, "{}: eps must be non-negative, got {}", op, eps);
  VLPAR_RETURN_IF_ERROR(check_same_device(op, {{"y", &y}, {"x", &x}, {"weight", &w}, {"rstd", &rstd}}));
  if (x.device.is_cuda()) return cuda_impl::rmsnorm_forward(ctx, y, rstd, x, w, eps);
  return cpu_impl::rmsnorm_forward(ctx, y, rstd, x, w, eps);
}

Status rmsnorm_backward(const Context& ctx, TensorView dx, TensorView dw, TensorView dy, TensorView x, TensorView w,
                        TensorView rstd) {
  const char* op = "rmsnorm_backward";
  VLPAR_ASSIGN_OR_RETURN(const RowsView xr, check_norm_io(op, dx, x, w));
  VLPAR_RETURN_IF_ERROR(check_dy(op, dy, x, xr));
  VLPAR_RETURN_IF_ERROR(check_vector(op, "rstd", rstd, xr.rows, DType::kF32));
  if (!dw.empty()) VLPAR_RETURN_IF_ERROR(check_vector(op, "dw", dw, xr.cols, DType::kF32));
  VLPAR_RETURN_IF_ERROR(
      check_same_device(op, {{"dx", &dx}, {"dy", &dy}, {"x", &x}, {"weight", &w}, {"rstd", &rstd}, {"dw", &dw}}));
  if (x.device.is_cuda()) return cuda_impl::rmsnorm_backward(ctx, dx, dw, dy, x, w, rstd);
  return cpu_impl::rmsnorm_backward(ctx, dx, dw, dy, x, w, rstd);
}

Status rmsnorm_weight_grad(const Context& ctx, TensorView dw, TensorView dy, TensorView x, TensorView rstd) {
  const char* op = "rmsnorm_weight_grad";
  VLPAR_ASSIGN_OR_RETURN(const RowsView xr, as_rows(x, op));
  VLPAR_RETURN_IF_ERROR(check_storage_dtype(op, "x", x));
  VLPAR_RETURN_IF_ERROR(check_dy(op, dy, x, xr));
  VLPAR_RETURN_IF_ERROR(check_vector(op, "rstd", rstd, xr.rows, DType::kF32));
  VLPAR_RETURN_IF_ERROR(check_vector(op, "dw", dw, xr.cols, DType::kF32));
  VLPAR_RETURN_IF_ERROR(check_same_device(op, {{"dw", &dw}, {"dy", &dy}, {"x", &x}, {"rstd", &rstd}}));
  VLPAR_CHECK_CODE(x.device.is_cpu(), StatusCode::kNotSupported, "{}: no CUDA kernel yet ({})", op, x.to_string());
  return cpu_impl::rmsnorm_weight_grad(ctx, dw, dy, x, rstd);
}

Status layernorm_forward(const Context& ctx, TensorView y, TensorView mean, TensorView rstd, TensorView x,
                         TensorView w, TensorView b, float eps) {
  const char* op = "layernorm_forward";
  VLPAR_ASSIGN_OR_RETURN(const RowsView xr, check_norm_io(op, y, x, w));
  VLPAR_RETURN_IF_ERROR(check_float_vector(op, "bias", b, xr.cols));
  VLPAR_CHECK(b.dtype == w.dtype, "{}: bias dtype {} differs from weight dtype {}", op, dtype_name(b.dtype),
              dtype_name(w.dtype));
  VLPAR_RETURN_IF_ERROR(check_vector(op, "mean", mean, xr.rows, DType::kF32));
  VLPAR_RETURN_IF_ERROR(check_vector(op, "rstd", rstd, xr.rows, DType::kF32));
  VLPAR_CHECK(eps >= 0.f, "{}: eps must be non-negative, got {}", op, eps);
  VLPAR_RETURN_IF_ERROR(check_same_device(
      op, {{"y", &y}, {"x", &x}, {"weight", &w}, {"bias", &b}, {"mean", &mean}, {"rstd", &rstd}}));
  VLPAR_CHECK_CODE(x.device.is_cpu(), StatusCode::kNotSupported, "{}: no CUDA kernel yet ({})", op, x.to_string());
  return cpu_impl::layernorm_forward(ctx, y, mean, rstd, x, w, b, eps);
}

Status layernorm_backward(const Context& ctx, TensorView dx, TensorView dw, TensorView db, TensorView dy,
                          TensorView x, TensorView w, TensorView mean, TensorView rstd) {
  const char* op = "layernorm_backward";
  VLPAR_ASSIGN_OR_RETURN(const RowsView xr, check_norm_io(op, dx, x, w));
  VLPAR_RETURN_IF_ERROR(check_dy(op, dy, x, xr));
  VLPAR_RETURN_IF_ERROR(check_vector(op, "mean", mean, xr.rows, DType::kF32));
  VLPAR_RETURN_IF_ERROR(check_vector(op, "rstd", rstd, xr.rows, DType::kF32));
  if (!dw.empty()) VLPAR_RETURN_IF_ERROR(check_vector(op, "dw", dw, xr.cols, DType::kF32));
  if (!db.empty()) VLPAR_RETURN_IF_ERROR(check_vector(op, "db", db, xr.cols, DType::kF32));
  VLPAR_RETURN_IF_ERROR(check_same_device(
      op, {{"dx", &dx}, {"dy", &dy}, {"x", &x}, {"weight", &w}, {"mean", &mean}, {"rstd", &rstd}}));
  VLPAR_CHECK_CODE(x.device.is_cpu(), StatusCode::kNotSupported, "{}: no CUDA kernel yet ({})", op, x.to_string());
  return cpu_impl::layernorm_backward(ctx, dx, dw, db, dy, x, w, mean, rstd);
}

}  // namespace vlpar
