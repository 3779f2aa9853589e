#pragma once
// fp64 reference (STYLE §9) of the Qwen3-VL vision encoder (spec qwen3vl.md §3): vision block, patch mergers and
// the whole encoder, forward and backward, as a plain composition of the reference loops in this folder,
// templated on S (double = the fp64 reference, float = the "naive" baseline of tests/tolerances.hpp).
// It is the spec in code: segments, rotary coordinates and the patch order are rebuilt here the way HF writes
// them (repeat_interleave, rot_pos_emb's block/intra loops), independently of nn/vision_config.cpp.
// Parameters are one flat list of row-major tensors in vision_encoder_params() order (HF names and shapes):
//   0 patch_embed.proj.weight [Hv, C·Tp·P·P], 1 patch_embed.proj.bias, 2 pos_embed.weight [G², Hv],
//   then 12 per block (kVisionBlockParamNames), 6 for the merger, 6 per deepstack merger (kMergerParamNames).
// Tests: tests/unit/test_vision_block.cpp, tests/unit/test_vision_encoder.cpp.
#include <cstdint>
#include <string>
#include <vector>

#include "vlpar/core/tensor.hpp"
#include "vlpar/nn/vision_config.hpp"
#include "vlpar/reference/activation.hpp"
#include "vlpar/reference/attention.hpp"
#include "vlpar/reference/linear.hpp"
#include "vlpar/reference/norm.hpp"
#include "vlpar/reference/pos_embed.hpp"
#include "vlpar/reference/rotary.hpp"

