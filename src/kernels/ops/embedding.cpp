// The public embedding ops: every argument checked once here (token ids against the vocabulary included), then
// the device's implementation (CPU: src/kernels/cpu/embedding.cpp; no CUDA kernel yet).
// Test: tests/unit/test_losses.cpp (embedding tests), tests/unit/test_nn_stack.cpp.
#include "vlpar/kernels/embedding.hpp"

#include "../cpu_impl.hpp"
#include "vlpar/core/checks.hpp"

namespace vlpar {
namespace {

Status check_ids(const char* op, const TensorView& ids, int64_t n, int64_t vocab) {
  VLPAR_CHECK(ids.dtype == DType::kI32 || ids.dtype == DType::kI64, "{}: ids must be i32 or i64, got {}", op,
              ids.to_string());
  VLPAR_RETURN_IF_ERROR(check_vector(op, "ids", ids, n, ids.dtype));
  VLPAR_CHECK(ids.device.is_cpu(), "{}: ids must be on the CPU, got {}", op, ids.to_string());
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

Status embedding_forward(const Context& ctx, TensorView out, TensorView table, TensorView ids) {
  const char* op = "embedding_forward";
  VLPAR_RETURN_IF_ERROR(check_2d(op, "out", out));
  VLPAR_RETURN_IF_ERROR(check_2d(op, "table", table));
  VLPAR_CHECK(out.size(1) == table.size(1), "{}: out {} and table {} differ in hidden size", op, out.to_string(),
              table.to_string());
  VLPAR_RETURN_IF_ERROR(check_ids(op, ids, out.size(0), table.size(0)));
  return cpu_impl::embedding_forward(ctx, out, table, ids);
}

Status embedding_backward(const Context& ctx, TensorView dtable, TensorView dout, TensorView ids) {
  const char* op = "embedding_backward";
  VLPAR_RETURN_IF_ERROR(check_2d(op, "dtable", dtable));
  VLPAR_RETURN_IF_ERROR(check_2d(op, "dout", dout));
  VLPAR_CHECK(dout.size(1) == dtable.size(1), "{}: dout {} and dtable {} differ in hidden size", op,
              dout.to_string(), dtable.to_string());
  VLPAR_RETURN_IF_ERROR(check_ids(op, ids, dout.size(0), dtable.size(0)));
  return cpu_impl::embedding_backward(ctx, dtable, dout, ids);
}

}  // namespace vlpar
