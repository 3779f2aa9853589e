#pragma once
// Reference decoder stack (STYLE §9): the same model as vlpar::nn::DecoderModel, written as a plain composition of
// the include/vlpar/reference/ loops on full (unsharded) weights, templated on the scalar S: double is the fp64
// reference, float the "naive" baseline of tests/tolerances.hpp. Never optimised.
// Weights and gradients follow DecoderModel's parameter order (decoder.hpp), each a full row-major vector.
// Covers the config switches: q/k norm (qk_norm), interleaved MRoPE (rope, positions [3, N_tok]) and the tied LM
// head (tie_word_embeddings: the head reads w[0] and adds its gradient into grads[0]).
// Used by tests/unit/test_nn_stack.cpp and the equivalence tests under tests/mpi/.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "vlpar/core/philox.hpp"
#include "vlpar/nn/config.hpp"
#include "vlpar/reference/activation.hpp"
#include "vlpar/reference/attention.hpp"
#include "vlpar/reference/linear.hpp"
#include "vlpar/reference/loss.hpp"
#include "vlpar/reference/norm.hpp"
#include "vlpar/reference/rotary.hpp"

namespace vlpar::test {

/// A packed batch on the host: B samples back to back.
struct HostBatch {
  std::vector<int64_t> ids;         // [N_tok]
  std::vector<int64_t> hf_labels;   // [N_tok] HF convention, unshifted: what the model takes (here = ids)
  std::vector<int64_t> labels;      // [N_tok] shifted within each sample, ignore_index at each sample's end (the
                                    // reference's targets: hf_labels shifted)
  std::vector<int64_t> positions;   // [N_tok] 0.. within each sample
  std::vector<int32_t> cu_seqlens;  // [B + 1]
  std::vector<int64_t> cu64;        // [B + 1] the same boundaries, the batch's host copy
  std::vector<int64_t> mrope;       // [3, N_tok] MRoPE rows T, H, W, or empty (1D: `positions`)
};

/// Gives every sample of b Qwen3-VL-style MRoPE positions (get_rope_index, spec §4.5): a text prefix of 2 tokens,
/// then (if the sample is long enough) one image of grid_h × grid_w merged tokens whose rows are T = base,
/// H = base + i, W = base + j, then text continuing from base + max(grid_h, grid_w). The three rows differ on the
/// image tokens and the text after it, so an axis mix-up changes the result.
inline void add_mrope_positions(HostBatch& b, int grid_h = 2, int grid_w = 3) {
  const int64_t N = int64_t(b.ids.size());
  b.mrope.assign(size_t(3 * N), 0);
  for (size_t s = 0; s + 1 < b.cu_seqlens.size(); ++s) {
    const int64_t t0 = b.cu_seqlens[s], len = b.cu_seqlens[s + 1] - t0, img = int64_t(grid_h) * grid_w;
    const bool has_image = len >= 2 + img + 1;
    int64_t next = 0;  // next text position
    for (int64_t i = 0; i < len; ++i) {
      int64_t p[3];
      if (has_image && i >= 2 && i < 2 + img) {
        const int64_t k = i - 2, base = 2;
        p[0] = base;
        p[1] = base + k / grid_w;
        p[2] = base + k % grid_w;
        next = base + std::max(grid_h, grid_w);
      } else {
        p[0] = p[1] = p[2] = next++;
      }
      for (int a = 0; a < 3; ++a) b.mrope[size_t(a * N + t0 + i)] = p[a];
    }
  }
}

/// Samples of the given lengths with ids from Philox(seed); labels shifted HF-style.
inline HostBatch make_host_batch(const std::vector<int>& lengths, int64_t vocab, uint64_t seed, int64_t ignore) {
  HostBatch b;
  b.cu_seqlens.push_back(0);
  for (int len : lengths) {
    const int64_t t0 = int64_t(b.ids.size());
    for (int i = 0; i < len; ++i) {
      b.ids.push_back(int64_t(philox_element(seed, 7, uint64_t(t0 + i)).v[0] % uint32_t(vocab)));
      b.positions.push_back(i);
    }
    for (int i = 0; i < len; ++i) b.labels.push_back(i + 1 < len ? b.ids[size_t(t0 + i + 1)] : ignore);
    b.hf_labels.insert(b.hf_labels.end(), b.ids.begin() + t0, b.ids.end());
    b.cu_seqlens.push_back(int32_t(b.ids.size()));
  }
  return b;
}

/// Concatenation of packed batches (what one process sees when it runs several data-parallel ranks' data).
inline HostBatch concat_batches(const std::vector<HostBatch>& parts) {
  HostBatch b;
  b.cu_seqlens.push_back(0);
  for (const HostBatch& p : parts) {
    const int32_t off = b.cu_seqlens.back();
    b.ids.insert(b.ids.end(), p.ids.begin(), p.ids.end());
    b.labels.insert(b.labels.end(), p.labels.begin(), p.labels.end());
    b.hf_labels.insert(b.hf_labels.end(), p.hf_labels.begin(), p.hf_labels.end());
    b.positions.insert(b.positions.end(), p.positions.begin(), p.positions.end());
    for (size_t i = 1; i < p.cu_seqlens.size(); ++i) b.cu_seqlens.push_back(off + p.cu_seqlens[i]);
  }
  // MRoPE rows are concatenated row by row ([3, N_a] ‖ [3, N_b] → [3, N_a + N_b]); all parts or none have them.
  if (!parts.empty() && !parts[0].mrope.empty()) {
    const size_t N = b.ids.size();
    b.mrope.assign(3 * N, 0);
    size_t off = 0;
    for (const HostBatch& p : parts) {
      const size_t n = p.ids.size();
      for (size_t a = 0; a < 3; ++a)
        for (size_t t = 0; t < n; ++t) b.mrope[a * N + off + t] = p.mrope[a * n + t];
      off += n;
    }
  }
  return b;
}

template <class S>
struct ReferenceResult {
  S loss = 0;
  std::vector<std::vector<S>> grads;  // DecoderModel param order, full shapes
};

/// The identity storage policy: every tensor kept in S.
struct KeepAll {
  template <class V>
  void operator()(V&) const {}
};

/// Rounds every element to the storage dtype T and back: what a model that stores its activations (and their
/// gradients) in T keeps at that point (the "naive" baseline of a bf16 model, tolerances.hpp).
template <class T>
struct RoundTo {
  template <class V>
  void operator()(V& v) const {
    for (auto& x : v) x = decltype(x + 0)(round_to<T>(float(x)));
  }
};

/// Loss and every parameter gradient of the decoder stack on full weights `w` (DecoderModel order). `store` is
/// applied to every tensor DecoderModel stores in its activation dtype (forward activations and their gradients,
/// each where the model writes it); statistics, logits, their gradient and parameter gradients stay in S.
template <class S, class Store = KeepAll>
ReferenceResult<S> reference_decoder(const nn::TransformerConfig& cfg, const std::vector<std::vector<S>>& w,
                                     const HostBatch& batch, Store store = {}) {
  namespace R = vlpar::reference;
  using Vec = std::vector<S>;
  const int64_t N = int64_t(batch.ids.size()), H = cfg.hidden, D = cfg.head_dim, I = cfg.intermediate,
                V = cfg.vocab, Hq = cfg.heads, Hkv = cfg.kv_heads;
  const int L = cfg.num_layers;
  const S eps = S(cfg.eps);
  // Per-layer parameter offsets (decoder.hpp): norm, q, k, v, [q_norm, k_norm,] o, post norm, gate_up, down.
  const bool qkn = cfg.qk_norm;
  const int P = qkn ? 10 : 8, kQn = 4, kKn = 5, kO = qkn ? 6 : 4, kPost = kO + 1, kGu = kO + 2, kDown = kO + 3;
  auto lw = [&](int l, int k) -> const Vec& { return w[size_t(1 + P * l + k)]; };
  // Rotary: MRoPE over the [3, N] rows when the batch has them (cfg.rope must be MRoPE then), else 1D.
  RotaryDesc rd;
  rd.kind = RotaryKind::k1D;
  rd.head_dim = int(D);
  rd.theta = cfg.rope_theta;
  const int64_t* pos = batch.positions.data();
  if (!batch.mrope.empty()) {
    rd.kind = RotaryKind::kMRoPE;
    for (int a = 0; a < 3; ++a) rd.mrope_section[a] = cfg.mrope_section[size_t(a)];
    pos = batch.mrope.data();
  }
  R::AttentionProblem ap;
  ap.cu_seqlens = batch.cu_seqlens.data();
  ap.num_seqs = int(batch.cu_seqlens.size()) - 1;
  ap.H = int(Hq);
  ap.H_kv = int(Hkv);
  ap.D = int(D);
  ap.causal = true;

  struct Layer {
    Vec x, rstd1, h1, q_raw, k_raw, q_rstd, k_rstd, q, k, v, attn, lse, x1, rstd2, h2, gu, act;
  };
  std::vector<Layer> st(static_cast<size_t>(L));
  Vec x(size_t(N * H));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < H; ++c) x[size_t(n * H + c)] = w[0][size_t(batch.ids[size_t(n)] * H + c)];
  store(x);
  for (int l = 0; l < L; ++l) {
    Layer& s = st[size_t(l)];
    s.x = x;
    s.rstd1.resize(size_t(N));
    s.h1.resize(size_t(N * H));
    R::rmsnorm_forward(s.h1.data(), s.rstd1.data(), s.x.data(), lw(l, 0).data(), N, H, eps);
    store(s.h1);
    s.q_raw.resize(size_t(N * Hq * D));
    s.k_raw.resize(size_t(N * Hkv * D));
    s.v.resize(size_t(N * Hkv * D));
    R::linear_forward(s.q_raw.data(), s.h1.data(), lw(l, 1).data(), (const S*)nullptr, N, H, Hq * D);
    R::linear_forward(s.k_raw.data(), s.h1.data(), lw(l, 2).data(), (const S*)nullptr, N, H, Hkv * D);
    R::linear_forward(s.v.data(), s.h1.data(), lw(l, 3).data(), (const S*)nullptr, N, H, Hkv * D);
    store(s.q_raw);
    store(s.k_raw);
    store(s.v);
    // q/k norm: RMSNorm over D of each (token, head) row, one [D] weight for all q heads and one for all k heads.
    Vec qn = s.q_raw, kn = s.k_raw;
    if (qkn) {
      s.q_rstd.resize(size_t(N * Hq));
      s.k_rstd.resize(size_t(N * Hkv));
      R::rmsnorm_forward(qn.data(), s.q_rstd.data(), s.q_raw.data(), lw(l, kQn).data(), N * Hq, D, eps);
      R::rmsnorm_forward(kn.data(), s.k_rstd.data(), s.k_raw.data(), lw(l, kKn).data(), N * Hkv, D, eps);
      store(qn);
      store(kn);
    }
    s.q.resize(qn.size());
    s.k.resize(kn.size());
    R::rotary_apply(s.q.data(), qn.data(), pos, N, Hq, rd, +1);
    R::rotary_apply(s.k.data(), kn.data(), pos, N, Hkv, rd, +1);
    store(s.q);
    store(s.k);
    s.attn.resize(size_t(N * Hq * D));
    s.lse.resize(size_t(Hq * N));
    R::attention_forward(s.attn.data(), s.lse.data(), s.q.data(), s.k.data(), s.v.data(), ap);
    store(s.attn);
    Vec o(size_t(N * H));
    R::linear_forward(o.data(), s.attn.data(), lw(l, kO).data(), (const S*)nullptr, N, Hq * D, H);
    store(o);
    s.x1.resize(size_t(N * H));
    for (size_t i = 0; i < o.size(); ++i) s.x1[i] = s.x[i] + o[i];
    store(s.x1);
    s.rstd2.resize(size_t(N));
    s.h2.resize(size_t(N * H));
    R::rmsnorm_forward(s.h2.data(), s.rstd2.data(), s.x1.data(), lw(l, kPost).data(), N, H, eps);
    store(s.h2);
    s.gu.resize(size_t(N * 2 * I));
    R::linear_forward(s.gu.data(), s.h2.data(), lw(l, kGu).data(), (const S*)nullptr, N, H, 2 * I);
    store(s.gu);
    s.act.resize(size_t(N * I));
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < I; ++i)
        s.act[size_t(n * I + i)] = R::swiglu(s.gu[size_t(n * 2 * I + i)], s.gu[size_t(n * 2 * I + I + i)]);
    store(s.act);
    Vec d(size_t(N * H));
    R::linear_forward(d.data(), s.act.data(), lw(l, kDown).data(), (const S*)nullptr, N, I, H);
    store(d);
    for (size_t i = 0; i < d.size(); ++i) x[i] = s.x1[i] + d[i];
    store(x);
  }
  const size_t fn = size_t(1 + P * L), head = cfg.tie_word_embeddings ? 0 : fn + 1;
  Vec rstdf(static_cast<size_t>(N)), hf(size_t(N * H)), logits(size_t(N * V)), dlogits(size_t(N * V));
  R::rmsnorm_forward(hf.data(), rstdf.data(), x.data(), w[fn].data(), N, H, eps);
  store(hf);
  R::linear_forward(logits.data(), hf.data(), w[head].data(), (const S*)nullptr, N, H, V);
  ReferenceResult<S> r;
  r.loss = R::cross_entropy(dlogits.data(), logits.data(), batch.labels.data(), N, V, cfg.ignore_index, true);

  // Backward.
  r.grads.resize(w.size());
  for (size_t i = 0; i < w.size(); ++i) r.grads[i].assign(w[i].size(), S(0));
  auto g = [&](int l, int k) -> Vec& { return r.grads[size_t(1 + P * l + k)]; };
  Vec dhf(size_t(N * H)), dx(size_t(N * H));
  // Tied: the head's weight gradient lands in grads[0], where the embedding's is added at the end.
  R::linear_backward(dhf.data(), r.grads[head].data(), (S*)nullptr, dlogits.data(), hf.data(), w[head].data(), N,
                     H, V);
  store(dhf);
  R::rmsnorm_backward(dx.data(), r.grads[fn].data(), dhf.data(), x.data(), w[fn].data(), rstdf.data(), N, H);
  store(dx);
  for (int l = L - 1; l >= 0; --l) {
    Layer& s = st[size_t(l)];
    // MLP: dx flows through the residual and into down.
    Vec dact(size_t(N * I)), dgu(size_t(N * 2 * I)), dh2(size_t(N * H)), dx1(size_t(N * H));
    R::linear_backward(dact.data(), g(l, kDown).data(), (S*)nullptr, dx.data(), s.act.data(), lw(l, kDown).data(), N,
                       I, H);
    store(dact);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < I; ++i) {
        const S gate = s.gu[size_t(n * 2 * I + i)], up = s.gu[size_t(n * 2 * I + I + i)];
        const S dy = dact[size_t(n * I + i)];
        dgu[size_t(n * 2 * I + i)] = dy * up * R::silu_grad(gate);
        dgu[size_t(n * 2 * I + I + i)] = dy * R::silu(gate);
      }
    store(dgu);
    R::linear_backward(dh2.data(), g(l, kGu).data(), (S*)nullptr, dgu.data(), s.h2.data(), lw(l, kGu).data(), N, H,
                       2 * I);
    store(dh2);
    R::rmsnorm_backward(dx1.data(), g(l, kPost).data(), dh2.data(), s.x1.data(), lw(l, kPost).data(),
                        s.rstd2.data(), N, H);
    store(dx1);
    for (size_t i = 0; i < dx1.size(); ++i) dx1[i] += dx[i];
    store(dx1);
    // Attention.
    Vec dattn(size_t(N * Hq * D)), dq(size_t(N * Hq * D)), dk(size_t(N * Hkv * D)), dv(size_t(N * Hkv * D));
    R::linear_backward(dattn.data(), g(l, kO).data(), (S*)nullptr, dx1.data(), s.attn.data(), lw(l, kO).data(), N,
                       Hq * D, H);
    store(dattn);
    R::attention_backward(dq.data(), dk.data(), dv.data(), dattn.data(), s.q.data(), s.k.data(), s.v.data(), ap);
    store(dq);
    store(dk);
    store(dv);
    Vec dq0(dq.size()), dk0(dk.size());
    R::rotary_apply(dq0.data(), dq.data(), pos, N, Hq, rd, -1);
    R::rotary_apply(dk0.data(), dk.data(), pos, N, Hkv, rd, -1);
    store(dq0);
    store(dk0);
    if (qkn) {
      // The [D] weight gradients sum over every (token, head) row.
      Vec dq_raw(dq0.size()), dk_raw(dk0.size());
      R::rmsnorm_backward(dq_raw.data(), g(l, kQn).data(), dq0.data(), s.q_raw.data(), lw(l, kQn).data(),
                          s.q_rstd.data(), N * Hq, D);
      R::rmsnorm_backward(dk_raw.data(), g(l, kKn).data(), dk0.data(), s.k_raw.data(), lw(l, kKn).data(),
                          s.k_rstd.data(), N * Hkv, D);
      store(dq_raw);
      store(dk_raw);
      dq0 = dq_raw;
      dk0 = dk_raw;
    }
    // dh1 = dv·Wv + dk·Wk + dq·Wq in the model's order (each partial sum stored: a rounding in a bf16 model).
    Vec dh1(size_t(N * H)), tmp(size_t(N * H));
    R::linear_backward(dh1.data(), g(l, 3).data(), (S*)nullptr, dv.data(), s.h1.data(), lw(l, 3).data(), N, H,
                       Hkv * D);
    store(dh1);
    R::linear_backward(tmp.data(), g(l, 2).data(), (S*)nullptr, dk0.data(), s.h1.data(), lw(l, 2).data(), N, H,
                       Hkv * D);
    for (size_t i = 0; i < tmp.size(); ++i) dh1[i] += tmp[i];
    store(dh1);
    R::linear_backward(tmp.data(), g(l, 1).data(), (S*)nullptr, dq0.data(), s.h1.data(), lw(l, 1).data(), N, H,
                       Hq * D);
    for (size_t i = 0; i < tmp.size(); ++i) dh1[i] += tmp[i];
    store(dh1);
    R::rmsnorm_backward(dx.data(), g(l, 0).data(), dh1.data(), s.x.data(), lw(l, 0).data(), s.rstd1.data(), N, H);
    store(dx);
    for (size_t i = 0; i < dx.size(); ++i) dx[i] += dx1[i];
    store(dx);
  }
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < H; ++c) r.grads[0][size_t(batch.ids[size_t(n)] * H + c)] += dx[size_t(n * H + c)];
  return r;
}

}  // namespace vlpar::test

