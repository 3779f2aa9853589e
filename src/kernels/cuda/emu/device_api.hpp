#pragma once
// What a kernel sees in the emulated build (VLPAR_CUDA_EMU): the CUDA built-ins and device functions that vlpar's
// kernels use, implemented by the fiber runtime (emu/runtime.cpp). Included only through the prelude
// src/kernels/cuda/cuda_compat.cuh, after <cuda_runtime.h> (whose types — dim3, uint3, float4 — are reused).
//   threadIdx/blockIdx/blockDim/gridDim/warpSize : the current fiber's coordinates
//   __syncthreads(_count/_and/_or), __syncwarp   : block / warp barriers (yield points, call sites checked)
//   __shfl(_up/_down/_xor)_sync, __ballot_sync, __any_sync, __all_sync, __activemask : warp rendezvous
//   atomicAdd (f32, i32, u32, u64), __threadfence(_block)
//   VLPAR_SHARED / VLPAR_DYN_SMEM                 : static and dynamic shared memory in the block's arena
//   VLPAR_EMU_CHECK_ALIGNED                       : vector loads/stores check their alignment
// Every collective takes the caller's std::source_location (a default argument), so divergent barriers and
// shuffles are reported with file and line. Semantics: ../shared/spec/cuda-emulation.md §2–§4.
// Test: tests/emu/test_emu_runtime.cpp (ctest -L emu)
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <source_location>
#include <type_traits>

#ifndef VLPAR_CUDA_EMU
#error "emu/device_api.hpp belongs to the emulated CUDA build (VLPAR_CUDA_EMU); include cuda_compat.cuh instead"
#endif
#include <cuda_runtime.h>  // dim3, uint3 (kernel sources include it earlier, through cuda_compat.cuh)

namespace vlpar::emu {

/// The coordinates of the CUDA thread the calling fiber emulates.
struct ThreadCoords {
  uint3 thread_idx;
  uint3 block_idx;
  dim3 block_dim;
  dim3 grid_dim;
};

/// Set by the scheduler before it resumes a fiber; null outside an emulated kernel (on any OS thread).
extern thread_local const ThreadCoords* tls_coords;

/// The current fiber's coordinates; aborts with a message when called outside an emulated kernel.
const ThreadCoords& coords_slow();
inline const ThreadCoords& coords() { return tls_coords != nullptr ? *tls_coords : coords_slow(); }

enum class ShflKind : uint8_t { kIdx, kUp, kDown, kXor };
enum class VoteKind : uint8_t { kBallot, kAny, kAll };
enum class BarrierReduce : uint8_t { kNone, kCount, kAnd, kOr };

using Loc = std::source_location;

/// Block barrier; returns the reduction of pred over the block (0 for kNone).
int syncthreads(BarrierReduce reduce, int pred, Loc loc);
void syncwarp(unsigned mask, Loc loc);
uint32_t shfl32(ShflKind kind, unsigned mask, uint32_t value, int arg, int width, Loc loc);
unsigned vote(VoteKind kind, unsigned mask, int pred, Loc loc);
unsigned activemask();
void threadfence(Loc loc);

/// Shared memory: the block arena's static variable for `key` (one per call site and template instance),
/// allocated on first use in a block, and the dynamic region given at launch.
void* static_smem(const void* key, size_t bytes, size_t align, Loc loc);
void* dynamic_smem(size_t align, Loc loc);

/// Warp-level matrix instructions (emu/warp_matrix.cpp), full-warp collectives; operands as the PTX registers.
void mma_m16n8k16(bool bf16, float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2], const float (&c)[4],
                  Loc loc);
/// ldmatrix .x`count` (1, 2, 4), .trans or not: this lane's row address in, `count` registers out.
void ldmatrix(int count, bool trans, uint32_t* regs, const void* row, Loc loc);

/// cp.async (emu/async_copy.cpp): cp_size 4/8/16 bytes, src_size ≤ cp_size (the rest zero-filled).
void cp_async(void* dst, const void* src, int cp_size, int src_size, bool cache_global, Loc loc);
void cp_async_commit(Loc loc);
void cp_async_wait(int newest_pending, Loc loc);

