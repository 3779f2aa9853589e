// CPU varlen (packed) attention, FlashAttention-2 algorithm: forward and backward for f32, bf16 and f16 storage
// with fp32 compute (16-bit tiles are widened to float as they are loaded; f32 tiles are mapped in place).
//   Forward : one work item per (segment, head, q-block). The scaled Q tile stays resident while K/V tiles stream
//             past it; an online softmax (running row max m, row sum l) rescales the O accumulator, so no
//             [S, S] matrix ever exists. Saves lse = m + log l.
//   Backward: deterministic without atomics. D_i = rowsum(dO ∘ O) first; pass 1 over (segment, kv head, k-block)
//             accumulates dK, dV over every q-block of every query head of the GQA group; pass 2 over
//             (segment, head, q-block) accumulates dQ over k-blocks. Both recompute P = exp(scale·QKᵀ − lse).
//   Causal  : bottom-right aligned (key j visible to query i iff j <= i + S_k − S_q; queries and keys have their own
//             segments); tiles wholly above the diagonal are never visited, only tiles crossing it are masked. A
//             row that sees no key ends with out = 0 and lse = +inf.
// Tile math is Eigen (row-major Maps with OuterStride for the GEMMs, array exp for the softmax).
// Test: tests/unit/test_attention.cpp (./build/cpu/tests/test_attention). Bench: bench/bench_attention.cpp.
#include "vlpar/kernels/attention.hpp"


#include <Eigen/Dense>
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cmath>
#include <initializer_list>
#include <limits>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "vlpar/core/dispatch.hpp"
#include "vlpar/core/log.hpp"
#include "vlpar/core/rows.hpp"

#include "gemm_f32.hpp"
#include "isa_namespace.hpp"

