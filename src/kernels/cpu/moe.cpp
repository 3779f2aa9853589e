// CPU MoE dispatch plan, permute/unpermute (combine), routing-weight gradient and grouped GEMMs.
// The computation only: src/kernels/ops/moe.cpp checks the arguments. See include/vlpar/kernels/moe.hpp.
// Test: tests/unit/test_moe.cpp
#include "vlpar/kernels/moe.hpp"

#include <algorithm>
#include <vector>

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

/// The rows of a checked view (src/kernels/ops/moe.cpp checked shape, dtype and layout).
F32Rows rows_of(const TensorView& v) {
  return F32Rows{v.ptr<float>(), v.size(0), v.size(1), v.size(0) <= 1 ? v.size(1) : v.stride(0)};
}

/// The optional [T, K] routing weights: nullptr when empty.
const float* weights_of(const TensorView& w) { return w.empty() ? nullptr : w.ptr<float>(); }

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

Status moe_dispatch_plan(const Context&, MoeDispatch& plan, TensorView indices, int num_experts) {
  const int64_t T = indices.size(0), K = indices.size(1), R = T * K;
  const int32_t* idx = indices.ptr<int32_t>();
  std::vector<int64_t> counts(size_t(num_experts), 0);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t k = 0; k < K; ++k) {
      const int32_t e = idx[t * K + k];
      ++counts[size_t(e)];
    }
  plan.num_experts = num_experts;
  plan.top_k = int(K);
  plan.num_tokens = T;
  plan.row_multiple = 1;
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
  const F32Rows x = rows_of(in);
  const F32Rows y = rows_of(out);
  const float* w = weights_of(weights);
  const int64_t K = plan.top_k, F = x.cols;
  parallel_for(ctx, y.rows, y.cols * 2, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int32_t a = plan.row_assignment[size_t(r)];
      float* dst = y.row(r);
      if (a < 0) {  // a padding row (moe_pad_plan)
        std::fill(dst, dst + F, 0.f);
        continue;
      }
      const float* src = x.row(a / K);
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
  const F32Rows y = rows_of(rows);
  const F32Rows o = rows_of(out);
  const float* w = weights_of(weights);
  const int64_t K = plan.top_k, F = y.cols;
  parallel_for(ctx, o.rows, K * F * 2, [&](int64_t begin, int64_t end) {
    std::vector<int32_t> mine(static_cast<size_t>(K));
    for (int64_t t = begin; t < end; ++t) {
      // Rows are grouped by ascending expert, so ascending row = ascending expert (HF's index_add_ order).
      for (int64_t k = 0; k < K; ++k) mine[size_t(k)] = plan.assignment_row[size_t(t * K + k)];
      std::sort(mine.begin(), mine.end());
      float* dst = o.row(t);
      std::fill(dst, dst + F, 0.f);
      for (const int32_t r : mine) {
        if (r < 0) continue;  // dropped (capacity): not part of the sum
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
  const F32Rows ra = rows_of(a);
  const F32Rows rb = rows_of(b);
  const F32Rows dw = rows_of(dweights);
  const int64_t K = plan.top_k, F = ra.cols;
  parallel_for(ctx, plan.num_tokens, K * F * 2, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t)
      for (int64_t k = 0; k < K; ++k) {
        const int32_t r = plan.assignment_row[size_t(t * K + k)];
        if (r < 0) {  // dropped (capacity): its weight does not enter the output
          dw.row(t)[k] = 0.f;
          continue;
        }
        const float *pa = ra.row(r), *pb = rb.row(r);
        float acc = 0.f;
        for (int64_t f = 0; f < F; ++f) acc += pa[f] * pb[f];
        dw.row(t)[k] = acc;
      }
  });
  return Status::Ok();
}

Status moe_scale_rows(const Context& ctx, TensorView rows, TensorView weights, const MoeDispatch& plan) {
  const F32Rows y = rows_of(rows);
  const float* w = weights_of(weights);
  parallel_for(ctx, y.rows, y.cols * 2, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int32_t a = plan.row_assignment[size_t(r)];
      float* p = y.row(r);
      if (a < 0) {  // a padding row becomes zero, as on CUDA
        std::fill(p, p + y.cols, 0.f);
        continue;
      }
      for (int64_t f = 0; f < y.cols; ++f) p[f] *= w[a];
    }
  });
  return Status::Ok();
}

namespace {
/// Rows of a tile are computed in whole multiples of this: Eigen's GEMM kernel runs rows in blocks of three SIMD
/// packets with one accumulator per element, and the remainder rows (one packet with two alternating accumulators,
/// half packets, single rows; a one-row product becomes a matrix-vector product) with other sum orders, so a row's
/// result would depend on where it sits in its tile. 48 rows = 3 packets of 16 floats (AVX-512) = 6 of 8 (AVX2) =
/// 12 of 4 (SSE): padding every tile to a multiple of 48 rows (zero rows) sends each row through the widest kernel,
/// so it depends only on its own input row and the weights. Rows land in other tiles after an expert-parallel
/// dispatch, and EP = N then equals EP = 1 bitwise (tests: MoeGroupedGemm.RowResultDependsOnlyOnItsRow, every ISA).
constexpr int64_t kRowQuantum = 48;
static_assert(kMoeTileRows % kRowQuantum == 0);

/// Runs `g` (A not transposed) with its rows padded to a multiple of kRowQuantum: zero-padded copies of its A rows
/// and (when beta reads it) its C rows; the first g.M result rows are copied back.
void gemm_rows_padded(cpu::GemmF32 g) {
  const int64_t M = (g.M + kRowQuantum - 1) / kRowQuantum * kRowQuantum;
  std::vector<float> a(size_t(M * g.K), 0.f), c(size_t(M * g.N), 0.f);
  for (int64_t r = 0; r < g.M; ++r) {
    std::copy(g.a + r * g.lda, g.a + r * g.lda + g.K, a.begin() + r * g.K);
    if (g.beta != 0.f) std::copy(g.c + r * g.ldc, g.c + r * g.ldc + g.N, c.begin() + r * g.N);
  }
  cpu::GemmF32 padded = g;
  padded.M = M;
  padded.a = a.data();
  padded.lda = g.K;
  padded.c = c.data();
  padded.ldc = g.N;
  cpu::gemm_f32_serial(padded);
  for (int64_t r = 0; r < g.M; ++r) std::copy(c.begin() + r * g.N, c.begin() + (r + 1) * g.N, g.c + r * g.ldc);
}
}  // namespace

Status grouped_gemm(const Context& ctx, TensorView c, TensorView a, TensorView b, std::span<const int64_t> offsets,
                    GemmDesc desc) {
  const F32Rows ma = rows_of(a);
  const F32Rows mc = rows_of(c);
  const int64_t G = int64_t(offsets.size()) - 1, Kd = ma.cols, N = mc.cols;
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
    if (t.m % kRowQuantum != 0) return gemm_rows_padded(gm);
    cpu::gemm_f32_serial(gm);
  });
  return Status::Ok();
}

Status grouped_weight_grad(const Context& ctx, TensorView dw, TensorView a, TensorView dc,
                           std::span<const int64_t> offsets) {
  const F32Rows ma = rows_of(a);
  const F32Rows mdc = rows_of(dc);
  const int64_t G = int64_t(offsets.size()) - 1, Kd = ma.cols, N = mdc.cols;
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
