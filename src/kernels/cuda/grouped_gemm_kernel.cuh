#pragma once
// Grouped GEMM for sm_80+: c[rows of g] = alpha · a[rows of g] · op(b[g]) + beta · c[rows of g] over a ragged row
// split (design: ../shared/spec/cuda-kernels.md §4). A persistent grid: CTA i computes output tiles i, i + grid,
// i + 2·grid, … of the list ordered by (group, row tile, column tile); tile_offsets (prefix sums of the groups'
// tile counts) map a tile to its group by binary search, so empty groups cost nothing.
//   Tile 128 × 128 × 32 (kGroupedGemmTileRows/Cols), 4 warps as 2 × 2, each warp 64 × 64: 4 m16 × 8 n8 fp32
//   accumulators (128 registers). Three smem stages of A [128, 32] and B ([128 n, 32 k] when trans_b, [32 k, 128 n]
//   otherwise), 48 KiB (no opt-in; two CTAs per SM), loaded by 16-byte cp.async (rows past the group and columns
//   past N or Kd zero-filled): the loads of k-steps kt+1 and kt+2 are in flight during the MMAs of k-step kt, one
//   barrier per k-step. The first k-step of a CTA's next tile is issued before the epilogue of the current one, so
//   its latency hides behind the stores. Operands through ldmatrix (.trans for a [Kd, N] b).
//   Epilogue: alpha·acc (+ beta·c) rounded once to OutT, two columns per store, rows and columns predicated; with
//   beta ≠ 0 every read of c is issued before the first store (a read after a store to c could alias it, so the
//   compiler would otherwise serialise 64 read-modify-writes per thread: the weight gradient's fp32 dw).
// The weight gradient dw[g] += a[rows of g]ᵀ · dc[rows of g] (grouped_wgrad_kernel) reuses the tile, warps,
// pipeline and epilogue with the roles turned: output tiles 128 (Kd) × 128 (N) of dw[g] for the non-empty groups
// only, the inner dimension the group's rows (ragged; rows past the group zero-filled, so they add exact zeros),
// both operands staged k-major as [32 rows, 128] tiles: A (= aᵀ) through ldmatrix.trans (load_a_km), B through
// ldmatrix.trans; fp32 read-modify-write of dw (the gradient accumulates across calls and micro-batches).
// Every output element is computed by one thread with a fixed k order: bitwise identical across runs and grids.
// SASS (tools/check_sass.py, CI stage cuda): tensor-core MMAs fed by ldmatrix and a three-stage cp.async pipeline.
// SASS grouped_gemm_kernel<bf16, *>: HMMA.16816.F32.BF16 LDSM.16.M88.4 LDGSTS.E.BYPASS.128 DEPBAR.LE BAR.SYNC regs<=255 stack<=0 threads=128
// SASS grouped_gemm_kernel<f16, *>: HMMA.16816.F32 LDSM.16.M88.4 LDGSTS.E.BYPASS.128 DEPBAR.LE BAR.SYNC regs<=255 stack<=0 threads=128
// SASS grouped_gemm_kernel<*, *, false>: LDSM.16.MT88.4 dynsmem=49152
// SASS grouped_wgrad_kernel<bf16>: HMMA.16816.F32.BF16 LDSM.16.MT88.4 LDGSTS.E.BYPASS.128 DEPBAR.LE BAR.SYNC regs<=255 stack<=0 threads=128 dynsmem=49152
// SASS grouped_wgrad_kernel<f16>: HMMA.16816.F32 LDSM.16.MT88.4 LDGSTS.E.BYPASS.128 DEPBAR.LE BAR.SYNC regs<=255 stack<=0 threads=128 dynsmem=49152
// Test: tests/gpu/test_cuda_grouped_gemm.cpp (ctest -L gpu; -L emu in the emulated build)
#include "cuda_compat.cuh"  // first: the prelude of every CUDA source

#include <cstdint>
#include <type_traits>

