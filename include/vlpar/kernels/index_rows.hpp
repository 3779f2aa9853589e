#pragma once
// Row gathers and scatters by an index vector, between a packed sequence [N, H] and a subset of its rows [n, H]
// (Qwen3-VL: the visual tokens' embeddings and deepstack features; later the MoE token permutations).
//   gather_rows     : dst[i, :] = src[index[i], :]
//   scatter_rows    : dst[index[i], :] = src[i, :]
//   scatter_add_rows: dst[index[i], :] += src[i, :]   (fp32 math, one rounding to dst's dtype)
//   zero_rows       : dst[index[i], :] = 0
// index is i32 or i64 [n] with every entry in [0, N) (checked: a named error, never an out-of-bounds access);
// scatter (and zero) indices must be distinct, so each destination row is written once and the result does not
// depend on the thread count. Rows need a contiguous last dim; src and dst share H (any float storage dtypes).
// Checks: src/kernels/ops/index_rows.cpp; CPU: src/kernels/cpu/index_rows.cpp; no CUDA kernel yet.
// Test: tests/unit/test_index_rows.cpp.
#include "vlpar/core/context.hpp"
#include "vlpar/core/tensor.hpp"

namespace vlpar {

/// @param dst [n, H] written;  src [N, H];  index [n]
Status gather_rows(const Context& ctx, TensorView dst, TensorView src, TensorView index);
/// @param dst [N, H], rows index[i] written;  src [n, H];  index [n], distinct
Status scatter_rows(const Context& ctx, TensorView dst, TensorView src, TensorView index);
/// @param dst [N, H], rows index[i] accumulated;  src [n, H];  index [n], distinct
Status scatter_add_rows(const Context& ctx, TensorView dst, TensorView src, TensorView index);
/// @param dst [N, H], rows index[i] set to zero;  index [n], distinct
Status zero_rows(const Context& ctx, TensorView dst, TensorView index);

}  // namespace vlpar
