// Kernels of the warp-matrix tests (declared in warp_matrix_kernels.hpp). Compiled like the library's CUDA
// sources in the emulated build, and by nvcc in the cuda stage (scripts/test.sh) so the PTX of the wrappers
// assembles for sm_80 and sm_90a. Test: tests/emu/test_emu_warp_matrix.cpp
// SASS (tools/check_sass.py, CI stage cuda: the wrappers must compile to the instructions they name):
// SASS mma_tile_kernel: HMMA.16816.F32.BF16 =HMMA.16816.F32 LDSM.16.M88.4 LDSM.16.M88.2 LDSM.16.MT88.2 LDGSTS.E.BYPASS.128 LDGDEPBAR DEPBAR.LE threads=32
// SASS mma_block_tile_kernel: HMMA.16816.F32.BF16 LDSM.16.M88.4 LDSM.16.MT88.2 LDGSTS.E.BYPASS.128 regs<=255 threads=128 dynsmem=65536
// SASS cp_async_roundtrip_kernel cp_async_refill_race_kernel: LDGSTS.E.BYPASS.128 LDGDEPBAR DEPBAR.LE threads=64
// SASS named_barrier_pipeline_kernel: BAR.SYNC BAR.ARV threads=128
#include "cuda_compat.cuh"  // first: the prelude of every CUDA source

#include "launch.cuh"
#include "ptx/barrier.cuh"
#include "ptx/cp_async.cuh"
#include "ptx/ldmatrix.cuh"
#include "ptx/mma.cuh"
#include "warp_matrix_kernels.hpp"

