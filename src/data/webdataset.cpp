// WebDataset samples over tar shards: name rules, .tar.idx I/O, sample grouping and indexed sample reads.
// See include/vlpar/data/webdataset.hpp. Test: tests/unit/test_webdataset.cpp.
#include "vlpar/data/webdataset.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <limits>

#include "vlpar/io/safetensors.hpp"  // atomic_write_file

namespace vlpar::data {
namespace {

void lowercase_ascii(std::string& s) {
  for (char& c : s)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
}

// Sample member (regular, not meta, with an extension) → its split name.
std::optional<MemberName> sample_member_name(const TarMember& m) {
  if (!m.is_regular() || is_meta_member(m.name)) return std::nullopt;
  return split_member_name(m.name);
}

}  // namespace

const SampleField* Sample::field(std::string_view ext) const {
  for (const SampleField& f : fields)
    if (f.ext == ext) return &f;
  return nullptr;
}

int64_t Sample::num_bytes() const {
  int64_t n = 0;
  for (const SampleField& f : fields) n += static_cast<int64_t>(f.data.size());
  return n;
}

std::optional<MemberName> split_member_name(std::string_view name) {
  // ^((?:.*/|)[^.]+)[.]([^/]*)$ as Python's re evaluates it: (?:.*/|) tries the last '/' first, then earlier ones,
  // then the empty prefix; from each start st, [^.]+ runs to the first '.' (it cannot stop elsewhere, since a '.'
  // must follow), and [^/]* needs that '.' to lie after the last '/'.
  const size_t last_slash = name.rfind('/');
  auto try_start = [&](size_t st) -> std::optional<MemberName> {
    if (st >= name.size() || name[st] == '.') return std::nullopt;
    const size_t dot = name.find('.', st);
    if (dot == std::string_view::npos) return std::nullopt;
    if (last_slash != std::string_view::npos && dot < last_slash) return std::nullopt;
    return MemberName{std::string(name.substr(0, dot)), std::string(name.substr(dot + 1))};
  };
  if (last_slash != std::string_view::npos) {
    for (size_t j = last_slash;; --j) {
      if (name[j] == '/')
        if (auto r = try_start(j + 1)) return r;
      if (j == 0) break;
    }
  }
  return try_start(0);
}

bool is_meta_member(std::string_view name) {
  if (name.size() < 4 || name[0] != '_' || name[1] != '_') return false;
  const size_t slash = name.find('/');
  const size_t end = slash == std::string_view::npos ? name.size() : slash;
  return end >= 4 && name[end - 1] == '_' && name[end - 2] == '_';
}

Result<std::vector<int64_t>> read_tar_index(const std::string& idx_path) {
  const int fd = ::open(idx_path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return VLPAR_STATUS(StatusCode::kIoError, "tar index {}: cannot open: {}", idx_path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    return VLPAR_STATUS(StatusCode::kIoError, "tar index {}: cannot stat: {}", idx_path, std::strerror(errno));
  }
  const int64_t bytes = static_cast<int64_t>(st.st_size);
  if (bytes == 0 || bytes % 8 != 0) {
    ::close(fd);
    return VLPAR_STATUS(StatusCode::kInvalidArgument,
                        "tar index {}: {} bytes is not a non-zero multiple of 8 (u64 sample offsets)", idx_path,
                        bytes);
  }
  std::vector<uint8_t> raw(static_cast<size_t>(bytes));
  size_t done = 0;
  while (done < raw.size()) {
    const ssize_t n = ::pread(fd, raw.data() + done, raw.size() - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      return VLPAR_STATUS(StatusCode::kIoError, "tar index {}: read failed at byte {}: {}", idx_path, done,
                          n == 0 ? "unexpected end of file" : std::strerror(err));
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  std::vector<int64_t> out(raw.size() / 8);
  for (size_t i = 0; i < out.size(); ++i) {
    uint64_t v = 0;
    for (int b = 7; b >= 0; --b) v = (v << 8) | raw[i * 8 + static_cast<size_t>(b)];
    if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      return VLPAR_STATUS(StatusCode::kInvalidArgument, "tar index {}: entry {} (byte {}) = {} does not fit int64",
                          idx_path, i, i * 8, v);
    out[i] = static_cast<int64_t>(v);
  }
  return out;
}

Status write_tar_index(const std::string& idx_path, std::span<const int64_t> offsets) {
  std::vector<std::byte> raw(offsets.size() * 8);
  for (size_t i = 0; i < offsets.size(); ++i) {
    VLPAR_CHECK(offsets[i] >= 0, "write_tar_index {}: offset {} is negative ({})", idx_path, i, offsets[i]);
    const uint64_t v = static_cast<uint64_t>(offsets[i]);
    for (int b = 0; b < 8; ++b) raw[i * 8 + static_cast<size_t>(b)] = static_cast<std::byte>((v >> (8 * b)) & 0xff);
  }
  const std::span<const std::byte> piece(raw);
  return io::atomic_write_file(idx_path, std::span<const std::span<const std::byte>>(&piece, 1));
}

Result<std::vector<int64_t>> build_sample_offsets(const TarFile& tar) {
  std::vector<int64_t> offsets;
  TarPaxGlobals globals;
  std::optional<std::string> last_key;
  int64_t off = 0;
  for (;;) {
    VLPAR_ASSIGN_OR_RETURN(std::optional<TarMember> m, tar.member_at(off, globals));
    if (!m) break;
    off = m->next_offset;
    const std::optional<MemberName> n = sample_member_name(*m);
    if (!n) continue;
    if (!last_key || *last_key != n->key) {
      offsets.push_back(m->header_offset);
      last_key = n->key;
    }
  }
  offsets.push_back(off);  // Python's tar.offset after the last member: where the end-of-archive blocks start
  return offsets;
}

Status validate_sample_offsets(std::span<const int64_t> offsets, int64_t tar_size, int64_t expected_samples,
                               std::string_view what) {
  VLPAR_CHECK(!offsets.empty(), "{}: no entries (an index has n + 1 entries)", what);
  if (expected_samples >= 0)
    VLPAR_CHECK(static_cast<int64_t>(offsets.size()) == expected_samples + 1,
                "{}: {} entries = {} samples, but the dataset info says {} samples", what, offsets.size(),
                static_cast<int64_t>(offsets.size()) - 1, expected_samples);
  for (size_t i = 0; i < offsets.size(); ++i) {
    VLPAR_CHECK(offsets[i] % kTarBlock == 0, "{}: entry {} (byte {}) = offset {} is not a multiple of 512", what, i,
                i * 8, offsets[i]);
    if (i > 0)
      VLPAR_CHECK(offsets[i] > offsets[i - 1],
                  "{}: entry {} (byte {}) = offset {} does not increase (previous {}): the index disagrees with the "
                  "tar", what, i, i * 8, offsets[i], offsets[i - 1]);
  }
  VLPAR_CHECK(offsets.back() <= tar_size,
              "{}: last entry {} = end offset {} is past the end of the tar ({} bytes): truncated tar or an index "
              "of another file", what, offsets.size() - 1, offsets.back(), tar_size);
  return Status::Ok();
}

Result<ShardReader> ShardReader::open(const std::string& path, std::string shard_name,
                                      std::shared_ptr<const std::vector<int64_t>> offsets, ShardReadOptions options) {
  VLPAR_ASSIGN_OR_RETURN(TarFile tar, TarFile::open(path));
  if (!offsets) {
    VLPAR_ASSIGN_OR_RETURN(std::vector<int64_t> built, build_sample_offsets(tar));
    offsets = std::make_shared<const std::vector<int64_t>>(std::move(built));
  }
  VLPAR_RETURN_IF_ERROR(
      validate_sample_offsets(*offsets, tar.file_size(), -1, fmt::format("sample offsets of shard {}", path)));
  for (std::string& e : options.only_ext)
    if (options.lowercase_ext) lowercase_ascii(e);
  return ShardReader(std::move(tar), std::move(shard_name), std::move(offsets), std::move(options));
}

Result<SampleRead> ShardReader::read(int64_t index) const {
  VLPAR_CHECK(index >= 0 && index < num_samples(), "shard {}: sample index {} out of range [0, {})", tar_.path(),
              index, num_samples());
  const int64_t begin = (*offsets_)[static_cast<size_t>(index)], end = (*offsets_)[static_cast<size_t>(index) + 1];
  SampleRead out;
  out.sample.shard = name_;
  out.sample.index_in_shard = index;
  TarPaxGlobals globals = tar_.leading_globals();
  bool have_key = false;
  std::string duplicate;
  auto key_text = [&] { return have_key ? fmt::format("key '{}'", out.sample.key) : std::string("key unknown"); };
  for (int64_t off = begin; off < end;) {
    Result<std::optional<TarMember>> r = tar_.member_at(off, globals);
    if (!r.ok()) {
      if (r.status().code() != StatusCode::kInvalidArgument) return r.status();
      if (off == begin) {
        // Corrupt header (it has the ustar magic) or no header at all (the index points elsewhere)?
        std::array<uint8_t, kTarBlock> block{};
        if (tar_.read(off, block).ok() && std::memcmp(block.data() + 257, "ustar", 5) != 0)
          return VLPAR_STATUS(StatusCode::kInvalidArgument,
                              "shard {}: index disagrees with the tar: sample {} starts at offset {}, where there is "
                              "no tar header ({})", tar_.path(), index, off, r.status().message());
      }
      out.sample.fields.clear();
      out.skip_reason = fmt::format("shard {}: sample {} ({}) at offset {} is corrupt: {}", tar_.path(), index,
                                    key_text(), begin, r.status().message());
      return out;
    }
    if (!r.value())
      return VLPAR_STATUS(StatusCode::kInvalidArgument,
                          "shard {}: index disagrees with the tar: end of archive at offset {} inside sample {} "
                          "[{}, {})", tar_.path(), off, index, begin, end);
    const TarMember& m = *r.value();
    if (m.next_offset > end)
      return VLPAR_STATUS(StatusCode::kInvalidArgument,
                          "shard {}: index disagrees with the tar: member '{}' at offset {} ends at {}, past the end "
                          "of sample {} [{}, {})", tar_.path(), m.name, off, m.next_offset, index, begin, end);
    off = m.next_offset;
    std::optional<MemberName> n = sample_member_name(m);
    if (!n) continue;
    if (!have_key) {
      out.sample.key = std::move(n->key);
      have_key = true;
    } else if (n->key != out.sample.key) {
      return VLPAR_STATUS(StatusCode::kInvalidArgument,
                          "shard {}: index disagrees with the tar: sample {} [{}, {}) holds key '{}' and, at offset "
                          "{}, key '{}'", tar_.path(), index, begin, end, out.sample.key, m.header_offset, n->key);
    }
    std::string ext = std::move(n->ext);
    if (options_.lowercase_ext) lowercase_ascii(ext);
    if (!options_.only_ext.empty() &&
        std::find(options_.only_ext.begin(), options_.only_ext.end(), ext) == options_.only_ext.end())
      continue;
    if (out.sample.field(ext) != nullptr) {
      if (duplicate.empty())
        duplicate = fmt::format("shard {}: sample {} (key '{}') at offset {} has extension '{}' twice (member at "
                                "offset {})", tar_.path(), index, out.sample.key, begin, ext, m.header_offset);
      continue;
    }
    SampleField f;
    f.ext = std::move(ext);
    f.data.resize(static_cast<size_t>(m.size));
    VLPAR_RETURN_IF_ERROR(tar_.read(m.data_offset, f.data));
    out.sample.fields.push_back(std::move(f));
  }
  if (!have_key)
    return VLPAR_STATUS(StatusCode::kInvalidArgument,
                        "shard {}: index disagrees with the tar: sample {} [{}, {}) holds no sample member",
                        tar_.path(), index, begin, end);
  if (!duplicate.empty()) {
    out.sample.fields.clear();
    out.skip_reason = std::move(duplicate);
  }
  return out;
}

}  // namespace vlpar::data
