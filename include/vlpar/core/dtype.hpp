#pragma once
// Element types and their conversions.
//   DType          : the runtime tag carried by every tensor view.
//   bf16, f16      : 16-bit storage types; conversion from float rounds to nearest even (NaN stays NaN,
//                    overflow goes to inf as IEEE demands), conversion to float is exact.
//   dtype_of<T>    : compile-time tag of a C++ type.
// Everything here is VLPAR_HD so CUDA kernels and CPU code round identically.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "vlpar/core/macros.hpp"

namespace vlpar {

enum class DType : uint8_t { kF32 = 0, kBF16, kF16, kI32, kI64, kF64 };

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::kF32: return 4;
    case DType::kBF16: return 2;
    case DType::kF16: return 2;
    case DType::kI32: return 4;
    case DType::kI64: return 8;
    case DType::kF64: return 8;
  }
  return 0;
}

constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::kF32: return "f32";
    case DType::kBF16: return "bf16";
    case DType::kF16: return "f16";
    case DType::kI32: return "i32";
    case DType::kI64: return "i64";
    case DType::kF64: return "f64";
  }
  return "?";
}

constexpr bool is_floating(DType t) { return t == DType::kF32 || t == DType::kBF16 || t == DType::kF16 || t == DType::kF64; }

VLPAR_HD VLPAR_FORCEINLINE uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}
VLPAR_HD VLPAR_FORCEINLINE float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

/// brain float 16: the top 16 bits of an IEEE float.
struct bf16 {
  uint16_t bits;
};
/// IEEE binary16.
struct f16 {
  uint16_t bits;
};

VLPAR_HD VLPAR_FORCEINLINE float bf16_to_float(bf16 h) { return bits_float(uint32_t(h.bits) << 16); }

VLPAR_HD VLPAR_FORCEINLINE bf16 float_to_bf16(float f) {
  uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16{uint16_t((u >> 16) | 0x40u)};  // quiet the NaN
  uint32_t lsb = (u >> 16) & 1u;
  return bf16{uint16_t((u + 0x7fffu + lsb) >> 16)};  // ties go to the even mantissa
}

VLPAR_HD VLPAR_FORCEINLINE float f16_to_float(f16 h) {
  uint32_t sign = uint32_t(h.bits & 0x8000u) << 16;
  uint32_t exp = (h.bits >> 10) & 0x1fu;
  uint32_t mant = h.bits & 0x3ffu;
  if (exp == 0) {  // zero or subnormal: mant * 2^-24, exact in float
    float v = float(mant) * 5.9604644775390625e-8f;
    return bits_float(float_bits(v) | sign);
  }
  if (exp == 31) return bits_float(sign | 0x7f800000u | (mant << 13));
  return bits_float(sign | ((exp + 112u) << 23) | (mant << 13));
}

VLPAR_HD VLPAR_FORCEINLINE f16 float_to_f16(float f) {
  uint32_t u = float_bits(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t a = u & 0x7fffffffu;
  uint16_t out;
  if (a >= 0x47800000u) {  // |f| >= 65536 (or inf/nan): inf, or a quiet NaN
    out = a > 0x7f800000u ? 0x7e00u : 0x7c00u;
  } else if (a < 0x38800000u) {  // result is subnormal or zero (|f| < 2^-14)
    // Adding 0.5f aligns the binary point so the FPU's own round-to-nearest-even picks the 2^-24 multiple.
    const uint32_t magic = 0x3f000000u;
    float shifted = bits_float(a) + bits_float(magic);
    out = uint16_t(float_bits(shifted) - magic);
  } else {
    uint32_t mant_odd = (a >> 13) & 1u;
    a += 0xc8000fffu;  // rebias exponent (15-127)<<23, plus half an ulp minus one
    a += mant_odd;     // ties to even
    out = uint16_t(a >> 13);  // values in [65520, 65536) carry into the inf pattern, as IEEE requires
  }
  return f16{uint16_t(out | sign)};
}

/// Storage → compute conversions used by every kernel: compute happens in float (or double in references).
VLPAR_HD VLPAR_FORCEINLINE float to_float(float x) { return x; }
VLPAR_HD VLPAR_FORCEINLINE float to_float(bf16 x) { return bf16_to_float(x); }
VLPAR_HD VLPAR_FORCEINLINE float to_float(f16 x) { return f16_to_float(x); }

template <class T>
VLPAR_HD VLPAR_FORCEINLINE T from_float(float x);
template <>
VLPAR_HD VLPAR_FORCEINLINE float from_float<float>(float x) { return x; }
template <>
VLPAR_HD VLPAR_FORCEINLINE bf16 from_float<bf16>(float x) { return float_to_bf16(x); }
template <>
VLPAR_HD VLPAR_FORCEINLINE f16 from_float<f16>(float x) { return float_to_f16(x); }

/// Round a float to the precision of storage type T (identity for float).
template <class T>
VLPAR_HD VLPAR_FORCEINLINE float round_to(float x) { return to_float(from_float<T>(x)); }

template <class T>
struct dtype_of;
template <> struct dtype_of<float> { static constexpr DType value = DType::kF32; };
template <> struct dtype_of<bf16> { static constexpr DType value = DType::kBF16; };
template <> struct dtype_of<f16> { static constexpr DType value = DType::kF16; };
template <> struct dtype_of<int32_t> { static constexpr DType value = DType::kI32; };
template <> struct dtype_of<int64_t> { static constexpr DType value = DType::kI64; };
template <> struct dtype_of<double> { static constexpr DType value = DType::kF64; };
template <class T>
inline constexpr DType dtype_of_v = dtype_of<T>::value;

}  // namespace vlpar
