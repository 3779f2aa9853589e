#pragma once
// Varlen flash-attention backward for sm_80+, deterministic without atomics (../shared/spec/cuda-kernels.md §2;
// vlpar's two-kernel split of §2.3, the GQA reduction inside the CTA of §2.4). With s = scale·q·k (log2 domain:
// s2 = s·log2e), P = exp2(s2 − lse·log2e) from the forward's lse, dP = dO·Vᵀ, delta = rowsum(dO ∘ O):
//   dS = P ∘ (dP − delta),  dV = Pᵀ·dO,  dK = scale·dSᵀ·Q,  dQ = scale·dS·K.
// Three kernels, 4 warps each, smem tiles as in the forward (mma_tiles.cuh: swizzled [rows, kHeadDim]):
//   flash_bwd_dot_do_o_kernel  one warp per (token, head): delta[h, i] = Σ_d dO·O over the stored O, fp32.
//   flash_bwd_dkdv_kernel      grid (ceil(max_S_k / kBlockN), H_kv, B); warp w owns keys [16w, 16w+16) of the
//       block. For each query head of the GQA group and each query block that sees a key of the block, it
//       computes Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ into registers (keys × queries), turns them into Pᵀ and dSᵀ, and
//       accumulates dV += Pᵀ·dO and dK += dSᵀ·Q straight from those registers (the C→A fragment identity);
//       dK, dV stay in fp32 registers across the whole group and are written once.
//   flash_bwd_dq_kernel        grid (ceil(max_S_q / kBlockM), H, B); warp w owns query rows [16w, 16w+16); for
//       each key block it computes S = Q·Kᵀ and dP = dO·Vᵀ, then dS, and accumulates dQ += dS·K; written once.
// Each output element is written by exactly one thread after a fixed-order loop: bitwise identical across runs.
// Masking: a key past the sequence, a query past the sequence or (causal) a key right of the query's diagonal
// (key c visible to query r iff c <= r + S_k − S_q) contributes P = 0; query rows with no visible key have
// lse = +inf from the forward, so their P is 0 as well.
// SASS (tools/check_sass.py, CI stage cuda): tensor-core MMAs fed by ldmatrix (.trans for the K×N operands) and
// cp.async; the dot kernel reduces with butterfly shuffles.
// SASS flash_bwd_dkdv_kernel<bf16, *> flash_bwd_dq_kernel<bf16, *>: HMMA.16816.F32.BF16 F2FP.BF16 LDSM.16.M88.4 LDSM.16.MT88.4 LDGSTS.E.BYPASS.128 BAR.SYNC regs<=255 stack<=0 threads=128
// SASS flash_bwd_dkdv_kernel<f16, *> flash_bwd_dq_kernel<f16, *>: HMMA.16816.F32 F2FP LDSM.16.M88.4 LDSM.16.MT88.4 LDGSTS.E.BYPASS.128 BAR.SYNC regs<=255 stack<=0 threads=128
// SASS flash_bwd_dot_do_o_kernel<*>: SHFL.BFLY regs<=64 threads=128
// Test: tests/gpu/test_cuda_attention.cpp (ctest -L gpu; -L emu in the emulated build)
#include "cuda_compat.cuh"  // first: the prelude of every CUDA source

#include <cmath>
#include <cstdint>

#include "flash_common.cuh"
#include "mma_tiles.cuh"
#include "ptx/cp_async.cuh"
#include "vlpar/core/dtype.hpp"
#include "vlpar/kernels/cuda/attention_params.hpp"

