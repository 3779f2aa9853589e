#pragma once
// Kernels of the warp-matrix tests (tests/emu/warp_matrix_kernels.cu): one m16n8k16 tile through cp.async →
// ldmatrix → mma.sync as a GEMM kernel would do it, and broken variants, each breaking one rule. Device pointers
// from cudaMalloc. Test: tests/emu/test_emu_warp_matrix.cpp
#include <cuda_runtime.h>

#include <cstdint>

#include "vlpar/core/status.hpp"

namespace vlpar::emu_test {

enum class TileFault {
  kNone,
  kNoWait,          // reads the cp.async destination without cp.async.wait_group
  kNoBarrier,       // waits for its own copies but reads other threads' without __syncthreads
  kExitInFlight,    // one thread issues a copy it never waits for
  kMisalignedRow,   // an ldmatrix row address off by 2 bytes
  kPartialWarp,     // mma with 16 threads in the block
};

/// D(16×8, f32) = A(16×16) · B(16×8) + C: A row-major bf16/f16 bits; B as K×N row-major when b_n_major (loaded
/// with ldmatrix.trans) else N×K row-major (K-major, loaded without .trans); C, D row-major 16×8 f32.
Status mma_tile(bool bf16, bool b_n_major, const uint16_t* a, const uint16_t* b, const float* c, float* d,
                TileFault fault = TileFault::kNone);

/// 128×128 (f32) += A(128×64) · B(64×128), bf16, 4 warps of 64×64 each through ldmatrix + mma.sync (the
/// benchmark tile of docs/cuda-emulation.md); A row-major, B K×N row-major.
Status mma_block_tile(const uint16_t* a, const uint16_t* b, float* d);

/// cp.async of `bytes` (a multiple of 16) from src into shared memory in 16-byte pieces, each thread one piece
/// with src_bytes = zfill_src (16: plain copy), commit, wait, __syncthreads, then each thread copies another
/// thread's piece to out.
Status cp_async_roundtrip(const uint8_t* src, uint8_t* out, int bytes, int zfill_src);

/// A thread reads stage 0 while another refills it with cp.async in the same barrier interval.
Status cp_async_refill_race(const uint8_t* src, uint8_t* out);

enum class PipelineFault {
  kNone,
  kNoFullBarrier,  // consumers read without waiting for the producers' "full" barrier
  kNoFreeBarrier,  // producers overwrite without waiting for the consumers' "free" barrier
  kCountMismatch,  // the consumers count 64 threads at the barrier the producers count 128 at
  kNoProducer,     // the producers never arrive: the consumers wait for ever
};

/// Two warp-specialised rounds over one 64-float shared buffer, 4 warps: warps 0–1 produce (buf[t] = 100·round
/// + t), warps 2–3 consume into out[64·round + t − 64], synchronised only by named barriers 1 ("full": producers
/// arrive, consumers sync) and 2 ("free": consumers arrive, producers sync).
Status named_barrier_pipeline(float* out, PipelineFault fault);

}  // namespace vlpar::emu_test
