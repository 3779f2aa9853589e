// The device facts the emulator and the occupancy table assume, read from the real device on a GPU day
// (bench/gpu/validate.sh writes them into its report): compute capability, SMs, shared memory per block
// (default and opt-in) and per SM, registers, threads, L2. Compare with src/kernels/cuda/emu/device_memory.cpp
// (device_attribute) and tools/occupancy.cpp. Build: nvcc -o device_query bench/gpu/device_query.cu
#include <cuda_runtime.h>

#include <cstdio>

int main() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    std::printf("no CUDA device\n");
    return 1;
  }
  for (int d = 0; d < n; ++d) {
    cudaDeviceProp p{};
    cudaGetDeviceProperties(&p, d);
    int optin = 0, per_sm = 0;
    cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, d);
    cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, d);
    std::printf("device %d: %s, sm_%d%d, %d SMs, smem/block %zu (opt-in %d), smem/SM %d, reserved/block %zu, "
                "regs/SM %d, regs/block %d, threads/SM %d, threads/block %d, L2 %d B, memory %.1f GiB\n",
                d, p.name, p.major, p.minor, p.multiProcessorCount, p.sharedMemPerBlock, optin, per_sm,
                p.reservedSharedMemPerBlock, p.regsPerMultiprocessor, p.regsPerBlock,
                p.maxThreadsPerMultiProcessor, p.maxThreadsPerBlock, p.l2CacheSize,
                double(p.totalGlobalMem) / (1 << 30));
  }
  return 0;
}
