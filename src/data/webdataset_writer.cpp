// WebDataset shard writer and Energon metadata. See include/vlpar/data/webdataset_writer.hpp.
#include "vlpar/data/webdataset_writer.hpp"

#include "vlpar/data/webdataset.hpp"  // split_member_name, is_meta_member, write_tar_index
#include "vlpar/io/safetensors.hpp"   // io::atomic_write_file

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <unordered_set>
#include <utility>

namespace vlpar::data {

namespace {

constexpr uint64_t kBlock = 512;
constexpr uint64_t kOctal11Max = (uint64_t{1} << 33) - 1;  // 8^11 − 1: the largest size in 11 octal digits

uint64_t round_up_block(uint64_t n) { return (n + kBlock - 1) / kBlock * kBlock; }

std::string errno_text(int err) { return std::strerror(err); }

// ---- small POSIX helpers -----------------------------------------------------------------------------------

Status write_all(int fd, const uint8_t* data, size_t n, const std::string& what) {
  while (n > 0) {
    const ssize_t w = ::write(fd, data, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return VLPAR_STATUS(StatusCode::kIoError, "writing '{}': {}", what, errno_text(errno));
    }
    data += w;
    n -= static_cast<size_t>(w);
  }
  return Status::Ok();
}

std::string parent_dir(const std::string& path) {
  const std::filesystem::path p(path);
  const std::string parent = p.parent_path().string();
  return parent.empty() ? std::string(".") : parent;
}

// fsync of a directory makes a rename inside it durable.
Status fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return VLPAR_STATUS(StatusCode::kIoError, "opening directory '{}': {}", dir, errno_text(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) return VLPAR_STATUS(StatusCode::kIoError, "fsync of directory '{}': {}", dir, errno_text(err));
  return Status::Ok();
}

Status write_text_atomically(const std::string& path, std::string_view text) {
  const std::span<const std::byte> piece(reinterpret_cast<const std::byte*>(text.data()), text.size());
  return io::atomic_write_file(path, std::span<const std::span<const std::byte>>(&piece, 1));
}

Status make_dirs(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return VLPAR_STATUS(StatusCode::kIoError, "creating directory '{}': {}", dir, ec.message());
  if (!std::filesystem::is_directory(dir, ec))
    return VLPAR_STATUS(StatusCode::kIoError, "'{}' exists and is not a directory", dir);
  return Status::Ok();
}

// ---- header fields -----------------------------------------------------------------------------------------

// value as (width − 1) zero-padded octal digits followed by NUL; false when it does not fit.
bool put_octal(uint8_t* field, size_t width, uint64_t value) {
  for (size_t i = width - 1; i-- > 0;) {
    field[i] = static_cast<uint8_t>('0' + (value & 7));
    value >>= 3;
  }
  field[width - 1] = 0;
  return value == 0;
}

// GNU base-256: first byte 0x80, the value big-endian in the rest (sizes >= 8 GiB).
void put_base256(uint8_t* field, size_t width, uint64_t value) {
  std::memset(field, 0, width);
  field[0] = 0x80;
  for (size_t i = width - 1; i >= 1 && value != 0; --i) {
    field[i] = static_cast<uint8_t>(value & 0xff);
    value >>= 8;
  }
}

void put_string(uint8_t* field, std::string_view s) { std::memcpy(field, s.data(), s.size()); }

std::string lower_ascii(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return out;
}

Status validate_relative_path(std::string_view path, std::string_view what) {
  VLPAR_CHECK(!path.empty(), "{} is empty", what);
  VLPAR_CHECK(path.find('\0') == std::string_view::npos, "{} '{}' contains a NUL byte", what, path);
  VLPAR_CHECK(path.front() != '/', "{} '{}' is an absolute path (must be relative)", what, path);
  size_t start = 0;
  while (true) {
    const size_t slash = path.find('/', start);
    const std::string_view comp = path.substr(start, slash == std::string_view::npos ? slash : slash - start);
    VLPAR_CHECK(!comp.empty(), "{} '{}' has an empty path component", what, path);
    VLPAR_CHECK(comp != "." && comp != "..", "{} '{}' has a '{}' path component", what, path, comp);
    if (slash == std::string_view::npos) break;
    start = slash + 1;
  }
  return Status::Ok();
}

// Bytes a member takes in the tar: [pax header + record] + ustar header + data, each padded to 512.
uint64_t member_tar_bytes(size_t name_size, uint64_t data_size) {
  uint64_t bytes = kBlock + round_up_block(data_size);
  if (name_size > 100) bytes += kBlock + round_up_block(name_size + 32);  // the record is <= name + 32 bytes
  return bytes;
}

}  // namespace

// ---- names -------------------------------------------------------------------------------------------------

Status validate_sample(const WdsSample& sample) {
  const std::string& key = sample.key;
  VLPAR_RETURN_IF_ERROR(validate_relative_path(key, "sample key"));
  const size_t slash = key.rfind('/');
  const std::string_view base = slash == std::string::npos ? std::string_view(key)
                                                           : std::string_view(key).substr(slash + 1);
  VLPAR_CHECK(base.find('.') == std::string_view::npos,
              "sample key '{}': its basename '{}' contains '.', which readers take as the start of the extension",
              key, base);
  VLPAR_CHECK(!sample.members.empty(), "sample '{}' has no members", key);
  std::set<std::string> seen;
  for (const WdsMember& m : sample.members) {
    VLPAR_CHECK(!m.ext.empty(), "sample '{}': a member has an empty extension", key);
    VLPAR_CHECK(m.ext.find('/') == std::string::npos, "sample '{}': extension '{}' contains '/'", key, m.ext);
    VLPAR_CHECK(m.ext.find('\0') == std::string::npos, "sample '{}': extension '{}' contains a NUL byte", key,
                m.ext);
    VLPAR_CHECK(!(m.ext.size() >= 4 && m.ext.starts_with("__") && m.ext.ends_with("__")),
                "sample '{}': extension '{}' would collide with the readers' own __fields__", key, m.ext);
    VLPAR_CHECK(seen.insert(lower_ascii(m.ext)).second,
                "sample '{}': extension '{}' occurs twice (compared case-insensitively, as webdataset lower-cases "
                "extensions)", key, m.ext);
    const std::string name = key + "." + m.ext;
    VLPAR_CHECK(!is_meta_member(name), "sample '{}': member name '{}' matches __…__, which readers skip as metadata",
                key, name);
    // The readers' own split must give back exactly this key and extension.
    const std::optional<MemberName> split = split_member_name(name);
    VLPAR_CHECK(split && split->key == key && split->ext == m.ext,
                "sample '{}': member name '{}' would be read back as key '{}', extension '{}'", key, name,
                split ? split->key : std::string("-"), split ? split->ext : std::string("-"));
  }
  return Status::Ok();
}

Result<std::vector<uint8_t>> make_ustar_header(std::string_view name, uint64_t size, char typeflag,
                                               const TarWriterOptions& options) {
  VLPAR_CHECK(!name.empty() && name.size() <= 100, "tar member name '{}' has {} bytes (ustar needs 1..100)", name,
              name.size());
  VLPAR_CHECK(options.uname.size() <= 31 && options.gname.size() <= 31,
              "TarWriterOptions: uname '{}' / gname '{}' longer than 31 bytes", options.uname, options.gname);
  VLPAR_CHECK(options.mtime >= 0 && static_cast<uint64_t>(options.mtime) <= kOctal11Max,
              "TarWriterOptions: mtime {} outside 0..8^11−1", options.mtime);
  VLPAR_CHECK(options.mode <= 07777, "TarWriterOptions: mode {:o} has bits beyond 07777", options.mode);
  std::vector<uint8_t> h(kBlock, 0);
  put_string(&h[0], name);
  put_octal(&h[100], 8, options.mode);
  put_octal(&h[108], 8, 0);  // uid
  put_octal(&h[116], 8, 0);  // gid
  if (!put_octal(&h[124], 12, size)) put_base256(&h[124], 12, size);
  put_octal(&h[136], 12, static_cast<uint64_t>(options.mtime));
  h[156] = static_cast<uint8_t>(typeflag);
  put_string(&h[257], std::string_view("ustar\0", 6));
  put_string(&h[263], "00");
  put_string(&h[265], options.uname);
  put_string(&h[297], options.gname);
  put_octal(&h[329], 8, 0);  // devmajor
  put_octal(&h[337], 8, 0);  // devminor
  // Checksum: unsigned byte sum with the checksum field read as 8 spaces; 6 octal digits, NUL, space.
  std::memset(&h[148], ' ', 8);
  uint32_t sum = 0;
  for (uint8_t b : h) sum += b;
  put_octal(&h[148], 7, sum);
  h[155] = ' ';
  return h;
}

std::string pax_path_record(std::string_view name) {
  // "<len> path=<name>\n": len counts its own digits, so grow it until it is consistent.
  const size_t body = 1 + 5 + name.size() + 1;  // ' ' + "path=" + name + '\n'
  size_t len = body + 1;
  while (std::to_string(len).size() + body != len) len = std::to_string(len).size() + body;
  return fmt::format("{} path={}\n", len, name);
}

// ---- TarWriter ---------------------------------------------------------------------------------------------

struct TarWriter::Impl {
  std::string path;
  std::string tmp;
  TarWriterOptions options;
  int fd = -1;
  uint64_t offset = 0;
  bool finished = false;
  std::vector<uint8_t> buffer;  // pending bytes, flushed at 1 MiB

