// The public position-embedding ops: every argument checked once here, then the device's implementation (CPU:
// src/kernels/cpu/pos_embed.cpp; no CUDA kernel yet). Test: tests/unit/test_pos_embed.cpp.
#include "vlpar/kernels/pos_embed.hpp"

#include <fmt/core.h>

#include <limits>

#include "../cpu_impl.hpp"
#include "vlpar/core/checks.hpp"

namespace vlpar {
namespace {

/// f32: the view must be f32 (a gradient); else any of f32, bf16, f16.
Status check_matrix(const char* op, const char* name, const TensorView& v, int64_t rows, int64_t cols, bool f32) {
  VLPAR_CHECK(v.ndim() == 2 && v.size(0) == rows && v.size(1) == cols, "{}: {} must be [{}, {}], got {}", op, name,
              rows, cols, v.to_string());
  VLPAR_CHECK(v.dtype == DType::kF32 || (!f32 && (v.dtype == DType::kBF16 || v.dtype == DType::kF16)),
              "{}: {} must be {}, got {}", op, name, f32 ? "f32 (gradients accumulate in f32)" : "f32, bf16 or f16",
              v.to_string());
  VLPAR_CHECK(v.is_contiguous(), "{}: {} must be contiguous, got {}", op, name, v.to_string());
  VLPAR_CHECK_CODE(v.device.is_cpu(), StatusCode::kNotSupported, "{}: {} is on {} but there is no CUDA kernel yet",
                   op, name, v.device.to_string());
  VLPAR_CHECK(v.data != nullptr || v.numel() == 0, "{}: {} has null data", op, name);
  return Status::Ok();
}

/// grad_table: the table is a gradient (pos_embed_backward's dtable), accumulated in f32.
Status check_args(const char* op, const char* pe_name, const TensorView& pe, const char* table_name,
                  const TensorView& table, std::span<const VisionGrid> grids, const PosEmbedDesc& d, bool grad_table) {
  VLPAR_CHECK(d.side >= 1 && d.side <= 46340, "{}: table side G = {} must be in [1, 46340] (G² indexes fit i32)", op,
              d.side);
  VLPAR_CHECK(d.merge >= 1, "{}: merge size must be positive, got {}", op, d.merge);
  VLPAR_RETURN_IF_ERROR(check_vision_grids(op, grids, d.merge));
  VLPAR_CHECK(table.ndim() == 2, "{}: {} must be [G², Hv], got {}", op, table_name, table.to_string());
  VLPAR_CHECK(pe.ndim() == 2, "{}: {} must be [Np, Hv], got {}", op, pe_name, pe.to_string());
  int64_t np = 0;
  for (const VisionGrid& g : grids) np += g.patches();
  const int64_t hv = table.size(1);
  VLPAR_RETURN_IF_ERROR(check_matrix(op, table_name, table, d.side * d.side, hv, grad_table));
  return check_matrix(op, pe_name, pe, np, hv, false);
}

}  // namespace

Status check_vision_grids(const char* who, std::span<const VisionGrid> grids, int64_t merge) {
  for (size_t i = 0; i < grids.size(); ++i) {
    const VisionGrid& g = grids[i];
    VLPAR_RETURN_IF_ERROR(check_vision_grid(g, fmt::format("{}: grid {}", who, i)));
    VLPAR_CHECK(g.h % merge == 0, "{}: grid {} (t={}, h={}, w={}): h={} is not divisible by the merge size {}", who,
                i, g.t, g.h, g.w, g.h, merge);
    VLPAR_CHECK(g.w % merge == 0, "{}: grid {} (t={}, h={}, w={}): w={} is not divisible by the merge size {}", who,
                i, g.t, g.h, g.w, g.w, merge);
  }
  // The i32 vision cu_seqlens hold the running patch count.
  return total_grid_patches(grids, fmt::format("{}: the grids", who)).status();
}

Status pos_embed_forward(const Context& ctx, TensorView pe, TensorView table, std::span<const VisionGrid> grids,
                         const PosEmbedDesc& desc) {
  VLPAR_RETURN_IF_ERROR(check_args("pos_embed_forward", "pe", pe, "table", table, grids, desc, false));
  return cpu_impl::pos_embed_forward(ctx, pe, table, grids, desc);
}

Status pos_embed_backward(const Context& ctx, TensorView dtable, TensorView dpe, std::span<const VisionGrid> grids,
                          const PosEmbedDesc& desc) {
  VLPAR_RETURN_IF_ERROR(check_args("pos_embed_backward", "dpe", dpe, "dtable", dtable, grids, desc, true));
  return cpu_impl::pos_embed_backward(ctx, dtable, dpe, grids, desc);
}

}  // namespace vlpar
