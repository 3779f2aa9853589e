#pragma once
// MoE token dispatch, grouped expert GEMMs and combine (spec qwen3vl.md §5), on the permuted-row layout:
//
//   assignment a = t·K + k           token t's k-th top-k choice (indices[t, k] = expert e)
//   permuted rows r ∈ [0, R), R = T·K, grouped by expert in ascending id; inside an expert, ascending a
//   (ascending token), i.e. a stable counting sort of the assignments by expert. moe_pad_plan may pad every
//   expert's rows to a multiple (R > T·K; padding rows map to assignment −1 and permute writes zeros there).
//   offsets[e] .. offsets[e+1]       the rows of expert e (the grouped GEMM's groups; empty experts allowed)
//
//   moe_dispatch_plan   indices [T, K]   → MoeDispatch (offsets, row → assignment, assignment → row); host or
//                       device indices
//   moe_permute         out[r]  = (w_a ·) in[t(r)]                          [R, F] ← [T, F]
//   moe_unpermute       out[t]  = Σ_{k, ascending expert} (w_{t,k} ·) rows[row(t, k)]   [T, F] ← [R, F]
//                       (the combine; also the backward of moe_permute). A token's rows in ascending expert
//                       order are its rows in ascending row order, so the sum order is HF's train-mode
//                       index_add_ order: 0 + w·y_{e1} + w·y_{e2} + … with e1 < e2 < ….
//   moe_row_dot         dweights[t, k] = <a[row(t,k)], b[row(t,k)]>       (routing-weight gradient)
//   moe_scale_rows      rows[r] *= w_{a(r)}                               (in place)
//   grouped_gemm        c[rows of g] = alpha · a[rows of g] · op(b[g]) + beta · c[rows of g]
//   grouped_weight_grad dw[g] += a[rows of g]ᵀ · dc[rows of g]
//
// The plan is host metadata (std::vector): building it is the host sync point of the dispatch (the per-expert
// counts size the grouped GEMM). Expert parallelism (the all-to-all between permute and the grouped GEMM, STYLE
// §23's dispatch/combine phases) is built on this plan: vlpar/nn/expert_dispatch.hpp.
//
// Determinism: every output element is computed by exactly one work item with a fixed sum order. The grouped
// GEMMs cut each group into fixed tiles (kMoeTileRows × kMoeTileCols of the output, independent of the thread
// count), each tile one serial Eigen GEMM over the full inner dimension, tiles handed out dynamically. So results
// are bitwise identical for any num_threads. No float atomics. grouped_gemm pads a partial tile's rows to a
// multiple of 48 so that every row takes Eigen's widest micro-kernel: a row's result depends only on that row and
// the weights, not on the group's size or the row's place in it (expert parallelism moves rows between tiles).
// Storage on the CPU: f32, bf16 or f16 rows and matrices (f32 arithmetic: 16-bit operands are widened exactly into
// f32 copies and a 16-bit result is rounded once, so a row's result is the f32 path's on the same values), routing
// weights, dweights and dw f32; other dtypes and devices return kNotSupported naming the argument. CUDA views
// (src/kernels/cuda/moe_ops.cu): grouped_gemm (grouped_gemm_kernel.cuh: bf16/f16 a and b, c in their dtype or f32,
// N, Kd and the row strides multiples of 8 elements, offsets in host memory; tiles of 128 × 128 over a persistent
// grid, fixed k order per output element, bitwise reproducible) and grouped_weight_grad (the same tiles, dw f32);
// moe_dispatch_plan from device indices (moe_plan.cu: per (chunk, expert) counts, one scan, ordered placement, so
// the plan equals the CPU plan exactly; mirrored into the host vectors, the dispatch's sync point); the row ops
// (moe_permute_kernel.cuh) for bf16, f16 and f32 rows with f32 weights, the plan's map uploaded per call.
// Tests: tests/gpu/test_cuda_grouped_gemm.cpp, tests/gpu/test_cuda_moe_permute.cpp.
// Test: tests/unit/test_moe.cpp (./build/cpu/tests/test_moe).
#include <algorithm>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "vlpar/core/context.hpp"
#include "vlpar/core/tensor.hpp"
#include "vlpar/kernels/gemm.hpp"

