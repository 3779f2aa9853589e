#pragma once
// Internal state of the fiber runtime (not seen by kernels): one Block per running thread block, its Threads
// (one boost.context fiber each) and Warps, the block barrier and the open warp collectives, the shared-memory
// arena with its shadow (emu/shared_memory.hpp). A block runs on exactly one OS thread; `tls_block` points at it
// while it runs. Design: ../shared/spec/cuda-emulation.md §2. Test: tests/emu/test_emu_runtime.cpp
#include <boost/context/fiber.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "device_api.hpp"
#include "shared_memory.hpp"

namespace vlpar::emu {

struct Options {
  bool strict = true;        // call-site checks of barriers and collectives, exit-while-waiting errors
  bool random_order = true;  // fibers resumed in a seeded random order each pass
  uint64_t seed = 1;
  size_t stack_bytes = 256 * 1024;
  int arch = 90;
  size_t smem_limit = 232448;  // opt-in shared memory per block of `arch` (sm_90: 227 KiB, sm_80: 163 KiB)
  double timeout_s = 600;
};
Options options_from_env();

enum class ThreadState : uint8_t { kRunnable, kBarrier, kCollective, kExited, kFaulted };

enum class CollectiveKind : uint8_t {
  kShflIdx, kShflUp, kShflDown, kShflXor, kBallot, kAny, kAll, kSyncwarp,
  kMmaBf16, kMmaF16,  // mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}.{bf16,f16}.f32 (emu/warp_matrix.cpp)
  kLdmatrix,          // ldmatrix.sync.aligned.m8n8.{x1,x2,x4}{.trans}.shared.b16 (variant = count | trans << 4)
  kMatchAny, kMatchAll,  // __match_any_sync / __match_all_sync on frag_in[0..1] (variant = 8 for 64-bit values)
};
const char* collective_name(CollectiveKind k);

/// One cp.async of a thread: [dst, dst+size) ← src_size bytes of src, the rest zero-filled.
struct AsyncCopy {
  uintptr_t dst;
  const void* src;
  int size, src_size;
};

struct Thread {
  ThreadCoords coords{};
  int tid = 0, lane = 0, warp = 0;
  ThreadState state = ThreadState::kRunnable;
  boost::context::fiber self;   // this thread's continuation while it is suspended
  boost::context::fiber sched;  // the scheduler's continuation while this thread runs
  Loc site;                     // where it waits (barrier or collective)
  uint32_t value = 0;           // collective operand
  int arg = 0;
  uint32_t result = 0;          // collective / barrier result
  uint32_t frag_in[10] = {};    // warp-matrix operands: mma a[4], b[2], c[4] (c as f32 bits)
  uint32_t frag_out[4] = {};    // warp-matrix results: mma d[4], ldmatrix registers
  const void* addr = nullptr;   // ldmatrix: the row address this lane supplies
  std::vector<AsyncCopy> uncommitted;             // cp.async issued since the last commit_group
  std::vector<std::vector<AsyncCopy>> groups;     // committed groups, oldest first (emu/async_copy.cpp)
  uintptr_t stack_lo = 0;       // lowest usable byte of this fiber's stack (the guard page lies below)
  int bar_id = 0;               // the barrier it waits at in state kBarrier (0: __syncthreads)
};

/// A warp collective that some lanes have entered and others not yet.
struct Collective {
  CollectiveKind kind;
  unsigned mask;
  unsigned arrived;
  int width;
  Loc site;
  int variant = 0;  // ldmatrix: matrices | trans << 4
};

struct Warp {
  unsigned lanes = 0;     // lanes that exist (the last warp of a block may be partial)
  unsigned exited = 0;
  uint32_t clock = 1;     // advanced by a full-warp __syncwarp: orders shared-memory accesses within the warp
  uint32_t vc[kMaxWarps] = {};  // vector clock over the block's warps, merged by the barriers this warp takes
  std::vector<Collective> open;
};

/// A named barrier (bar.sync / bar.arrive id, count) between the threads that arrive at it.
struct NamedBarrier {
  int expected = 0;    // threads (0: not in use)
  int arrived = 0;
  unsigned warps = 0;  // warps that arrived: their clocks are merged when it completes
  Loc site;
};

struct BlockBarrier {
  int arrived = 0;
  Loc site;
  BarrierReduce reduce = BarrierReduce::kNone;
  int acc = 0;
};

struct LaunchInfo {
  std::string_view name;
  dim3 grid, block;
  size_t dynamic_smem = 0;
  Options opt;
};

struct Block {
  const LaunchInfo* launch = nullptr;
  uint3 idx{};
  std::vector<Thread> threads;
  std::vector<Warp> warps;
  BlockBarrier bar;
  NamedBarrier named[16];  // ids 1..15 (0 is __syncthreads')
  int exited = 0;
  Thread* current = nullptr;
  SmemArena* smem = nullptr;
  std::string fault;   // first rule broken in this block ("" = none)
};

/// The block running on this OS thread (null outside run_kernel).
extern thread_local Block* tls_block;

/// The block and the thread of the running fiber (valid only inside an emulated kernel).
inline Block& current_block() { return *tls_block; }
inline Thread& current_thread() { return *tls_block->current; }

/// Suspends the current fiber; returns when the scheduler resumes it.
void yield(Thread& t);

/// Records a fault of thread t (not necessarily the running one), then parks the running fiber for good.
[[noreturn]] void fail_thread(const Thread& t, std::string_view rule, std::string_view detail, Loc loc);

/// fail_thread with a location already formatted (file:line, or a code address from the access hooks).
[[noreturn]] void fail_at(const Thread& t, std::string_view rule, std::string_view detail, std::string_view source);

/// Checks one load or store of kernel code (shared memory: bounds, initialisation, races; global memory:
/// inside an allocation). Faults the running thread on a violation; no-op outside emulated kernels.
void on_access(uintptr_t addr, size_t n, bool write, const void* pc);

/// "pc 0x… = module+offset (addr2line …)" for a code address.
std::string code_location(const void* pc);

/// Enters a warp collective (the calling fiber waits for the lanes of `mask`); the last lane to arrive computes
/// every participant's result. Returns the caller's scalar result.
uint32_t collective(CollectiveKind kind, unsigned mask, uint32_t value, int arg, int width, Loc loc, int variant = 0);

/// Results of the warp-matrix collectives for the 32 lanes of a warp (emu/warp_matrix.cpp).
void complete_mma(Thread* lanes, bool bf16);
void complete_ldmatrix(Block& b, Thread* lanes, int count, bool trans, Loc loc);

/// A thread returns with cp.async copies it never waited for: an error in strict mode (emu/async_copy.cpp).
void check_async_copies_at_exit(const Thread& t);

/// The last thread arrived at (or, in lenient mode, exited beside) the block barrier: orders every warp, releases
/// the waiters with the barrier's reduction, resets it; returns the reduction.
int complete_block_barrier(Block& b);

/// A barrier among the warps of `warps` completed: each advances its own clock, then all take the maximum.
void merge_clocks(Block& b, unsigned warps);

/// Shared-memory checks as the given thread (for accesses the emulator performs on a lane's behalf).
Accessor accessor_of(const Block& b, const Thread& t);

/// "block (x,y,z) thread (x,y,z)" of t in b.
std::string where(const Block& b, const Thread& t);

}  // namespace vlpar::emu
