// Shared-memory arena and shadow of one emulated block (see shared_memory.hpp).
#include "shared_memory.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <cstring>

namespace vlpar::emu {
namespace {

constexpr size_t kGuard = 4096;      // unallocated bytes before the base and after the last variable
constexpr size_t kRedzone = 64;      // unallocated bytes after the dynamic region and each static variable
constexpr size_t kBaseAlign = 1024;  // 128B-swizzle atoms need 1024-byte aligned buffers
constexpr size_t kSlack = 64 * 1024; // room for redzones beyond the limit

enum : uint8_t { kAllocated = 1, kWritten = 2, kPending = 4 };

constexpr uint32_t kManyLanes = 0xFFFFFFFFu;

size_t align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

/// An access stamped (thread prev_tid, its warp's own clock prev_stamp, syncwarp clock prev_clock) happens
/// before the accessor's: the same thread, a barrier shared with that warp since (the accessor's clock of that
/// warp moved past the stamp), or, within one warp, a full-warp __syncwarp since.
bool ordered(uint32_t prev_tid, uint32_t prev_stamp, uint32_t prev_clock, const Accessor& a) {
  return prev_tid == a.tid || a.vc[prev_tid / 32] > prev_stamp || (prev_tid / 32 == a.warp && a.clock > prev_clock);
}

}  // namespace

SmemArena::SmemArena(size_t limit) : limit_(limit) {
  storage_.assign(kGuard + kBaseAlign + limit + kSlack + kGuard, 0xFF);
  const auto raw = reinterpret_cast<uintptr_t>(storage_.data());
  base_ = reinterpret_cast<unsigned char*>(align_up(raw + kGuard, kBaseAlign));
  lo_ = raw;
  hi_ = raw + storage_.size();
  shadow_.assign(storage_.size(), ShadowByte{});
  reads_.reset(new ReadStamp[storage_.size() * kMaxWarps]);  // not initialised: touched pages only
}

std::string SmemArena::begin_block(size_t dynamic_bytes) {
  const size_t base_off = size_t(reinterpret_cast<uintptr_t>(base_) - lo_);
  std::memset(base_, 0xFF, high_water_);
  std::fill_n(shadow_.begin() + ptrdiff_t(base_off), high_water_, ShadowByte{});
  vars_.clear();
  if (dynamic_bytes > limit_)
    return fmt::format("{} bytes of dynamic shared memory exceed the limit of {} bytes per block", dynamic_bytes,
                       limit_);
  dynamic_ = dynamic_bytes;
  gpu_bytes_ = dynamic_bytes;
  mark(0, dynamic_bytes);
  top_ = dynamic_bytes + kRedzone;
  high_water_ = std::max(high_water_, top_);
  return {};
}

void SmemArena::mark(size_t offset, size_t bytes) {
  const size_t base_off = size_t(reinterpret_cast<uintptr_t>(base_) - lo_);
  for (size_t i = 0; i < bytes; ++i) shadow_[base_off + offset + i].state = kAllocated;
}

void* SmemArena::static_var(const void* key, size_t bytes, size_t align, std::source_location loc,
                            std::string* error) {
  for (const Var& v : vars_)
    if (v.key == key) return base_ + v.offset;
  const size_t offset = align_up(top_, std::max<size_t>(align, 16));
  const size_t gpu = align_up(gpu_bytes_, align) + bytes;
  if (gpu > limit_ || offset + bytes + kRedzone > limit_ + kSlack) {
    *error = fmt::format("the block needs {} bytes of shared memory ({} dynamic, the rest static; the variable "
                         "declared at {}:{} takes {}), more than the limit of {} bytes per block",
                         gpu, dynamic_, loc.file_name(), loc.line(), bytes, limit_);
    return nullptr;
  }
  vars_.push_back(Var{key, offset, bytes, loc});
  gpu_bytes_ = gpu;
  mark(offset, bytes);
  top_ = offset + bytes + kRedzone;
  high_water_ = std::max(high_water_, top_);
  return base_ + offset;
}

std::string SmemArena::describe(size_t offset) const {
  if (offset < dynamic_) return fmt::format("dynamic shared memory byte {} of {}", offset, dynamic_);
  for (const Var& v : vars_)
    if (offset >= v.offset && offset < v.offset + v.bytes)
      return fmt::format("byte {} of the {}-byte shared variable declared at {}:{}", offset - v.offset, v.bytes,
                         v.loc.file_name(), v.loc.line());
  return "shared memory";
}

const char* SmemArena::check_byte(size_t off, bool write, const Accessor& a, std::string* detail) {
  const size_t base_off = size_t(reinterpret_cast<uintptr_t>(base_) - lo_);
  ShadowByte& s = shadow_[base_off + off];
  if (s.state & kPending) {
    *detail = fmt::format("thread {} {} {}, the destination of a cp.async that thread {} has not waited for "
                          "(cp.async.wait_group, then __syncthreads, before other threads use it)", a.tid,
                          write ? "writes" : "reads", describe(off), s.writer);
    return write ? "write to a cp.async destination in flight" : "read of a cp.async destination before its wait";
  }
  if (!(s.state & kWritten) && !write) {
    *detail = fmt::format("thread {} reads {}, which no thread of the block has written", a.tid, describe(off));
    return "read of uninitialised shared memory";
  }
  if ((s.state & kWritten) && !ordered(s.writer, s.w_stamp, s.w_clock, a)) {
    *detail = fmt::format("thread {} {} {} that thread {} wrote, with no barrier between them (missing "
                          "__syncthreads()?)", a.tid, write ? "writes" : "reads", describe(off), s.writer);
    return write ? "shared-memory race (write after write)" : "shared-memory race (read after write)";
  }
  ReadStamp* reads = &reads_[(base_off + off) * kMaxWarps];
  if (!write) {  // remember this warp's latest read
    ReadStamp& r = reads[a.warp];
    const uint32_t own = a.vc[a.warp];
    if (!(s.readers >> a.warp & 1u)) {
      r = ReadStamp{own, a.clock, a.tid};
      s.readers |= 1u << a.warp;
    } else {
      r.stamp = std::max(r.stamp, own);
      r.clock = std::max(r.clock, a.clock);
      if (r.tid != a.tid) r.tid = kManyLanes;
    }
    return "";
  }
  for (uint32_t m = s.readers; m != 0; m &= m - 1) {  // the write must come after every read since the last write
    const int w = __builtin_ctz(m);
    const ReadStamp& r = reads[w];
    if (r.tid == a.tid || a.vc[w] > r.stamp || (uint32_t(w) == a.warp && a.clock > r.clock)) continue;
    *detail = fmt::format("thread {} writes {} that {} read, with no barrier between them (missing "
                          "__syncthreads()?)", a.tid, describe(off),
                          r.tid == kManyLanes ? fmt::format("lanes of warp {}", w) : fmt::format("thread {}", r.tid));
    return "shared-memory race (write after read)";
  }
  s.state = uint8_t((s.state & kAllocated) | kWritten);
  s.readers = 0;
  s.writer = a.tid;
  s.w_stamp = a.vc[a.warp];
  s.w_clock = a.clock;
  return "";
}

const char* SmemArena::on_access(uintptr_t p, size_t n, bool write, const Accessor& a, std::string* detail) {
  const auto base = reinterpret_cast<uintptr_t>(base_);
  const size_t base_off = size_t(base - lo_);
  for (size_t i = 0; i < n; ++i) {
    const uintptr_t q = p + i;
    if (q < base || q >= hi_ || !(shadow_[base_off + (q - base)].state & kAllocated)) {
      const ptrdiff_t off = ptrdiff_t(p) - ptrdiff_t(base);
      *detail = fmt::format("thread {} {} {} bytes at shared offset {}; the block has {} bytes of dynamic shared "
                            "memory and {} static variables", a.tid, write ? "writes" : "reads", n, off, dynamic_,
                            vars_.size());
      return "shared-memory access out of bounds";
    }
    if (const char* rule = check_byte(size_t(q - base), write, a, detail); *rule != '\0') return rule;
  }
  return "";
}

const char* SmemArena::begin_async_write(uintptr_t p, size_t n, const Accessor& a, std::string* detail) {
  if (const char* rule = on_access(p, n, true, a, detail); *rule != '\0') return rule;
  const auto base = reinterpret_cast<uintptr_t>(base_);
  const size_t base_off = size_t(base - lo_);
  for (size_t i = 0; i < n; ++i) shadow_[base_off + (p + i - base)].state |= kPending;
  std::memset(reinterpret_cast<void*>(p), 0xFF, n);  // poison until the copy lands
  return "";
}

void SmemArena::complete_async_write(uintptr_t p, size_t n, const Accessor& a) {
  const auto base = reinterpret_cast<uintptr_t>(base_);
  const size_t base_off = size_t(base - lo_);
  for (size_t i = 0; i < n; ++i) {
    ShadowByte& s = shadow_[base_off + (p + i - base)];
    s.state = uint8_t(kAllocated | kWritten);
    s.readers = 0;
    s.writer = a.tid;
    s.w_stamp = a.vc[a.warp];
    s.w_clock = a.clock;
  }
}

}  // namespace vlpar::emu