// ---- helpers shared by the decoder-stack tests ---------------------------------------------------------------
#include "test_util.hpp"
#include "vlpar/nn/decoder.hpp"

namespace vlpar::test {

/// The tiny config every decoder-stack test uses (seconds under mpirun; STYLE "tiny model config").
inline nn::TransformerConfig tiny_decoder_config() {
  nn::TransformerConfig c;
  c.hidden = 32;
  c.heads = 4;
  c.kv_heads = 2;
  c.head_dim = 8;
  c.intermediate = 48;
  c.vocab = 64;
  c.num_layers = 2;
  c.init_std = 0.1f;
  return c;
}

/// tiny_decoder_config with Qwen3-VL's text switches: q/k norm, interleaved MRoPE and (optionally) the tied head.
/// D = 16 gives 8 rotary frequencies; sections {4, 3, 1} put H on j = 1, 4, 7, W on j = 2 and T on j = 0, 3, 5, 6,
/// so H and W have different sections and a row or section mix-up changes the result. theta 10⁴ keeps every
/// frequency's angle well away from zero at the test's positions.
inline nn::TransformerConfig tiny_qwen3_config(bool tied = true) {
  nn::TransformerConfig c = tiny_decoder_config();
  c.head_dim = 16;
  c.qk_norm = true;
  c.rope = nn::RopeKind::kMRoPE;
  c.mrope_section = {4, 3, 1};
  c.tie_word_embeddings = tied;
  return c;
}

/// The packed batch (vlpar/core/batch.hpp) over a HostBatch (which must outlive it).
inline Batch batch_views(HostBatch& b) {
  Batch v;
  b.cu64.assign(b.cu_seqlens.begin(), b.cu_seqlens.end());
  v.host_cu_seqlens = b.cu64;
  v.input_ids = TensorView(b.ids.data(), DType::kI64, {int64_t(b.ids.size())});
  v.labels = TensorView(b.hf_labels.data(), DType::kI64, {int64_t(b.hf_labels.size())});
  const int64_t N = int64_t(b.ids.size());
  v.positions = b.mrope.empty() ? TensorView(b.positions.data(), DType::kI64, {int64_t(b.positions.size())})
                                : TensorView(b.mrope.data(), DType::kI64, {3, N});
  v.cu_seqlens = TensorView(b.cu_seqlens.data(), DType::kI32, {int64_t(b.cu_seqlens.size())});
  return v;
}

template <class S>
std::vector<std::vector<S>> views_as(const std::vector<TensorView>& views) {
  std::vector<std::vector<S>> out;
  for (const TensorView& v : views) out.push_back(cast_vec<S>(to_f64(v)));
  return out;
}

/// kParallelEquivalence (tolerances.hpp): max|par − single| ≤ 3·max|single − ref64| + 2·u32·max|ref64|.
inline ::testing::AssertionResult matches_single_process(const std::string& what, const std::vector<double>& par,
                                                         const std::vector<double>& single,
                                                         const std::vector<double>& ref64, const Shape& shape) {
  const Tolerance tol = tolerance(TolOp::kParallelEquivalence, DType::kF32);
  const double ref_max = max_abs(ref64);
  if (ref_max == 0.0) return ::testing::AssertionFailure() << what << ": reference is all zero (vacuous test)";
  const double naive_err = max_abs_diff(single, ref64);
  const double bound = tol.naive_factor * naive_err + tol.atol_ulps * unit_roundoff(DType::kF32) * ref_max;
  auto r = all_close(what, par, single, shape, bound);
  if (!r) r << "\n  (bound " << bound << " = " << tol.naive_factor << "·max|single − ref64| " << naive_err << " + "
            << tol.atol_ulps << "·u32·max|ref64| " << ref_max << ")";
  return r;
}

}  // namespace vlpar::test
