// The public MoE router ops: every argument checked once here (expert indices included, before any statistic is
// touched), then the device's implementation (CPU: src/kernels/cpu/router.cpp; no CUDA kernel yet).
// Test: tests/unit/test_losses.cpp (router tests).
#include "vlpar/kernels/router.hpp"

#include <cmath>

#include "../cpu_impl.hpp"
#include "vlpar/core/checks.hpp"

namespace vlpar {
namespace {

Status check_desc(const RouterDesc& d) {
  VLPAR_CHECK(d.num_experts > 0, "router: num_experts must be positive, got {}", d.num_experts);
  VLPAR_CHECK(d.top_k > 0 && d.top_k <= d.num_experts, "router: top_k {} must be in [1, num_experts = {}]", d.top_k,
              d.num_experts);
  return Status::Ok();
}

Status check_matrix(const char* op, const char* name, const TensorView& v, int64_t rows, int64_t cols, DType dt) {
  VLPAR_CHECK(v.ndim() == 2 && v.size(0) == rows && v.size(1) == cols && v.is_contiguous(),
              "{}: {} must be contiguous [{}, {}], got {}", op, name, rows, cols, v.to_string());
  VLPAR_CHECK(v.dtype == dt, "{}: {} must be {}, got {}", op, name, dtype_name(dt), v.to_string());
  VLPAR_CHECK(v.device.is_cpu(), "{}: {} must be on the CPU, got {}", op, name, v.to_string());
  return Status::Ok();
}

/// The expert bias [E]: f32, contiguous, on the CPU, every value finite (a NaN bias would silently route by NaN).
Status check_bias(const char* op, const TensorView& bias, int64_t E) {
  VLPAR_CHECK(bias.ndim() == 1 && bias.size(0) == E && bias.is_contiguous() && bias.dtype == DType::kF32 &&
                  bias.device.is_cpu(),
              "{}: expert_bias must be contiguous f32 [{}] on the CPU, got {}", op, E, bias.to_string());
  for (int64_t e = 0; e < E; ++e)
    VLPAR_CHECK(std::isfinite(bias.ptr<float>()[e]), "{}: expert_bias[{}] = {} is not finite", op, e,
                bias.ptr<float>()[e]);
  return Status::Ok();
}

/// A [T] vector as the [T, 1] matrix check_matrix takes (any other shape is passed on to fail there).
TensorView as_column(TensorView v) {
  if (v.ndim() == 1 && v.is_contiguous()) v = TensorView(v.data, v.dtype, Shape{v.size(0), 1}, v.device);
  return v;
}

/// probs [T, E] f32 and indices [T, K] i32 of one layer's rows, every index an expert id (checked before any
/// statistic is touched). T from probs.
Status check_probs_and_indices(const char* op, TensorView probs, TensorView indices, const RouterDesc& desc) {
  const int64_t T = probs.ndim() == 2 ? probs.size(0) : -1, E = desc.num_experts, K = desc.top_k;
  VLPAR_RETURN_IF_ERROR(check_matrix(op, "probs", probs, T, E, DType::kF32));
  VLPAR_RETURN_IF_ERROR(check_matrix(op, "indices", indices, T, K, DType::kI32));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t k = 0; k < K; ++k) {
      const int32_t e = indices.ptr<int32_t>()[t * K + k];
      VLPAR_CHECK(e >= 0 && e < E, "{}: expert index {} at row {} slot {} is outside [0, {})", op, e, t, k, E);
    }
  return Status::Ok();
}

/// The layer's rows as check_probs_and_indices, and cu_seqlens [B + 1] i32 from 0 to T, non-decreasing.
Status check_sequences(const char* op, TensorView probs, TensorView indices, TensorView cu_seqlens,
                       const RouterDesc& desc) {
  VLPAR_RETURN_IF_ERROR(check_desc(desc));
  VLPAR_RETURN_IF_ERROR(check_probs_and_indices(op, probs, indices, desc));
  const int64_t T = probs.size(0);
  VLPAR_CHECK(cu_seqlens.ndim() == 1 && cu_seqlens.size(0) >= 1 && cu_seqlens.is_contiguous() &&
                  cu_seqlens.dtype == DType::kI32 && cu_seqlens.device.is_cpu(),
              "{}: cu_seqlens must be contiguous host i32 [B + 1], got {}", op, cu_seqlens.to_string());
  const int32_t* c = cu_seqlens.ptr<int32_t>();
  const int64_t B = cu_seqlens.size(0) - 1;
  VLPAR_CHECK(c[0] == 0 && c[B] == T, "{}: cu_seqlens must run from 0 to the {} rows, got {} … {}", op, T, c[0],
              c[B]);
  for (int64_t b = 0; b < B; ++b)
    VLPAR_CHECK(c[b + 1] >= c[b], "{}: cu_seqlens decreases at {} ({} then {})", op, b + 1, c[b], c[b + 1]);
  return Status::Ok();
}

}  // namespace

