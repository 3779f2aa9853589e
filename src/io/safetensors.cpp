// safetensors reader (mmap + full validation at open) and writer (reference byte layout, atomic replace).
// See include/vlpar/io/safetensors.hpp; validation rules follow spec/formats-and-conventions.md §1.
// Test: tests/unit/test_safetensors.cpp.
#include "vlpar/io/safetensors.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <list>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <type_traits>

#include "dims_string.hpp"

namespace vlpar::io {

using detail::dims_string;

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian; big-endian hosts would need byte swaps");

namespace {

using json = nlohmann::json;

constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // the reference reader's MAX_HEADER_SIZE

// Every dtype the reference knows, in its enum order (= the writer's "alignment" order; tensors are packed by
// descending position). bits: element size; vlpar: the DType it maps to, if any.
struct StDtype {
  std::string_view name;
  int bits;
  std::optional<DType> vlpar;
};
constexpr StDtype kStDtypes[] = {
    {"BOOL", 8, std::nullopt},         {"F4", 4, std::nullopt},           {"F6_E2M3", 6, std::nullopt},
    {"F6_E3M2", 6, std::nullopt},      {"U8", 8, std::nullopt},           {"I8", 8, std::nullopt},
    {"F8_E5M2", 8, std::nullopt},      {"F8_E4M3", 8, std::nullopt},      {"F8_E8M0", 8, std::nullopt},
    {"F8_E4M3FNUZ", 8, std::nullopt},  {"F8_E5M2FNUZ", 8, std::nullopt},  {"I16", 16, std::nullopt},
    {"U16", 16, std::nullopt},         {"F16", 16, DType::kF16},          {"BF16", 16, DType::kBF16},
    {"I32", 32, DType::kI32},          {"U32", 32, std::nullopt},         {"F32", 32, DType::kF32},
    {"C64", 64, std::nullopt},         {"F64", 64, DType::kF64},          {"I64", 64, DType::kI64},
    {"U64", 64, std::nullopt},
};

const StDtype* find_st_dtype(std::string_view name) {
  for (const StDtype& d : kStDtypes)
    if (d.name == name) return &d;
  return nullptr;
}

// Position of a vlpar dtype in the reference enum: the writer's sort key.
int st_order(DType t) {
  const std::string_view name = safetensors_dtype_name(t);
  for (size_t i = 0; i < std::size(kStDtypes); ++i)
    if (kStDtypes[i].name == name) return int(i);
  return -1;
}

// Strict UTF-8 (as Rust's str::from_utf8): no overlongs, no surrogates, nothing above U+10FFFF.
// Returns the offset of the first bad byte, or nullopt.
std::optional<size_t> invalid_utf8_at(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    const unsigned c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    int len;
    unsigned lo = 0x80, hi = 0xbf;  // allowed range of the second byte
    if (c >= 0xc2 && c <= 0xdf) {
      len = 2;
    } else if (c >= 0xe0 && c <= 0xef) {
      len = 3;
      if (c == 0xe0) lo = 0xa0;  // overlong
      if (c == 0xed) hi = 0x9f;  // surrogates
    } else if (c >= 0xf0 && c <= 0xf4) {
      len = 4;
      if (c == 0xf0) lo = 0x90;  // overlong
      if (c == 0xf4) hi = 0x8f;  // > U+10FFFF
    } else {
      return i;
    }
    if (i + size_t(len) > n) return i;
    if (p[i + 1] < lo || p[i + 1] > hi) return i;
    for (int k = 2; k < len; ++k)
      if ((p[i + size_t(k)] & 0xc0) != 0x80) return i;
    i += size_t(len);
  }
  return std::nullopt;
}

std::string json_type(const json& v) { return v.type_name(); }


// ---- float conversions ----------------------------------------------------------------------------------------

// double -> float rounded to odd (truncate toward zero, then set the last bit if anything was lost). Rounding this
// to nearest even at <= 22 significant bits equals rounding the double directly (float keeps >= 2 extra bits), so
// F64 -> BF16/F16 is a single correct rounding instead of two.
float f64_to_f32_round_odd(double d) {
  float f = static_cast<float>(d);
  if (std::isnan(d) || static_cast<double>(f) == d) return f;
  if (std::fabs(static_cast<double>(f)) > std::fabs(d)) f = std::nextafter(f, 0.0f);  // inf -> FLT_MAX too
  return bits_float(float_bits(f) | 1u);
}

template <class T>
T load_le(const std::byte* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

template <class D, class S>
D cast_float(S s) {
  if constexpr (std::is_same_v<S, double>) {
    if constexpr (std::is_same_v<D, double>) return s;
    else if constexpr (std::is_same_v<D, float>) return static_cast<float>(s);
    else return from_float<D>(f64_to_f32_round_odd(s));
  } else {
    const float f = to_float(s);  // exact for float/bf16/f16
    if constexpr (std::is_same_v<D, double>) return static_cast<double>(f);
    else return from_float<D>(f);
  }
}

template <class F>
void visit_float(DType t, F&& f) {
  switch (t) {
    case DType::kF32: f(float{}); break;
    case DType::kBF16: f(bf16{}); break;
    case DType::kF16: f(f16{}); break;
    case DType::kF64: f(double{}); break;
    default: break;  // callers pass float dtypes only
  }
}

void convert_float(void* dst, DType dst_dtype, const std::byte* src, DType src_dtype, int64_t n) {
  visit_float(dst_dtype, [&](auto d_tag) {
    using D = decltype(d_tag);
    visit_float(src_dtype, [&](auto s_tag) {
      using S = decltype(s_tag);
      D* d = static_cast<D*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = cast_float<D>(load_le<S>(src + size_t(i) * sizeof(S)));
    });
  });
}

// ---- writing helpers --------------------------------------------------------------------------------------------

// JSON string literal escaped the way serde_json (the reference writer) does: \" \\ \b \f \n \r \t, other control
// characters as \u00xx, everything else (UTF-8 included) verbatim.
void append_json_string(std::string& out, std::string_view s) {
  out += '"';
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) out += fmt::format("\\u{:04x}", c);
        else out += ch;
    }
  }
  out += '"';
}