namespace vlpar::emu_test {
namespace {

using cuda_kernels::launch;
using cuda_kernels::LaunchConfig;

/// Copies `bytes` from global to shared memory, 16 bytes per thread per step (cp.async.cg), one group.
__device__ __forceinline__ void stage_in(uint8_t* smem, const uint8_t* gmem, int bytes, int tid, int threads) {
  for (int off = tid * 16; off < bytes; off += threads * 16) ptx::cp_async_cg16(smem + off, gmem + off);
  ptx::cp_async_commit();
}

__global__ void mma_tile_kernel(int bf16, int b_n_major, const uint16_t* a, const uint16_t* b, const float* c,
                                float* d, int fault) {
  VLPAR_SHARED(uint16_t, as, [16 * 16]);  // A row-major
  VLPAR_SHARED(uint16_t, bs, [16 * 8]);   // B: K×N row-major (b_n_major) or N×K row-major
  const int l = int(threadIdx.x), g = l >> 2, t = l & 3;
  stage_in(reinterpret_cast<uint8_t*>(as), reinterpret_cast<const uint8_t*>(a), 512, l, int(blockDim.x));
  stage_in(reinterpret_cast<uint8_t*>(bs), reinterpret_cast<const uint8_t*>(b), 256, l, int(blockDim.x));
  if (fault == int(TileFault::kExitInFlight) && l == 5) {
    VLPAR_SHARED(uint4, spare, [1]);
    ptx::cp_async_cg16(spare, b);
    return;
  }
  if (fault != int(TileFault::kNoWait)) ptx::cp_async_wait<0>();
  if (fault != int(TileFault::kNoBarrier) && fault != int(TileFault::kNoWait)) __syncthreads();
  uint32_t af[4], bfr[2];
  // A: lanes 0–15 give rows 0–15 at k 0, lanes 16–31 rows 0–15 at k 8 → matrices (rows 0–7 | 8–15) × (k 0 | 8).
  const int misalign = fault == int(TileFault::kMisalignedRow) ? 1 : 0;
  ptx::ldmatrix<4, false>(af, as + (l % 16) * 16 + (l / 16) * 8 + misalign);
  if (b_n_major) {
    ptx::ldmatrix<2, true>(bfr, bs + (l % 16) * 8);  // rows k 0–7, k 8–15 of K×N; .trans gives the col fragment
  } else {
    ptx::ldmatrix<2, false>(bfr, bs + (l % 8) * 16 + ((l / 8) % 2) * 8);  // rows n 0–7 at k 0 and at k 8
  }
  float cf[4], df[4];
  for (int i = 0; i < 4; ++i) cf[i] = c[(g + 8 * (i >> 1)) * 8 + 2 * t + (i & 1)];
  if (bf16) {
    ptx::mma_m16n8k16_bf16(df, af, bfr, cf);
  } else {
    ptx::mma_m16n8k16_f16(df, af, bfr, cf);
  }
  for (int i = 0; i < 4; ++i) d[(g + 8 * (i >> 1)) * 8 + 2 * t + (i & 1)] = df[i];
}

/// 4 warps, warp w computes rows 64·(w/2) .. +64 and columns 64·(w%2) .. +64 of the 128×128 block.
__global__ void mma_block_tile_kernel(const uint16_t* a, const uint16_t* b, float* d) {
  VLPAR_DYN_SMEM(uint16_t, smem);  // A 128×64 then B 64×128, bf16
  uint16_t* as = smem;
  uint16_t* bs = smem + 128 * 64;
  const int tid = int(threadIdx.x), l = tid % 32, w = tid / 32, g = l >> 2, t = l & 3;
  stage_in(reinterpret_cast<uint8_t*>(as), reinterpret_cast<const uint8_t*>(a), 128 * 64 * 2, tid, 128);
  stage_in(reinterpret_cast<uint8_t*>(bs), reinterpret_cast<const uint8_t*>(b), 64 * 128 * 2, tid, 128);
  ptx::cp_async_wait<0>();
  __syncthreads();
  const int m0 = 64 * (w / 2), n0 = 64 * (w % 2);
  float acc[4][8][4] = {};
  for (int k0 = 0; k0 < 64; k0 += 16) {
    uint32_t af[4][4], bfr[8][2];
    for (int mi = 0; mi < 4; ++mi)
      ptx::ldmatrix<4, false>(af[mi], as + (m0 + 16 * mi + l % 16) * 64 + k0 + (l / 16) * 8);
    for (int ni = 0; ni < 8; ++ni) ptx::ldmatrix<2, true>(bfr[ni], bs + (k0 + l % 16) * 128 + n0 + 8 * ni);
    for (int mi = 0; mi < 4; ++mi)
      for (int ni = 0; ni < 8; ++ni) ptx::mma_m16n8k16_bf16(acc[mi][ni], af[mi], bfr[ni], acc[mi][ni]);
  }
  for (int mi = 0; mi < 4; ++mi)
    for (int ni = 0; ni < 8; ++ni)
      for (int i = 0; i < 4; ++i)
        d[(m0 + 16 * mi + g + 8 * (i >> 1)) * 128 + n0 + 8 * ni + 2 * t + (i & 1)] = acc[mi][ni][i];
}

__global__ void cp_async_roundtrip_kernel(const uint8_t* src, uint8_t* out, int bytes, int zfill_src) {
  VLPAR_DYN_SMEM(uint8_t, s);
  const int tid = int(threadIdx.x), n = int(blockDim.x);
  for (int off = tid * 16; off < bytes; off += n * 16) ptx::cp_async_cg16(s + off, src + off, zfill_src);
  ptx::cp_async_commit();
  ptx::cp_async_wait<0>();
  __syncthreads();
  const int other = (tid + 1) % n;  // another thread's pieces
  for (int off = other * 16; off < bytes; off += n * 16)
    for (int i = 0; i < 16; ++i) out[off + i] = s[off + i];
}

__global__ void cp_async_refill_race_kernel(const uint8_t* src, uint8_t* out) {
  VLPAR_SHARED(uint8_t, stage, [32 * 16]);
  const int tid = int(threadIdx.x);
  ptx::cp_async_cg16(stage + tid * 16, src + tid * 16);
  ptx::cp_async_commit();
  ptx::cp_async_wait<0>();
  __syncthreads();
  out[tid] = stage[((tid + 1) % 32) * 16];                 // reads a neighbour's piece of the stage ...
  ptx::cp_async_cg16(stage + tid * 16, src + tid * 16);    // ... which the neighbour refills: no barrier between
  ptx::cp_async_commit();
  ptx::cp_async_wait<0>();
}

__global__ void named_barrier_pipeline_kernel(float* out, int fault) {
  VLPAR_SHARED(float, buf, [64]);
  const int t = int(threadIdx.x);
  const bool full = fault != int(PipelineFault::kNoFullBarrier), free = fault != int(PipelineFault::kNoFreeBarrier);
  for (int round = 0; round < 2; ++round) {
    if (t < 64) {  // producers
      if (fault == int(PipelineFault::kNoProducer)) return;
      if (round > 0 && free) ptx::named_barrier_sync(2, 128);
      buf[t] = float(100 * round + t);
      if (full) ptx::named_barrier_arrive(1, 128);
    } else {  // consumers
      if (full) ptx::named_barrier_sync(1, fault == int(PipelineFault::kCountMismatch) ? 64 : 128);
      out[64 * round + t - 64] = buf[t - 64];
      if (round == 0 && free) ptx::named_barrier_arrive(2, 128);
    }
  }
}

}  // namespace

Status named_barrier_pipeline(float* out, PipelineFault fault) {
  return launch<named_barrier_pipeline_kernel>(LaunchConfig{dim3(1), dim3(128), 0, nullptr}, out, int(fault));
}

Status mma_tile(bool bf16, bool b_n_major, const uint16_t* a, const uint16_t* b, const float* c, float* d,
                TileFault fault) {
  const unsigned threads = fault == TileFault::kPartialWarp ? 16 : 32;
  return launch<mma_tile_kernel>(LaunchConfig{dim3(1), dim3(threads), 0, nullptr}, int(bf16), int(b_n_major), a, b,
                                 c, d, int(fault));
}

Status mma_block_tile(const uint16_t* a, const uint16_t* b, float* d) {
  return launch<mma_block_tile_kernel>(LaunchConfig{dim3(1), dim3(128), 2 * 128 * 64 * 2, nullptr}, a, b, d);
}

Status cp_async_roundtrip(const uint8_t* src, uint8_t* out, int bytes, int zfill_src) {
  return launch<cp_async_roundtrip_kernel>(LaunchConfig{dim3(1), dim3(64), size_t(bytes), nullptr}, src, out, bytes,
                                           zfill_src);
}

Status cp_async_refill_race(const uint8_t* src, uint8_t* out) {
  return launch<cp_async_refill_race_kernel>(LaunchConfig{dim3(1), dim3(32), 0, nullptr}, src, out);
}

}  // namespace vlpar::emu_test