namespace vlpar::reference {

inline constexpr int kVisionBlockParams = 12;
inline constexpr int kMergerParams = 6;
inline constexpr const char* kVisionBlockParamNames[kVisionBlockParams] = {
    "norm1.weight",           "norm1.bias",           "attn.qkv.weight",        "attn.qkv.bias",
    "attn.proj.weight",       "attn.proj.bias",       "norm2.weight",           "norm2.bias",
    "mlp.linear_fc1.weight",  "mlp.linear_fc1.bias",  "mlp.linear_fc2.weight",  "mlp.linear_fc2.bias"};
inline constexpr const char* kMergerParamNames[kMergerParams] = {"norm.weight",       "norm.bias",
                                                                 "linear_fc1.weight", "linear_fc1.bias",
                                                                 "linear_fc2.weight", "linear_fc2.bias"};

struct VisionParam {
  std::string name;  // HF name under model.visual.
  Shape shape;
};

/// Every encoder parameter in the flat order above.
inline std::vector<VisionParam> vision_encoder_params(const nn::VisionConfig& cfg) {
  const int64_t Hv = cfg.hidden, Iv = cfg.intermediate, K = cfg.merged_hidden(), D = cfg.out_hidden,
                G = cfg.pos_side();
  std::vector<VisionParam> p = {{"patch_embed.proj.weight", {Hv, cfg.patch_dim()}},
                                {"patch_embed.proj.bias", {Hv}},
                                {"pos_embed.weight", {G * G, Hv}}};
  const Shape block_shapes[kVisionBlockParams] = {{Hv}, {Hv}, {3 * Hv, Hv}, {3 * Hv}, {Hv, Hv}, {Hv},
                                                  {Hv}, {Hv}, {Iv, Hv},     {Iv},     {Hv, Iv}, {Hv}};
  for (int l = 0; l < cfg.depth; ++l)
    for (int k = 0; k < kVisionBlockParams; ++k)
      p.push_back({"blocks." + std::to_string(l) + "." + kVisionBlockParamNames[k], block_shapes[k]});
  auto merger = [&](const std::string& prefix, bool postshuffle) {
    const int64_t Hn = postshuffle ? K : Hv;
    const Shape shapes[kMergerParams] = {{Hn}, {Hn}, {K, K}, {K}, {D, K}, {D}};
    for (int k = 0; k < kMergerParams; ++k) p.push_back({prefix + kMergerParamNames[k], shapes[k]});
  };
  merger("merger.", false);
  for (size_t j = 0; j < cfg.deepstack_indexes.size(); ++j)
    merger("deepstack_merger_list." + std::to_string(j) + ".", true);
  return p;
}

/// Index of block l's first parameter, of the merger's, of deepstack merger j's.
inline size_t vision_block_param0(int l) { return 3 + size_t(l) * kVisionBlockParams; }
inline size_t vision_merger_param0(const nn::VisionConfig& cfg) { return vision_block_param0(cfg.depth); }
inline size_t vision_deepstack_param0(const nn::VisionConfig& cfg, size_t j) {
  return vision_merger_param0(cfg) + kMergerParams * (j + 1);
}

/// The packed vision batch, written from HF's code: cu_seqlens = [0, cumsum(repeat_interleave(h·w, t))];
/// positions [2, Np] from rot_pos_emb's (block_row·m + intra_row, block_col·m + intra_col), repeated per frame.
struct VisionRefSeq {
  std::vector<int32_t> cu_seqlens;
  std::vector<int64_t> positions;  // [2, Np]
  int64_t num_patches = 0;
};

inline VisionRefSeq vision_ref_seq(const std::vector<VisionGrid>& grids, int64_t m) {
  VisionRefSeq s;
  s.cu_seqlens.push_back(0);
  std::vector<int64_t> rows, cols;
  for (const VisionGrid& g : grids) {
    for (int64_t f = 0; f < g.t; ++f) s.cu_seqlens.push_back(s.cu_seqlens.back() + int32_t(g.h * g.w));
    for (int64_t f = 0; f < g.t; ++f)
      for (int64_t br = 0; br < g.h / m; ++br)
        for (int64_t bc = 0; bc < g.w / m; ++bc)
          for (int64_t ir = 0; ir < m; ++ir)
            for (int64_t ic = 0; ic < m; ++ic) {
              rows.push_back(br * m + ir);
              cols.push_back(bc * m + ic);
            }
  }
  s.num_patches = int64_t(rows.size());
  s.positions = rows;
  s.positions.insert(s.positions.end(), cols.begin(), cols.end());
  return s;
}

// --- vision block -------------------------------------------------------------------------------------------

template <class S>
struct VisionBlockRefStash {
  std::vector<S> x, mean1, rstd1, h1, q, k, v, attn, lse, x1, mean2, rstd2, h2, f1, act;
};

inline RotaryDesc vision_ref_rotary(const nn::VisionConfig& cfg) {
  RotaryDesc d;
  d.kind = RotaryKind::kVision2D;
  d.head_dim = cfg.head_dim();
  d.theta = cfg.rope_theta;
  return d;
}

inline AttentionProblem vision_ref_attention(const nn::VisionConfig& cfg, const VisionRefSeq& seq) {
  AttentionProblem p;
  p.cu_seqlens = seq.cu_seqlens.data();
  p.num_seqs = int(seq.cu_seqlens.size()) - 1;
  p.H = cfg.heads;
  p.H_kv = cfg.heads;
  p.D = cfg.head_dim();
  p.causal = false;
  return p;
}

/// out [N, Hv] = block(x); w[p0 … p0+11] are the block's parameters (kVisionBlockParamNames order).
template <class S>
void vision_block_forward(std::vector<S>& out, VisionBlockRefStash<S>& st, const nn::VisionConfig& cfg,
                          const std::vector<std::vector<S>>& w, size_t p0, const std::vector<S>& x,
                          const VisionRefSeq& seq) {
  const int64_t N = seq.num_patches, Hv = cfg.hidden, Iv = cfg.intermediate;
  auto W = [&](int k) { return w[p0 + size_t(k)].data(); };
  st.x = x;
  st.mean1.resize(size_t(N));
  st.rstd1.resize(size_t(N));
  st.h1.resize(size_t(N * Hv));
  layernorm_forward(st.h1.data(), st.mean1.data(), st.rstd1.data(), x.data(), W(0), W(1), N, Hv, S(cfg.eps));
  std::vector<S> qkv(size_t(N * 3 * Hv));
  linear_forward(qkv.data(), st.h1.data(), W(2), W(3), N, Hv, 3 * Hv);
  // HF: reshape(N, 3, heads, hd): columns [0, Hv) are q, [Hv, 2Hv) k, [2Hv, 3Hv) v, each head-major.
  std::vector<S> q(size_t(N * Hv)), k(size_t(N * Hv));
  st.v.resize(size_t(N * Hv));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < Hv; ++c) {
      q[size_t(n * Hv + c)] = qkv[size_t(n * 3 * Hv + c)];
      k[size_t(n * Hv + c)] = qkv[size_t(n * 3 * Hv + Hv + c)];
      st.v[size_t(n * Hv + c)] = qkv[size_t(n * 3 * Hv + 2 * Hv + c)];
    }
  const RotaryDesc rd = vision_ref_rotary(cfg);
  st.q.resize(q.size());
  st.k.resize(k.size());
  rotary_apply(st.q.data(), q.data(), seq.positions.data(), N, cfg.heads, rd, +1);
  rotary_apply(st.k.data(), k.data(), seq.positions.data(), N, cfg.heads, rd, +1);
  st.attn.resize(size_t(N * Hv));
  st.lse.resize(size_t(cfg.heads * N));
  attention_forward(st.attn.data(), st.lse.data(), st.q.data(), st.k.data(), st.v.data(),
                    vision_ref_attention(cfg, seq));
  st.x1.resize(size_t(N * Hv));
  linear_forward(st.x1.data(), st.attn.data(), W(4), W(5), N, Hv, Hv);
  for (size_t i = 0; i < st.x1.size(); ++i) st.x1[i] += x[i];
  st.mean2.resize(size_t(N));
  st.rstd2.resize(size_t(N));
  st.h2.resize(size_t(N * Hv));
  layernorm_forward(st.h2.data(), st.mean2.data(), st.rstd2.data(), st.x1.data(), W(6), W(7), N, Hv, S(cfg.eps));
  st.f1.resize(size_t(N * Iv));
  linear_forward(st.f1.data(), st.h2.data(), W(8), W(9), N, Hv, Iv);
  st.act.resize(st.f1.size());
  for (size_t i = 0; i < st.f1.size(); ++i) st.act[i] = gelu_tanh(st.f1[i]);
  out.resize(size_t(N * Hv));
  linear_forward(out.data(), st.act.data(), W(10), W(11), N, Iv, Hv);
  for (size_t i = 0; i < out.size(); ++i) out[i] += st.x1[i];
}

