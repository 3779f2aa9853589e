// CPU MoE dispatch plan, permute/unpermute (combine), routing-weight gradient and grouped GEMMs.
// See include/vlpar/kernels/moe.hpp. Test: tests/unit/test_moe.cpp
#include "vlpar/kernels/moe.hpp"

#include <algorithm>

#include "gemm_f32.hpp"

#include "isa_namespace.hpp"

namespace vlpar::VLPAR_CPU_ISA_NAMESPACE {
namespace {

/// A row-major f32 CPU matrix with a contiguous last dim (rows may be strided, e.g. a column slice).
struct F32Rows {
  float* data = nullptr;
  int64_t rows = 0, cols = 0, ld = 0;
  float* row(int64_t r) const { return data + r * ld; }
};

Status check_f32_cpu(const char* op, const char* name, const TensorView& v) {
  VLPAR_CHECK_CODE(v.dtype == DType::kF32, StatusCode::kNotSupported,
                   "{}: {} must be f32 (the CPU MoE kernels store f32), got {}", op, name, v.to_string());
  VLPAR_CHECK_CODE(v.device.is_cpu(), StatusCode::kNotSupported, "{}: {} must be on the CPU (no CUDA MoE kernel "
                   "yet), got {}", op, name, v.to_string());
  return Status::Ok();
}

/// [rows, cols] (either may be -1 = any) with a contiguous last dim and non-overlapping rows.
Result<F32Rows> as_rows_f32(const char* op, const char* name, const TensorView& v, int64_t rows, int64_t cols) {
  VLPAR_CHECK(v.ndim() == 2, "{}: {} must be 2D [{}, {}], got {}", op, name, rows, cols, v.to_string());
  VLPAR_CHECK((rows < 0 || v.size(0) == rows) && (cols < 0 || v.size(1) == cols), "{}: {} must be [{}, {}], got {}",
              op, name, rows < 0 ? v.size(0) : rows, cols < 0 ? v.size(1) : cols, v.to_string());
  VLPAR_RETURN_IF_ERROR(check_f32_cpu(op, name, v));
  VLPAR_CHECK((v.stride(1) == 1 || v.size(1) <= 1) && (v.size(0) <= 1 || v.stride(0) >= v.size(1)),
              "{}: {} must have a contiguous last dim and non-overlapping rows, got {}", op, name, v.to_string());
  return F32Rows{v.ptr<float>(), v.size(0), v.size(1), v.size(0) <= 1 ? v.size(1) : v.stride(0)};
}

Status check_plan(const char* op, const MoeDispatch& p) {
  VLPAR_CHECK(p.num_experts > 0 && p.top_k > 0 && p.num_tokens >= 0 &&
                  p.offsets.size() == size_t(p.num_experts) + 1 &&
                  p.row_assignment.size() == size_t(p.num_rows()) && p.assignment_row.size() == size_t(p.num_rows()) &&
                  p.offsets.back() == p.num_rows(),
              "{}: the dispatch plan is not built (call moe_dispatch_plan first)", op);
  return Status::Ok();
}

/// The optional [T, K] routing weights: nullptr when empty.
Result<const float*> optional_weights(const char* op, const TensorView& w, const MoeDispatch& p) {
  if (w.empty()) return static_cast<const float*>(nullptr);
  VLPAR_CHECK(w.ndim() == 2 && w.size(0) == p.num_tokens && w.size(1) == p.top_k && w.is_contiguous(),
              "{}: weights must be contiguous [{}, {}] (tokens, top_k) or empty, got {}", op, p.num_tokens, p.top_k,
              w.to_string());
  VLPAR_RETURN_IF_ERROR(check_f32_cpu(op, "weights", w));
  return static_cast<const float*>(w.ptr<float>());
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

/// One output tile of a grouped GEMM: group g, rows [m0, m0 + m) of the group's output, columns [n0, n0 + n).
struct Tile {
  int64_t g, m0, m, n0, n;
};

std::vector<Tile> make_tiles(int64_t groups, const auto& rows_of_group, int64_t cols) {
  std::vector<Tile> tiles;
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t m_all = rows_of_group(g);
    for (int64_t m0 = 0; m0 < m_all; m0 += kMoeTileRows)
      for (int64_t n0 = 0; n0 < cols; n0 += kMoeTileCols)
        tiles.push_back(Tile{g, m0, std::min(kMoeTileRows, m_all - m0), n0, std::min(kMoeTileCols, cols - n0)});
  }
  return tiles;
}

}  // namespace

Status moe_dispatch_plan(MoeDispatch& plan, TensorView indices, int num_experts) {
  const char* op = "moe_dispatch_plan";
  VLPAR_CHECK(num_experts > 0, "{}: num_experts must be positive, got {}", op, num_experts);
  VLPAR_CHECK(indices.ndim() == 2 && indices.is_contiguous() && indices.size(1) > 0 &&
                  indices.size(1) <= num_experts,
              "{}: indices must be contiguous [T, K] with 1 <= K <= {} experts, got {}", op, num_experts,
              indices.to_string());
  VLPAR_CHECK(indices.dtype == DType::kI32 && indices.device.is_cpu(), "{}: indices must be i32 on the CPU, got {}",
              op, indices.to_string());
  const int64_t T = indices.size(0), K = indices.size(1), R = T * K;
  VLPAR_CHECK(R <= INT32_MAX, "{}: {} (token, slot) assignments overflow the i32 row ids", op, R);
  const int32_t* idx = indices.ptr<int32_t>();
  std::vector<int64_t> counts(size_t(num_experts), 0);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t k = 0; k < K; ++k) {
      const int32_t e = idx[t * K + k];
      VLPAR_CHECK(e >= 0 && e < num_experts, "{}: indices[{}, {}] = {} is outside [0, {})", op, t, k, e, num_experts);
      for (int64_t j = 0; j < k; ++j)
        VLPAR_CHECK(idx[t * K + j] != e, "{}: indices row {} selects expert {} twice (slots {} and {})", op, t, e, j,
                    k);
      ++counts[size_t(e)];
    }
  plan.num_experts = num_experts;
  plan.top_k = int(K);
  plan.num_tokens = T;
  plan.offsets.assign(size_t(num_experts) + 1, 0);
  for (int e = 0; e < num_experts; ++e) plan.offsets[size_t(e) + 1] = plan.offsets[size_t(e)] + counts[size_t(e)];
  // Stable counting sort: assignments in ascending a land in ascending rows of their expert.
  std::vector<int64_t> cursor(plan.offsets.begin(), plan.offsets.end() - 1);
  plan.row_assignment.assign(size_t(R), 0);
  plan.assignment_row.assign(size_t(R), 0);
  for (int64_t a = 0; a < R; ++a) {
    const int64_t r = cursor[size_t(idx[a])]++;
    plan.row_assignment[size_t(r)] = int32_t(a);
    plan.assignment_row[size_t(a)] = int32_t(r);
  }
  return Status::Ok();
}

