#pragma once
// Helpers of the CUDA kernel benchmarks (bench/gpu/bench_cuda_*.cpp): exit on a failed Status, random device
// tensors (Philox on the host, one copy), and CUDA-event timing. Benchmarks, not tests: no GPU, no run.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "vlpar/core/allocator.hpp"
#include "vlpar/core/device.hpp"
#include "vlpar/core/dtype.hpp"
#include "vlpar/core/philox.hpp"
#include "vlpar/core/tensor.hpp"

namespace vlpar::bench {

inline void check(const Status& s, const char* what) {
  if (s.ok()) return;
  std::fprintf(stderr, "%s: %s\n", what, s.to_string().c_str());
  std::exit(1);
}

/// A bf16 or f16 device tensor of uniform values in [lo, hi).
inline Tensor random_device(Allocator& a, Shape shape, DType dt, uint64_t seed, float lo = -1.f, float hi = 1.f) {
  Tensor host = Tensor::empty(a, shape, dt).value();
  for (int64_t i = 0; i < host.numel(); ++i) {
    const float x = philox_uniform(seed, 0, uint64_t(i), lo, hi);
    if (dt == DType::kBF16) host.ptr<bf16>()[i] = float_to_bf16(x);
    else host.ptr<f16>()[i] = float_to_f16(x);
  }
  Tensor dev = Tensor::empty(a, shape, dt, Device::cuda(0)).value();
  check(copy_(dev, host), "upload");
  return dev;
}

/// Mean milliseconds of `iters` calls of fn after 2 warm-up calls (CUDA events on the legacy stream).
template <class Fn>
double time_ms(int iters, Fn&& fn) {
  for (int i = 0; i < 2; ++i) fn();
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  cudaEventRecord(start);
  for (int i = 0; i < iters; ++i) fn();
  cudaEventRecord(stop);
  cudaEventSynchronize(stop);
  float ms = 0;
  cudaEventElapsedTime(&ms, start, stop);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return double(ms) / iters;
}

/// The iteration count of `--iters N` (default 10), or 0 when there is no CUDA device (after saying so): the
/// program then has nothing to measure and exits 0.
inline int iters_or_no_device(int argc, char** argv) {
  int iters = 10;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--iters") == 0) iters = std::atoi(argv[i + 1]);
  if (cuda_device_count() == 0) {
    std::printf("no CUDA device: nothing to measure\n");
    return 0;
  }
  return iters > 0 ? iters : 1;
}

}  // namespace vlpar::bench
