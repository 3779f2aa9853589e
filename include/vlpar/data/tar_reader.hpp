#pragma once
// Random-access reader of one tar archive (POSIX ustar, GNU, pax) through pread(2): the archive is never mapped or
// loaded whole; a member's content is read with one pread straight into the caller's buffer (the only copy).
// (Not mmap: a shard truncated or replaced while mapped turns a read into SIGBUS; pread turns it into a Status.)
//
// Format (libarchive tar(5); formats-and-conventions.md §3): 512-byte header blocks; name[100]@0, size[12]@124
// (octal, or base-256 when the high bit of the first byte is set), chksum[8]@148, typeflag@156, magic@257
// ("ustar\0" POSIX / "ustar  \0" GNU), prefix[155]@345 (POSIX only: full name = prefix + "/" + name); content
// padded to 512; a zero block ends the archive. Extension headers are folded into the member that follows them:
//   'L' GNU long name (content = name, NUL-terminated)      'K' GNU long link name (ignored)
//   'x' pax per-member records "<len> <key>=<value>\n": path= and size= are honoured, other keys ignored
//   'g' pax global records: path= / size= apply to every later member of the same walk. TarFile::open reads the
//       'g' headers at the start of the archive, so a walk that starts mid-archive (at a .tar.idx offset) sees
//       those; a 'g' header in the middle of an archive is honoured only by walks that pass it.
// Name precedence: pax path= > GNU 'L' > ustar prefix/name > name. Directories lose their trailing '/'.
// TarMember::header_offset is the offset of the member's FIRST header, its 'L'/'K'/'x' headers included but not
// a 'g' header (exactly Python's TarInfo.offset, which Megatron-Energon writes into .tar.idx).
// Content is skipped for regular members and unknown types; types '1'..'6' (links, devices, dirs, fifos) carry no
// content whatever their size field says (Python tarfile does the same).
//
// Errors name the file and the byte offset of the offending header:
//   StatusCode::kInvalidArgument  the bytes are not a valid header: bad checksum, non-octal numeric field,
//                                 negative base-256 number, malformed pax record, extension header not followed
//                                 by a member, GNU sparse member with extension blocks
//   StatusCode::kIoError          open/pread failures and truncation: a header or member content past the end of
//                                 the file
// Callers that know sample boundaries (a .tar.idx) treat kInvalidArgument inside a sample as a corrupt member
// (skip the sample) and everything else as fatal for the shard (webdataset.hpp).
// Test: tests/unit/test_tar_reader.cpp.
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "vlpar/core/status.hpp"

namespace vlpar::data {

inline constexpr int64_t kTarBlock = 512;

/// One archive member with its extension headers folded in.
struct TarMember {
  std::string name;            // full path (see the precedence rule above); no trailing '/' on directories
  char type = '0';             // typeflag of the member's own header ('0' also for NUL, '5' directory, ...)
  int64_t header_offset = 0;   // first header block of the member, its 'L'/'K'/'x' headers included
  int64_t data_offset = 0;     // first content byte (= own header + 512)
  int64_t size = 0;            // content bytes (pax size= wins over the header field); 0 for types '1'..'6'
  int64_t next_offset = 0;     // first header of the next member: data_offset + size rounded up to 512

  /// Regular file: typeflag '0', NUL or '7' (contiguous file), as Python's TarInfo.isreg().
  bool is_regular() const { return type == '0' || type == '\0' || type == '7'; }
  bool is_directory() const { return type == '5'; }
};

/// The pax global attributes ('g' headers) a walk has seen so far.
struct TarPaxGlobals {
  std::optional<std::string> path;  // global path= (pathological, but honoured as Python does)
  std::optional<int64_t> size;      // global size=
};

/// @brief A read-only tar archive. Movable, not copyable; every read is a pread, so a const TarFile may be read
/// from several threads at once.
class TarFile {
 public:
  /// @brief Opens `path` (O_RDONLY, sequential read-ahead advice) and reads the leading 'g' headers.
  /// kIoError naming the file when it is missing or unreadable.
  static Result<TarFile> open(const std::string& path);

  TarFile(TarFile&& other) noexcept;
  TarFile& operator=(TarFile&& other) noexcept;
  TarFile(const TarFile&) = delete;
  TarFile& operator=(const TarFile&) = delete;
  ~TarFile();

  const std::string& path() const { return path_; }
  int64_t file_size() const { return file_size_; }
  /// The pax globals of the 'g' headers at the start of the archive (the state a walk starts from).
  const TarPaxGlobals& leading_globals() const { return leading_globals_; }
  /// Offset of the first header after the leading 'g' headers (0 when there are none).
  int64_t first_member_offset() const { return first_member_offset_; }

  /// @brief Parses the member whose first header starts at `offset` (a multiple of 512).
  /// @param offset  byte offset of a header block
  /// @param globals pax globals of the walk: read, and updated by any 'g' header met on the way
  /// @return the member, or std::nullopt at the end of the archive (a zero block, or `offset` == file size).
  Result<std::optional<TarMember>> member_at(int64_t offset, TarPaxGlobals& globals) const;

  /// @brief Reads `out.size()` bytes at `offset` with pread (short reads retried; EINTR retried).
  /// kIoError naming the file and offset when the file ends first or the read fails.
  Status read(int64_t offset, std::span<uint8_t> out) const;

 private:
  TarFile(std::string path, int fd, int64_t size) : path_(std::move(path)), fd_(fd), file_size_(size) {}
  void close_fd();

  std::string path_;
  int fd_ = -1;
  int64_t file_size_ = 0;
  TarPaxGlobals leading_globals_;
  int64_t first_member_offset_ = 0;
};

/// @brief Parses a tar numeric field (octal with optional leading spaces/NULs and trailing NUL/space, or base-256
/// when the first byte has its high bit set). Empty/blank fields are 0. std::nullopt for anything else, for
/// negative base-256 values and for values above INT64_MAX.
std::optional<int64_t> parse_tar_number(std::span<const uint8_t> field);

}  // namespace vlpar::data
