// Emulated device memory and the CUDA runtime API over it (see device_memory.hpp). Work is synchronous: a
// launch, copy or memset has finished when the call returns, so streams and events only keep their API shape.
// The emulated device is one GPU of the architecture VLPAR_EMU_ARCH (default 90) with its limits.
#include "device_memory.hpp"

#include <cuda_runtime.h>
#include <fmt/core.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <shared_mutex>

#include "launch.hpp"
#include "runtime.hpp"

struct CUstream_st {
  int unused;
};
struct CUevent_st {
  int unused;
};

namespace vlpar::emu {
namespace {

int64_t env_int(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  const long long x = std::strtoll(v, &end, 10);
  return (end != nullptr && *end == '\0') ? int64_t(x) : fallback;
}

constexpr size_t kReserve = size_t(64) << 30;     // address space for all device allocations (not committed)
constexpr size_t kQuarantine = size_t(4) << 30;   // freed address space held back from reuse

/// First-fit allocator over one reserved range; allocations are page aligned with a guard page after each.
class DeviceHeap {
 public:
  DeviceHeap() {
    void* p = mmap(nullptr, kReserve, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p != MAP_FAILED) {
      base_ = reinterpret_cast<uintptr_t>(p);
      free_[0] = kReserve;
    }
  }
  bool in_range(uintptr_t a) const { return a - base_ < kReserve; }

  void* allocate(size_t bytes) {
    const size_t page = size_t(sysconf(_SC_PAGESIZE));
    const size_t span = (bytes + page - 1) / page * page + page;  // + the guard page
    std::unique_lock lock(mu_);
    void* p = first_fit(bytes, span, page);
    if (p == nullptr && !quarantine_.empty()) {  // out of address space: give the quarantine back first
      for (const auto& [off, len] : quarantine_) insert_free(off, len);
      quarantine_.clear();
      quarantined_ = 0;
      p = first_fit(bytes, span, page);
    }
    return p;
  }

  void* first_fit(size_t bytes, size_t span, size_t page) {
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->second < span) continue;
      const size_t off = it->first, len = it->second;
      free_.erase(it);
      if (len > span) free_[off + span] = len - span;
      void* p = reinterpret_cast<void*>(base_ + off);
      if (bytes > 0 && mprotect(p, span - page, PROT_READ | PROT_WRITE) != 0) {
        free_[off] = span;
        return nullptr;
      }
      live_[base_ + off] = Alloc{bytes, span};
      return p;
    }
    return nullptr;
  }

  bool release(void* p) {
    std::unique_lock lock(mu_);
    auto it = live_.find(reinterpret_cast<uintptr_t>(p));
    if (it == live_.end()) return false;
    const size_t span = it->second.span;
    (void)mprotect(p, span, PROT_NONE);
    (void)madvise(p, span, MADV_DONTNEED);
    live_.erase(it);
    // Quarantine: freed ranges are reused only after kQuarantine bytes more have been freed, so that a kernel
    // using a freed pointer finds no live allocation there (a use after free) instead of the next owner's data.
    quarantine_.push_back({reinterpret_cast<uintptr_t>(p) - base_, span});
    quarantined_ += span;
    while (quarantined_ > kQuarantine) {
      const auto [off, len] = quarantine_.front();
      quarantine_.pop_front();
      quarantined_ -= len;
      insert_free(off, len);
    }
    return true;
  }

  /// The live allocation containing addr: (base, bytes), or (0, 0).
  std::pair<uintptr_t, size_t> find(uintptr_t addr) const {
    std::shared_lock lock(mu_);
    auto it = live_.upper_bound(addr);
    if (it == live_.begin()) return {0, 0};
    --it;
    if (addr >= it->first + it->second.span) return {0, 0};
    return {it->first, it->second.bytes};
  }

 private:
  struct Alloc {
    size_t bytes, span;
  };

  /// Returns [off, off+len) to the free map, merged with its free neighbours (mu_ held).
  void insert_free(size_t off, size_t len) {
    auto next = free_.find(off + len);  // coalesce with the free neighbours
    if (next != free_.end()) {
      len += next->second;
      free_.erase(next);
    }
    auto prev = free_.lower_bound(off);
    if (prev != free_.begin() && std::prev(prev)->first + std::prev(prev)->second == off) {
      --prev;
      prev->second += len;
    } else {
      free_[off] = len;
    }
  }

