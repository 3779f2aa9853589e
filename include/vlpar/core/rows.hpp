#pragma once
// A view seen as a matrix of rows: leading dims collapsed into `rows`, the last dim contiguous.
// Most row-wise ops (norms, activations, losses) accept any view that collapses this way, including strided
// row views such as the gate half of a fused [N, 2I] tensor.
#include <cstdint>

#include "vlpar/core/tensor.hpp"

namespace vlpar {

struct RowsView {
  void* data = nullptr;
  DType dtype = DType::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t row_stride = 0;  // elements between consecutive rows

  template <class T>
  T* row(int64_t r) const { return static_cast<T*>(data) + r * row_stride; }
};

/// @brief Collapses `v` into rows × last-dim. Fails (naming `what`) if the last dim is strided or leading dims
/// do not collapse into a single uniform row stride.
Result<RowsView> as_rows(const TensorView& v, const char* what);

/// @brief Checks that a view is on the CPU, has a floating dtype and is non-null when non-empty.
Status check_cpu_float(const TensorView& v, const char* what);

}  // namespace vlpar
