// Build and runtime facts about CUDA availability.
#include "vlpar/core/device.hpp"

#ifdef VLPAR_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace vlpar {

bool built_with_cuda() {
#ifdef VLPAR_WITH_CUDA
  return true;
#else
  return false;
#endif
}

int cuda_device_count() {
#ifdef VLPAR_WITH_CUDA
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return n;
#else
  return 0;
#endif
}

}  // namespace vlpar