Status router_forward(const Context& ctx, TensorView weights, TensorView indices, TensorView probs, TensorView logits,
                      const RouterDesc& desc, TensorView expert_bias, TensorView lse) {
  const char* op = "router_forward";
  VLPAR_RETURN_IF_ERROR(check_desc(desc));
  VLPAR_CHECK(logits.ndim() == 2 && logits.size(1) == desc.num_experts && logits.stride(1) == 1,
              "{}: logits must be [T, {}], got {}", op, desc.num_experts, logits.to_string());
  VLPAR_RETURN_IF_ERROR(check_cpu_float(logits, op));
  const int64_t T = logits.size(0), E = desc.num_experts, K = desc.top_k;
  VLPAR_RETURN_IF_ERROR(check_matrix(op, "weights", weights, T, K, DType::kF32));
  VLPAR_RETURN_IF_ERROR(check_matrix(op, "indices", indices, T, K, DType::kI32));
  VLPAR_RETURN_IF_ERROR(check_matrix(op, "probs", probs, T, E, DType::kF32));
  if (!expert_bias.empty()) VLPAR_RETURN_IF_ERROR(check_bias(op, expert_bias, E));
  if (!lse.empty()) VLPAR_RETURN_IF_ERROR(check_matrix(op, "lse", as_column(lse), T, 1, DType::kF32));
  return cpu_impl::router_forward(ctx, weights, indices, probs, logits, desc, expert_bias, lse);
}

Result<double> router_seq_aux_loss(TensorView probs, TensorView indices, TensorView cu_seqlens,
                                   const RouterDesc& desc) {
  VLPAR_RETURN_IF_ERROR(check_sequences("router_seq_aux_loss", probs, indices, cu_seqlens, desc));
  return cpu_impl::router_seq_aux_loss(probs, indices, cu_seqlens, desc);
}

Status router_seq_aux_backward(const Context& ctx, TensorView dlogits, TensorView probs, TensorView indices,
                               TensorView cu_seqlens, const RouterDesc& desc, float grad) {
  const char* op = "router_seq_aux_backward";
  VLPAR_RETURN_IF_ERROR(check_sequences(op, probs, indices, cu_seqlens, desc));
  VLPAR_RETURN_IF_ERROR(check_matrix(op, "dlogits", dlogits, probs.size(0), desc.num_experts, DType::kF32));
  VLPAR_CHECK(std::isfinite(grad), "{}: grad must be finite, got {}", op, grad);
  return cpu_impl::router_seq_aux_backward(ctx, dlogits, probs, indices, cu_seqlens, desc, grad);
}

Status router_z_backward(const Context& ctx, TensorView dlogits, TensorView probs, TensorView lse, float scale) {
  const char* op = "router_z_backward";
  const int64_t T = probs.ndim() == 2 ? probs.size(0) : -1, E = probs.ndim() == 2 ? probs.size(1) : -1;
  VLPAR_RETURN_IF_ERROR(check_matrix(op, "probs", probs, T, E, DType::kF32));
  VLPAR_RETURN_IF_ERROR(check_matrix(op, "dlogits", dlogits, T, E, DType::kF32));
  VLPAR_RETURN_IF_ERROR(check_matrix(op, "lse", as_column(lse), T, 1, DType::kF32));
  VLPAR_CHECK(std::isfinite(scale), "{}: scale must be finite, got {}", op, scale);
  return cpu_impl::router_z_backward(ctx, dlogits, probs, lse, scale);
}

