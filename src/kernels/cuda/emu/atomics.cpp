// Emulated atomics (CUDA C++ Programming Guide, "Atomic Functions"): one read-modify-write, a yield point. A
// fiber is never preempted between yield points, so a plain RMW is atomic with respect to the block's other
// threads; global memory goes through a compare-exchange loop on std::atomic_ref so that blocks on other OS
// threads stay correct too. The access is checked like any other (bounds, alignment, initialised shared memory);
// atomics of different threads do not race with each other. Return value: the old value, always.
// Wrap rules: atomicInc stores (old >= v) ? 0 : old + 1; atomicDec stores (old == 0 || old > v) ? v : old - 1.
// Test: tests/emu/test_emu_runtime.cpp (EmuScheduled.AtomicsOfEveryKind)
#include <fmt/core.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include "device_memory.hpp"
#include "runtime.hpp"

namespace vlpar::emu {
namespace {

template <class T>
T apply(AtomicOp op, T old, T v, T cmp) {
  switch (op) {
    case AtomicOp::kAdd: return T(old + v);
    case AtomicOp::kSub: return T(old - v);
    case AtomicOp::kExch: return v;
    case AtomicOp::kMin: return std::min(old, v);
    case AtomicOp::kMax: return std::max(old, v);
    case AtomicOp::kCas: return old == cmp ? v : old;
    default: break;
  }
  if constexpr (std::is_integral_v<T>) {
    switch (op) {
      case AtomicOp::kInc: return old >= v ? T(0) : T(old + 1);
      case AtomicOp::kDec: return (old == 0 || old > v) ? v : T(old - 1);
      case AtomicOp::kAnd: return T(old & v);
      case AtomicOp::kOr: return T(old | v);
      case AtomicOp::kXor: return T(old ^ v);
      default: break;
    }
  }
  return old;
}

template <class T, class Bits>
T rmw(T* p, AtomicOp op, T v, T cmp, Loc loc) {
  static_assert(sizeof(T) == sizeof(Bits));
  Block& b = current_block();
  Thread& t = current_thread();
  const auto addr = reinterpret_cast<uintptr_t>(p);
  check_aligned(p, sizeof(T), loc);
  T old;
  if (b.smem->contains(addr)) {
    std::string detail;
    if (const char* rule = b.smem->on_access(addr, sizeof(T), false, accessor_of(b, t), &detail); *rule != '\0')
      fail_thread(t, rule, detail, loc);
    old = *p;
    *p = apply(op, old, v, cmp);
  } else {
    if (std::string err = check_global_access(addr, sizeof(T)); !err.empty())
      fail_thread(t, "global access outside its allocation", err, loc);
    std::atomic_ref<Bits> ref(*reinterpret_cast<Bits*>(p));
    Bits cur = ref.load(), next;
    do {
      std::memcpy(&old, &cur, sizeof(T));
      const T n = apply(op, old, v, cmp);
      std::memcpy(&next, &n, sizeof(T));
    } while (!ref.compare_exchange_weak(cur, next));
  }
  yield(t);
  return old;
}

}  // namespace

int32_t atomic_i32(int32_t* p, AtomicOp op, int32_t v, int32_t cmp, Loc loc) {
  return rmw<int32_t, uint32_t>(p, op, v, cmp, loc);
}
uint32_t atomic_u32(uint32_t* p, AtomicOp op, uint32_t v, uint32_t cmp, Loc loc) {
  return rmw<uint32_t, uint32_t>(p, op, v, cmp, loc);
}
uint64_t atomic_u64(uint64_t* p, AtomicOp op, uint64_t v, uint64_t cmp, Loc loc) {
  return rmw<uint64_t, uint64_t>(p, op, v, cmp, loc);
}
float atomic_f32(float* p, AtomicOp op, float v, Loc loc) { return rmw<float, uint32_t>(p, op, v, 0.f, loc); }
double atomic_f64(double* p, AtomicOp op, double v, Loc loc) { return rmw<double, uint64_t>(p, op, v, 0.0, loc); }

}  // namespace vlpar::emu
