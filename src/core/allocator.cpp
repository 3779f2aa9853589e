// Accounting allocator: aligned host memory (large blocks cached for reuse) and cudaMalloc'd device memory (every
// block cached for reuse), current/peak bytes per device.
#include "vlpar/core/allocator.hpp"

#include <cstdlib>
#include <new>
#include <string_view>
#include <unordered_map>
#include <vector>

#ifdef VLPAR_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace vlpar {

Allocator::Counters* Allocator::counters(Device device) {
  if (device.is_cpu()) return &host_;
  if (device.index < 0 || device.index >= kMaxCudaDevices) return nullptr;
  return &cuda_[size_t(device.index)];
}
const Allocator::Counters* Allocator::counters(Device device) const {
  return const_cast<Allocator*>(this)->counters(device);
}

Allocator::~Allocator() { release_cached(); }

namespace {
/// `bytes` rounded up to `align`; from `classes_from` on, up to a multiple of an eighth of its power of two.
size_t block_capacity(size_t bytes, size_t align, size_t classes_from) {
  const size_t rounded = (bytes + align - 1) / align * align;
  if (rounded < classes_from) return rounded;
  size_t pow2 = classes_from;
  while (pow2 <= rounded / 2) pow2 *= 2;  // the largest power of two ≤ rounded
  const size_t step = pow2 / 8;
  return (rounded + step - 1) / step * step;
}
}  // namespace

size_t Allocator::default_device_cache_limit() {
#ifdef VLPAR_CUDA_EMU
  return 0;
#else
  // VLPAR_DEVICE_CACHE=0: exact-size blocks freed at once, for compute-sanitizer (bench/gpu/validate.sh), whose
  // memcheck sees neither an access into a block's rounding slack nor a use of a cached block after its free.
  const char* env = std::getenv("VLPAR_DEVICE_CACHE");
  return env != nullptr && std::string_view(env) == "0" ? 0 : kNoCacheLimit;
#endif
}

size_t Allocator::host_capacity(size_t bytes) { return block_capacity(bytes, kHostAlignment, kHostCacheMinBytes); }

size_t Allocator::device_capacity(size_t bytes) {
  return block_capacity(bytes, kDeviceAlignment, kHostCacheMinBytes);
}

void* Allocator::take_cached(Device device, size_t capacity) {
  const std::lock_guard<std::mutex> lock(cache_mutex_);
  Pool& pool = pools_[pool_index(device)];
  auto it = pool.blocks.find(capacity);
  if (it == pool.blocks.end() || it->second.empty()) return nullptr;
  void* p = it->second.back();
  it->second.pop_back();
  pool.bytes -= capacity;
  return p;
}

bool Allocator::keep_cached(Device device, void* ptr, size_t capacity) {
  const std::lock_guard<std::mutex> lock(cache_mutex_);
  Pool& pool = pools_[pool_index(device)];
  const size_t limit = device.is_cpu() ? host_cache_limit_ : device_cache_limit_;
  if (capacity > limit || pool.bytes > limit - capacity) return false;
  pool.blocks[capacity].push_back(ptr);
  pool.bytes += capacity;
  return true;
}

size_t Allocator::release_cached(Device device) {
  std::unordered_map<size_t, std::vector<void*>> blocks_of;  // taken out under the lock, freed after it: a
  size_t freed = 0;                                          // cudaFree waits for the whole device
  {
    const std::lock_guard<std::mutex> lock(cache_mutex_);
    Pool& pool = pools_[pool_index(device)];
    blocks_of.swap(pool.blocks);
    freed = pool.bytes;
    pool.bytes = 0;
  }
#ifdef VLPAR_WITH_CUDA
  int prev = 0;
  const bool switched = !device.is_cpu() && !blocks_of.empty() && cudaGetDevice(&prev) == cudaSuccess &&
                        cudaSetDevice(device.index) == cudaSuccess;
#endif
  for (auto& [capacity, blocks] : blocks_of)
    for (void* p : blocks) {
      if (device.is_cpu()) {
        std::free(p);
        continue;
      }
#ifdef VLPAR_WITH_CUDA
      (void)cudaFree(p);
#endif
    }
#ifdef VLPAR_WITH_CUDA
  if (switched) (void)cudaSetDevice(prev);
#endif
  return freed;
}

void Allocator::release_cached() {
  (void)release_cached(Device::cpu());
  for (int i = 0; i < kMaxCudaDevices; ++i) (void)release_cached(Device::cuda(i));
}