namespace vlpar::VLPAR_CPU_ISA_NAMESPACE {
namespace {

/// Tile shape of the CPU kernel: rows of the Q tile (block_q) and of each K/V tile (block_k).
/// Why these sizes: every tile GEMM (QKᵀ, PV, and in the backward dO·Vᵀ, Pᵀ·dO, dSᵀ·Q, dS·K) has depth D or
/// block_k, and Eigen packs both operands on every call, so the packing cost relative to the FLOPs falls as
/// 1/block; on the other side the working set (Q, O, K, V tiles of block×D floats plus the block_q×block_k
/// score tile, ~320 KiB at 128/128/D=128) must stay in the per-core L2 (1 MiB on the Zen 4 dev box) so the
/// streamed K/V tiles are read from DRAM once per Q tile. Short segments waste little: tail tiles are cut to
/// the segment end, never padded.
struct AttentionTiles {
  int64_t block_q = 0;
  int64_t block_k = 0;
};

constexpr AttentionTiles attention_tiles(int64_t head_dim) {
  // Large head dims double the K/V tile bytes; halve the K/V rows to keep the working set in L2.
  return head_dim <= 128 ? AttentionTiles{128, 128} : AttentionTiles{128, 64};
}

/// Logs the tile choice when VLPAR_PRINT_CONFIGS=1 (STYLE §8).
void print_tiles(const char* op, int64_t head_dim, AttentionTiles t) {
  const char* env = std::getenv("VLPAR_PRINT_CONFIGS");
  if (env != nullptr && std::string_view(env) == "1")
    log_info("{}: head_dim {} -> block_q {}, block_k {}", op, head_dim, t.block_q, t.block_k);
}

using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MMap = Eigen::Map<RowMat, Eigen::Unaligned, Eigen::OuterStride<>>;
using CMap = Eigen::Map<const RowMat, Eigen::Unaligned, Eigen::OuterStride<>>;
using VMap = Eigen::Map<Eigen::VectorXf>;
using CVMap = Eigen::Map<const Eigen::VectorXf>;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
// ---- segments (validated by src/kernels/ops/attention.cpp before this file runs) -------------------------

/// One sequence: its queries and keys in the packed q and k. Causal masks are bottom-right aligned: key j is
/// visible to query i iff j <= i + off with off = k_len − q_len, i.e. to the query's "diagonal position" i + off.
struct Segment {
  int64_t q_start = 0, q_len = 0;
  int64_t k_start = 0, k_len = 0;
  int64_t off() const { return k_len - q_len; }
};

/// The sequences of cu_seqlens_q and cu_seqlens_k, i32 [B+1] each (host memory, already checked).
std::vector<Segment> read_segments(const TensorView& cu_q, const TensorView& cu_k) {
  const int32_t* q = cu_q.ptr<int32_t>();
  const int32_t* k = cu_k.ptr<int32_t>();
  const int64_t B = cu_q.size(0) - 1;
  std::vector<Segment> segs(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b)
    segs[size_t(b)] = Segment{q[b], int64_t(q[b + 1]) - q[b], k[b], int64_t(k[b + 1]) - k[b]};
  return segs;
}

/// Keys [0, visible_keys) of the segment are visible to some query of rows [q0, q0 + nq): all of them, or when
/// causal those up to the last row's diagonal; 0 when none is.
int64_t visible_keys(const Segment& s, bool causal, int64_t q0, int64_t nq) {
  return causal ? std::clamp<int64_t>(q0 + nq + s.off(), 0, s.k_len) : s.k_len;
}

float resolved_scale(const VarlenAttentionDesc& desc) {
  return desc.softmax_scale != 0.f ? desc.softmax_scale : 1.f / std::sqrt(float(desc.head_dim));
}

// ---- tiles --------------------------------------------------------------------------------------------------

/// A [N_tok, heads, D] view with a contiguous last dim and arbitrary token and head strides.
template <class T>
struct HeadRows {
  T* data = nullptr;
  int64_t tok_stride = 0;
  int64_t head_stride = 0;
  T* row(int64_t tok, int64_t head) const { return data + tok * tok_stride + head * head_stride; }
};

template <class T>
HeadRows<T> head_rows(const TensorView& v) {
  return {static_cast<T*>(v.data), v.stride(0), v.stride(1)};
}

/// Rows [t0, t0+n) of head h as an n × D float matrix: f32 storage is mapped in place (OuterStride = token
/// stride), 16-bit storage is widened into buf [n, D].
template <class T>
CMap load_tile(const HeadRows<const T>& x, int64_t t0, int64_t n, int64_t h, int64_t D, float* buf) {
  if constexpr (std::is_same_v<T, float>) {
    return CMap(x.row(t0, h), n, D, Eigen::OuterStride<>(x.tok_stride));
  } else {
    for (int64_t r = 0; r < n; ++r) {
      const T* src = x.row(t0 + r, h);
      for (int64_t d = 0; d < D; ++d) buf[r * D + d] = to_float(src[d]);
    }
    return CMap(buf, n, D, Eigen::OuterStride<>(D));
  }
}

/// scale · rows [t0, t0+n) of head h, copied into buf [n, D] (the softmax scale is folded into Q once).
template <class T>
MMap load_scaled_tile(const HeadRows<const T>& x, int64_t t0, int64_t n, int64_t h, int64_t D, float scale,
                      float* buf) {
  for (int64_t r = 0; r < n; ++r) {
    const T* src = x.row(t0 + r, h);
    for (int64_t d = 0; d < D; ++d) buf[r * D + d] = scale * to_float(src[d]);
  }
  return MMap(buf, n, D, Eigen::OuterStride<>(D));
}

/// Rounds src [n, D] to T and writes it to rows [t0, t0+n) of head h.
template <class T>
void store_tile(const HeadRows<T>& x, int64_t t0, int64_t h, const MMap& src) {
  for (int64_t r = 0; r < src.rows(); ++r) {
    T* dst = x.row(t0 + r, h);
    for (int64_t d = 0; d < src.cols(); ++d) dst[d] = from_float<T>(src(r, d));
  }
}

/// Sets s(r, c) = value where key k0 + c lies after diagonal position q0 + r (c > r + q0 − k0): the causal mask of
/// a tile that crosses the diagonal (q0 is the first row's diagonal position: its query index + S_k − S_q).
void mask_above_diagonal(MMap& s, int64_t q0, int64_t k0, float value) {
  for (int64_t r = 0; r < s.rows(); ++r) {
    const int64_t first = std::max<int64_t>(0, r + q0 - k0 + 1);
    for (int64_t c = first; c < s.cols(); ++c) s(r, c) = value;
  }
}

/// True when the tile of diagonal positions [q0, q0+nq) × keys [k0, k0+nk) has some key after some query.
bool crosses_diagonal(bool causal, int64_t q0, int64_t k0, int64_t nk) { return causal && k0 + nk - 1 > q0; }

/// A float buffer whose first element sits on a 64-byte boundary. Eigen's reductions (row sums) and GEMV peel
/// an unaligned head before their vector loop, so their summation order depends on the address mod 64: fixing
/// the alignment of every scratch tile keeps results bitwise independent of where malloc put the buffer.
class AlignedFloats {
 public:
  static constexpr size_t kAlignFloats = 16;  // 64 bytes
  explicit AlignedFloats(size_t n = 0) : storage_(n + kAlignFloats) {
    const auto addr = reinterpret_cast<uintptr_t>(storage_.data());
    offset_ = (kAlignFloats - (addr / sizeof(float)) % kAlignFloats) % kAlignFloats;
  }
  float* data() { return storage_.data() + offset_; }

