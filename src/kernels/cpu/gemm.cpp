// CPU GEMM (Eigen, fp32 accumulation) and linear layers built on it.
// Low-precision operands are widened to fp32 once per call; C is rounded once on store.
// The computation only: src/kernels/ops/gemm.cpp checks the arguments. Test: tests/unit/test_gemm.cpp
#include "vlpar/kernels/gemm.hpp"

#include <Eigen/Dense>
#include <vector>

#include "f32_rows.hpp"
#include "gemm_f32.hpp"
#include "vlpar/core/checks.hpp"
#include "vlpar/core/dispatch.hpp"

#include "isa_namespace.hpp"

namespace vlpar::VLPAR_CPU_ISA_NAMESPACE {
namespace cpu {
namespace {
using MatRM = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using CMap = Eigen::Map<const MatRM, Eigen::Unaligned, Eigen::OuterStride<>>;
using MMap = Eigen::Map<MatRM, Eigen::Unaligned, Eigen::OuterStride<>>;

// Rows [m0, m0+m) and columns [n0, n0+n) of C.
void gemm_block(const GemmF32& g, int64_t m0, int64_t m, int64_t n0, int64_t n) {
  if (m <= 0 || n <= 0) return;
  MMap C(g.c + m0 * g.ldc + n0, m, n, Eigen::OuterStride<>(g.ldc));
  if (g.beta == 0.f) C.setZero();
  else if (g.beta != 1.f) C *= g.beta;
  if (g.K == 0) return;
  // op(A) rows [m0, m0+m): A stored [M, K] → rows; stored [K, M] → columns.
  const float* a = g.trans_a ? g.a + m0 : g.a + m0 * g.lda;
  const float* b = g.trans_b ? g.b + n0 * g.ldb : g.b + n0;
  const int64_t ar = g.trans_a ? g.K : m, ac = g.trans_a ? m : g.K;
  const int64_t br = g.trans_b ? n : g.K, bc = g.trans_b ? g.K : n;
  CMap A(a, ar, ac, Eigen::OuterStride<>(g.lda));
  CMap B(b, br, bc, Eigen::OuterStride<>(g.ldb));
  if (!g.trans_a && !g.trans_b) C.noalias() += g.alpha * (A * B);
  else if (g.trans_a && !g.trans_b) C.noalias() += g.alpha * (A.transpose() * B);
  else if (!g.trans_a && g.trans_b) C.noalias() += g.alpha * (A * B.transpose());
  else C.noalias() += g.alpha * (A.transpose() * B.transpose());
}
}  // namespace

void gemm_f32_serial(const GemmF32& g) { gemm_block(g, 0, g.M, 0, g.N); }

void gemm_f32(const Context& ctx, const GemmF32& g) {
  const bool split_m = g.M >= g.N;
  const int64_t extent = split_m ? g.M : g.N, other = split_m ? g.N : g.M;
  // Parts by the work estimate (2·other·K flops per row or column of the split extent: a small product runs
  // inline), and no block narrower than 64 rows/cols (narrower ones waste Eigen's packing).
  const int64_t parts = std::min(num_parts(ctx, extent, 2 * other * g.K), std::max<int64_t>(1, extent / 64));
  parallel_for_n_parts(ctx, extent, parts, [&](int64_t, int64_t begin, int64_t end) {
    if (split_m) gemm_block(g, begin, end - begin, 0, g.N);
    else gemm_block(g, 0, g.M, begin, end - begin);
  });
}

}  // namespace cpu

namespace {

struct Mat {
  int64_t batch = 1, rows = 0, cols = 0, ld = 0, batch_stride = 0;
};

// The matrices of a checked view (src/kernels/ops/gemm.cpp checked shape, layout and dtype).
Mat as_mat(const TensorView& v) {
  Mat m;
  m.batch = v.ndim() == 3 ? v.size(0) : 1;
  m.batch_stride = v.ndim() == 3 ? v.stride(0) : 0;
  m.rows = v.size(-2);
  m.cols = v.size(-1);
  m.ld = std::max<int64_t>(v.stride(-2), m.cols);
  return m;
}

/// Matrix b of the batch of a checked view, untyped (src/kernels/cpu/f32_rows.hpp).
cpu::AnyRows batch_rows(const TensorView& v, const Mat& m, int64_t b) {
  return cpu::AnyRows{static_cast<char*>(v.data) + b * m.batch_stride * int64_t(dtype_size(v.dtype)), v.dtype,
                      m.rows, m.cols, m.ld};
}

}  // namespace

// 16-bit operands compute in f32: converted (exactly) into dense f32 copies, a 16-bit C computed in f32 and rounded
// once at the end; f32 matrices are used in place.
Status gemm(const Context& ctx, TensorView c, TensorView a, TensorView b, GemmDesc desc) {
  const Mat mc = as_mat(c), ma = as_mat(a), mb = as_mat(b);
  const int64_t K = desc.trans_a ? ma.rows : ma.cols;
  std::vector<float> sa, sb, sc;
  for (int64_t bi = 0; bi < mc.batch; ++bi) {
    const cpu::AnyRows ra = batch_rows(a, ma, ma.batch == 1 ? 0 : bi), rb = batch_rows(b, mb, mb.batch == 1 ? 0 : bi);
    const cpu::AnyRows rc = batch_rows(c, mc, bi);
    VLPAR_ASSIGN_OR_RETURN(const cpu::F32Rows fa, cpu::widen_rows(ctx, ra, sa));
    VLPAR_ASSIGN_OR_RETURN(const cpu::F32Rows fb, cpu::widen_rows(ctx, rb, sb));
    VLPAR_ASSIGN_OR_RETURN(const cpu::F32Rows fc, cpu::widen_rows(ctx, rc, sc, desc.beta != 0.f));
    cpu::gemm_f32(ctx, cpu::GemmF32{mc.rows, mc.cols, K, fa.data, fa.ld, desc.trans_a, fb.data, fb.ld, desc.trans_b,
                                    fc.data, fc.ld, desc.alpha, desc.beta});
    VLPAR_RETURN_IF_ERROR(cpu::narrow_rows(ctx, fc, rc));
  }
  return Status::Ok();
}

Status linear_forward(const Context& ctx, TensorView y, TensorView x, TensorView w, TensorView bias) {
  VLPAR_RETURN_IF_ERROR(VLPAR_CPU_ISA_NAMESPACE::gemm(ctx, y, x, w, GemmDesc{false, true, 1.f, 0.f}));
  if (bias.empty()) return Status::Ok();
  VLPAR_FLOAT_SWITCH(y.dtype, T, "linear_forward", {
    VLPAR_FLOAT_SWITCH(bias.dtype, B, "linear_forward", {
      const B* pb = bias.ptr<B>();
      parallel_for(ctx, y.size(0), y.size(1), [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
          T* row = y.ptr<T>() + r * y.stride(0);
          for (int64_t c = 0; c < y.size(1); ++c) row[c] = from_float<T>(to_float(row[c]) + to_float(pb[c]));
        }
      });
    });
  });
  return Status::Ok();
}

