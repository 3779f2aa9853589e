#pragma once
// What a kernel sees in the emulated build (VLPAR_CUDA_EMU): the CUDA built-ins and device functions that vlpar's
// kernels use, implemented by the fiber runtime (emu/runtime.cpp). Included only through the prelude
// src/kernels/cuda/cuda_compat.cuh, after <cuda_runtime.h> (whose types — dim3, uint3, float4 — are reused).
//   threadIdx/blockIdx/blockDim/gridDim/warpSize : the current fiber's coordinates
//   __syncthreads(_count/_and/_or), __syncwarp   : block / warp barriers (yield points, call sites checked)
//   __shfl(_up/_down/_xor)_sync, __ballot_sync, __any_sync, __all_sync, __match_any/all_sync, __activemask
//                                                 : warp rendezvous
//   atomic{Add,Sub,Exch,Min,Max,Inc,Dec,CAS,And,Or,Xor} (emu/atomics.cpp), __threadfence(_block)
//   __popc, __clz, __ffs, __brev, __umulhi, bit casts, __expf, … : intrinsics the host headers lack
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
/// bar.sync (wait) / bar.arrive (no wait) on barrier id 1..15 counting `threads` (a multiple of 32).
void named_barrier(int id, int threads, bool wait, Loc loc);
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

/// Atomics (emu/atomics.cpp): read-modify-write of one element, a yield point; returns the old value.
enum class AtomicOp : uint8_t { kAdd, kSub, kExch, kMin, kMax, kInc, kDec, kCas, kAnd, kOr, kXor };
int32_t atomic_i32(int32_t* p, AtomicOp op, int32_t v, int32_t cmp, Loc loc);
uint32_t atomic_u32(uint32_t* p, AtomicOp op, uint32_t v, uint32_t cmp, Loc loc);
uint64_t atomic_u64(uint64_t* p, AtomicOp op, uint64_t v, uint64_t cmp, Loc loc);
float atomic_f32(float* p, AtomicOp op, float v, Loc loc);
double atomic_f64(double* p, AtomicOp op, double v, Loc loc);

/// __match_any_sync / __match_all_sync of a 4- or 8-byte value (bitwise comparison).
unsigned match(bool all, unsigned mask, uint64_t value, int bytes, int* pred, Loc loc);

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
template <class T>
unsigned __match_any_sync(unsigned mask, T value, ::vlpar::emu::Loc loc = ::vlpar::emu::Loc::current()) {
  static_assert(std::is_trivially_copyable_v<T> && (sizeof(T) == 4 || sizeof(T) == 8));
  uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(T));
  return ::vlpar::emu::match(false, mask, bits, int(sizeof(T)), nullptr, loc);
}
template <class T>
unsigned __match_all_sync(unsigned mask, T value, int* pred, ::vlpar::emu::Loc loc = ::vlpar::emu::Loc::current()) {
  static_assert(std::is_trivially_copyable_v<T> && (sizeof(T) == 4 || sizeof(T) == 8));
  uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(T));
  return ::vlpar::emu::match(true, mask, bits, int(sizeof(T)), pred, loc);
}

// Atomics on int, unsigned, unsigned long long (every operation), float (add, exch) and double (add).
#define VLPAR_EMU_LOC_ARG ::vlpar::emu::Loc loc = ::vlpar::emu::Loc::current()
#define VLPAR_EMU_ATOMIC_INT(name, op)                                                                          \
  inline int name(int* p, int v, VLPAR_EMU_LOC_ARG) {                                                          \
    return ::vlpar::emu::atomic_i32(p, ::vlpar::emu::AtomicOp::op, v, 0, loc);                                  \
  }                                                                                                             \
  inline unsigned name(unsigned* p, unsigned v, VLPAR_EMU_LOC_ARG) {                                           \
    return ::vlpar::emu::atomic_u32(p, ::vlpar::emu::AtomicOp::op, v, 0, loc);                                  \
  }                                                                                                             \
  inline unsigned long long name(unsigned long long* p, unsigned long long v, VLPAR_EMU_LOC_ARG) {             \
    return ::vlpar::emu::atomic_u64(reinterpret_cast<uint64_t*>(p), ::vlpar::emu::AtomicOp::op, v, 0, loc);    \
  }
