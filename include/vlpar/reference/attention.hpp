#pragma once
// fp64 reference (STYLE §9): varlen (packed) multi-head attention, forward and backward, as plain loops over
// contiguous arrays, templated on the scalar S (double for the reference, float for the "naive" baseline of
// tests/tolerances.hpp). It materialises each segment's [S_b, S_b] probability matrix and is never optimised.
//   q, out, dout, dq [N_q, H, D]     k, v, dk, dv [N_k, H_kv, D]     lse [H, N_q]
//   segment b is queries [cu_seqlens[b], cu_seqlens[b+1]) and keys [cu_k[b], cu_k[b+1]) (cu_k = cu_seqlens_k, or
//   cu_seqlens when null); query head h reads kv head h / (H / H_kv); causal: query i of a segment sees keys
//   j ≤ i + S_k − S_q of the same segment (bottom-right aligned; j ≤ i when S_q = S_k).
// Test: tests/unit/test_attention.cpp (run: ./build/cpu/tests/test_attention).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace vlpar::reference {

struct AttentionProblem {
  const int32_t* cu_seqlens = nullptr;  // [num_seqs + 1], cu[0] = 0, non-decreasing, cu[num_seqs] = N_tok (queries)
  int num_seqs = 0;                     // B
  int H = 0;                            // query heads
  int H_kv = 0;                         // kv heads, divides H
  int D = 0;                            // head dim
  bool causal = true;
  double scale = 0;                     // softmax scale; 0 means 1/sqrt(D)
  const int32_t* cu_seqlens_k = nullptr;  // [num_seqs + 1] key segments; null: the same as the queries'

  int64_t num_tokens() const { return cu_seqlens[num_seqs]; }
  const int32_t* cu_k() const { return cu_seqlens_k != nullptr ? cu_seqlens_k : cu_seqlens; }
  int64_t num_keys() const { return cu_k()[num_seqs]; }
  template <class S>
  S resolved_scale() const { return scale != 0 ? S(scale) : S(1) / std::sqrt(S(D)); }
  /// Keys [0, visible_keys(i)) of segment b are visible to its query i: all S_k of them, or, causal, those up to
  /// the bottom-right aligned diagonal (key j visible iff j <= i + S_k − S_q); 0 or less: the row sees no key.
  int64_t visible_keys(int b, int64_t i) const {
    const int64_t len_q = cu_seqlens[b + 1] - cu_seqlens[b], len_k = cu_k()[b + 1] - cu_k()[b];
    return causal ? std::min(len_k, i + 1 + len_k - len_q) : len_k;
  }
};

/// Probabilities P [len_q, len_k] (row = query, masked entries 0) and lse [len_q] of head h in segment b; a row
/// with no visible key has P = 0 and lse = +inf.
template <class S>
void attention_probs(std::vector<S>& P, std::vector<S>& lse, const S* q, const S* k, const AttentionProblem& p,
                     int b, int h) {
  const int64_t t0 = p.cu_seqlens[b], len = p.cu_seqlens[b + 1] - t0;
  const int64_t k0 = p.cu_k()[b], len_k = p.cu_k()[b + 1] - k0;
  const int hk = h / (p.H / p.H_kv);
  const S scale = p.resolved_scale<S>();
  P.assign(size_t(len * len_k), S(0));
  lse.assign(size_t(len), S(0));
  for (int64_t i = 0; i < len; ++i) {
    const int64_t jend = p.visible_keys(b, i);
    if (jend <= 0) {
      lse[size_t(i)] = std::numeric_limits<S>::infinity();
      continue;
    }
    S m = -std::numeric_limits<S>::infinity();
    for (int64_t j = 0; j < jend; ++j) {
      S dot = 0;
      for (int d = 0; d < p.D; ++d) dot += q[((t0 + i) * p.H + h) * p.D + d] * k[((k0 + j) * p.H_kv + hk) * p.D + d];
      P[size_t(i * len_k + j)] = scale * dot;
      m = std::max(m, scale * dot);
    }
    S sum = 0;
    for (int64_t j = 0; j < jend; ++j) sum += std::exp(P[size_t(i * len_k + j)] - m);
    for (int64_t j = 0; j < jend; ++j) P[size_t(i * len_k + j)] = std::exp(P[size_t(i * len_k + j)] - m) / sum;
    lse[size_t(i)] = m + std::log(sum);
  }
}