#include "mma_tiles.cuh"
#include "ptx/cp_async.cuh"
#include "vlpar/core/dtype.hpp"
#include "vlpar/kernels/cuda/grouped_gemm_params.hpp"

namespace vlpar::cuda_kernels {

struct GroupedGemmTile {
  static constexpr int kRows = kGroupedGemmTileRows, kCols = kGroupedGemmTileCols, kK = 32;
  static constexpr int kThreads = 128;
  static constexpr int kStages = 3;                             // k-steps in flight + the one being multiplied
  static constexpr int kStageElems = kRows * kK + kCols * kK;  // A and B of one k-step, 16-bit
  static constexpr int kSmemBytes = kStages * kStageElems * 2;  // 48 KiB: no opt-in, two CTAs per SM
};

/// The output tile `tile` of the list: its group (binary search of tile_offsets), row tile and column tile.
struct GroupedGemmWork {
  int group;
  int64_t row0;  // first row of the tile in a and c (absolute)
  int64_t rows;  // rows of the tile inside the group (≤ kRows)
  int64_t col0;
};

/// The group of output tile `tile`: the last g whose first tile is ≤ tile (an empty group shares its first tile
/// with the next group, so it is never chosen).
__device__ __forceinline__ int grouped_tile_group(const int32_t* tile_offsets, int groups, int tile) {
  int lo = 0, hi = groups - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (tile_offsets[mid] <= tile) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

__device__ __forceinline__ GroupedGemmWork grouped_gemm_work(const GroupedGemmParams& p, int tile) {
  const int lo = grouped_tile_group(p.tile_offsets, p.groups, tile);
  const int col_tiles = int((p.n + GroupedGemmTile::kCols - 1) / GroupedGemmTile::kCols);
  const int local = tile - p.tile_offsets[lo];
  const int64_t m0 = int64_t(local / col_tiles) * GroupedGemmTile::kRows;
  const int64_t group_rows = p.offsets[lo + 1] - p.offsets[lo];
  GroupedGemmWork w;
  w.group = lo;
  w.row0 = p.offsets[lo] + m0;
  w.rows = group_rows - m0 < GroupedGemmTile::kRows ? group_rows - m0 : GroupedGemmTile::kRows;
  w.col0 = int64_t(local % col_tiles) * GroupedGemmTile::kCols;
  return w;
}

/// Issues the cp.async copies of k-step k0 of tile w into one stage (A then B); the caller commits.
template <bool kTransB>
__device__ __forceinline__ void grouped_gemm_load(uint16_t* stage, const GroupedGemmParams& p,
                                                  const GroupedGemmWork& w, int64_t k0) {
  using Tile = GroupedGemmTile;
  const auto* a = static_cast<const uint16_t*>(p.a) + w.row0 * p.lda + k0;
  cp_async_tile<Tile::kK, Tile::kThreads>(stage, a, p.lda, Tile::kRows, int(w.rows), int(p.kd - k0));
  const auto* b = static_cast<const uint16_t*>(p.b) + w.group * p.b_group_stride;
  uint16_t* sb = stage + Tile::kRows * Tile::kK;
  if constexpr (kTransB) {  // b [N, Kd]: tile rows are columns of c
    cp_async_tile<Tile::kK, Tile::kThreads>(sb, b + w.col0 * p.ldb + k0, p.ldb, Tile::kCols, int(p.n - w.col0),
                                            int(p.kd - k0));
  } else {  // b [Kd, N]: tile rows are k
    cp_async_tile<Tile::kCols, Tile::kThreads>(sb, b + k0 * p.ldb + w.col0, p.ldb, Tile::kK, int(p.kd - k0),
                                               int(p.n - w.col0));
  }
}

/// acc += A · op(B) over one k-step held in `stage`, for warp (wm, wn)'s 64 × 64 quarter of the tile. A is
/// [128 m, 32 k] in the stage, or [32 k, 128 m] with kAKMajor (the weight gradient's aᵀ, through ldmatrix.trans).
template <class T, bool kAKMajor, bool kTransB>
__device__ __forceinline__ void grouped_gemm_mma(float (&acc)[4][8][4], const uint16_t* stage, int wm, int wn,
                                                 int lane) {
  using Tile = GroupedGemmTile;
  const uint16_t* sb = stage + Tile::kRows * Tile::kK;
#pragma unroll
  for (int kk = 0; kk < Tile::kK / 16; ++kk) {
    uint32_t af[4][4];
#pragma unroll
    for (int mi = 0; mi < 4; ++mi) {
      if constexpr (kAKMajor) {
        load_a_km<Tile::kRows>(af[mi], stage, 64 * wm + 16 * mi, 16 * kk, lane);
      } else {
        load_a<Tile::kK>(af[mi], stage, 64 * wm + 16 * mi, 16 * kk, lane);
      }
    }
#pragma unroll
    for (int nj = 0; nj < 4; ++nj) {  // n8 tiles 2nj, 2nj + 1
      uint32_t b[4];
      if constexpr (kTransB) {
        load_b_nk<Tile::kK>(b, sb, 64 * wn + 16 * nj, 16 * kk, lane);
      } else {
        load_b_kn<Tile::kCols>(b, sb, 16 * kk, 64 * wn + 16 * nj, lane);
      }
#pragma unroll
      for (int mi = 0; mi < 4; ++mi) {
        mma16816<T>(acc[mi][2 * nj], af[mi], b[0], b[1]);
        mma16816<T>(acc[mi][2 * nj + 1], af[mi], b[2], b[3]);
      }
    }
  }
}

/// f(r, col, pair) for every pair of adjacent accumulator columns this lane holds in warp (wm, wn)'s 64 × 64 part of
/// the tile: r its row (relative to the tile) when r < rows, col its first column (absolute: col0 + …) when
/// col < n, pair = acc[mi][nt] + 2 · hr (C fragment: rows g and g + 8, columns 2t and 2t + 1).
template <class F>
__device__ __forceinline__ void for_each_c_pair(int64_t rows, int64_t col0, int64_t n, float (&acc)[4][8][4],
                                                int wm, int wn, int lane, const F& f) {
#pragma unroll
  for (int mi = 0; mi < 4; ++mi)
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int64_t r = 64 * wm + 16 * mi + lane / 4 + 8 * hr;
      if (r >= rows) continue;
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        const int64_t col = col0 + 64 * wn + 8 * nt + 2 * (lane % 4);
        if (col >= n) continue;
        f(r, col, &acc[mi][nt][2 * hr]);
      }
    }
}

