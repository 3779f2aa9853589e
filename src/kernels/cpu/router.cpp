// CPU MoE router: fp32 softmax, top-k (descending, ties to the lower expert id), renormalisation, backward,
// and the Switch-style auxiliary load-balancing loss with its gradient. Test: tests/unit/test_router.cpp
#include "vlpar/kernels/router.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "vlpar/core/checks.hpp"
#include "vlpar/core/dispatch.hpp"

#include "isa_namespace.hpp"

namespace vlpar::VLPAR_CPU_ISA_NAMESPACE {
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

/// dlogits = p ⊙ (dp − Σ_e p_e·dp_e): the softmax Jacobian-vector product for one row.
void softmax_backward_row(float* dlogits, const float* p, const float* dp, int64_t E, bool accumulate) {
  double dot = 0.0;
  for (int64_t e = 0; e < E; ++e) dot += double(p[e]) * double(dp[e]);
  for (int64_t e = 0; e < E; ++e) {
    const float g = p[e] * (dp[e] - float(dot));
    dlogits[e] = accumulate ? dlogits[e] + g : g;
  }
}

}  // namespace

Status router_forward(const Context& ctx, TensorView weights, TensorView indices, TensorView probs, TensorView logits,
                      const RouterDesc& desc) {
  const char* op = "router_forward";
  VLPAR_RETURN_IF_ERROR(check_desc(desc));
  VLPAR_CHECK(logits.ndim() == 2 && logits.size(1) == desc.num_experts && logits.stride(1) == 1,
              "{}: logits must be [T, {}], got {}", op, desc.num_experts, logits.to_string());
  VLPAR_RETURN_IF_ERROR(check_cpu_float(logits, op));
  const int64_t T = logits.size(0), E = desc.num_experts, K = desc.top_k;
  VLPAR_RETURN_IF_ERROR(check_matrix(op, "weights", weights, T, K, DType::kF32));
  VLPAR_RETURN_IF_ERROR(check_matrix(op, "indices", indices, T, K, DType::kI32));
  VLPAR_RETURN_IF_ERROR(check_matrix(op, "probs", probs, T, E, DType::kF32));
  VLPAR_FLOAT_SWITCH(logits.dtype, L, op, {
    parallel_for(ctx, T, [&](int64_t begin, int64_t end) {
      std::vector<int32_t> order(static_cast<size_t>(E));
      for (int64_t t = begin; t < end; ++t) {
        const L* z = logits.ptr<L>() + t * logits.stride(0);
        float* p = probs.ptr<float>() + t * E;
        float m = -INFINITY;
        for (int64_t e = 0; e < E; ++e) m = std::max(m, to_float(z[e]));
        float s = 0.f;
        for (int64_t e = 0; e < E; ++e) s += (p[e] = std::exp(to_float(z[e]) - m));
        for (int64_t e = 0; e < E; ++e) p[e] /= s;
        std::iota(order.begin(), order.end(), 0);
        std::partial_sort(order.begin(), order.begin() + K, order.end(), [p](int32_t a, int32_t b) {
          return p[a] > p[b] || (p[a] == p[b] && a < b);
        });
        float top = 0.f;
        for (int64_t k = 0; k < K; ++k) top += p[order[size_t(k)]];
        for (int64_t k = 0; k < K; ++k) {
          indices.ptr<int32_t>()[t * K + k] = order[size_t(k)];
          weights.ptr<float>()[t * K + k] = p[order[size_t(k)]] / top;
        }
      }
    });
  });
  return Status::Ok();
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
  parallel_for(ctx, T, [&](int64_t begin, int64_t end) {
    std::vector<float> dp(static_cast<size_t>(E));
    for (int64_t t = begin; t < end; ++t) {
      const float* p = probs.ptr<float>() + t * E;
      const int32_t* idx = indices.ptr<int32_t>() + t * K;
      const float* w = weights.ptr<float>() + t * K;
      const float* dw = dweights.ptr<float>() + t * K;
      // w_i = p_i / S with S = Σ_k p_k  ⇒  ∂L/∂p_{idx_i} = (dw_i − Σ_j dw_j·w_j) / S
      float S = 0.f, dot = 0.f;
      for (int64_t k = 0; k < K; ++k) {
        S += p[idx[k]];
        dot += dw[k] * w[k];
      }
      std::fill(dp.begin(), dp.end(), 0.f);
      for (int64_t k = 0; k < K; ++k) dp[size_t(idx[k])] = (dw[k] - dot) / S;
      softmax_backward_row(dlogits.ptr<float>() + t * E, p, dp.data(), E, false);
    }
  });
  return Status::Ok();
}

