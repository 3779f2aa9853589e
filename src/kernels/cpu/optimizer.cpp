// CPU AdamW, global gradient norm and clipping: the computation (src/kernels/ops/optimizer.cpp checks the
// arguments). Test: tests/unit/test_optimizer.cpp
#include "vlpar/kernels/optimizer.hpp"

#include <cmath>
#include <vector>

#include "vlpar/core/dispatch.hpp"

#include "isa_namespace.hpp"

namespace vlpar::VLPAR_CPU_ISA_NAMESPACE {

Status adamw_step(const Context& ctx, TensorView param, TensorView param_copy, TensorView grad, TensorView m,
                  TensorView v, const AdamWConfig& cfg, int64_t step) {
  const char* op = "adamw_step";
  const int64_t n = param.numel();
  const double bc1 = 1.0 - std::pow(double(cfg.beta1), double(step));
  const double bc2 = 1.0 - std::pow(double(cfg.beta2), double(step));
  const float step_size = float(double(cfg.lr) / bc1), inv_sqrt_bc2 = float(1.0 / std::sqrt(bc2));
  const float decay = 1.f - cfg.lr * cfg.weight_decay;
  float* p = param.ptr<float>();
  float* pm = m.ptr<float>();
  float* pv = v.ptr<float>();
  VLPAR_FLOAT_SWITCH(grad.dtype, G, op, {
    const G* g = grad.ptr<G>();
    parallel_for(ctx, n, 16, [&](int64_t begin, int64_t end) {
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
  const int64_t parts = num_parts(ctx, n, 2);
  std::vector<double> partial(size_t(parts), 0.0);
  parallel_for_n_parts(ctx, n, parts, [&](int64_t part, int64_t begin, int64_t end) {
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
  for (const TensorView& g : grads) {
    if (g.empty()) continue;
    VLPAR_FLOAT_SWITCH(g.dtype, G, "global_grad_norm", { total += sum_squares(ctx, g.ptr<G>(), g.numel()); });
  }
  return std::sqrt(total);
}

Status scale_(const Context& ctx, TensorView t, float alpha) {
  VLPAR_FLOAT_SWITCH(t.dtype, T, "scale_", {
    T* p = t.ptr<T>();
    parallel_for(ctx, t.numel(), 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) p[i] = from_float<T>(to_float(p[i]) * alpha);
    });
  });
  return Status::Ok();
}

Result<double> clip_grad_norm(const Context& ctx, std::span<const TensorView> grads, double max_norm) {
  VLPAR_ASSIGN_OR_RETURN(const double norm, VLPAR_CPU_ISA_NAMESPACE::global_grad_norm(ctx, grads));
  if (!std::isfinite(norm) || norm <= max_norm) return norm;
  const float factor = float(max_norm / (norm + 1e-6));
  for (const TensorView& g : grads)
    if (!g.empty()) VLPAR_RETURN_IF_ERROR(VLPAR_CPU_ISA_NAMESPACE::scale_(ctx, g, factor));
  return norm;
}

}  // namespace vlpar::VLPAR_CPU_ISA_NAMESPACE
