// CUDA entry points of the MoE ops and the dense GEMM (include/vlpar/kernels/cuda_ops.hpp), STYLE §3:
//   grouped_gemm, grouped_weight_grad, gemm (one group per batch entry; op(A)ᵀ on the weight-gradient kernel)
//     desc      : the views, shapes already checked by src/kernels/ops/{moe,gemm}.cpp → Grouped{Gemm,Wgrad}Params
//     check     : a and b (dc) bf16 or f16 (one dtype), c in that dtype or f32 (dw f32), 16-byte aligned rows
//     workspace : the row offsets [G+1] (i64) and the groups' first tiles [G+1] (i32) on the device,
//                 stream-ordered on ctx.stream or from ctx.allocator (Workspace)
//     run       : grouped_gemm_run<T, OutT>, grouped_wgrad_run<T> (generated grouped_gemm_<dtype>.cu)
//   moe_dispatch_plan: device indices → moe_plan_run (moe_plan.cu), the plan mirrored to the host, bad ids named
//   moe_permute / moe_unpermute / moe_row_dot / moe_scale_rows: the plan's map uploaded, then moe_*_run<T>
//     (generated moe_permute_<dtype>.cu) for bf16, f16 or f32 rows with f32 weights
// Test: tests/gpu/test_cuda_grouped_gemm.cpp, tests/gpu/test_cuda_moe_permute.cpp (ctest -L gpu; -L emu)
#include "cuda_compat.cuh"  // first: the prelude of every CUDA source

#include <cstdint>
#include <initializer_list>
#include <span>
#include <utility>
#include <vector>

#include "op_helpers.cuh"
#include "vlpar/core/dispatch.hpp"
#include "vlpar/kernels/cuda/grouped_gemm_params.hpp"
#include "vlpar/kernels/cuda/moe_permute_params.hpp"
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

/// Row stride of a 2D or 3D view's matrices (any value works for a single row; its width is used then).
int64_t matrix_ld(const TensorView& v) { return v.size(-2) <= 1 ? v.size(-1) : v.stride(-2); }

/// The plan's map (row_assignment or assignment_row, [R] i32) copied to the device into ws on ctx.stream.
Result<const int32_t*> upload_map(const Context& ctx, Workspace& ws, const std::vector<int32_t>& map) {
  VLPAR_RETURN_IF_ERROR(ws.allocate(map.size() * sizeof(int32_t)));
  VLPAR_CUDA_CHECK(cudaMemcpyAsync(ws.ptr<int32_t>(), map.data(), map.size() * sizeof(int32_t),
                                   cudaMemcpyHostToDevice, static_cast<cudaStream_t>(ctx.stream)));
  return ws.ptr<const int32_t>();
}

/// The named error for the first invalid assignment a that the device found (the host check's wording).
Status bad_index_error(const char* op, const TensorView& indices, int64_t a, int num_experts, cudaStream_t stream) {
  const int64_t K = indices.size(1), t = a / K, k = a % K;
  std::vector<int32_t> row(size_t(K), 0);
  VLPAR_CUDA_CHECK(cudaMemcpyAsync(row.data(), indices.ptr<int32_t>() + t * K, size_t(K) * sizeof(int32_t),
                                   cudaMemcpyDeviceToHost, stream));
  VLPAR_CUDA_CHECK(cudaStreamSynchronize(stream));
  const int32_t e = row[size_t(k)];
  VLPAR_CHECK(e >= 0 && e < num_experts, "{}: indices[{}, {}] = {} is outside [0, {})", op, t, k, e, num_experts);
  for (int64_t j = 0; j < k; ++j)
    VLPAR_CHECK(row[size_t(j)] != e, "{}: indices row {} selects expert {} twice (slots {} and {})", op, t, e, j, k);
  return VLPAR_STATUS(StatusCode::kInternal, "{}: the device flagged assignment {} but it is valid", op, a);
}

}  // namespace

