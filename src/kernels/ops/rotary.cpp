// The public rotary ops: every argument checked once here, then the device's implementation (CPU:
// src/kernels/cpu/rotary.cpp through the CPU-path dispatch; CUDA: src/kernels/cuda/rotary_*.cu).
// Test: tests/unit/test_rotary.cpp, tests/gpu/test_cuda_kernels.cpp.
#include "vlpar/kernels/rotary.hpp"

#include "../cpu_impl.hpp"
#include "vlpar/core/checks.hpp"
#include "vlpar/kernels/cuda_ops.hpp"

namespace vlpar {
namespace {

Status check_rotary_args(const char* op, const TensorView& y, const TensorView& x, const TensorView& pos,
                         const RotaryDesc& d) {
  VLPAR_RETURN_IF_ERROR(check_rotary_desc(d));
  VLPAR_CHECK(x.ndim() == 3, "{}: x must be [N_tok, H, D], got {}", op, x.to_string());
  VLPAR_CHECK(y.ndim() == 3 && y.shape == x.shape, "{}: output {} must match x {}", op, y.to_string(), x.to_string());
  VLPAR_CHECK(x.size(2) == d.head_dim, "{}: x head dim {} != desc.head_dim {}", op, x.size(2), d.head_dim);
  VLPAR_RETURN_IF_ERROR(check_storage_dtype(op, "x", x));
  VLPAR_CHECK(y.dtype == x.dtype, "{}: output dtype differs from x dtype", op);
  VLPAR_CHECK(x.stride(2) == 1 && y.stride(2) == 1 && x.stride(1) == d.head_dim && y.stride(1) == d.head_dim,
              "{}: heads and head dim of x/y must be contiguous", op);
  VLPAR_CHECK(pos.dtype == DType::kI32 || pos.dtype == DType::kI64, "{}: positions must be i32 or i64, got {}", op,
              pos.to_string());
  const int axes = d.num_axes();
  const bool ok_shape = (pos.ndim() == 2 && pos.size(0) == axes && pos.size(1) == x.size(0)) ||
                        (axes == 1 && pos.ndim() == 1 && pos.size(0) == x.size(0));
  VLPAR_CHECK(ok_shape, "{}: positions must be [{}, {}] for this rotary kind, got {}", op, axes, x.size(0),
              pos.to_string());
  VLPAR_CHECK(pos.stride(-1) == 1, "{}: positions must be contiguous along tokens", op);
  return check_same_device(op, {{"y", &y}, {"x", &x}, {"positions", &pos}});
}

}  // namespace

Status check_rotary_desc(const RotaryDesc& d) {
  VLPAR_CHECK(d.head_dim > 0 && d.head_dim % 2 == 0, "rotary: head_dim {} must be positive and even", d.head_dim);
  VLPAR_CHECK(d.kind != RotaryKind::kVision2D || d.head_dim % 4 == 0,
              "rotary: head_dim {} is not a multiple of 4 for vision 2D rotary", d.head_dim);
  VLPAR_CHECK(d.theta > 0.f, "rotary: theta must be positive, got {}", d.theta);
  if (d.kind == RotaryKind::kMRoPE) {
    // Sections larger than head_dim/2 are allowed: frequencies >= head_dim/2 are simply dropped (spec §4.4).
    VLPAR_CHECK(d.mrope_section[0] >= 0 && d.mrope_section[1] >= 0 && d.mrope_section[2] >= 0,
                "rotary: mrope_section [{}, {}, {}] must be non-negative", d.mrope_section[0], d.mrope_section[1],
                d.mrope_section[2]);
  }
  return Status::Ok();
}

Status rotary_forward(const Context& ctx, TensorView y, TensorView x, TensorView positions, const RotaryDesc& desc) {
  VLPAR_RETURN_IF_ERROR(check_rotary_args("rotary_forward", y, x, positions, desc));
  if (x.device.is_cuda()) return cuda_impl::rotary_forward(ctx, y, x, positions, desc);
  return cpu_impl::rotary_forward(ctx, y, x, positions, desc);
}

Status rotary_backward(const Context& ctx, TensorView dx, TensorView dy, TensorView positions, const RotaryDesc& desc) {
  VLPAR_RETURN_IF_ERROR(check_rotary_args("rotary_backward", dx, dy, positions, desc));
  if (dy.device.is_cuda()) return cuda_impl::rotary_backward(ctx, dx, dy, positions, desc);
  return cpu_impl::rotary_backward(ctx, dx, dy, positions, desc);
}

}  // namespace vlpar
