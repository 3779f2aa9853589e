#pragma once
// Grouped GEMM for sm_80+: c[rows of g] = alpha · a[rows of g] · op(b[g]) + beta · c[rows of g] over a ragged row
// split (design: ../shared/spec/cuda-kernels.md §4). A persistent grid: CTA i computes output tiles i, i + grid,
// i + 2·grid, … of the list ordered by (group, row tile, column tile); tile_offsets (prefix sums of the groups'
// tile counts) map a tile to its group by binary search, so empty groups cost nothing.
//   Tile 128 × 128 × 32 (kGroupedGemmTileRows/Cols), 4 warps as 2 × 2, each warp 64 × 64: 4 m16 × 8 n8 fp32
//   accumulators (128 registers). Two smem stages of A [128, 32] and B ([128 n, 32 k] when trans_b, [32 k, 128 n]
//   otherwise), 32 KiB, loaded by 16-byte cp.async (rows past the group and columns past N or Kd zero-filled): the
//   load of k-step kt+1 overlaps the MMAs of k-step kt. Operands through ldmatrix (.trans for a [Kd, N] b).
//   Epilogue: alpha·acc (+ beta·c) rounded once to OutT, two columns per store, rows and columns predicated.
// Every output element is computed by one thread with a fixed k order: bitwise identical across runs and grids.
// SASS (tools/check_sass.py, CI stage cuda): tensor-core MMAs fed by ldmatrix and a two-stage cp.async pipeline.
// SASS grouped_gemm_kernel<bf16, *>: HMMA.16816.F32.BF16 LDSM.16.M88.4 LDGSTS.E.BYPASS.128 DEPBAR.LE BAR.SYNC regs<=255 stack<=0 threads=128
// SASS grouped_gemm_kernel<f16, *>: HMMA.16816.F32 LDSM.16.M88.4 LDGSTS.E.BYPASS.128 DEPBAR.LE BAR.SYNC regs<=255 stack<=0 threads=128
// SASS grouped_gemm_kernel<*, *, false>: LDSM.16.MT88.4 dynsmem=32768
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
  static constexpr int kStageElems = kRows * kK + kCols * kK;  // A and B of one k-step, 16-bit
  static constexpr int kSmemBytes = 2 * kStageElems * 2;
};

/// The output tile `tile` of the list: its group (binary search of tile_offsets), row tile and column tile.
struct GroupedGemmWork {
  int group;
  int64_t row0;  // first row of the tile in a and c (absolute)
  int64_t rows;  // rows of the tile inside the group (≤ kRows)
  int64_t col0;
};

__device__ __forceinline__ GroupedGemmWork grouped_gemm_work(const GroupedGemmParams& p, int tile) {
  int lo = 0, hi = p.groups - 1;  // the last group whose first tile is ≤ tile (empty groups share offsets)
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (p.tile_offsets[mid] <= tile) lo = mid;
    else hi = mid - 1;
  }
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

/// acc += A · op(B) over one k-step held in `stage`, for warp (wm, wn)'s 64 × 64 quarter of the tile.
template <class T, bool kTransB>
__device__ __forceinline__ void grouped_gemm_mma(float (&acc)[4][8][4], const uint16_t* stage, int wm, int wn,
                                                 int lane) {
  using Tile = GroupedGemmTile;
  const uint16_t* sb = stage + Tile::kRows * Tile::kK;
#pragma unroll
  for (int kk = 0; kk < Tile::kK / 16; ++kk) {
    uint32_t af[4][4];
#pragma unroll
    for (int mi = 0; mi < 4; ++mi) load_a<Tile::kK>(af[mi], stage, 64 * wm + 16 * mi, 16 * kk, lane);
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

/// c = alpha · acc (+ beta · c) for the warp's rows < w.rows and columns < N, one rounding to OutT.
template <class OutT>
__device__ __forceinline__ void grouped_gemm_store(const GroupedGemmParams& p, const GroupedGemmWork& w,
                                                   const float (&acc)[4][8][4], int wm, int wn, int lane) {
#pragma unroll
  for (int mi = 0; mi < 4; ++mi)
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int64_t r = 64 * wm + 16 * mi + lane / 4 + 8 * hr;
      if (r >= w.rows) continue;
      OutT* row = static_cast<OutT*>(p.c) + (w.row0 + r) * p.ldc;
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        const int64_t col = w.col0 + 64 * wn + 8 * nt + 2 * (lane % 4);
        if (col >= p.n) continue;
        float x0 = p.alpha * acc[mi][nt][2 * hr], x1 = p.alpha * acc[mi][nt][2 * hr + 1];
        if constexpr (std::is_same_v<OutT, float>) {
          float2* dst = reinterpret_cast<float2*>(row + col);
          if (p.beta != 0.f) x0 += p.beta * dst->x, x1 += p.beta * dst->y;
          *dst = make_float2(x0, x1);
        } else {
          if (p.beta != 0.f) x0 += p.beta * to_float(row[col]), x1 += p.beta * to_float(row[col + 1]);
          *reinterpret_cast<uint32_t*>(row + col) = pack2<OutT>(x0, x1);
        }
      }
    }
}

template <class T, class OutT, bool kTransB>
__global__ void __launch_bounds__(GroupedGemmTile::kThreads) grouped_gemm_kernel(const GroupedGemmParams p) {
  using Tile = GroupedGemmTile;
  VLPAR_DYN_SMEM(uint16_t, smem);  // two stages of [A 128×32 | B 128×32]
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32, wm = warp / 2, wn = warp % 2;
  const int k_steps = int((p.kd + Tile::kK - 1) / Tile::kK);
  for (int tile = int(blockIdx.x); tile < p.total_tiles; tile += int(gridDim.x)) {
    const GroupedGemmWork w = grouped_gemm_work(p, tile);
    float acc[4][8][4] = {};
    if (k_steps > 0) {
      grouped_gemm_load<kTransB>(smem, p, w, 0);
      ptx::cp_async_commit();
    }
    for (int kt = 0; kt < k_steps; ++kt) {
      if (kt + 1 < k_steps) {
        grouped_gemm_load<kTransB>(smem + ((kt + 1) & 1) * Tile::kStageElems, p, w, int64_t(kt + 1) * Tile::kK);
        ptx::cp_async_commit();
        ptx::cp_async_wait<1>();  // k-step kt landed; kt + 1 may still be in flight
      } else {
        ptx::cp_async_wait<0>();
      }
      __syncthreads();  // every thread's copies of k-step kt are visible
      grouped_gemm_mma<T, kTransB>(acc, smem + (kt & 1) * Tile::kStageElems, wm, wn, lane);
      __syncthreads();  // every warp is done with this stage before the next k-step's load refills it
    }
    grouped_gemm_store<OutT>(p, w, acc, wm, wn, lane);
  }
}

}  // namespace vlpar::cuda_kernels
