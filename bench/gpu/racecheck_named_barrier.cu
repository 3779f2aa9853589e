// What compute-sanitizer racecheck makes of named barriers (bar.sync / bar.arrive), on the device in hand: one
// 128-thread block, warps 0-1 produce into a 64-float shared buffer, warps 2-3 consume, in the variants below.
// bench/gpu/validate.sh (step racecheck_probe) runs each under racecheck and records which ones it reports.
// Standalone (no vlpar code): it probes the tool, not vlpar.
//   arrive   : producers bar.arrive(1) after writing, consumers bar.sync(1) before reading; two rounds, the
//              buffer reused after consumers bar.arrive(2) / producers bar.sync(2) (RAW and WAR both ordered
//              by arrive -> sync: valid under the PTX memory model; the pattern of
//              tests/emu/warp_matrix_kernels.cu named_barrier_pipeline_kernel and of warp-specialised kernels)
//   raw-only : the same, one round (only the producer arrive -> consumer sync ordering)
//   sync     : both sides bar.sync on both barriers (ordering racecheck certainly understands)
//   none     : no barriers (a real race: the positive control, racecheck must report it)
// Build: nvcc -arch=sm_90a -lineinfo -o racecheck_named_barrier bench/gpu/racecheck_named_barrier.cu
// Usage: racecheck_named_barrier {arrive|raw-only|sync|none}  (prints wrong values; exit 0 unless CUDA fails)
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>

namespace {

enum Mode { kArrive, kRawOnly, kSync, kNone };

__device__ __forceinline__ void bar_sync(int id, int n) { asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(n) : "memory"); }
__device__ __forceinline__ void bar_arrive(int id, int n) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(n) : "memory");
}

__global__ void pipeline(float* out, int mode) {
  __shared__ float buf[64];
  const int t = int(threadIdx.x), rounds = mode == kRawOnly ? 1 : 2;
  for (int round = 0; round < rounds; ++round) {
    if (t < 64) {  // producers
      if (round > 0 && mode != kNone) bar_sync(2, 128);
      buf[t] = float(100 * round + t);
      if (mode == kSync) bar_sync(1, 128);
      else if (mode != kNone) bar_arrive(1, 128);
    } else {  // consumers
      if (mode != kNone) bar_sync(1, 128);
      out[64 * round + t - 64] = buf[t - 64];
      if (round + 1 < rounds) {
        if (mode == kSync) bar_sync(2, 128);
        else if (mode != kNone) bar_arrive(2, 128);
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  const char* names[] = {"arrive", "raw-only", "sync", "none"};
  int mode = -1;
  for (int m = 0; m < 4 && argc == 2; ++m)
    if (std::strcmp(argv[1], names[m]) == 0) mode = m;
  if (mode < 0) {
    std::fprintf(stderr, "usage: %s {arrive|raw-only|sync|none}\n", argv[0]);
    return 2;
  }
  float* out = nullptr;
  float host[128];
  if (cudaMalloc(&out, sizeof host) != cudaSuccess) return 1;
  pipeline<<<1, 128>>>(out, mode);
  const cudaError_t e = cudaDeviceSynchronize();
  cudaMemcpy(host, out, sizeof host, cudaMemcpyDeviceToHost);
  int wrong = 0;
  for (int i = 0; i < (mode == kRawOnly ? 64 : 128); ++i) wrong += host[i] != float(100 * (i / 64) + i % 64);
  std::printf("%s: %s, %d wrong values\n", names[mode], cudaGetErrorString(e), wrong);
  cudaFree(out);
  return e == cudaSuccess ? 0 : 1;
}
