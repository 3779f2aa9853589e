// run_kernel: the block scheduler of the emulated build (see launch.hpp). Per OS thread it keeps a shared-memory
// arena and a pool of fiber stacks (each with a guard page, reused across blocks); per block it creates one fiber
// per CUDA thread and resumes the runnable ones pass after pass (in a seeded random order by default) until all
// have returned, a rule is broken, or none can run (deadlock). A SIGSEGV in a fiber's guard page is reported as a
// stack overflow naming the kernel, block and thread; a launch that runs past VLPAR_EMU_TIMEOUT_S (a spin loop
// with no yield point) aborts the process with a report. Test: tests/emu/test_emu_runtime.cpp (ctest -L emu)
#include "launch.hpp"

#include <fcntl.h>
#include <fmt/core.h>
#include <signal.h>
#include <ucontext.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <random>
#include <thread>

#include "device_memory.hpp"
#include "runtime.hpp"

namespace vlpar::emu {
namespace {

namespace ctx = boost::context;

// ---- fiber stacks ------------------------------------------------------------------------------------------

/// Fiber stacks of one size with a PROT_NONE guard page below each; freed stacks are reused.
class StackPool {
 public:
  explicit StackPool(size_t bytes) : bytes_(bytes), page_(size_t(sysconf(_SC_PAGESIZE))) {}
  StackPool(const StackPool&) = delete;
  StackPool& operator=(const StackPool&) = delete;
  ~StackPool() {
    for (const ctx::stack_context& s : free_) munmap(static_cast<char*>(s.sp) - s.size - page_, s.size + page_);
  }
  size_t bytes() const { return bytes_; }

  ctx::stack_context allocate() {
    if (!free_.empty()) {
      ctx::stack_context s = free_.back();
      free_.pop_back();
      return s;
    }
    void* p = mmap(nullptr, bytes_ + page_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    mprotect(p, page_, PROT_NONE);
    ctx::stack_context s;
    s.size = bytes_;
    s.sp = static_cast<char*>(p) + page_ + bytes_;
    return s;
  }
  ctx::stack_context take() {
    last_ = allocate();
    return last_;
  }
  void deallocate(ctx::stack_context& s) noexcept { free_.push_back(s); }
  /// Lowest usable address of the stack handed out last.
  uintptr_t last_lo() const { return reinterpret_cast<uintptr_t>(last_.sp) - last_.size; }

 private:
  size_t bytes_, page_;
  std::vector<ctx::stack_context> free_;
  ctx::stack_context last_{};
};

struct PoolAllocator {
  StackPool* pool;
  ctx::stack_context allocate() { return pool->take(); }
  void deallocate(ctx::stack_context& s) noexcept { pool->deallocate(s); }
};

/// What one OS thread keeps between launches.
struct Worker {
  std::unique_ptr<StackPool> stacks;
  std::unique_ptr<SmemArena> smem;
  size_t smem_limit = 0;
  std::vector<char> altstack;
};
thread_local Worker tls_worker;

// ---- crash reports -----------------------------------------------------------------------------------------

struct sigaction g_previous_segv, g_previous_bus;  // the handlers before ours, restored to crash for real

/// The faulting thread's stack pointer (0 where the architecture is not known here).
uintptr_t stack_pointer(void* uctx) {
#if defined(__x86_64__)
  return uintptr_t(static_cast<ucontext_t*>(uctx)->uc_mcontext.gregs[REG_RSP]);
#elif defined(__aarch64__)
  return uintptr_t(static_cast<ucontext_t*>(uctx)->uc_mcontext.sp);
#else
  (void)uctx;
  return 0;
#endif
}

void on_fatal_signal(int sig, siginfo_t* info, void* uctx) {
  const Block* b = tls_block;
  if (b != nullptr && b->current != nullptr) {
    const Thread& t = *b->current;
    // Overflow: the stack pointer went below the usable stack (a large frame skips the guard page entirely).
    const uintptr_t sp = stack_pointer(uctx), fault = reinterpret_cast<uintptr_t>(info->si_addr);
    const bool overflow = (sp != 0 && sp < t.stack_lo + 256) || (fault < t.stack_lo && fault + 8192 >= t.stack_lo);
    char msg[768];
    const int n = std::snprintf(
        msg, sizeof msg,
        "vlpar emu: emulated kernel %.*s: block (%u,%u,%u) thread (%u,%u,%u): %s at address %p%s%zu KiB)\n",
        int(b->launch->name.size()), b->launch->name.data(), b->idx.x, b->idx.y, b->idx.z, t.coords.thread_idx.x,
        t.coords.thread_idx.y, t.coords.thread_idx.z, overflow ? "fiber stack overflow" : "segmentation fault",
        info->si_addr, overflow ? " (raise VLPAR_EMU_STACK_KB, now " : " (fiber stack ",
        b->launch->opt.stack_bytes / 1024);
    if (n > 0) (void)!write(2, msg, size_t(std::min(n, int(sizeof msg) - 1)));
  }
  sigaction(sig, sig == SIGSEGV ? &g_previous_segv : &g_previous_bus, nullptr);  // re-faults with the old action
}

void install_crash_handler() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa {};
    sa.sa_sigaction = on_fatal_signal;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &g_previous_segv);
    sigaction(SIGBUS, &sa, &g_previous_bus);
  });
  if (tls_worker.altstack.empty()) {  // the handler must not run on the overflowed fiber stack
    tls_worker.altstack.resize(64 * 1024);
    stack_t ss{};
    ss.ss_sp = tls_worker.altstack.data();
    ss.ss_size = tls_worker.altstack.size();
    sigaltstack(&ss, nullptr);
  }
}