  ~Impl() {
    if (fd >= 0) {
      ::close(fd);
      ::unlink(tmp.c_str());
    }
  }
  Status put(const uint8_t* data, size_t n) {
    if (buffer.size() + n > (size_t{1} << 20)) {
      VLPAR_RETURN_IF_ERROR(flush());
      if (n >= (size_t{1} << 20)) {
        VLPAR_RETURN_IF_ERROR(write_all(fd, data, n, tmp));
        offset += n;
        return Status::Ok();
      }
    }
    buffer.insert(buffer.end(), data, data + n);
    offset += n;
    return Status::Ok();
  }
  Status put_zeros(size_t n) {
    static constexpr uint8_t kZeros[kBlock] = {};
    while (n > 0) {
      const size_t k = std::min<size_t>(n, kBlock);
      VLPAR_RETURN_IF_ERROR(put(kZeros, k));
      n -= k;
    }
    return Status::Ok();
  }
  Status flush() {
    VLPAR_RETURN_IF_ERROR(write_all(fd, buffer.data(), buffer.size(), tmp));
    buffer.clear();
    return Status::Ok();
  }
  Status put_member(std::string_view name, char typeflag, std::span<const uint8_t> data) {
    VLPAR_ASSIGN_OR_RETURN(auto header, make_ustar_header(name, data.size(), typeflag, options));
    VLPAR_RETURN_IF_ERROR(put(header.data(), header.size()));
    VLPAR_RETURN_IF_ERROR(put(data.data(), data.size()));
    return put_zeros(round_up_block(data.size()) - data.size());
  }
};

TarWriter::TarWriter(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TarWriter::TarWriter(TarWriter&&) noexcept = default;
TarWriter& TarWriter::operator=(TarWriter&&) noexcept = default;
TarWriter::~TarWriter() = default;

Result<TarWriter> TarWriter::open(const std::string& path, const TarWriterOptions& options) {
  VLPAR_CHECK(!path.empty(), "TarWriter::open: the path is empty");
  VLPAR_RETURN_IF_ERROR(make_ustar_header("x", 0, '0', options).status());  // option checks
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  impl->tmp = fmt::format("{}.tmp.{}", path, ::getpid());
  impl->options = options;
  impl->fd = ::open(impl->tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (impl->fd < 0)
    return VLPAR_STATUS(StatusCode::kIoError, "TarWriter: creating '{}': {}", impl->tmp, errno_text(errno));
  impl->buffer.reserve(size_t{1} << 20);
  return TarWriter(std::move(impl));
}

Status TarWriter::add(std::string_view name, std::span<const uint8_t> data) {
  Impl& m = *impl_;
  VLPAR_CHECK(!m.finished, "TarWriter('{}'): add('{}') after finish()", m.path, name);
  VLPAR_CHECK(!name.empty(), "TarWriter('{}'): a member name is empty", m.path);
  VLPAR_CHECK(name.find('\0') == std::string_view::npos, "TarWriter('{}'): member name '{}' contains a NUL byte",
              m.path, name);
  if (name.size() > 100) {
    const std::string record = pax_path_record(name);
    VLPAR_RETURN_IF_ERROR(m.put_member("././@PaxHeader", 'x',
                                       std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(record.data()),
                                                                record.size())));
    // The ustar header keeps the name's first 100 bytes; readers take the pax path instead.
    return m.put_member(name.substr(0, 100), '0', data);
  }
  return m.put_member(name, '0', data);
}

Status TarWriter::finish() {
  Impl& m = *impl_;
  if (m.finished) return Status::Ok();
  VLPAR_RETURN_IF_ERROR(m.put_zeros(2 * kBlock));
  VLPAR_RETURN_IF_ERROR(m.flush());
  if (m.options.fsync && ::fsync(m.fd) != 0)
    return VLPAR_STATUS(StatusCode::kIoError, "TarWriter: fsync of '{}': {}", m.tmp, errno_text(errno));
  const int rc = ::close(m.fd);
  m.fd = -1;
  if (rc != 0) {
    ::unlink(m.tmp.c_str());
    return VLPAR_STATUS(StatusCode::kIoError, "TarWriter: closing '{}': {}", m.tmp, errno_text(errno));
  }
  if (::rename(m.tmp.c_str(), m.path.c_str()) != 0) {
    const int err = errno;
    ::unlink(m.tmp.c_str());
    return VLPAR_STATUS(StatusCode::kIoError, "TarWriter: renaming '{}' to '{}': {}", m.tmp, m.path,
                        errno_text(err));
  }
  m.finished = true;
  if (m.options.fsync) return fsync_dir(parent_dir(m.path));
  return Status::Ok();
}

uint64_t TarWriter::offset() const { return impl_->offset; }
const std::string& TarWriter::path() const { return impl_->path; }

// ---- shard names -------------------------------------------------------------------------------------------

Result<std::string> format_shard_name(std::string_view pattern, int64_t index) {
  VLPAR_CHECK(index >= 0, "format_shard_name('{}'): index {} is negative", pattern, index);
  std::string out;
  int conversions = 0;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != '%') {
      out += pattern[i];
      continue;
    }
    VLPAR_CHECK(i + 1 < pattern.size(), "shard pattern '{}' ends with a lone '%'", pattern);
    if (pattern[i + 1] == '%') {
      out += '%';
      ++i;
      continue;
    }
    size_t j = i + 1;
    const bool zero = pattern[j] == '0';
    if (zero) ++j;
    int width = 0;
    while (j < pattern.size() && pattern[j] >= '0' && pattern[j] <= '9') {
      width = width * 10 + (pattern[j] - '0');
      VLPAR_CHECK(width <= 64, "shard pattern '{}': field width above 64", pattern);
      ++j;
    }
    VLPAR_CHECK(j < pattern.size() && pattern[j] == 'd',
                "shard pattern '{}': only %d, %Nd and %0Nd conversions are supported (at offset {})", pattern, i);
    ++conversions;
    out += zero ? fmt::format("{:0{}d}", index, width) : fmt::format("{:{}d}", index, width);
    i = j;
  }
  VLPAR_CHECK(conversions == 1, "shard pattern '{}' has {} integer conversions (needs exactly one, e.g. %06d)",
              pattern, conversions);
  return out;
}

