// Shared argument checks for ops.
#include "vlpar/core/checks.hpp"

namespace vlpar {

Status check_same_device(const char* op, std::initializer_list<std::pair<const char*, const TensorView*>> views) {
  const TensorView* first = nullptr;
  const char* first_name = "";
  for (const auto& [name, v] : views) {
    if (v->data == nullptr) continue;  // absent optional argument
    if (!first) {
      first = v;
      first_name = name;
      continue;
    }
    VLPAR_CHECK(v->device == first->device, "{}: {} is on {} but {} is on {}", op, name, v->device.to_string(),
                first_name, first->device.to_string());
  }
  return Status::Ok();
}

Status check_vector(const char* op, const char* name, const TensorView& v, int64_t n, DType dtype) {
  VLPAR_CHECK(v.ndim() == 1 && v.size(0) == n, "{}: {} must have shape [{}], got {}", op, name, n, v.to_string());
  VLPAR_CHECK(v.dtype == dtype, "{}: {} must be {}, got {}", op, name, dtype_name(dtype), v.to_string());
  VLPAR_CHECK(v.stride(0) == 1 || n <= 1, "{}: {} must be contiguous", op, name);
  VLPAR_CHECK(v.data != nullptr || n == 0, "{}: {} has null data", op, name);
  return Status::Ok();
}

Status check_index_vector(const char* op, const char* name, const TensorView& v, int64_t n) {
  VLPAR_CHECK(v.dtype == DType::kI32 || v.dtype == DType::kI64, "{}: {} must be i32 or i64, got {}", op, name,
              v.to_string());
  VLPAR_RETURN_IF_ERROR(check_vector(op, name, v, n, v.dtype));
  VLPAR_CHECK(v.device.is_cpu(), "{}: {} must be on the CPU, got {}", op, name, v.to_string());
  return Status::Ok();
}

Status check_float_vector(const char* op, const char* name, const TensorView& v, int64_t n) {
  VLPAR_CHECK(v.ndim() == 1 && v.size(0) == n, "{}: {} must have shape [{}], got {}", op, name, n, v.to_string());
  VLPAR_RETURN_IF_ERROR(check_storage_dtype(op, name, v));
  VLPAR_CHECK(v.stride(0) == 1 || n <= 1, "{}: {} must be contiguous", op, name);
  VLPAR_CHECK(v.data != nullptr || n == 0, "{}: {} has null data", op, name);
  return Status::Ok();
}

Status check_same_rows(const char* op, const char* a_name, const RowsView& a, const char* b_name,
                       const RowsView& b) {
  VLPAR_CHECK(a.rows == b.rows && a.cols == b.cols, "{}: {} is [{} rows, {}] but {} is [{} rows, {}]", op, a_name,
              a.rows, a.cols, b_name, b.rows, b.cols);
  return Status::Ok();
}

Status check_storage_dtype(const char* op, const char* name, const TensorView& v) {
  VLPAR_CHECK(v.dtype == DType::kF32 || v.dtype == DType::kBF16 || v.dtype == DType::kF16,
              "{}: {} must be f32, bf16 or f16, got {}", op, name, v.to_string());
  return Status::Ok();
}

}  // namespace vlpar
