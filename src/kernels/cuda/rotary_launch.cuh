#pragma once
// Host launch code of the CUDA rotary family: one thread per (token, pair), 256 threads per block (the
// per-thread work is H heads, so the block size only needs to fill warps). Explicitly instantiated per T in
// the generated src/kernels/cuda/rotary_<dtype>.cu. Test: tests/gpu/test_cuda_kernels.cpp (ctest -L gpu)
#include "cuda_compat.cuh"  // first: the prelude of every CUDA source

#include <cstdint>

#include "launch.cuh"
#include "launch_utils.hpp"
#include "rotary_kernel.cuh"
#include "vlpar/core/dtype.hpp"
#include "vlpar/core/log.hpp"
#include "vlpar/core/status.hpp"
#include "vlpar/kernels/cuda/rotary_params.hpp"

namespace vlpar::cuda_kernels {

template <class T>
Status rotary_run(const RotaryParams& p, void* stream) {
  if (p.n_tok == 0 || p.n_heads == 0) return Status::Ok();
  VLPAR_CHECK_CODE(p.half > 0 && p.half <= kRotaryMaxPairs, StatusCode::kNotSupported,
                   "rotary: head_dim {} exceeds the CUDA kernel's limit of {}", 2 * p.half, 2 * kRotaryMaxPairs);
  const int64_t blocks = ceil_div(p.n_tok * p.half, kRotaryThreads);
  const unsigned grid = unsigned(blocks < kMaxGridX ? blocks : kMaxGridX);
  if (print_configs())
    log_info("rotary {} sign {:+}: N_tok {} H {} D {} threads {} grid {}", dtype_name(dtype_of_v<T>), p.sign,
             p.n_tok, p.n_heads, 2 * p.half, kRotaryThreads, grid);
  return launch<rotary_kernel<T>>(LaunchConfig{dim3(grid), dim3(kRotaryThreads), 0, stream}, p);
}

}  // namespace vlpar::cuda_kernels
