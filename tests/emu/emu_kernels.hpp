#pragma once
// Small kernels that exercise the emulator (tests/emu/emu_kernels.cu): correct ones whose results the tests
// check against closed forms, and deliberately broken ones, each breaking one rule the emulator must report.
// Every host wrapper launches through launch<Kernel>() and returns its Status. Device pointers come from
// cudaMalloc (emulated device memory). Test: tests/emu/test_emu_runtime.cpp
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "vlpar/core/status.hpp"

namespace vlpar::emu_test {

// ---- correct kernels --------------------------------------------------------------------------------------
/// out[tid] for each shuffle kind: out[0..31] idx(src = arg[l]), [32..63] up(d), [64..95] down(d),
/// [96..127] xor(m), all with `width`; in = lane values.
Status shuffles(const uint32_t* in, const int* arg, int d, int m, int width, uint32_t* out);
/// out[0] = ballot(pred), out[1] = any, out[2] = all over the warp; pred[l] per lane.
Status votes(const int* pred, uint32_t* out);
/// Block (bx,by,bz), grid (gx,gy,gz): coords[linear global thread] = packed (thread, block) indices.
Status coordinates(dim3 grid, dim3 block, uint32_t* coords);
/// Block of n threads: out[0..2] = __syncthreads_count/and/or over pred[tid].
Status barrier_reductions(int n, const int* pred, int* out);
/// n threads add 1.0f to *global and to a shared counter; out[1] = the shared counter at the end.
Status atomics(int n, float* global, float* out);
/// Lane 0 writes shared memory, __syncwarp, every lane reads it (legal: ordered by the warp barrier).
Status warp_ordered_smem(float* out);
/// Block sum of in[0..n) through shared memory with barriers in the right places; out[0] = sum.
Status block_sum(int n, const float* in, float* out);
/// Every atomic kind on global and shared counters from n threads: out[0..10] (see the kernel).
Status atomics_of_every_kind(int n, int* out_i, unsigned* out_u, double* out_d);
/// __match_any_sync / __match_all_sync over 32 lanes with values v[lane]: out[l] = any, out[32 + l] = all,
/// out[64 + l] = all's predicate; 64-bit values when wide.
Status matches(const uint64_t* v, bool wide, unsigned* out);
/// Integer/float intrinsics of one thread on x: out[0..7] = popc, clz, ffs, brev, umulhi(x, x), float_as_uint(1.5),
/// and two __umul64hi of fixed operands.
Status intrinsics(unsigned x, unsigned* out);
/// dynamic shared memory of `bytes` (above 48 KiB the launcher opts in); each thread writes and reads back.
Status dynamic_smem(size_t bytes, int* out);

// ---- broken kernels (each breaks one rule) ----------------------------------------------------------------
Status smem_out_of_bounds();          // writes red[32] of a 32-float shared array
Status smem_uninitialised_read(float* out);  // reads a shared float nobody wrote
Status smem_race_read_after_write(float* out);   // reads a neighbour's slot without __syncthreads
Status smem_race_write_after_read(float* out);   // block sum missing the barrier before reusing its buffer
Status smem_race_after_write(bool second_writes, float* out);  // thread 0 writes, thread 32 then reads (or writes)
Status barrier_in_divergent_code();   // half the block returns, the other half waits at __syncthreads
Status barriers_at_different_sites(); // even threads at one __syncthreads, odd threads at another
Status deadlock_collective_vs_barrier();  // lane 0 waits in a shuffle, its warp at a barrier
Status shuffle_lane_outside_mask();   // all 32 lanes call __shfl_sync with mask 0x0000ffff
Status shuffle_source_outside_mask(); // lanes 0-15 (mask 0xffff) read lane 20
Status global_out_of_bounds(float* buf, int n);  // writes buf[n]
Status global_use_after_free(float* freed);      // reads a freed allocation
Status misaligned_vector_load(const float* buf, float* out);  // 16-byte load from buf + 1
Status stack_overflow();              // a large local array on a small fiber stack (death test)
Status spin_without_yield(volatile int* flag);   // waits on a flag no one sets (death test, timeout)
Status too_much_static_smem();        // a 240 KiB static shared array
Status block_too_large();             // 2048 threads
Status dynamic_smem_over_limit();     // 300 KiB of dynamic shared memory

}  // namespace vlpar::emu_test