// ---- watchdog and launch record ----------------------------------------------------------------------------

/// Process-wide: the kernels launched so far, and the launches running now (for the timeout watchdog).
struct Registry {
  std::mutex mu;
  std::vector<std::string> launched;
  struct Running {
    std::string name;
    std::chrono::steady_clock::time_point start;
    double timeout_s;
  };
  std::map<std::thread::id, Running> running;

  ~Registry() {  // the CI coverage check reads these names (tools/check_emu_coverage.py)
    const char* path = std::getenv("VLPAR_EMU_LAUNCH_LOG");
    if (path == nullptr || *path == '\0') return;
    const int fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd < 0) return;
    for (const std::string& n : launched) {
      const std::string line = n + "\n";
      (void)!write(fd, line.data(), line.size());
    }
    close(fd);
  }
};
Registry& registry() {
  static Registry r;
  return r;
}

void watchdog_loop() {
  for (;;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    Registry& r = registry();
    std::lock_guard lock(r.mu);
    const auto now = std::chrono::steady_clock::now();
    for (const auto& [id, run] : r.running) {
      if (std::chrono::duration<double>(now - run.start).count() <= run.timeout_s) continue;
      std::fprintf(stderr, "vlpar emu: emulated kernel %s ran longer than VLPAR_EMU_TIMEOUT_S=%g s: a thread that "
                   "never reaches a yield point (spin loop on a flag?) or a very large launch; aborting\n",
                   run.name.c_str(), run.timeout_s);
      std::_Exit(124);
    }
  }
}

class RunningLaunch {
 public:
  RunningLaunch(std::string_view name, double timeout_s) {
    static std::once_flag once;
    std::call_once(once, [] { std::thread(watchdog_loop).detach(); });
    Registry& r = registry();
    std::lock_guard lock(r.mu);
    if (std::find(r.launched.begin(), r.launched.end(), name) == r.launched.end()) r.launched.emplace_back(name);
    r.running[std::this_thread::get_id()] = {std::string(name), std::chrono::steady_clock::now(), timeout_s};
  }
  ~RunningLaunch() {
    Registry& r = registry();
    std::lock_guard lock(r.mu);
    r.running.erase(std::this_thread::get_id());
  }
};

// ---- one block ---------------------------------------------------------------------------------------------

