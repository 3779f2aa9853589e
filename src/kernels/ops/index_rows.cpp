// The public row gather/scatter ops: arguments and indices checked once here, then the device's implementation
// (CPU: src/kernels/cpu/index_rows.cpp; no CUDA kernel yet). Test: tests/unit/test_index_rows.cpp.
#include "vlpar/kernels/index_rows.hpp"

#include <vector>

#include "../cpu_impl.hpp"
#include "vlpar/core/checks.hpp"

namespace vlpar {
namespace {

/// [rows, H] with a contiguous last dim and a float storage dtype.
Status check_matrix(const char* op, const char* name, const TensorView& v) {
  VLPAR_CHECK(v.ndim() == 2 && (v.stride(1) == 1 || v.size(1) <= 1),
              "{}: {} must be [rows, H] with a contiguous last dim, got {}", op, name, v.to_string());
  VLPAR_CHECK(v.data != nullptr || v.numel() == 0, "{}: {} has null data", op, name);
  return check_storage_dtype(op, name, v);
}

/// index i32/i64 [n] on the host, entries in [0, rows), distinct when `distinct`.
Status check_index(const char* op, const TensorView& index, int64_t n, int64_t rows, bool distinct) {
  VLPAR_RETURN_IF_ERROR(check_index_vector(op, "index", index, n));
  std::vector<bool> seen(distinct ? size_t(rows) : 0, false);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t r = index_at(index, i);
    VLPAR_CHECK(r >= 0 && r < rows, "{}: index[{}] = {} is outside the {} rows [0, {})", op, i, r, rows, rows);
    if (!distinct) continue;
    VLPAR_CHECK(!seen[size_t(r)], "{}: row {} appears twice in index (at {} and earlier); scatters need distinct rows",
                op, r, i);
    seen[size_t(r)] = true;
  }
  return Status::Ok();
}

/// The common checks of gather (small = dst) and scatter (small = src): shapes, H, index, one device (the CPU).
Status check_rows_op(const char* op, const TensorView& big, const TensorView& small, const TensorView& index,
                     bool distinct) {
  VLPAR_RETURN_IF_ERROR(check_matrix(op, "packed rows", big));
  VLPAR_RETURN_IF_ERROR(check_matrix(op, "selected rows", small));
  VLPAR_CHECK(big.size(1) == small.size(1), "{}: packed rows {} and selected rows {} differ in H", op,
              big.to_string(), small.to_string());
  VLPAR_RETURN_IF_ERROR(check_same_device(op, {{"packed rows", &big}, {"selected rows", &small}}));
  VLPAR_CHECK_CODE(big.device.is_cpu(), StatusCode::kNotSupported, "{}: no CUDA kernel yet ({})", op,
                   big.to_string());
  return check_index(op, index, small.size(0), big.size(0), distinct);
}

}  // namespace

Status gather_rows(const Context& ctx, TensorView dst, TensorView src, TensorView index) {
  VLPAR_RETURN_IF_ERROR(check_rows_op("gather_rows", src, dst, index, false));
  return cpu_impl::gather_rows(ctx, dst, src, index);
}

Status scatter_rows(const Context& ctx, TensorView dst, TensorView src, TensorView index) {
  VLPAR_RETURN_IF_ERROR(check_rows_op("scatter_rows", dst, src, index, true));
  return cpu_impl::scatter_rows(ctx, dst, src, index);
}

Status scatter_add_rows(const Context& ctx, TensorView dst, TensorView src, TensorView index) {
  VLPAR_RETURN_IF_ERROR(check_rows_op("scatter_add_rows", dst, src, index, true));
  return cpu_impl::scatter_add_rows(ctx, dst, src, index);
}

Status zero_rows(const Context& ctx, TensorView dst, TensorView index) {
  const char* op = "zero_rows";
  VLPAR_RETURN_IF_ERROR(check_matrix(op, "dst", dst));
  VLPAR_CHECK_CODE(dst.device.is_cpu(), StatusCode::kNotSupported, "{}: no CUDA kernel yet ({})", op,
                   dst.to_string());
  VLPAR_RETURN_IF_ERROR(check_index(op, index, index.numel(), dst.size(0), true));
  return cpu_impl::zero_rows(ctx, dst, index);
}

}  // namespace vlpar
