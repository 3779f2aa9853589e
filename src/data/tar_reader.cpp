// Tar archive reader through pread (see include/vlpar/data/tar_reader.hpp for the format and the error contract).
// Test: tests/unit/test_tar_reader.cpp.
#include "vlpar/data/tar_reader.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

namespace vlpar::data {
namespace {

// Extension headers ('L', 'K', 'x', 'g') hold a name or a few records; anything larger is not a real archive, and
// refusing it keeps a corrupt size field from allocating gigabytes.
constexpr int64_t kMaxExtensionBytes = int64_t{1} << 20;
// A member may carry a handful of extension headers ('x' + 'L' + 'K'); a longer chain is a corrupt archive.
constexpr int kMaxExtensionChain = 64;

int64_t round_up_block(int64_t n) { return (n + kTarBlock - 1) / kTarBlock * kTarBlock; }

// C string inside a fixed-width field: up to the first NUL.
std::string field_string(std::span<const uint8_t> f) {
  size_t n = 0;
  while (n < f.size() && f[n] != 0) ++n;
  return std::string(reinterpret_cast<const char*>(f.data()), n);
}

bool is_zero_block(std::span<const uint8_t> b) {
  for (uint8_t c : b)
    if (c != 0) return false;
  return true;
}

// Unsigned and signed header sums with the checksum field read as 8 spaces (POSIX; old writers used signed chars).
std::pair<int64_t, int64_t> header_checksums(std::span<const uint8_t> b) {
  int64_t u = 0, s = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    const uint8_t c = (i >= 148 && i < 156) ? uint8_t{' '} : b[i];
    u += c;
    s += static_cast<int8_t>(c);
  }
  return {u, s};
}

struct PaxRecords {
  std::optional<std::string> path;
  std::optional<int64_t> size;
};

// "<len> <key>=<value>\n" records; <len> counts the whole record. Trailing NUL padding is tolerated.
Status parse_pax(std::span<const uint8_t> data, PaxRecords& out, const std::string& file, int64_t offset) {
  size_t pos = 0;
  while (pos < data.size()) {
    if (data[pos] == 0) {  // padding after the last record
      for (size_t i = pos; i < data.size(); ++i)
        if (data[i] != 0)
          return VLPAR_STATUS(StatusCode::kInvalidArgument, "tar {}: pax header at offset {}: bytes after NUL padding",
                              file, offset);
      break;
    }
    size_t p = pos;
    int64_t len = 0;
    while (p < data.size() && data[p] >= '0' && data[p] <= '9' && len < (int64_t{1} << 40)) {
      len = len * 10 + (data[p] - '0');
      ++p;
    }
    if (p == pos || p >= data.size() || data[p] != ' ' || len <= static_cast<int64_t>(p - pos) + 2 ||
        pos + static_cast<size_t>(len) > data.size() || data[pos + static_cast<size_t>(len) - 1] != '\n')
      return VLPAR_STATUS(StatusCode::kInvalidArgument,
                          "tar {}: malformed pax record at byte {} of the pax header at offset {}", file, pos, offset);
    const std::string_view rec(reinterpret_cast<const char*>(data.data()) + p + 1,
                               pos + static_cast<size_t>(len) - 1 - (p + 1));
    const size_t eq = rec.find('=');
    if (eq == std::string_view::npos || eq == 0)
      return VLPAR_STATUS(StatusCode::kInvalidArgument,
                          "tar {}: pax record without key=value at byte {} of the pax header at offset {}", file, pos,
                          offset);
    const std::string_view key = rec.substr(0, eq), value = rec.substr(eq + 1);
    if (key == "path") {
      out.path = value.empty() ? std::nullopt : std::optional<std::string>(std::string(value));
    } else if (key == "size") {
      if (value.empty()) {
        out.size.reset();
      } else {
        int64_t v = 0;
        for (char c : value) {
          if (c < '0' || c > '9' || v > (std::numeric_limits<int64_t>::max() - 9) / 10)
            return VLPAR_STATUS(StatusCode::kInvalidArgument,
                                "tar {}: pax size='{}' is not a decimal byte count (pax header at offset {})", file,
                                value, offset);
          v = v * 10 + (c - '0');
        }
        out.size = v;
      }
    }
    pos += static_cast<size_t>(len);
  }
  return Status::Ok();
}

}  // namespace

std::optional<int64_t> parse_tar_number(std::span<const uint8_t> f) {
  if (f.empty()) return int64_t{0};
  if (f[0] & 0x80) {
    if (f[0] != 0x80) return std::nullopt;  // 0xff = negative base-256; other high-bit bytes are invalid
    uint64_t v = 0;
    for (size_t i = 1; i < f.size(); ++i) {
      if (v > (std::numeric_limits<uint64_t>::max() >> 8)) return std::nullopt;
      v = (v << 8) | f[i];
    }
    if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return static_cast<int64_t>(v);
  }
  size_t end = 0;
  while (end < f.size() && f[end] != 0) ++end;
  size_t b = 0;
  auto space = [](uint8_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; };
  while (b < end && space(f[b])) ++b;
  while (end > b && space(f[end - 1])) --end;
  int64_t v = 0;
  for (size_t i = b; i < end; ++i) {
    if (f[i] < '0' || f[i] > '7') return std::nullopt;
    if (v > (std::numeric_limits<int64_t>::max() >> 3)) return std::nullopt;
    v = (v << 3) | (f[i] - '0');
  }
  return v;
}