// A cached block of the size class, else a new one; a failed cudaMalloc frees the device's cached blocks (they
// may be what fills it) and tries once more.
Result<void*> Allocator::allocate_device(size_t bytes, Device device, const Counters& c) {
  const bool cache = device_cache_limit_ > 0;  // without a cache, exact-size blocks (the emulator's bounds)
  const size_t capacity = cache ? device_capacity(bytes) : bytes;
  if (void* p = cache ? take_cached(device, capacity) : nullptr) return p;
#ifdef VLPAR_WITH_CUDA
  int prev = 0;
  VLPAR_CHECK_CODE(cudaGetDevice(&prev) == cudaSuccess && cudaSetDevice(device.index) == cudaSuccess,
                   StatusCode::kCudaError, "allocate: cannot select {}", device.to_string());
  void* p = nullptr;
  cudaError_t err = cudaMalloc(&p, capacity);
  size_t released = 0;
  if (err == cudaErrorMemoryAllocation) {  // not another error (e.g. a sticky fault of an earlier kernel)
    (void)cudaGetLastError();  // an out-of-memory error is not sticky; clear it before the second try
    released = release_cached(device);
    (void)cudaSetDevice(device.index);
    err = cudaMalloc(&p, capacity);
  }
  (void)cudaSetDevice(prev);
  VLPAR_CHECK_CODE(err == cudaSuccess || err == cudaErrorMemoryAllocation, StatusCode::kCudaError,
                   "allocate: cudaMalloc of {} bytes on {} failed: {}", bytes, device.to_string(),
                   cudaGetErrorString(err));
  VLPAR_CHECK_CODE(err == cudaSuccess, StatusCode::kOutOfMemory, "allocate: cudaMalloc of {} bytes on {} failed: "
                   "{} (in use {} bytes, peak {} bytes; {} cached bytes were freed before a second try)", bytes,
                   device.to_string(), cudaGetErrorString(err), c.current.load(), c.peak.load(), released);
  return p;
#else
  (void)c;
  return VLPAR_STATUS(StatusCode::kNotSupported, "allocate: this build of vlpar has no CUDA support ({})",
                      device.to_string());
#endif
}

Result<void*> Allocator::allocate(size_t bytes, Device device) {
  Counters* c = counters(device);
  VLPAR_CHECK(c != nullptr, "allocate: device {} is out of range", device.to_string());
  if (bytes == 0) return static_cast<void*>(nullptr);
  // Far beyond any memory, and the size-class rounding would wrap around (e.g. a negative size cast to size_t).
  VLPAR_CHECK_CODE(bytes <= (~size_t(0) >> 2), StatusCode::kOutOfMemory, "allocate: {} bytes on {} is beyond any "
                   "memory", bytes, device.to_string());
  void* p = nullptr;
  if (device.is_cpu()) {
    const size_t capacity = host_capacity(bytes);
    if (capacity >= kHostCacheMinBytes) p = take_cached(device, capacity);
    if (p == nullptr) p = std::aligned_alloc(kHostAlignment, capacity);
    VLPAR_CHECK_CODE(p != nullptr, StatusCode::kOutOfMemory, "allocate: out of host memory for {} bytes "
                     "(in use {} bytes)", bytes, c->current.load());
  } else {
    VLPAR_ASSIGN_OR_RETURN(p, allocate_device(bytes, device, *c));
  }
  const int64_t now = c->current.fetch_add(int64_t(bytes)) + int64_t(bytes);
  int64_t peak = c->peak.load();
  while (now > peak && !c->peak.compare_exchange_weak(peak, now)) {
  }
  c->allocs.fetch_add(1);
  return p;
}

void Allocator::deallocate(void* ptr, size_t bytes, Device device) {
  Counters* c = counters(device);
  if (ptr == nullptr || c == nullptr) return;  // an out-of-range device allocated nothing here
  if (device.is_cpu()) {
    const size_t capacity = host_capacity(bytes);
    if (capacity < kHostCacheMinBytes || !keep_cached(device, ptr, capacity)) std::free(ptr);
  } else if (device_cache_limit_ == 0 || !keep_cached(device, ptr, device_capacity(bytes))) {
#ifdef VLPAR_WITH_CUDA
    (void)cudaFree(ptr);  // the block stays valid for work queued before it (cudaFree waits for the device)
#endif
  }
  c->current.fetch_sub(int64_t(bytes));
  c->allocs.fetch_sub(1);
}

MemoryStats Allocator::stats(Device device) const {
  const Counters* c = counters(device);
  if (!c) return {};
  MemoryStats s{c->current.load(), c->peak.load(), c->allocs.load()};
  const std::lock_guard<std::mutex> lock(cache_mutex_);
  s.cached_bytes = int64_t(pools_[pool_index(device)].bytes);
  return s;
}

void Allocator::reset_peak(Device device) {
  if (Counters* c = counters(device)) c->peak.store(c->current.load());
}

}  // namespace vlpar