/// Reports a rule violation of the current thread (kernel, block, thread, seed) and abandons the launch.
[[noreturn]] void fail(const char* rule, const char* detail, Loc loc);

/// Checks that p is aligned to `bytes` (a vector access of that width), else fail("misaligned vector access").
void check_aligned(const void* p, size_t bytes, Loc loc);

/// Atomics: read-modify-write of one element, a yield point; global memory through std::atomic_ref.
float atomic_add_f32(float* p, float v, Loc loc);
uint32_t atomic_add_u32(uint32_t* p, uint32_t v, Loc loc);
uint64_t atomic_add_u64(uint64_t* p, uint64_t v, Loc loc);

template <class T, class Tag>
T& shared_var(Loc loc = Loc::current()) {
  static char key;  // one object per (call site lambda type) → a unique address per VLPAR_SHARED
  return *static_cast<T*>(static_smem(&key, sizeof(T), alignof(T), loc));
}

template <class T>
uint32_t to_bits32(T v) {
  static_assert(sizeof(T) == 4 && std::is_trivially_copyable_v<T>);
  uint32_t u;
  std::memcpy(&u, &v, 4);
  return u;
}
template <class T>
T from_bits32(uint32_t u) {
  T v;
  std::memcpy(&v, &u, 4);
  return v;
}

/// One shuffle of a 4- or 8-byte value (8 bytes: two 32-bit shuffles, as the hardware does).
template <class T>
T shfl(ShflKind kind, unsigned mask, T v, int arg, int width, Loc loc) {
  static_assert(std::is_trivially_copyable_v<T> && (sizeof(T) == 4 || sizeof(T) == 8),
                "__shfl*_sync takes 4- or 8-byte values");
  if constexpr (sizeof(T) == 4) {
    return from_bits32<T>(shfl32(kind, mask, to_bits32(v), arg, width, loc));
  } else {
    uint32_t w[2];
    std::memcpy(w, &v, 8);
    w[0] = shfl32(kind, mask, w[0], arg, width, loc);
    w[1] = shfl32(kind, mask, w[1], arg, width, loc);
    T out;
    std::memcpy(&out, w, 8);
    return out;
  }
}

}  // namespace vlpar::emu

// ---- CUDA spellings ----------------------------------------------------------------------------------------
#undef threadIdx
#undef blockIdx
#undef blockDim
#undef gridDim
#undef warpSize
#define threadIdx (::vlpar::emu::coords().thread_idx)
#define blockIdx (::vlpar::emu::coords().block_idx)
#define blockDim (::vlpar::emu::coords().block_dim)
#define gridDim (::vlpar::emu::coords().grid_dim)
#define warpSize 32