Status moe_dispatch_plan(const Context& ctx, MoeDispatch& plan, TensorView indices, int num_experts) {
  const char* op = "moe_dispatch_plan";
  const int64_t R = indices.numel();
  plan.num_experts = num_experts;
  plan.top_k = int(indices.size(1));
  plan.num_tokens = indices.size(0);
  plan.row_multiple = 1;
  plan.offsets.assign(size_t(num_experts) + 1, 0);
  plan.row_assignment.assign(size_t(R), 0);
  plan.assignment_row.assign(size_t(R), 0);
  if (R == 0) return Status::Ok();
  VLPAR_ASSIGN_OR_RETURN(const int device, cuda_device_of(op, {{"indices", &indices}}));
  const Status st = on_device(op, device, [&]() -> Status {
    cuda_kernels::MoePlanParams p{};
    p.indices = indices.ptr<int32_t>();
    p.assignments = R;
    p.top_k = plan.top_k;
    p.experts = num_experts;
    p.chunks = int((R + cuda_kernels::kMoePlanChunk - 1) / cuda_kernels::kMoePlanChunk);
    // workspace: offsets [E + 1] i64 | maps [2, R] i32 | bad [1] i32 | counts [E, C] i32
    const size_t off_bytes = size_t(num_experts + 1) * sizeof(int64_t), map_bytes = size_t(R) * sizeof(int32_t);
    Workspace ws(ctx, device);
    VLPAR_RETURN_IF_ERROR(
        ws.allocate(off_bytes + 2 * map_bytes + sizeof(int32_t) + size_t(num_experts) * p.chunks * sizeof(int32_t)));
    char* base = ws.ptr<char>();
    p.offsets = reinterpret_cast<int64_t*>(base);
    p.row_assignment = reinterpret_cast<int32_t*>(base + off_bytes);
    p.assignment_row = p.row_assignment + R;
    p.bad = p.assignment_row + R;
    p.counts = p.bad + 1;
    const auto stream = static_cast<cudaStream_t>(ctx.stream);
    const int32_t none = int32_t(R);
    VLPAR_CUDA_CHECK(cudaMemcpyAsync(p.bad, &none, sizeof(int32_t), cudaMemcpyHostToDevice, stream));
    VLPAR_RETURN_IF_ERROR(cuda_kernels::moe_plan_run(p, ctx.stream));
    int32_t bad = 0;  // the host sync point of the dispatch: the offsets size the grouped GEMMs
    VLPAR_CUDA_CHECK(cudaMemcpyAsync(&bad, p.bad, sizeof(int32_t), cudaMemcpyDeviceToHost, stream));
    VLPAR_CUDA_CHECK(cudaMemcpyAsync(plan.offsets.data(), p.offsets, off_bytes, cudaMemcpyDeviceToHost, stream));
    VLPAR_CUDA_CHECK(cudaMemcpyAsync(plan.row_assignment.data(), p.row_assignment, map_bytes, cudaMemcpyDeviceToHost,
                                     stream));
    VLPAR_CUDA_CHECK(cudaMemcpyAsync(plan.assignment_row.data(), p.assignment_row, map_bytes, cudaMemcpyDeviceToHost,
                                     stream));
    VLPAR_CUDA_CHECK(cudaStreamSynchronize(stream));
    return bad < R ? bad_index_error(op, indices, bad, num_experts, stream) : Status::Ok();
  });
  if (!st.ok()) plan = MoeDispatch{};  // never a half-built plan
  return st;
}

namespace {

/// The row ops' shared launch: `rows` share one dtype (bf16, f16, f32), `f32` (the weights or the dots; may be
/// empty) is f32, all on one device; the plan's map uploaded into p.map, then run<T>(p).
template <class Run>
Status run_rows(const Context& ctx, const char* op, std::initializer_list<std::pair<const char*, const TensorView*>>
                rows, std::pair<const char*, const TensorView*> f32, const std::vector<int32_t>& map,
                cuda_kernels::MoeRowsParams p, const Run& run) {
  const TensorView& first = *rows.begin()->second;
  for (const auto& [name, v] : rows)
    VLPAR_CHECK(v->dtype == first.dtype, "{}: {} has dtype {} but {} has {} (one row dtype)", op, name,
                dtype_name(v->dtype), rows.begin()->first, dtype_name(first.dtype));
  VLPAR_CHECK_CODE(f32.second->empty() || f32.second->dtype == DType::kF32, StatusCode::kNotSupported,
                   "{}: {} must be f32, got {}", op, f32.first, f32.second->to_string());
  VLPAR_CHECK_CODE(first.dtype == DType::kBF16 || first.dtype == DType::kF16 || first.dtype == DType::kF32,
                   StatusCode::kNotSupported, "{}: the CUDA kernels take bf16, f16 or f32 rows, got {}", op,
                   first.to_string());
  std::vector<std::pair<const char*, const TensorView*>> all(rows);
  all.push_back(f32);
  VLPAR_ASSIGN_OR_RETURN(const int device, cuda_device_of(op, all));
  return on_device(op, device, [&]() -> Status {
    Workspace ws(ctx, device);
    VLPAR_ASSIGN_OR_RETURN(p.map, upload_map(ctx, ws, map));
    VLPAR_FLOAT_SWITCH(first.dtype, T, op, {
      return if_compiled<T>(op, [&]<class U>() -> Status { return run.template operator()<U>(p); });
    });
    return Status::Ok();
  });
}

}  // namespace

