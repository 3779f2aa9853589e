// Emulated cp.async (sm_80): each thread's copies wait in its own queue until its cp.async.wait_group, as the
// PTX ISA allows ("Data Movement and Conversion Instructions: cp.async", "cp.async.commit_group",
// "cp.async.wait_group"). At issue the destination is checked like a write, poisoned and marked pending, so that
// any access to it before the issuing thread's wait — by that thread or another — is an error; wait_group N
// performs every group but the newest N (memcpy, then zero fill beyond src_size) and records the bytes as written
// by the issuing thread at that moment, so other threads need a __syncthreads after the wait to read them.
// Test: tests/emu/test_emu_warp_matrix.cpp (EmuCpAsync.*, EmuFaults.CpAsync*)
#include <fmt/core.h>

#include <cstring>

#include "device_memory.hpp"
#include "runtime.hpp"

namespace vlpar::emu {
namespace {

void perform(Block& b, const Thread& t, const AsyncCopy& c) {
  std::memcpy(reinterpret_cast<void*>(c.dst), c.src, size_t(c.src_size));
  std::memset(reinterpret_cast<void*>(c.dst + uintptr_t(c.src_size)), 0, size_t(c.size - c.src_size));
  b.smem->complete_async_write(c.dst, size_t(c.size), accessor_of(b, t));
}

}  // namespace

void cp_async(void* dst, const void* src, int cp_size, int src_size, bool cache_global, Loc loc) {
  Block& b = current_block();
  Thread& t = current_thread();
  const auto d = reinterpret_cast<uintptr_t>(dst);
  if (cp_size != 4 && cp_size != 8 && cp_size != 16)
    fail_thread(t, "invalid cp.async size", fmt::format("cp-size {} (4, 8 or 16)", cp_size), loc);
  if (cache_global && cp_size != 16)
    fail_thread(t, "invalid cp.async size", fmt::format("cp.async.cg copies 16 bytes, not {}", cp_size), loc);
  if (src_size < 0 || src_size > cp_size)
    fail_thread(t, "invalid cp.async source size", fmt::format("src-size {} outside [0, {}]", src_size, cp_size),
                loc);
  if (!b.smem->contains(d))
    fail_thread(t, "cp.async destination outside shared memory", fmt::format("destination {}", dst), loc);
  if (d % unsigned(cp_size) != 0 || reinterpret_cast<uintptr_t>(src) % unsigned(cp_size) != 0)
    fail_thread(t, "misaligned cp.async", fmt::format("{}-byte copy from {} to {}: both must be {}-byte aligned",
                                                      cp_size, src, dst, cp_size), loc);
  if (src_size > 0) {
    if (std::string err = check_global_access(reinterpret_cast<uintptr_t>(src), size_t(src_size)); !err.empty())
      fail_thread(t, "global access outside its allocation", fmt::format("cp.async source: {}", err), loc);
  }
  std::string detail;
  if (const char* rule = b.smem->begin_async_write(d, size_t(cp_size), accessor_of(b, t), &detail); *rule != '\0')
    fail_thread(t, rule, detail, loc);
  t.uncommitted.push_back(AsyncCopy{d, src, cp_size, src_size});
}

void cp_async_commit(Loc) {
  Thread& t = current_thread();
  t.groups.push_back(std::move(t.uncommitted));
  t.uncommitted.clear();
}

void cp_async_wait(int newest_pending, Loc loc) {
  Block& b = current_block();
  Thread& t = current_thread();
  if (newest_pending < 0) fail_thread(t, "invalid cp.async.wait_group", fmt::format("N = {}", newest_pending), loc);
  while (t.groups.size() > size_t(newest_pending)) {
    for (const AsyncCopy& c : t.groups.front()) perform(b, t, c);
    t.groups.erase(t.groups.begin());
  }
  yield(t);  // a yield point: the other threads run between a wait and the barrier that follows it
}

/// A thread returns: copies it never waited for are an error (hardware behaviour is unspecified).
void check_async_copies_at_exit(const Thread& t) {
  size_t pending = t.uncommitted.size();
  for (const auto& g : t.groups) pending += g.size();
  if (pending > 0 && current_block().launch->opt.strict)
    fail_thread(t, "thread exited with cp.async copies in flight",
                fmt::format("{} copies issued and never waited for (cp.async.wait_group / wait_all)", pending),
                Loc::current());
}

}  // namespace vlpar::emu
