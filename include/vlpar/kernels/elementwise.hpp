#pragma once
// Elementwise arithmetic between tensors that the nn blocks need between ops (residual adds, summed gradients).
//   add_: dst += src, any float storage dtypes (fp32 math, one rounding to dst's dtype per element).
// Checks: src/kernels/ops/elementwise.cpp; CPU: src/kernels/cpu/elementwise.cpp; no CUDA kernel yet (a CUDA view
// is a named kNotSupported). Test: tests/unit/test_activation.cpp (Elementwise.*).
#include "vlpar/core/context.hpp"
#include "vlpar/core/tensor.hpp"

namespace vlpar {

/// @param dst contiguous, accumulated
/// @param src contiguous, the same number of elements as dst (shapes may differ: [N, H] += [N·H])
Status add_(const Context& ctx, TensorView dst, TensorView src);

}  // namespace vlpar