Result<TarFile> TarFile::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return VLPAR_STATUS(StatusCode::kIoError, "tar {}: cannot open: {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const int err = errno;
    ::close(fd);
    return VLPAR_STATUS(StatusCode::kIoError, "tar {}: not a regular file{}", path,
                        err ? fmt::format(" ({})", std::strerror(err)) : std::string());
  }
  (void)::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);  // advice only; failure changes nothing
  TarFile t(path, fd, static_cast<int64_t>(st.st_size));
  // Leading 'g' headers: the globals every walk starts from. A malformed one is left for member_at to report.
  int64_t cur = 0;
  std::array<uint8_t, kTarBlock> block{};
  while (cur + kTarBlock <= t.file_size_) {
    if (!t.read(cur, block).ok() || block[156] != 'g') break;
    const auto stored = parse_tar_number(std::span<const uint8_t>(block).subspan(148, 8));
    const auto [u, s] = header_checksums(block);
    const auto size = parse_tar_number(std::span<const uint8_t>(block).subspan(124, 12));
    if (!stored || (*stored != u && *stored != s) || !size || *size > kMaxExtensionBytes ||
        cur + kTarBlock + *size > t.file_size_)
      break;
    std::vector<uint8_t> data(static_cast<size_t>(*size));
    PaxRecords rec;
    if (!t.read(cur + kTarBlock, data).ok() || !parse_pax(data, rec, path, cur).ok()) break;
    if (rec.path) t.leading_globals_.path = rec.path;
    if (rec.size) t.leading_globals_.size = rec.size;
    cur += kTarBlock + round_up_block(*size);
  }
  t.first_member_offset_ = cur;
  return t;
}

TarFile::TarFile(TarFile&& o) noexcept
    : path_(std::move(o.path_)),
      fd_(std::exchange(o.fd_, -1)),
      file_size_(o.file_size_),
      leading_globals_(std::move(o.leading_globals_)),
      first_member_offset_(o.first_member_offset_) {}

TarFile& TarFile::operator=(TarFile&& o) noexcept {
  if (this != &o) {
    close_fd();
    path_ = std::move(o.path_);
    fd_ = std::exchange(o.fd_, -1);
    file_size_ = o.file_size_;
    leading_globals_ = std::move(o.leading_globals_);
    first_member_offset_ = o.first_member_offset_;
  }
  return *this;
}

TarFile::~TarFile() { close_fd(); }

void TarFile::close_fd() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

Status TarFile::read(int64_t offset, std::span<uint8_t> out) const {
  if (offset < 0 || static_cast<int64_t>(out.size()) > file_size_ - offset)
    return VLPAR_STATUS(StatusCode::kIoError, "tar {}: reading {} bytes at offset {} runs past the end of the file "
                        "({} bytes)", path_, out.size(), offset, file_size_);
  size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = ::pread(fd_, out.data() + done, out.size() - done, static_cast<off_t>(offset) + done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return VLPAR_STATUS(StatusCode::kIoError, "tar {}: pread of {} bytes at offset {} failed: {}", path_,
                          out.size() - done, offset + static_cast<int64_t>(done), std::strerror(errno));
    }
    if (n == 0)  // the file shrank since open
      return VLPAR_STATUS(StatusCode::kIoError, "tar {}: file ends at offset {} while reading {} bytes at offset {}",
                          path_, offset + static_cast<int64_t>(done), out.size(), offset);
    done += static_cast<size_t>(n);
  }
  return Status::Ok();
}