  mutable std::shared_mutex mu_;
  uintptr_t base_ = 0;
  std::map<size_t, size_t> free_;      // offset → length
  std::map<uintptr_t, Alloc> live_;    // address → allocation
  std::deque<std::pair<size_t, size_t>> quarantine_;  // freed (offset, length), oldest first
  size_t quarantined_ = 0;
};

/// Process-wide state of the emulated CUDA runtime (a real runtime is process-wide too).
struct RuntimeState {
  DeviceHeap heap;
  std::mutex mu;
  std::map<const void*, int> max_dynamic_smem;  // cudaFuncAttributeMaxDynamicSharedMemorySize per kernel
};
RuntimeState& state() {
  static RuntimeState s;
  return s;
}

thread_local cudaError_t tls_last_error = cudaSuccess;
thread_local int tls_device = 0;
thread_local uintptr_t tls_cache_base = 0;
thread_local size_t tls_cache_bytes = 0;

cudaError_t set_error(cudaError_t e) {
  if (e != cudaSuccess) tls_last_error = e;
  return e;
}

/// A pointer argument of a copy: host memory, or device memory inside one allocation.
bool valid_range(const void* p, size_t n) {
  return n == 0 || check_global_access(reinterpret_cast<uintptr_t>(p), n).empty();
}

int device_attribute(cudaDeviceAttr attr) {
  const Options o = options_from_env();
  switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock: return 1024;
    case cudaDevAttrMaxBlockDimX: case cudaDevAttrMaxBlockDimY: return 1024;
    case cudaDevAttrMaxBlockDimZ: return 64;
    case cudaDevAttrMaxGridDimX: return 2147483647;
    case cudaDevAttrMaxGridDimY: case cudaDevAttrMaxGridDimZ: return 65535;
    case cudaDevAttrMaxSharedMemoryPerBlock: return 48 * 1024;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: return int(o.smem_limit);
    case cudaDevAttrWarpSize: return 32;
    case cudaDevAttrMultiProcessorCount: return o.arch >= 90 ? 132 : 108;
    case cudaDevAttrComputeCapabilityMajor: return o.arch / 10;
    case cudaDevAttrComputeCapabilityMinor: return o.arch % 10;
    case cudaDevAttrMaxThreadsPerMultiProcessor: return 2048;
    default: return 0;
  }
}

}  // namespace

Options options_from_env() {
  Options o;
  const char* sched = std::getenv("VLPAR_EMU_SCHED");
  o.random_order = sched == nullptr || std::strcmp(sched, "rr") != 0;
  o.seed = uint64_t(env_int("VLPAR_EMU_SEED", 1));
  o.stack_bytes = size_t(std::clamp<int64_t>(env_int("VLPAR_EMU_STACK_KB", 256), 16, 1 << 20)) * 1024;
  o.arch = env_int("VLPAR_EMU_ARCH", 90) == 80 ? 80 : 90;
  o.smem_limit = o.arch == 80 ? 166912 : 232448;
  o.strict = env_int("VLPAR_EMU_STRICT", 1) != 0;
  o.timeout_s = double(env_int("VLPAR_EMU_TIMEOUT_S", 600));
  return o;
}

std::string check_global_access(uintptr_t addr, size_t n) {
  RuntimeState& s = state();
  if (!s.heap.in_range(addr)) return {};
  if (addr - tls_cache_base < tls_cache_bytes && addr + n - tls_cache_base <= tls_cache_bytes) return {};
  const auto [base, bytes] = s.heap.find(addr);
  if (base == 0) return fmt::format("address {:#x} is device memory that no live cudaMalloc covers", addr);
  if (addr + n > base + bytes)
    return fmt::format("address {:#x} is byte {} of a {}-byte allocation at {:#x} ({} bytes past its end)", addr,
                       addr - base, bytes, base, addr + n - (base + bytes));
  tls_cache_base = base;
  tls_cache_bytes = bytes;
  return {};
}

