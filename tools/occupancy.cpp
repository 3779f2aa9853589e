// Occupancy of a kernel on sm_80 (A100) and sm_90 (H100 SXM) from NVIDIA's header-only calculator
// (cuda_occupancy.h, host code, no GPU): reads "arch regs static_smem threads dynamic_smem" per line on stdin and
// prints "active_blocks_per_sm occupancy_percent limiter" per line. Used by tools/check_sass.py (CI stage cuda).
// The device limits below are the published ones [unverified here: bench/gpu/validate.sh records the real ones].
// Build: g++ -std=c++17 -I/usr/local/cuda/include tools/occupancy.cpp -o occupancy
#include <cuda_occupancy.h>

#include <cstdio>
#include <string>

namespace {

cudaOccDeviceProp device(int arch) {
  cudaOccDeviceProp p{};
  p.computeMajor = arch / 10;
  p.computeMinor = arch % 10;
  p.maxThreadsPerBlock = 1024;
  p.maxThreadsPerMultiprocessor = 2048;
  p.regsPerBlock = 65536;
  p.regsPerMultiprocessor = 65536;
  p.warpSize = 32;
  p.sharedMemPerBlock = 48 * 1024;
  p.sharedMemPerMultiprocessor = arch >= 90 ? 228 * 1024 : 164 * 1024;
  p.numSms = arch >= 90 ? 132 : 108;
  p.sharedMemPerBlockOptin = arch >= 90 ? 227 * 1024 : 163 * 1024;
  p.reservedSharedMemPerBlock = 1024;
  return p;
}

const char* limiter(unsigned f) {
  if (f & OCC_LIMIT_REGISTERS) return "registers";
  if (f & OCC_LIMIT_SHARED_MEMORY) return "smem";
  if (f & OCC_LIMIT_WARPS) return "warps";
  if (f & OCC_LIMIT_BLOCKS) return "blocks";
  return "-";
}

}  // namespace

int main() {
  char arch_name[32];
  int regs = 0, threads = 0;
  size_t smem = 0, dyn = 0;
  while (std::scanf("%31s %d %zu %d %zu", arch_name, &regs, &smem, &threads, &dyn) == 5) {
    const int arch = std::stoi(std::string(arch_name).substr(3, 2));
    const cudaOccDeviceProp prop = device(arch);
    cudaOccFuncAttributes attr{};
    attr.maxThreadsPerBlock = 1024;
    attr.numRegs = regs;
    attr.sharedSizeBytes = smem;
    attr.maxDynamicSharedSizeBytes = int(prop.sharedMemPerBlockOptin);
    attr.shmemLimitConfig = FUNC_SHMEM_LIMIT_OPTIN;  // the launchers opt in above 48 KiB (launch.cuh)
    cudaOccDeviceState state{};
    cudaOccResult r{};
    if (cudaOccMaxActiveBlocksPerMultiprocessor(&r, &prop, &attr, &state, threads, dyn) != CUDA_OCC_SUCCESS) {
      std::printf("0 0 invalid\n");
      continue;
    }
    const double occ = 100.0 * r.activeBlocksPerMultiprocessor * threads / prop.maxThreadsPerMultiprocessor;
    std::printf("%d %.0f %s\n", r.activeBlocksPerMultiprocessor, occ, limiter(r.limitingFactors));
  }
  return 0;
}
