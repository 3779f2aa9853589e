// Kernels of the emulator's own tests (declared in emu_kernels.hpp). Compiled like the library's CUDA sources in
// the emulated build (C++, instrumented); never part of the library. Test: tests/emu/test_emu_runtime.cpp
#include "cuda_compat.cuh"  // first: the prelude of every CUDA source

#include "emu_kernels.hpp"
#include "launch.cuh"

namespace vlpar::emu_test {
namespace {

using cuda_kernels::launch;
using cuda_kernels::LaunchConfig;

LaunchConfig one_block(unsigned threads, size_t smem = 0) { return LaunchConfig{dim3(1), dim3(threads), smem, nullptr}; }

// ---- correct kernels --------------------------------------------------------------------------------------

__global__ void shuffles_kernel(const uint32_t* in, const int* arg, int d, int m, int width, uint32_t* out) {
  const int l = int(threadIdx.x);
  const uint32_t v = in[l];
  out[l] = __shfl_sync(0xffffffffu, v, arg[l], width);
  out[32 + l] = __shfl_up_sync(0xffffffffu, v, unsigned(d), width);
  out[64 + l] = __shfl_down_sync(0xffffffffu, v, unsigned(d), width);
  out[96 + l] = __shfl_xor_sync(0xffffffffu, v, m, width);
}

__global__ void votes_kernel(const int* pred, uint32_t* out) {
  const int l = int(threadIdx.x);
  const uint32_t b = __ballot_sync(0xffffffffu, pred[l]);
  const int any = __any_sync(0xffffffffu, pred[l]);
  const int all = __all_sync(0xffffffffu, pred[l]);
  if (l == 0) {
    out[0] = b;
    out[1] = uint32_t(any);
    out[2] = uint32_t(all);
  }
}

__global__ void coordinates_kernel(uint32_t* coords) {
  const unsigned block_linear = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  const unsigned threads = blockDim.x * blockDim.y * blockDim.z;
  const unsigned tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  coords[block_linear * threads + tid] = (threadIdx.x << 0) | (threadIdx.y << 6) | (threadIdx.z << 12) |
                                         (blockIdx.x << 16) | (blockIdx.y << 20) | (blockIdx.z << 24);
}

__global__ void barrier_reductions_kernel(const int* pred, int* out) {
  const int p = pred[threadIdx.x];
  const int count = __syncthreads_count(p);
  const int all = __syncthreads_and(p);
  const int any = __syncthreads_or(p);
  if (threadIdx.x == 0) {
    out[0] = count;
    out[1] = all;
    out[2] = any;
  }
}

__global__ void atomics_kernel(float* global, float* out) {
  VLPAR_SHARED(float, counter, [1]);
  if (threadIdx.x == 0) counter[0] = 0.f;
  __syncthreads();
  atomicAdd(global, 1.0f);
  atomicAdd(&counter[0], 1.0f);
  __syncthreads();
  if (threadIdx.x == 0) out[1] = counter[0];
}

__global__ void warp_ordered_smem_kernel(float* out) {
  VLPAR_SHARED(float, s, [1]);
  if (threadIdx.x == 0) s[0] = 42.f;
  __syncwarp();
  out[threadIdx.x] = s[0];
}

__global__ void atomics_of_every_kind_kernel(int* gi, unsigned* gu, double* gd) {
  VLPAR_SHARED(int, si, [2]);
  const int t = int(threadIdx.x);
  if (t == 0) si[0] = si[1] = 0;
  __syncthreads();
  atomicMax(&gi[0], t);
  atomicMin(&gi[1], -t);
  atomicSub(&gi[2], 2);
  atomicOr(&gu[0], 1u << (t % 32));
  atomicXor(&gu[1], 1u << (t % 32));
  atomicAnd(&gu[2], ~(1u << (t % 32)));
  atomicInc(&gu[3], 6u);          // counts 0..6 then wraps: n increments leave n % 7
  atomicDec(&gu[4], 100u);
  int seen = gi[3];               // a CAS loop: each thread adds 1 exactly once
  for (int prev; (prev = atomicCAS(&gi[3], seen, seen + 1)) != seen;) seen = prev;
  atomicExch(&gi[4], t);
  (void)atomicCAS(&gi[7], -1, t);  // never equal: gi[7] keeps its value
  atomicAdd(gd, 0.5);
  atomicMax(&si[0], t);
  atomicAdd(&si[1], 3);
  __syncthreads();
  if (t == 0) {
    gi[5] = si[0];
    gi[6] = si[1];
  }
}

__global__ void matches_kernel(const uint64_t* v, int wide, unsigned* out) {
  const int l = int(threadIdx.x);
  int pred = -1;
  if (wide) {
    out[l] = __match_any_sync(0xffffffffu, static_cast<unsigned long long>(v[l]));
    out[32 + l] = __match_all_sync(0xffffffffu, static_cast<unsigned long long>(v[l]), &pred);
  } else {
    out[l] = __match_any_sync(0xffffffffu, unsigned(v[l]));
    out[32 + l] = __match_all_sync(0xffffffffu, unsigned(v[l]), &pred);
  }
  out[64 + l] = unsigned(pred);
}

__global__ void intrinsics_kernel(unsigned x, unsigned* out) {
  out[0] = unsigned(__popc(x));
  out[1] = unsigned(__clz(int(x)));
  out[2] = unsigned(__ffs(int(x)));
  out[3] = __brev(x);
  out[4] = __umulhi(x, x);
  out[5] = __float_as_uint(1.5f);
  const unsigned long long all = 0xffffffffffffffffull;
  out[6] = unsigned(__umul64hi(all, all));        // (2^64 - 1)^2 >> 64 = 2^64 - 2: low word 0xfffffffe
  out[7] = unsigned(__umul64hi(1ull << 32, 1ull << 32));  // 2^64 >> 64 = 1
}

/// The block sum of reduce.cuh's shape: per-thread partials → smem → thread 0 adds them in order.
__global__ void block_sum_kernel(int n, const float* in, float* out) {
  VLPAR_SHARED(float, part, [256]);
  const int t = int(threadIdx.x);
  part[t] = t < n ? in[t] : 0.f;
  __syncthreads();
  if (t == 0) {
    float s = 0.f;
    for (int i = 0; i < int(blockDim.x); ++i) s += part[i];
    out[0] = s;
  }
}

__global__ void dynamic_smem_kernel(int words, int* out) {
  VLPAR_DYN_SMEM(int, buf);
  for (int i = int(threadIdx.x); i < words; i += int(blockDim.x)) buf[i] = i;
  __syncthreads();
  int bad = 0;
  for (int i = int(threadIdx.x); i < words; i += int(blockDim.x)) bad += buf[words - 1 - i] != words - 1 - i;
  if (bad != 0) atomicAdd(out, bad);
}

// ---- broken kernels ---------------------------------------------------------------------------------------

__global__ void smem_out_of_bounds_kernel() {
  VLPAR_SHARED(float, red, [32]);
  red[threadIdx.x] = 1.f;  // launched with 33 threads: thread 32 writes one past the end
}

__global__ void smem_uninitialised_read_kernel(float* out) {
  VLPAR_SHARED(float, s, [64]);
  if (threadIdx.x < 32) s[threadIdx.x] = 1.f;
  __syncthreads();
  out[threadIdx.x] = s[threadIdx.x];  // threads 32..63 read slots nobody wrote
}

/// Whichever of the two threads runs first, the pair conflicts: the read sees the other warp's write of this
/// interval (read after write), or the other warp's later write overwrites what was read (write after read).
__global__ void smem_race_read_after_write_kernel(float* out) {
  VLPAR_SHARED(float, s, [64]);
  s[threadIdx.x] = 0.f;
  __syncthreads();
  s[threadIdx.x] = float(threadIdx.x);
  out[threadIdx.x] = s[(threadIdx.x + 32) % 64];  // missing __syncthreads: the other warp's slot
}

/// Two block sums through one buffer without the barrier that protects its reuse (reduce.cuh's second one).
__global__ void smem_race_write_after_read_kernel(float* out) {
  VLPAR_SHARED(float, red, [2]);
  const int t = int(threadIdx.x), warp = t / 32, lane = t % 32;
  for (int round = 0; round < 2; ++round) {
    if (lane == 0) red[warp] = float(round + 1);
    __syncthreads();
    out[round * 64 + t] = red[0] + red[1];
    // missing: __syncthreads() before the next round overwrites red
  }
}

/// Thread 0 writes s[0]; thread 32 reads it (or writes it) in the same interval. Under round-robin order thread 0
/// runs first, so only the read-after-write (write-after-write) check can report it.
__global__ void smem_race_after_write_kernel(int second_writes, float* out) {
  VLPAR_SHARED(float, s, [1]);
  if (threadIdx.x == 32) s[0] = 0.f;
  __syncthreads();
  if (threadIdx.x == 0) s[0] = 1.f;
  if (threadIdx.x == 32) {
    if (second_writes) {
      s[0] = 2.f;
    } else {
      out[0] = s[0];
    }
  }
}

__global__ void barrier_in_divergent_code_kernel() {
  if (threadIdx.x >= 32) return;
  __syncthreads();
}

__global__ void barriers_at_different_sites_kernel() {
  if (threadIdx.x % 2 == 0) {
    __syncthreads();
  } else {
    __syncthreads();
  }
}

__global__ void deadlock_kernel() {
  if (threadIdx.x == 0) (void)__shfl_sync(0xffffffffu, 1, 0);
  __syncthreads();
}

__global__ void shuffle_lane_outside_mask_kernel() { (void)__shfl_sync(0x0000ffffu, 1.f, 0); }

__global__ void shuffle_source_outside_mask_kernel() {
  if (threadIdx.x < 16) (void)__shfl_sync(0x0000ffffu, 1.f, 20);
}

__global__ void global_out_of_bounds_kernel(float* buf, int n) { buf[n - 31 + int(threadIdx.x)] = 1.f; }

__global__ void global_read_kernel(const float* buf, float* sink) { sink[0] = buf[threadIdx.x]; }

struct alignas(16) F4 {
  float v[4];
};

__global__ void misaligned_vector_load_kernel(const float* buf, float* out) {
  const float* p = buf + 1;
  VLPAR_EMU_CHECK_ALIGNED(p, sizeof(F4));
  const F4 x = *reinterpret_cast<const F4*>(p);
  out[0] = x.v[0];
}

__global__ void stack_overflow_kernel(float* out) {
  volatile float big[64 * 1024];  // 256 KiB of locals: more than a 64 KiB fiber stack
  for (int i = 0; i < 64 * 1024; i += 1024) big[i] = float(i);
  out[0] = big[1024];
}

__global__ void spin_kernel(volatile int* flag) {
  while (*flag == 0) {
  }
}

__global__ void too_much_static_smem_kernel(float* out) {
  VLPAR_SHARED(float, huge, [240 * 256]);  // 240 KiB
  huge[threadIdx.x] = 1.f;
  out[0] = huge[0];
}

__global__ void noop_kernel() {}

}  // namespace

Status shuffles(const uint32_t* in, const int* arg, int d, int m, int width, uint32_t* out) {
  return launch<shuffles_kernel>(one_block(32), in, arg, d, m, width, out);
}
Status votes(const int* pred, uint32_t* out) { return launch<votes_kernel>(one_block(32), pred, out); }
Status coordinates(dim3 grid, dim3 block, uint32_t* coords) {
  return launch<coordinates_kernel>(LaunchConfig{grid, block, 0, nullptr}, coords);
}
Status barrier_reductions(int n, const int* pred, int* out) {
  return launch<barrier_reductions_kernel>(one_block(unsigned(n)), pred, out);
}
Status atomics(int n, float* global, float* out) { return launch<atomics_kernel>(one_block(unsigned(n)), global, out); }
Status warp_ordered_smem(float* out) { return launch<warp_ordered_smem_kernel>(one_block(32), out); }
Status block_sum(int n, const float* in, float* out) { return launch<block_sum_kernel>(one_block(256), n, in, out); }
Status atomics_of_every_kind(int n, int* out_i, unsigned* out_u, double* out_d) {
  return launch<atomics_of_every_kind_kernel>(one_block(unsigned(n)), out_i, out_u, out_d);
}
Status matches(const uint64_t* v, bool wide, unsigned* out) {
  return launch<matches_kernel>(one_block(32), v, int(wide), out);
}
Status intrinsics(unsigned x, unsigned* out) { return launch<intrinsics_kernel>(one_block(1), x, out); }
Status dynamic_smem(size_t bytes, int* out) {
  return launch<dynamic_smem_kernel>(one_block(128, bytes), int(bytes / sizeof(int)), out);
}

Status smem_out_of_bounds() { return launch<smem_out_of_bounds_kernel>(one_block(33)); }
Status smem_uninitialised_read(float* out) { return launch<smem_uninitialised_read_kernel>(one_block(64), out); }
Status smem_race_read_after_write(float* out) {
  return launch<smem_race_read_after_write_kernel>(one_block(64), out);
}
Status smem_race_write_after_read(float* out) {
  return launch<smem_race_write_after_read_kernel>(one_block(64), out);
}
Status smem_race_after_write(bool second_writes, float* out) {
  return launch<smem_race_after_write_kernel>(one_block(64), int(second_writes), out);
}
Status barrier_in_divergent_code() { return launch<barrier_in_divergent_code_kernel>(one_block(64)); }
Status barriers_at_different_sites() { return launch<barriers_at_different_sites_kernel>(one_block(64)); }
Status deadlock_collective_vs_barrier() { return launch<deadlock_kernel>(one_block(64)); }
Status shuffle_lane_outside_mask() { return launch<shuffle_lane_outside_mask_kernel>(one_block(32)); }
Status shuffle_source_outside_mask() { return launch<shuffle_source_outside_mask_kernel>(one_block(32)); }
Status global_out_of_bounds(float* buf, int n) { return launch<global_out_of_bounds_kernel>(one_block(32), buf, n); }
Status global_use_after_free(float* freed) {
  float* sink = nullptr;
  if (cudaMalloc(reinterpret_cast<void**>(&sink), sizeof(float)) != cudaSuccess)
    return VLPAR_STATUS(StatusCode::kInternal, "cudaMalloc failed");
  Status s = launch<global_read_kernel>(one_block(1), static_cast<const float*>(freed), sink);
  (void)cudaFree(sink);
  return s;
}
Status misaligned_vector_load(const float* buf, float* out) {
  return launch<misaligned_vector_load_kernel>(one_block(1), buf, out);
}
Status stack_overflow() {
  float* out = nullptr;
  (void)cudaMalloc(reinterpret_cast<void**>(&out), sizeof(float));
  return launch<stack_overflow_kernel>(one_block(1), out);
}
Status spin_without_yield(volatile int* flag) { return launch<spin_kernel>(one_block(1), flag); }
Status too_much_static_smem() {
  float* out = nullptr;
  (void)cudaMalloc(reinterpret_cast<void**>(&out), sizeof(float));
  return launch<too_much_static_smem_kernel>(one_block(32), out);
}
Status block_too_large() { return launch<noop_kernel>(one_block(2048)); }
Status dynamic_smem_over_limit() { return launch<noop_kernel>(one_block(32, 300 * 1024)); }

}  // namespace vlpar::emu_test
