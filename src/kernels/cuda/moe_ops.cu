// CUDA entry point of the grouped GEMM (include/vlpar/kernels/cuda_ops.hpp), STYLE §3:
//   desc      : the views, shapes already checked by src/kernels/ops/moe.cpp → GroupedGemmParams
//   check     : a and b bf16 or f16 (one dtype), c in that dtype or f32, trans_a off, 16-byte aligned rows
//   workspace : the row offsets [G+1] (i64) and the groups' first tiles [G+1] (i32) on the device, stream-ordered
//               on ctx.stream or from ctx.allocator (Workspace)
//   run       : grouped_gemm_run<T, OutT> (generated src/kernels/cuda/grouped_gemm_<dtype>.cu)
// Test: tests/gpu/test_cuda_grouped_gemm.cpp (ctest -L gpu; -L emu in the emulated build)
#include "cuda_compat.cuh"  // first: the prelude of every CUDA source

#include <cstdint>
#include <span>
#include <vector>

#include "op_helpers.cuh"
#include "vlpar/kernels/cuda/grouped_gemm_params.hpp"
#include "vlpar/kernels/cuda_ops.hpp"

namespace vlpar::cuda_impl {

Status grouped_gemm(const Context& ctx, TensorView c, TensorView a, TensorView b, std::span<const int64_t> offsets,
                    GemmDesc desc) {
  const char* op = "grouped_gemm";
  VLPAR_CHECK_CODE(a.dtype == DType::kBF16 || a.dtype == DType::kF16, StatusCode::kNotSupported,
                   "{}: the CUDA kernel takes bf16 or f16 a and b, got a {}", op, a.to_string());
  VLPAR_CHECK(b.dtype == a.dtype, "{}: b has dtype {} but a has {} (one input dtype)", op, dtype_name(b.dtype),
              dtype_name(a.dtype));
  VLPAR_CHECK_CODE(c.dtype == a.dtype || c.dtype == DType::kF32, StatusCode::kNotSupported,
                   "{}: c must be {} or f32 (fp32 accumulation, one rounding), got {}", op, dtype_name(a.dtype),
                   c.to_string());
  VLPAR_ASSIGN_OR_RETURN(const int device, cuda_device_of(op, {{"c", &c}, {"a", &a}, {"b", &b}}));
  for (const auto& [name, v] : {std::pair{"a", &a}, std::pair{"b", &b}, std::pair{"c", &c}})
    VLPAR_RETURN_IF_ERROR(check_cp_async_base(op, name, *v));
  const int groups = int(offsets.size()) - 1;
  cuda_kernels::GroupedGemmParams p{};
  p.c = c.data;
  p.a = a.data;
  p.b = b.data;
  p.lda = a.stride(0);
  p.ldb = b.stride(1);
  p.ldc = c.stride(0);
  p.b_group_stride = b.size(0) == 1 ? 0 : b.stride(0);
  p.n = c.size(1);
  p.kd = a.size(1);
  p.groups = groups;
  p.trans_b = desc.trans_b ? 1 : 0;
  p.alpha = desc.alpha;
  p.beta = desc.beta;
  VLPAR_CHECK_CODE(p.b_group_stride % 8 == 0, StatusCode::kNotSupported,
                   "{}: b's group stride {} is not a multiple of 8 elements (16-byte rows)", op, p.b_group_stride);
  std::vector<int32_t> tiles(size_t(groups) + 1, 0);  // prefix sums of the groups' output tiles
  const int64_t col_tiles = (p.n + cuda_kernels::kGroupedGemmTileCols - 1) / cuda_kernels::kGroupedGemmTileCols;
  for (int g = 0; g < groups; ++g) {
    const int64_t rows = offsets[size_t(g) + 1] - offsets[size_t(g)];
    const int64_t t = int64_t(tiles[size_t(g)]) + (rows + cuda_kernels::kGroupedGemmTileRows - 1) /
                                                      cuda_kernels::kGroupedGemmTileRows * col_tiles;
    VLPAR_CHECK_CODE(t <= INT32_MAX, StatusCode::kNotSupported, "{}: more than 2^31 output tiles", op);
    tiles[size_t(g) + 1] = int32_t(t);
  }
  p.total_tiles = tiles.back();
  if (p.total_tiles == 0) return Status::Ok();
  return on_device(op, device, [&]() -> Status {
    const size_t off_bytes = (size_t(groups + 1) * sizeof(int64_t) + 255) / 256 * 256;
    Workspace ws(ctx, device);
    VLPAR_RETURN_IF_ERROR(ws.allocate(off_bytes + size_t(groups + 1) * sizeof(int32_t)));
    const auto stream = static_cast<cudaStream_t>(ctx.stream);
    VLPAR_CUDA_CHECK(cudaMemcpyAsync(ws.ptr<int64_t>(), offsets.data(), size_t(groups + 1) * sizeof(int64_t),
                                     cudaMemcpyHostToDevice, stream));
    auto* dev_tiles = reinterpret_cast<int32_t*>(ws.ptr<char>() + off_bytes);
    VLPAR_CUDA_CHECK(cudaMemcpyAsync(dev_tiles, tiles.data(), tiles.size() * sizeof(int32_t),
                                     cudaMemcpyHostToDevice, stream));
    p.offsets = ws.ptr<int64_t>();
    p.tile_offsets = dev_tiles;
    auto run = [&]<class T>() -> Status {
      return c.dtype == DType::kF32 ? cuda_kernels::grouped_gemm_run<T, float>(p, ctx.stream)
                                    : cuda_kernels::grouped_gemm_run<T, T>(p, ctx.stream);
    };
    return a.dtype == DType::kBF16 ? if_compiled<bf16>(op, run) : if_compiled<f16>(op, run);
  });
}

}  // namespace vlpar::cuda_impl
