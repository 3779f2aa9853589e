#pragma once
// The cublasLtMatmul call that computes vlpar's row-major GEMM (vlpar/kernels/gemm.hpp), as plain data.
// cuBLASLt is column-major: a row-major [R, C] matrix with row stride ld is the column-major [C, R] matrix with
// leading dim ld, so C[M, N] = op(A)·op(B) runs as Cᵀ[N, M] = op(B)ᵀ·op(A)ᵀ — cuBLAS's A is vlpar's B, cuBLAS's B is
// vlpar's A, m = N, n = M, and each operand keeps its own transpose flag. The bias epilogue (linear_forward) adds
// bias[j] to column j of vlpar's C, which is row j of cuBLAS's D: CUBLASLT_EPILOGUE_BIAS adds a vector of length m
// to every column of D.
// Host-only and unit-tested everywhere (tests/unit/test_cublaslt_plan.cpp runs plans through an fp64 column-major
// interpreter of cuBLASLt's definition against the row-major reference); the CUDA build's descriptors are made
// from it. Compute type CUBLAS_COMPUTE_32F (fp32 accumulation) and scale type CUDA_R_32F always.
#include <cstddef>
#include <cstdint>

#include "vlpar/core/dtype.hpp"
#include "vlpar/core/status.hpp"
#include "vlpar/core/tensor.hpp"
#include "vlpar/kernels/gemm.hpp"

namespace vlpar::cuda_kernels {

/// One matrix operand (CUBLASLT_MATRIX_LAYOUT_*): column-major [rows, cols] with leading dim ld ≥ rows, and
/// batch_count matrices batch_stride elements apart (stride 0: one matrix read by every batch entry).
struct LtLayout {
  DType dtype = DType::kF32;
  int64_t rows = 0, cols = 0, ld = 0;
  int64_t batch_count = 1, batch_stride = 0;
};

enum class LtEpilogue { kDefault, kBias };

/// D = alpha · op(A) · op(B) + beta · C (+ bias[i] on row i of D), per batch entry, in cuBLAS's terms.
struct LtMatmulPlan {
  bool trans_a = false, trans_b = false;  // CUBLASLT_MATMUL_DESC_TRANSA / TRANSB (CUBLAS_OP_T when set)
  int64_t m = 0, n = 0, k = 0;             // op(A) [m, k], op(B) [k, n], C and D [m, n]
  LtLayout a, b, c, d;                     // C and D are the same matrix (in place)
  const void* a_data = nullptr;            // vlpar's B
  const void* b_data = nullptr;            // vlpar's A
  void* d_data = nullptr;                  // vlpar's C (also cuBLAS's C)
  float alpha = 1.f, beta = 0.f;
  LtEpilogue epilogue = LtEpilogue::kDefault;
  const void* bias = nullptr;              // [m], of d's dtype (CUBLASLT_MATMUL_DESC_BIAS_POINTER)
  size_t workspace_bytes = 0;
};

/// The workspace cuBLAS recommends for its GEMMs: 32 MiB on Hopper (sm 90) and newer, 4 MiB before.
size_t cublaslt_workspace_bytes(int sm_version);

/// @brief The plan of gemm(c, a, b, desc) (2D or batched 3D views, as gemm takes them) on a device of the given
/// sm version, with an optional bias [N] added to every row of C (empty view: none).
/// @return a named error for what cuBLASLt's fp32-accumulating GEMMs lack: A and B of different dtypes, a 16-bit
/// A/B with a C of the other 16-bit dtype, an f32 A/B with a 16-bit C, a bias of another dtype than C or not [N],
/// an inner stride other than 1, and shapes that do not chain.
Result<LtMatmulPlan> plan_cublaslt_gemm(TensorView c, TensorView a, TensorView b, GemmDesc desc,
                                        TensorView bias = {}, int sm_version = 90);

}  // namespace vlpar::cuda_kernels
