// RowsView: collapse leading dims of a view into rows with one uniform stride.
#include "vlpar/core/rows.hpp"

namespace vlpar {

Result<RowsView> as_rows(const TensorView& v, const char* what) {
  VLPAR_CHECK(v.ndim() >= 1, "{}: expected at least 1 dim, got a scalar view", what);
  VLPAR_CHECK(v.stride(-1) == 1 || v.size(-1) <= 1, "{}: last dim of {} must be contiguous (stride {})", what,
              v.to_string(), v.stride(-1));
  RowsView r;
  r.data = v.data;
  r.dtype = v.dtype;
  r.cols = v.size(-1);
  r.rows = 1;
  r.row_stride = r.cols;
  if (v.ndim() >= 2) {
    r.row_stride = v.stride(-2);
    // Dims before -2 must nest exactly: stride[i] == stride[i+1] * size[i+1].
    for (int i = v.ndim() - 3; i >= 0; --i) {
      VLPAR_CHECK(v.size(i) <= 1 || v.strides[i] == v.strides[i + 1] * v.size(i + 1),
                  "{}: leading dims of {} do not collapse into rows (dim {} stride {})", what, v.to_string(), i,
                  v.strides[i]);
    }
    for (int i = 0; i < v.ndim() - 1; ++i) r.rows *= v.size(i);
  }
  VLPAR_CHECK(r.rows <= 1 || r.row_stride >= r.cols, "{}: rows of {} overlap (row stride {} < {} cols)", what,
              v.to_string(), r.row_stride, r.cols);
  return r;
}

Status check_cpu_float(const TensorView& v, const char* what) {
  VLPAR_CHECK(v.device.is_cpu(), "{}: expected a CPU view, got {}", what, v.to_string());
  VLPAR_CHECK(v.dtype == DType::kF32 || v.dtype == DType::kBF16 || v.dtype == DType::kF16,
              "{}: expected f32, bf16 or f16, got {}", what, v.to_string());
  VLPAR_CHECK(v.data != nullptr || v.numel() == 0, "{}: null data for non-empty view {}", what, v.to_string());
  return Status::Ok();
}

}  // namespace vlpar
