// The public embedding ops: every argument checked once here (token ids against the vocabulary included), then
// the device's implementation (CPU: src/kernels/cpu/embedding.cpp; no CUDA kernel yet: CUDA views are a named
// error).
// Test: tests/unit/test_losses.cpp (embedding tests), tests/unit/test_nn_stack.cpp.
#include "vlpar/kernels/embedding.hpp"

#include "../cpu_impl.hpp"
#include "vlpar/core/checks.hpp"

namespace vlpar {
namespace {

/// ids [n] each in [0, vocab) of the whole vocabulary; the block lies inside it.
Status check_ids(const char* op, const TensorView& ids, int64_t n, int64_t rows, const VocabBlock& block) {
  VLPAR_RETURN_IF_ERROR(check_index_vector(op, "ids", ids, n));
  const int64_t vocab = block.full(rows);
  VLPAR_CHECK(block.begin >= 0 && block.vocab >= 0 && block.begin + rows <= vocab,
              "{}: the vocab block [{}, {}) is not inside a vocabulary of {} ids", op, block.begin,
              block.begin + rows, vocab);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t id = index_at(ids, i);
    VLPAR_CHECK(id >= 0 && id < vocab, "{}: token id {} at position {} is outside the vocabulary [0, {})", op, id, i,
                vocab);
  }
  return Status::Ok();
}

Status check_2d(const char* op, const char* name, const TensorView& v) {
  VLPAR_CHECK(v.ndim() == 2 && v.stride(1) == 1, "{}: {} must be 2D with a contiguous last dim, got {}", op, name,
              v.to_string());
  VLPAR_CHECK(v.device.is_cpu(), "{}: {} must be on the CPU (no CUDA kernel yet), got {}", op, name, v.to_string());
  return check_storage_dtype(op, name, v);
}

}  // namespace

Status embedding_forward(const Context& ctx, TensorView out, TensorView table, TensorView ids, VocabBlock block) {
  const char* op = "embedding_forward";
  VLPAR_RETURN_IF_ERROR(check_2d(op, "out", out));
  VLPAR_RETURN_IF_ERROR(check_2d(op, "table", table));
  VLPAR_CHECK(out.size(1) == table.size(1), "{}: out {} and table {} differ in hidden size", op, out.to_string(),
              table.to_string());
  VLPAR_RETURN_IF_ERROR(check_ids(op, ids, out.size(0), table.size(0), block));
  return cpu_impl::embedding_forward(ctx, out, table, ids, block);
}

Status embedding_backward(const Context& ctx, TensorView dtable, TensorView dout, TensorView ids, VocabBlock block,
                          TensorView skip, int64_t padding_idx) {
  const char* op = "embedding_backward";
  VLPAR_RETURN_IF_ERROR(check_2d(op, "dtable", dtable));
  VLPAR_RETURN_IF_ERROR(check_2d(op, "dout", dout));
  VLPAR_CHECK(dout.size(1) == dtable.size(1), "{}: dout {} and dtable {} differ in hidden size", op,
              dout.to_string(), dtable.to_string());
  VLPAR_RETURN_IF_ERROR(check_ids(op, ids, dout.size(0), dtable.size(0), block));
  if (!skip.empty()) VLPAR_RETURN_IF_ERROR(check_index_vector(op, "skip", skip, dout.size(0)));
  VLPAR_CHECK(padding_idx >= -1 && padding_idx < block.full(dtable.size(0)),
              "{}: padding_idx {} is neither -1 nor an id of the vocabulary [0, {})", op, padding_idx,
              block.full(dtable.size(0)));
  return cpu_impl::embedding_backward(ctx, dtable, dout, ids, block, skip, padding_idx);
}

}  // namespace vlpar