 private:
  std::vector<float> storage_;
  size_t offset_ = 0;
};

/// Per-worker buffers, sized once for the largest tile (tail tiles map a prefix).
struct Scratch {
  AlignedFloats q, dout, k, v, acc_a, acc_b, s, dp, m, l, alpha, base;
  Scratch(AttentionTiles t, int64_t D) {
    const size_t rows = size_t(std::max(t.block_q, t.block_k)), tile = rows * size_t(D);
    for (auto* b : {&q, &dout, &k, &v, &acc_a, &acc_b}) *b = AlignedFloats(tile);
    for (auto* b : {&s, &dp}) *b = AlignedFloats(size_t(t.block_q * t.block_k));
    for (auto* b : {&m, &l, &alpha, &base}) *b = AlignedFloats(rows);
  }
};

// ---- scheduling ---------------------------------------------------------------------------------------------

/// One block of rows (queries, or keys in the dK/dV pass) of one segment for one head.
struct WorkItem {
  Segment seg;
  int64_t begin = 0;      // block rows [begin, begin + len), relative to the segment
  int64_t len = 0;
  int head = 0;           // query head (forward, dQ) or kv head (dK/dV)
  int64_t cost = 0;       // rows × keys (or queries) visited
};

/// The first query that sees key k0 (causal: the first whose diagonal position i + off reaches it).
int64_t first_query(const Segment& s, bool causal, int64_t k0) {
  return causal ? std::clamp<int64_t>(k0 - s.off(), 0, s.q_len) : 0;
}

/// Items for every segment × head × block, most expensive first so the dynamic hand-out ends balanced.
/// kv_blocks: the blocks are key blocks (dK/dV pass), which see queries [first_query, S_q).
std::vector<WorkItem> make_items(const std::vector<Segment>& segs, int heads, int64_t block, bool causal,
                                 bool kv_blocks) {
  std::vector<WorkItem> items;
  for (const Segment& seg : segs)
    for (int h = 0; h < heads; ++h)
      for (int64_t b = 0, rows = kv_blocks ? seg.k_len : seg.q_len; b < rows; b += block) {
        const int64_t len = std::min(block, rows - b);
        const int64_t visited =
            kv_blocks ? seg.q_len - first_query(seg, causal, b) : visible_keys(seg, causal, b, len);
        items.push_back(WorkItem{seg, b, len, h, len * visited});
      }
  std::stable_sort(items.begin(), items.end(), [](const WorkItem& a, const WorkItem& b) { return a.cost > b.cost; });
  return items;
}

/// Runs fn(item, scratch) for every item on min(num_threads, items) workers, each with its own Scratch.
/// The shared counter only hands out item indices: every output element is written by exactly one item, whose
/// arithmetic does not depend on the worker, so results are bitwise reproducible whatever the schedule.
template <class Fn>
void run_items(const Context& ctx, const std::vector<WorkItem>& items, AttentionTiles tiles, int64_t D, Fn&& fn) {
  parallel_for_dynamic_with(
      ctx, int64_t(items.size()), [&] { return Scratch(tiles, D); },
      [&](int64_t i, Scratch& scratch) { fn(items[size_t(i)], scratch); });
}

// ---- forward ------------------------------------------------------------------------------------------------

template <class T>
struct FwdArgs {
  HeadRows<T> out;                 // [N_tok, H, D]
  HeadRows<const T> q, k, v;       // [N_tok, H, D], [N_tok, H_kv, D] ×2
  float* lse = nullptr;            // [H, N_tok]
  int64_t lse_stride = 0;
  int group = 1;                   // H / H_kv
  int64_t D = 0;
  bool causal = true;
  float scale = 1.f;
  AttentionTiles tiles;
};

/// Online-softmax step for one score tile s [nq, nk]: m ← max(m, rowmax s), alpha = exp(m_old − m),
/// s ← exp(s − m) (masked entries 0), l ← alpha·l + rowsum s. A row that has seen no visible key yet keeps
/// m = −inf and uses 0 in its place (base), so nothing computes −inf − (−inf).
void online_softmax(MMap& s, VMap& m, VMap& l, VMap& alpha, VMap& base, bool masked, int64_t q0, int64_t k0) {
  if (masked) mask_above_diagonal(s, q0, k0, kNegInf);
  alpha = m;
  m = m.cwiseMax(s.rowwise().maxCoeff());
  base = m.unaryExpr([](float x) { return x == kNegInf ? 0.f : x; });
  alpha = (alpha - base).array().exp().matrix();
  s.array().colwise() -= base.array();
  s.array() = s.array().exp();
  if (masked) mask_above_diagonal(s, q0, k0, 0.f);  // Eigen's exp clamps −inf to a denormal, not 0
  l = alpha.cwiseProduct(l) + s.rowwise().sum();
}

template <class T>
void forward_item(const FwdArgs<T>& a, const WorkItem& it, Scratch& sc) {
  const int64_t D = a.D, q0 = it.begin, nq = it.len, bk = a.tiles.block_k, diag0 = q0 + it.seg.off();
  const int hk = it.head / a.group;
  const MMap Q = load_scaled_tile(a.q, it.seg.q_start + q0, nq, it.head, D, a.scale, sc.q.data());
  MMap O(sc.acc_a.data(), nq, D, Eigen::OuterStride<>(D));
  VMap m(sc.m.data(), nq), l(sc.l.data(), nq), alpha(sc.alpha.data(), nq), base(sc.base.data(), nq);
  O.setZero();
  m.setConstant(kNegInf);
  l.setZero();
  const int64_t kend = visible_keys(it.seg, a.causal, q0, nq);
  for (int64_t k0 = 0; k0 < kend; k0 += bk) {
    const int64_t nk = std::min(bk, kend - k0);
    const CMap K = load_tile(a.k, it.seg.k_start + k0, nk, hk, D, sc.k.data());
    const CMap V = load_tile(a.v, it.seg.k_start + k0, nk, hk, D, sc.v.data());
    MMap S(sc.s.data(), nq, nk, Eigen::OuterStride<>(nk));
    S.noalias() = Q * K.transpose();
    online_softmax(S, m, l, alpha, base, crosses_diagonal(a.causal, diag0, k0, nk), diag0, k0);
    O.array().colwise() *= alpha.array();
    O.noalias() += S * V;
  }
  float* lse = a.lse + it.head * a.lse_stride + it.seg.q_start + q0;
  for (int64_t r = 0; r < nq; ++r) {  // a row that saw no key: out = 0, lse = +inf (its backward P is 0)
    if (l(r) > 0.f) {
      O.row(r) /= l(r);
      lse[r] = m(r) + std::log(l(r));
    } else {
      O.row(r).setZero();
      lse[r] = std::numeric_limits<float>::infinity();
    }
  }
  store_tile(a.out, it.seg.q_start + q0, it.head, O);
}

// ---- backward -----------------------------------------------------------------------------------------------

template <class T>
struct BwdArgs {
  HeadRows<T> dq, dk, dv;              // [N_tok, H, D], [N_tok, H_kv, D] ×2
  HeadRows<const T> dout, q, k, v;     // [N_tok, H, D] ×2, [N_tok, H_kv, D] ×2
  const float* lse = nullptr;          // [H, N_tok] (row stride lse_stride)
  int64_t lse_stride = 0;
  const float* di = nullptr;           // [H, N_tok] contiguous: rowsum(dO ∘ O)
  int64_t n_tok = 0;
  int group = 1;
  int64_t D = 0;
  bool causal = true;
  float scale = 1.f;
  AttentionTiles tiles;

