#pragma once
// Runtime → compile-time dispatch (STYLE §7). Every switch has a default branch that returns kNotSupported.
//   VLPAR_FLOAT_SWITCH(dtype, T, what, ...)  : T ∈ {float, bf16, f16}
//   VLPAR_BOOL_SWITCH(cond, NAME, ...)        : constexpr bool NAME
// `...` is a statement block that may `return` a Status.
#include "vlpar/core/dtype.hpp"
#include "vlpar/core/status.hpp"

#define VLPAR_FLOAT_SWITCH(dtype, T, what, ...)                                                       \
  switch (dtype) {                                                                                    \
    case ::vlpar::DType::kF32: { using T = float; __VA_ARGS__ } break;                                \
    case ::vlpar::DType::kBF16: { using T = ::vlpar::bf16; __VA_ARGS__ } break;                       \
    case ::vlpar::DType::kF16: { using T = ::vlpar::f16; __VA_ARGS__ } break;                         \
    default:                                                                                          \
      return VLPAR_STATUS(::vlpar::StatusCode::kNotSupported, "{}: dtype {} is not supported", what,  \
                          ::vlpar::dtype_name(dtype));                                                \
  }

#define VLPAR_BOOL_SWITCH(cond, NAME, ...)        \
  if (cond) {                                     \
    constexpr bool NAME = true;                   \
    __VA_ARGS__                                   \
  } else {                                        \
    constexpr bool NAME = false;                  \
    __VA_ARGS__                                   \
  }
