#pragma once
// The shared memory of one emulated thread block, with a shadow byte per byte that makes wrong uses errors:
//   layout  : [guard][dynamic bytes][redzone][static var][redzone][static var]...[guard], base aligned to 1024;
//             redzones and guards are never "allocated", so an access there is out of bounds
//   poison  : every byte is 0xFF at block start (NaN in every float format), and a read of a byte that no thread
//             of the block wrote is an error
//   races   : each byte remembers its last writer and, per warp, its readers since, each stamped with the
//             warp's vector clock component and __syncwarp clock; a conflicting access (read/write, write/read,
//             write/write) by another thread that no barrier orders after the first is an error. Every warp keeps
//             a vector clock over the block's warps: __syncthreads merges all of them, a named barrier merges its
//             participants' (so barriers between some warps only order exactly those), and within one warp a
//             full-warp __syncwarp orders the lanes (the warp clock).
// Accesses reach on_access through the compiler's instrumentation of the kernel sources (emu/access_hooks.cpp).
// Design: ../shared/spec/cuda-emulation.md §3. Test: tests/emu/test_emu_runtime.cpp (EmuFaults.*)
#include <cstddef>
#include <cstdint>
#include <memory>
#include <source_location>
#include <string>
#include <vector>

namespace vlpar::emu {

inline constexpr int kMaxWarps = 32;  // 1024 threads per block

/// Who accesses: linear thread id in the block, its warp, its warp's vector clock over the block's warps
/// (kMaxWarps entries) and its warp's __syncwarp clock.
struct Accessor {
  uint32_t tid;
  uint32_t warp;
  const uint32_t* vc;
  uint32_t clock;
};

struct ShadowByte {
  uint32_t w_stamp, w_clock;  // the writer warp's own clock component and __syncwarp clock at the write
  uint32_t writer;
  uint32_t readers;           // warps that read the byte since its last write (their stamps: ReadStamp)
  uint8_t state;
};

/// The latest read of one byte by one warp since the byte's last write.
struct ReadStamp {
  uint32_t stamp, clock;  // the reading warp's own clock component and __syncwarp clock (maxima over its reads)
  uint32_t tid;           // the reading thread, or kManyLanes
};

class SmemArena {
 public:
  /// limit = the architecture's shared memory per block (what a kernel may use in all).
  explicit SmemArena(size_t limit);

  /// Starts a block: poisons what the previous block used, allocates `dynamic_bytes` at the base.
  /// Returns "" or why the launch cannot run (more dynamic memory than the limit).
  std::string begin_block(size_t dynamic_bytes);

  /// The static variable `key` of this block (allocated at its first use); null and *error set when the
  /// block's static plus dynamic shared memory would exceed the limit.
  void* static_var(const void* key, size_t bytes, size_t align, std::source_location loc, std::string* error);
  void* dynamic_base() const { return base_; }
  size_t dynamic_bytes() const { return dynamic_; }
  /// Bytes the block uses as a GPU would count them (dynamic + static with alignment, no redzones).
  size_t gpu_bytes() const { return gpu_bytes_; }

  /// True when p lies in the arena or its guard zones (an access there is checked here).
  bool contains(uintptr_t p) const { return p - lo_ < hi_ - lo_; }

  /// Checks and records an access of n bytes at p; returns "" or the broken rule, with *detail set.
  const char* on_access(uintptr_t p, size_t n, bool write, const Accessor& a, std::string* detail);

  /// cp.async: issue checks [p, p+n) like a write, then marks it pending and poisons it (any access before the
  /// issuing thread's wait_group is an error); complete writes the data's shadow as the issuing thread's write
  /// at the time of its wait and clears the pending state.
  const char* begin_async_write(uintptr_t p, size_t n, const Accessor& a, std::string* detail);
  void complete_async_write(uintptr_t p, size_t n, const Accessor& a);

 private:
  struct Var {
    const void* key;
    size_t offset, bytes;
    std::source_location loc;
  };
  std::string describe(size_t offset) const;
  const char* check_byte(size_t off, bool write, const Accessor& a, std::string* detail);
  void mark(size_t offset, size_t bytes);

  size_t limit_;
  std::vector<unsigned char> storage_;
  std::vector<ShadowByte> shadow_;  // one per byte from lo_
  std::unique_ptr<ReadStamp[]> reads_;  // [byte from lo_][warp]; valid where ShadowByte::readers has the bit
  unsigned char* base_ = nullptr;
  uintptr_t lo_ = 0, hi_ = 0;
  size_t dynamic_ = 0, top_ = 0, gpu_bytes_ = 0, high_water_ = 0;
  std::vector<Var> vars_;
};

}  // namespace vlpar::emu
