// CPU rotary embeddings (1D, interleaved MRoPE, vision 2D) on [N_tok, H, D], forward and backward.
// Angles and cos/sin in fp32 (computed once per token and frequency, shared by all heads), rotation in fp32,
// one rounding to the storage dtype. Test: tests/unit/test_rotary.cpp
#include "vlpar/kernels/rotary.hpp"

#include <cmath>
#include <vector>

#include "vlpar/core/checks.hpp"
#include "vlpar/core/dispatch.hpp"
#include "vlpar/kernels/cuda_ops.hpp"

#include "isa_namespace.hpp"

namespace vlpar::VLPAR_CPU_ISA_NAMESPACE {
namespace {

int64_t position_at(const TensorView& pos, int axis, int64_t t) {
  const int64_t i = pos.ndim() == 1 ? t : axis * pos.stride(0) + t * pos.stride(1);
  return pos.dtype == DType::kI32 ? int64_t(pos.ptr<int32_t>()[i]) : pos.ptr<int64_t>()[i];
}

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

template <class T>
void rotary_cpu(const Context& ctx, const TensorView& y, const TensorView& x, const TensorView& pos,
                const RotaryDesc& d, float sign) {
  const int half = d.head_dim / 2;
  const int64_t n_tok = x.size(0), H = x.size(1);
  std::vector<RotaryFreq> freq(static_cast<size_t>(half));
  for (int j = 0; j < half; ++j) freq[size_t(j)] = rotary_freq(d, j);
  parallel_for(ctx, n_tok, [&](int64_t begin, int64_t end) {
    std::vector<float> c(static_cast<size_t>(half)), s(static_cast<size_t>(half));
    for (int64_t t = begin; t < end; ++t) {
      for (int j = 0; j < half; ++j) {
        const float angle = float(position_at(pos, freq[size_t(j)].axis, t)) * freq[size_t(j)].inv_freq;
        c[size_t(j)] = std::cos(angle);
        s[size_t(j)] = sign * std::sin(angle);
      }
      for (int64_t h = 0; h < H; ++h) {
        const T* xr = x.ptr<T>() + t * x.stride(0) + h * d.head_dim;
        T* yr = y.ptr<T>() + t * y.stride(0) + h * d.head_dim;
        for (int j = 0; j < half; ++j) {
          float lo, hi;
          rotate_pair(to_float(xr[j]), to_float(xr[j + half]), c[size_t(j)], s[size_t(j)], lo, hi);
          yr[j] = from_float<T>(lo);  // safe in place: both inputs of the pair were read above
          yr[j + half] = from_float<T>(hi);
        }
      }
    }
  });
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
  VLPAR_FLOAT_SWITCH(x.dtype, T, "rotary_forward", { rotary_cpu<T>(ctx, y, x, positions, desc, 1.f); });
  return Status::Ok();
}

Status rotary_backward(const Context& ctx, TensorView dx, TensorView dy, TensorView positions, const RotaryDesc& desc) {
  VLPAR_RETURN_IF_ERROR(check_rotary_args("rotary_backward", dx, dy, positions, desc));
  if (dy.device.is_cuda()) return cuda_impl::rotary_backward(ctx, dx, dy, positions, desc);
  VLPAR_FLOAT_SWITCH(dy.dtype, T, "rotary_backward", { rotary_cpu<T>(ctx, dx, dy, positions, desc, -1.f); });
  return Status::Ok();
}

}  // namespace vlpar::VLPAR_CPU_ISA_NAMESPACE
