// CPU MoE dispatch plan, permute/unpermute (combine), routing-weight gradient and grouped GEMMs.
// The computation only: src/kernels/ops/moe.cpp checks the arguments. See include/vlpar/kernels/moe.hpp.
// Test: tests/unit/test_moe.cpp
#include "vlpar/kernels/moe.hpp"

#include <algorithm>
#include <vector>

#include "f32_rows.hpp"
#include "gemm_f32.hpp"
#include "vlpar/core/dispatch.hpp"

#include "isa_namespace.hpp"

namespace vlpar::VLPAR_CPU_ISA_NAMESPACE {
namespace {

using cpu::F32Rows;
using cpu::Rows;

/// The rows of a checked view (src/kernels/ops/moe.cpp checked shape, dtype and layout).
template <class T = float>
Rows<T> rows_of(const TensorView& v) {
  return Rows<T>{v.ptr<T>(), v.size(0), v.size(1), v.size(0) <= 1 ? v.size(1) : v.stride(0)};
}

/// The same rows, untyped (src/kernels/cpu/f32_rows.hpp).
cpu::AnyRows any_rows_of(const TensorView& v) {
  return cpu::AnyRows{v.data, v.dtype, v.size(0), v.size(1), v.size(0) <= 1 ? v.size(1) : v.stride(0)};
}

/// The optional [T, K] routing weights: nullptr when empty.
const float* weights_of(const TensorView& w) { return w.empty() ? nullptr : w.ptr<float>(); }

/// f32 rows of a float view for the GEMMs (cpu::widen_rows: the view itself when f32, else an exact dense copy).
Result<F32Rows> f32_rows(const Context& ctx, const TensorView& v, std::vector<float>& store, bool load = true) {
  return cpu::widen_rows(ctx, any_rows_of(v), store, load);
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

namespace {

template <class T>
void permute_rows(const Context& ctx, const Rows<T>& y, const Rows<T>& x, const float* w, const MoeDispatch& plan) {
  const int64_t K = plan.top_k, F = x.cols;
  parallel_for(ctx, y.rows, y.cols * 2, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int32_t a = plan.row_assignment[size_t(r)];
      T* dst = y.row(r);
      if (a < 0) {  // a padding row (moe_pad_plan)
        std::fill(dst, dst + F, from_float<T>(0.f));
        continue;
      }
      const T* src = x.row(a / K);
      if (w) {
        const float s = w[a];
        for (int64_t f = 0; f < F; ++f) dst[f] = from_float<T>(s * to_float(src[f]));
      } else {
        std::copy(src, src + F, dst);
      }
    }
  });
}

template <class T>
void unpermute_rows(const Context& ctx, const Rows<T>& o, const Rows<T>& y, const float* w, const MoeDispatch& plan) {
  const int64_t K = plan.top_k, F = y.cols;
  parallel_for(ctx, o.rows, K * F * 2, [&](int64_t begin, int64_t end) {
    std::vector<int32_t> mine(static_cast<size_t>(K));
    std::vector<float> acc(static_cast<size_t>(F));  // the token's sum in f32, rounded once into its row
    for (int64_t t = begin; t < end; ++t) {
      // Rows are grouped by ascending expert, so ascending row = ascending expert (HF's index_add_ order).
      for (int64_t k = 0; k < K; ++k) mine[size_t(k)] = plan.assignment_row[size_t(t * K + k)];
      std::sort(mine.begin(), mine.end());
      std::fill(acc.begin(), acc.end(), 0.f);
      for (const int32_t r : mine) {
        if (r < 0) continue;  // dropped (capacity): not part of the sum
        const T* src = y.row(r);
        const float s = w ? w[plan.row_assignment[size_t(r)]] : 1.f;
        if (w) {
          for (int64_t f = 0; f < F; ++f) acc[size_t(f)] += s * to_float(src[f]);
        } else {
          for (int64_t f = 0; f < F; ++f) acc[size_t(f)] += to_float(src[f]);
        }
      }
      T* dst = o.row(t);
      for (int64_t f = 0; f < F; ++f) dst[f] = from_float<T>(acc[size_t(f)]);
    }
  });
}

}  // namespace

Status moe_permute(const Context& ctx, TensorView out, TensorView in, TensorView weights, const MoeDispatch& plan) {
  VLPAR_FLOAT_SWITCH(in.dtype, T, "moe_permute",
                     { permute_rows<T>(ctx, rows_of<T>(out), rows_of<T>(in), weights_of(weights), plan); });
  return Status::Ok();
}

Status moe_unpermute(const Context& ctx, TensorView out, TensorView rows, TensorView weights,
                     const MoeDispatch& plan) {
  VLPAR_FLOAT_SWITCH(rows.dtype, T, "moe_unpermute",
                     { unpermute_rows<T>(ctx, rows_of<T>(out), rows_of<T>(rows), weights_of(weights), plan); });
  return Status::Ok();
}

Status moe_row_dot(const Context& ctx, TensorView dweights, TensorView a, TensorView b, const MoeDispatch& plan) {
  const F32Rows dw = rows_of<float>(dweights);
  const int64_t K = plan.top_k, F = a.size(1);
  VLPAR_FLOAT_SWITCH(a.dtype, T, "moe_row_dot", {
    const Rows<T> ra = rows_of<T>(a), rb = rows_of<T>(b);
    parallel_for(ctx, plan.num_tokens, K * F * 2, [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t)
        for (int64_t k = 0; k < K; ++k) {
          const int32_t r = plan.assignment_row[size_t(t * K + k)];
          if (r < 0) {  // dropped (capacity): its weight does not enter the output
            dw.row(t)[k] = 0.f;
            continue;
          }
          const T *pa = ra.row(r), *pb = rb.row(r);
          float acc = 0.f;
          for (int64_t f = 0; f < F; ++f) acc += to_float(pa[f]) * to_float(pb[f]);
          dw.row(t)[k] = acc;
        }
    });
  });
  return Status::Ok();
}

