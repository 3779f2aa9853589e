#pragma once
// Reference decoder stack (STYLE §9): the same model as vlpar::nn::DecoderModel, written as a plain composition of
// the include/vlpar/reference/ loops on full (unsharded) weights, templated on the scalar S: double is the fp64
// reference, float the "naive" baseline of tests/tolerances.hpp. Never optimised.
// Weights and gradients follow DecoderModel's parameter order (decoder.hpp), each a full row-major vector.
// Used by tests/unit/test_nn_stack.cpp and the equivalence tests under tests/mpi/.
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
  std::vector<int64_t> labels;      // [N_tok] shifted within each sample, ignore_index at each sample's end
  std::vector<int64_t> positions;   // [N_tok] 0.. within each sample
  std::vector<int32_t> cu_seqlens;  // [B + 1]
};

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
    b.positions.insert(b.positions.end(), p.positions.begin(), p.positions.end());
    for (size_t i = 1; i < p.cu_seqlens.size(); ++i) b.cu_seqlens.push_back(off + p.cu_seqlens[i]);
  }
  return b;
}

template <class S>
struct ReferenceResult {
  S loss = 0;
  std::vector<std::vector<S>> grads;  // DecoderModel param order, full shapes
};

/// Loss and every parameter gradient of the decoder stack on full weights `w` (DecoderModel order).
template <class S>
ReferenceResult<S> reference_decoder(const nn::TransformerConfig& cfg, const std::vector<std::vector<S>>& w,
                                     const HostBatch& batch) {
  namespace R = vlpar::reference;
  using Vec = std::vector<S>;
  const int64_t N = int64_t(batch.ids.size()), H = cfg.hidden, D = cfg.head_dim, I = cfg.intermediate,
                V = cfg.vocab, Hq = cfg.heads, Hkv = cfg.kv_heads;
  const int L = cfg.num_layers;
  const S eps = S(cfg.eps);
  auto lw = [&](int l, int k) -> const Vec& { return w[size_t(1 + 8 * l + k)]; };
  RotaryDesc rd;
  rd.kind = RotaryKind::k1D;
  rd.head_dim = int(D);
  rd.theta = cfg.rope_theta;
  R::AttentionProblem ap;
  ap.cu_seqlens = batch.cu_seqlens.data();
  ap.num_seqs = int(batch.cu_seqlens.size()) - 1;
  ap.H = int(Hq);
  ap.H_kv = int(Hkv);
  ap.D = int(D);
  ap.causal = true;

  struct Layer {
    Vec x, rstd1, h1, q, k, v, attn, lse, x1, rstd2, h2, gu, act;
  };
  std::vector<Layer> st(static_cast<size_t>(L));
  Vec x(size_t(N * H));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < H; ++c) x[size_t(n * H + c)] = w[0][size_t(batch.ids[size_t(n)] * H + c)];
  for (int l = 0; l < L; ++l) {
    Layer& s = st[size_t(l)];
    s.x = x;
    s.rstd1.resize(size_t(N));
    s.h1.resize(size_t(N * H));
    R::rmsnorm_forward(s.h1.data(), s.rstd1.data(), s.x.data(), lw(l, 0).data(), N, H, eps);
    Vec q(size_t(N * Hq * D)), k(size_t(N * Hkv * D));
    s.v.resize(size_t(N * Hkv * D));
    R::linear_forward(q.data(), s.h1.data(), lw(l, 1).data(), (const S*)nullptr, N, H, Hq * D);
    R::linear_forward(k.data(), s.h1.data(), lw(l, 2).data(), (const S*)nullptr, N, H, Hkv * D);
    R::linear_forward(s.v.data(), s.h1.data(), lw(l, 3).data(), (const S*)nullptr, N, H, Hkv * D);
    s.q.resize(q.size());
    s.k.resize(k.size());
    R::rotary_apply(s.q.data(), q.data(), batch.positions.data(), N, Hq, rd, +1);
    R::rotary_apply(s.k.data(), k.data(), batch.positions.data(), N, Hkv, rd, +1);
    s.attn.resize(size_t(N * Hq * D));
    s.lse.resize(size_t(Hq * N));
    R::attention_forward(s.attn.data(), s.lse.data(), s.q.data(), s.k.data(), s.v.data(), ap);
    Vec o(size_t(N * H));
    R::linear_forward(o.data(), s.attn.data(), lw(l, 4).data(), (const S*)nullptr, N, Hq * D, H);
    s.x1.resize(size_t(N * H));
    for (size_t i = 0; i < o.size(); ++i) s.x1[i] = s.x[i] + o[i];
    s.rstd2.resize(size_t(N));
    s.h2.resize(size_t(N * H));
    R::rmsnorm_forward(s.h2.data(), s.rstd2.data(), s.x1.data(), lw(l, 5).data(), N, H, eps);
    s.gu.resize(size_t(N * 2 * I));
    R::linear_forward(s.gu.data(), s.h2.data(), lw(l, 6).data(), (const S*)nullptr, N, H, 2 * I);
    s.act.resize(size_t(N * I));
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < I; ++i)
        s.act[size_t(n * I + i)] = R::swiglu(s.gu[size_t(n * 2 * I + i)], s.gu[size_t(n * 2 * I + I + i)]);
    Vec d(size_t(N * H));
    R::linear_forward(d.data(), s.act.data(), lw(l, 7).data(), (const S*)nullptr, N, I, H);
    for (size_t i = 0; i < d.size(); ++i) x[i] = s.x1[i] + d[i];
  }
  const size_t fn = size_t(1 + 8 * L);
  Vec rstdf(static_cast<size_t>(N)), hf(size_t(N * H)), logits(size_t(N * V)), dlogits(size_t(N * V));
  R::rmsnorm_forward(hf.data(), rstdf.data(), x.data(), w[fn].data(), N, H, eps);
  R::linear_forward(logits.data(), hf.data(), w[fn + 1].data(), (const S*)nullptr, N, H, V);
  ReferenceResult<S> r;
  r.loss = R::cross_entropy(dlogits.data(), logits.data(), batch.labels.data(), N, V, cfg.ignore_index, true);

  // Backward.
  r.grads.resize(w.size());
  for (size_t i = 0; i < w.size(); ++i) r.grads[i].assign(w[i].size(), S(0));
  auto g = [&](int l, int k) -> Vec& { return r.grads[size_t(1 + 8 * l + k)]; };
  Vec dhf(size_t(N * H)), dx(size_t(N * H));
  R::linear_backward(dhf.data(), r.grads[fn + 1].data(), (S*)nullptr, dlogits.data(), hf.data(), w[fn + 1].data(), N,
                     H, V);
  R::rmsnorm_backward(dx.data(), r.grads[fn].data(), dhf.data(), x.data(), w[fn].data(), rstdf.data(), N, H);
  for (int l = L - 1; l >= 0; --l) {
    Layer& s = st[size_t(l)];
    // MLP: dx flows through the residual and into down.
    Vec dact(size_t(N * I)), dgu(size_t(N * 2 * I)), dh2(size_t(N * H)), dx1(size_t(N * H));
    R::linear_backward(dact.data(), g(l, 7).data(), (S*)nullptr, dx.data(), s.act.data(), lw(l, 7).data(), N, I, H);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < I; ++i) {
        const S gate = s.gu[size_t(n * 2 * I + i)], up = s.gu[size_t(n * 2 * I + I + i)];
        const S dy = dact[size_t(n * I + i)];
        dgu[size_t(n * 2 * I + i)] = dy * up * R::silu_grad(gate);
        dgu[size_t(n * 2 * I + I + i)] = dy * R::silu(gate);
      }
    R::linear_backward(dh2.data(), g(l, 6).data(), (S*)nullptr, dgu.data(), s.h2.data(), lw(l, 6).data(), N, H, 2 * I);
    R::rmsnorm_backward(dx1.data(), g(l, 5).data(), dh2.data(), s.x1.data(), lw(l, 5).data(), s.rstd2.data(), N, H);
    for (size_t i = 0; i < dx1.size(); ++i) dx1[i] += dx[i];
    // Attention.
    Vec dattn(size_t(N * Hq * D)), dq(size_t(N * Hq * D)), dk(size_t(N * Hkv * D)), dv(size_t(N * Hkv * D));
    R::linear_backward(dattn.data(), g(l, 4).data(), (S*)nullptr, dx1.data(), s.attn.data(), lw(l, 4).data(), N,
                       Hq * D, H);
    R::attention_backward(dq.data(), dk.data(), dv.data(), dattn.data(), s.q.data(), s.k.data(), s.v.data(), ap);
    Vec dq0(dq.size()), dk0(dk.size());
    R::rotary_apply(dq0.data(), dq.data(), batch.positions.data(), N, Hq, rd, -1);
    R::rotary_apply(dk0.data(), dk.data(), batch.positions.data(), N, Hkv, rd, -1);
    Vec dh1(size_t(N * H)), tmp(size_t(N * H));
    R::linear_backward(dh1.data(), g(l, 1).data(), (S*)nullptr, dq0.data(), s.h1.data(), lw(l, 1).data(), N, H, Hq * D);
    R::linear_backward(tmp.data(), g(l, 2).data(), (S*)nullptr, dk0.data(), s.h1.data(), lw(l, 2).data(), N, H,
                       Hkv * D);
    for (size_t i = 0; i < tmp.size(); ++i) dh1[i] += tmp[i];
    R::linear_backward(tmp.data(), g(l, 3).data(), (S*)nullptr, dv.data(), s.h1.data(), lw(l, 3).data(), N, H,
                       Hkv * D);
    for (size_t i = 0; i < tmp.size(); ++i) dh1[i] += tmp[i];
    R::rmsnorm_backward(dx.data(), g(l, 0).data(), dh1.data(), s.x.data(), lw(l, 0).data(), s.rstd1.data(), N, H);
    for (size_t i = 0; i < dx.size(); ++i) dx[i] += dx1[i];
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

/// DecoderBatch views over a HostBatch (which must outlive them).
inline nn::DecoderBatch batch_views(HostBatch& b) {
  nn::DecoderBatch v;
  v.ids = TensorView(b.ids.data(), DType::kI64, {int64_t(b.ids.size())});
  v.labels = TensorView(b.labels.data(), DType::kI64, {int64_t(b.labels.size())});
  v.positions = TensorView(b.positions.data(), DType::kI64, {int64_t(b.positions.size())});
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