  const float* lse_at(int h, int64_t tok) const { return lse + h * lse_stride + tok; }
  const float* di_at(int h, int64_t tok) const { return di + h * n_tok + tok; }
};

/// P = exp(Q Kᵀ − lse) for the queries of diagonal positions [q0, q0+nq) × keys [k0, k0+nk) of one segment (Q
/// pre-scaled); masked 0.
MMap probs_tile(float* buf, const MMap& Q, const CMap& K, const float* lse, bool causal, int64_t q0, int64_t k0) {
  MMap P(buf, Q.rows(), K.rows(), Eigen::OuterStride<>(K.rows()));
  P.noalias() = Q * K.transpose();
  P.array().colwise() -= CVMap(lse, Q.rows()).array();
  P.array() = P.array().exp();
  if (crosses_diagonal(causal, q0, k0, K.rows())) mask_above_diagonal(P, q0, k0, 0.f);
  return P;
}

/// dS = P ∘ (dO Vᵀ − D_i) into buf [nq, nk].
MMap ds_tile(float* buf, const MMap& P, const CMap& dO, const CMap& V, const float* di) {
  MMap dS(buf, P.rows(), P.cols(), Eigen::OuterStride<>(P.cols()));
  dS.noalias() = dO * V.transpose();
  dS.array().colwise() -= CVMap(di, P.rows()).array();
  dS.array() *= P.array();
  return dS;
}

/// dK, dV of key block it (kv head it.head): sums over every q-block of every query head in the GQA group.
template <class T>
void dkdv_item(const BwdArgs<T>& a, const WorkItem& it, Scratch& sc) {
  const int64_t D = a.D, k0 = it.begin, nk = it.len, bq = a.tiles.block_q, q_len = it.seg.q_len;
  const CMap K = load_tile(a.k, it.seg.k_start + k0, nk, it.head, D, sc.k.data());
  const CMap V = load_tile(a.v, it.seg.k_start + k0, nk, it.head, D, sc.v.data());
  MMap dK(sc.acc_a.data(), nk, D, Eigen::OuterStride<>(D)), dV(sc.acc_b.data(), nk, D, Eigen::OuterStride<>(D));
  dK.setZero();
  dV.setZero();
  for (int h = it.head * a.group; h < (it.head + 1) * a.group; ++h) {
    for (int64_t q0 = first_query(it.seg, a.causal, k0); q0 < q_len; q0 += bq) {
      const int64_t nq = std::min(bq, q_len - q0), t = it.seg.q_start + q0;
      const MMap Q = load_scaled_tile(a.q, t, nq, h, D, a.scale, sc.q.data());
      const CMap dO = load_tile(a.dout, t, nq, h, D, sc.dout.data());
      const MMap P = probs_tile(sc.s.data(), Q, K, a.lse_at(h, t), a.causal, q0 + it.seg.off(), k0);
      dV.noalias() += P.transpose() * dO;
      const MMap dS = ds_tile(sc.dp.data(), P, dO, V, a.di_at(h, t));
      dK.noalias() += dS.transpose() * Q;  // Q carries the softmax scale: dK = scale · dSᵀ Q
    }
  }
  store_tile(a.dk, it.seg.k_start + k0, it.head, dK);
  store_tile(a.dv, it.seg.k_start + k0, it.head, dV);
}

/// dQ of query block it (head it.head): sums over the key blocks the block sees.
template <class T>
void dq_item(const BwdArgs<T>& a, const WorkItem& it, Scratch& sc) {
  const int64_t D = a.D, q0 = it.begin, nq = it.len, bk = a.tiles.block_k, t = it.seg.q_start + q0;
  const int hk = it.head / a.group;
  const MMap Q = load_scaled_tile(a.q, t, nq, it.head, D, a.scale, sc.q.data());
  const CMap dO = load_tile(a.dout, t, nq, it.head, D, sc.dout.data());
  MMap dQ(sc.acc_a.data(), nq, D, Eigen::OuterStride<>(D));
  dQ.setZero();
  const int64_t kend = visible_keys(it.seg, a.causal, q0, nq);
  for (int64_t k0 = 0; k0 < kend; k0 += bk) {
    const int64_t nk = std::min(bk, kend - k0);
    const CMap K = load_tile(a.k, it.seg.k_start + k0, nk, hk, D, sc.k.data());
    const CMap V = load_tile(a.v, it.seg.k_start + k0, nk, hk, D, sc.v.data());
    const MMap P = probs_tile(sc.s.data(), Q, K, a.lse_at(it.head, t), a.causal, q0 + it.seg.off(), k0);
    const MMap dS = ds_tile(sc.dp.data(), P, dO, V, a.di_at(it.head, t));
    dQ.noalias() += dS * K;
  }
  dQ *= a.scale;
  store_tile(a.dq, t, it.head, dQ);
}

/// di [H, N_tok] = Σ_d dO ∘ O in fp32, one fixed-order sum per (token, head).
template <class T>
std::vector<float> rowsum_dout_out(const Context& ctx, const HeadRows<const T>& dout, const HeadRows<const T>& out,
                                   int64_t n_tok, int H, int64_t D) {
  std::vector<float> di(size_t(n_tok * H));
  parallel_for(ctx, n_tok, H * D, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t)
      for (int h = 0; h < H; ++h) {
        const T* g = dout.row(t, h);
        const T* o = out.row(t, h);
        float acc = 0.f;
        for (int64_t d = 0; d < D; ++d) acc += to_float(g[d]) * to_float(o[d]);
        di[size_t(h * n_tok + t)] = acc;
      }
  });
  return di;
}

}  // namespace

