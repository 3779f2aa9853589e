// The MoE dispatch plan on the device (design in moe_permute_kernel.cuh's header): count per (chunk, expert), one
// scan, place per (chunk, expert). Independent of the payload dtype, so compiled once whatever VLPAR_DTYPES holds.
// SASS moe_plan_count_kernel moe_plan_scan_kernel moe_plan_place_kernel: BAR.SYNC stack<=0 threads=256
// Test: tests/gpu/test_cuda_moe_permute.cpp (ctest -L gpu; -L emu in the emulated build)
#include "cuda_compat.cuh"  // first: the prelude of every CUDA source

#include "launch.cuh"
#include "launch_utils.hpp"
#include "vlpar/core/log.hpp"
#include "vlpar/core/status.hpp"
#include "vlpar/kernels/cuda/moe_permute_params.hpp"

namespace vlpar::cuda_kernels {
namespace {

constexpr int kMoePlanThreads = 256;

/// Exclusive prefix sum of v over a block of kMoePlanThreads threads; total = the block's sum. scan: one int per
/// thread of shared memory. Every thread must call it (it synchronises the block).
__device__ __forceinline__ int block_exclusive_scan(int v, int* scan, int& total) {
  const int tid = int(threadIdx.x);
  int inclusive = v;  // kept in a register: a slot is only read by the threads above it
  scan[tid] = inclusive;
  __syncthreads();
  for (int off = 1; off < kMoePlanThreads; off *= 2) {  // Hillis–Steele: after step s, scan[i] sums 2^s inputs
    const int add = tid >= off ? scan[tid - off] : 0;
    __syncthreads();
    inclusive += add;
    scan[tid] = inclusive;
    __syncthreads();
  }
  total = scan[kMoePlanThreads - 1];
  __syncthreads();  // scan may be reused by the next call
  return inclusive - v;
}

/// Whether assignment a's id is out of range or repeats one of its token's earlier slots.
__device__ __forceinline__ bool moe_bad_assignment(const MoePlanParams& p, int64_t a, int id) {
  if (id < 0 || id >= p.experts) return true;
  for (int64_t b = a - a % p.top_k; b < a; ++b)
    if (p.indices[b] == id) return true;
  return false;
}

}  // namespace

// The kernels have external names (not in the anonymous namespace) so that the ptxas report and the emulator's
// launch log name them alike (tools/check_emu_coverage.py).
__global__ void __launch_bounds__(kMoePlanThreads) moe_plan_count_kernel(const MoePlanParams p) {
  VLPAR_SHARED(int, scan, [kMoePlanThreads]);
  const int e = int(blockIdx.y);
  const int64_t a0 = int64_t(blockIdx.x) * kMoePlanChunk;
  const int64_t a1 = a0 + kMoePlanChunk < p.assignments ? a0 + kMoePlanChunk : p.assignments;
  int n = 0;
  for (int64_t a = a0 + threadIdx.x; a < a1; a += kMoePlanThreads) {
    const int id = p.indices[a];
    n += id == e ? 1 : 0;
    if (e == 0 && moe_bad_assignment(p, a, id)) atomicMin(p.bad, int(a));
  }
  int total = 0;
  block_exclusive_scan(n, scan, total);
  if (threadIdx.x == 0) p.counts[int64_t(e) * p.chunks + blockIdx.x] = total;
}

__global__ void __launch_bounds__(kMoePlanThreads) moe_plan_scan_kernel(const MoePlanParams p) {
  VLPAR_SHARED(int, scan, [kMoePlanThreads]);
  const int64_t n = int64_t(p.experts) * p.chunks, per = (n + kMoePlanThreads - 1) / kMoePlanThreads;
  const int64_t lo = int64_t(threadIdx.x) * per, hi = lo + per < n ? lo + per : n;
  int sum = 0;  // R ≤ 2^31 − 1 (the op checks), so every partial sum fits
  for (int64_t i = lo; i < hi; ++i) sum += p.counts[i];
  int total = 0;
  int running = block_exclusive_scan(sum, scan, total);
  for (int64_t i = lo; i < hi; ++i) {
    const int c = p.counts[i];
    p.counts[i] = running;
    running += c;
  }
  __syncthreads();  // every first row written before they are read as offsets
  for (int e = int(threadIdx.x); e < p.experts; e += kMoePlanThreads) p.offsets[e] = p.counts[int64_t(e) * p.chunks];
  if (threadIdx.x == 0) p.offsets[p.experts] = total;
}

__global__ void __launch_bounds__(kMoePlanThreads) moe_plan_place_kernel(const MoePlanParams p) {
  VLPAR_SHARED(int, scan, [kMoePlanThreads]);
  const int e = int(blockIdx.y);
  const int64_t a0 = int64_t(blockIdx.x) * kMoePlanChunk;
  const int64_t a1 = a0 + kMoePlanChunk < p.assignments ? a0 + kMoePlanChunk : p.assignments;
  int row = p.counts[int64_t(e) * p.chunks + blockIdx.x];  // the first row of (e, this chunk)
  for (int64_t base = a0; base < a1; base += kMoePlanThreads) {  // block-uniform trip count
    const int64_t a = base + threadIdx.x;
    const int mine = a < a1 && p.indices[a] == e ? 1 : 0;
    int total = 0;
    const int before = block_exclusive_scan(mine, scan, total);
    if (mine) {
      p.row_assignment[row + before] = int32_t(a);
      p.assignment_row[a] = row + before;
    }
    row += total;
  }
}

Status moe_plan_run(const MoePlanParams& p, void* stream) {
  VLPAR_CHECK_CODE(p.experts <= 65535, StatusCode::kNotSupported,
                   "moe_dispatch_plan: {} experts; the CUDA plan takes at most 65535 (one grid row each)", p.experts);
  if (p.assignments == 0) return Status::Ok();  // the op writes the empty plan itself
  const dim3 grid(unsigned(p.chunks), unsigned(p.experts));
  if (print_configs())
    log_info("moe_dispatch_plan: R {} K {} E {} chunks {}", p.assignments, p.top_k, p.experts, p.chunks);
  VLPAR_RETURN_IF_ERROR(launch<moe_plan_count_kernel>(LaunchConfig{grid, dim3(kMoePlanThreads), 0, stream}, p));
  VLPAR_RETURN_IF_ERROR(launch<moe_plan_scan_kernel>(LaunchConfig{dim3(1), dim3(kMoePlanThreads), 0, stream}, p));
  return launch<moe_plan_place_kernel>(LaunchConfig{grid, dim3(kMoePlanThreads), 0, stream}, p);
}

}  // namespace vlpar::cuda_kernels