Status moe_permute(const Context& ctx, TensorView out, TensorView in, TensorView weights, const MoeDispatch& plan) {
  cuda_kernels::MoeRowsParams p{};
  p.out = out.data;
  p.in = in.data;
  p.weights = weights.empty() ? nullptr : weights.ptr<float>();
  p.items = plan.num_rows();
  p.cols = in.size(1);
  p.ld_out = matrix_ld(out);
  p.ld_in = matrix_ld(in);
  p.top_k = plan.top_k;
  p.gather = 1;
  return run_rows(ctx, "moe_permute", {{"in", &in}, {"out", &out}}, {"weights", &weights},
                  plan.row_assignment, p, [&]<class T>(const cuda_kernels::MoeRowsParams& q) {
                    return cuda_kernels::moe_permute_run<T>(q, ctx.stream);
                  });
}

Status moe_scale_rows(const Context& ctx, TensorView rows, TensorView weights, const MoeDispatch& plan) {
  cuda_kernels::MoeRowsParams p{};
  p.out = rows.data;
  p.in = rows.data;
  p.weights = weights.ptr<float>();
  p.items = plan.num_rows();
  p.cols = rows.size(1);
  p.ld_out = p.ld_in = matrix_ld(rows);
  p.top_k = plan.top_k;
  p.gather = 0;
  return run_rows(ctx, "moe_scale_rows", {{"rows", &rows}}, {"weights", &weights}, plan.row_assignment, p,
                  [&]<class T>(const cuda_kernels::MoeRowsParams& q) {
                    return cuda_kernels::moe_permute_run<T>(q, ctx.stream);
                  });
}

Status moe_unpermute(const Context& ctx, TensorView out, TensorView rows, TensorView weights,
                     const MoeDispatch& plan) {
  cuda_kernels::MoeRowsParams p{};
  p.out = out.data;
  p.in = rows.data;
  p.weights = weights.empty() ? nullptr : weights.ptr<float>();
  p.items = plan.num_tokens;
  p.cols = rows.size(1);
  p.ld_out = matrix_ld(out);
  p.ld_in = matrix_ld(rows);
  p.top_k = plan.top_k;
  return run_rows(ctx, "moe_unpermute", {{"rows", &rows}, {"out", &out}}, {"weights", &weights},
                  plan.assignment_row, p, [&]<class T>(const cuda_kernels::MoeRowsParams& q) {
                    return cuda_kernels::moe_unpermute_run<T>(q, ctx.stream);
                  });
}

Status moe_row_dot(const Context& ctx, TensorView dweights, TensorView a, TensorView b, const MoeDispatch& plan) {
  VLPAR_CHECK(dweights.is_contiguous(), "moe_row_dot: dweights must be contiguous, got {}", dweights.to_string());
  cuda_kernels::MoeRowsParams p{};
  p.out = dweights.data;
  p.in = a.data;
  p.in2 = b.data;
  p.items = plan.num_assignments();
  p.cols = a.size(1);
  p.ld_in = matrix_ld(a);
  p.ld_in2 = matrix_ld(b);
  p.top_k = plan.top_k;
  return run_rows(ctx, "moe_row_dot", {{"a", &a}, {"b", &b}}, {"dweights", &dweights}, plan.assignment_row, p,
                  [&]<class T>(const cuda_kernels::MoeRowsParams& q) {
                    return cuda_kernels::moe_row_dot_run<T>(q, ctx.stream);
                  });
}

