#pragma once
// Host launch code of the grouped GEMM (kernel: grouped_gemm_kernel.cuh): a persistent grid of min(tiles,
// 2 · SMs) CTAs (VLPAR_GROUPED_GEMM_MAX_CTAS caps it lower, for tests and tuning). Explicitly instantiated per
// input dtype T (output T or f32) in the generated src/kernels/cuda/grouped_gemm_<dtype>.cu.
// Test: tests/gpu/test_cuda_grouped_gemm.cpp (ctest -L gpu; -L emu in the emulated build)
#include "cuda_compat.cuh"  // first: the prelude of every CUDA source

#include <algorithm>
#include <cstdint>
#include <cstdlib>

#include "grouped_gemm_kernel.cuh"
#include "launch.cuh"
#include "launch_utils.hpp"
#include "vlpar/core/dtype.hpp"
#include "vlpar/core/log.hpp"
#include "vlpar/core/status.hpp"
#include "vlpar/kernels/cuda/grouped_gemm_params.hpp"

namespace vlpar::cuda_kernels {

template <class T, class OutT>
Status grouped_gemm_run(const GroupedGemmParams& p, void* stream) {
  using Tile = GroupedGemmTile;
  VLPAR_CHECK_CODE(p.n % 8 == 0 && p.kd % 8 == 0 && p.lda % 8 == 0 && p.ldb % 8 == 0 && p.ldc % 2 == 0,
                   StatusCode::kNotSupported, "grouped_gemm: N {} and Kd {} and the row strides (a {}, b {}) must be "
                   "multiples of 8 elements (16-byte cp.async rows), c's row stride {} even", p.n, p.kd, p.lda,
                   p.ldb, p.ldc);
  if (p.total_tiles == 0) return Status::Ok();
  int device = 0, sms = 0;
  VLPAR_CUDA_CHECK(cudaGetDevice(&device));
  VLPAR_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  int64_t ctas = std::min<int64_t>(p.total_tiles, 2 * int64_t(sms));
  if (const char* cap = std::getenv("VLPAR_GROUPED_GEMM_MAX_CTAS"); cap != nullptr && std::atoi(cap) > 0)
    ctas = std::min<int64_t>(ctas, std::atoi(cap));
  if (print_configs())
    log_info("grouped_gemm {}→{} trans_b {}: G {} N {} Kd {} tiles {} CTAs {}", dtype_name(dtype_of_v<T>),
             dtype_name(dtype_of_v<OutT>), p.trans_b, p.groups, p.n, p.kd, p.total_tiles, ctas);
  const LaunchConfig cfg{dim3(unsigned(ctas)), dim3(Tile::kThreads), size_t(Tile::kSmemBytes), stream};
  if (p.trans_b) return launch<grouped_gemm_kernel<T, OutT, true>>(cfg, p);
  return launch<grouped_gemm_kernel<T, OutT, false>>(cfg, p);
}

}  // namespace vlpar::cuda_kernels
