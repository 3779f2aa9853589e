#pragma once
// Varlen flash-attention forward, FlashAttention-2 algorithm for sm_80+ (design: ../shared/spec/cuda-kernels.md
// §1). One CTA of 4 warps computes kBlockM query rows of one head of one sequence:
//   grid (ceil(max_seqlen_q / kBlockM), H, B), block 128, dynamic smem (kBlockM + 2·kBlockN)·kHeadDim·2 bytes.
//   smem  Q [kBlockM, kHeadDim] · K [kBlockN, kHeadDim] · V [kBlockN, kHeadDim], 16-bit elements, rows of 16-byte
//         chunks XOR-swizzled (swizzled_offset) so that the 8 row addresses of an ldmatrix phase hit 8 banks groups.
//   warp w owns the m16 slabs {w, w + 4, ...} of the tile (kMSlabs of them); every warp sees all kBlockN keys, so
//   the row max and row sum need only the 4 lanes that share a row (two shfl.xor steps), no smem reduction.
//   S = Q·Kᵀ: A = Q via ldmatrix.x4, B = K rows (K-major) via ldmatrix.x4 without .trans (two n8 tiles per call).
//   O += P·V: A = P straight from the S accumulators (the m16n8 C layout of two n8 tiles is the A layout of one
//   k16 step), converted to T in registers; B = V rows (N-major) via ldmatrix.x4.trans.
//   Online softmax in the log2 domain: s = S·scale·log2e (masked → −inf), m = running max, P = exp2(s − m), l = Σ P
//   (fp32, per thread; the quad sum at the end), O rescaled by exp2(m_old − m_new). A row whose scores so far are
//   all −inf uses 0 as its max (no −inf − −inf). Rows with no visible key end with l = 0: O = 0, LSE = +inf.
//   Pipeline (one K and one V buffer, as FA2): the load of V[n] overlaps S = Q·K[n]ᵀ, the load of K[n+1]
//   overlaps P·V[n]; two __syncthreads per key tile separate every buffer's readers from its next writer.
//   Loads: cp.async 16 B per thread; rows past the sequence end and columns past head_dim are zero-filled, so no
//   NaN garbage reaches an MMA and padded head dims (72, 80 in the 96 kernel) add exact zeros.
//   Stores: O rows < S_q, columns < head_dim, two elements per 4-byte store; LSE by the lane that owns the row.
// SASS (tools/check_sass.py, CI stage cuda): tensor-core MMAs fed by ldmatrix (.trans for V) and cp.async; P
// packed to 16 bits by one F2FP per pair (ptx/cvt.cuh).
// SASS flash_fwd_kernel<bf16, *>: HMMA.16816.F32.BF16 F2FP.BF16 LDSM.16.M88.4 LDSM.16.MT88.4 LDGSTS.E.BYPASS.128 BAR.SYNC regs<=255 stack<=0 threads=128
// SASS flash_fwd_kernel<f16, *>: HMMA.16816.F32 F2FP LDSM.16.M88.4 LDSM.16.MT88.4 LDGSTS.E.BYPASS.128 BAR.SYNC regs<=255 stack<=0 threads=128
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

/// Tile shape of one instantiation: kBlockM query rows × kBlockN keys per step, head dim kHeadDim (a multiple
/// of 16), 4 warps stacked along the query rows.
template <int kHeadDim_, int kBlockM_, int kBlockN_>
struct FlashFwdTile {
  static constexpr int kHeadDim = kHeadDim_, kBlockM = kBlockM_, kBlockN = kBlockN_;
  static constexpr int kWarps = 4, kThreads = 32 * kWarps;
  static constexpr int kMSlabs = kBlockM / (16 * kWarps);  // m16 slabs per warp
  static constexpr int kChunks = kHeadDim / 8;             // 16-byte chunks per smem row
  static constexpr int kNTilesS = kBlockN / 8;             // n8 tiles of S per slab
  static constexpr int kNTilesO = kHeadDim / 8;            // n8 tiles of O per slab
  static constexpr int kSmemBytes = (kBlockM + 2 * kBlockN) * kHeadDim * 2;
  static_assert(kHeadDim % 16 == 0 && kBlockN % 16 == 0 && kBlockM % (16 * kWarps) == 0, "tile shape");
};