/// dx [N, Hv] = ∂L/∂x given dout; g[p0 … p0+11] accumulated.
template <class S>
void vision_block_backward(std::vector<S>& dx, std::vector<std::vector<S>>& g, const std::vector<S>& dout,
                           const VisionBlockRefStash<S>& st, const nn::VisionConfig& cfg,
                           const std::vector<std::vector<S>>& w, size_t p0, const VisionRefSeq& seq) {
  const int64_t N = seq.num_patches, Hv = cfg.hidden, Iv = cfg.intermediate;
  auto W = [&](int k) { return w[p0 + size_t(k)].data(); };
  auto Gr = [&](int k) { return g[p0 + size_t(k)].data(); };
  // MLP half.
  std::vector<S> dact(size_t(N * Iv)), dh2(size_t(N * Hv)), dx1(size_t(N * Hv));
  linear_backward(dact.data(), Gr(10), Gr(11), dout.data(), st.act.data(), W(10), N, Iv, Hv);
  for (size_t i = 0; i < dact.size(); ++i) dact[i] *= gelu_tanh_grad(st.f1[i]);
  linear_backward(dh2.data(), Gr(8), Gr(9), dact.data(), st.h2.data(), W(8), N, Hv, Iv);
  layernorm_backward(dx1.data(), Gr(6), Gr(7), dh2.data(), st.x1.data(), W(6), st.mean2.data(), st.rstd2.data(),
                     N, Hv);
  for (size_t i = 0; i < dx1.size(); ++i) dx1[i] += dout[i];
  // Attention half.
  std::vector<S> dattn(size_t(N * Hv)), dq(size_t(N * Hv)), dk(size_t(N * Hv)), dv(size_t(N * Hv));
  linear_backward(dattn.data(), Gr(4), Gr(5), dx1.data(), st.attn.data(), W(4), N, Hv, Hv);
  attention_backward(dq.data(), dk.data(), dv.data(), dattn.data(), st.q.data(), st.k.data(), st.v.data(),
                     vision_ref_attention(cfg, seq));
  const RotaryDesc rd = vision_ref_rotary(cfg);
  std::vector<S> dq0(dq.size()), dk0(dk.size());
  rotary_apply(dq0.data(), dq.data(), seq.positions.data(), N, cfg.heads, rd, -1);
  rotary_apply(dk0.data(), dk.data(), seq.positions.data(), N, cfg.heads, rd, -1);
  std::vector<S> dqkv(size_t(N * 3 * Hv)), dh1(size_t(N * Hv));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < Hv; ++c) {
      dqkv[size_t(n * 3 * Hv + c)] = dq0[size_t(n * Hv + c)];
      dqkv[size_t(n * 3 * Hv + Hv + c)] = dk0[size_t(n * Hv + c)];
      dqkv[size_t(n * 3 * Hv + 2 * Hv + c)] = dv[size_t(n * Hv + c)];
    }
  linear_backward(dh1.data(), Gr(2), Gr(3), dqkv.data(), st.h1.data(), W(2), N, Hv, 3 * Hv);
  dx.resize(size_t(N * Hv));
  layernorm_backward(dx.data(), Gr(0), Gr(1), dh1.data(), st.x.data(), W(0), st.mean1.data(), st.rstd1.data(), N,
                     Hv);
  for (size_t i = 0; i < dx.size(); ++i) dx[i] += dx1[i];
}