/// c = alpha · acc (+ beta · c) for the warp's part of the tile whose element (0, 0) is c[row0 · ldc + col0]: its
/// rows < rows (relative to row0) and columns < n (absolute), one rounding to OutT. With beta ≠ 0 every read of c
/// comes first (acc = alpha · acc + beta · c: reads only, all in flight at once), then the stores.
template <class OutT>
__device__ __forceinline__ void grouped_gemm_store(OutT* c, int64_t ldc, int64_t row0, int64_t rows, int64_t col0,
                                                   int64_t n, float alpha, float beta, float (&acc)[4][8][4],
                                                   int wm, int wn, int lane) {
  if (beta != 0.f) {
    for_each_c_pair(rows, col0, n, acc, wm, wn, lane, [&](int64_t r, int64_t col, float* x) {
      const OutT* src = c + (row0 + r) * ldc + col;
      float c0, c1;
      if constexpr (std::is_same_v<OutT, float>) {
        const float2 v = *reinterpret_cast<const float2*>(src);
        c0 = v.x, c1 = v.y;
      } else {
        c0 = to_float(src[0]), c1 = to_float(src[1]);
      }
      x[0] = alpha * x[0] + beta * c0;
      x[1] = alpha * x[1] + beta * c1;
    });
    alpha = 1.f;
  }
  for_each_c_pair(rows, col0, n, acc, wm, wn, lane, [&](int64_t r, int64_t col, float* x) {
    OutT* dst = c + (row0 + r) * ldc + col;
    if constexpr (std::is_same_v<OutT, float>) {
      *reinterpret_cast<float2*>(dst) = make_float2(alpha * x[0], alpha * x[1]);
    } else {
      *reinterpret_cast<uint32_t*>(dst) = pack2<OutT>(alpha * x[0], alpha * x[1]);
    }
  });
}