/// acc[s][nt] += A[slab s] · B[n8 tile nt]ᵀ over the head dim, A and B [rows, kHeadDim] smem tiles (S = Q·Kᵀ;
/// the backward's dP = dO·Vᵀ too): A rows are the warp's slabs, B rows the kBlockN keys.
template <class T, class Tile>
__device__ __forceinline__ void flash_qk(float (&acc)[Tile::kMSlabs][Tile::kNTilesS][4], const uint16_t* sq,
                                         const uint16_t* sk, int warp, int lane) {
#pragma unroll
  for (int kk = 0; kk < Tile::kHeadDim / 16; ++kk) {
    uint32_t a[Tile::kMSlabs][4];
#pragma unroll
    for (int s = 0; s < Tile::kMSlabs; ++s)
      load_a<Tile::kHeadDim>(a[s], sq, 16 * (warp + Tile::kWarps * s), 16 * kk, lane);
#pragma unroll
    for (int nt = 0; nt < Tile::kNTilesS; nt += 2) {
      uint32_t b[4];
      load_b_nk<Tile::kHeadDim>(b, sk, 8 * nt, 16 * kk, lane);
#pragma unroll
      for (int s = 0; s < Tile::kMSlabs; ++s) {
        mma16816<T>(acc[s][nt], a[s], b[0], b[1]);
        mma16816<T>(acc[s][nt + 1], a[s], b[2], b[3]);
      }
    }
  }
}

/// o[s][ot] += P[slab s] · V over this tile's keys, P from the C fragments of the scores, rounded to T; V
/// [kBlockN, kHeadDim] in smem (rows = the k index, read through ldmatrix.trans). The backward's dQ = dS·K too.
template <class T, class Tile>
__device__ __forceinline__ void flash_pv(float (&o)[Tile::kMSlabs][Tile::kNTilesO][4],
                                         const float (&p)[Tile::kMSlabs][Tile::kNTilesS][4], const uint16_t* sv,
                                         int lane) {
#pragma unroll
  for (int ks = 0; ks < Tile::kBlockN / 16; ++ks) {
    uint32_t a[Tile::kMSlabs][4];
#pragma unroll
    for (int s = 0; s < Tile::kMSlabs; ++s) acc_to_a<T>(a[s], p[s][2 * ks], p[s][2 * ks + 1]);
#pragma unroll
    for (int ot = 0; ot < Tile::kNTilesO; ot += 2) {
      uint32_t b[4];
      load_b_kn<Tile::kHeadDim>(b, sv, 16 * ks, 8 * ot, lane);
#pragma unroll
      for (int s = 0; s < Tile::kMSlabs; ++s) {
        mma16816<T>(o[s][ot], a[s], b[0], b[1]);
        mma16816<T>(o[s][ot + 1], a[s], b[2], b[3]);
      }
    }
  }
}

/// Per-CTA view of one (sequence, head, query tile): where the rows live and how many keys they may see.
struct FlashFwdBlock : FlashSeq {
  int m0;      // first query row of this tile (sequence-local)
  int n_keys;  // keys [0, n_keys) can be visible to some row of this tile
};

__device__ __forceinline__ FlashFwdBlock flash_fwd_block(const FlashFwdParams& p, int block_m) {
  FlashFwdBlock bk;
  static_cast<FlashSeq&>(bk) = flash_seq(p, int(blockIdx.z));
  bk.m0 = int(blockIdx.x) * block_m;
  bk.n_keys = flash_keys_seen(p, bk, bk.m0, block_m);
  return bk;
}