Status varlen_attention_forward(const Context& ctx, TensorView out, TensorView lse, TensorView q, TensorView k,
                                TensorView v, TensorView cu_seqlens_q, TensorView cu_seqlens_k,
                                const VarlenAttentionDesc& desc) {
  const int H = desc.num_heads, H_kv = desc.num_kv_heads, D = desc.head_dim;
  const std::vector<Segment> segs = read_segments(cu_seqlens_q, cu_seqlens_k);
  const AttentionTiles tiles = attention_tiles(D);
  print_tiles("varlen_attention_forward", D, tiles);
  VLPAR_FLOAT_SWITCH(q.dtype, T, "varlen_attention_forward", {
    const FwdArgs<T> args{head_rows<T>(out), head_rows<const T>(q), head_rows<const T>(k), head_rows<const T>(v),
                          lse.ptr<float>(), lse.stride(0), H / H_kv, D, desc.causal, resolved_scale(desc), tiles};
    run_items(ctx, make_items(segs, H, tiles.block_q, desc.causal, false), tiles, D,
              [&](const WorkItem& it, Scratch& sc) { forward_item(args, it, sc); });
  });
  return Status::Ok();
}

Status varlen_attention_backward(const Context& ctx, TensorView dq, TensorView dk, TensorView dv, TensorView dout,
                                 TensorView q, TensorView k, TensorView v, TensorView out, TensorView lse,
                                 TensorView cu_seqlens_q, TensorView cu_seqlens_k, const VarlenAttentionDesc& desc) {
  const int H = desc.num_heads, H_kv = desc.num_kv_heads, D = desc.head_dim;
  const int64_t n_tok = q.size(0);
  const std::vector<Segment> segs = read_segments(cu_seqlens_q, cu_seqlens_k);
  const AttentionTiles tiles = attention_tiles(D);
  print_tiles("varlen_attention_backward", D, tiles);
  VLPAR_FLOAT_SWITCH(q.dtype, T, "varlen_attention_backward", {
    const std::vector<float> di = rowsum_dout_out(ctx, head_rows<const T>(dout), head_rows<const T>(out), n_tok, H, D);
    const BwdArgs<T> args{head_rows<T>(dq),         head_rows<T>(dk),         head_rows<T>(dv),
                          head_rows<const T>(dout), head_rows<const T>(q),    head_rows<const T>(k),
                          head_rows<const T>(v),    lse.ptr<const float>(),   lse.stride(0),
                          di.data(),                n_tok,                    H / H_kv,
                          D,                        desc.causal,              resolved_scale(desc),
                          tiles};
    run_items(ctx, make_items(segs, H_kv, tiles.block_k, desc.causal, true), tiles, D,
              [&](const WorkItem& it, Scratch& sc) { dkdv_item(args, it, sc); });
    run_items(ctx, make_items(segs, H, tiles.block_q, desc.causal, false), tiles, D,
              [&](const WorkItem& it, Scratch& sc) { dq_item(args, it, sc); });
  });
  return Status::Ok();
}

}  // namespace vlpar::VLPAR_CPU_ISA_NAMESPACE