Status moe_permute(const Context& ctx, TensorView out, TensorView in, TensorView weights, const MoeDispatch& plan) {
  const char* op = "moe_permute";
  VLPAR_RETURN_IF_ERROR(check_plan(op, plan));
  VLPAR_ASSIGN_OR_RETURN(F32Rows x, as_rows_f32(op, "in", in, plan.num_tokens, -1));
  VLPAR_ASSIGN_OR_RETURN(F32Rows y, as_rows_f32(op, "out", out, plan.num_rows(), x.cols));
  VLPAR_ASSIGN_OR_RETURN(const float* w, optional_weights(op, weights, plan));
  const int64_t K = plan.top_k, F = x.cols;
  parallel_for(ctx, y.rows, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int32_t a = plan.row_assignment[size_t(r)];
      const float* src = x.row(a / K);
      float* dst = y.row(r);
      if (w) {
        const float s = w[a];
        for (int64_t f = 0; f < F; ++f) dst[f] = s * src[f];
      } else {
        std::copy(src, src + F, dst);
      }
    }
  });
  return Status::Ok();
}

Status moe_unpermute(const Context& ctx, TensorView out, TensorView rows, TensorView weights,
                     const MoeDispatch& plan) {
  const char* op = "moe_unpermute";
  VLPAR_RETURN_IF_ERROR(check_plan(op, plan));
  VLPAR_ASSIGN_OR_RETURN(F32Rows y, as_rows_f32(op, "rows", rows, plan.num_rows(), -1));
  VLPAR_ASSIGN_OR_RETURN(F32Rows o, as_rows_f32(op, "out", out, plan.num_tokens, y.cols));
  VLPAR_ASSIGN_OR_RETURN(const float* w, optional_weights(op, weights, plan));
  const int64_t K = plan.top_k, F = y.cols;
  parallel_for(ctx, o.rows, [&](int64_t begin, int64_t end) {
    std::vector<int32_t> mine(static_cast<size_t>(K));
    for (int64_t t = begin; t < end; ++t) {
      // Rows are grouped by ascending expert, so ascending row = ascending expert (HF's index_add_ order).
      for (int64_t k = 0; k < K; ++k) mine[size_t(k)] = plan.assignment_row[size_t(t * K + k)];
      std::sort(mine.begin(), mine.end());
      float* dst = o.row(t);
      std::fill(dst, dst + F, 0.f);
      for (const int32_t r : mine) {
        const float* src = y.row(r);
        if (w) {
          const float s = w[plan.row_assignment[size_t(r)]];
          for (int64_t f = 0; f < F; ++f) dst[f] += s * src[f];
        } else {
          for (int64_t f = 0; f < F; ++f) dst[f] += src[f];
        }
      }
    }
  });
  return Status::Ok();
}

