#pragma once
// Host launch code of the varlen flash-attention forward (kernel: flash_fwd_kernel.cuh): the tile per kernel head
// dim, the grid, and the checks the kernel relies on. Explicitly instantiated per (T, kHeadDim) in the generated
// src/kernels/cuda/flash_fwd_hd<HD>_<dtype>.cu.
// Tiles (4 warps each; ≤ 48 KiB of smem, so no opt-in; a GPU day may retune them: bench/gpu/validate.sh):
//   head dim  64: 128 query rows × 64 keys, 2 m16 slabs per warp, 32 KiB
//   head dim  96:  64 × 64, 1 slab per warp, 36 KiB (also serves 72 and 80)
//   head dim 128:  64 × 64, 1 slab per warp, 48 KiB (O: 64 fp32 registers per thread, S: 32)
// Test: tests/gpu/test_cuda_attention.cpp (ctest -L gpu; -L emu in the emulated build)
#include "cuda_compat.cuh"  // first: the prelude of every CUDA source

#include <cstdint>

#include "flash_fwd_kernel.cuh"
#include "launch.cuh"
#include "launch_utils.hpp"
#include "vlpar/core/dtype.hpp"
#include "vlpar/core/log.hpp"
#include "vlpar/core/status.hpp"
#include "vlpar/kernels/cuda/attention_params.hpp"

namespace vlpar::cuda_kernels {

template <int kHeadDim>
struct FlashFwdTileFor;
template <>
struct FlashFwdTileFor<64> {
  using type = FlashFwdTile<64, 128, 64>;
};
template <>
struct FlashFwdTileFor<96> {
  using type = FlashFwdTile<96, 64, 64>;
};
template <>
struct FlashFwdTileFor<128> {
  using type = FlashFwdTile<128, 64, 64>;
};

template <class T, int kHeadDim>
Status flash_fwd_run(const FlashFwdParams& p, void* stream) {
  using Tile = typename FlashFwdTileFor<kHeadDim>::type;
  VLPAR_CHECK_CODE(p.head_dim > 0 && p.head_dim <= kHeadDim && p.head_dim % 8 == 0, StatusCode::kNotSupported,
                   "flash attention: head_dim {} does not run on the {} kernel (needs a multiple of 8, at most {})",
                   p.head_dim, kHeadDim, kHeadDim);
  VLPAR_CHECK(p.num_kv_heads > 0 && p.num_heads % p.num_kv_heads == 0,
              "flash attention: num_heads {} is not a multiple of num_kv_heads {}", p.num_heads, p.num_kv_heads);
  if (p.batch == 0 || p.max_seqlen_q == 0 || p.num_heads == 0) return Status::Ok();
  const dim3 grid(unsigned(ceil_div(p.max_seqlen_q, Tile::kBlockM)), unsigned(p.num_heads), unsigned(p.batch));
  if (print_configs())
    log_info("flash_fwd {} hd{} (head_dim {}): tile {}x{} grid ({},{},{}) smem {} causal {}",
             dtype_name(dtype_of_v<T>), kHeadDim, p.head_dim, Tile::kBlockM, Tile::kBlockN, grid.x, grid.y, grid.z,
             Tile::kSmemBytes, p.causal);
  return launch<flash_fwd_kernel<T, Tile>>(LaunchConfig{grid, dim3(Tile::kThreads), size_t(Tile::kSmemBytes), stream},
                                           p);
}

}  // namespace vlpar::cuda_kernels