Status router_bias_update(TensorView bias, std::span<const double> load, float rate) {
  const char* op = "router_bias_update";
  const auto E = int64_t(load.size());
  VLPAR_CHECK(E > 0, "{}: no expert loads", op);
  VLPAR_RETURN_IF_ERROR(check_bias(op, bias, E));
  VLPAR_CHECK(std::isfinite(rate) && rate >= 0.f, "{}: rate must be finite and not negative, got {}", op, rate);
  for (const double l : load)
    VLPAR_CHECK(std::isfinite(l) && l >= 0.0, "{}: expert loads must be finite counts, got {}", op, l);
  return cpu_impl::router_bias_update(bias, load, rate);
}

Status router_backward(const Context& ctx, TensorView dlogits, TensorView dweights, TensorView probs,
                       TensorView indices, TensorView weights, const RouterDesc& desc) {
  const char* op = "router_backward";
  VLPAR_RETURN_IF_ERROR(check_desc(desc));
  const int64_t T = probs.ndim() == 2 ? probs.size(0) : -1, E = desc.num_experts, K = desc.top_k;
  VLPAR_RETURN_IF_ERROR(check_matrix(op, "probs", probs, T, E, DType::kF32));
  VLPAR_RETURN_IF_ERROR(check_matrix(op, "dlogits", dlogits, T, E, DType::kF32));
  VLPAR_RETURN_IF_ERROR(check_matrix(op, "dweights", dweights, T, K, DType::kF32));
  VLPAR_RETURN_IF_ERROR(check_matrix(op, "indices", indices, T, K, DType::kI32));
  VLPAR_RETURN_IF_ERROR(check_matrix(op, "weights", weights, T, K, DType::kF32));
  return cpu_impl::router_backward(ctx, dlogits, dweights, probs, indices, weights, desc);
}

Status router_aux_accumulate(RouterAuxStats& stats, TensorView probs, TensorView indices, const RouterDesc& desc) {
  const char* op = "router_aux_accumulate";
  VLPAR_RETURN_IF_ERROR(check_desc(desc));
  const int64_t E = desc.num_experts, K = desc.top_k;
  VLPAR_RETURN_IF_ERROR(check_probs_and_indices(op, probs, indices, desc));
  VLPAR_CHECK(stats.counts.empty() || (int64_t(stats.counts.size()) == E && stats.top_k == K),
              "{}: stats were started with E={}, K={} but this layer has E={}, K={}", op, stats.counts.size(),
              stats.top_k, E, K);
  return cpu_impl::router_aux_accumulate(stats, probs, indices, desc);
}

Result<double> router_aux_loss(const RouterAuxStats& stats) {
  VLPAR_CHECK(stats.rows > 0, "router_aux_loss: no rows accumulated");
  return cpu_impl::router_aux_loss(stats);
}

Status router_aux_backward(const Context& ctx, TensorView dlogits, TensorView probs, const RouterAuxStats& stats,
                           float grad_aux) {
  const char* op = "router_aux_backward";
  VLPAR_CHECK(stats.rows > 0, "{}: no rows accumulated", op);
  const int64_t E = int64_t(stats.counts.size()), T = probs.ndim() == 2 ? probs.size(0) : -1;
  VLPAR_RETURN_IF_ERROR(check_matrix(op, "probs", probs, T, E, DType::kF32));
  VLPAR_RETURN_IF_ERROR(check_matrix(op, "dlogits", dlogits, T, E, DType::kF32));
  return cpu_impl::router_aux_backward(ctx, dlogits, probs, stats, grad_aux);
}

}  // namespace vlpar
