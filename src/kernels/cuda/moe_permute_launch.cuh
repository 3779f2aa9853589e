#pragma once
// Host launch code of the MoE row kernels (moe_permute_kernel.cuh): one block per output row or token (grid-
// strided past 2^31 − 1), the 16-byte vector instantiation when every row base is 16-byte aligned and F a multiple
// of its width, else the scalar one. Explicitly instantiated per dtype in the generated
// src/kernels/cuda/moe_permute_<dtype>.cu. Test: tests/gpu/test_cuda_moe_permute.cpp (ctest -L gpu; -L emu)
#include "cuda_compat.cuh"  // first: the prelude of every CUDA source

#include <algorithm>
#include <cstdint>

#include "launch.cuh"
#include "launch_utils.hpp"
#include "moe_permute_kernel.cuh"
#include "vector_io.cuh"
#include "vlpar/core/dtype.hpp"
#include "vlpar/core/log.hpp"
#include "vlpar/kernels/cuda/moe_permute_params.hpp"

namespace vlpar::cuda_kernels {

/// Whether the 16-byte instantiation may run: F, both leading dims and both bases multiples of its width.
template <class T>
bool moe_rows_vectorizable(const MoeRowsParams& p) {
  constexpr int64_t v = kVec16<T>;
  return p.cols % v == 0 && p.ld_out % v == 0 && p.ld_in % v == 0 && is_aligned(p.out, 16) && is_aligned(p.in, 16);
}

template <class T>
Status moe_permute_run(const MoeRowsParams& p, void* stream) {
  if (p.items == 0 || p.cols == 0) return Status::Ok();
  const LaunchConfig cfg{dim3(unsigned(std::min(p.items, kMaxGridX))), dim3(kMoeRowThreads), 0, stream};
  const bool vec = moe_rows_vectorizable<T>(p);
  if (print_configs())
    log_info("moe_permute {} ({}): rows {} F {} vec {}", dtype_name(dtype_of_v<T>),
             p.gather ? "permute" : "scale_rows", p.items, p.cols, vec ? kVec16<T> : 1);
  if (vec) return launch<moe_permute_kernel<T, kVec16<T>>>(cfg, p);
  return launch<moe_permute_kernel<T, 1>>(cfg, p);
}

template <class T>
Status moe_unpermute_run(const MoeRowsParams& p, void* stream) {
  if (p.items == 0 || p.cols == 0) return Status::Ok();
  const size_t smem = size_t(p.top_k) * (sizeof(int32_t) + sizeof(float));
  const LaunchConfig cfg{dim3(unsigned(std::min(p.items, kMaxGridX))), dim3(kMoeRowThreads), smem, stream};
  const bool vec = moe_rows_vectorizable<T>(p);
  if (print_configs())
    log_info("moe_unpermute {}: tokens {} K {} F {} vec {}", dtype_name(dtype_of_v<T>), p.items, p.top_k, p.cols,
             vec ? kVec16<T> : 1);
  if (vec) return launch<moe_unpermute_kernel<T, kVec16<T>>>(cfg, p);
  return launch<moe_unpermute_kernel<T, 1>>(cfg, p);
}

template <class T>
Status moe_row_dot_run(const MoeRowsParams& p, void* stream) {
  if (p.items == 0) return Status::Ok();
  const int64_t blocks = std::min(ceil_div(p.items, kMoeDotWarps), kMaxGridX);
  const LaunchConfig cfg{dim3(unsigned(blocks)), dim3(kMoeDotWarps * kWarpSize), 0, stream};
  return launch<moe_row_dot_kernel<T>>(cfg, p);
}

}  // namespace vlpar::cuda_kernels
