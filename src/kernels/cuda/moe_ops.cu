// CUDA entry points of the grouped GEMM and the grouped weight gradient (include/vlpar/kernels/cuda_ops.hpp),
// STYLE §3:
//   desc      : the views, shapes already checked by src/kernels/ops/moe.cpp → Grouped{Gemm,Wgrad}Params
//   check     : a and b (dc) bf16 or f16 (one dtype), c in that dtype or f32 (dw f32), trans_a off, 16-byte
//               aligned rows
//   workspace : the row offsets [G+1] (i64) and the groups' first tiles [G+1] (i32) on the device, stream-ordered
//               on ctx.stream or from ctx.allocator (Workspace)
//   run       : grouped_gemm_run<T, OutT>, grouped_wgrad_run<T> (generated src/kernels/cuda/grouped_gemm_<dtype>.cu)
// Test: tests/gpu/test_cuda_grouped_gemm.cpp (ctest -L gpu; -L emu in the emulated build)
#include "cuda_compat.cuh"  // first: the prelude of every CUDA source

#include <cstdint>
#include <span>
#include <vector>

#include "op_helpers.cuh"
#include "vlpar/kernels/cuda/grouped_gemm_params.hpp"
#include "vlpar/kernels/cuda_ops.hpp"

namespace vlpar::cuda_impl {
namespace {

/// Prefix sums of the groups' output tiles, tiles_of(rows of g) each: [G + 1], the kernels' tile → group map.
template <class TilesOf>
Result<std::vector<int32_t>> tile_prefix(const char* op, std::span<const int64_t> offsets, const TilesOf& tiles_of) {
  std::vector<int32_t> tiles(offsets.size(), 0);
  for (size_t g = 0; g + 1 < offsets.size(); ++g) {
    const int64_t t = int64_t(tiles[g]) + tiles_of(offsets[g + 1] - offsets[g]);
    VLPAR_CHECK_CODE(t <= INT32_MAX, StatusCode::kNotSupported, "{}: more than 2^31 output tiles", op);
    tiles[g + 1] = int32_t(t);
  }
  return tiles;
}

/// The row offsets (i64) and the groups' first tiles (i32), [G + 1] each, copied into ws on ctx.stream.
struct DeviceGroups {
  const int64_t* offsets = nullptr;
  const int32_t* tiles = nullptr;
};

Result<DeviceGroups> upload_groups(const Context& ctx, Workspace& ws, std::span<const int64_t> offsets,
                                   const std::vector<int32_t>& tiles) {
  const size_t off_bytes = (offsets.size() * sizeof(int64_t) + 255) / 256 * 256;
  VLPAR_RETURN_IF_ERROR(ws.allocate(off_bytes + tiles.size() * sizeof(int32_t)));
  const auto stream = static_cast<cudaStream_t>(ctx.stream);
  auto* dev_tiles = reinterpret_cast<int32_t*>(ws.ptr<char>() + off_bytes);
  VLPAR_CUDA_CHECK(cudaMemcpyAsync(ws.ptr<int64_t>(), offsets.data(), offsets.size() * sizeof(int64_t),
                                   cudaMemcpyHostToDevice, stream));
  VLPAR_CUDA_CHECK(cudaMemcpyAsync(dev_tiles, tiles.data(), tiles.size() * sizeof(int32_t), cudaMemcpyHostToDevice,
                                   stream));
  return DeviceGroups{ws.ptr<int64_t>(), dev_tiles};
}

Status check_input_dtype(const char* op, const char* name, const TensorView& v) {
  VLPAR_CHECK_CODE(v.dtype == DType::kBF16 || v.dtype == DType::kF16, StatusCode::kNotSupported,
                   "{}: the CUDA kernel takes bf16 or f16 operands, got {} {}", op, name, v.to_string());
  return Status::Ok();
}

}  // namespace

Status grouped_gemm(const Context& ctx, TensorView c, TensorView a, TensorView b, std::span<const int64_t> offsets,
                    GemmDesc desc) {
  const char* op = "grouped_gemm";
  VLPAR_RETURN_IF_ERROR(check_input_dtype(op, "a", a));
  VLPAR_CHECK(b.dtype == a.dtype, "{}: b has dtype {} but a has {} (one input dtype)", op, dtype_name(b.dtype),
              dtype_name(a.dtype));
  VLPAR_CHECK_CODE(c.dtype == a.dtype || c.dtype == DType::kF32, StatusCode::kNotSupported,
                   "{}: c must be {} or f32 (fp32 accumulation, one rounding), got {}", op, dtype_name(a.dtype),
                   c.to_string());
  VLPAR_ASSIGN_OR_RETURN(const int device, cuda_device_of(op, {{"c", &c}, {"a", &a}, {"b", &b}}));
  for (const auto& [name, v] : {std::pair{"a", &a}, std::pair{"b", &b}, std::pair{"c", &c}})
    VLPAR_RETURN_IF_ERROR(check_cp_async_base(op, name, *v));
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
  p.groups = int(offsets.size()) - 1;
  p.trans_b = desc.trans_b ? 1 : 0;
  p.alpha = desc.alpha;
  p.beta = desc.beta;
  VLPAR_CHECK_CODE(p.b_group_stride % 8 == 0, StatusCode::kNotSupported,
                   "{}: b's group stride {} is not a multiple of 8 elements (16-byte rows)", op, p.b_group_stride);
  const int64_t col_tiles = (p.n + cuda_kernels::kGroupedGemmTileCols - 1) / cuda_kernels::kGroupedGemmTileCols;
  VLPAR_ASSIGN_OR_RETURN(const auto tiles, tile_prefix(op, offsets, [&](int64_t rows) {
    return (rows + cuda_kernels::kGroupedGemmTileRows - 1) / cuda_kernels::kGroupedGemmTileRows * col_tiles;
  }));
  p.total_tiles = tiles.back();
  if (p.total_tiles == 0) return Status::Ok();
  return on_device(op, device, [&]() -> Status {
    Workspace ws(ctx, device);
    VLPAR_ASSIGN_OR_RETURN(const DeviceGroups groups, upload_groups(ctx, ws, offsets, tiles));
    p.offsets = groups.offsets;
    p.tile_offsets = groups.tiles;
    auto run = [&]<class T>() -> Status {
      return c.dtype == DType::kF32 ? cuda_kernels::grouped_gemm_run<T, float>(p, ctx.stream)
                                    : cuda_kernels::grouped_gemm_run<T, T>(p, ctx.stream);
    };
    return a.dtype == DType::kBF16 ? if_compiled<bf16>(op, run) : if_compiled<f16>(op, run);
  });
}

Status grouped_weight_grad(const Context& ctx, TensorView dw, TensorView a, TensorView dc,
                           std::span<const int64_t> offsets) {
  const char* op = "grouped_weight_grad";
  VLPAR_RETURN_IF_ERROR(check_input_dtype(op, "a", a));
  VLPAR_CHECK(dc.dtype == a.dtype, "{}: dc has dtype {} but a has {} (one input dtype)", op, dtype_name(dc.dtype),
              dtype_name(a.dtype));
  VLPAR_CHECK_CODE(dw.dtype == DType::kF32, StatusCode::kNotSupported,
                   "{}: dw must be f32 (the gradient accumulates in fp32), got {}", op, dw.to_string());
  VLPAR_ASSIGN_OR_RETURN(const int device, cuda_device_of(op, {{"dw", &dw}, {"a", &a}, {"dc", &dc}}));
  for (const auto& [name, v] : {std::pair{"a", &a}, std::pair{"dc", &dc}, std::pair{"dw", &dw}})
    VLPAR_RETURN_IF_ERROR(check_cp_async_base(op, name, *v));
  cuda_kernels::GroupedWgradParams p{};
  p.dw = dw.ptr<float>();
  p.a = a.data;
  p.dc = dc.data;
  p.lda = a.stride(0);
  p.lddc = dc.stride(0);
  p.kd = a.size(1);
  p.n = dc.size(1);
  p.groups = int(offsets.size()) - 1;
  const int64_t out_tiles = (p.kd + cuda_kernels::kGroupedGemmTileRows - 1) / cuda_kernels::kGroupedGemmTileRows *
                            ((p.n + cuda_kernels::kGroupedGemmTileCols - 1) / cuda_kernels::kGroupedGemmTileCols);
  VLPAR_ASSIGN_OR_RETURN(const auto tiles,
                         tile_prefix(op, offsets, [&](int64_t rows) { return rows > 0 ? out_tiles : 0; }));
  p.total_tiles = tiles.back();
  if (p.total_tiles == 0) return Status::Ok();
  return on_device(op, device, [&]() -> Status {
    Workspace ws(ctx, device);
    VLPAR_ASSIGN_OR_RETURN(const DeviceGroups groups, upload_groups(ctx, ws, offsets, tiles));
    p.offsets = groups.offsets;
    p.tile_offsets = groups.tiles;
    auto run = [&]<class T>() -> Status { return cuda_kernels::grouped_wgrad_run<T>(p, ctx.stream); };
    return a.dtype == DType::kBF16 ? if_compiled<bf16>(op, run) : if_compiled<f16>(op, run);
  });
}

}  // namespace vlpar::cuda_impl
