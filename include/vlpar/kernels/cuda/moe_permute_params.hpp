#pragma once
// Parameters and launcher declarations of the CUDA MoE token path (STYLE §2: moe_permute_params.hpp (this file) ·
// src/kernels/cuda/moe_permute_kernel.cuh · src/kernels/cuda/moe_permute_launch.cuh · generated instantiation
// files src/kernels/cuda/moe_permute_<dtype>.cu, the dtype-free plan in src/kernels/cuda/moe_plan.cu · public API
// moe_dispatch_plan / moe_permute / moe_unpermute / moe_row_dot / moe_scale_rows in include/vlpar/kernels/moe.hpp).
// The layout is the CPU path's (moe.hpp): assignment a = t·K + k, rows grouped by expert in ascending id and, inside
// an expert, by ascending a (a stable counting sort), so CPU and CUDA plans and rows are interchangeable.
// Test: tests/gpu/test_cuda_moe_permute.cpp (ctest -L gpu; -L emu in the emulated build)
#include <cstdint>

#include "vlpar/core/status.hpp"

namespace vlpar::cuda_kernels {

/// Assignments per block of the plan's count and place kernels (a chunk is counted once per expert).
inline constexpr int64_t kMoePlanChunk = 2048;

/// The dispatch plan built on the device without atomics on the result: per (expert, chunk) counts, one exclusive
/// scan in (expert, chunk) order, then every (expert, chunk) block places its assignments in ascending order.
struct MoePlanParams {
  const int32_t* indices;   // [T, K] expert ids
  int64_t assignments;      // R = T·K
  int top_k;                // K
  int experts;              // E
  int chunks;               // C = ceil(R / kMoePlanChunk)
  int32_t* counts;          // [E, C] scratch: assignments of expert e in chunk c, then their first row
  int64_t* offsets;         // [E + 1] rows of expert e: [offsets[e], offsets[e+1])
  int32_t* row_assignment;  // [R] row → assignment
  int32_t* assignment_row;  // [R] assignment → row
  int32_t* bad;             // [1] in: R; out: the smallest assignment whose id is out of range or repeats one of
                            // its token's earlier slots (R when none)
};

/// @brief Builds offsets and both maps; *bad names the first invalid assignment (the op reads it back).
Status moe_plan_run(const MoePlanParams& p, void* stream);

/// The row kernels: one output row (or, for row_dot, one assignment) per work item.
///   permute     out[r] = (w[a] ·) in[a / K]       a = map[r] (row_assignment), gather = 1
///   scale_rows  out[r] = w[a] · in[r]              a = map[r], gather = 0 (in == out: in place)
///   unpermute   out[t] = Σ over t's rows in ascending row order of (w[t, k] ·) in[map[t·K + k]] (assignment_row)
///   row_dot     dots[a] = Σ_f in[map[a], f] · in2[map[a], f] (fp32, fixed order)
struct MoeRowsParams {
  void* out;              // [items, cols] T (row_dot: [R] f32)
  const void* in;         // source rows, T
  const void* in2;        // row_dot's second operand, T
  const float* weights;   // [T, K] routing weights or nullptr (1)
  const int32_t* map;     // see above
  int64_t items;          // output rows (row_dot: assignments)
  int64_t cols;           // F
  int64_t ld_out, ld_in, ld_in2;
  int top_k;              // K
  int gather;             // permute: 1; scale_rows: 0
};

template <class T>
Status moe_permute_run(const MoeRowsParams& p, void* stream);
template <class T>
Status moe_unpermute_run(const MoeRowsParams& p, void* stream);
template <class T>
Status moe_row_dot_run(const MoeRowsParams& p, void* stream);

}  // namespace vlpar::cuda_kernels