Status moe_scale_rows(const Context& ctx, TensorView rows, TensorView weights, const MoeDispatch& plan) {
  const float* w = weights_of(weights);
  VLPAR_FLOAT_SWITCH(rows.dtype, T, "moe_scale_rows", {
    const Rows<T> y = rows_of<T>(rows);
    parallel_for(ctx, y.rows, y.cols * 2, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const int32_t a = plan.row_assignment[size_t(r)];
        T* p = y.row(r);
        if (a < 0) {  // a padding row becomes zero, as on CUDA
          std::fill(p, p + y.cols, from_float<T>(0.f));
          continue;
        }
        for (int64_t f = 0; f < y.cols; ++f) p[f] = from_float<T>(to_float(p[f]) * w[a]);
      }
    });
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

// The grouped GEMMs compute in f32: bf16/f16 operands are converted (exactly) into dense f32 copies first, a
// bf16/f16 C is computed in f32 and rounded once at the end, so a row's result is the f32 path's on the same values.
Status grouped_gemm(const Context& ctx, TensorView c, TensorView a, TensorView b, std::span<const int64_t> offsets,
                    GemmDesc desc) {
  std::vector<float> a_store, c_store;
  VLPAR_ASSIGN_OR_RETURN(const F32Rows ma, f32_rows(ctx, a, a_store));
  VLPAR_ASSIGN_OR_RETURN(const F32Rows mc, f32_rows(ctx, c, c_store, desc.beta != 0.f));
  const int64_t G = int64_t(offsets.size()) - 1, Kd = ma.cols, N = mc.cols;
  // b[g] in f32: the view itself, or a widened dense copy of each b matrix a group with rows reads (an expert
  // without tokens costs nothing; a broadcast b is widened once).
  const bool widen = b.dtype != DType::kF32;
  const int64_t ldb = widen ? b.size(2) : std::max(b.stride(1), b.size(2));
  std::vector<const float*> bg(size_t(G), nullptr);
  std::vector<std::vector<float>> b_store(size_t(b.size(0)));
  for (int64_t g = 0; g < G; ++g) {
    const int64_t bi = b.size(0) == 1 ? 0 : g;
    if (!widen) {
      bg[size_t(g)] = b.ptr<float>() + bi * b.stride(0);
      continue;
    }
    if (offsets[size_t(g) + 1] == offsets[size_t(g)]) continue;
    if (b_store[size_t(bi)].empty()) {
      const int64_t es = int64_t(dtype_size(b.dtype));
      const cpu::AnyRows m{static_cast<char*>(b.data) + bi * b.stride(0) * es, b.dtype, b.size(1), b.size(2),
                           b.stride(1)};
      VLPAR_RETURN_IF_ERROR(cpu::widen_rows(ctx, m, b_store[size_t(bi)]).status());
    }
    bg[size_t(g)] = b_store[size_t(bi)].data();
  }
  const std::vector<Tile> tiles =
      make_tiles(G, [&](int64_t g) { return offsets[size_t(g) + 1] - offsets[size_t(g)]; }, N);
  parallel_for_dynamic(ctx, int64_t(tiles.size()), [&](int64_t i) {
    const Tile& t = tiles[size_t(i)];
    const int64_t row0 = offsets[size_t(t.g)] + t.m0;
    const float* bt = bg[size_t(t.g)];
    cpu::GemmF32 gm;
    gm.M = t.m;
    gm.N = t.n;
    gm.K = Kd;
    gm.a = ma.row(row0);
    gm.lda = ma.ld;
    gm.b = desc.trans_b ? bt + t.n0 * ldb : bt + t.n0;
    gm.ldb = ldb;
    gm.trans_b = desc.trans_b;
    gm.c = mc.row(row0) + t.n0;
    gm.ldc = mc.ld;
    gm.alpha = desc.alpha;
    gm.beta = desc.beta;
    if (t.m % kRowQuantum != 0) return gemm_rows_padded(gm);
    cpu::gemm_f32_serial(gm);
  });
  // A 16-bit c gets the groups' rows back, rounded once; rows outside [offsets[0], offsets[G]) stay untouched.
  const int64_t lo = offsets.front(), hi = offsets.back();
  return cpu::narrow_rows(ctx, F32Rows{mc.row(lo), hi - lo, mc.cols, mc.ld}, any_rows_of(c.slice(0, lo, hi)));
}

Status grouped_weight_grad(const Context& ctx, TensorView dw, TensorView a, TensorView dc,
                           std::span<const int64_t> offsets) {
  std::vector<float> a_store, dc_store;  // bf16/f16 operands as dense f32 copies; dw is f32
  VLPAR_ASSIGN_OR_RETURN(const F32Rows ma, f32_rows(ctx, a, a_store));
  VLPAR_ASSIGN_OR_RETURN(const F32Rows mdc, f32_rows(ctx, dc, dc_store));
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