/// Scores of one key tile to the log2 domain (s·scale·log2e), −inf where the key is past the sequence or, when
/// causal, past the query's diagonal (key c visible to query r iff c <= r + S_k − S_q).
template <class Tile>
__device__ __forceinline__ void flash_scale_mask(float (&acc)[Tile::kMSlabs][Tile::kNTilesS][4],
                                                 const FlashFwdParams& p, const FlashFwdBlock& bk, int n0, int warp,
                                                 int lane, float scale_log2) {
  const bool need_mask = n0 + Tile::kBlockN > bk.seqlen_k ||
                         (p.causal && n0 + Tile::kBlockN - 1 > bk.m0 + bk.seqlen_k - bk.seqlen_q);
#pragma unroll
  for (int s = 0; s < Tile::kMSlabs; ++s)
#pragma unroll
    for (int nt = 0; nt < Tile::kNTilesS; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        float x = acc[s][nt][i] * scale_log2;
        if (need_mask) {
          const int row = bk.m0 + 16 * (warp + Tile::kWarps * s) + lane / 4 + 8 * (i >> 1);
          const int col = n0 + 8 * nt + 2 * (lane % 4) + (i & 1);
          if (!flash_key_visible(p, bk, row, col)) x = -INFINITY;
        }
        acc[s][nt][i] = x;
      }
}

