#pragma once
// fp64 reference (STYLE §9): cross-entropy with ignore_index, MoE router (softmax, top-k, renormalise,
// backward) and the Switch aux loss, AdamW. Plain loops, templated on S.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

namespace vlpar::reference {

/// Returns Σ_valid (lse − z[y]) / norm, norm = #valid (mean, ≥ 1) or 1 (sum); fills dlogits (may be null)
/// with grad·(softmax − onehot)/norm and zero rows for ignored labels.
template <class S>
S cross_entropy(S* dlogits, const S* logits, const int64_t* labels, int64_t N, int64_t V, int64_t ignore, bool mean,
                S grad = S(1)) {
  int64_t valid = 0;
  for (int64_t n = 0; n < N; ++n) valid += labels[n] != ignore;
  const S norm = mean ? S(std::max<int64_t>(valid, 1)) : S(1);
  S loss = 0;
  for (int64_t n = 0; n < N; ++n) {
    const S* z = logits + n * V;
    S m = z[0];
    for (int64_t v = 1; v < V; ++v) m = std::max(m, z[v]);
    S s = 0;
    for (int64_t v = 0; v < V; ++v) s += std::exp(z[v] - m);
    const S lse = m + std::log(s);
    const bool ignored = labels[n] == ignore;
    if (!ignored) loss += lse - z[labels[n]];
    if (dlogits)
      for (int64_t v = 0; v < V; ++v)
        dlogits[n * V + v] = ignored ? S(0) : grad * (std::exp(z[v] - lse) - S(v == labels[n])) / norm;
  }
  return loss / norm;
}

/// Router forward for one row: probs [E], top-k ids (descending prob, ties to lower id) and renormalised weights.
/// With `bias` [E] (the aux-loss-free expert bias) the selection ranks p + bias; the weights stay p renormalised.
template <class S>
void router_row(S* probs, int32_t* idx, S* w, const S* logits, int64_t E, int64_t K, const S* bias = nullptr) {
  S m = logits[0];
  for (int64_t e = 1; e < E; ++e) m = std::max(m, logits[e]);
  S s = 0;
  for (int64_t e = 0; e < E; ++e) s += std::exp(logits[e] - m);
  for (int64_t e = 0; e < E; ++e) probs[e] = std::exp(logits[e] - m) / s;
  std::vector<int32_t> order(static_cast<size_t>(E));
  std::iota(order.begin(), order.end(), 0);
  const auto score = [&](int32_t e) { return bias ? probs[e] + bias[e] : probs[e]; };
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return score(a) > score(b); });
  S top = 0;
  for (int64_t k = 0; k < K; ++k) top += probs[order[size_t(k)]];
  for (int64_t k = 0; k < K; ++k) {
    idx[k] = order[size_t(k)];
    w[k] = probs[order[size_t(k)]] / top;
  }
}

/// Router backward for one row by the chain rule written out with explicit Jacobians (no shortcuts):
/// w_k = p_{i_k}/Σp_{i_j};  p = softmax(z).  dlogits[e] = Σ_k dw_k ∂w_k/∂z_e.
template <class S>
void router_row_backward(S* dlogits, const S* dw, const S* probs, const int32_t* idx, int64_t E, int64_t K) {
  S top = 0;
  for (int64_t k = 0; k < K; ++k) top += probs[idx[k]];
  std::vector<S> dp(static_cast<size_t>(E), S(0));
  for (int64_t k = 0; k < K; ++k)      // ∂w_k/∂p_{i_j} = δ_kj/top − p_{i_k}/top²
    for (int64_t j = 0; j < K; ++j)
      dp[size_t(idx[j])] += dw[k] * ((k == j ? S(1) / top : S(0)) - probs[idx[k]] / (top * top));
  for (int64_t e = 0; e < E; ++e) {    // ∂p_f/∂z_e = p_f (δ_fe − p_e)
    S acc = 0;
    for (int64_t f = 0; f < E; ++f) acc += dp[size_t(f)] * probs[f] * ((f == e ? S(1) : S(0)) - probs[e]);
    dlogits[e] = acc;
  }
}

/// aux = E · Σ_e (count_e/R)·(Σ_t p[t,e]/R) over R rows of probs [R, E] and ids [R, K].
template <class S>
S router_aux(const S* probs, const int32_t* idx, int64_t R, int64_t E, int64_t K) {
  std::vector<S> cnt(static_cast<size_t>(E), S(0)), ps(static_cast<size_t>(E), S(0));
  for (int64_t t = 0; t < R; ++t) {
    for (int64_t k = 0; k < K; ++k) cnt[size_t(idx[t * K + k])] += 1;
    for (int64_t e = 0; e < E; ++e) ps[size_t(e)] += probs[t * E + e];
  }
  S a = 0;
  for (int64_t e = 0; e < E; ++e) a += (cnt[size_t(e)] / S(R)) * (ps[size_t(e)] / S(R));
  return S(E) * a;
}

/// The sequence-level aux (router_seq_aux_loss): (1/B) Σ over the non-empty sequences b of cu [B + 1] of
/// E · Σ_e (count_{b,e} / (K·T_b)) · (Σ_{t∈b} p[t, e] / T_b).
template <class S>
S router_seq_aux(const S* probs, const int32_t* idx, const int32_t* cu, int64_t B, int64_t E, int64_t K) {
  S total = 0;
  int64_t seqs = 0;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t Tb = cu[b + 1] - cu[b];
    if (Tb == 0) continue;
    ++seqs;
    total += router_aux(probs + int64_t(cu[b]) * E, idx + int64_t(cu[b]) * K, Tb, E, K) / S(K);
  }
  return seqs > 0 ? total / S(seqs) : S(0);
}

/// One AdamW step on n elements (PyTorch torch.optim.AdamW semantics).
template <class S>
void adamw(S* p, S* m, S* v, const S* g, int64_t n, S lr, S b1, S b2, S eps, S wd, int64_t step) {
  const S bc1 = S(1) - std::pow(b1, S(step)), bc2 = S(1) - std::pow(b2, S(step));
  for (int64_t i = 0; i < n; ++i) {
    p[i] *= S(1) - lr * wd;
    m[i] = b1 * m[i] + (S(1) - b1) * g[i];
    v[i] = b2 * v[i] + (S(1) - b2) * g[i] * g[i];
    p[i] -= lr * (m[i] / bc1) / (std::sqrt(v[i] / bc2) + eps);
  }
}

}  // namespace vlpar::reference