/// acc = Σ over k_steps of A · op(B), k-step kt in stage kt % kStages, loaded by load(stage, kt) (which issues, not
/// commits, its cp.async copies). One commit group per k-step (empty past the last), so that before iteration kt
/// the groups of k-steps ≤ kt + kStages − 2 are committed and waiting for all but the newest kStages − 2 lands
/// k-step kt. first_issued: k-step 0 was issued and committed by the caller (the previous tile's prefetch). Ends
/// with a barrier: every stage is free for the caller's next load.
template <class T, bool kAKMajor, bool kTransB, class Load>
__device__ __forceinline__ void grouped_gemm_mainloop(float (&acc)[4][8][4], uint16_t* smem, int k_steps,
                                                      bool first_issued, const Load& load, int wm, int wn,
                                                      int lane) {
  using Tile = GroupedGemmTile;
  for (int s = first_issued ? 1 : 0; s < Tile::kStages - 1; ++s) {
    if (s < k_steps) load(smem + s * Tile::kStageElems, s);
    ptx::cp_async_commit();
  }
  for (int kt = 0; kt < k_steps; ++kt) {
    ptx::cp_async_wait<Tile::kStages - 2>();  // this thread's copies of k-step kt landed
    __syncthreads();  // everyone's copies visible, and every warp is done with k-step kt − 1's stage
    const int next = kt + Tile::kStages - 1;  // refills the stage of k-step kt − 1
    if (next < k_steps) load(smem + (next % Tile::kStages) * Tile::kStageElems, next);
    ptx::cp_async_commit();
    grouped_gemm_mma<T, kAKMajor, kTransB>(acc, smem + (kt % Tile::kStages) * Tile::kStageElems, wm, wn, lane);
  }
  __syncthreads();  // every warp is done with every stage
}

template <class T, class OutT, bool kTransB>
__global__ void __launch_bounds__(GroupedGemmTile::kThreads) grouped_gemm_kernel(const GroupedGemmParams p) {
  using Tile = GroupedGemmTile;
  VLPAR_DYN_SMEM(uint16_t, smem);  // kStages stages of [A 128×32 | B 128×32]
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32, wm = warp / 2, wn = warp % 2;
  const int k_steps = int((p.kd + Tile::kK - 1) / Tile::kK);
  bool issued = false;  // k-step 0 of this tile already in flight (prefetched during the previous epilogue)
  for (int tile = int(blockIdx.x); tile < p.total_tiles; tile += int(gridDim.x)) {
    const GroupedGemmWork w = grouped_gemm_work(p, tile);
    float acc[4][8][4] = {};
    grouped_gemm_mainloop<T, false, kTransB>(acc, smem, k_steps, issued, [&](uint16_t* stage, int kt) {
      grouped_gemm_load<kTransB>(stage, p, w, int64_t(kt) * Tile::kK);
    }, wm, wn, lane);
    const int next = tile + int(gridDim.x);
    issued = next < p.total_tiles && k_steps > 0;
    if (issued) {
      grouped_gemm_load<kTransB>(smem, p, grouped_gemm_work(p, next), 0);
      ptx::cp_async_commit();
    }
    grouped_gemm_store<OutT>(static_cast<OutT*>(p.c), p.ldc, w.row0, w.rows, w.col0, p.n, p.alpha, p.beta, acc, wm,
                             wn, lane);
  }
}

/// The weight gradient's output tile `tile`: group, the rows it sums over, and the tile's corner in dw[g].
struct GroupedWgradWork {
  int group;
  int64_t row0, rows;  // the group's rows in a and dc (the inner dimension)
  int64_t m0, n0;      // the tile's first row (Kd index) and column (N index) in dw[g]
};

