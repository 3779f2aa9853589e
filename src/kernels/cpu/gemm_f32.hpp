#pragma once
// Internal (not installed): the fp32 GEMM core used by gemm, linear and the fused cross-entropy.
// C[M, N] = alpha · op(A) · op(B) + beta · C, row-major operands with leading dimensions (row strides).
// The larger of M and N is split into static blocks (num_parts by the product's work, none narrower than 64), each
// an Eigen GEMM on one thread, so the result is bitwise reproducible for a given thread count. vlpar is built
// without OpenMP, so Eigen never starts threads of its own (a second level of threads, and a blocking that would
// depend on Eigen's thread count).
#include <cstdint>

#include "isa_namespace.hpp"
#include "vlpar/core/context.hpp"

namespace vlpar::VLPAR_CPU_ISA_NAMESPACE::cpu {

struct GemmF32 {
  int64_t M = 0, N = 0, K = 0;
  const float* a = nullptr;  // [M, K] (lda) or [K, M] if trans_a
  int64_t lda = 0;
  bool trans_a = false;
  const float* b = nullptr;  // [K, N] (ldb) or [N, K] if trans_b
  int64_t ldb = 0;
  bool trans_b = false;
  float* c = nullptr;        // [M, N] (ldc)
  int64_t ldc = 0;
  float alpha = 1.f;
  float beta = 0.f;
};

/// @brief Runs the GEMM on the calling thread (for use inside an outer parallel loop).
void gemm_f32_serial(const GemmF32& g);
/// @brief Runs the GEMM split over ctx.num_threads.
void gemm_f32(const Context& ctx, const GemmF32& g);

}  // namespace vlpar::VLPAR_CPU_ISA_NAMESPACE::cpu
