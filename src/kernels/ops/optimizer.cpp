// The public optimizer ops (AdamW, global gradient norm, scaling, clipping): every argument checked once here, then
// the device's implementation (CPU: src/kernels/cpu/optimizer.cpp; no CUDA kernel yet).
// Test: tests/unit/test_optimizer.cpp.
#include "vlpar/kernels/optimizer.hpp"

#include <utility>

#include "../cpu_impl.hpp"
#include "vlpar/core/checks.hpp"

namespace vlpar {
namespace {

// Every non-empty gradient contiguous, a float dtype, on the CPU.
Status check_grads(const char* op, std::span<const TensorView> grads) {
  for (size_t i = 0; i < grads.size(); ++i) {
    const TensorView& g = grads[i];
    if (g.empty()) continue;
    VLPAR_CHECK(g.is_contiguous(), "{}: gradient {} ({}) is not contiguous", op, i, g.to_string());
    VLPAR_RETURN_IF_ERROR(check_cpu_float(g, op));
  }
  return Status::Ok();
}

}  // namespace

Status adamw_step(const Context& ctx, TensorView param, TensorView param_copy, TensorView grad, TensorView m,
                  TensorView v, const AdamWConfig& cfg, int64_t step) {
  const char* op = "adamw_step";
  VLPAR_RETURN_IF_ERROR(cfg.validate());
  VLPAR_CHECK(step >= 1, "{}: step is 1-based, got {}", op, step);
  const int64_t n = param.numel();
  VLPAR_CHECK(param.is_contiguous() && param.dtype == DType::kF32 && param.device.is_cpu(),
              "{}: param must be contiguous f32 on the CPU (master weights), got {}", op, param.to_string());
  for (auto [name, t] : {std::pair{"m", &m}, std::pair{"v", &v}})
    VLPAR_CHECK(t->numel() == n && t->is_contiguous() && t->dtype == DType::kF32 && t->device.is_cpu(),
                "{}: {} must be contiguous f32 with {} elements, got {}", op, name, n, t->to_string());
  VLPAR_CHECK(grad.numel() == n && grad.is_contiguous(), "{}: grad {} must be contiguous with {} elements", op,
              grad.to_string(), n);
  VLPAR_RETURN_IF_ERROR(check_cpu_float(grad, op));
  if (!param_copy.empty()) {
    VLPAR_CHECK(param_copy.numel() == n && param_copy.is_contiguous(), "{}: param_copy {} must have {} elements", op,
                param_copy.to_string(), n);
    VLPAR_RETURN_IF_ERROR(check_cpu_float(param_copy, op));
  }
  return cpu_impl::adamw_step(ctx, param, param_copy, grad, m, v, cfg, step);
}

Result<double> global_grad_norm(const Context& ctx, std::span<const TensorView> grads) {
  VLPAR_RETURN_IF_ERROR(check_grads("global_grad_norm", grads));
  return cpu_impl::global_grad_norm(ctx, grads);
}

Status scale_(const Context& ctx, TensorView t, float alpha) {
  VLPAR_CHECK(t.is_contiguous(), "scale_: {} is not contiguous", t.to_string());
  VLPAR_RETURN_IF_ERROR(check_cpu_float(t, "scale_"));
  return cpu_impl::scale_(ctx, t, alpha);
}

Result<double> clip_grad_norm(const Context& ctx, std::span<const TensorView> grads, double max_norm) {
  VLPAR_CHECK(max_norm > 0.0, "clip_grad_norm: max_norm must be positive, got {}", max_norm);
  VLPAR_RETURN_IF_ERROR(check_grads("clip_grad_norm", grads));
  return cpu_impl::clip_grad_norm(ctx, grads, max_norm);
}

}  // namespace vlpar
