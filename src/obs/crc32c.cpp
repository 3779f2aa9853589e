// CRC-32C (Castagnoli), table-driven one byte at a time. See include/vlpar/obs/crc32c.hpp.
#include "vlpar/obs/crc32c.hpp"

#include <array>

namespace vlpar::obs {
namespace {

// Reflected form of the Castagnoli polynomial 0x1EDC6F41 (bits reversed), as iSCSI and TFRecord use it.
constexpr uint32_t kPolyReflected = 0x82F63B78u;

constexpr std::array<uint32_t, 256> make_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1u) ? (c >> 1) ^ kPolyReflected : (c >> 1);
    t[i] = c;
  }
  return t;
}
constexpr std::array<uint32_t, 256> kTable = make_table();  // immutable, built at compile time

}  // namespace

uint32_t crc32c_extend(uint32_t crc, const void* data, size_t size) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t c = ~crc;  // undo the final xor of the previous result (init ~0 for a fresh CRC)
  for (size_t i = 0; i < size; ++i) c = kTable[(c ^ p[i]) & 0xFFu] ^ (c >> 8);
  return ~c;
}

uint32_t crc32c(const void* data, size_t size) { return crc32c_extend(0u, data, size); }

}  // namespace vlpar::obs