/// Online-softmax step for one key tile: updates the running max m and sum l of the thread's two rows per slab,
/// rescales O, and turns the scores into P = exp2(s − m) in place.
template <class Tile>
__device__ __forceinline__ void flash_softmax_step(float (&acc)[Tile::kMSlabs][Tile::kNTilesS][4],
                                                   float (&o)[Tile::kMSlabs][Tile::kNTilesO][4],
                                                   float (&m)[Tile::kMSlabs][2], float (&l)[Tile::kMSlabs][2]) {
#pragma unroll
  for (int s = 0; s < Tile::kMSlabs; ++s)
#pragma unroll
    for (int h = 0; h < 2; ++h) {  // h = 0: row lane/4, h = 1: row lane/4 + 8
      float mx = m[s][h];
#pragma unroll
      for (int nt = 0; nt < Tile::kNTilesS; ++nt) mx = fmaxf(mx, fmaxf(acc[s][nt][2 * h], acc[s][nt][2 * h + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float base = mx == -INFINITY ? 0.f : mx;  // a row with no visible key yet: exp2(−inf − 0) = 0
      const float alpha = exp2f(m[s][h] - base);       // m_old = −inf (first tile) gives 0; O and l are 0 then
      m[s][h] = mx;
      float sum = 0.f;
#pragma unroll
      for (int nt = 0; nt < Tile::kNTilesS; ++nt) {
        acc[s][nt][2 * h] = exp2f(acc[s][nt][2 * h] - base);
        acc[s][nt][2 * h + 1] = exp2f(acc[s][nt][2 * h + 1] - base);
        sum += acc[s][nt][2 * h] + acc[s][nt][2 * h + 1];
      }
      l[s][h] = l[s][h] * alpha + sum;
#pragma unroll
      for (int ot = 0; ot < Tile::kNTilesO; ++ot) {
        o[s][ot][2 * h] *= alpha;
        o[s][ot][2 * h + 1] *= alpha;
      }
    }
}

/// O = acc / l in T for rows < S_q and columns < head_dim; LSE = m·ln2 + ln(l) (natural log, +inf where l = 0).
template <class T, class Tile>
__device__ __forceinline__ void flash_fwd_epilogue(const FlashFwdParams& p, const FlashFwdBlock& bk,
                                                   float (&o)[Tile::kMSlabs][Tile::kNTilesO][4],
                                                   float (&m)[Tile::kMSlabs][2], float (&l)[Tile::kMSlabs][2],
                                                   int warp, int lane) {
  const int h = int(blockIdx.y);
  T* out = static_cast<T*>(p.out) + bk.q_start * p.out_tok_stride + h * p.out_head_stride;
  float* lse = p.lse + h * p.lse_head_stride + bk.q_start;
#pragma unroll
  for (int s = 0; s < Tile::kMSlabs; ++s)
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      float sum = l[s][hr];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      const int row = bk.m0 + 16 * (warp + Tile::kWarps * s) + lane / 4 + 8 * hr;
      if (row >= bk.seqlen_q) continue;
      const float inv = sum > 0.f ? 1.f / sum : 0.f;
      T* orow = out + row * p.out_tok_stride;
#pragma unroll
      for (int ot = 0; ot < Tile::kNTilesO; ++ot) {
        const int col = 8 * ot + 2 * (lane % 4);
        if (col < p.head_dim)
          *reinterpret_cast<uint32_t*>(orow + col) = pack2<T>(o[s][ot][2 * hr] * inv, o[s][ot][2 * hr + 1] * inv);
      }
      if (lane % 4 == 0) lse[row] = sum > 0.f ? m[s][hr] * 0.69314718055994531f + logf(sum) : INFINITY;
    }
}

template <class T, class Tile>
__global__ void __launch_bounds__(Tile::kThreads) flash_fwd_kernel(const FlashFwdParams p) {
  VLPAR_DYN_SMEM(uint16_t, smem);  // Q [kBlockM, kHeadDim] · K [kBlockN, kHeadDim] · V [kBlockN, kHeadDim]
  const FlashFwdBlock bk = flash_fwd_block(p, Tile::kBlockM);
  if (bk.m0 >= bk.seqlen_q) return;  // the grid covers the longest sequence; the whole CTA leaves together
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  const int h = int(blockIdx.y), h_kv = h / (p.num_heads / p.num_kv_heads);
  uint16_t* sq = smem;
  uint16_t* sk = sq + Tile::kBlockM * Tile::kHeadDim;
  uint16_t* sv = sk + Tile::kBlockN * Tile::kHeadDim;
  const auto* q = static_cast<const uint16_t*>(p.q) + (bk.q_start + bk.m0) * p.q_tok_stride + h * p.q_head_stride;
  const auto* k = static_cast<const uint16_t*>(p.k) + bk.k_start * p.k_tok_stride + h_kv * p.k_head_stride;
  const auto* v = static_cast<const uint16_t*>(p.v) + bk.k_start * p.v_tok_stride + h_kv * p.v_head_stride;
  const float scale_log2 = p.scale * kLog2e;
  const int n_tiles = (bk.n_keys + Tile::kBlockN - 1) / Tile::kBlockN;
  auto load = [&](uint16_t* dst, const uint16_t* src, int64_t tok_stride, int rows, int valid_rows) {
    cp_async_tile<Tile::kHeadDim, Tile::kThreads>(dst, src, tok_stride, rows, valid_rows, p.head_dim);
  };

  float o[Tile::kMSlabs][Tile::kNTilesO][4] = {};
  float m[Tile::kMSlabs][2], l[Tile::kMSlabs][2];
#pragma unroll
  for (int s = 0; s < Tile::kMSlabs; ++s) m[s][0] = m[s][1] = -INFINITY, l[s][0] = l[s][1] = 0.f;

  if (n_tiles > 0) {
    load(sq, q, p.q_tok_stride, Tile::kBlockM, bk.seqlen_q - bk.m0);
    load(sk, k, p.k_tok_stride, Tile::kBlockN, bk.seqlen_k);
    ptx::cp_async_commit();
  }
  for (int n = 0; n < n_tiles; ++n) {
    const int n0 = n * Tile::kBlockN;
    ptx::cp_async_wait<0>();
    __syncthreads();  // Q and K[n] landed; every warp is done reading V[n-1]
    load(sv, v + n0 * p.v_tok_stride, p.v_tok_stride, Tile::kBlockN, bk.seqlen_k - n0);
    ptx::cp_async_commit();
    float acc[Tile::kMSlabs][Tile::kNTilesS][4] = {};
    flash_qk<T, Tile>(acc, sq, sk, warp, lane);
    flash_scale_mask<Tile>(acc, p, bk, n0, warp, lane, scale_log2);
    ptx::cp_async_wait<0>();
    __syncthreads();  // V[n] landed; every warp is done reading K[n]
    if (n + 1 < n_tiles) {
      const int n1 = n0 + Tile::kBlockN;
      load(sk, k + n1 * p.k_tok_stride, p.k_tok_stride, Tile::kBlockN, bk.seqlen_k - n1);
      ptx::cp_async_commit();
    }
    flash_softmax_step<Tile>(acc, o, m, l);
    flash_pv<T, Tile>(o, acc, sv, lane);
  }
  flash_fwd_epilogue<T, Tile>(p, bk, o, m, l, warp, lane);
}

}  // namespace vlpar::cuda_kernels