// Copies a strided view into contiguous bytes (row-major order).
void gather_strided(const TensorView& v, std::byte* out) {
  const size_t es = dtype_size(v.dtype);
  const int64_t n = v.numel();
  int64_t idx[kMaxDims] = {};
  const auto* base = static_cast<const std::byte*>(v.data);
  for (int64_t i = 0; i < n; ++i) {
    int64_t off = 0;
    for (int d = 0; d < v.ndim(); ++d) off += idx[d] * v.strides[d];
    std::memcpy(out + size_t(i) * es, base + off * int64_t(es), es);
    for (int d = v.ndim() - 1; d >= 0; --d) {
      if (++idx[d] < v.shape[d]) break;
      idx[d] = 0;
    }
  }
}

Status write_all(int fd, const std::byte* p, size_t n, const std::string& tmp) {
  while (n > 0) {
    const size_t chunk = std::min<size_t>(n, size_t(1) << 30);
    const ssize_t w = ::write(fd, p, chunk);
    if (w < 0) {
      if (errno == EINTR) continue;
      return VLPAR_STATUS(StatusCode::kIoError, "writing '{}' failed: {}", tmp, std::strerror(errno));
    }
    p += w;
    n -= size_t(w);
  }
  return Status::Ok();
}

}  // namespace

std::string_view safetensors_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "F32";
    case DType::kBF16: return "BF16";
    case DType::kF16: return "F16";
    case DType::kI32: return "I32";
    case DType::kI64: return "I64";
    case DType::kF64: return "F64";
  }
  return "?";
}

// ---- SafetensorsFile ----------------------------------------------------------------------------------------------

SafetensorsFile::SafetensorsFile(SafetensorsFile&& o) noexcept
    : path_(std::move(o.path_)),
      map_(std::exchange(o.map_, nullptr)),
      map_size_(std::exchange(o.map_size_, 0)),
      data_start_(o.data_start_),
      tensors_(std::move(o.tensors_)),
      index_(std::move(o.index_)),
      metadata_(std::move(o.metadata_)) {}

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& o) noexcept {
  if (this != &o) {
    release();
    path_ = std::move(o.path_);
    map_ = std::exchange(o.map_, nullptr);
    map_size_ = std::exchange(o.map_size_, 0);
    data_start_ = o.data_start_;
    tensors_ = std::move(o.tensors_);
    index_ = std::move(o.index_);
    metadata_ = std::move(o.metadata_);
  }
  return *this;
}

