#pragma once
// fp64 reference (STYLE §9): the pre-norm sparse MoE block of Qwen3-VL-MoE (spec qwen3vl.md §5) and its
// Switch load-balancing loss, forward and backward, plain per-token loops templated on S (double reference,
// float naive baseline). Layout as in nn/moe_block.hpp (HF v4.57): router [E, H], gate_up [E, H, 2I] (gate =
// [..., :I], up = [..., I:]), down [E, I, H], applied as x @ W. Contiguous row-major arrays throughout.
//   out[t] = x[t] + Σ_{selected e, ascending} w[t,k] · (silu(h·G_e) ⊙ (h·U_e)) · D_e,  h = RMSNorm(x)
// Nothing is permuted or grouped: each (token, slot) is computed on its own, which is what the kernel's
// dispatch/grouped GEMM/combine must reproduce. Test: tests/unit/test_moe.cpp.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "vlpar/reference/activation.hpp"
#include "vlpar/reference/loss.hpp"
#include "vlpar/reference/norm.hpp"

namespace vlpar::reference {

struct MoeDims {
  int64_t tokens = 0;        // N
  int64_t hidden = 0;        // H
  int64_t experts = 0;       // E
  int64_t top_k = 0;         // K
  int64_t intermediate = 0;  // I
  int64_t capacity = 0;      // > 0: each expert keeps its first `capacity` (token, slot) assignments in token order;
                             // the others are dropped (no output, no gradient through them; moe_capacity_plan)
};

template <class S>
struct MoeParams {
  const S* norm = nullptr;     // [H]
  const S* router = nullptr;   // [E, H]
  const S* gate_up = nullptr;  // [E, H, 2I]
  const S* down = nullptr;     // [E, I, H]
};

template <class S>
struct MoeGrads {  // accumulated (+=), same shapes as MoeParams
  S* norm = nullptr;
  S* router = nullptr;
  S* gate_up = nullptr;
  S* down = nullptr;
};

/// What the reference backward reads back from its forward.
template <class S>
struct MoeCache {
  std::vector<S> rstd;         // [N]
  std::vector<S> h;            // [N, H]
  std::vector<S> probs;        // [N, E]
  std::vector<S> lse;          // [N]     logsumexp of the router logits (the z-loss)
  std::vector<S> weights;      // [N, K]
  std::vector<int32_t> idx;    // [N, K]
  std::vector<uint8_t> kept;   // [N, K]  1 unless dropped by the capacity
  std::vector<S> gu;           // [N, K, 2I]  per (token, slot)
  std::vector<S> act;          // [N, K, I]
};

/// The load-balancing statistics over the rows of every MoE layer seen so far (spec §5).
template <class S>
struct MoeAux {
  std::vector<S> counts;    // [E] (row, slot) assignments per expert
  std::vector<S> prob_sum;  // [E] Σ_rows p[:, e]
  int64_t rows = 0;         // R
  S z_sum = 0;              // Σ_layers mean_t lse_t²: the router z-loss (ST-MoE; Megatron's per-layer sum)
  S seq_sum = 0;            // Σ_layers of the sequence-level aux over the samples of cu (router_seq_aux)
  std::vector<int32_t> cu;  // [B + 1] the samples' bounds; empty: no sequence-level aux

