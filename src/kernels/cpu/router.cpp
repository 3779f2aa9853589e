// CPU MoE router: fp32 softmax, top-k (descending, ties to the lower expert id), renormalisation, backward,
// and the Switch-style auxiliary load-balancing loss with its gradient: the computation (src/kernels/ops/router.cpp
// checks the arguments). Test: tests/unit/test_losses.cpp (router tests)
#include "vlpar/kernels/router.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "vlpar/core/dispatch.hpp"

#include "isa_namespace.hpp"

namespace vlpar::VLPAR_CPU_ISA_NAMESPACE {
namespace {

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
                      const RouterDesc& desc, TensorView expert_bias, TensorView lse) {
  const char* op = "router_forward";
  const int64_t T = logits.size(0), E = desc.num_experts, K = desc.top_k;
  VLPAR_FLOAT_SWITCH(logits.dtype, L, op, {
    // A non-finite logit has no place in the ranking (the sort's comparison would be no order): named, first one.
    for (int64_t t = 0; t < T; ++t)
      for (int64_t e = 0; e < E; ++e)
        if (const float z = to_float(logits.ptr<L>()[t * logits.stride(0) + e]); !std::isfinite(z))
          return VLPAR_STATUS(StatusCode::kNonFinite, "{}: the router logits of token {} are not finite (expert {}: "
                              "{})", op, t, e, z);
    parallel_for(ctx, T, 8 * E, [&](int64_t begin, int64_t end) {
      std::vector<int32_t> order(static_cast<size_t>(E));
      std::vector<float> biased(expert_bias.empty() ? 0 : static_cast<size_t>(E));
      const float* bias = expert_bias.empty() ? nullptr : expert_bias.ptr<float>();
      for (int64_t t = begin; t < end; ++t) {
        const L* z = logits.ptr<L>() + t * logits.stride(0);
        float* p = probs.ptr<float>() + t * E;
        float m = -INFINITY;
        for (int64_t e = 0; e < E; ++e) m = std::max(m, to_float(z[e]));
        float s = 0.f;
        for (int64_t e = 0; e < E; ++e) s += (p[e] = std::exp(to_float(z[e]) - m));
        for (int64_t e = 0; e < E; ++e) p[e] /= s;
        if (!lse.empty()) lse.ptr<float>()[t] = m + std::log(s);
        const float* score = p;  // the selection's ranking: p, or p + bias
        if (bias) {
          for (int64_t e = 0; e < E; ++e) biased[size_t(e)] = p[e] + bias[e];
          score = biased.data();
        }
        std::iota(order.begin(), order.end(), 0);
        std::partial_sort(order.begin(), order.begin() + K, order.end(), [score](int32_t a, int32_t b) {
          return score[a] > score[b] || (score[a] == score[b] && a < b);
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
  const int64_t T = probs.size(0), E = desc.num_experts, K = desc.top_k;
  parallel_for(ctx, T, 4 * E * K, [&](int64_t begin, int64_t end) {
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
  const int64_t T = probs.size(0), E = desc.num_experts, K = desc.top_k;
  if (stats.counts.empty()) {
    stats.counts.assign(size_t(E), 0.0);
    stats.prob_sum.assign(size_t(E), 0.0);
    stats.top_k = int(K);
  }
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t k = 0; k < K; ++k) {
      const int32_t e = indices.ptr<int32_t>()[t * K + k];
      stats.counts[size_t(e)] += 1.0;
    }
    for (int64_t e = 0; e < E; ++e) stats.prob_sum[size_t(e)] += probs.ptr<float>()[t * E + e];
  }
  stats.rows += T;
  return Status::Ok();
}

Result<double> router_aux_loss(const RouterAuxStats& stats) {
  const double R = double(stats.rows), E = double(stats.counts.size());
  double sum = 0.0;
  for (size_t e = 0; e < stats.counts.size(); ++e) sum += (stats.counts[e] / R) * (stats.prob_sum[e] / R);
  return E * sum;
}

Status router_aux_backward(const Context& ctx, TensorView dlogits, TensorView probs, const RouterAuxStats& stats,
                           float grad_aux) {
  const int64_t E = int64_t(stats.counts.size()), T = probs.size(0);
  // ∂aux/∂p[t, e] = E · f_e / R (the same for every row t)
  std::vector<float> dp(static_cast<size_t>(E));
  const double R = double(stats.rows);
  for (int64_t e = 0; e < E; ++e) dp[size_t(e)] = float(double(grad_aux) * double(E) * (stats.counts[size_t(e)] / R) / R);
  parallel_for(ctx, T, 4 * E, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t)
      softmax_backward_row(dlogits.ptr<float>() + t * E, probs.ptr<float>() + t * E, dp.data(), E, true);
  });
  return Status::Ok();
}

namespace {

/// Sequence b's assignment counts per expert [E] (rows cu[b] … cu[b + 1] of indices [T, K]).
void sequence_counts(std::vector<double>& cnt, const int32_t* idx, const int32_t* cu, int64_t b, int64_t K) {
  std::fill(cnt.begin(), cnt.end(), 0.0);
  for (int64_t i = int64_t(cu[b]) * K; i < int64_t(cu[b + 1]) * K; ++i) cnt[size_t(idx[i])] += 1.0;
}

int64_t nonempty_sequences(const int32_t* cu, int64_t B) {
  int64_t n = 0;
  for (int64_t b = 0; b < B; ++b) n += cu[b + 1] > cu[b];
  return n;
}

}  // namespace

Result<double> router_seq_aux_loss(TensorView probs, TensorView indices, TensorView cu_seqlens,
                                   const RouterDesc& desc) {
  const int64_t E = desc.num_experts, K = desc.top_k, B = cu_seqlens.size(0) - 1;
  const int32_t* cu = cu_seqlens.ptr<int32_t>();
  const int64_t seqs = nonempty_sequences(cu, B);
  std::vector<double> cnt(static_cast<size_t>(E)), ps(static_cast<size_t>(E));
  double total = 0.0;  // sequences in order, experts in order: deterministic
  for (int64_t b = 0; b < B; ++b) {
    const double Tb = double(cu[b + 1] - cu[b]);
    if (Tb == 0) continue;
    sequence_counts(cnt, indices.ptr<int32_t>(), cu, b, K);
    std::fill(ps.begin(), ps.end(), 0.0);
    for (int64_t t = cu[b]; t < cu[b + 1]; ++t)
      for (int64_t e = 0; e < E; ++e) ps[size_t(e)] += probs.ptr<float>()[t * E + e];
    double s = 0.0;
    for (int64_t e = 0; e < E; ++e) s += (cnt[size_t(e)] / (double(K) * Tb)) * (ps[size_t(e)] / Tb);
    total += double(E) * s;
  }
  return seqs > 0 ? total / double(seqs) : 0.0;
}

Status router_seq_aux_backward(const Context& ctx, TensorView dlogits, TensorView probs, TensorView indices,
                               TensorView cu_seqlens, const RouterDesc& desc, float grad) {
  const int64_t E = desc.num_experts, K = desc.top_k, B = cu_seqlens.size(0) - 1;
  const int32_t* cu = cu_seqlens.ptr<int32_t>();
  const double seqs = double(nonempty_sequences(cu, B));
  parallel_for(ctx, B, [&](int64_t begin, int64_t end) {  // each row written by the thread of its sequence
    std::vector<double> cnt(static_cast<size_t>(E));
    std::vector<float> dp(static_cast<size_t>(E));
    for (int64_t b = begin; b < end; ++b) {
      const double Tb = double(cu[b + 1] - cu[b]);
      if (Tb == 0) continue;
      sequence_counts(cnt, indices.ptr<int32_t>(), cu, b, K);
      for (int64_t e = 0; e < E; ++e)
        dp[size_t(e)] = float(double(grad) * double(E) * cnt[size_t(e)] / (double(K) * Tb * Tb * seqs));
      for (int64_t t = cu[b]; t < cu[b + 1]; ++t)
        softmax_backward_row(dlogits.ptr<float>() + t * E, probs.ptr<float>() + t * E, dp.data(), E, true);
    }
  });
  return Status::Ok();
}

Status router_z_backward(const Context& ctx, TensorView dlogits, TensorView probs, TensorView lse, float scale) {
  const int64_t T = probs.size(0), E = probs.size(1);
  parallel_for(ctx, T, 4 * E, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const float c = scale * 2.f * lse.ptr<float>()[t];
      const float* p = probs.ptr<float>() + t * E;
      float* d = dlogits.ptr<float>() + t * E;
      for (int64_t e = 0; e < E; ++e) d[e] += c * p[e];
    }
  });
  return Status::Ok();
}

Status router_bias_update(TensorView bias, std::span<const double> load, float rate) {
  const auto E = int64_t(load.size());
  double mean = 0.0;  // the counts are integers: this sum is exact, so every rank gets the same mean
  for (const double l : load) mean += l;
  mean /= double(E);
  float* b = bias.ptr<float>();
  for (int64_t e = 0; e < E; ++e) {
    const double gap = mean - load[size_t(e)];
    b[e] += gap > 0.0 ? rate : gap < 0.0 ? -rate : 0.f;
  }
  return Status::Ok();
}

}  // namespace vlpar::VLPAR_CPU_ISA_NAMESPACE