SafetensorsFile::~SafetensorsFile() { release(); }

void SafetensorsFile::release() {
  if (map_ != nullptr) ::munmap(const_cast<std::byte*>(map_), map_size_);
  map_ = nullptr;
  map_size_ = 0;
}

Result<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
#define VLPAR_ST_BAD(...) \
  VLPAR_STATUS(StatusCode::kInvalidArgument, "safetensors file '{}': {}", path, fmt::format(__VA_ARGS__))

  SafetensorsFile file;
  file.path_ = path;
  {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return VLPAR_STATUS(StatusCode::kIoError, "cannot open safetensors file '{}': {}", path, std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      const int err = errno;
      ::close(fd);
      return VLPAR_STATUS(StatusCode::kIoError, "cannot stat safetensors file '{}': {}", path, std::strerror(err));
    }
    if (!S_ISREG(st.st_mode)) {
      ::close(fd);
      return VLPAR_ST_BAD("not a regular file");
    }
    const auto size = static_cast<uint64_t>(st.st_size);
    if (size < 8) {
      ::close(fd);
      return VLPAR_ST_BAD("file is {} bytes, shorter than the 8-byte header length", size);
    }
    void* p = ::mmap(nullptr, size_t(size), PROT_READ, MAP_PRIVATE, fd, 0);
    const int err = errno;
    ::close(fd);  // the mapping keeps the file referenced
    if (p == MAP_FAILED) return VLPAR_STATUS(StatusCode::kIoError, "cannot mmap safetensors file '{}': {}", path, std::strerror(err));
    file.map_ = static_cast<const std::byte*>(p);
    file.map_size_ = size_t(size);
  }
  const uint64_t file_size = file.map_size_;

  // ---- header length and text
  const uint64_t n = load_le<uint64_t>(file.map_);
  if (n > kMaxHeaderBytes) return VLPAR_ST_BAD("header length {} exceeds the limit of {} bytes", n, kMaxHeaderBytes);
  if (8 + n > file_size) return VLPAR_ST_BAD("header length {} runs past the end of the file ({} bytes)", n, file_size);
  const std::string_view text(reinterpret_cast<const char*>(file.map_) + 8, size_t(n));
  if (auto bad = invalid_utf8_at(text)) return VLPAR_ST_BAD("header is not valid UTF-8 (bad byte at header offset {})", *bad);
  if (text.empty() || text.front() != '{') return VLPAR_ST_BAD("header does not start with '{{'");
  // nlohmann's lexer takes a NUL byte for the end of input and would accept "{...}\0garbage"; JSON allows no raw NUL.
  if (const size_t nul = text.find('\0'); nul != std::string_view::npos)
    return VLPAR_ST_BAD("header is not valid JSON: NUL byte at header offset {}", nul);
  file.data_start_ = 8 + n;

  // ---- JSON, with duplicate keys detected at every object level (nlohmann would keep the last one silently)
  std::vector<std::set<std::string>> keysets;  // one per open object
  std::vector<std::string> last_key;           // last key seen at each open object level
  std::string duplicate;
  json header;
  try {
    json::parser_callback_t cb = [&](int /*depth*/, json::parse_event_t ev, json& parsed) {
      switch (ev) {
        case json::parse_event_t::object_start:
          keysets.emplace_back();
          last_key.emplace_back();
          break;
        case json::parse_event_t::object_end:
          keysets.pop_back();
          last_key.pop_back();
          break;
        case json::parse_event_t::key: {
          std::string k = parsed.get<std::string>();
          if (!keysets.back().insert(k).second && duplicate.empty())
            duplicate = keysets.size() == 1 ? fmt::format("duplicate key '{}' in the header", k)
                                            : fmt::format("duplicate key '{}' inside '{}'", k, last_key.front());
          last_key.back() = std::move(k);
          break;
        }
        default: break;
      }
      return true;
    };
    header = json::parse(text.begin(), text.end(), cb, /*allow_exceptions=*/true, /*ignore_comments=*/false);
  } catch (const json::exception& e) {
    return VLPAR_ST_BAD("header is not valid JSON: {}", e.what());
  }
  if (!duplicate.empty()) return VLPAR_ST_BAD("{}", duplicate);
  if (!header.is_object()) return VLPAR_ST_BAD("header JSON is a {}, not an object", json_type(header));

  // ---- entries
  for (const auto& [key, v] : header.items()) {
    if (key == "__metadata__") {
      if (v.is_null()) continue;
      if (!v.is_object()) return VLPAR_ST_BAD("__metadata__ is a {}, not an object of strings", json_type(v));
      for (const auto& [mk, mv] : v.items()) {
        if (!mv.is_string()) return VLPAR_ST_BAD("__metadata__ value of '{}' is a {}, not a string", mk, json_type(mv));
        file.metadata_[mk] = mv.get<std::string>();
      }
      continue;
    }
    if (!v.is_object()) return VLPAR_ST_BAD("entry '{}' is a {}, not an object", key, json_type(v));
    TensorInfo info;
    info.name = key;
    // dtype
    const auto dt = v.find("dtype");
    if (dt == v.end()) return VLPAR_ST_BAD("entry '{}' has no dtype", key);
    if (!dt->is_string()) return VLPAR_ST_BAD("entry '{}': dtype is a {}, not a string", key, json_type(*dt));
    info.dtype_name = dt->get<std::string>();
    const StDtype* st = find_st_dtype(info.dtype_name);
    if (st == nullptr) return VLPAR_ST_BAD("entry '{}': unknown dtype '{}'", key, info.dtype_name);
    // shape
    const auto sh = v.find("shape");
    if (sh == v.end()) return VLPAR_ST_BAD("entry '{}' has no shape", key);
    if (!sh->is_array()) return VLPAR_ST_BAD("entry '{}': shape is a {}, not an array", key, json_type(*sh));
    uint64_t numel = 1;
    bool overflow = false;
    for (const json& d : *sh) {
      if (!d.is_number_integer()) return VLPAR_ST_BAD("entry '{}': shape holds a {}, not an integer", key, json_type(d));
      if (!d.is_number_unsigned()) return VLPAR_ST_BAD("entry '{}': negative dimension {} in shape", key, d.get<int64_t>());
      const uint64_t u = d.get<uint64_t>();
      if (u > uint64_t(std::numeric_limits<int64_t>::max()))
        return VLPAR_ST_BAD("entry '{}': dimension {} overflows int64", key, u);
      info.dims.push_back(int64_t(u));
      overflow = overflow || __builtin_mul_overflow(numel, u, &numel);
    }
    uint64_t nbits = 0;
    if (overflow || numel > uint64_t(std::numeric_limits<int64_t>::max()) ||
        __builtin_mul_overflow(numel, uint64_t(st->bits), &nbits))
      return VLPAR_ST_BAD("entry '{}': shape {} of {} overflows the 64-bit byte count", key, dims_string(info.dims),
                          info.dtype_name);
    if (nbits % 8 != 0)
      return VLPAR_ST_BAD("entry '{}': shape {} of {} is not a whole number of bytes ({} bits)", key,
                          dims_string(info.dims), info.dtype_name, nbits);
    info.numel = int64_t(numel);
    // data_offsets
    const auto off = v.find("data_offsets");
    if (off == v.end()) return VLPAR_ST_BAD("entry '{}' has no data_offsets", key);
    if (!off->is_array() || off->size() != 2)
      return VLPAR_ST_BAD("entry '{}': data_offsets is not an array of two integers", key);
    for (const json& o : *off)
      if (!o.is_number_unsigned())
        return VLPAR_ST_BAD("entry '{}': data_offsets holds a {} that is not a non-negative integer ({})", key,
                            json_type(o), o.dump());
    info.begin = (*off)[0].get<uint64_t>();
    info.end = (*off)[1].get<uint64_t>();
    if (info.end < info.begin) return VLPAR_ST_BAD("entry '{}': data_offsets end {} < begin {}", key, info.end, info.begin);
    if (info.end - info.begin != nbits / 8)
      return VLPAR_ST_BAD("entry '{}': data_offsets [{}, {}] span {} bytes but {} {} needs {} bytes", key, info.begin,
                          info.end, info.end - info.begin, info.dtype_name, dims_string(info.dims), nbits / 8);
    // vlpar view of it
    info.supported = st->vlpar.has_value() && info.dims.size() <= size_t(kMaxDims);
    if (st->vlpar) info.dtype = *st->vlpar;
    if (info.dims.size() <= size_t(kMaxDims)) {
      info.shape.ndim = int(info.dims.size());
      for (size_t i = 0; i < info.dims.size(); ++i) info.shape.dims[i] = info.dims[i];
    }
    file.tensors_.push_back(std::move(info));
  }

  // ---- the entries must tile the buffer exactly: sorted by offsets, each begins where the previous ended
  std::sort(file.tensors_.begin(), file.tensors_.end(), [](const TensorInfo& a, const TensorInfo& b) {
    if (a.begin != b.begin) return a.begin < b.begin;
    if (a.end != b.end) return a.end < b.end;
    return a.name < b.name;
  });
  uint64_t covered = 0;
  const TensorInfo* prev = nullptr;
  for (const TensorInfo& t : file.tensors_) {
    if (t.begin > covered) {
      if (prev == nullptr) return VLPAR_ST_BAD("data_offsets leave a hole: the first tensor '{}' starts at byte {}, not 0", t.name, t.begin);
      return VLPAR_ST_BAD("data_offsets leave a hole: bytes [{}, {}) between '{}' and '{}' belong to no tensor", covered,
                          t.begin, prev->name, t.name);
    }
    if (t.begin < covered)
      return VLPAR_ST_BAD("data_offsets overlap: '{}' [{}, {}] starts before '{}' ends at {}", t.name, t.begin, t.end,
                          prev->name, covered);
    covered = t.end;
    prev = &t;
  }
  const uint64_t buffer = file_size - file.data_start_;
  if (covered > buffer)
    return VLPAR_ST_BAD("file is truncated: the tensors need {} bytes of data but only {} follow the header", covered, buffer);
  if (covered < buffer)
    return VLPAR_ST_BAD("{} trailing bytes after the last tensor (tensors cover {} of the {} data bytes)", buffer - covered,
                        covered, buffer);
  for (size_t i = 0; i < file.tensors_.size(); ++i) file.index_.emplace(file.tensors_[i].name, i);
  return file;
