// Second stage of the RMSNorm backward: dw[c] += Σ_b dw_partial[b][c] over the per-block partials written by
// rmsnorm_backward_kernel, in a fixed order (no float atomics, DESIGN §7). Independent of the storage dtype,
// so it is compiled once whatever VLPAR_DTYPES holds. Test: tests/gpu/test_cuda_kernels.cpp (ctest -L gpu)
#include "cuda_compat.cuh"  // first: the prelude of every CUDA source

#include "rmsnorm_launch.cuh"

namespace vlpar::cuda_kernels {

namespace {
// 8 partial rows per column in parallel: 256 threads per block, and a sequential run of num_blocks / 8 ≤ 128
// coalesced loads per thread at the largest backward grid.
constexpr int kDwSplit = 8;
}  // namespace

Status rmsnorm_dw_reduce_run(const RmsNormBackwardParams& p, void* stream) {
  if (p.cols == 0 || p.dw == nullptr) return Status::Ok();
  const int64_t grid = ceil_div(p.cols, kWarpSize);
  const LaunchConfig lc{dim3(unsigned(grid)), dim3(kWarpSize, kDwSplit), 0, stream};
  return launch<rmsnorm_dw_reduce_kernel<kDwSplit>>(lc, p.dw, static_cast<const float*>(p.dw_partial), p.num_blocks,
                                                    int(p.cols));
}

}  // namespace vlpar::cuda_kernels
