// CPU embedding lookup and gradient. The backward splits the hidden dim across threads; each thread walks
// all tokens in order, so accumulation order per element is fixed (no atomics, bitwise reproducible).
// Test: tests/unit/test_embedding.cpp
#include "vlpar/kernels/embedding.hpp"

#include "vlpar/core/checks.hpp"
#include "vlpar/core/dispatch.hpp"

#include "isa_namespace.hpp"

namespace vlpar::VLPAR_CPU_ISA_NAMESPACE {
namespace {

int64_t id_at(const TensorView& ids, int64_t n) {
  return ids.dtype == DType::kI32 ? int64_t(ids.ptr<int32_t>()[n]) : ids.ptr<int64_t>()[n];
}

Status check_ids(const char* op, const TensorView& ids, int64_t n, int64_t vocab) {
  VLPAR_CHECK(ids.dtype == DType::kI32 || ids.dtype == DType::kI64, "{}: ids must be i32 or i64, got {}", op,
              ids.to_string());
  VLPAR_RETURN_IF_ERROR(check_vector(op, "ids", ids, n, ids.dtype));
  VLPAR_CHECK(ids.device.is_cpu(), "{}: ids must be on the CPU, got {}", op, ids.to_string());
  for (int64_t i = 0; i < n; ++i) {
    const int64_t id = id_at(ids, i);
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
  VLPAR_FLOAT_SWITCH(out.dtype, O, op, {
    VLPAR_FLOAT_SWITCH(table.dtype, T, op, {
      const int64_t H = out.size(1);
      parallel_for(ctx, out.size(0), [&](int64_t begin, int64_t end) {
        for (int64_t n = begin; n < end; ++n) {
          const T* src = table.ptr<T>() + id_at(ids, n) * table.stride(0);
          O* dst = out.ptr<O>() + n * out.stride(0);
          for (int64_t i = 0; i < H; ++i) dst[i] = from_float<O>(to_float(src[i]));
        }
      });
    });
  });
  return Status::Ok();
}

Status embedding_backward(const Context& ctx, TensorView dtable, TensorView dout, TensorView ids) {
  const char* op = "embedding_backward";
  VLPAR_RETURN_IF_ERROR(check_2d(op, "dtable", dtable));
  VLPAR_RETURN_IF_ERROR(check_2d(op, "dout", dout));
  VLPAR_CHECK(dout.size(1) == dtable.size(1), "{}: dout {} and dtable {} differ in hidden size", op,
              dout.to_string(), dtable.to_string());
  VLPAR_RETURN_IF_ERROR(check_ids(op, ids, dout.size(0), dtable.size(0)));
  VLPAR_FLOAT_SWITCH(dtable.dtype, D, op, {
    VLPAR_FLOAT_SWITCH(dout.dtype, G, op, {
      parallel_for(ctx, dtable.size(1), [&](int64_t c0, int64_t c1) {
        for (int64_t n = 0; n < dout.size(0); ++n) {
          D* dst = dtable.ptr<D>() + id_at(ids, n) * dtable.stride(0);
          const G* src = dout.ptr<G>() + n * dout.stride(0);
          for (int64_t i = c0; i < c1; ++i) dst[i] = from_float<D>(to_float(dst[i]) + to_float(src[i]));
        }
      });
    });
  });
  return Status::Ok();
}

}  // namespace vlpar::VLPAR_CPU_ISA_NAMESPACE