#undef VLPAR_ST_BAD
}

const TensorInfo* SafetensorsFile::find(std::string_view name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

std::span<const std::byte> SafetensorsFile::bytes(const TensorInfo& info) const {
  return {map_ + data_start_ + info.begin, size_t(info.nbytes())};
}

Status SafetensorsFile::read(std::string_view name, TensorView dst) const {
  const TensorInfo* info = find(name);
  VLPAR_CHECK(info != nullptr, "safetensors file '{}' has no tensor '{}'", path_, name);
  VLPAR_CHECK_CODE(info->dims.size() <= size_t(kMaxDims), StatusCode::kNotSupported,
                   "tensor '{}' in '{}' has rank {} > {} (shape {}); vlpar views cannot hold it", name, path_,
                   info->dims.size(), kMaxDims, dims_string(info->dims));
  VLPAR_CHECK_CODE(info->supported, StatusCode::kNotSupported,
                   "tensor '{}' in '{}' has dtype {}, which vlpar cannot read (supported: F64, F32, BF16, F16, I64, I32)",
                   name, path_, info->dtype_name);
  VLPAR_CHECK(dst.shape == info->shape, "tensor '{}' in '{}' has shape {} but the destination has shape {}", name, path_,
              info->shape.to_string(), dst.shape.to_string());
  VLPAR_CHECK(dst.is_contiguous(), "reading tensor '{}' from '{}': destination {} is not contiguous", name, path_,
              dst.to_string());
  VLPAR_CHECK(dst.data != nullptr || dst.numel() == 0, "reading tensor '{}' from '{}': destination has null data", name,
              path_);
  const bool src_float = is_floating(info->dtype), dst_float = is_floating(dst.dtype);
  VLPAR_CHECK(src_float == dst_float, "tensor '{}' in '{}' is {} but the destination is {}: {} conversion is not supported",
              name, path_, info->dtype_name, dtype_name(dst.dtype), src_float ? "float -> integer" : "integer -> float");
  if (dst.numel() == 0) return Status::Ok();

  // CUDA destinations are filled through a host staging buffer.
  std::vector<std::byte> staging;
  void* out = dst.data;
  if (!dst.device.is_cpu()) {
    staging.resize(dst.nbytes());
    out = staging.data();
  }
  const std::byte* src = bytes(*info).data();
  const int64_t n = info->numel;
  if (info->dtype == dst.dtype) {
    std::memcpy(out, src, size_t(info->nbytes()));
  } else if (src_float) {
    convert_float(out, dst.dtype, src, info->dtype, n);
  } else if (dst.dtype == DType::kI64) {  // I32 -> I64
    auto* d = static_cast<int64_t*>(out);
    for (int64_t i = 0; i < n; ++i) d[i] = load_le<int32_t>(src + size_t(i) * 4);
  } else {  // I64 -> I32, range-checked
    auto* d = static_cast<int32_t*>(out);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t v = load_le<int64_t>(src + size_t(i) * 8);
      VLPAR_CHECK(v >= std::numeric_limits<int32_t>::min() && v <= std::numeric_limits<int32_t>::max(),
                  "tensor '{}' in '{}': I64 element {} = {} does not fit the i32 destination", name, path_, i, v);
      d[i] = int32_t(v);
    }
  }
  if (!dst.device.is_cpu()) {
    TensorView host(staging.data(), dst.dtype, dst.shape);
    VLPAR_RETURN_IF_ERROR(copy_(dst, host));
  }
  return Status::Ok();
}

