// The cuBLASLt plan of a gemm (vlpar/kernels/cuda/cublaslt_plan.hpp), on the host: each plan is run by an fp64
// interpreter of cublasLtMatmul's definition (column-major operands with leading dims and batch strides, the
// transposes, alpha, beta, the bias epilogue) and must give exactly the row-major GEMM of the same views, computed
// here in fp64 with the same summation order; every transpose combination, batched and broadcast operands, strided
// views, the dtype combinations and the bias epilogue. The real cublasLtMatmul calls run on the GPU day.
// Run: ./build/cpu/tests/test_cublaslt_plan
#include <gtest/gtest.h>

#include <map>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "test_util.hpp"
#include "vlpar/kernels/cuda/cublaslt_plan.hpp"

namespace vlpar {
namespace {
using namespace vlpar::test;
using cuda_kernels::LtEpilogue;
using cuda_kernels::LtLayout;
using cuda_kernels::LtMatmulPlan;

double read(const void* base, DType dt, int64_t offset) {
  switch (dt) {
    case DType::kF32: return static_cast<const float*>(base)[offset];
    case DType::kBF16: return to_float(static_cast<const bf16*>(base)[offset]);
    case DType::kF16: return to_float(static_cast<const f16*>(base)[offset]);
    default: ADD_FAILURE() << "unexpected dtype"; return 0;
  }
}

/// cublasLtMatmul's definition in fp64, per batch entry b: D[i, j] = alpha · Σ_l op(A)[i, l] · op(B)[l, j]
/// + beta · C[i, j] (+ bias[i]); op(X)[r, s] is X[s, r] under a transpose; X[r, s] sits at r + s·ld in column-major
/// storage. Returns D by element offset from d_data (what the call would store where).
std::map<int64_t, double> interpret(const LtMatmulPlan& p) {
  std::map<int64_t, double> d;
  auto at = [](const LtLayout& l, int64_t b, int64_t r, int64_t s) {
    if (r < 0 || r >= l.rows || s < 0 || s >= l.cols || b >= l.batch_count)
      ADD_FAILURE() << "element (" << r << ", " << s << ") of batch " << b << " outside the layout " << l.rows
                    << " x " << l.cols << " x " << l.batch_count;
    return b * l.batch_stride + r + s * l.ld;
  };
  for (int64_t b = 0; b < p.d.batch_count; ++b)
    for (int64_t j = 0; j < p.n; ++j)
      for (int64_t i = 0; i < p.m; ++i) {
        double acc = 0;
        for (int64_t l = 0; l < p.k; ++l) {
          const double x = read(p.a_data, p.a.dtype, p.trans_a ? at(p.a, b, l, i) : at(p.a, b, i, l));
          const double y = read(p.b_data, p.b.dtype, p.trans_b ? at(p.b, b, j, l) : at(p.b, b, l, j));
          acc += x * y;
        }
        const int64_t off = at(p.d, b, i, j);
        double v = double(p.alpha) * acc;
        if (p.beta != 0.f) v += double(p.beta) * read(p.d_data, p.c.dtype, off);
        if (p.epilogue == LtEpilogue::kBias) v += read(p.bias, p.d.dtype, i);
        d[off] = v;
      }
  return d;
}

/// vlpar's row-major GEMM of the same views in fp64 (gemm.hpp's definition), by element offset from c.data.
std::map<int64_t, double> row_major(const TensorView& c, const TensorView& a, const TensorView& b, GemmDesc g,
                                    const TensorView& bias) {
  std::map<int64_t, double> out;
  const int64_t B = c.ndim() == 3 ? c.size(0) : 1, M = c.size(-2), N = c.size(-1);
  const int64_t K = g.trans_a ? a.size(-2) : a.size(-1);
  auto at = [](const TensorView& v, int64_t bi, int64_t r, int64_t s) {
    const int64_t base = v.ndim() == 3 && v.size(0) > 1 ? bi * v.stride(0) : 0;
    return base + r * v.stride(-2) + s * v.stride(-1);
  };
  for (int64_t bi = 0; bi < B; ++bi)
    for (int64_t r = 0; r < M; ++r)
      for (int64_t s = 0; s < N; ++s) {
        double acc = 0;
        for (int64_t l = 0; l < K; ++l)
          acc += read(b.data, b.dtype, g.trans_b ? at(b, bi, s, l) : at(b, bi, l, s)) *
                 read(a.data, a.dtype, g.trans_a ? at(a, bi, l, r) : at(a, bi, r, l));
        const int64_t off = at(c, bi, r, s);
        double v = double(g.alpha) * acc;
        if (g.beta != 0.f) v += double(g.beta) * read(c.data, c.dtype, off);
        if (!bias.empty()) v += read(bias.data, bias.dtype, s);
        out[off] = v;
      }
  return out;
}

struct PlanCase {
  bool ta, tb;
  DType ab, c;
  int64_t batch, a_batch, b_batch;  // 0: a 2D operand
  bool strided, bias;
  std::string name;
};

void PrintTo(const PlanCase& c, std::ostream* os) { *os << c.name; }

std::vector<PlanCase> cases() {
  std::vector<PlanCase> out;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      const std::string t = std::string(ta ? "T" : "N") + (tb ? "T" : "N");
      out.push_back({ta, tb, DType::kBF16, DType::kBF16, 0, 0, 0, false, false, t + "_bf16"});
      out.push_back({ta, tb, DType::kBF16, DType::kF32, 3, 3, 3, false, false, t + "_bf16_f32c_batched"});
      out.push_back({ta, tb, DType::kF16, DType::kF16, 3, 1, 3, true, false, t + "_f16_strided_broadcast_a"});
      out.push_back({ta, tb, DType::kF32, DType::kF32, 2, 2, 0, true, false, t + "_f32_strided_2d_b"});
      out.push_back({ta, tb, DType::kBF16, DType::kBF16, 0, 0, 0, true, true, t + "_bf16_bias"});
    }
  return out;
}

class CublasLtPlan : public ::testing::TestWithParam<PlanCase> {};

/// A [rows, cols] matrix (or [batch, rows, cols]) of random values; `strided`: a column window of a wider one, so
/// the row stride (and the batch stride) exceed the dense ones.
TensorView operand(Allocator& alloc, std::vector<Tensor>& keep, int64_t batch, int64_t rows, int64_t cols,
                   DType dt, bool strided, uint64_t seed) {
  const int64_t wide = strided ? cols + 5 : cols;
  Shape shape = batch ? Shape{batch, rows, wide} : Shape{rows, wide};
  keep.push_back(random_tensor(alloc, shape, dt, seed));
  return keep.back().view().slice(batch ? 2 : 1, 0, cols);
}

TEST_P(CublasLtPlan, RunsTheRowMajorGemm) {
  const PlanCase pc = GetParam();
  const int64_t M = 7, N = 5, K = 6;
  Allocator alloc;
  std::vector<Tensor> keep;  // the storage of the views below
  const TensorView a = operand(alloc, keep, pc.a_batch, pc.ta ? K : M, pc.ta ? M : K, pc.ab, pc.strided, 1);
  const TensorView b = operand(alloc, keep, pc.b_batch, pc.tb ? N : K, pc.tb ? K : N, pc.ab, pc.strided, 2);
  const TensorView c = operand(alloc, keep, pc.batch, M, N, pc.c, pc.strided, 3);
  if (pc.bias) keep.push_back(random_tensor(alloc, {N}, pc.c, 4));
  const TensorView bias1d = pc.bias ? keep.back().view() : TensorView{};
  const GemmDesc g{pc.ta, pc.tb, 1.5f, 0.5f};
  Result<LtMatmulPlan> plan = cuda_kernels::plan_cublaslt_gemm(c, a, b, g, bias1d, 80);
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  const LtMatmulPlan& p = plan.value();
  EXPECT_EQ(p.m, N);
  EXPECT_EQ(p.n, M);
  EXPECT_EQ(p.k, K);
  EXPECT_EQ(p.workspace_bytes, size_t(4) << 20);
  EXPECT_EQ(p.epilogue, pc.bias ? LtEpilogue::kBias : LtEpilogue::kDefault);
  // The layouts are the stored matrices: op(A) [m, k], op(B) [k, n], C and D [m, n].
  using Dims = std::pair<int64_t, int64_t>;
  EXPECT_EQ(p.trans_a ? Dims(p.a.cols, p.a.rows) : Dims(p.a.rows, p.a.cols), Dims(p.m, p.k));
  EXPECT_EQ(p.trans_b ? Dims(p.b.cols, p.b.rows) : Dims(p.b.rows, p.b.cols), Dims(p.k, p.n));
  EXPECT_EQ(Dims(p.c.rows, p.c.cols), Dims(p.m, p.n));
  EXPECT_EQ(Dims(p.d.rows, p.d.cols), Dims(p.m, p.n));
  for (const LtLayout* l : {&p.a, &p.b, &p.c, &p.d}) {
    EXPECT_GE(l->ld, l->rows) << "a leading dim below the rows";
    EXPECT_EQ(l->batch_count, pc.batch ? pc.batch : 1);
  }
  const std::map<int64_t, double> want = row_major(c, a, b, g, bias1d), got = interpret(p);
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [off, v] : want) {
    ASSERT_TRUE(got.count(off)) << "the plan leaves C's element at offset " << off << " unwritten";
    ASSERT_EQ(got.at(off), v) << "offset " << off;
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, CublasLtPlan, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return info.param.name; });

