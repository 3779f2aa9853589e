#pragma once
// Argument checks shared by the op implementations. Each returns a Status naming the op and the argument.
#include <initializer_list>
#include <utility>

#include "vlpar/core/rows.hpp"
#include "vlpar/core/tensor.hpp"

namespace vlpar {

/// @brief All non-empty views live on the same device as the first one.
Status check_same_device(const char* op, std::initializer_list<std::pair<const char*, const TensorView*>> views);
/// @brief `v` is a contiguous 1-D view of `n` elements of dtype `dtype`.
Status check_vector(const char* op, const char* name, const TensorView& v, int64_t n, DType dtype);
/// @brief `v` is a contiguous 1-D host view of `n` i32 or i64 elements (token ids, labels, row indices), read on
/// the host by the op's checks.
Status check_index_vector(const char* op, const char* name, const TensorView& v, int64_t n);
/// @brief `v` is a contiguous 1-D view of `n` elements of any floating dtype.
Status check_float_vector(const char* op, const char* name, const TensorView& v, int64_t n);
/// @brief Two row views have the same rows × cols.
Status check_same_rows(const char* op, const char* a_name, const RowsView& a, const char* b_name, const RowsView& b);
/// @brief `v` is floating and not f64.
Status check_storage_dtype(const char* op, const char* name, const TensorView& v);

}  // namespace vlpar