// ---- writing -------------------------------------------------------------------------------------------------------

Status atomic_write_file(const std::string& path, std::span<const std::span<const std::byte>> pieces) {
  const std::string tmp = fmt::format("{}.tmp.{}", path, ::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0)
    return VLPAR_STATUS(StatusCode::kIoError, "cannot create '{}' (temporary for '{}'): {}", tmp, path, std::strerror(errno));
  Status s;
  for (const auto& piece : pieces) {
    s = write_all(fd, piece.data(), piece.size(), tmp);
    if (!s.ok()) break;
  }
  if (s.ok() && ::fsync(fd) != 0) s = VLPAR_STATUS(StatusCode::kIoError, "fsync of '{}' failed: {}", tmp, std::strerror(errno));
  if (::close(fd) != 0 && s.ok()) s = VLPAR_STATUS(StatusCode::kIoError, "close of '{}' failed: {}", tmp, std::strerror(errno));
  if (s.ok() && ::rename(tmp.c_str(), path.c_str()) != 0)
    s = VLPAR_STATUS(StatusCode::kIoError, "rename of '{}' to '{}' failed: {}", tmp, path, std::strerror(errno));
  if (!s.ok()) {
    ::unlink(tmp.c_str());
    return s;
  }
  // The rename is atomic; it is durable once the directory entry is on disk.
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  const std::string dir = parent.empty() ? std::string(".") : parent.string();
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return VLPAR_STATUS(StatusCode::kIoError, "cannot open directory '{}' to fsync it: {}", dir, std::strerror(errno));
  const int rc = ::fsync(dfd);
  const int err = errno;
  ::close(dfd);
  if (rc != 0) return VLPAR_STATUS(StatusCode::kIoError, "fsync of directory '{}' failed: {}", dir, std::strerror(err));
  return Status::Ok();
}

