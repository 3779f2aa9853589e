#pragma once
// Overflow-checked size arithmetic for sizes that come from input (grids, shapes, offsets, counts): the result, or
// nullopt where the exact value does not fit in int64. Callers turn nullopt into an error naming the input; a
// wrapped product can never pass a later equality check and index outside a buffer.
// Test: tests/unit/test_batch.cpp (CheckedArithmetic.*, crafted grids).
#include <cstdint>
#include <optional>

namespace vlpar {

/// @brief a + b, or nullopt on int64 overflow.
inline std::optional<int64_t> checked_add(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}

/// @brief a · b, or nullopt on int64 overflow.
inline std::optional<int64_t> checked_mul(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

}  // namespace vlpar
