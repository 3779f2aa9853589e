#pragma once
// Host launch code of the varlen flash-attention backward (kernels: flash_bwd_kernel.cuh): delta, then dK/dV, then
// dQ, all on one stream. Explicitly instantiated per (T, kHeadDim) in the generated
// src/kernels/cuda/flash_bwd_hd<HD>_<dtype>.cu.
// Tiles (4 warps each; register budgets keep ptxas at zero spills):
//   dK/dV: 64 keys per CTA (16 per warp) × query blocks of 64 (head dim 64), 32 (96) or 16 (128): the fp32 dK and
//          dV accumulators of a 16-key slab take head_dim registers per thread, Sᵀ and dPᵀ kBlockM/2 more.
//   dQ:    64 queries per CTA (16 per warp) × key blocks of 64 (32 at head dim 128).
// Shared memory above 48 KiB (head dims 96 and 128) is opted in by launch<>().
// Test: tests/gpu/test_cuda_attention.cpp (ctest -L gpu; -L emu in the emulated build)
#include "cuda_compat.cuh"  // first: the prelude of every CUDA source

#include <cstdint>

#include "flash_bwd_kernel.cuh"
#include "launch.cuh"
#include "launch_utils.hpp"
#include "vlpar/core/dtype.hpp"
#include "vlpar/core/log.hpp"
#include "vlpar/core/status.hpp"
#include "vlpar/kernels/cuda/attention_params.hpp"

namespace vlpar::cuda_kernels {

template <int kHeadDim>
struct FlashBwdTilesFor {
  using DkDv = FlashBwdTile<kHeadDim, kHeadDim == 64 ? 64 : (kHeadDim == 96 ? 32 : 16), 64>;
  using Dq = FlashBwdTile<kHeadDim, 64, kHeadDim == 128 ? 32 : 64>;
};

/// Dynamic smem of either backward kernel: two [kBlockN, D] and two [kBlockM, D] 16-bit tiles (K, V and Q, dO),
/// lse and delta [kBlockM] f32.
template <class Tile>
constexpr size_t flash_bwd_smem() {
  return size_t(2 * Tile::kBlockN + 2 * Tile::kBlockM) * Tile::kHeadDim * 2 + 2 * Tile::kBlockM * sizeof(float);
}

template <class T, int kHeadDim>
Status flash_bwd_run(const FlashBwdParams& p, void* stream) {
  using DkDv = typename FlashBwdTilesFor<kHeadDim>::DkDv;
  using Dq = typename FlashBwdTilesFor<kHeadDim>::Dq;
  const FlashFwdParams& f = p.fwd;
  VLPAR_CHECK_CODE(f.head_dim > 0 && f.head_dim <= kHeadDim && f.head_dim % 8 == 0, StatusCode::kNotSupported,
                   "flash attention backward: head_dim {} does not run on the {} kernel (needs a multiple of 8, at "
                   "most {})", f.head_dim, kHeadDim, kHeadDim);
  VLPAR_CHECK(f.num_kv_heads > 0 && f.num_heads % f.num_kv_heads == 0,
              "flash attention backward: num_heads {} is not a multiple of num_kv_heads {}", f.num_heads,
              f.num_kv_heads);
  if (f.batch == 0 || f.num_heads == 0) return Status::Ok();
  const int64_t dot_blocks = ceil_div(p.n_q * f.num_heads, 4);
  const dim3 dot_grid(unsigned(dot_blocks < kMaxGridX ? dot_blocks : kMaxGridX));
  const dim3 dkdv_grid(unsigned(ceil_div(p.max_seqlen_k, DkDv::kBlockN)), unsigned(f.num_kv_heads),
                       unsigned(f.batch));
  const dim3 dq_grid(unsigned(ceil_div(f.max_seqlen_q, Dq::kBlockM)), unsigned(f.num_heads), unsigned(f.batch));
  if (print_configs())
    log_info("flash_bwd {} hd{} (head_dim {}): dkdv tile {}x{} grid ({},{},{}), dq tile {}x{} grid ({},{},{})",
             dtype_name(dtype_of_v<T>), kHeadDim, f.head_dim, DkDv::kBlockN, DkDv::kBlockM, dkdv_grid.x,
             dkdv_grid.y, dkdv_grid.z, Dq::kBlockM, Dq::kBlockN, dq_grid.x, dq_grid.y, dq_grid.z);
  if (p.n_q > 0)  // no query: no delta, and dK, dV (written below) are zero
    VLPAR_RETURN_IF_ERROR(launch<flash_bwd_dot_do_o_kernel<T>>(LaunchConfig{dot_grid, dim3(128), 0, stream}, p));
  if (p.max_seqlen_k > 0) {
    const LaunchConfig cfg{dkdv_grid, dim3(DkDv::kThreads), flash_bwd_smem<DkDv>(), stream};
    VLPAR_RETURN_IF_ERROR((launch<flash_bwd_dkdv_kernel<T, DkDv>>(cfg, p)));
  }
  if (f.max_seqlen_q == 0) return Status::Ok();
  const LaunchConfig cfg{dq_grid, dim3(Dq::kThreads), flash_bwd_smem<Dq>(), stream};
  return launch<flash_bwd_dq_kernel<T, Dq>>(cfg, p);
}

}  // namespace vlpar::cuda_kernels