// --- patch merger -------------------------------------------------------------------------------------------

template <class S>
struct MergerRefStash {
  std::vector<S> x, mean, rstd, h, f1, act;
};

/// out [N/m², D] = merger(x [N, Hv]); w[p0 … p0+5] in kMergerParamNames order.
template <class S>
void merger_forward(std::vector<S>& out, MergerRefStash<S>& st, const nn::VisionConfig& cfg, bool postshuffle,
                    const std::vector<std::vector<S>>& w, size_t p0, const std::vector<S>& x) {
  const int64_t Hv = cfg.hidden, K = cfg.merged_hidden(), D = cfg.out_hidden, N = int64_t(x.size()) / Hv,
                M = N * Hv / K;
  auto W = [&](int k) { return w[p0 + size_t(k)].data(); };
  st.x = x;
  st.h.resize(size_t(M * K));  // [N, Hv] and [M, K] are the same row-major memory
  const int64_t rows = postshuffle ? M : N, width = postshuffle ? K : Hv;
  st.mean.resize(size_t(rows));
  st.rstd.resize(size_t(rows));
  layernorm_forward(st.h.data(), st.mean.data(), st.rstd.data(), x.data(), W(0), W(1), rows, width, S(cfg.eps));
  st.f1.resize(size_t(M * K));
  linear_forward(st.f1.data(), st.h.data(), W(2), W(3), M, K, K);
  st.act.resize(st.f1.size());
  for (size_t i = 0; i < st.f1.size(); ++i) st.act[i] = gelu_erf(st.f1[i]);
  out.resize(size_t(M * D));
  linear_forward(out.data(), st.act.data(), W(4), W(5), M, K, D);
}

template <class S>
void merger_backward(std::vector<S>& dx, std::vector<std::vector<S>>& g, const std::vector<S>& dout,
                     const MergerRefStash<S>& st, const nn::VisionConfig& cfg, bool postshuffle,
                     const std::vector<std::vector<S>>& w, size_t p0) {
  const int64_t Hv = cfg.hidden, K = cfg.merged_hidden(), D = cfg.out_hidden, N = int64_t(st.x.size()) / Hv,
                M = N * Hv / K;
  auto W = [&](int k) { return w[p0 + size_t(k)].data(); };
  auto Gr = [&](int k) { return g[p0 + size_t(k)].data(); };
  std::vector<S> dact(size_t(M * K)), dh(size_t(M * K));
  linear_backward(dact.data(), Gr(4), Gr(5), dout.data(), st.act.data(), W(4), M, K, D);
  for (size_t i = 0; i < dact.size(); ++i) dact[i] *= gelu_erf_grad(st.f1[i]);
  linear_backward(dh.data(), Gr(2), Gr(3), dact.data(), st.h.data(), W(2), M, K, K);
  dx.resize(size_t(N * Hv));
  const int64_t rows = postshuffle ? M : N, width = postshuffle ? K : Hv;
  layernorm_backward(dx.data(), Gr(0), Gr(1), dh.data(), st.x.data(), W(0), st.mean.data(), st.rstd.data(), rows,
                     width);
}