VLPAR_EMU_ATOMIC_INT(atomicAdd, kAdd)
VLPAR_EMU_ATOMIC_INT(atomicSub, kSub)
VLPAR_EMU_ATOMIC_INT(atomicExch, kExch)
VLPAR_EMU_ATOMIC_INT(atomicMin, kMin)
VLPAR_EMU_ATOMIC_INT(atomicMax, kMax)
VLPAR_EMU_ATOMIC_INT(atomicAnd, kAnd)
VLPAR_EMU_ATOMIC_INT(atomicOr, kOr)
VLPAR_EMU_ATOMIC_INT(atomicXor, kXor)
#undef VLPAR_EMU_ATOMIC_INT
inline unsigned atomicInc(unsigned* p, unsigned v, VLPAR_EMU_LOC_ARG) {
  return ::vlpar::emu::atomic_u32(p, ::vlpar::emu::AtomicOp::kInc, v, 0, loc);
}
inline unsigned atomicDec(unsigned* p, unsigned v, VLPAR_EMU_LOC_ARG) {
  return ::vlpar::emu::atomic_u32(p, ::vlpar::emu::AtomicOp::kDec, v, 0, loc);
}
inline int atomicCAS(int* p, int cmp, int v, VLPAR_EMU_LOC_ARG) {
  return ::vlpar::emu::atomic_i32(p, ::vlpar::emu::AtomicOp::kCas, v, cmp, loc);
}
inline unsigned atomicCAS(unsigned* p, unsigned cmp, unsigned v, VLPAR_EMU_LOC_ARG) {
  return ::vlpar::emu::atomic_u32(p, ::vlpar::emu::AtomicOp::kCas, v, cmp, loc);
}
inline unsigned long long atomicCAS(unsigned long long* p, unsigned long long cmp, unsigned long long v,
                                    VLPAR_EMU_LOC_ARG) {
  return ::vlpar::emu::atomic_u64(reinterpret_cast<uint64_t*>(p), ::vlpar::emu::AtomicOp::kCas, v, cmp, loc);
}
inline float atomicAdd(float* p, float v, VLPAR_EMU_LOC_ARG) {
  return ::vlpar::emu::atomic_f32(p, ::vlpar::emu::AtomicOp::kAdd, v, loc);
}
inline float atomicExch(float* p, float v, VLPAR_EMU_LOC_ARG) {
  return ::vlpar::emu::atomic_f32(p, ::vlpar::emu::AtomicOp::kExch, v, loc);
}
inline double atomicAdd(double* p, double v, VLPAR_EMU_LOC_ARG) {
  return ::vlpar::emu::atomic_f64(p, ::vlpar::emu::AtomicOp::kAdd, v, loc);
}
#undef VLPAR_EMU_LOC_ARG

// Integer and float intrinsics the host headers lack, bit-exact where CUDA defines the result (__clz(0) = 32,
// __ffs(0) = 0); the approximate ones (__expf, __logf, __fdividef, rsqrtf) are the accurate functions here, within
// the device's ≤ 2 ulp (docs/cuda-emulation.md, "Floating point").
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz(unsigned(x)); }
inline int __clzll(long long x) { return x == 0 ? 64 : __builtin_clzll((unsigned long long)x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline unsigned __brev(unsigned x) {
  unsigned r = 0;
  for (int i = 0; i < 32; ++i) r |= ((x >> i) & 1u) << (31 - i);
  return r;
}
inline unsigned __umulhi(unsigned a, unsigned b) { return unsigned((uint64_t(a) * b) >> 32); }
inline int __mulhi(int a, int b) { return int((int64_t(a) * b) >> 32); }
inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {  // schoolbook on 32-bit halves
  const uint64_t al = a & 0xffffffffu, ah = a >> 32, bl = b & 0xffffffffu, bh = b >> 32;
  const uint64_t mid = (al * bl >> 32) + (ah * bl & 0xffffffffu) + (al * bh & 0xffffffffu);
  return ah * bh + (ah * bl >> 32) + (al * bh >> 32) + (mid >> 32);
}
inline unsigned __float_as_uint(float x) { return ::vlpar::emu::to_bits32(x); }
inline float __uint_as_float(unsigned x) { return ::vlpar::emu::from_bits32<float>(x); }
inline int __float_as_int(float x) { return int(::vlpar::emu::to_bits32(x)); }
inline float __int_as_float(int x) { return ::vlpar::emu::from_bits32<float>(unsigned(x)); }
inline float __saturatef(float x) { return x != x ? 0.f : (x < 0.f ? 0.f : (x > 1.f ? 1.f : x)); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
template <class T>
T __ldg(const T* p) {
  return *p;
}

/// Static shared memory: `VLPAR_SHARED(float, red, [32]);` declares `float (&red)[32]` in the block's arena.
#define VLPAR_SHARED(T, name, dims) auto& name = ::vlpar::emu::shared_var<T dims, decltype([] {})>()
/// Dynamic shared memory (the launch's smem bytes) viewed as T*.
#define VLPAR_DYN_SMEM(T, name) \
  T* const name = static_cast<T*>(::vlpar::emu::dynamic_smem(alignof(T), ::vlpar::emu::Loc::current()))
#define VLPAR_EMU_CHECK_ALIGNED(p, bytes) ::vlpar::emu::check_aligned((p), (bytes), ::vlpar::emu::Loc::current())