/// A thread returned from the kernel: account it; in strict mode, nobody may be waiting for it.
void on_exit(Block& b, Thread& t) {
  t.state = ThreadState::kExited;
  ++b.exited;
  Warp& w = b.warps[size_t(t.warp)];
  w.exited |= 1u << t.lane;
  if (b.launch->opt.strict && b.bar.arrived > 0)
    fail_thread(t, "thread exited while others wait at __syncthreads",
                fmt::format("{} threads wait at the barrier at {}:{}", b.bar.arrived, b.bar.site.file_name(),
                            b.bar.site.line()), b.bar.site);
  check_async_copies_at_exit(t);
  for (const Collective& c : w.open)
    if (c.mask >> t.lane & 1u)
      fail_thread(t, "lane exited while its warp waits for it in a collective",
                  fmt::format("{} with mask {:#010x} (arrived {:#010x})", collective_name(c.kind), c.mask,
                              c.arrived), c.site);
  if (b.bar.arrived > 0 && b.bar.arrived == int(b.threads.size()) - b.exited)  // lenient mode: as hardware
    (void)complete_block_barrier(b);
}

std::string deadlock_report(const Block& b) {
  std::map<std::string, int> groups;
  for (const Thread& t : b.threads) {
    if (t.state == ThreadState::kExited) {
      ++groups["have exited"];
    } else if (t.state == ThreadState::kBarrier && t.bar_id != 0) {
      const NamedBarrier& nb = b.named[t.bar_id];
      ++groups[fmt::format("wait at named barrier {} ({} of {} threads arrived) at {}:{}", t.bar_id, nb.arrived,
                           nb.expected, t.site.file_name(), t.site.line())];
    } else if (t.state == ThreadState::kBarrier) {
      ++groups[fmt::format("wait at __syncthreads at {}:{}", t.site.file_name(), t.site.line())];
    } else {
      const Warp& w = b.warps[size_t(t.warp)];
      std::string what = "wait in a warp collective";
      for (const Collective& c : w.open)
        if (c.mask >> t.lane & 1u)
          what = fmt::format("wait in {} (warp {}, mask {:#010x}, arrived {:#010x}) at {}:{}",
                             collective_name(c.kind), t.warp, c.mask, c.arrived, c.site.file_name(), c.site.line());
      ++groups[what];
    }
  }
  std::string out = fmt::format("emulated kernel {}: block ({},{},{}): deadlock: no thread can run:", b.launch->name,
                                b.idx.x, b.idx.y, b.idx.z);
  for (const auto& [what, n] : groups) out += fmt::format(" {} thread(s) {};", n, what);
  return out + fmt::format(" (scheduler seed {})", b.launch->opt.seed);
}

void create_fibers(Block& b, KernelBody body, StackPool& pool) {
  const dim3 bd = b.launch->block;
  const int n = int(bd.x * bd.y * bd.z);
  b.threads.resize(size_t(n));
  b.warps.assign(size_t((n + 31) / 32), Warp{});
  for (size_t w = 0; w < b.warps.size(); ++w) b.warps[w].vc[w] = 1;  // each warp's own clock starts at 1
  for (int tid = 0; tid < n; ++tid) {
    Thread& t = b.threads[size_t(tid)];
    t.tid = tid;
    t.lane = tid % 32;
    t.warp = tid / 32;
    t.coords = ThreadCoords{uint3{unsigned(tid) % bd.x, unsigned(tid) / bd.x % bd.y, unsigned(tid) / (bd.x * bd.y)},
                            b.idx, bd, b.launch->grid};
    b.warps[size_t(t.warp)].lanes |= 1u << t.lane;
    t.self = ctx::fiber(std::allocator_arg, PoolAllocator{&pool}, [&b, &t, body](ctx::fiber&& sched) {
      t.sched = std::move(sched);
      body.invoke(body.ctx);
      on_exit(b, t);
      return std::move(t.sched);
    });
    t.stack_lo = pool.last_lo();
  }
}

