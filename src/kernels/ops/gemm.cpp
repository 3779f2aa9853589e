// The public GEMM and linear ops: every argument checked once here, then the device's implementation (CPU:
// src/kernels/cpu/gemm.cpp; CUDA views: gemm runs the grouped GEMM kernels with one group, src/kernels/cuda/moe_ops.cu;
// linear has no CUDA path yet), and the cuBLASLt plan of a gemm (vlpar/kernels/cuda/cublaslt_plan.hpp) from the same
// checks. Test: tests/unit/test_gemm.cpp, tests/unit/test_cublaslt_plan.cpp, tests/gpu/test_cuda_grouped_gemm.cpp.
#include "vlpar/kernels/gemm.hpp"

#include <algorithm>

#include "../cpu_impl.hpp"
#include "vlpar/core/checks.hpp"
#include "vlpar/kernels/cuda/cublaslt_plan.hpp"
#include "vlpar/kernels/cuda_ops.hpp"

namespace vlpar {
namespace {

struct Dims {
  int64_t batch = 1, rows = 0, cols = 0;
};

/// cuda: the operands of a CUDA gemm (cuda_impl checks they share one device); else they must be on the CPU.
Result<Dims> check_matrix(const char* what, const TensorView& v, bool cuda) {
  VLPAR_CHECK(v.ndim() == 2 || v.ndim() == 3, "gemm: {} must be 2D or 3D, got {}", what, v.to_string());
  VLPAR_RETURN_IF_ERROR(check_storage_dtype("gemm", what, v));
  VLPAR_CHECK(cuda || v.device.is_cpu(), "gemm: {} must be on the CPU like the other operands (CUDA: gemm only, "
              "not linear yet), got {}", what, v.to_string());
  VLPAR_CHECK(v.stride(-1) == 1 || v.size(-1) <= 1, "gemm: {} must have a contiguous last dim, got strides of {}",
              what, v.to_string());
  const Dims d{v.ndim() == 3 ? v.size(0) : 1, v.size(-2), v.size(-1)};
  VLPAR_CHECK(d.rows <= 1 || v.stride(-2) >= d.cols, "gemm: {} rows overlap (row stride {} < {} cols)", what,
              v.stride(-2), d.cols);
  return d;
}

// C = α·op(A)·op(B) + β·C: shapes, batches, dtypes, layout, device.
Status check_gemm(const TensorView& c, const TensorView& a, const TensorView& b, const GemmDesc& desc,
                  bool cuda = false) {
  VLPAR_ASSIGN_OR_RETURN(const Dims mc, check_matrix("C", c, cuda));
  VLPAR_ASSIGN_OR_RETURN(const Dims ma, check_matrix("A", a, cuda));
  VLPAR_ASSIGN_OR_RETURN(const Dims mb, check_matrix("B", b, cuda));
  const int64_t M = mc.rows, N = mc.cols, K = desc.trans_a ? ma.rows : ma.cols;
  VLPAR_CHECK((desc.trans_a ? ma.cols : ma.rows) == M, "gemm: op(A) {} has {} rows but C {} has {}", a.to_string(),
              desc.trans_a ? ma.cols : ma.rows, c.to_string(), M);
  VLPAR_CHECK((desc.trans_b ? mb.rows : mb.cols) == N, "gemm: op(B) {} has {} cols but C {} has {}", b.to_string(),
              desc.trans_b ? mb.rows : mb.cols, c.to_string(), N);
  VLPAR_CHECK((desc.trans_b ? mb.cols : mb.rows) == K, "gemm: inner dims differ: op(A) {} has K={} but op(B) {} "
              "has K={}", a.to_string(), K, b.to_string(), desc.trans_b ? mb.cols : mb.rows);
  VLPAR_CHECK((ma.batch == mc.batch || ma.batch == 1) && (mb.batch == mc.batch || mb.batch == 1),
              "gemm: batch sizes of A ({}), B ({}) and C ({}) must match or be 1", ma.batch, mb.batch, mc.batch);
  return Status::Ok();
}

/// The column-major view of the matrices of a checked row-major 2D/3D view as one cuBLASLt operand: [R, C] with
/// row stride s is [C, R] with leading dim s; a batch of 1 under a larger batch is read by every entry (stride 0).
cuda_kernels::LtLayout lt_layout(const TensorView& v, int64_t batch) {
  const int64_t rows = v.size(-2), cols = v.size(-1);
  const bool batched = v.ndim() == 3 && v.size(0) > 1;
  return cuda_kernels::LtLayout{v.dtype, cols, rows, rows <= 1 ? std::max<int64_t>(cols, 1) : v.stride(-2), batch,
                                batched ? v.stride(0) : 0};
}

Status check_linear(const char* op, const TensorView& y, const TensorView& x, const TensorView& w) {
  VLPAR_CHECK(x.ndim() == 2 && w.ndim() == 2 && y.ndim() == 2, "{}: x {}, weight {} and y {} must be 2D", op,
              x.to_string(), w.to_string(), y.to_string());
  VLPAR_CHECK(x.size(1) == w.size(1), "{}: x {} has {} features but weight {} expects {}", op, x.to_string(),
              x.size(1), w.to_string(), w.size(1));
  VLPAR_CHECK(y.size(0) == x.size(0) && y.size(1) == w.size(0), "{}: output {} must be [{}, {}]", op, y.to_string(),
              x.size(0), w.size(0));
  return Status::Ok();
}

}  // namespace

Status gemm(const Context& ctx, TensorView c, TensorView a, TensorView b, GemmDesc desc) {
  const bool cuda = c.device.is_cuda() || a.device.is_cuda() || b.device.is_cuda();
  VLPAR_RETURN_IF_ERROR(check_gemm(c, a, b, desc, cuda));
  if (cuda) return cuda_impl::gemm(ctx, c, a, b, desc);
  return cpu_impl::gemm(ctx, c, a, b, desc);
}

Status linear_forward(const Context& ctx, TensorView y, TensorView x, TensorView w, TensorView bias) {
  VLPAR_RETURN_IF_ERROR(check_linear("linear_forward", y, x, w));
  VLPAR_RETURN_IF_ERROR(check_gemm(y, x, w, GemmDesc{false, true, 1.f, 0.f}));
  if (!bias.empty()) VLPAR_RETURN_IF_ERROR(check_float_vector("linear_forward", "bias", bias, w.size(0)));
  return cpu_impl::linear_forward(ctx, y, x, w, bias);
}

Status linear_backward(const Context& ctx, TensorView dx, TensorView dw, TensorView dbias, TensorView dy,
                       TensorView x, TensorView w) {
  VLPAR_RETURN_IF_ERROR(check_linear("linear_backward", dy, x, w));
  if (!dx.empty()) {
    VLPAR_CHECK(dx.ndim() == 2 && dx.size(0) == x.size(0) && dx.size(1) == x.size(1),
                "linear_backward: dx {} must match x {}", dx.to_string(), x.to_string());
    VLPAR_RETURN_IF_ERROR(check_gemm(dx, dy, w, GemmDesc{false, false, 1.f, 0.f}));
  }
  if (!dw.empty()) {
    VLPAR_CHECK(dw.ndim() == 2 && dw.size(0) == w.size(0) && dw.size(1) == w.size(1),
                "linear_backward: dw {} must match weight {}", dw.to_string(), w.to_string());
    VLPAR_RETURN_IF_ERROR(check_gemm(dw, dy, x, GemmDesc{true, false, 1.f, 1.f}));
  }
  if (!dbias.empty()) {
    VLPAR_RETURN_IF_ERROR(check_vector("linear_backward", "dbias", dbias, w.size(0), DType::kF32));
    VLPAR_RETURN_IF_ERROR(check_cpu_float(dy, "linear_backward"));
  }
  return cpu_impl::linear_backward(ctx, dx, dw, dbias, dy, x, w);
}

namespace cuda_kernels {

size_t cublaslt_workspace_bytes(int sm_version) { return size_t(sm_version >= 90 ? 32 : 4) << 20; }

Result<LtMatmulPlan> plan_cublaslt_gemm(TensorView c, TensorView a, TensorView b, GemmDesc desc, TensorView bias,
                                        int sm_version) {
  VLPAR_RETURN_IF_ERROR(check_gemm(c, a, b, desc, /*cuda=*/true));
  VLPAR_CHECK(a.dtype == b.dtype, "cuBLASLt gemm: A {} and B {} must have one dtype", a.to_string(), b.to_string());
  VLPAR_CHECK(c.dtype == a.dtype || (a.dtype != DType::kF32 && c.dtype == DType::kF32),
              "cuBLASLt gemm: {} A and B need C in {}{}, got {}", dtype_name(a.dtype), dtype_name(a.dtype),
              a.dtype == DType::kF32 ? "" : " or f32", c.to_string());
  const int64_t batch = c.ndim() == 3 ? c.size(0) : 1, M = c.size(-2), N = c.size(-1);
  LtMatmulPlan p;
  // Cᵀ = op(B)ᵀ · op(A)ᵀ in column-major terms: cuBLAS's A is B, its B is A, and each keeps its transpose.
  p.trans_a = desc.trans_b;
  p.trans_b = desc.trans_a;
  p.m = N;
  p.n = M;
  p.k = desc.trans_a ? a.size(-2) : a.size(-1);
  p.a = lt_layout(b, batch);
  p.b = lt_layout(a, batch);
  p.c = p.d = lt_layout(c, batch);
  p.a_data = b.data;
  p.b_data = a.data;
  p.d_data = c.data;
  p.alpha = desc.alpha;
  p.beta = desc.beta;
  if (!bias.empty()) {
    VLPAR_CHECK(bias.ndim() == 1 && bias.size(0) == N && (bias.stride(0) == 1 || N <= 1) && bias.dtype == c.dtype,
                "cuBLASLt gemm: the bias epilogue takes a contiguous [{}] bias of C's dtype {}, got {}", N,
                dtype_name(c.dtype), bias.to_string());
    p.epilogue = LtEpilogue::kBias;
    p.bias = bias.data;
  }
  p.workspace_bytes = cublaslt_workspace_bytes(sm_version);
  return p;
}

}  // namespace cuda_kernels
}  // namespace vlpar