namespace vlpar::cuda_kernels {

/// Tile shape of the backward kernels: kBlockM queries × kBlockN keys per step, 4 warps (16 rows each along the
/// dimension the kernel owns: keys for dK/dV, queries for dQ).
template <int kHeadDim_, int kBlockM_, int kBlockN_>
struct FlashBwdTile {
  static constexpr int kHeadDim = kHeadDim_, kBlockM = kBlockM_, kBlockN = kBlockN_;
  static constexpr int kWarps = 4, kThreads = 32 * kWarps;
  static constexpr int kNTilesD = kHeadDim / 8;  // n8 tiles over the head dim (dK, dV, dQ accumulators)
  static_assert(kHeadDim % 16 == 0 && kBlockM % 16 == 0 && kBlockN % 16 == 0, "tile shape");
};


/// True when key c (sequence-local) contributes to query r: both exist and the key is visible to the query.
__device__ __forceinline__ bool flash_visible(const FlashFwdParams& p, const FlashSeq& s, int r, int c) {
  return r < s.seqlen_q && flash_key_visible(p, s, r, c);
}

/// acc[nt] += A[rows 16·warp.., kHeadDim] · B[n8 tile nt, kHeadDim]ᵀ for kNTiles n8 tiles of B's rows.
template <class T, int kHeadDim, int kNTiles>
__device__ __forceinline__ void flash_abt(float (&acc)[kNTiles][4], const uint16_t* sa, const uint16_t* sb, int warp,
                                          int lane) {
#pragma unroll
  for (int kk = 0; kk < kHeadDim / 16; ++kk) {
    uint32_t a[4];
    load_a<kHeadDim>(a, sa, 16 * warp, 16 * kk, lane);
#pragma unroll
    for (int nt = 0; nt < kNTiles; nt += 2) {
      uint32_t b[4];
      load_b_nk<kHeadDim>(b, sb, 8 * nt, 16 * kk, lane);
      mma16816<T>(acc[nt], a, b[0], b[1]);
      mma16816<T>(acc[nt + 1], a, b[2], b[3]);
    }
  }
}

/// acc[ot] += X · B over kK rows of B [kK, kHeadDim] (rows = the k index, ldmatrix.trans), X the kK columns held
/// as C fragments x[kK / 8][4] (rounded to T on the way in).
template <class T, int kHeadDim, int kK>
__device__ __forceinline__ void flash_xb(float (&acc)[kHeadDim / 8][4], const float (&x)[kK / 8][4],
                                         const uint16_t* sb, int lane) {
#pragma unroll
  for (int ks = 0; ks < kK / 16; ++ks) {
    uint32_t a[4];
    acc_to_a<T>(a, x[2 * ks], x[2 * ks + 1]);
#pragma unroll
    for (int ot = 0; ot < kHeadDim / 8; ot += 2) {
      uint32_t b[4];
      load_b_kn<kHeadDim>(b, sb, 16 * ks, 8 * ot, lane);
      mma16816<T>(acc[ot], a, b[0], b[1]);
      mma16816<T>(acc[ot + 1], a, b[2], b[3]);
    }
  }
}

/// Writes the fp32 accumulator rows [16·warp, 16·warp + 16) of a tile starting at sequence row r0, times `mul`,
/// to dst (rows < valid_rows, columns < head_dim), two elements per 4-byte store.
template <class T, int kHeadDim>
__device__ __forceinline__ void flash_store_rows(T* dst, int64_t tok_stride, const float (&acc)[kHeadDim / 8][4],
                                                 float mul, int valid_rows, int head_dim, int warp, int lane) {
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const int row = 16 * warp + lane / 4 + 8 * hr;
    if (row >= valid_rows) continue;
#pragma unroll
    for (int ot = 0; ot < kHeadDim / 8; ++ot) {
      const int col = 8 * ot + 2 * (lane % 4);
      if (col < head_dim)
        *reinterpret_cast<uint32_t*>(dst + row * tok_stride + col) =
            pack2<T>(acc[ot][2 * hr] * mul, acc[ot][2 * hr + 1] * mul);
    }
  }
}

