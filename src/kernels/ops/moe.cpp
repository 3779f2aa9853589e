// The public MoE token-path ops (dispatch plan, permute / unpermute, row dots and scaling, grouped GEMMs): every
// argument checked once here (expert ids and the plan included), then the device's implementation (CPU:
// src/kernels/cpu/moe.cpp; CUDA views: src/kernels/cuda/moe_ops.cu, the grouped GEMMs on grouped_gemm_kernel.cuh,
// the plan and the row ops on moe_permute_kernel.cuh). Test: tests/unit/test_moe.cpp,
// tests/gpu/test_cuda_grouped_gemm.cpp, tests/gpu/test_cuda_moe_permute.cpp.
#include "vlpar/kernels/moe.hpp"

#include <cstdint>
#include <initializer_list>
#include <utility>

#include "../cpu_impl.hpp"
#include "vlpar/core/checks.hpp"
#include "vlpar/kernels/cuda_ops.hpp"

namespace vlpar {
namespace {

Status check_f32_cpu(const char* op, const char* name, const TensorView& v) {
  VLPAR_CHECK_CODE(v.dtype == DType::kF32, StatusCode::kNotSupported,
                   "{}: {} must be f32 (the CPU MoE kernels store f32), got {}", op, name, v.to_string());
  VLPAR_CHECK_CODE(v.device.is_cpu(), StatusCode::kNotSupported, "{}: {} must be on the CPU, got {}", op, name,
                   v.to_string());
  return Status::Ok();
}

/// A float (f32, bf16, f16) view in host memory: the CPU kernels' rows (f32 arithmetic, one rounding per result).
Status check_float_cpu(const char* op, const char* name, const TensorView& v) {
  VLPAR_CHECK_CODE(v.dtype == DType::kF32 || v.dtype == DType::kBF16 || v.dtype == DType::kF16,
                   StatusCode::kNotSupported, "{}: {} must be f32, bf16 or f16, got {}", op, name, v.to_string());
  VLPAR_CHECK_CODE(v.device.is_cpu(), StatusCode::kNotSupported, "{}: {} must be on the CPU, got {}", op, name,
                   v.to_string());
  return Status::Ok();
}

/// (CPU; cuda_impl checks its operands itself.)
Status check_same_dtype(const char* op, const char* a_name, const TensorView& a, const char* b_name,
                        const TensorView& b) {
  VLPAR_CHECK(a.dtype == b.dtype, "{}: {} {} and {} {} differ in dtype", op, a_name, a.to_string(), b_name,
              b.to_string());
  return Status::Ok();
}

/// [rows, cols] (either may be -1 = any) with a contiguous last dim and non-overlapping rows: its shape. With
/// cpu, also a float dtype in host memory (the CPU kernels).
Result<std::pair<int64_t, int64_t>> check_rows(const char* op, const char* name, const TensorView& v, int64_t rows,
                                               int64_t cols, bool cpu = true) {
  VLPAR_CHECK(v.ndim() == 2, "{}: {} must be 2D [{}, {}], got {}", op, name, rows, cols, v.to_string());
  VLPAR_CHECK((rows < 0 || v.size(0) == rows) && (cols < 0 || v.size(1) == cols), "{}: {} must be [{}, {}], got {}",
              op, name, rows < 0 ? v.size(0) : rows, cols < 0 ? v.size(1) : cols, v.to_string());
  if (cpu) VLPAR_RETURN_IF_ERROR(check_float_cpu(op, name, v));
  VLPAR_CHECK((v.stride(1) == 1 || v.size(1) <= 1) && (v.size(0) <= 1 || v.stride(0) >= v.size(1)),
              "{}: {} must have a contiguous last dim and non-overlapping rows, got {}", op, name, v.to_string());
  return std::pair<int64_t, int64_t>{v.size(0), v.size(1)};
}

Status check_plan(const char* op, const MoeDispatch& p) {
  VLPAR_CHECK(p.num_experts > 0 && p.top_k > 0 && p.num_tokens >= 0 &&
                  p.offsets.size() == size_t(p.num_experts) + 1 &&
                  p.row_assignment.size() == size_t(p.num_rows()) &&
                  p.assignment_row.size() == size_t(p.num_assignments()),
              "{}: the dispatch plan is not built (call moe_dispatch_plan first)", op);
  return Status::Ok();
}

/// The optional [T, K] routing weights (empty: none); f32 (on the CPU unless cuda: cuda_impl checks the device).
Status check_weights(const char* op, const TensorView& w, const MoeDispatch& p, bool cuda) {
  if (w.empty()) return Status::Ok();
  VLPAR_CHECK(w.ndim() == 2 && w.size(0) == p.num_tokens && w.size(1) == p.top_k && w.is_contiguous(),
              "{}: weights must be contiguous [{}, {}] (tokens, top_k) or empty, got {}", op, p.num_tokens, p.top_k,
              w.to_string());
  VLPAR_CHECK_CODE(w.dtype == DType::kF32, StatusCode::kNotSupported, "{}: weights must be f32, got {}", op,
                   w.to_string());
  return cuda ? Status::Ok() : check_f32_cpu(op, "weights", w);
}

/// Whether any view is on a CUDA device (the op then runs cuda_impl, which names a device mix).
bool any_cuda(std::initializer_list<const TensorView*> views) {
  for (const TensorView* v : views)
    if (v->device.is_cuda()) return true;
  return false;
}

Status check_offsets(const char* op, std::span<const int64_t> off, int64_t rows) {
  VLPAR_CHECK(off.size() >= 2, "{}: offsets needs G + 1 >= 2 entries, got {}", op, off.size());
  VLPAR_CHECK(off.front() >= 0 && off.back() <= rows, "{}: offsets span [{}, {}) but the operands have {} rows", op,
              off.front(), off.back(), rows);
  for (size_t g = 0; g + 1 < off.size(); ++g)
    VLPAR_CHECK(off[g] <= off[g + 1], "{}: offsets must be non-decreasing, but offsets[{}] = {} > offsets[{}] = {}",
                op, g, off[g], g + 1, off[g + 1]);
  return Status::Ok();
}

}  // namespace

Status moe_dispatch_plan(const Context& ctx, MoeDispatch& plan, TensorView indices, int num_experts) {
  const char* op = "moe_dispatch_plan";
  VLPAR_CHECK(num_experts > 0, "{}: num_experts must be positive, got {}", op, num_experts);
  VLPAR_CHECK(indices.ndim() == 2 && indices.is_contiguous() && indices.size(1) > 0 &&
                  indices.size(1) <= num_experts,
              "{}: indices must be contiguous [T, K] with 1 <= K <= {} experts, got {}", op, num_experts,
              indices.to_string());
  VLPAR_CHECK(indices.dtype == DType::kI32, "{}: indices must be i32, got {}", op, indices.to_string());
  const int64_t T = indices.size(0), K = indices.size(1);
  VLPAR_CHECK(T * K <= INT32_MAX, "{}: {} (token, slot) assignments overflow the i32 row ids", op, T * K);
  if (indices.device.is_cuda()) return cuda_impl::moe_dispatch_plan(ctx, plan, indices, num_experts);
  const int32_t* idx = indices.ptr<int32_t>();
  for (int64_t t = 0; t < T; ++t)
    for (int64_t k = 0; k < K; ++k) {
      const int32_t e = idx[t * K + k];
      VLPAR_CHECK(e >= 0 && e < num_experts, "{}: indices[{}, {}] = {} is outside [0, {})", op, t, k, e, num_experts);
      for (int64_t j = 0; j < k; ++j)
        VLPAR_CHECK(idx[t * K + j] != e, "{}: indices row {} selects expert {} twice (slots {} and {})", op, t, e, j,
                    k);
    }
  return cpu_impl::moe_dispatch_plan(ctx, plan, indices, num_experts);
}

Status moe_permute(const Context& ctx, TensorView out, TensorView in, TensorView weights, const MoeDispatch& plan) {
  const char* op = "moe_permute";
  VLPAR_RETURN_IF_ERROR(check_plan(op, plan));
  const bool cuda = any_cuda({&out, &in, &weights});
  VLPAR_ASSIGN_OR_RETURN(const auto x, check_rows(op, "in", in, plan.num_tokens, -1, !cuda));
  VLPAR_RETURN_IF_ERROR(check_rows(op, "out", out, plan.num_rows(), x.second, !cuda).status());
  if (!cuda) VLPAR_RETURN_IF_ERROR(check_same_dtype(op, "out", out, "in", in));
  VLPAR_RETURN_IF_ERROR(check_weights(op, weights, plan, cuda));
  if (cuda) return cuda_impl::moe_permute(ctx, out, in, weights, plan);
  return cpu_impl::moe_permute(ctx, out, in, weights, plan);
}

Status moe_unpermute(const Context& ctx, TensorView out, TensorView rows, TensorView weights,
                     const MoeDispatch& plan) {
  const char* op = "moe_unpermute";
  VLPAR_RETURN_IF_ERROR(check_plan(op, plan));
  const bool cuda = any_cuda({&out, &rows, &weights});
  VLPAR_ASSIGN_OR_RETURN(const auto y, check_rows(op, "rows", rows, plan.num_rows(), -1, !cuda));
  VLPAR_RETURN_IF_ERROR(check_rows(op, "out", out, plan.num_tokens, y.second, !cuda).status());
  if (!cuda) VLPAR_RETURN_IF_ERROR(check_same_dtype(op, "out", out, "rows", rows));
  VLPAR_RETURN_IF_ERROR(check_weights(op, weights, plan, cuda));
  if (cuda) return cuda_impl::moe_unpermute(ctx, out, rows, weights, plan);
  return cpu_impl::moe_unpermute(ctx, out, rows, weights, plan);
}

Status moe_row_dot(const Context& ctx, TensorView dweights, TensorView a, TensorView b, const MoeDispatch& plan) {
  const char* op = "moe_row_dot";
  VLPAR_RETURN_IF_ERROR(check_plan(op, plan));
  const bool cuda = any_cuda({&dweights, &a, &b});
  VLPAR_ASSIGN_OR_RETURN(const auto ra, check_rows(op, "a", a, plan.num_rows(), -1, !cuda));
  VLPAR_RETURN_IF_ERROR(check_rows(op, "b", b, plan.num_rows(), ra.second, !cuda).status());
  VLPAR_RETURN_IF_ERROR(check_rows(op, "dweights", dweights, plan.num_tokens, plan.top_k, !cuda).status());
  if (!cuda) VLPAR_RETURN_IF_ERROR(check_same_dtype(op, "a", a, "b", b));
  if (!cuda) VLPAR_RETURN_IF_ERROR(check_f32_cpu(op, "dweights", dweights));
  if (cuda) return cuda_impl::moe_row_dot(ctx, dweights, a, b, plan);
  return cpu_impl::moe_row_dot(ctx, dweights, a, b, plan);
}

Status moe_scale_rows(const Context& ctx, TensorView rows, TensorView weights, const MoeDispatch& plan) {
  const char* op = "moe_scale_rows";
  VLPAR_RETURN_IF_ERROR(check_plan(op, plan));
  const bool cuda = any_cuda({&rows, &weights});
  VLPAR_RETURN_IF_ERROR(check_rows(op, "rows", rows, plan.num_rows(), -1, !cuda).status());
  if (plan.num_rows() == 0) return Status::Ok();  // nothing to scale (zero-row weights are an empty view)
  VLPAR_CHECK(!weights.empty(), "{}: weights must be [{}, {}], got an empty view", op, plan.num_tokens, plan.top_k);
  VLPAR_RETURN_IF_ERROR(check_weights(op, weights, plan, cuda));
  if (cuda) return cuda_impl::moe_scale_rows(ctx, rows, weights, plan);
  return cpu_impl::moe_scale_rows(ctx, rows, weights, plan);
}

Status grouped_gemm(const Context& ctx, TensorView c, TensorView a, TensorView b, std::span<const int64_t> offsets,
                    GemmDesc desc) {
  const char* op = "grouped_gemm";
  VLPAR_CHECK_CODE(!desc.trans_a, StatusCode::kNotSupported, "{}: trans_a is not supported (a is [rows, Kd])", op);
  const bool cuda = any_cuda({&a, &b, &c});
  VLPAR_ASSIGN_OR_RETURN(const auto ma, check_rows(op, "a", a, -1, -1, !cuda));
  VLPAR_ASSIGN_OR_RETURN(const auto mc, check_rows(op, "c", c, ma.first, -1, !cuda));
  VLPAR_RETURN_IF_ERROR(check_offsets(op, offsets, ma.first));
  const int64_t G = int64_t(offsets.size()) - 1, Kd = ma.second, N = mc.second;
  VLPAR_CHECK(b.ndim() == 3 && (b.size(0) == G || b.size(0) == 1),
              "{}: b must be 3D with {} groups (or 1, broadcast), got {}", op, G, b.to_string());
  VLPAR_CHECK(b.size(1) == (desc.trans_b ? N : Kd) && b.size(2) == (desc.trans_b ? Kd : N),
              "{}: b must be [{}, {}, {}]{} for a {} and c {}, got {}", op, b.size(0), desc.trans_b ? N : Kd,
              desc.trans_b ? Kd : N, desc.trans_b ? " (trans_b)" : "", a.to_string(), c.to_string(), b.to_string());
  if (!cuda) VLPAR_RETURN_IF_ERROR(check_float_cpu(op, "b", b));
  VLPAR_CHECK((b.stride(2) == 1 || b.size(2) <= 1) && b.stride(1) >= b.size(2),
              "{}: b must have a contiguous last dim and non-overlapping rows, got {}", op, b.to_string());
  if (cuda) return cuda_impl::grouped_gemm(ctx, c, a, b, offsets, desc);
  return cpu_impl::grouped_gemm(ctx, c, a, b, offsets, desc);
}

Status grouped_weight_grad(const Context& ctx, TensorView dw, TensorView a, TensorView dc,
                           std::span<const int64_t> offsets) {
  const char* op = "grouped_weight_grad";
  const bool cuda = any_cuda({&a, &dc, &dw});
  VLPAR_ASSIGN_OR_RETURN(const auto ma, check_rows(op, "a", a, -1, -1, !cuda));
  VLPAR_ASSIGN_OR_RETURN(const auto mdc, check_rows(op, "dc", dc, ma.first, -1, !cuda));
  VLPAR_RETURN_IF_ERROR(check_offsets(op, offsets, ma.first));
  const int64_t G = int64_t(offsets.size()) - 1, Kd = ma.second, N = mdc.second;
  VLPAR_CHECK(dw.ndim() == 3 && dw.size(0) == G && dw.size(1) == Kd && dw.size(2) == N && dw.is_contiguous(),
              "{}: dw must be contiguous [{}, {}, {}] for a {} and dc {}, got {}", op, G, Kd, N, a.to_string(),
              dc.to_string(), dw.to_string());
  if (cuda) return cuda_impl::grouped_weight_grad(ctx, dw, a, dc, offsets);
  VLPAR_RETURN_IF_ERROR(check_f32_cpu(op, "dw", dw));
  return cpu_impl::grouped_weight_grad(ctx, dw, a, dc, offsets);
}

}  // namespace vlpar