  void add(const MoeCache<S>& c, const MoeDims& d) {
    if (counts.empty()) {
      counts.assign(size_t(d.experts), S(0));
      prob_sum.assign(size_t(d.experts), S(0));
    }
    for (int64_t t = 0; t < d.tokens; ++t) {
      for (int64_t k = 0; k < d.top_k; ++k) counts[size_t(c.idx[size_t(t * d.top_k + k)])] += S(1);
      for (int64_t e = 0; e < d.experts; ++e) prob_sum[size_t(e)] += c.probs[size_t(t * d.experts + e)];
    }
    rows += d.tokens;
    S z = 0;
    for (int64_t t = 0; t < d.tokens; ++t) z += c.lse[size_t(t)] * c.lse[size_t(t)];
    if (d.tokens > 0) z_sum += z / S(d.tokens);
    if (!cu.empty())
      seq_sum += router_seq_aux(c.probs.data(), c.idx.data(), cu.data(), int64_t(cu.size()) - 1, d.experts, d.top_k);
  }
  /// aux = E · Σ_e (counts_e / R) · (prob_sum_e / R)
  S value() const {
    S a = 0;
    for (size_t e = 0; e < counts.size(); ++e) a += (counts[e] / S(rows)) * (prob_sum[e] / S(rows));
    return S(counts.size()) * a;
  }
};

/// @brief out [N, H] = x + MoE(RMSNorm(x)); fills cache.
template <class S>
void moe_forward(S* out, MoeCache<S>& c, const S* x, const MoeParams<S>& p, const MoeDims& d, S eps) {
  const int64_t N = d.tokens, H = d.hidden, E = d.experts, K = d.top_k, I = d.intermediate;
  c.rstd.assign(size_t(N), S(0));
  c.h.assign(size_t(N * H), S(0));
  c.probs.assign(size_t(N * E), S(0));
  c.lse.assign(size_t(N), S(0));
  c.weights.assign(size_t(N * K), S(0));
  c.idx.assign(size_t(N * K), 0);
  c.kept.assign(size_t(N * K), 1);
  std::vector<int64_t> taken(static_cast<size_t>(E), 0);  // assignments each expert kept so far
  c.gu.assign(size_t(N * K * 2 * I), S(0));
  c.act.assign(size_t(N * K * I), S(0));
  rmsnorm_forward(c.h.data(), c.rstd.data(), x, p.norm, N, H, eps);
  std::vector<S> logits(static_cast<size_t>(E));
  for (int64_t t = 0; t < N; ++t) {
    const S* h = &c.h[size_t(t * H)];
    for (int64_t e = 0; e < E; ++e) {
      S acc = 0;
      for (int64_t i = 0; i < H; ++i) acc += h[i] * p.router[e * H + i];
      logits[size_t(e)] = acc;
    }
    router_row(&c.probs[size_t(t * E)], &c.idx[size_t(t * K)], &c.weights[size_t(t * K)], logits.data(), E, K);
    for (int64_t k = 0; k < K; ++k)  // a token's K experts are distinct: its slots' order does not matter
      c.kept[size_t(t * K + k)] = d.capacity <= 0 || taken[size_t(c.idx[size_t(t * K + k)])]++ < d.capacity;
    S m = logits[0], s = 0;
    for (int64_t e = 1; e < E; ++e) m = std::max(m, logits[size_t(e)]);
    for (int64_t e = 0; e < E; ++e) s += std::exp(logits[size_t(e)] - m);
    c.lse[size_t(t)] = m + std::log(s);
    std::vector<S> o(static_cast<size_t>(H), S(0));
    for (int64_t e = 0; e < E; ++e)  // ascending expert id: HF's train-mode accumulation order
      for (int64_t k = 0; k < K; ++k) {
        if (c.idx[size_t(t * K + k)] != e || !c.kept[size_t(t * K + k)]) continue;
        S* gu = &c.gu[size_t((t * K + k) * 2 * I)];
        S* act = &c.act[size_t((t * K + k) * I)];
        for (int64_t j = 0; j < 2 * I; ++j) {
          S acc = 0;
          for (int64_t i = 0; i < H; ++i) acc += h[i] * p.gate_up[(e * H + i) * 2 * I + j];
          gu[j] = acc;
        }
        for (int64_t j = 0; j < I; ++j) act[j] = swiglu(gu[j], gu[I + j]);
        const S w = c.weights[size_t(t * K + k)];
        for (int64_t i = 0; i < H; ++i) {
          S acc = 0;
          for (int64_t j = 0; j < I; ++j) acc += act[j] * p.down[(e * I + j) * H + i];
          o[size_t(i)] += w * acc;
        }
      }
    for (int64_t i = 0; i < H; ++i) out[t * H + i] = x[t * H + i] + o[size_t(i)];
  }
}

/// ∂(sequence-level aux)/∂p[t, f] for every token t of the samples of cu: E · c_{b,f} / (K · T_b² · B), b ∋ t
/// (counts constant) [N, E].
template <class S>
std::vector<S> seq_aux_dprobs(const MoeCache<S>& c, const MoeDims& d, const std::vector<int32_t>& cu) {
  const int64_t E = d.experts, K = d.top_k, B = int64_t(cu.size()) - 1;
  int64_t seqs = 0;
  for (int64_t b = 0; b < B; ++b) seqs += cu[size_t(b) + 1] > cu[size_t(b)];
  std::vector<S> dp(static_cast<size_t>(d.tokens * E), S(0));
  for (int64_t b = 0; b < B; ++b) {
    const int64_t t0 = cu[size_t(b)], t1 = cu[size_t(b) + 1], Tb = t1 - t0;
    std::vector<S> cnt(static_cast<size_t>(E), S(0));
    for (int64_t i = t0 * K; i < t1 * K; ++i) cnt[size_t(c.idx[size_t(i)])] += S(1);
    for (int64_t t = t0; t < t1; ++t)
      for (int64_t f = 0; f < E; ++f)
        dp[size_t(t * E + f)] = S(E) * cnt[size_t(f)] / (S(K) * S(Tb) * S(Tb) * S(seqs));
  }
  return dp;
}

/// @brief dx [N, H] written, grads accumulated, for the loss L(out) + grad_aux · aux + grad_z · z + grad_seq · seq
/// where dout = ∂L/∂out, aux (its statistics over all layers, this one included) is the load-balancing loss, z the
/// router z-loss (this layer's term: mean_t lse_t², so ∂/∂logits[t, e] = 2 · lse_t · p[t, e] / N) and seq this
/// layer's sequence-level aux over aux->cu.
template <class S>
void moe_backward(S* dx, const MoeGrads<S>& g, const S* dout, const MoeCache<S>& c, const S* x, const MoeParams<S>& p,
                  const MoeDims& d, const MoeAux<S>* aux, S grad_aux, S grad_z = S(0), S grad_seq = S(0)) {
  const int64_t N = d.tokens, H = d.hidden, E = d.experts, K = d.top_k, I = d.intermediate;
  std::vector<S> dh(static_cast<size_t>(N * H), S(0)), dlogits(static_cast<size_t>(N * E), S(0));
  const std::vector<S> seq_dp = grad_seq != S(0) ? seq_aux_dprobs(c, d, aux->cu) : std::vector<S>{};
  std::vector<S> dw(static_cast<size_t>(K)), dact(static_cast<size_t>(I)), dgu(static_cast<size_t>(2 * I));
  for (int64_t t = 0; t < N; ++t) {
    const S* h = &c.h[size_t(t * H)];
    const S* go = dout + t * H;
    for (int64_t k = 0; k < K; ++k) {
      const int64_t e = c.idx[size_t(t * K + k)];
      const S w = c.weights[size_t(t * K + k)];
      dw[size_t(k)] = 0;  // stays 0 when dropped: its output is not in the sum, nothing flows back through it
      if (!c.kept[size_t(t * K + k)]) continue;
      const S* gu = &c.gu[size_t((t * K + k) * 2 * I)];
      const S* act = &c.act[size_t((t * K + k) * I)];
      // y = act · D_e;  ∂L/∂w = <dout, y>;  ∂L/∂act = w · dout · D_eᵀ;  ∂L/∂D_e += act ⊗ (w · dout)
      S dwk = 0;
      for (int64_t i = 0; i < H; ++i) {
        S y = 0;
        for (int64_t j = 0; j < I; ++j) y += act[j] * p.down[(e * I + j) * H + i];
        dwk += go[i] * y;
      }
      dw[size_t(k)] = dwk;
      for (int64_t j = 0; j < I; ++j) {
        S acc = 0;
        for (int64_t i = 0; i < H; ++i) acc += go[i] * p.down[(e * I + j) * H + i];
        dact[size_t(j)] = w * acc;
        for (int64_t i = 0; i < H; ++i) g.down[(e * I + j) * H + i] += act[j] * w * go[i];
      }
      // act = silu(gate) · up
      for (int64_t j = 0; j < I; ++j) {
        dgu[size_t(j)] = dact[size_t(j)] * gu[I + j] * silu_grad(gu[j]);
        dgu[size_t(I + j)] = dact[size_t(j)] * silu(gu[j]);
      }
      // gu = h · GU_e
      for (int64_t i = 0; i < H; ++i) {
        S acc = 0;
        for (int64_t j = 0; j < 2 * I; ++j) {
          acc += dgu[size_t(j)] * p.gate_up[(e * H + i) * 2 * I + j];
          g.gate_up[(e * H + i) * 2 * I + j] += h[i] * dgu[size_t(j)];
        }
        dh[size_t(t * H + i)] += acc;
      }
    }
    router_row_backward(&dlogits[size_t(t * E)], dw.data(), &c.probs[size_t(t * E)], &c.idx[size_t(t * K)], E, K);
    if (aux && grad_aux != S(0)) {  // ∂aux/∂p[t, f] = E · f_f / R (counts are constants), through the softmax
      const S R = S(aux->rows);
      const S* pr = &c.probs[size_t(t * E)];
      for (int64_t e = 0; e < E; ++e) {
        S acc = 0;
        for (int64_t f = 0; f < E; ++f) {
          const S dp = grad_aux * S(E) * (aux->counts[size_t(f)] / R) / R;
          acc += dp * pr[f] * ((f == e ? S(1) : S(0)) - pr[e]);
        }
        dlogits[size_t(t * E + e)] += acc;
      }
    }
    if (grad_seq != S(0)) {  // through the softmax, as the aux term
      const S* pr = &c.probs[size_t(t * E)];
      for (int64_t e = 0; e < E; ++e) {
        S acc = 0;
        for (int64_t f = 0; f < E; ++f)
          acc += grad_seq * seq_dp[size_t(t * E + f)] * pr[f] * ((f == e ? S(1) : S(0)) - pr[e]);
        dlogits[size_t(t * E + e)] += acc;
      }
    }
    if (grad_z != S(0))
      for (int64_t e = 0; e < E; ++e)
        dlogits[size_t(t * E + e)] += grad_z * S(2) * c.lse[size_t(t)] * c.probs[size_t(t * E + e)] / S(N);
    // logits = h · routerᵀ
    for (int64_t e = 0; e < E; ++e) {
      const S gl = dlogits[size_t(t * E + e)];
      for (int64_t i = 0; i < H; ++i) {
        g.router[e * H + i] += gl * h[i];
        dh[size_t(t * H + i)] += gl * p.router[e * H + i];
      }
    }
  }
  rmsnorm_backward(dx, g.norm, dh.data(), x, p.norm, c.rstd.data(), N, H);
  for (int64_t i = 0; i < N * H; ++i) dx[i] += dout[i];
}

}  // namespace vlpar::reference