Result<std::optional<TarMember>> TarFile::member_at(int64_t offset, TarPaxGlobals& globals) const {
  if (offset < 0 || offset % kTarBlock != 0)
    return VLPAR_STATUS(StatusCode::kInvalidArgument, "tar {}: offset {} is not a multiple of 512", path_, offset);
  int64_t first = offset, cur = offset;
  bool pending = false;  // an 'L'/'K'/'x' header waits for its member
  std::optional<std::string> long_name;
  std::optional<PaxRecords> pax;
  std::array<uint8_t, kTarBlock> block{};
  for (int chain = 0;; ++chain) {
    if (chain > kMaxExtensionChain)
      return VLPAR_STATUS(StatusCode::kInvalidArgument,
                          "tar {}: more than {} extension headers in a row from offset {}", path_, kMaxExtensionChain,
                          first);
    if (cur == file_size_ && !pending) return std::optional<TarMember>();  // no end-of-archive blocks: EOF ends it
    if (cur + kTarBlock > file_size_)
      return VLPAR_STATUS(StatusCode::kIoError, "tar {}: truncated: header at offset {} needs 512 bytes, the file "
                          "has {}{}", path_, cur, file_size_, pending ? " (after an extension header)" : "");
    VLPAR_RETURN_IF_ERROR(read(cur, block));
    const std::span<const uint8_t> b(block);
    if (is_zero_block(b)) {
      if (pending)
        return VLPAR_STATUS(StatusCode::kInvalidArgument,
                            "tar {}: extension header at offset {} is followed by the end-of-archive block", path_,
                            first);
      return std::optional<TarMember>();
    }
    const auto stored = parse_tar_number(b.subspan(148, 8));
    const auto [usum, ssum] = header_checksums(b);
    if (!stored || (*stored != usum && *stored != ssum))
      return VLPAR_STATUS(StatusCode::kInvalidArgument,
                          "tar {}: bad header checksum at offset {} (stored '{}', computed {})", path_, cur,
                          field_string(b.subspan(148, 8)), usum);
    const auto hsize = parse_tar_number(b.subspan(124, 12));
    if (!hsize)
      return VLPAR_STATUS(StatusCode::kInvalidArgument, "tar {}: invalid size field '{}' in the header at offset {}",
                          path_, field_string(b.subspan(124, 12)), cur);
    const char type = static_cast<char>(b[156]);

    if (type == 'L' || type == 'K' || type == 'x' || type == 'g') {
      if (*hsize > kMaxExtensionBytes)
        return VLPAR_STATUS(StatusCode::kInvalidArgument,
                            "tar {}: extension header '{}' at offset {} claims {} bytes (limit {})", path_, type, cur,
                            *hsize, kMaxExtensionBytes);
      if (*hsize > file_size_ - cur - kTarBlock)
        return VLPAR_STATUS(StatusCode::kIoError,
                            "tar {}: truncated: extension header '{}' at offset {} needs {} content bytes past the "
                            "end of the file ({} bytes)", path_, type, cur, *hsize, file_size_);
      std::vector<uint8_t> data(static_cast<size_t>(*hsize));
      VLPAR_RETURN_IF_ERROR(read(cur + kTarBlock, data));
      if (type == 'L') {
        long_name = field_string(data);
      } else if (type == 'x') {
        if (!pax) pax.emplace();
        VLPAR_RETURN_IF_ERROR(parse_pax(data, *pax, path_, cur));
      } else if (type == 'g') {
        PaxRecords g;
        VLPAR_RETURN_IF_ERROR(parse_pax(data, g, path_, cur));
        if (g.path) globals.path = g.path;
        if (g.size) globals.size = g.size;
      }
      cur += kTarBlock + round_up_block(*hsize);
      if (type == 'g' && !pending) {
        first = cur;  // Python: a global header is not part of the next member's offset
      } else if (type != 'g') {
        pending = true;
      }
      continue;
    }

    TarMember m;
    m.type = type;
    m.header_offset = first;
    m.data_offset = cur + kTarBlock;
    // Python applies pax records (globals merged under the member's own) only to members that have an 'x' header.
    std::optional<std::string> pax_path;
    std::optional<int64_t> pax_size;
    if (pax) {
      pax_path = pax->path ? pax->path : globals.path;
      pax_size = pax->size ? pax->size : globals.size;
    }
    if (pax_path) {
      m.name = *pax_path;
    } else if (long_name) {
      m.name = *long_name;
    } else {
      m.name = field_string(b.subspan(0, 100));
      const bool posix_magic = std::memcmp(b.data() + 257, "ustar\0", 6) == 0;
      const std::string prefix = posix_magic ? field_string(b.subspan(345, 155)) : std::string();
      if (!prefix.empty()) m.name = prefix + "/" + m.name;
    }
    if (type == '\0' && !m.name.empty() && m.name.back() == '/') m.type = '5';  // old-style directory
    if (m.type == '5')
      while (m.name.size() > 1 && m.name.back() == '/') m.name.pop_back();
    if (type == 'S' && b[482] != 0)
      return VLPAR_STATUS(StatusCode::kInvalidArgument,
                          "tar {}: GNU sparse member '{}' at offset {} uses extension blocks (not supported)", path_,
                          m.name, cur);
    const bool no_content = m.type >= '1' && m.type <= '6';
    m.size = no_content ? 0 : (pax_size ? *pax_size : *hsize);
    if (m.size > file_size_ - m.data_offset)
      return VLPAR_STATUS(StatusCode::kIoError,
                          "tar {}: truncated: member '{}' (header at offset {}) has {} content bytes at offset {}, "
                          "past the end of the file ({} bytes)", path_, m.name, cur, m.size, m.data_offset,
                          file_size_);
    m.next_offset = m.data_offset + round_up_block(m.size);
    return std::optional<TarMember>(std::move(m));
  }
}

}  // namespace vlpar::data
