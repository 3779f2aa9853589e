#pragma once
// CRC-32C (Castagnoli) and the TFRecord "masked" form used by TensorBoard event files.
//   crc32c        : reflected polynomial 0x82F63B78, init ~0, final xor ~0 (iSCSI / RFC 3720);
//                   check value crc32c("123456789") = 0xE3069283. Table-driven, one byte per step.
//   crc32c_extend : continue a CRC over more bytes (crc32c(a+b) == crc32c_extend(crc32c(a), b)).
//   crc32c_mask   : ((c >> 15) | (c << 17)) + 0xA282EAD8 mod 2^32 (TFRecord stores masked CRCs so that a CRC of
//                   data that itself contains CRCs stays well distributed); crc32c_unmask inverts it.
// Test: tests/unit/test_obs_tensorboard.cpp.
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace vlpar::obs {

/// @brief CRC-32C of `size` bytes at `data`.
uint32_t crc32c(const void* data, size_t size);
inline uint32_t crc32c(std::string_view bytes) { return crc32c(bytes.data(), bytes.size()); }

/// @brief CRC-32C of (the bytes `crc` covers) followed by `size` more bytes.
uint32_t crc32c_extend(uint32_t crc, const void* data, size_t size);

constexpr uint32_t kCrc32cMaskDelta = 0xA282EAD8u;
constexpr uint32_t crc32c_mask(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + kCrc32cMaskDelta; }
constexpr uint32_t crc32c_unmask(uint32_t masked) {
  const uint32_t rot = masked - kCrc32cMaskDelta;
  return (rot >> 17) | (rot << 15);
}

}  // namespace vlpar::obs
