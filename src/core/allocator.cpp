// Accounting allocator: aligned host memory (large blocks cached for reuse) and cudaMalloc'd device memory,
// current/peak bytes per device.
#include "vlpar/core/allocator.hpp"

#include <cstdlib>
#include <new>

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

size_t Allocator::host_capacity(size_t bytes) {
  const size_t rounded = (bytes + kHostAlignment - 1) / kHostAlignment * kHostAlignment;
  if (rounded < kHostCacheMinBytes) return rounded;
  size_t pow2 = kHostCacheMinBytes;
  while (pow2 <= rounded / 2) pow2 *= 2;  // the largest power of two ≤ rounded
  const size_t step = pow2 / 8;
  return (rounded + step - 1) / step * step;
}

void* Allocator::take_cached(size_t capacity) {
  const std::lock_guard<std::mutex> lock(cache_mutex_);
  auto it = cache_.find(capacity);
  if (it == cache_.end() || it->second.empty()) return nullptr;
  void* p = it->second.back();
  it->second.pop_back();
  cached_bytes_ -= capacity;
  return p;
}

bool Allocator::keep_cached(void* ptr, size_t capacity) {
  const std::lock_guard<std::mutex> lock(cache_mutex_);
  if (cached_bytes_ + capacity > host_cache_limit_) return false;
  cache_[capacity].push_back(ptr);
  cached_bytes_ += capacity;
  return true;
}

void Allocator::release_cached() {
  const std::lock_guard<std::mutex> lock(cache_mutex_);
  for (auto& [capacity, blocks] : cache_)
    for (void* p : blocks) std::free(p);
  cache_.clear();
  cached_bytes_ = 0;
}

Result<void*> Allocator::allocate(size_t bytes, Device device) {
  Counters* c = counters(device);
  VLPAR_CHECK(c != nullptr, "allocate: device {} is out of range", device.to_string());
  if (bytes == 0) return static_cast<void*>(nullptr);
  void* p = nullptr;
  if (device.is_cpu()) {
    const size_t capacity = host_capacity(bytes);
    if (capacity >= kHostCacheMinBytes) p = take_cached(capacity);
    if (p == nullptr) p = std::aligned_alloc(kHostAlignment, capacity);
    VLPAR_CHECK_CODE(p != nullptr, StatusCode::kOutOfMemory, "allocate: out of host memory for {} bytes "
                     "(in use {} bytes)", bytes, c->current.load());
  } else {
#ifdef VLPAR_WITH_CUDA
    int prev = 0;
    VLPAR_CHECK_CODE(cudaGetDevice(&prev) == cudaSuccess && cudaSetDevice(device.index) == cudaSuccess,
                     StatusCode::kCudaError, "allocate: cannot select {}", device.to_string());
    const cudaError_t err = cudaMalloc(&p, bytes);
    (void)cudaSetDevice(prev);
    VLPAR_CHECK_CODE(err == cudaSuccess, StatusCode::kOutOfMemory, "allocate: cudaMalloc of {} bytes on {} failed: "
                     "{} (in use {} bytes)", bytes, device.to_string(), cudaGetErrorString(err), c->current.load());
#else
    return VLPAR_STATUS(StatusCode::kNotSupported, "allocate: this build of vlpar has no CUDA support ({})",
                        device.to_string());
#endif
  }
  const int64_t now = c->current.fetch_add(int64_t(bytes)) + int64_t(bytes);
  int64_t peak = c->peak.load();
  while (now > peak && !c->peak.compare_exchange_weak(peak, now)) {
  }
  c->allocs.fetch_add(1);
  return p;
}

void Allocator::deallocate(void* ptr, size_t bytes, Device device) {
  if (ptr == nullptr) return;
  Counters* c = counters(device);
  if (device.is_cpu()) {
    const size_t capacity = host_capacity(bytes);
    if (capacity < kHostCacheMinBytes || !keep_cached(ptr, capacity)) std::free(ptr);
  } else {
#ifdef VLPAR_WITH_CUDA
    (void)cudaFree(ptr);
#endif
  }
  if (c) {
    c->current.fetch_sub(int64_t(bytes));
    c->allocs.fetch_sub(1);
  }
}

MemoryStats Allocator::stats(Device device) const {
  const Counters* c = counters(device);
  if (!c) return {};
  MemoryStats s{c->current.load(), c->peak.load(), c->allocs.load()};
  if (device.is_cpu()) {
    const std::lock_guard<std::mutex> lock(cache_mutex_);
    s.cached_bytes = int64_t(cached_bytes_);
  }
  return s;
}

void Allocator::reset_peak(Device device) {
  if (Counters* c = counters(device)) c->peak.store(c->current.load());
}

}  // namespace vlpar
