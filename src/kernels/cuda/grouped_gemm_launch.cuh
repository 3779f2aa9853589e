#pragma once
// Host launch code of the grouped GEMM and the grouped weight gradient (kernels: grouped_gemm_kernel.cuh): a
// persistent grid of min(tiles, 2 · SMs) CTAs (VLPAR_GROUPED_GEMM_MAX_CTAS caps it lower, for tests and tuning).
// Explicitly instantiated per input dtype T (output T or f32; the gradient f32) in the generated
// src/kernels/cuda/grouped_gemm_<dtype>.cu.
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

/// The persistent grid's CTA count for `tiles` output tiles: min(tiles, 2 · SMs, VLPAR_GROUPED_GEMM_MAX_CTAS).
inline Result<int64_t> grouped_gemm_ctas(int tiles) {
  int device = 0, sms = 0;
  VLPAR_CUDA_CHECK(cudaGetDevice(&device));
  VLPAR_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  int64_t ctas = std::min<int64_t>(tiles, 2 * int64_t(sms));
  if (const char* cap = std::getenv("VLPAR_GROUPED_GEMM_MAX_CTAS"); cap != nullptr && std::atoi(cap) > 0)
    ctas = std::min<int64_t>(ctas, std::atoi(cap));
  return ctas;
}

template <class T, class OutT>
Status grouped_gemm_run(const GroupedGemmParams& p, void* stream) {
  using Tile = GroupedGemmTile;
  VLPAR_CHECK_CODE(p.n % 8 == 0 && p.kd % 8 == 0 && p.lda % 8 == 0 && p.ldb % 8 == 0 && p.ldc % 2 == 0,
                   StatusCode::kNotSupported, "grouped_gemm: N {} and Kd {} and the row strides (a {}, b {}) must be "
                   "multiples of 8 elements (16-byte cp.async rows), c's row stride {} even", p.n, p.kd, p.lda,
                   p.ldb, p.ldc);
  if (p.total_tiles == 0) return Status::Ok();
  VLPAR_ASSIGN_OR_RETURN(const int64_t ctas, grouped_gemm_ctas(p.total_tiles));
  if (print_configs())
    log_info("grouped_gemm {}→{} trans_b {}: G {} N {} Kd {} tiles {} CTAs {}", dtype_name(dtype_of_v<T>),
             dtype_name(dtype_of_v<OutT>), p.trans_b, p.groups, p.n, p.kd, p.total_tiles, ctas);
  const LaunchConfig cfg{dim3(unsigned(ctas)), dim3(Tile::kThreads), size_t(Tile::kSmemBytes), stream};
  if (p.trans_b) return launch<grouped_gemm_kernel<T, OutT, true>>(cfg, p);
  return launch<grouped_gemm_kernel<T, OutT, false>>(cfg, p);
}

template <class T>
Status grouped_wgrad_run(const GroupedWgradParams& p, void* stream) {
  using Tile = GroupedGemmTile;
  VLPAR_CHECK_CODE(p.n % 8 == 0 && p.kd % 8 == 0 && p.lda % 8 == 0 && p.lddc % 8 == 0 && p.ldw % 2 == 0,
                   StatusCode::kNotSupported, "grouped_weight_grad: N {} and Kd {} and the row strides (a {}, dc {}) "
                   "must be multiples of 8 elements (16-byte cp.async rows), dw's row stride {} even", p.n, p.kd,
                   p.lda, p.lddc, p.ldw);
  if (p.total_tiles == 0) return Status::Ok();
  VLPAR_ASSIGN_OR_RETURN(const int64_t ctas, grouped_gemm_ctas(p.total_tiles));
  if (print_configs())
    log_info("grouped_weight_grad {}→f32: G {} Kd {} N {} tiles {} CTAs {}", dtype_name(dtype_of_v<T>), p.groups,
             p.kd, p.n, p.total_tiles, ctas);
  const LaunchConfig cfg{dim3(unsigned(ctas)), dim3(Tile::kThreads), size_t(Tile::kSmemBytes), stream};
  return launch<grouped_wgrad_kernel<T>>(cfg, p);
}

}  // namespace vlpar::cuda_kernels