TEST(CublasLtPlan, WorkspaceFollowsTheArchitecture) {
  EXPECT_EQ(cuda_kernels::cublaslt_workspace_bytes(80), size_t(4) << 20);
  EXPECT_EQ(cuda_kernels::cublaslt_workspace_bytes(90), size_t(32) << 20);
  EXPECT_EQ(cuda_kernels::cublaslt_workspace_bytes(100), size_t(32) << 20);
}

TEST(CublasLtPlan, CombinationsWithoutAnFp32KernelAreNamed) {
  Allocator alloc;
  auto t = [&](Shape s, DType dt) { return Tensor::zeros(alloc, s, dt).value(); };
  const Tensor a16 = t({4, 3}, DType::kBF16), b16 = t({3, 5}, DType::kBF16), c16 = t({4, 5}, DType::kBF16);
  const Tensor bh = t({3, 5}, DType::kF16), ch = t({4, 5}, DType::kF16), c32 = t({4, 5}, DType::kF32);
  const Tensor a32 = t({4, 3}, DType::kF32), b32 = t({3, 5}, DType::kF32);
  auto message = [&](const Tensor& c, const Tensor& a, const Tensor& b, TensorView bias = {}) {
    return cuda_kernels::plan_cublaslt_gemm(c, a, b, GemmDesc{}, bias).status().message();
  };
  EXPECT_NE(message(c16, a16, bh).find("must have one dtype"), std::string::npos);
  EXPECT_NE(message(ch, a16, b16).find("bf16 A and B need C in bf16 or f32"), std::string::npos);
  EXPECT_NE(message(c16, a32, b32).find("f32 A and B need C in f32,"), std::string::npos);
  EXPECT_TRUE(cuda_kernels::plan_cublaslt_gemm(c32, a16, b16, GemmDesc{}).ok());
  const Tensor bias32 = t({5}, DType::kF32), bias4 = t({4}, DType::kBF16);
  EXPECT_NE(message(c16, a16, b16, bias32).find("bias of C's dtype bf16"), std::string::npos);
  EXPECT_NE(message(c16, a16, b16, bias4).find("contiguous [5] bias"), std::string::npos);
  // The gemm checks come first: shapes that do not chain are named as gemm names them.
  EXPECT_NE(message(c16, t({4, 2}, DType::kBF16), b16).find("inner dims differ"), std::string::npos);
}

}  // namespace
}  // namespace vlpar
