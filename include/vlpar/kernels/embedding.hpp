#pragma once
// Embedding lookup and its gradient, over the whole vocabulary or one block of it (vocab parallelism).
//   forward : out[n, :] = table[ids[n] − block.begin, :], or a zero row when another block holds ids[n]
//   backward: dtable[ids[n] − block.begin, :] += dout[n, :] for the ids this block holds, except rows marked in
//             `skip` and ids equal to padding_idx (torch's nn.Embedding padding_idx: that row never gets a
//             gradient) (deterministic: columns split across threads, tokens in order)
// An id outside [0, vocab) is an error naming the position and the id, never an out-of-bounds read.
// Checks: src/kernels/ops/embedding.cpp; CPU: src/kernels/cpu/embedding.cpp; no CUDA kernel yet.
#include "vlpar/core/context.hpp"
#include "vlpar/core/tensor.hpp"
#include "vlpar/kernels/vocab_block.hpp"

namespace vlpar {

/// @param out   [N, H]
/// @param table [V, H]
/// @param ids   [N] i32 or i64
/// @param block the ids `table` holds (default: all of them)
Status embedding_forward(const Context& ctx, TensorView out, TensorView table, TensorView ids,
                         VocabBlock block = {});
/// @param dtable [V, H] accumulated
/// @param skip   [N] i32/i64 or an empty view: a non-zero entry marks a row of dout that adds nothing (a token
///               whose embedding the caller replaced after the lookup)
/// @param padding_idx an id in [0, vocab) whose row gets no gradient, or −1 for none
Status embedding_backward(const Context& ctx, TensorView dtable, TensorView dout, TensorView ids,
                          VocabBlock block = {}, TensorView skip = {}, int64_t padding_idx = -1);

}  // namespace vlpar