namespace {

/// The operand dtypes the tensor-core kernels take: a and b (dc) bf16 or f16 alike, c in their dtype or f32.
Status check_gemm_dtypes(const char* op, const TensorView& c, const TensorView& a, const TensorView& b,
                         const char* b_name) {
  VLPAR_CHECK_CODE(a.dtype == DType::kBF16 || a.dtype == DType::kF16, StatusCode::kNotSupported,
                   "{}: the CUDA kernel takes bf16 or f16 operands, got a {}", op, a.to_string());
  VLPAR_CHECK(b.dtype == a.dtype, "{}: {} has dtype {} but a has {} (one input dtype)", op, b_name,
              dtype_name(b.dtype), dtype_name(a.dtype));
  VLPAR_CHECK_CODE(c.dtype == a.dtype || c.dtype == DType::kF32, StatusCode::kNotSupported,
                   "{}: c must be {} or f32 (fp32 accumulation, one rounding), got {}", op, dtype_name(a.dtype),
                   c.to_string());
  return Status::Ok();
}

/// Uploads the groups' row offsets and tile map once into a workspace, then run<T>(p) for every launch p of `ps`
/// (the entries of a batched GEMM share the groups and differ in their pointers); nothing when there is no tile.
template <class Params, class Run>
Status run_on_groups(const Context& ctx, const char* op, int device, std::span<const Params> ps,
                     std::span<const int64_t> offsets, const std::vector<int32_t>& tiles, DType in, const Run& run) {
  if (ps.empty() || tiles.back() == 0) return Status::Ok();
  return on_device(op, device, [&]() -> Status {
    Workspace ws(ctx, device);
    VLPAR_ASSIGN_OR_RETURN(const DeviceGroups groups, upload_groups(ctx, ws, offsets, tiles));
    auto typed = [&]<class T>() -> Status {
      for (Params p : ps) {
        p.groups = int(offsets.size()) - 1;
        p.total_tiles = tiles.back();
        p.offsets = groups.offsets;
        p.tile_offsets = groups.tiles;
        VLPAR_RETURN_IF_ERROR(run.template operator()<T>(p));
      }
      return Status::Ok();
    };
    return in == DType::kBF16 ? if_compiled<bf16>(op, typed) : if_compiled<f16>(op, typed);
  });
}

/// Runs the grouped GEMM launches ps (one shape: N, Kd) over the groups of `offsets`.
Status launch_grouped(const Context& ctx, const char* op, int device,
                      std::span<const cuda_kernels::GroupedGemmParams> ps, std::span<const int64_t> offsets, DType in,
                      DType out) {
  if (ps.empty()) return Status::Ok();
  const int64_t col_tiles = (ps[0].n + cuda_kernels::kGroupedGemmTileCols - 1) / cuda_kernels::kGroupedGemmTileCols;
  VLPAR_ASSIGN_OR_RETURN(const auto tiles, tile_prefix(op, offsets, [&](int64_t rows) {
    return (rows + cuda_kernels::kGroupedGemmTileRows - 1) / cuda_kernels::kGroupedGemmTileRows * col_tiles;
  }));
  return run_on_groups(ctx, op, device, ps, offsets, tiles, in,
                       [&]<class T>(const cuda_kernels::GroupedGemmParams& q) -> Status {
                         return out == DType::kF32 ? cuda_kernels::grouped_gemm_run<T, float>(q, ctx.stream)
                                                   : cuda_kernels::grouped_gemm_run<T, T>(q, ctx.stream);
                       });
}

/// Runs the weight-gradient launches ps (one shape: Kd, N; one beta) over the groups of `offsets`; an empty group
/// gets tiles only when beta != 1 (dw = beta · dw must still be applied).
Status launch_wgrad(const Context& ctx, const char* op, int device,
                    std::span<const cuda_kernels::GroupedWgradParams> ps, std::span<const int64_t> offsets, DType in) {
  if (ps.empty()) return Status::Ok();
  const cuda_kernels::GroupedWgradParams& p = ps[0];
  const int64_t out_tiles = (p.kd + cuda_kernels::kGroupedGemmTileRows - 1) / cuda_kernels::kGroupedGemmTileRows *
                            ((p.n + cuda_kernels::kGroupedGemmTileCols - 1) / cuda_kernels::kGroupedGemmTileCols);
  VLPAR_ASSIGN_OR_RETURN(const auto tiles, tile_prefix(op, offsets, [&](int64_t rows) {
    return rows > 0 || p.beta != 1.f ? out_tiles : 0;
  }));
  return run_on_groups(ctx, op, device, ps, offsets, tiles, in,
                       [&]<class T>(const cuda_kernels::GroupedWgradParams& q) -> Status {
                         return cuda_kernels::grouped_wgrad_run<T>(q, ctx.stream);
                       });
}

/// Byte offset of batch entry i of a 2D or 3D view (a batch of 1 broadcasts).
int64_t batch_bytes(const TensorView& v, int64_t i) {
  return v.ndim() == 3 && v.size(0) > 1 ? i * v.stride(0) * int64_t(dtype_size(v.dtype)) : 0;
}

}  // namespace