inline void __syncthreads(::vlpar::emu::Loc loc = ::vlpar::emu::Loc::current()) {
  (void)::vlpar::emu::syncthreads(::vlpar::emu::BarrierReduce::kNone, 0, loc);
}
inline int __syncthreads_count(int pred, ::vlpar::emu::Loc loc = ::vlpar::emu::Loc::current()) {
  return ::vlpar::emu::syncthreads(::vlpar::emu::BarrierReduce::kCount, pred, loc);
}
inline int __syncthreads_and(int pred, ::vlpar::emu::Loc loc = ::vlpar::emu::Loc::current()) {
  return ::vlpar::emu::syncthreads(::vlpar::emu::BarrierReduce::kAnd, pred, loc);
}
inline int __syncthreads_or(int pred, ::vlpar::emu::Loc loc = ::vlpar::emu::Loc::current()) {
  return ::vlpar::emu::syncthreads(::vlpar::emu::BarrierReduce::kOr, pred, loc);
}
inline void __syncwarp(unsigned mask = 0xffffffffu, ::vlpar::emu::Loc loc = ::vlpar::emu::Loc::current()) {
  ::vlpar::emu::syncwarp(mask, loc);
}
template <class T>
T __shfl_sync(unsigned mask, T v, int src, int width = 32, ::vlpar::emu::Loc loc = ::vlpar::emu::Loc::current()) {
  return ::vlpar::emu::shfl(::vlpar::emu::ShflKind::kIdx, mask, v, src, width, loc);
}
template <class T>
T __shfl_up_sync(unsigned mask, T v, unsigned d, int width = 32,
                 ::vlpar::emu::Loc loc = ::vlpar::emu::Loc::current()) {
  return ::vlpar::emu::shfl(::vlpar::emu::ShflKind::kUp, mask, v, int(d), width, loc);
}
template <class T>
T __shfl_down_sync(unsigned mask, T v, unsigned d, int width = 32,
                   ::vlpar::emu::Loc loc = ::vlpar::emu::Loc::current()) {
  return ::vlpar::emu::shfl(::vlpar::emu::ShflKind::kDown, mask, v, int(d), width, loc);
}
template <class T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32,
                  ::vlpar::emu::Loc loc = ::vlpar::emu::Loc::current()) {
  return ::vlpar::emu::shfl(::vlpar::emu::ShflKind::kXor, mask, v, lane_mask, width, loc);
}
inline unsigned __ballot_sync(unsigned mask, int pred, ::vlpar::emu::Loc loc = ::vlpar::emu::Loc::current()) {
  return ::vlpar::emu::vote(::vlpar::emu::VoteKind::kBallot, mask, pred, loc);
}
inline int __any_sync(unsigned mask, int pred, ::vlpar::emu::Loc loc = ::vlpar::emu::Loc::current()) {
  return int(::vlpar::emu::vote(::vlpar::emu::VoteKind::kAny, mask, pred, loc));
}
inline int __all_sync(unsigned mask, int pred, ::vlpar::emu::Loc loc = ::vlpar::emu::Loc::current()) {
  return int(::vlpar::emu::vote(::vlpar::emu::VoteKind::kAll, mask, pred, loc));
}
inline unsigned __activemask() { return ::vlpar::emu::activemask(); }
inline void __threadfence(::vlpar::emu::Loc loc = ::vlpar::emu::Loc::current()) { ::vlpar::emu::threadfence(loc); }
inline void __threadfence_block(::vlpar::emu::Loc loc = ::vlpar::emu::Loc::current()) {
  ::vlpar::emu::threadfence(loc);
}
inline float atomicAdd(float* p, float v, ::vlpar::emu::Loc loc = ::vlpar::emu::Loc::current()) {
  return ::vlpar::emu::atomic_add_f32(p, v, loc);
}
inline int atomicAdd(int* p, int v, ::vlpar::emu::Loc loc = ::vlpar::emu::Loc::current()) {
  return int(::vlpar::emu::atomic_add_u32(reinterpret_cast<uint32_t*>(p), uint32_t(v), loc));
}
inline unsigned atomicAdd(unsigned* p, unsigned v, ::vlpar::emu::Loc loc = ::vlpar::emu::Loc::current()) {
  return ::vlpar::emu::atomic_add_u32(p, v, loc);
}
inline unsigned long long atomicAdd(unsigned long long* p, unsigned long long v,
                                    ::vlpar::emu::Loc loc = ::vlpar::emu::Loc::current()) {
  static_assert(sizeof(unsigned long long) == 8);
  return ::vlpar::emu::atomic_add_u64(reinterpret_cast<uint64_t*>(p), v, loc);
}
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }  // accurate; the device's is ≤ 2 ulp off

/// Static shared memory: `VLPAR_SHARED(float, red, [32]);` declares `float (&red)[32]` in the block's arena.
#define VLPAR_SHARED(T, name, dims) auto& name = ::vlpar::emu::shared_var<T dims, decltype([] {})>()
/// Dynamic shared memory (the launch's smem bytes) viewed as T*.
#define VLPAR_DYN_SMEM(T, name) \
  T* const name = static_cast<T*>(::vlpar::emu::dynamic_smem(alignof(T), ::vlpar::emu::Loc::current()))
#define VLPAR_EMU_CHECK_ALIGNED(p, bytes) ::vlpar::emu::check_aligned((p), (bytes), ::vlpar::emu::Loc::current())
