// The device functions of the emulated build (emu/device_api.hpp) on top of the per-block fiber state
// (emu/runtime.hpp): block barriers, warp collectives as rendezvous of the lanes in their mask, shared memory,
// atomics, faults. Every function here runs inside a fiber, on the OS thread that runs its block.
// Semantics: ../shared/spec/cuda-emulation.md §2.5–§4. Test: tests/emu/test_emu_runtime.cpp (ctest -L emu)
#include <dlfcn.h>
#include <fmt/core.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>

#include "device_memory.hpp"
#include "runtime.hpp"

namespace vlpar::emu {

thread_local const ThreadCoords* tls_coords = nullptr;
thread_local Block* tls_block = nullptr;

namespace {


unsigned all_warps(const Block& b) { return b.warps.size() >= 32 ? ~0u : (1u << b.warps.size()) - 1u; }

std::string site(Loc loc) { return fmt::format("{}:{}", loc.file_name(), loc.line()); }
bool same_site(Loc a, Loc b) { return a.line() == b.line() && std::string_view(a.file_name()) == b.file_name(); }

/// Lane `src` of the warp for a shuffle of kind k by `lane` (own lane when the source is out of its segment).
int shfl_source(CollectiveKind k, int lane, int arg, int width) {
  const int seg = lane & ~(width - 1), pos = lane & (width - 1);
  switch (k) {
    case CollectiveKind::kShflIdx: return seg + (arg & (width - 1));
    case CollectiveKind::kShflUp: return pos - arg < 0 ? lane : lane - arg;
    case CollectiveKind::kShflDown: return pos + arg >= width ? lane : lane + arg;
    default: {
      const int j = lane ^ arg;
      return (j < 0 || j > seg + width - 1) ? lane : j;
    }
  }
}

/// __match_any_sync: the lanes of the mask whose value equals lane l's (bitwise); __match_all_sync: the mask when
/// every lane of it holds the same value, else 0 (the predicate is result != 0).
unsigned match_result(const Collective& c, const Thread* lanes, int l) {
  const bool wide = c.variant == 8;
  unsigned same = 0;
  for (int o = 0; o < 32; ++o)
    if ((c.mask >> o & 1u) && lanes[o].frag_in[0] == lanes[l].frag_in[0] &&
        (!wide || lanes[o].frag_in[1] == lanes[l].frag_in[1]))
      same |= 1u << o;
  if (c.kind == CollectiveKind::kMatchAny) return same;
  return same == c.mask ? c.mask : 0u;
}

/// The last lane of collective c arrived: computes every participant's result and makes them runnable.
void complete(Block& b, Warp& w, const Collective& c, int warp_index) {
  Thread* lanes = &b.threads[size_t(warp_index) * 32];
  if (c.kind == CollectiveKind::kMmaBf16 || c.kind == CollectiveKind::kMmaF16)
    complete_mma(lanes, c.kind == CollectiveKind::kMmaBf16);
  if (c.kind == CollectiveKind::kLdmatrix) complete_ldmatrix(b, lanes, c.variant & 15, (c.variant >> 4) != 0, c.site);
  unsigned ballot = 0;
  for (int l = 0; l < 32; ++l)
    if ((c.mask >> l & 1u) && lanes[l].value != 0) ballot |= 1u << l;
  for (int l = 0; l < 32; ++l) {
    if (!(c.mask >> l & 1u)) continue;
    Thread& t = lanes[l];
    switch (c.kind) {
      case CollectiveKind::kBallot: t.result = ballot; break;
      case CollectiveKind::kAny: t.result = ballot != 0; break;
      case CollectiveKind::kAll: t.result = ballot == c.mask; break;
      case CollectiveKind::kSyncwarp: t.result = 0; break;
      case CollectiveKind::kMmaBf16: case CollectiveKind::kMmaF16: case CollectiveKind::kLdmatrix: break;
      case CollectiveKind::kMatchAny: case CollectiveKind::kMatchAll: t.result = match_result(c, lanes, l); break;
      default: {
        const int src = shfl_source(c.kind, l, t.arg, c.width);
        if (!(c.mask >> src & 1u)) {
          if (b.launch->opt.strict)
            fail_thread(t, "shuffle from a lane outside the mask",
                        fmt::format("lane {} reads lane {}, which is not in mask {:#010x}", l, src, c.mask), c.site);
          t.result = 0xFFFFFFFFu;  // undefined on the GPU: a NaN pattern
        } else {
          t.result = lanes[src].value;
        }
      }
    }
    if (&t != b.current) t.state = ThreadState::kRunnable;
  }
  if (c.kind == CollectiveKind::kSyncwarp && c.mask == w.lanes) ++w.clock;
}

/// Finds or opens the collective of this warp that the calling lane joins; faults on divergent ones.
Collective& join(Block& b, Thread& t, Warp& w, CollectiveKind kind, unsigned mask, int width, Loc loc,
                 int variant) {
  for (Collective& c : w.open) {
    if (c.mask == mask) {
      if (c.kind != kind || c.variant != variant || (b.launch->opt.strict && !same_site(c.site, loc)))
        fail_thread(t, "divergent warp collective",
                    fmt::format("lane {} entered {} at {} while lanes {:#010x} of mask {:#010x} wait in {} at {}",
                                t.lane, collective_name(kind), site(loc), c.arrived, mask, collective_name(c.kind),
                                site(c.site)), loc);
      return c;
    }
    if (c.mask & mask)
      fail_thread(t, "overlapping warp collectives",
                  fmt::format("lane {} entered {} with mask {:#010x} while lanes {:#010x} wait in {} with mask "
                              "{:#010x} at {}", t.lane, collective_name(kind), mask, c.arrived,
                              collective_name(c.kind), c.mask, site(c.site)), loc);
  }
  w.open.push_back(Collective{kind, mask, 0u, width, loc, variant});
  return w.open.back();
}

}  // namespace

uint32_t collective(CollectiveKind kind, unsigned mask, uint32_t value, int arg, int width, Loc loc, int variant) {
  Block& b = current_block();
  Thread& t = current_thread();
  Warp& w = b.warps[size_t(t.warp)];
  const unsigned bit = 1u << t.lane;
  if (!(mask & bit))
    fail_thread(t, "lane not in its own collective's mask",
                fmt::format("lane {} called {} with mask {:#010x}", t.lane, collective_name(kind), mask), loc);
  if (width < 1 || width > 32 || (width & (width - 1)) != 0)
    fail_thread(t, "invalid shuffle width", fmt::format("width {} is not a power of two in [1, 32]", width), loc);
  if (mask & ~w.lanes)
    fail_thread(t, "collective mask names lanes that do not exist",
                fmt::format("{} with mask {:#010x}, the warp has lanes {:#010x}", collective_name(kind), mask,
                            w.lanes), loc);
  if (mask & w.exited)
    fail_thread(t, "collective mask names exited lanes",
                fmt::format("{} with mask {:#010x}: lanes {:#010x} have exited", collective_name(kind), mask,
                            mask & w.exited), loc);
  Collective& c = join(b, t, w, kind, mask, width, loc, variant);
  t.value = value;
  t.arg = arg;
  t.site = loc;
  c.arrived |= bit;
  if (c.arrived == c.mask) {
    const Collective done = c;
    std::erase_if(w.open, [&](const Collective& o) { return o.mask == done.mask; });
    complete(b, w, done, t.warp);
    return t.result;
  }
  t.state = ThreadState::kCollective;
  yield(t);
  return t.result;
}

Accessor accessor_of(const Block& b, const Thread& t) {
  const Warp& w = b.warps[size_t(t.warp)];
  return Accessor{uint32_t(t.tid), uint32_t(t.warp), w.vc, w.clock};
}

void merge_clocks(Block& b, unsigned warps) {
  uint32_t merged[kMaxWarps] = {};
  for (unsigned m = warps; m != 0; m &= m - 1) {
    Warp& w = b.warps[size_t(__builtin_ctz(m))];
    ++w.vc[__builtin_ctz(m)];
    for (int k = 0; k < kMaxWarps; ++k) merged[k] = std::max(merged[k], w.vc[k]);
  }
  for (unsigned m = warps; m != 0; m &= m - 1)
    std::copy(merged, merged + kMaxWarps, b.warps[size_t(__builtin_ctz(m))].vc);
}


const char* collective_name(CollectiveKind k) {
  static constexpr const char* kNames[] = {
      "__shfl_sync", "__shfl_up_sync", "__shfl_down_sync", "__shfl_xor_sync", "__ballot_sync", "__any_sync",
      "__all_sync",  "__syncwarp",     "mma.sync.m16n8k16 (bf16)", "mma.sync.m16n8k16 (f16)", "ldmatrix",
      "__match_any_sync", "__match_all_sync"};
  return kNames[int(k)];
}

const ThreadCoords& coords_slow() {
  std::fprintf(stderr, "vlpar emu: threadIdx/blockIdx read outside an emulated kernel\n");
  std::abort();
}

std::string where(const Block& b, const Thread& t) {
  return fmt::format("block ({},{},{}) thread ({},{},{})", b.idx.x, b.idx.y, b.idx.z, t.coords.thread_idx.x,
                     t.coords.thread_idx.y, t.coords.thread_idx.z);
}

void yield(Thread& t) { t.sched = std::move(t.sched).resume(); }

void fail_thread(const Thread& t, std::string_view rule, std::string_view detail, Loc loc) {
  fail_at(t, rule, detail, site(loc));
}

void fail_at(const Thread& t, std::string_view rule, std::string_view detail, std::string_view source) {
  Block& b = current_block();
  if (b.fault.empty())
    b.fault = fmt::format("emulated kernel {}: {}: {}: {} (at {}; scheduler seed {})", b.launch->name, where(b, t),
                          rule, detail, source, b.launch->opt.seed);
  Thread& running = current_thread();
  running.state = ThreadState::kFaulted;
  for (;;) yield(running);  // the scheduler never resumes a faulted block
}

void fail(const char* rule, const char* detail, Loc loc) { fail_thread(current_thread(), rule, detail, loc); }

int syncthreads(BarrierReduce reduce, int pred, Loc loc) {
  Block& b = current_block();
  Thread& t = current_thread();
  BlockBarrier& bar = b.bar;
  if (b.launch->opt.strict && b.exited > 0)
    fail_thread(t, "__syncthreads after threads of the block exited",
                fmt::format("{} of {} threads have returned; a barrier in divergent code", b.exited,
                            b.threads.size()), loc);
  if (bar.arrived == 0) {
    bar.site = loc;
    bar.reduce = reduce;
    bar.acc = reduce == BarrierReduce::kAnd ? 1 : 0;
  } else if (b.launch->opt.strict && (!same_site(bar.site, loc) || bar.reduce != reduce)) {
    fail_thread(t, "threads of a block wait at different barriers",
                fmt::format("this thread reached the barrier at {}, {} others wait at {}", site(loc), bar.arrived,
                            site(bar.site)), loc);
  }
  if (reduce == BarrierReduce::kCount) bar.acc += pred != 0;
  if (reduce == BarrierReduce::kAnd) bar.acc &= pred != 0;
  if (reduce == BarrierReduce::kOr) bar.acc |= pred != 0;
  t.site = loc;
  if (++bar.arrived < int(b.threads.size()) - b.exited) {
    t.state = ThreadState::kBarrier;
    t.bar_id = 0;
    yield(t);
    return t.result;
  }
  return complete_block_barrier(b);
}

int complete_block_barrier(Block& b) {
  merge_clocks(b, all_warps(b));
  const int result = b.bar.reduce == BarrierReduce::kNone ? 0 : b.bar.acc;
  for (Thread& o : b.threads) {
    if (o.state != ThreadState::kBarrier || o.bar_id != 0) continue;
    o.state = ThreadState::kRunnable;
    o.result = uint32_t(result);
  }
  b.bar.arrived = 0;
  return result;
}

void named_barrier(int id, int threads, bool wait, Loc loc) {
  Block& b = current_block();
  Thread& t = current_thread();
  const int block_threads = int(b.threads.size());
  if (id < 1 || id > 15)
    fail_thread(t, "invalid named barrier", fmt::format("id {}: 1..15 (0 is __syncthreads')", id), loc);
  if (threads <= 0 || threads % 32 != 0 || threads > block_threads)
    fail_thread(t, "invalid named barrier", fmt::format("barrier {} with {} threads: a positive multiple of 32, at "
                                                        "most the block's {}", id, threads, block_threads), loc);
  NamedBarrier& nb = b.named[id];
  if (nb.expected != 0 && nb.expected != threads)
    fail_thread(t, "named barrier count mismatch",
                fmt::format("barrier {}: this thread expects {} threads, those before it {} (at {})", id, threads,
                            nb.expected, site(nb.site)), loc);
  if (nb.expected == 0) nb = NamedBarrier{threads, 0, 0u, loc};
  ++nb.arrived;
  nb.warps |= 1u << t.warp;
  if (nb.arrived == nb.expected) {  // the last arrival: order the participating warps, release the waiters
    merge_clocks(b, nb.warps);
    for (Thread& o : b.threads)
      if (o.state == ThreadState::kBarrier && o.bar_id == id) o.state = ThreadState::kRunnable;
    nb = NamedBarrier{};
    return;
  }
  if (!wait) return;
  t.state = ThreadState::kBarrier;
  t.bar_id = id;
  t.site = loc;
  yield(t);
}

void syncwarp(unsigned mask, Loc loc) { (void)collective(CollectiveKind::kSyncwarp, mask, 0, 0, 32, loc); }

uint32_t shfl32(ShflKind kind, unsigned mask, uint32_t value, int arg, int width, Loc loc) {
  return collective(CollectiveKind(int(CollectiveKind::kShflIdx) + int(kind)), mask, value, arg, width, loc);
}

unsigned vote(VoteKind kind, unsigned mask, int pred, Loc loc) {
  return collective(CollectiveKind(int(CollectiveKind::kBallot) + int(kind)), mask, pred != 0, 0, 32, loc);
}

unsigned match(bool all, unsigned mask, uint64_t value, int bytes, int* pred, Loc loc) {
  Thread& t = current_thread();
  t.frag_in[0] = uint32_t(value);
  t.frag_in[1] = uint32_t(value >> 32);
  const unsigned r = collective(all ? CollectiveKind::kMatchAll : CollectiveKind::kMatchAny, mask, 0, 0, 32, loc,
                                bytes == 8 ? 8 : 4);
  if (pred != nullptr) *pred = r != 0;
  return r;
}

unsigned activemask() {
  const Block& b = current_block();
  const Warp& w = b.warps[size_t(current_thread().warp)];
  return w.lanes & ~w.exited;  // fibers have no convergence: every lane that has not exited
}

void threadfence(Loc) {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  Thread& t = current_thread();
  yield(t);  // a yield point: spin loops on flags written by other threads make progress
}

void* static_smem(const void* key, size_t bytes, size_t align, Loc loc) {
  std::string error;
  void* p = current_block().smem->static_var(key, bytes, align, loc, &error);
  if (p == nullptr) fail_thread(current_thread(), "too much shared memory", error, loc);
  return p;
}

void* dynamic_smem(size_t align, Loc loc) {
  void* p = current_block().smem->dynamic_base();
  if (reinterpret_cast<uintptr_t>(p) % align != 0) fail("misaligned dynamic shared memory", "", loc);
  return p;
}

void check_aligned(const void* p, size_t bytes, Loc loc) {
  if (reinterpret_cast<uintptr_t>(p) % bytes != 0)
    fail_thread(current_thread(), "misaligned vector access",
                fmt::format("{}-byte access at address {} (offset {} from {}-byte alignment)", bytes, p,
                            reinterpret_cast<uintptr_t>(p) % bytes, bytes), loc);
}

/// Called by the instrumentation hooks for every load and store of kernel code; pc = the accessing instruction.
void on_access(uintptr_t addr, size_t n, bool write, const void* pc) {
  Block* b = tls_block;
  if (b == nullptr || b->current == nullptr) return;
  if (b->smem->contains(addr)) {
    std::string detail;
    if (const char* rule = b->smem->on_access(addr, n, write, accessor_of(*b, *b->current), &detail); *rule != '\0')
      fail_at(*b->current, rule, detail, code_location(pc));
    return;
  }
  if (std::string err = check_global_access(addr, n); !err.empty())
    fail_at(*b->current, "global access outside its allocation", fmt::format("{} of {} bytes: {}",
            write ? "write" : "read", n, err), code_location(pc));
}

std::string code_location(const void* pc) {
  Dl_info info{};
  if (dladdr(pc, &info) != 0 && info.dli_fname != nullptr) {
    const auto off = reinterpret_cast<uintptr_t>(pc) - reinterpret_cast<uintptr_t>(info.dli_fbase);
    return fmt::format("pc {} = {}+{:#x}{}{} (addr2line -f -C -e {} {:#x})", pc, info.dli_fname, off,
                       info.dli_sname != nullptr ? " in " : "", info.dli_sname != nullptr ? info.dli_sname : "",
                       info.dli_fname, off);
  }
  return fmt::format("pc {}", pc);
}

}  // namespace vlpar::emu