Status write_safetensors(const std::string& path, std::span<const NamedTensor> tensors,
                         const std::map<std::string, std::string>& metadata) {
  // ---- validate everything before touching the file system
  std::set<std::string_view> names;
  for (const NamedTensor& t : tensors) {
    const TensorView& v = t.view;
    VLPAR_CHECK(!invalid_utf8_at(t.name), "writing '{}': tensor name '{}' is not valid UTF-8", path, t.name);
    VLPAR_CHECK(t.name != "__metadata__", "writing '{}': '__metadata__' is reserved and cannot name a tensor", path);
    VLPAR_CHECK(names.insert(t.name).second, "writing '{}': duplicate tensor name '{}'", path, t.name);
    VLPAR_CHECK(v.ndim() >= 0 && v.ndim() <= kMaxDims, "writing '{}': tensor '{}' has rank {}", path, t.name, v.ndim());
    for (int d = 0; d < v.ndim(); ++d)
      VLPAR_CHECK(v.shape[d] >= 0, "writing '{}': tensor '{}' has a negative size in shape {}", path, t.name,
                  v.shape.to_string());
    VLPAR_CHECK(v.data != nullptr || v.numel() == 0, "writing '{}': tensor '{}' ({}) has null data", path, t.name,
                v.to_string());
    VLPAR_CHECK(v.device.is_cpu() || v.is_contiguous(), "writing '{}': CUDA tensor '{}' ({}) must be contiguous", path,
                t.name, v.to_string());
  }
  for (const auto& [k, val] : metadata)
    VLPAR_CHECK(!invalid_utf8_at(k) && !invalid_utf8_at(val), "writing '{}': metadata '{}' is not valid UTF-8", path, k);

  // ---- reference order: descending dtype position in the safetensors enum, then name (bytewise)
  std::vector<size_t> order(tensors.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const int oa = st_order(tensors[a].view.dtype), ob = st_order(tensors[b].view.dtype);
    if (oa != ob) return oa > ob;
    return tensors[a].name < tensors[b].name;
  });

  // ---- header: __metadata__ first ("format" leading), then the entries in offset order
  std::string header = "{\"__metadata__\":{";
  const auto fmt_it = metadata.find("format");
  append_json_string(header, "format");
  header += ':';
  append_json_string(header, fmt_it == metadata.end() ? std::string_view("pt") : std::string_view(fmt_it->second));
  for (const auto& [k, val] : metadata) {
    if (k == "format") continue;
    header += ',';
    append_json_string(header, k);
    header += ':';
    append_json_string(header, val);
  }
  header += '}';
  uint64_t offset = 0;
  for (const size_t i : order) {
    const TensorView& v = tensors[i].view;
    header += ',';
    append_json_string(header, tensors[i].name);
    header += fmt::format(":{{\"dtype\":\"{}\",\"shape\":[", safetensors_dtype_name(v.dtype));
    for (int d = 0; d < v.ndim(); ++d) header += fmt::format("{}{}", d ? "," : "", v.shape[d]);
    header += fmt::format("],\"data_offsets\":[{},{}]}}", offset, offset + v.nbytes());
    offset += v.nbytes();
  }
  header += '}';
  header.append((8 - header.size() % 8) % 8, ' ');

  // ---- pieces: contiguous host tensors are written in place; strided or CUDA ones are staged
  const uint64_t n = header.size();
  std::byte len_bytes[8];
  std::memcpy(len_bytes, &n, 8);
  std::list<std::vector<std::byte>> staged;
  std::vector<std::span<const std::byte>> pieces;
  pieces.reserve(order.size() + 2);
  pieces.emplace_back(len_bytes, 8);
  pieces.emplace_back(reinterpret_cast<const std::byte*>(header.data()), header.size());
  for (const size_t i : order) {
    const TensorView& v = tensors[i].view;
    if (v.numel() == 0) continue;
    if (v.device.is_cpu() && v.is_contiguous()) {
      pieces.emplace_back(static_cast<const std::byte*>(v.data), v.nbytes());
      continue;
    }
    std::vector<std::byte>& buf = staged.emplace_back(v.nbytes());
    if (v.device.is_cpu()) {
      gather_strided(v, buf.data());
    } else {
      TensorView host(buf.data(), v.dtype, v.shape);
      VLPAR_RETURN_IF_ERROR(copy_(host, v));
    }
    pieces.emplace_back(buf.data(), buf.size());
  }
  return atomic_write_file(path, pieces);
}

}  // namespace vlpar::io