__device__ __forceinline__ GroupedWgradWork grouped_wgrad_work(const GroupedWgradParams& p, int tile) {
  const int g = grouped_tile_group(p.tile_offsets, p.groups, tile);
  const int col_tiles = int((p.n + GroupedGemmTile::kCols - 1) / GroupedGemmTile::kCols);
  const int local = tile - p.tile_offsets[g];
  GroupedWgradWork w;
  w.group = g;
  w.row0 = p.offsets[g];
  w.rows = p.offsets[g + 1] - w.row0;
  w.m0 = int64_t(local / col_tiles) * GroupedGemmTile::kRows;
  w.n0 = int64_t(local % col_tiles) * GroupedGemmTile::kCols;
  return w;
}

/// Issues the cp.async copies of rows [k0, k0 + 32) of the group: a's columns [m0, m0 + 128) and dc's columns
/// [n0, n0 + 128), each a [32, 128] k-major tile; rows past the group zero-filled (they add exact zeros).
__device__ __forceinline__ void grouped_wgrad_load(uint16_t* stage, const GroupedWgradParams& p,
                                                   const GroupedWgradWork& w, int64_t k0) {
  using Tile = GroupedGemmTile;
  const int valid = int(w.rows - k0 < Tile::kK ? w.rows - k0 : Tile::kK);
  const int64_t r = w.row0 + k0;
  cp_async_tile<Tile::kRows, Tile::kThreads>(stage, static_cast<const uint16_t*>(p.a) + r * p.lda + w.m0, p.lda,
                                             Tile::kK, valid, int(p.kd - w.m0));
  cp_async_tile<Tile::kCols, Tile::kThreads>(stage + Tile::kRows * Tile::kK,
                                             static_cast<const uint16_t*>(p.dc) + r * p.lddc + w.n0, p.lddc,
                                             Tile::kK, valid, int(p.n - w.n0));
}

/// dw[g] = alpha · a[rows of g]ᵀ · dc[rows of g] + beta · dw[g] over the tiles in tile_offsets on a persistent
/// grid, each output element summed over the group's rows in ascending 32-row steps by one thread (bitwise
/// reproducible). An empty group has tiles only when beta ≠ 1 (dw = beta · dw): no k-step, nothing prefetched.
template <class T>
__global__ void __launch_bounds__(GroupedGemmTile::kThreads) grouped_wgrad_kernel(const GroupedWgradParams p) {
  using Tile = GroupedGemmTile;
  VLPAR_DYN_SMEM(uint16_t, smem);  // kStages stages of [aᵀ 32×128 | dc 32×128]
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32, wm = warp / 2, wn = warp % 2;
  bool issued = false;  // k-step 0 of this tile already in flight (prefetched during the previous epilogue)
  for (int tile = int(blockIdx.x); tile < p.total_tiles; tile += int(gridDim.x)) {
    const GroupedWgradWork w = grouped_wgrad_work(p, tile);
    float acc[4][8][4] = {};
    const int k_steps = int((w.rows + Tile::kK - 1) / Tile::kK);
    grouped_gemm_mainloop<T, true, false>(acc, smem, k_steps, issued, [&](uint16_t* stage, int kt) {
      grouped_wgrad_load(stage, p, w, int64_t(kt) * Tile::kK);
    }, wm, wn, lane);
    const int next = tile + int(gridDim.x);
    issued = false;
    if (next < p.total_tiles) {
      const GroupedWgradWork nw = grouped_wgrad_work(p, next);
      issued = nw.rows > 0;
      if (issued) {
        grouped_wgrad_load(smem, p, nw, 0);
        ptx::cp_async_commit();
      }
    }
    grouped_gemm_store<float>(p.dw + w.group * p.dw_group_stride, p.ldw, w.m0, p.kd - w.m0, w.n0, p.n, p.alpha,
                              p.beta, acc, wm, wn, lane);
  }
}

}  // namespace vlpar::cuda_kernels