/// Runs one block to completion; returns "" or the fault / deadlock report.
std::string run_block(Block& b, KernelBody body, StackPool& pool, std::mt19937_64& rng) {
  create_fibers(b, body, pool);
  std::vector<int> order(b.threads.size());
  std::iota(order.begin(), order.end(), 0);
  tls_block = &b;
  while (b.fault.empty() && b.exited < int(b.threads.size())) {
    if (b.launch->opt.random_order) std::shuffle(order.begin(), order.end(), rng);
    bool ran = false;
    for (int i : order) {
      Thread& t = b.threads[size_t(i)];
      if (t.state != ThreadState::kRunnable) continue;
      ran = true;
      b.current = &t;
      tls_coords = &t.coords;
      t.self = std::move(t.self).resume();
      b.current = nullptr;
      tls_coords = nullptr;
      if (!b.fault.empty()) break;
    }
    if (!ran && b.fault.empty()) b.fault = deadlock_report(b);
  }
  tls_block = nullptr;
  if (!b.fault.empty())  // abandon the suspended fibers: unwinding them could run through the access hooks
    for (Thread& t : b.threads)
      if (t.self) new ctx::fiber(std::move(t.self));  // NOLINT: deliberately leaked with its stack
  return b.fault;
}

std::string check_config(std::string_view name, const void* func, dim3 grid, dim3 block, size_t smem,
                         const Options& o) {
  const uint64_t threads = uint64_t(block.x) * block.y * block.z;
  if (threads == 0 || threads > 1024 || block.x > 1024 || block.y > 1024 || block.z > 64)
    return fmt::format("kernel {}: block ({},{},{}) = {} threads; the limit is 1024 per block (x, y ≤ 1024, z ≤ 64)",
                       name, block.x, block.y, block.z, threads);
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.y > 65535 || grid.z > 65535 || grid.x > 2147483647u)
    return fmt::format("kernel {}: grid ({},{},{}) outside [1, 2^31-1] x [1, 65535] x [1, 65535]", name, grid.x,
                       grid.y, grid.z);
  if (smem > o.smem_limit)
    return fmt::format("kernel {}: {} bytes of dynamic shared memory, sm_{} allows {} per block", name, smem, o.arch,
                       o.smem_limit);
  if (smem > 48 * 1024 && size_t(max_dynamic_smem_attribute(func)) < smem)
    return fmt::format("kernel {}: {} bytes of dynamic shared memory need cudaFuncSetAttribute("
                       "cudaFuncAttributeMaxDynamicSharedMemorySize) above 48 KiB (set: {})", name, smem,
                       max_dynamic_smem_attribute(func));
  return {};
}

Worker& worker(const Options& o) {
  Worker& w = tls_worker;
  if (!w.stacks || w.stacks->bytes() != o.stack_bytes) w.stacks = std::make_unique<StackPool>(o.stack_bytes);
  if (!w.smem || w.smem_limit != o.smem_limit) {
    w.smem = std::make_unique<SmemArena>(o.smem_limit);
    w.smem_limit = o.smem_limit;
  }
  return w;
}

}  // namespace

Status run_kernel(std::string_view name, const void* func, dim3 grid, dim3 block, size_t dynamic_smem,
                  KernelBody body) {
  const LaunchInfo info{name, grid, block, dynamic_smem, options_from_env()};
  if (std::string err = check_config(name, func, grid, block, dynamic_smem, info.opt); !err.empty())
    return VLPAR_STATUS(StatusCode::kInvalidArgument, "{}", err);
  RunningLaunch running(name, info.opt.timeout_s);
  Worker& w = worker(info.opt);
  install_crash_handler();
  reset_global_access_cache();
  std::mt19937_64 rng(info.opt.seed);
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) {
        Block b;
        b.launch = &info;
        b.idx = uint3{x, y, z};
        b.smem = w.smem.get();
        if (std::string err = w.smem->begin_block(dynamic_smem); !err.empty())
          return VLPAR_STATUS(StatusCode::kInvalidArgument, "kernel {}: {}", name, err);
        if (std::string fault = run_block(b, body, *w.stacks, rng); !fault.empty()) {
          record_launch_failure();
          return VLPAR_STATUS(StatusCode::kCudaError, "{}", fault);
        }
      }
  return Status::Ok();
}

std::vector<std::string> launched_kernels() {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  return r.launched;
}

}  // namespace vlpar::emu
