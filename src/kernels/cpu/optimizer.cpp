// CPU AdamW, global gradient norm and clipping. Test: tests/unit/test_optimizer.cpp
#include "vlpar/kernels/optimizer.hpp"

#include <cmath>
#include <vector>

#include "vlpar/core/checks.hpp"
#include "vlpar/core/dispatch.hpp"

#include "isa_namespace.hpp"

namespace vlpar::VLPAR_CPU_ISA_NAMESPACE {

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
  const double bc1 = 1.0 - std::pow(double(cfg.beta1), double(step));
  const double bc2 = 1.0 - std::pow(double(cfg.beta2), double(step));
  const float step_size = float(double(cfg.lr) / bc1), inv_sqrt_bc2 = float(1.0 / std::sqrt(bc2));
  const float decay = 1.f - cfg.lr * cfg.weight_decay;
  float* p = param.ptr<float>();
  float* pm = m.ptr<float>();
  float* pv = v.ptr<float>();
  VLPAR_FLOAT_SWITCH(grad.dtype, G, op, {
    const G* g = grad.ptr<G>();
    parallel_for(ctx, n, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const float gi = to_float(g[i]);
        pm[i] = cfg.beta1 * pm[i] + (1.f - cfg.beta1) * gi;
        pv[i] = cfg.beta2 * pv[i] + (1.f - cfg.beta2) * gi * gi;
        p[i] = p[i] * decay - step_size * pm[i] / (std::sqrt(pv[i]) * inv_sqrt_bc2 + cfg.eps);
      }
    });
  });
  if (!param_copy.empty()) VLPAR_RETURN_IF_ERROR(convert_(param_copy, param));
  return Status::Ok();
}

namespace {
template <class G>
double sum_squares(const Context& ctx, const G* g, int64_t n) {
  const int64_t parts = num_parts(ctx, n);
  std::vector<double> partial(size_t(parts), 0.0);
  parallel_for_parts(ctx, n, [&](int64_t part, int64_t begin, int64_t end) {
    double s = 0.0;
    for (int64_t i = begin; i < end; ++i) s += double(to_float(g[i])) * double(to_float(g[i]));
    partial[size_t(part)] = s;
  });
  double s = 0.0;
  for (double x : partial) s += x;
  return s;
}
}  // namespace

Result<double> global_grad_norm(const Context& ctx, std::span<const TensorView> grads) {
  double total = 0.0;
  for (size_t i = 0; i < grads.size(); ++i) {
    const TensorView& g = grads[i];
    if (g.empty()) continue;
    VLPAR_CHECK(g.is_contiguous(), "global_grad_norm: gradient {} ({}) is not contiguous", i, g.to_string());
    VLPAR_RETURN_IF_ERROR(check_cpu_float(g, "global_grad_norm"));
    VLPAR_FLOAT_SWITCH(g.dtype, G, "global_grad_norm", { total += sum_squares(ctx, g.ptr<G>(), g.numel()); });
  }
  return std::sqrt(total);
}

Status scale_(const Context& ctx, TensorView t, float alpha) {
  VLPAR_CHECK(t.is_contiguous(), "scale_: {} is not contiguous", t.to_string());
  VLPAR_RETURN_IF_ERROR(check_cpu_float(t, "scale_"));
  VLPAR_FLOAT_SWITCH(t.dtype, T, "scale_", {
    T* p = t.ptr<T>();
    parallel_for(ctx, t.numel(), [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) p[i] = from_float<T>(to_float(p[i]) * alpha);
    });
  });
  return Status::Ok();
}

Result<double> clip_grad_norm(const Context& ctx, std::span<const TensorView> grads, double max_norm) {
  VLPAR_CHECK(max_norm > 0.0, "clip_grad_norm: max_norm must be positive, got {}", max_norm);
  VLPAR_ASSIGN_OR_RETURN(const double norm, VLPAR_CPU_ISA_NAMESPACE::global_grad_norm(ctx, grads));
  if (!std::isfinite(norm) || norm <= max_norm) return norm;
  const float factor = float(max_norm / (norm + 1e-6));
  for (const TensorView& g : grads)
    if (!g.empty()) VLPAR_RETURN_IF_ERROR(VLPAR_CPU_ISA_NAMESPACE::scale_(ctx, g, factor));
  return norm;
}

}  // namespace vlpar::VLPAR_CPU_ISA_NAMESPACE