namespace vlpar {

/// Output tile of the grouped GEMMs: rows × cols. Fixed (not derived from num_threads) so that the Eigen call
/// computing each element, and hence its rounding, never depends on the thread count.
inline constexpr int64_t kMoeTileRows = 96;  // a multiple of the 48-row quantum of src/kernels/cpu/moe.cpp
inline constexpr int64_t kMoeTileCols = 512;

/// The routing handle: which permuted row serves which (token, slot). Host memory.
struct MoeDispatch {
  int num_experts = 0;            // E
  int top_k = 0;                  // K
  int64_t num_tokens = 0;         // T
  std::vector<int64_t> offsets;   // [E + 1] prefix sums of the per-expert row counts; offsets[E] = R
  std::vector<int32_t> row_assignment;  // [R] permuted row r → assignment a = t·K + k, or −1 for a padding row
  std::vector<int32_t> assignment_row;  // [T·K] assignment a → permuted row r, or −1 when dropped (capacity)
  int64_t row_multiple = 1;       // every expert's rows padded to a multiple of this (moe_pad_plan)

  int64_t num_assignments() const { return num_tokens * top_k; }  // T·K
  /// R: T·K, or more when the experts' rows are padded.
  int64_t num_rows() const { return offsets.empty() ? num_assignments() : offsets.back(); }
  int64_t expert_rows(int e) const { return offsets[size_t(e) + 1] - offsets[size_t(e)]; }
};

/// @brief Pads every expert's rows of a built plan to a multiple of `multiple` (e.g. the tile of a GEMM that
/// wants aligned groups): offsets become multiples, the rows keep their order inside each expert, and the new rows
/// map to assignment −1 (permute writes zeros there; unpermute and row_dot never read them).
inline Status moe_pad_plan(MoeDispatch& plan, int64_t multiple) {
  VLPAR_CHECK(multiple >= 1 && multiple <= (int64_t(1) << 20), "moe_pad_plan: multiple must be in [1, 2^20], got {}",
              multiple);
  VLPAR_CHECK(plan.num_experts > 0 && plan.offsets.size() == size_t(plan.num_experts) + 1 &&
                  plan.row_multiple == 1 && plan.offsets.back() == int64_t(plan.row_assignment.size()),
              "moe_pad_plan: needs a built, unpadded plan (moe_dispatch_plan first)");
  std::vector<int64_t> offsets(plan.offsets.size(), 0);
  for (int e = 0; e < plan.num_experts; ++e)
    offsets[size_t(e) + 1] = offsets[size_t(e)] + (plan.expert_rows(e) + multiple - 1) / multiple * multiple;
  VLPAR_CHECK(offsets.back() <= INT32_MAX, "moe_pad_plan: {} padded rows overflow the i32 row ids", offsets.back());
  std::vector<int32_t> row_assignment(size_t(offsets.back()), -1);
  for (int e = 0; e < plan.num_experts; ++e)
    for (int64_t i = 0; i < plan.expert_rows(e); ++i) {
      const int32_t a = plan.row_assignment[size_t(plan.offsets[size_t(e)] + i)];
      row_assignment[size_t(offsets[size_t(e)] + i)] = a;
      plan.assignment_row[size_t(a)] = int32_t(offsets[size_t(e)] + i);
    }
  plan.offsets = std::move(offsets);
  plan.row_assignment = std::move(row_assignment);
  plan.row_multiple = multiple;
  return Status::Ok();
}

/// @brief Caps every expert's rows of a built, unpadded plan at `capacity` (the position policy: an expert keeps its
/// first `capacity` rows, ascending token; GShard/Switch capacity, Megatron's drop policy "position"). A dropped
/// assignment maps to row −1: no row carries it, permute never reads it, unpermute leaves it out of its token's sum
/// (the rest keep their weights: no renormalisation) and row_dot gives it 0. Returns the number of dropped
/// assignments. Apply before moe_pad_plan.
inline Result<int64_t> moe_capacity_plan(MoeDispatch& plan, int64_t capacity) {
  VLPAR_CHECK(capacity >= 0, "moe_capacity_plan: capacity must be >= 0, got {}", capacity);
  VLPAR_CHECK(plan.num_experts > 0 && plan.offsets.size() == size_t(plan.num_experts) + 1 &&
                  plan.row_multiple == 1 && plan.offsets.back() == int64_t(plan.row_assignment.size()) &&
                  plan.assignment_row.size() == size_t(plan.num_assignments()),
              "moe_capacity_plan: needs a built, unpadded plan (moe_dispatch_plan first)");
  std::vector<int64_t> offsets(plan.offsets.size(), 0);
  for (int e = 0; e < plan.num_experts; ++e)
    offsets[size_t(e) + 1] = offsets[size_t(e)] + std::min(plan.expert_rows(e), capacity);
  std::vector<int32_t> row_assignment(size_t(offsets.back()));
  int64_t dropped = 0;
  for (int e = 0; e < plan.num_experts; ++e)
    for (int64_t i = 0; i < plan.expert_rows(e); ++i) {
      const int32_t a = plan.row_assignment[size_t(plan.offsets[size_t(e)] + i)];
      if (i >= capacity) {
        plan.assignment_row[size_t(a)] = -1;
        ++dropped;
        continue;
      }
      row_assignment[size_t(offsets[size_t(e)] + i)] = a;
      plan.assignment_row[size_t(a)] = int32_t(offsets[size_t(e)] + i);
    }
  plan.offsets = std::move(offsets);
  plan.row_assignment = std::move(row_assignment);
  return dropped;
}

/// @brief Builds the plan from the router's choices (host indices: on the host; CUDA indices: on the device, then
/// copied into the plan's host vectors). A bad id is a named error and leaves no plan behind.
/// @param indices [T, K] i32, contiguous; every id in [0, E), the K ids of a row distinct.
Status moe_dispatch_plan(const Context& ctx, MoeDispatch& plan, TensorView indices, int num_experts);

/// Row ops: bf16, f16 or f32 rows (one dtype per call) with f32 weights, on the CPU and CUDA.
/// @brief out[r] = w[a(r)] · in[t(r)], or in[t(r)] when weights is empty.
/// @param out     [R, F] written, in's dtype
/// @param in      [T, F]
/// @param weights [T, K] f32 or an empty view
Status moe_permute(const Context& ctx, TensorView out, TensorView in, TensorView weights, const MoeDispatch& plan);

/// @brief out[t] = Σ over t's rows in ascending expert order of w[t, k] · rows[row(t, k)] (1 when weights empty),
/// starting from 0 (out is overwritten).
/// @param out     [T, F] written, rows' dtype (the sum in f32, rounded once)
/// @param rows    [R, F]
/// @param weights [T, K] f32 or an empty view
Status moe_unpermute(const Context& ctx, TensorView out, TensorView rows, TensorView weights,
                     const MoeDispatch& plan);

/// @brief dweights[t, k] = Σ_f a[r, f] · b[r, f] with r = row(t, k) (fp32, ascending f).
/// @param dweights [T, K] f32 written
/// @param a, b     [R, F] of one dtype
Status moe_row_dot(const Context& ctx, TensorView dweights, TensorView a, TensorView b, const MoeDispatch& plan);

/// @brief rows[r] *= weights[a(r)] in place (a padding row of a padded plan becomes zero).
/// @param rows    [R, F]
/// @param weights [T, K] f32
Status moe_scale_rows(const Context& ctx, TensorView rows, TensorView weights, const MoeDispatch& plan);

/// @brief Grouped GEMM over row groups: for every g, rows [offsets[g], offsets[g+1]) of c and a use b[g]
/// (b[0] for every group when b has batch 1). Rows outside [offsets[0], offsets[G]) are not touched.
/// @param c       [R, N]
/// @param a       [R, Kd] (trans_a must be false)
/// @param b       [G or 1, Kd, N], or [G or 1, N, Kd] with desc.trans_b
/// @param offsets G + 1 non-decreasing row offsets within [0, R]
Status grouped_gemm(const Context& ctx, TensorView c, TensorView a, TensorView b, std::span<const int64_t> offsets,
                    GemmDesc desc);

/// @brief Grouped weight gradient: dw[g] += a[rows of g]ᵀ · dc[rows of g] (a group with no rows adds nothing).
/// @param dw      [G, Kd, N] f32 accumulated
/// @param a       [R, Kd]
/// @param dc      [R, N]
/// @param offsets G + 1 non-decreasing row offsets within [0, R]
Status grouped_weight_grad(const Context& ctx, TensorView dw, TensorView a, TensorView dc,
                           std::span<const int64_t> offsets);

}  // namespace vlpar