/// delta[h, i] = Σ_d dO[i, h, d] · O[i, h, d], one warp per (token i, head h); grid-stride over N_q·H rows.
template <class T>
__global__ void __launch_bounds__(128) flash_bwd_dot_do_o_kernel(const FlashBwdParams p) {
  const int lane = int(threadIdx.x) % 32;
  const int64_t rows = p.n_q * p.fwd.num_heads, warps = int64_t(gridDim.x) * 4;
  for (int64_t row = int64_t(blockIdx.x) * 4 + threadIdx.x / 32; row < rows; row += warps) {
    const int64_t i = row / p.fwd.num_heads, h = row % p.fwd.num_heads;
    const T* o = static_cast<const T*>(p.fwd.out) + i * p.fwd.out_tok_stride + h * p.fwd.out_head_stride;
    const T* g = static_cast<const T*>(p.dout) + i * p.dout_tok_stride + h * p.dout_head_stride;
    float sum = 0.f;
    for (int d = lane; d < p.fwd.head_dim; d += 32) sum += to_float(o[d]) * to_float(g[d]);
#pragma unroll
    for (int off = 16; off > 0; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
    if (lane == 0) p.delta[h * p.n_q + i] = sum;
  }
}

/// Stages one query block of head h: Q and dO rows (cp.async, zero-filled past the sequence) and the block's
/// lse·log2e (+inf past the sequence) and delta (0 past it). The caller commits, waits and syncs.
template <class Tile>
__device__ __forceinline__ void flash_bwd_stage_queries(const FlashBwdParams& p, const FlashSeq& s, int h, int m0,
                                                        uint16_t* sq, uint16_t* sdo, float* slse, float* sdelta) {
  const FlashFwdParams& f = p.fwd;
  const int valid = s.seqlen_q - m0;
  const auto* q = static_cast<const uint16_t*>(f.q) + (s.q_start + m0) * f.q_tok_stride + h * f.q_head_stride;
  const auto* g = static_cast<const uint16_t*>(p.dout) + (s.q_start + m0) * p.dout_tok_stride + h * p.dout_head_stride;
  cp_async_tile<Tile::kHeadDim, Tile::kThreads>(sq, q, f.q_tok_stride, Tile::kBlockM, valid, f.head_dim);
  cp_async_tile<Tile::kHeadDim, Tile::kThreads>(sdo, g, p.dout_tok_stride, Tile::kBlockM, valid, f.head_dim);
  for (int i = int(threadIdx.x); i < Tile::kBlockM; i += Tile::kThreads) {
    const int64_t t = s.q_start + m0 + i;
    slse[i] = i < valid ? f.lse[h * f.lse_head_stride + t] * kLog2e : INFINITY;
    sdelta[i] = i < valid ? p.delta[h * p.n_q + t] : 0.f;
  }
}

/// dK, dV of kBlockN keys of one kv head (see the file comment). Dynamic smem: K, V [kBlockN, kHeadDim], Q, dO
/// [kBlockM, kHeadDim] (16-bit), lse·log2e and delta [kBlockM] (f32).
template <class T, class Tile>
__global__ void __launch_bounds__(Tile::kThreads) flash_bwd_dkdv_kernel(const FlashBwdParams p) {
  static_assert(Tile::kBlockN == 16 * Tile::kWarps, "one 16-key slab per warp");
  constexpr int kD = Tile::kHeadDim, kNTilesQ = Tile::kBlockM / 8;
  VLPAR_DYN_SMEM(uint16_t, smem);
  const FlashFwdParams& f = p.fwd;
  const FlashSeq s = flash_seq(f, int(blockIdx.z));
  const int n0 = int(blockIdx.x) * Tile::kBlockN;
  if (n0 >= s.seqlen_k) return;  // the whole CTA leaves together
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32, h_kv = int(blockIdx.y);
  const int group = f.num_heads / f.num_kv_heads;
  uint16_t* sk = smem;
  uint16_t* sv = sk + Tile::kBlockN * kD;
  uint16_t* sq = sv + Tile::kBlockN * kD;
  uint16_t* sdo = sq + Tile::kBlockM * kD;
  float* slse = reinterpret_cast<float*>(sdo + Tile::kBlockM * kD);
  float* sdelta = slse + Tile::kBlockM;
  const auto* k = static_cast<const uint16_t*>(f.k) + (s.k_start + n0) * f.k_tok_stride + h_kv * f.k_head_stride;
  const auto* v = static_cast<const uint16_t*>(f.v) + (s.k_start + n0) * f.v_tok_stride + h_kv * f.v_head_stride;
  cp_async_tile<kD, Tile::kThreads>(sk, k, f.k_tok_stride, Tile::kBlockN, s.seqlen_k - n0, f.head_dim);
  cp_async_tile<kD, Tile::kThreads>(sv, v, f.v_tok_stride, Tile::kBlockN, s.seqlen_k - n0, f.head_dim);
  ptx::cp_async_commit();
  // Query blocks that see a key of this block: causal ones start where row r reaches key n0,
  // r >= n0 − (S_k − S_q).
  const int first_row = f.causal ? n0 - (s.seqlen_k - s.seqlen_q) : 0;
  const int m_begin = (first_row > 0 ? first_row : 0) / Tile::kBlockM;
  const int m_end = (s.seqlen_q + Tile::kBlockM - 1) / Tile::kBlockM;
  const float scale_log2 = f.scale * kLog2e;
  float dk[Tile::kNTilesD][4] = {}, dv[Tile::kNTilesD][4] = {};
  for (int h = h_kv * group; h < (h_kv + 1) * group; ++h) {
    for (int mb = m_begin; mb < m_end; ++mb) {
      const int m0 = mb * Tile::kBlockM;
      __syncthreads();  // every warp is done with the previous block's Q, dO, lse, delta
      flash_bwd_stage_queries<Tile>(p, s, h, m0, sq, sdo, slse, sdelta);
      ptx::cp_async_commit();
      ptx::cp_async_wait<0>();
      __syncthreads();
      float st[kNTilesQ][4] = {}, dpt[kNTilesQ][4] = {};  // Sᵀ, dPᵀ: this warp's 16 keys × kBlockM queries
      flash_abt<T, kD, kNTilesQ>(st, sk, sq, warp, lane);
      flash_abt<T, kD, kNTilesQ>(dpt, sv, sdo, warp, lane);
#pragma unroll
      for (int nt = 0; nt < kNTilesQ; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int key = n0 + 16 * warp + lane / 4 + 8 * (i >> 1), qi = 8 * nt + 2 * (lane % 4) + (i & 1);
          const float pt = flash_visible(f, s, m0 + qi, key) ? exp2f(st[nt][i] * scale_log2 - slse[qi]) : 0.f;
          st[nt][i] = pt;
          dpt[nt][i] = pt * (dpt[nt][i] - sdelta[qi]);
        }
      flash_xb<T, kD, Tile::kBlockM>(dv, st, sdo, lane);
      flash_xb<T, kD, Tile::kBlockM>(dk, dpt, sq, lane);
    }
  }
  T* dkp = static_cast<T*>(p.dk) + (s.k_start + n0) * p.dk_tok_stride + h_kv * p.dk_head_stride;
  T* dvp = static_cast<T*>(p.dv) + (s.k_start + n0) * p.dv_tok_stride + h_kv * p.dv_head_stride;
  flash_store_rows<T, kD>(dkp, p.dk_tok_stride, dk, f.scale, s.seqlen_k - n0, f.head_dim, warp, lane);
  flash_store_rows<T, kD>(dvp, p.dv_tok_stride, dv, 1.f, s.seqlen_k - n0, f.head_dim, warp, lane);
  ptx::cp_async_wait<0>();  // a CTA whose keys no query sees never waited for its K, V copies
}

/// dQ of kBlockM queries of one head (see the file comment). Dynamic smem: Q, dO [kBlockM, kHeadDim], K, V
/// [kBlockN, kHeadDim] (16-bit).
template <class T, class Tile>
__global__ void __launch_bounds__(Tile::kThreads) flash_bwd_dq_kernel(const FlashBwdParams p) {
  static_assert(Tile::kBlockM == 16 * Tile::kWarps, "one 16-query slab per warp");
  constexpr int kD = Tile::kHeadDim, kNTilesK = Tile::kBlockN / 8;
  VLPAR_DYN_SMEM(uint16_t, smem);
  const FlashFwdParams& f = p.fwd;
  const FlashSeq s = flash_seq(f, int(blockIdx.z));
  const int m0 = int(blockIdx.x) * Tile::kBlockM;
  if (m0 >= s.seqlen_q) return;
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32, h = int(blockIdx.y);
  const int h_kv = h / (f.num_heads / f.num_kv_heads);
  uint16_t* sq = smem;
  uint16_t* sdo = sq + Tile::kBlockM * kD;
  uint16_t* sk = sdo + Tile::kBlockM * kD;
  uint16_t* sv = sk + Tile::kBlockN * kD;
  float* slse = reinterpret_cast<float*>(sv + Tile::kBlockN * kD);
  float* sdelta = slse + Tile::kBlockM;
  flash_bwd_stage_queries<Tile>(p, s, h, m0, sq, sdo, slse, sdelta);
  ptx::cp_async_commit();
  const int n_tiles = (flash_keys_seen(f, s, m0, Tile::kBlockM) + Tile::kBlockN - 1) / Tile::kBlockN;
  const auto* k = static_cast<const uint16_t*>(f.k) + s.k_start * f.k_tok_stride + h_kv * f.k_head_stride;
  const auto* v = static_cast<const uint16_t*>(f.v) + s.k_start * f.v_tok_stride + h_kv * f.v_head_stride;
  const float scale_log2 = f.scale * kLog2e;
  float dq[Tile::kNTilesD][4] = {};
  for (int n = 0; n < n_tiles; ++n) {
    const int n0 = n * Tile::kBlockN;
    __syncthreads();  // every warp is done with the previous K, V
    cp_async_tile<kD, Tile::kThreads>(sk, k + n0 * f.k_tok_stride, f.k_tok_stride, Tile::kBlockN,
                                        s.seqlen_k - n0, f.head_dim);
    cp_async_tile<kD, Tile::kThreads>(sv, v + n0 * f.v_tok_stride, f.v_tok_stride, Tile::kBlockN,
                                        s.seqlen_k - n0, f.head_dim);
    ptx::cp_async_commit();
    ptx::cp_async_wait<0>();
    __syncthreads();
    float sc[kNTilesK][4] = {}, dp[kNTilesK][4] = {};  // S, dP: this warp's 16 queries × kBlockN keys
    flash_abt<T, kD, kNTilesK>(sc, sq, sk, warp, lane);
    flash_abt<T, kD, kNTilesK>(dp, sdo, sv, warp, lane);
#pragma unroll
    for (int nt = 0; nt < kNTilesK; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int qi = 16 * warp + lane / 4 + 8 * (i >> 1), key = n0 + 8 * nt + 2 * (lane % 4) + (i & 1);
        const float pr = flash_visible(f, s, m0 + qi, key) ? exp2f(sc[nt][i] * scale_log2 - slse[qi]) : 0.f;
        dp[nt][i] = pr * (dp[nt][i] - sdelta[qi]);
      }
    flash_xb<T, kD, Tile::kBlockN>(dq, dp, sk, lane);
  }
  ptx::cp_async_wait<0>();  // the Q/dO copies, when no key tile waited for them
  T* dqp = static_cast<T*>(p.dq) + (s.q_start + m0) * p.dq_tok_stride + h * p.dq_head_stride;
  flash_store_rows<T, kD>(dqp, p.dq_tok_stride, dq, f.scale, s.seqlen_q - m0, f.head_dim, warp, lane);
}

}  // namespace vlpar::cuda_kernels