Status moe_row_dot(const Context& ctx, TensorView dweights, TensorView a, TensorView b, const MoeDispatch& plan) {
  const char* op = "moe_row_dot";
  VLPAR_RETURN_IF_ERROR(check_plan(op, plan));
  VLPAR_ASSIGN_OR_RETURN(F32Rows ra, as_rows_f32(op, "a", a, plan.num_rows(), -1));
  VLPAR_ASSIGN_OR_RETURN(F32Rows rb, as_rows_f32(op, "b", b, plan.num_rows(), ra.cols));
  VLPAR_ASSIGN_OR_RETURN(F32Rows dw, as_rows_f32(op, "dweights", dweights, plan.num_tokens, plan.top_k));
  const int64_t K = plan.top_k, F = ra.cols;
  parallel_for(ctx, plan.num_tokens, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t)
      for (int64_t k = 0; k < K; ++k) {
        const int32_t r = plan.assignment_row[size_t(t * K + k)];
        const float *pa = ra.row(r), *pb = rb.row(r);
        float acc = 0.f;
        for (int64_t f = 0; f < F; ++f) acc += pa[f] * pb[f];
        dw.row(t)[k] = acc;
      }
  });
  return Status::Ok();
}

Status moe_scale_rows(const Context& ctx, TensorView rows, TensorView weights, const MoeDispatch& plan) {
  const char* op = "moe_scale_rows";
  VLPAR_RETURN_IF_ERROR(check_plan(op, plan));
  VLPAR_ASSIGN_OR_RETURN(F32Rows y, as_rows_f32(op, "rows", rows, plan.num_rows(), -1));
  VLPAR_CHECK(!weights.empty(), "{}: weights must be [{}, {}], got an empty view", op, plan.num_tokens, plan.top_k);
  VLPAR_ASSIGN_OR_RETURN(const float* w, optional_weights(op, weights, plan));
  parallel_for(ctx, y.rows, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float s = w[plan.row_assignment[size_t(r)]];
      float* p = y.row(r);
      for (int64_t f = 0; f < y.cols; ++f) p[f] *= s;
    }
  });
  return Status::Ok();
}