Status grouped_gemm(const Context& ctx, TensorView c, TensorView a, TensorView b, std::span<const int64_t> offsets,
                    GemmDesc desc) {
  const char* op = "grouped_gemm";
  VLPAR_RETURN_IF_ERROR(check_gemm_dtypes(op, c, a, b, "b"));
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
  p.trans_b = desc.trans_b ? 1 : 0;
  p.alpha = desc.alpha;
  p.beta = desc.beta;
  VLPAR_CHECK_CODE(p.b_group_stride % 8 == 0, StatusCode::kNotSupported,
                   "{}: b's group stride {} is not a multiple of 8 elements (16-byte rows)", op, p.b_group_stride);
  return launch_grouped(ctx, op, device, {&p, 1}, offsets, a.dtype, c.dtype);
}

Status grouped_weight_grad(const Context& ctx, TensorView dw, TensorView a, TensorView dc,
                           std::span<const int64_t> offsets) {
  const char* op = "grouped_weight_grad";
  VLPAR_CHECK_CODE(dw.dtype == DType::kF32, StatusCode::kNotSupported,
                   "{}: dw must be f32 (the gradient accumulates in fp32), got {}", op, dw.to_string());
  VLPAR_RETURN_IF_ERROR(check_gemm_dtypes(op, dw, a, dc, "dc"));
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
  p.ldw = p.n;
  p.dw_group_stride = p.kd * p.n;
  p.alpha = p.beta = 1.f;
  return launch_wgrad(ctx, op, device, {&p, 1}, offsets, a.dtype);
}

Status gemm(const Context& ctx, TensorView c, TensorView a, TensorView b, GemmDesc desc) {
  const char* op = "gemm";
  VLPAR_RETURN_IF_ERROR(check_gemm_dtypes(op, c, a, b, "b"));
  VLPAR_CHECK_CODE(!(desc.trans_a && desc.trans_b), StatusCode::kNotSupported,
                   "{}: the CUDA GEMM takes op(A) = Aᵀ only with B untransposed (the weight gradient)", op);
  VLPAR_CHECK_CODE(!desc.trans_a || c.dtype == DType::kF32, StatusCode::kNotSupported,
                   "{}: with trans_a (a weight gradient) the CUDA GEMM writes f32 C, got {}", op, c.to_string());
  VLPAR_ASSIGN_OR_RETURN(const int device, cuda_device_of(op, {{"C", &c}, {"A", &a}, {"B", &b}}));
  for (const auto& [name, v] : {std::pair{"A", &a}, std::pair{"B", &b}, std::pair{"C", &c}})
    VLPAR_RETURN_IF_ERROR(check_cp_async_base(op, name, *v));
  const int64_t batch = c.ndim() == 3 ? c.size(0) : 1, M = c.size(-2), N = c.size(-1);
  const int64_t K = desc.trans_a ? a.size(-2) : a.size(-1);
  // One launch per batch entry, each a one-group grouped GEMM; the group (and its tile map) is the same for all.
  std::vector<cuda_kernels::GroupedWgradParams> wgrads;
  std::vector<cuda_kernels::GroupedGemmParams> gemms;
  for (int64_t i = 0; i < batch; ++i) {
    auto* ci = static_cast<char*>(c.data) + batch_bytes(c, i);
    const auto* ai = static_cast<const char*>(a.data) + batch_bytes(a, i);
    const auto* bi = static_cast<const char*>(b.data) + batch_bytes(b, i);
    if (desc.trans_a) {  // C[M, N] = alpha · A[K, M]ᵀ · B[K, N] + beta · C: the K rows are the one group
      cuda_kernels::GroupedWgradParams p{};
      p.dw = reinterpret_cast<float*>(ci);
      p.a = ai;
      p.dc = bi;
      p.lda = matrix_ld(a);
      p.lddc = matrix_ld(b);
      p.ldw = matrix_ld(c);
      p.kd = M;
      p.n = N;
      p.alpha = desc.alpha;
      p.beta = desc.beta;
      wgrads.push_back(p);
    } else {  // C[M, N] = alpha · A[M, K] · op(B) + beta · C: the M rows are the one group
      cuda_kernels::GroupedGemmParams p{};
      p.c = ci;
      p.a = ai;
      p.b = bi;
      p.lda = matrix_ld(a);
      p.ldb = matrix_ld(b);
      p.ldc = matrix_ld(c);
      p.n = N;
      p.kd = K;
      p.trans_b = desc.trans_b ? 1 : 0;
      p.alpha = desc.alpha;
      p.beta = desc.beta;
      gemms.push_back(p);
    }
  }
  const int64_t rows[2] = {0, desc.trans_a ? K : M};
  if (desc.trans_a) return launch_wgrad(ctx, op, device, wgrads, rows, a.dtype);
  return launch_grouped(ctx, op, device, gemms, rows, a.dtype, c.dtype);
}

}  // namespace vlpar::cuda_impl