// ---- ShardWriter -------------------------------------------------------------------------------------------

struct ShardWriter::Impl {
  std::string root;
  ShardWriterOptions options;
  std::unique_ptr<TarWriter> tar;          // the open shard, or null
  std::string name;                        // its name relative to root
  std::vector<int64_t> offsets;            // its samples' first-header offsets
  std::unordered_set<std::string> keys;    // its keys
  std::vector<ShardInfo> shards;
  int64_t total = 0;

  Status close_shard() {
    if (!tar) return Status::Ok();
    offsets.push_back(static_cast<int64_t>(tar->offset()));  // end of the last member, before the end blocks
    const uint64_t bytes = tar->offset() + 2 * kBlock;
    VLPAR_RETURN_IF_ERROR(tar->finish());
    if (options.write_index) VLPAR_RETURN_IF_ERROR(write_tar_index(tar->path() + ".idx", offsets));
    shards.push_back(ShardInfo{name, static_cast<int64_t>(offsets.size()) - 1, bytes});
    tar.reset();
    offsets.clear();
    keys.clear();
    return Status::Ok();
  }

  Status open_shard() {
    VLPAR_ASSIGN_OR_RETURN(name, format_shard_name(options.pattern,
                                                   options.first_index + static_cast<int64_t>(shards.size())));
    VLPAR_RETURN_IF_ERROR(validate_relative_path(name, "shard name"));
    const std::string path = root + "/" + name;
    VLPAR_RETURN_IF_ERROR(make_dirs(parent_dir(path)));
    VLPAR_ASSIGN_OR_RETURN(TarWriter w, TarWriter::open(path, options.tar));
    tar = std::make_unique<TarWriter>(std::move(w));
    return Status::Ok();
  }
};