Status router_aux_accumulate(RouterAuxStats& stats, TensorView probs, TensorView indices, const RouterDesc& desc) {
  const char* op = "router_aux_accumulate";
  VLPAR_RETURN_IF_ERROR(check_desc(desc));
  const int64_t T = probs.ndim() == 2 ? probs.size(0) : -1, E = desc.num_experts, K = desc.top_k;
  VLPAR_RETURN_IF_ERROR(check_matrix(op, "probs", probs, T, E, DType::kF32));
  VLPAR_RETURN_IF_ERROR(check_matrix(op, "indices", indices, T, K, DType::kI32));
  if (stats.counts.empty()) {
    stats.counts.assign(size_t(E), 0.0);
    stats.prob_sum.assign(size_t(E), 0.0);
    stats.top_k = int(K);
  }
  VLPAR_CHECK(int64_t(stats.counts.size()) == E && stats.top_k == K, "{}: stats were started with E={}, K={} but "
              "this layer has E={}, K={}", op, stats.counts.size(), stats.top_k, E, K);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t k = 0; k < K; ++k) {
      const int32_t e = indices.ptr<int32_t>()[t * K + k];
      VLPAR_CHECK(e >= 0 && e < E, "{}: expert index {} at row {} slot {} is outside [0, {})", op, e, t, k, E);
      stats.counts[size_t(e)] += 1.0;
    }
    for (int64_t e = 0; e < E; ++e) stats.prob_sum[size_t(e)] += probs.ptr<float>()[t * E + e];
  }
  stats.rows += T;
  return Status::Ok();
}

Result<double> router_aux_loss(const RouterAuxStats& stats) {
  VLPAR_CHECK(stats.rows > 0, "router_aux_loss: no rows accumulated");
  const double R = double(stats.rows), E = double(stats.counts.size());
  double sum = 0.0;
  for (size_t e = 0; e < stats.counts.size(); ++e) sum += (stats.counts[e] / R) * (stats.prob_sum[e] / R);
  return E * sum;
}

Status router_aux_backward(const Context& ctx, TensorView dlogits, TensorView probs, const RouterAuxStats& stats,
                           float grad_aux) {
  const char* op = "router_aux_backward";
  VLPAR_CHECK(stats.rows > 0, "{}: no rows accumulated", op);
  const int64_t E = int64_t(stats.counts.size()), T = probs.ndim() == 2 ? probs.size(0) : -1;
  VLPAR_RETURN_IF_ERROR(check_matrix(op, "probs", probs, T, E, DType::kF32));
  VLPAR_RETURN_IF_ERROR(check_matrix(op, "dlogits", dlogits, T, E, DType::kF32));
  // ∂aux/∂p[t, e] = E · f_e / R (the same for every row t)
  std::vector<float> dp(static_cast<size_t>(E));
  const double R = double(stats.rows);
  for (int64_t e = 0; e < E; ++e) dp[size_t(e)] = float(double(grad_aux) * double(E) * (stats.counts[size_t(e)] / R) / R);
  parallel_for(ctx, T, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t)
      softmax_backward_row(dlogits.ptr<float>() + t * E, probs.ptr<float>() + t * E, dp.data(), E, true);
  });
  return Status::Ok();
}

}  // namespace vlpar::VLPAR_CPU_ISA_NAMESPACE
