// The checks behind every load and store of an emulated kernel. The CUDA sources of the emulated build are
// compiled with GCC's ThreadSanitizer instrumentation (-fsanitize=thread, no function entry/exit hooks) but linked
// WITHOUT the ThreadSanitizer runtime: this file defines the __tsan_* entry points the instrumentation calls.
// Plain accesses go to on_access (shared memory: bounds, initialisation, races; device memory: allocation
// bounds), which returns at once outside an emulated kernel, so host code in the same files pays one call.
// Atomic builtins are performed here (sequentially consistent, the strongest order the code could ask for).
// This file itself must not be instrumented. Test: tests/emu/test_emu_runtime.cpp (EmuFaults.*)
#include <cstddef>
#include <cstdint>

#include "runtime.hpp"

#define VLPAR_EMU_PC __builtin_return_address(0)

namespace {
inline void check(const volatile void* p, size_t n, bool write, const void* pc) {
  vlpar::emu::on_access(reinterpret_cast<uintptr_t>(p), n, write, pc);
}
}  // namespace

extern "C" {

void __tsan_init() {}
void __tsan_func_entry(void*) {}
void __tsan_func_exit() {}
void __tsan_vptr_update(void**, void*) {}
void __tsan_vptr_read(void**) {}

#define VLPAR_EMU_PLAIN(n)                                                                        \
  void __tsan_read##n(void* p) { check(p, n, false, VLPAR_EMU_PC); }                              \
  void __tsan_write##n(void* p) { check(p, n, true, VLPAR_EMU_PC); }                              \
  void __tsan_unaligned_read##n(void* p) { check(p, n, false, VLPAR_EMU_PC); }                    \
  void __tsan_unaligned_write##n(void* p) { check(p, n, true, VLPAR_EMU_PC); }                    \
  void __tsan_volatile_read##n(void* p) { check(p, n, false, VLPAR_EMU_PC); }                     \
  void __tsan_volatile_write##n(void* p) { check(p, n, true, VLPAR_EMU_PC); }
VLPAR_EMU_PLAIN(1)
VLPAR_EMU_PLAIN(2)
VLPAR_EMU_PLAIN(4)
VLPAR_EMU_PLAIN(8)
VLPAR_EMU_PLAIN(16)
#undef VLPAR_EMU_PLAIN

void __tsan_read_range(void* p, size_t n) { check(p, n, false, VLPAR_EMU_PC); }
void __tsan_write_range(void* p, size_t n) { check(p, n, true, VLPAR_EMU_PC); }

void __tsan_atomic_thread_fence(int) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
void __tsan_atomic_signal_fence(int) { __atomic_signal_fence(__ATOMIC_SEQ_CST); }

#define VLPAR_EMU_ATOMIC(bits, T)                                                                             \
  T __tsan_atomic##bits##_load(const volatile T* a, int) {                                                    \
    check(a, sizeof(T), false, VLPAR_EMU_PC);                                                                 \
    return __atomic_load_n(a, __ATOMIC_SEQ_CST);                                                              \
  }                                                                                                           \
  void __tsan_atomic##bits##_store(volatile T* a, T v, int) {                                                 \
    check(a, sizeof(T), true, VLPAR_EMU_PC);                                                                  \
    __atomic_store_n(a, v, __ATOMIC_SEQ_CST);                                                                 \
  }                                                                                                           \
  T __tsan_atomic##bits##_exchange(volatile T* a, T v, int) { return __atomic_exchange_n(a, v, __ATOMIC_SEQ_CST); } \
  T __tsan_atomic##bits##_fetch_add(volatile T* a, T v, int) { return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST); } \
  T __tsan_atomic##bits##_fetch_sub(volatile T* a, T v, int) { return __atomic_fetch_sub(a, v, __ATOMIC_SEQ_CST); } \
  T __tsan_atomic##bits##_fetch_and(volatile T* a, T v, int) { return __atomic_fetch_and(a, v, __ATOMIC_SEQ_CST); } \
  T __tsan_atomic##bits##_fetch_or(volatile T* a, T v, int) { return __atomic_fetch_or(a, v, __ATOMIC_SEQ_CST); }   \
  T __tsan_atomic##bits##_fetch_xor(volatile T* a, T v, int) { return __atomic_fetch_xor(a, v, __ATOMIC_SEQ_CST); } \
  T __tsan_atomic##bits##_fetch_nand(volatile T* a, T v, int) {                                               \
    return __atomic_fetch_nand(a, v, __ATOMIC_SEQ_CST);                                                       \
  }                                                                                                           \
  int __tsan_atomic##bits##_compare_exchange_strong(volatile T* a, T* c, T v, int, int) {                     \
    return __atomic_compare_exchange_n(a, c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);                   \
  }                                                                                                           \
  int __tsan_atomic##bits##_compare_exchange_weak(volatile T* a, T* c, T v, int, int) {                       \
    return __atomic_compare_exchange_n(a, c, v, true, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);                    \
  }                                                                                                           \
  T __tsan_atomic##bits##_compare_exchange_val(volatile T* a, T c, T v, int, int) {                           \
    __atomic_compare_exchange_n(a, &c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);                         \
    return c;                                                                                                 \
  }
VLPAR_EMU_ATOMIC(8, uint8_t)
VLPAR_EMU_ATOMIC(16, uint16_t)
VLPAR_EMU_ATOMIC(32, uint32_t)
VLPAR_EMU_ATOMIC(64, uint64_t)
#undef VLPAR_EMU_ATOMIC

}  // extern "C"
