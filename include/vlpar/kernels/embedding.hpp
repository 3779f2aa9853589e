#pragma once
// Embedding lookup and its gradient.
//   forward : out[n, :] = table[ids[n], :]
//   backward: dtable[ids[n], :] += dout[n, :]   (deterministic: columns split across threads, tokens in order)
// An id outside [0, V) is an error naming the position and the id, never an out-of-bounds read.
#include "vlpar/core/context.hpp"
#include "vlpar/core/tensor.hpp"

namespace vlpar {

/// @param out   [N, H]
/// @param table [V, H]
/// @param ids   [N] i32 or i64
Status embedding_forward(const Context& ctx, TensorView out, TensorView table, TensorView ids);
/// @param dtable [V, H] accumulated
Status embedding_backward(const Context& ctx, TensorView dtable, TensorView dout, TensorView ids);

}  // namespace vlpar