// --- the encoder --------------------------------------------------------------------------------------------

template <class S>
struct VisionRefResult {
  std::vector<S> merged;                  // [Np/m², D]
  std::vector<std::vector<S>> deepstack;  // each [Np/m², D]
  std::vector<std::vector<S>> grads;      // parameter order; filled when output gradients are given
};

/// Forward of the encoder on pixels [Np, C·Tp·P·P]; with d_merged (and d_deepstack, one per deepstack output,
/// an empty vector meaning zero) also the gradient of every parameter.
template <class S>
VisionRefResult<S> vision_encoder(const nn::VisionConfig& cfg, const std::vector<std::vector<S>>& w,
                                  const std::vector<S>& pixels, const std::vector<VisionGrid>& grids,
                                  const std::vector<S>* d_merged = nullptr,
                                  const std::vector<std::vector<S>>* d_deepstack = nullptr) {
  const int64_t Hv = cfg.hidden, G = cfg.pos_side(), m = cfg.merge;
  const VisionRefSeq seq = vision_ref_seq(grids, m);
  const int64_t N = seq.num_patches;
  const size_t nd = cfg.deepstack_indexes.size();
  VisionRefResult<S> r;
  // Embeddings.
  std::vector<S> x(size_t(N * Hv)), pe(size_t(N * Hv));
  linear_forward(x.data(), pixels.data(), w[0].data(), w[1].data(), N, cfg.patch_dim(), Hv);
  pos_embed_forward(pe.data(), w[2].data(), grids, G, Hv, m);
  for (size_t i = 0; i < x.size(); ++i) x[i] += pe[i];
  // Blocks and deepstack mergers.
  std::vector<VisionBlockRefStash<S>> bst(size_t(cfg.depth));
  std::vector<MergerRefStash<S>> dst(nd);
  r.deepstack.resize(nd);
  for (int l = 0; l < cfg.depth; ++l) {
    std::vector<S> y;
    vision_block_forward(y, bst[size_t(l)], cfg, w, vision_block_param0(l), x, seq);
    x = std::move(y);
    for (size_t j = 0; j < nd; ++j)
      if (cfg.deepstack_indexes[j] == l)
        merger_forward(r.deepstack[j], dst[j], cfg, true, w, vision_deepstack_param0(cfg, j), x);
  }
  MergerRefStash<S> mst;
  merger_forward(r.merged, mst, cfg, false, w, vision_merger_param0(cfg), x);
  if (!d_merged) return r;

  // Backward: every parameter gets a gradient.
  for (const auto& p : w) r.grads.emplace_back(p.size(), S(0));
  std::vector<S> dh, dtmp;
  merger_backward(dh, r.grads, *d_merged, mst, cfg, false, w, vision_merger_param0(cfg));
  for (int l = cfg.depth - 1; l >= 0; --l) {
    for (size_t j = 0; j < nd; ++j)
      if (cfg.deepstack_indexes[j] == l && d_deepstack && !(*d_deepstack)[j].empty()) {
        merger_backward(dtmp, r.grads, (*d_deepstack)[j], dst[j], cfg, true, w, vision_deepstack_param0(cfg, j));
        for (size_t i = 0; i < dh.size(); ++i) dh[i] += dtmp[i];
      }
    vision_block_backward(dtmp, r.grads, dh, bst[size_t(l)], cfg, w, vision_block_param0(l), seq);
    dh = dtmp;
  }
  std::vector<S> dpix(pixels.size());
  linear_backward(dpix.data(), r.grads[0].data(), r.grads[1].data(), dh.data(), pixels.data(), w[0].data(), N,
                  cfg.patch_dim(), Hv);
  pos_embed_backward(r.grads[2].data(), dh.data(), grids, G, Hv, m);
  return r;
}

}  // namespace vlpar::reference
