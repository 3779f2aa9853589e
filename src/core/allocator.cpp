// Accounting allocator: aligned host memory and cudaMalloc'd device memory, current/peak bytes per device.
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

Result<void*> Allocator::allocate(size_t bytes, Device device) {
  Counters* c = counters(device);
  VLPAR_CHECK(c != nullptr, "allocate: device {} is out of range", device.to_string());
  if (bytes == 0) return static_cast<void*>(nullptr);
  void* p = nullptr;
  if (device.is_cpu()) {
    const size_t rounded = (bytes + kHostAlignment - 1) / kHostAlignment * kHostAlignment;
    p = std::aligned_alloc(kHostAlignment, rounded);
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
    std::free(ptr);
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
  return {c->current.load(), c->peak.load(), c->allocs.load()};
}

void Allocator::reset_peak(Device device) {
  if (Counters* c = counters(device)) c->peak.store(c->current.load());
}

}  // namespace vlpar