/// out = softmax(scale · q kᵀ, masked) v per segment and head; lse [H, N_tok] = log Σ_j exp(scale · q·k_j).
template <class S>
void attention_forward(S* out, S* lse, const S* q, const S* k, const S* v, const AttentionProblem& p) {
  const int64_t N = p.num_tokens();
  const int hk_group = p.H / p.H_kv;
  std::vector<S> P, l;
  for (int b = 0; b < p.num_seqs; ++b) {
    const int64_t t0 = p.cu_seqlens[b], len = p.cu_seqlens[b + 1] - t0;
    const int64_t k0 = p.cu_k()[b], len_k = p.cu_k()[b + 1] - k0;
    for (int h = 0; h < p.H; ++h) {
      attention_probs(P, l, q, k, p, b, h);
      for (int64_t i = 0; i < len; ++i) {
        lse[h * N + t0 + i] = l[size_t(i)];
        for (int d = 0; d < p.D; ++d) {
          S acc = 0;
          for (int64_t j = 0; j < len_k; ++j)
            acc += P[size_t(i * len_k + j)] * v[((k0 + j) * p.H_kv + h / hk_group) * p.D + d];
          out[((t0 + i) * p.H + h) * p.D + d] = acc;
        }
      }
    }
  }
}

/// Gradients of L(out) given dout = ∂L/∂out, with dS = P ∘ (dP − rowsum(P ∘ dP)), dP = dout vᵀ:
///   dq = scale · dS k,  dk = scale · dSᵀ q (summed over the heads of a GQA group),  dv = Pᵀ dout (likewise).
/// dq, dk, dv are written (not accumulated); keys no query sees get zero gradients.
template <class S>
void attention_backward(S* dq, S* dk, S* dv, const S* dout, const S* q, const S* k, const S* v,
                        const AttentionProblem& p) {
  const int64_t N = p.num_tokens(), N_k = p.num_keys();
  const int hk_group = p.H / p.H_kv;
  const S scale = p.resolved_scale<S>();
  std::fill(dq, dq + N * p.H * p.D, S(0));
  std::fill(dk, dk + N_k * p.H_kv * p.D, S(0));
  std::fill(dv, dv + N_k * p.H_kv * p.D, S(0));
  std::vector<S> P, l, dS;
  for (int b = 0; b < p.num_seqs; ++b) {
    const int64_t t0 = p.cu_seqlens[b], len = p.cu_seqlens[b + 1] - t0;
    const int64_t k0 = p.cu_k()[b], len_k = p.cu_k()[b + 1] - k0;
    for (int h = 0; h < p.H; ++h) {
      const int hk = h / hk_group;
      auto qrow = [&](int64_t i) { return ((t0 + i) * p.H + h) * p.D; };
      auto krow = [&](int64_t j) { return ((k0 + j) * p.H_kv + hk) * p.D; };
      attention_probs(P, l, q, k, p, b, h);
      dS.assign(size_t(len * len_k), S(0));
      for (int64_t i = 0; i < len; ++i) {
        S rowsum = 0;  // Σ_j P_ij dP_ij, equal to dout_i · out_i
        for (int64_t j = 0; j < len_k; ++j) {
          S dp = 0;
          for (int d = 0; d < p.D; ++d) dp += dout[qrow(i) + d] * v[krow(j) + d];
          dS[size_t(i * len_k + j)] = dp;
          rowsum += P[size_t(i * len_k + j)] * dp;
        }
        for (int64_t j = 0; j < len_k; ++j)
          dS[size_t(i * len_k + j)] = P[size_t(i * len_k + j)] * (dS[size_t(i * len_k + j)] - rowsum);
      }
      for (int64_t i = 0; i < len; ++i)
        for (int64_t j = 0; j < len_k; ++j)
          for (int d = 0; d < p.D; ++d) {
            dq[qrow(i) + d] += scale * dS[size_t(i * len_k + j)] * k[krow(j) + d];
            dk[krow(j) + d] += scale * dS[size_t(i * len_k + j)] * q[qrow(i) + d];
            dv[krow(j) + d] += P[size_t(i * len_k + j)] * dout[qrow(i) + d];
          }
    }
  }
}

}  // namespace vlpar::reference