void record_launch_failure() { tls_last_error = cudaErrorLaunchFailure; }

void reset_global_access_cache() {
  tls_cache_base = 0;
  tls_cache_bytes = 0;
}

int max_dynamic_smem_attribute(const void* func) {
  RuntimeState& s = state();
  std::lock_guard lock(s.mu);
  auto it = s.max_dynamic_smem.find(func);
  return it == s.max_dynamic_smem.end() ? 0 : it->second;
}

}  // namespace vlpar::emu

using vlpar::emu::set_error;

extern "C" {

cudaError_t cudaGetDeviceCount(int* count) {
  *count = 1;
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* device) {
  *device = vlpar::emu::tls_device;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) {
  if (device != 0) return set_error(cudaErrorInvalidDevice);
  vlpar::emu::tls_device = device;
  return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (device != 0) return set_error(cudaErrorInvalidDevice);
  *value = vlpar::emu::device_attribute(attr);
  return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }

cudaError_t cudaMalloc(void** ptr, size_t size) {
  *ptr = vlpar::emu::state().heap.allocate(size);
  return *ptr == nullptr ? set_error(cudaErrorMemoryAllocation) : cudaSuccess;
}
cudaError_t cudaFree(void* ptr) {
  if (ptr == nullptr) return cudaSuccess;
  return vlpar::emu::state().heap.release(ptr) ? cudaSuccess : set_error(cudaErrorInvalidValue);
}
cudaError_t cudaMallocAsync(void** ptr, size_t size, cudaStream_t) { return cudaMalloc(ptr, size); }
cudaError_t cudaFreeAsync(void* ptr, cudaStream_t) { return cudaFree(ptr); }

cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, cudaMemcpyKind) {
  if (!vlpar::emu::valid_range(dst, count) || !vlpar::emu::valid_range(src, count))
    return set_error(cudaErrorInvalidValue);
  if (count > 0) std::memmove(dst, src, count);
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind kind, cudaStream_t) {
  return cudaMemcpy(dst, src, count, kind);
}
cudaError_t cudaMemset(void* ptr, int value, size_t count) {
  if (!vlpar::emu::valid_range(ptr, count)) return set_error(cudaErrorInvalidValue);
  if (count > 0) std::memset(ptr, value, count);
  return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* ptr, int value, size_t count, cudaStream_t) {
  return cudaMemset(ptr, value, count);
}

cudaError_t cudaStreamCreate(cudaStream_t* stream) {
  *stream = new CUstream_st{0};
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  delete stream;
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaStreamQuery(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned int) { return cudaSuccess; }
cudaError_t cudaEventCreate(cudaEvent_t* event) {
  *event = new CUevent_st{0};
  return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int) { return cudaEventCreate(event); }
cudaError_t cudaEventRecord(cudaEvent_t, cudaStream_t) { return cudaSuccess; }
cudaError_t cudaEventQuery(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaEventDestroy(cudaEvent_t event) {
  delete event;
  return cudaSuccess;
}

cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize) return cudaSuccess;  // carveout etc.: hints only
  if (value < 0 || value > vlpar::emu::device_attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin))
    return set_error(cudaErrorInvalidValue);
  vlpar::emu::RuntimeState& s = vlpar::emu::state();
  std::lock_guard lock(s.mu);
  s.max_dynamic_smem[func] = value;
  return cudaSuccess;
}
cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* attr, const void* func) {
  *attr = cudaFuncAttributes{};
  attr->maxThreadsPerBlock = 1024;  // __launch_bounds__ is not visible to the emulator
  attr->maxDynamicSharedSizeBytes = vlpar::emu::max_dynamic_smem_attribute(func);
  return cudaSuccess;
}

cudaError_t cudaGetLastError(void) {
  const cudaError_t e = vlpar::emu::tls_last_error;
  vlpar::emu::tls_last_error = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError(void) { return vlpar::emu::tls_last_error; }

const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    default: return "cudaErrorUnknown";
  }
}
const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorNotReady: return "device not ready";
    default: return "unknown error";
  }
}

}  // extern "C"