Status grouped_gemm(const Context& ctx, TensorView c, TensorView a, TensorView b, std::span<const int64_t> offsets,
                    GemmDesc desc) {
  const char* op = "grouped_gemm";
  VLPAR_CHECK_CODE(!desc.trans_a, StatusCode::kNotSupported, "{}: trans_a is not supported (a is [rows, Kd])", op);
  VLPAR_ASSIGN_OR_RETURN(F32Rows ma, as_rows_f32(op, "a", a, -1, -1));
  VLPAR_ASSIGN_OR_RETURN(F32Rows mc, as_rows_f32(op, "c", c, ma.rows, -1));
  VLPAR_RETURN_IF_ERROR(check_offsets(op, offsets, ma.rows));
  const int64_t G = int64_t(offsets.size()) - 1, Kd = ma.cols, N = mc.cols;
  VLPAR_CHECK(b.ndim() == 3 && (b.size(0) == G || b.size(0) == 1),
              "{}: b must be 3D with {} groups (or 1, broadcast), got {}", op, G, b.to_string());
  VLPAR_CHECK(b.size(1) == (desc.trans_b ? N : Kd) && b.size(2) == (desc.trans_b ? Kd : N),
              "{}: b must be [{}, {}, {}]{} for a {} and c {}, got {}", op, b.size(0), desc.trans_b ? N : Kd,
              desc.trans_b ? Kd : N, desc.trans_b ? " (trans_b)" : "", a.to_string(), c.to_string(), b.to_string());
  VLPAR_RETURN_IF_ERROR(check_f32_cpu(op, "b", b));
  VLPAR_CHECK((b.stride(2) == 1 || b.size(2) <= 1) && b.stride(1) >= b.size(2),
              "{}: b must have a contiguous last dim and non-overlapping rows, got {}", op, b.to_string());
  const int64_t ldb = std::max(b.stride(1), b.size(2)), b_batch = b.size(0) == 1 ? 0 : b.stride(0);
  const std::vector<Tile> tiles =
      make_tiles(G, [&](int64_t g) { return offsets[size_t(g) + 1] - offsets[size_t(g)]; }, N);
  parallel_for_dynamic(ctx, int64_t(tiles.size()), [&](int64_t i) {
    const Tile& t = tiles[size_t(i)];
    const int64_t row0 = offsets[size_t(t.g)] + t.m0;
    const float* bg = b.ptr<float>() + t.g * b_batch;
    cpu::GemmF32 gm;
    gm.M = t.m;
    gm.N = t.n;
    gm.K = Kd;
    gm.a = ma.row(row0);
    gm.lda = ma.ld;
    gm.b = desc.trans_b ? bg + t.n0 * ldb : bg + t.n0;
    gm.ldb = ldb;
    gm.trans_b = desc.trans_b;
    gm.c = mc.row(row0) + t.n0;
    gm.ldc = mc.ld;
    gm.alpha = desc.alpha;
    gm.beta = desc.beta;
    cpu::gemm_f32_serial(gm);
  });
  return Status::Ok();
}

Status grouped_weight_grad(const Context& ctx, TensorView dw, TensorView a, TensorView dc,
                           std::span<const int64_t> offsets) {
  const char* op = "grouped_weight_grad";
  VLPAR_ASSIGN_OR_RETURN(F32Rows ma, as_rows_f32(op, "a", a, -1, -1));
  VLPAR_ASSIGN_OR_RETURN(F32Rows mdc, as_rows_f32(op, "dc", dc, ma.rows, -1));
  VLPAR_RETURN_IF_ERROR(check_offsets(op, offsets, ma.rows));
  const int64_t G = int64_t(offsets.size()) - 1, Kd = ma.cols, N = mdc.cols;
  VLPAR_CHECK(dw.ndim() == 3 && dw.size(0) == G && dw.size(1) == Kd && dw.size(2) == N && dw.is_contiguous(),
              "{}: dw must be contiguous [{}, {}, {}] for a {} and dc {}, got {}", op, G, Kd, N, a.to_string(),
              dc.to_string(), dw.to_string());
  VLPAR_RETURN_IF_ERROR(check_f32_cpu(op, "dw", dw));
  // Tiles of the output dw[g] [Kd, N]; each one reduces over all of the group's rows in one serial GEMM (fixed
  // K order), and groups without rows get no tile.
  const std::vector<Tile> tiles = make_tiles(
      G, [&](int64_t g) { return offsets[size_t(g) + 1] > offsets[size_t(g)] ? Kd : int64_t{0}; }, N);
  parallel_for_dynamic(ctx, int64_t(tiles.size()), [&](int64_t i) {
    const Tile& t = tiles[size_t(i)];
    const int64_t row0 = offsets[size_t(t.g)], rows = offsets[size_t(t.g) + 1] - row0;
    cpu::GemmF32 gm;
    gm.M = t.m;
    gm.N = t.n;
    gm.K = rows;
    gm.a = ma.row(row0) + t.m0;  // A stored [rows, Kd]; op(A) = Aᵀ, columns [m0, m0 + m)
    gm.lda = ma.ld;
    gm.trans_a = true;
    gm.b = mdc.row(row0) + t.n0;
    gm.ldb = mdc.ld;
    gm.c = dw.ptr<float>() + (t.g * Kd + t.m0) * N + t.n0;
    gm.ldc = N;
    gm.alpha = 1.f;
    gm.beta = 1.f;
    cpu::gemm_f32_serial(gm);
  });
  return Status::Ok();
}

}  // namespace vlpar::VLPAR_CPU_ISA_NAMESPACE