ShardWriter::ShardWriter(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ShardWriter::ShardWriter(ShardWriter&&) noexcept = default;
ShardWriter& ShardWriter::operator=(ShardWriter&&) noexcept = default;
ShardWriter::~ShardWriter() = default;

Result<ShardWriter> ShardWriter::open(const std::string& root, const ShardWriterOptions& options) {
  VLPAR_CHECK(!root.empty(), "ShardWriter: the root directory is empty");
  VLPAR_CHECK(options.max_count >= 1, "ShardWriterOptions: max_count {} < 1", options.max_count);
  VLPAR_CHECK(options.max_size >= 1024, "ShardWriterOptions: max_size {} < 1024 bytes", options.max_size);
  VLPAR_CHECK(options.first_index >= 0, "ShardWriterOptions: first_index {} < 0", options.first_index);
  VLPAR_ASSIGN_OR_RETURN(std::string first, format_shard_name(options.pattern, options.first_index));
  VLPAR_RETURN_IF_ERROR(validate_relative_path(first, "shard name"));
  VLPAR_RETURN_IF_ERROR(make_ustar_header("x", 0, '0', options.tar).status());
  VLPAR_RETURN_IF_ERROR(make_dirs(root));
  auto impl = std::make_unique<Impl>();
  impl->root = root;
  impl->options = options;
  return ShardWriter(std::move(impl));
}

Status ShardWriter::write(const WdsSample& sample) {
  Impl& m = *impl_;
  VLPAR_RETURN_IF_ERROR(validate_sample(sample));
  std::vector<const WdsMember*> order;
  order.reserve(sample.members.size());
  uint64_t sample_bytes = 0;
  for (const WdsMember& mem : sample.members) {
    order.push_back(&mem);
    sample_bytes += member_tar_bytes(sample.key.size() + 1 + mem.ext.size(), mem.data.size());
  }
  std::stable_sort(order.begin(), order.end(), [](const WdsMember* a, const WdsMember* b) { return a->ext < b->ext; });

  if (m.tar) {
    const int64_t count = static_cast<int64_t>(m.offsets.size());
    const bool full = count >= m.options.max_count ||
                      (count > 0 && m.tar->offset() + sample_bytes + 2 * kBlock > m.options.max_size);
    if (full) VLPAR_RETURN_IF_ERROR(m.close_shard());
  }
  if (!m.tar) VLPAR_RETURN_IF_ERROR(m.open_shard());
  VLPAR_CHECK(!m.keys.contains(sample.key),
              "ShardWriter: key '{}' occurs twice in shard '{}' (readers would merge the two samples)", sample.key,
              m.name);
  m.offsets.push_back(static_cast<int64_t>(m.tar->offset()));
  for (const WdsMember* mem : order) {
    VLPAR_RETURN_IF_ERROR(m.tar->add(sample.key + "." + mem->ext, mem->data));
  }
  m.keys.insert(sample.key);
  ++m.total;
  return Status::Ok();
}

Status ShardWriter::finish() { return impl_->close_shard(); }
const std::vector<ShardInfo>& ShardWriter::shards() const { return impl_->shards; }
int64_t ShardWriter::samples_written() const { return impl_->total; }

// ---- Energon metadata --------------------------------------------------------------------------------------

Status write_energon_metadata(const std::string& root, const EnergonMetadata& meta) {
  VLPAR_CHECK(!meta.shards.empty(), "write_energon_metadata('{}'): no shards", root);
  std::set<std::string> names;
  for (const ShardInfo& s : meta.shards) {
    VLPAR_RETURN_IF_ERROR(validate_relative_path(s.name, "shard name"));
    VLPAR_CHECK(s.samples >= 0, "write_energon_metadata: shard '{}' has {} samples", s.name, s.samples);
    VLPAR_CHECK(names.insert(s.name).second, "write_energon_metadata: shard '{}' is listed twice", s.name);
  }
  VLPAR_CHECK(!meta.parts.empty(), "write_energon_metadata('{}'): no split parts", root);
  std::set<std::string> part_names;
  for (const EnergonSplitPart& p : meta.parts) {
    VLPAR_CHECK(!p.name.empty(), "write_energon_metadata: a split part has an empty name");
    VLPAR_CHECK(part_names.insert(p.name).second, "write_energon_metadata: split part '{}' is listed twice", p.name);
    VLPAR_CHECK(!p.shards.empty(), "write_energon_metadata: split part '{}' has no shards (Energon rejects it)",
                p.name);
    for (const std::string& s : p.shards) {
      const bool brace = s.find('{') != std::string::npos;
      VLPAR_CHECK(brace || names.contains(s), "write_energon_metadata: split part '{}' names shard '{}', which is "
                  "not among the dataset's shards", p.name, s);
    }
  }

  const std::string meta_dir = root + "/.nv-meta";
  VLPAR_RETURN_IF_ERROR(make_dirs(meta_dir));
  VLPAR_RETURN_IF_ERROR(write_text_atomically(meta_dir + "/dataset.yaml",
                                              "__module__: megatron.energon\n__class__: CrudeWebdataset\n"));

  YAML::Emitter y;
  y << YAML::BeginMap << YAML::Key << "split_parts" << YAML::Value << YAML::BeginMap;
  for (const EnergonSplitPart& p : meta.parts) {
    y << YAML::Key << p.name << YAML::Value << YAML::BeginSeq;
    for (const std::string& s : p.shards) y << s;
    y << YAML::EndSeq;
  }
  y << YAML::EndMap << YAML::Key << "exclude" << YAML::Value << YAML::Flow << YAML::BeginSeq;
  for (const std::string& e : meta.exclude) y << e;
  y << YAML::EndSeq << YAML::EndMap;
  VLPAR_CHECK(y.good(), "write_energon_metadata: YAML emitter: {}", y.GetLastError());
  VLPAR_RETURN_IF_ERROR(write_text_atomically(meta_dir + "/split.yaml", std::string(y.c_str()) + "\n"));

  nlohmann::ordered_json info;
  info["energon_version"] = meta.energon_version;
  info["shard_counts"] = nlohmann::ordered_json::object();
  for (const ShardInfo& s : meta.shards) info["shard_counts"][s.name] = s.samples;
  std::string text;
  try {
    text = info.dump(2) + "\n";
  } catch (const nlohmann::json::exception& e) {  // a shard name or version that is not valid UTF-8
    return VLPAR_STATUS(StatusCode::kInvalidArgument, "write_energon_metadata: .info.json: {}", e.what());
  }
  return write_text_atomically(meta_dir + "/.info.json", text);
}

}  // namespace vlpar::data
