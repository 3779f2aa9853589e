// TFRecord framing and parsing. See include/vlpar/obs/tfrecord.hpp.
#include "vlpar/obs/tfrecord.hpp"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>

#include "vlpar/obs/crc32c.hpp"

namespace vlpar::obs {
namespace {

void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFFu));
}
uint64_t get_le(const char* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

}  // namespace

std::string frame_tfrecord(std::string_view data) {
  std::string out;
  out.reserve(data.size() + 16);
  put_le(out, data.size(), 8);
  put_le(out, crc32c_mask(crc32c(out.data(), 8)), 4);
  out.append(data);
  put_le(out, crc32c_mask(crc32c(data)), 4);
  return out;
}

Result<TfRecords> parse_tfrecords(std::string_view bytes) {
  TfRecords out;
  size_t pos = 0;
  while (pos < bytes.size()) {
    const size_t index = out.records.size();
    if (bytes.size() - pos < 12) {
      out.truncated_tail = true;
      break;
    }
    const uint64_t len = get_le(bytes.data() + pos, 8);
    const auto len_crc = static_cast<uint32_t>(get_le(bytes.data() + pos + 8, 4));
    const uint32_t want_len_crc = crc32c_mask(crc32c(bytes.data() + pos, 8));
    if (len_crc != want_len_crc)
      return VLPAR_STATUS(StatusCode::kIoError,
                          "TFRecord {} at byte {}: length CRC mismatch (stored 0x{:08x}, computed 0x{:08x})", index,
                          pos, len_crc, want_len_crc);
    if (len > bytes.size() - pos - 12 || bytes.size() - pos - 12 - len < 4) {
      out.truncated_tail = true;
      break;
    }
    std::string_view data = bytes.substr(pos + 12, len);
    const auto data_crc = static_cast<uint32_t>(get_le(bytes.data() + pos + 12 + len, 4));
    const uint32_t want_data_crc = crc32c_mask(crc32c(data));
    if (data_crc != want_data_crc)
      return VLPAR_STATUS(StatusCode::kIoError,
                          "TFRecord {} at byte {}: data CRC mismatch (stored 0x{:08x}, computed 0x{:08x})", index, pos,
                          data_crc, want_data_crc);
    out.records.emplace_back(data);
    pos += 16 + len;
  }
  return out;
}

Result<TfRecords> read_tfrecord_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return VLPAR_STATUS(StatusCode::kIoError, "cannot open '{}': {}", path, std::strerror(errno));
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  Result<TfRecords> r = parse_tfrecords(bytes);
  if (!r.ok()) return Status(r.status().code(), fmt::format("'{}': {}", path, r.status().message()));
  return r;
}

}  // namespace vlpar::obs