Status linear_backward(const Context& ctx, TensorView dx, TensorView dw, TensorView dbias, TensorView dy,
                       TensorView x, TensorView w) {
  if (!dx.empty()) {
    VLPAR_RETURN_IF_ERROR(VLPAR_CPU_ISA_NAMESPACE::gemm(ctx, dx, dy, w, GemmDesc{false, false, 1.f, 0.f}));  // [N,out]·[out,in]
  }
  if (!dw.empty()) {
    VLPAR_RETURN_IF_ERROR(VLPAR_CPU_ISA_NAMESPACE::gemm(ctx, dw, dy, x, GemmDesc{true, false, 1.f, 1.f}));  // += dyᵀ·x
  }
  if (!dbias.empty()) {
    const int64_t n = dy.size(0), out = dy.size(1), parts = num_parts(ctx, n);  // fp32 partials: num_threads parts
    std::vector<float> partial(size_t(parts * out), 0.f);
    VLPAR_FLOAT_SWITCH(dy.dtype, T, "linear_backward", {
      parallel_for_n_parts(ctx, n, parts, [&](int64_t part, int64_t begin, int64_t end) {
        float* acc = partial.data() + part * out;
        for (int64_t r = begin; r < end; ++r) {
          const T* row = dy.ptr<T>() + r * dy.stride(0);
          for (int64_t c = 0; c < out; ++c) acc[c] += to_float(row[c]);
        }
      });
    });
    float* db = dbias.ptr<float>();
    for (int64_t p = 0; p < parts; ++p)
      for (int64_t c = 0; c < out; ++c) db[c] += partial[size_t(p * out + c)];
  }
  return Status::Ok();
}

}  // namespace vlpar::VLPAR_CPU_ISA_NAMESPACE
