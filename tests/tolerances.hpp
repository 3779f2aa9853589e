#pragma once
// The one table of test tolerances, keyed by (op, dtype) (STYLE §10).
//
// Default rule (flash-attention): max|kernel − ref64| ≤ naive_factor · max|naive − ref64| + atol
//   ref64  = the fp64 reference (include/vlpar/reference/) on the same (storage-rounded) inputs;
//   naive  = the same reference run in float, its outputs rounded to the kernel's storage dtype, i.e. what
//            a straightforward implementation at the kernel's precision achieves;
//   atol   = atol_ulps · u(dtype) · max|ref64|, the storage rounding error at the output's magnitude
//            (u = unit roundoff: 2^-24 f32, 2^-8 bf16, 2^-11 f16).
// naive_factor = 2 everywhere: a kernel may reorder its sums (blocking, threads, online softmax) and so
// double the naive error, no more. atol_ulps = 2 covers the kernel's and the naive's own output rounding
// (one each, both at most u·|ref|).
//
// Finite differences (reference backward vs central differences of the reference forward, all fp64):
// step h = 1e-6 · max(1, |x|); truncation error ≈ h²·|f'''|/6 and cancellation error ≈ u64·|f|/h ≈ 2e-10·|f|,
// so |g_fd − g| ≤ 1e-6 · max(1, |g|max) holds with orders of magnitude to spare while a wrong backward
// (a dropped term, a sign or a factor) shows up as an O(|g|) error.
//
// Composite models (kDecoderStack, kParallelEquivalence): the loss and every parameter gradient of the nn decoder
// stack (tests/nn_reference.hpp), per tensor, with ref64 = the fp64 reference stack on the same weights.
//   kDecoderStack: TP1 DecoderModel (fp32 kernels) vs ref64, naive = the reference stack run in float: the
//     default rule; the kernels reorder sums (GEMM blocking, online softmax), nothing else.
//   kParallelEquivalence: a tensor/sequence/data-parallel run vs the single-process fp32 run (TP1 on the whole
//     batch). Parallelism changes only the order of fp32 additions: K-split partial sums of row-parallel GEMMs
//     added across ranks, vocab-split sum-exp and max, token-split norm-weight gradients (SP), DP gradient sums
//     and the Eigen blocking of smaller local GEMMs. Treating the parallel run as a "kernel" with naive = the
//     single-process fp32 run, the default rule gives |par − ref64| ≤ 2·|single − ref64| + 2u·max|ref64|, and
//     the triangle inequality then bounds what the test compares:
//       max|par − single| ≤ 3 · max|single − ref64| + 2 · u32 · max|ref64|      (per tensor)
//     naive_factor 3 is that bound, not a loosened one. A missing all-reduce, a wrong shard or a dropped
//     reduction changes results by O(|ref|), orders of magnitude above it.
#include "vlpar/core/dtype.hpp"

namespace vlpar::test {

enum class TolOp {
  kGemm, kLinear, kEmbedding, kRmsNorm, kLayerNorm, kActivation, kRotary,
  kAttentionFwd, kAttentionBwd, kCrossEntropy, kRouter, kAdamW, kGradNorm,
  kDecoderStack, kParallelEquivalence,
};

struct Tolerance {
  double naive_factor = 2.0;
  double atol_ulps = 2.0;
};

inline constexpr double kFiniteDiffStep = 1e-6;
inline constexpr double kFiniteDiffRelTol = 1e-6;

constexpr double unit_roundoff(DType t) {
  switch (t) {
    case DType::kBF16: return 1.0 / 256;     // 2^-8
    case DType::kF16: return 1.0 / 2048;     // 2^-11
    case DType::kF64: return 1.1102230246251565e-16;
    default: return 5.9604644775390625e-8;   // 2^-24
  }
}

/// @brief The tolerance of (op, dtype). Entries that differ from the default say why.
constexpr Tolerance tolerance(TolOp op, DType /*dtype*/) {
  switch (op) {
    // Parallel run vs single-process fp32 run: the default rule against ref64 plus the triangle inequality.
    case TolOp::kParallelEquivalence: return Tolerance{3.0, 2.0};
    // Attention backward recomputes P from the saved lse and accumulates dQ/dK/dV over tiles in a different
    // order from the naive; its error is dominated by that reordering, bounded by the default rule.
    default: return Tolerance{};
  }
}

}  // namespace vlpar::test
