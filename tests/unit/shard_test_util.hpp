#pragma once
// Test helpers of tests/unit/test_{tar_reader,webdataset,energon,sample_stream}.cpp:
//   - a tar writer with byte-level control (bad checksums, base-256 sizes, pax/GNU extension headers) and a
//     WebDataset shard builder, independent of the reader under test: it writes headers field by field from the
//     ustar layout (name@0, mode@100, uid@108, gid@116, size@124, mtime@136, chksum@148, typeflag@156, magic@257,
//     uname@265, gname@297, prefix@345);
//   - the parser of the Energon goldens in tests/fixtures/energon/ (tools/golden/make_energon_fixture.py).
#include <gtest/gtest.h>
#include <fmt/core.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

namespace tartest {

using Bytes = std::vector<uint8_t>;

enum class Magic { kPosix, kGnu, kNone };

struct Header {
  std::string name;
  int64_t size = 0;
  char type = '0';
  Magic magic = Magic::kPosix;
  std::string prefix;            // POSIX prefix field
  bool base256_size = false;     // write size as base-256 (GNU extension for >= 8 GiB)
  bool signed_checksum = false;  // compute the checksum over signed chars (old writers)
  int checksum_delta = 0;        // added to the stored checksum (0 = correct)
};

inline void put_octal(uint8_t* f, size_t width, int64_t v) {  // width-1 octal digits + NUL
  std::string s(width - 1, '0');
  for (size_t i = width - 1; i-- > 0; v >>= 3) s[i] = static_cast<char>('0' + (v & 7));
  std::memcpy(f, s.data(), width - 1);
  f[width - 1] = 0;
}

inline Bytes header_block(const Header& h) {
  Bytes b(512, 0);
  std::memcpy(b.data(), h.name.data(), std::min<size_t>(h.name.size(), 100));
  put_octal(&b[100], 8, 0444);
  put_octal(&b[108], 8, 1000);
  put_octal(&b[116], 8, 1000);
  if (h.base256_size) {
    b[124] = 0x80;
    for (int i = 0; i < 8; ++i) b[135 - static_cast<size_t>(i)] = static_cast<uint8_t>((h.size >> (8 * i)) & 0xff);
  } else {
    put_octal(&b[124], 12, h.size);
  }
  put_octal(&b[136], 12, 1700000000);
  b[156] = static_cast<uint8_t>(h.type);
  if (h.magic == Magic::kPosix) std::memcpy(&b[257], "ustar\0" "00", 8);
  if (h.magic == Magic::kGnu) std::memcpy(&b[257], "ustar  \0", 8);
  std::memcpy(&b[265], "bigdata", 7);
  std::memcpy(&b[297], "bigdata", 7);
  std::memcpy(&b[345], h.prefix.data(), std::min<size_t>(h.prefix.size(), 155));
  std::memset(&b[148], ' ', 8);
  int64_t sum = 0;
  for (uint8_t c : b) sum += h.signed_checksum ? static_cast<int8_t>(c) : c;
  sum += h.checksum_delta;
  put_octal(&b[148], 7, sum < 0 ? 0 : sum);  // 6 digits + NUL, then a space (the classic layout)
  b[155] = ' ';
  return b;
}

inline void pad(Bytes& t) { t.resize((t.size() + 511) / 512 * 512, 0); }

inline void append_raw(Bytes& t, const Header& h, const Bytes& content) {
  Bytes b = header_block(h);
  t.insert(t.end(), b.begin(), b.end());
  t.insert(t.end(), content.begin(), content.end());
  pad(t);
}

inline void append_file(Bytes& t, const std::string& name, const Bytes& content, Magic magic = Magic::kPosix) {
  Header h;
  h.name = name;
  h.size = static_cast<int64_t>(content.size());
  h.magic = magic;
  append_raw(t, h, content);
}

inline Bytes text(const std::string& s) { return Bytes(s.begin(), s.end()); }

/// One pax record "<len> key=value\n" (len counts itself).
inline std::string pax_record(const std::string& key, const std::string& value) {
  const std::string body = " " + key + "=" + value + "\n";
  size_t len = body.size() + 1;
  while (std::to_string(len).size() + body.size() != len) ++len;
  return std::to_string(len) + body;
}

inline void append_pax(Bytes& t, char type, const std::string& records) {
  Header h;
  h.name = type == 'g' ? "././@PaxHeader" : "PaxHeaders/x";
  h.type = type;
  h.size = static_cast<int64_t>(records.size());
  append_raw(t, h, text(records));
}

inline void append_gnu_long_name(Bytes& t, const std::string& name) {
  Header h;
  h.name = "././@LongLink";
  h.type = 'L';
  h.magic = Magic::kGnu;
  Bytes content = text(name);
  content.push_back(0);
  h.size = static_cast<int64_t>(content.size());
  append_raw(t, h, content);
}

inline void finish(Bytes& t) { t.resize(t.size() + 1024, 0); }

inline void write_file(const std::string& path, const Bytes& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(f.good()) << path;
}

inline Bytes read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return Bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

/// A fresh directory under the test temp dir, removed by the destructor.
struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& tag) {
    std::string templ = (std::filesystem::path(::testing::TempDir()) / ("vlpar_" + tag + "_XXXXXX")).string();
    path = ::mkdtemp(templ.data()) ? std::filesystem::path(templ) : std::filesystem::path();
  }
  ~TempDir() {
    std::error_code ec;
    if (!path.empty()) std::filesystem::remove_all(path, ec);
  }
  std::string operator/(const std::string& rel) const { return (path / rel).string(); }
};

/// Deterministic payload bytes that encode (a, b) in the first 16 bytes.
inline Bytes payload(uint64_t a, uint64_t b, size_t n) {
  Bytes p(n);
  uint64_t x = a * 0x9E3779B97F4A7C15ull ^ (b + 0x632BE59BD9B4E019ull);
  for (size_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    p[i] = static_cast<uint8_t>(x);
  }
  for (size_t i = 0; i < 8 && i < n; ++i) p[i] = static_cast<uint8_t>(a >> (8 * i));
  for (size_t i = 0; i < 8 && i + 8 < n; ++i) p[8 + i] = static_cast<uint8_t>(b >> (8 * i));
  return p;
}

/// A WebDataset shard: sample i has key "<tag>_<i>" with members .jpg (payload(shard_id, i, jpg_bytes(i))) and .txt.
inline Bytes make_shard(int shard_id, int64_t n, size_t jpg_bytes = 700) {
  Bytes t;
  for (int64_t i = 0; i < n; ++i) {
    const std::string key = fmt::format("s{}_{}", shard_id, i);
    append_file(t, key + ".jpg", payload(static_cast<uint64_t>(shard_id), static_cast<uint64_t>(i),
                                         jpg_bytes + static_cast<size_t>(i % 5) * 37));
    append_file(t, key + ".txt", text("caption " + key));
  }
  finish(t);
  return t;
}

inline uint64_t fnv1a64(const Bytes& data) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (uint8_t b : data) h = (h ^ b) * 0x100000001B3ull;
  return h;
}

inline std::string unhex(const std::string& h) {
  if (h == "-") return "";
  std::string out;
  for (size_t i = 0; i + 1 < h.size(); i += 2) out.push_back(static_cast<char>(std::stoi(h.substr(i, 2), nullptr, 16)));
  return out;
}

// ---- expected_samples.txt: what Energon's own reader returned -------------------------------------------------
struct GoldenField {
  std::string ext;  // as Energon reports it (case kept)
  int64_t size = 0;
  uint64_t fnv = 0;
};
struct GoldenSample {
  std::string shard;
  int64_t index = 0;
  bool excluded = false;
  std::string key;
  std::vector<GoldenField> fields;
};
struct GoldenPart {
  std::string config, part;
  std::vector<std::pair<std::string, int64_t>> shards;  // name, count
  int64_t num_samples = 0;
  std::vector<GoldenSample> samples;  // every index of every shard, in order
};

inline std::vector<GoldenPart> read_golden_samples(const std::string& path) {
  std::ifstream in(path);
  std::vector<GoldenPart> parts;
  std::string tag;
  std::string shard_of_excluded;
  while (in >> tag) {
    if (tag == "part") {
      GoldenPart p;
      size_t n_shards = 0;
      in >> p.config >> p.part >> n_shards >> p.num_samples;
      parts.push_back(p);
    } else if (tag == "shard") {
      std::string name;
      int64_t count = 0;
      in >> name >> count;
      parts.back().shards.emplace_back(unhex(name), count);
    } else if (tag == "sample") {
      GoldenSample s;
      std::string shard, key;
      int64_t n = 0;
      in >> shard >> s.index >> key >> n;
      s.shard = unhex(shard);
      s.excluded = n < 0;
      s.key = s.excluded ? "" : unhex(key);
      for (int64_t i = 0; i < n; ++i) {
        GoldenField f;
        std::string ft, ext, fnv;
        in >> ft >> ext >> f.size >> fnv;
        f.ext = unhex(ext);
        f.fnv = std::stoull(fnv, nullptr, 16);
        s.fields.push_back(f);
      }
      parts.back().samples.push_back(s);
    }
  }
  return parts;
}

}  // namespace tartest
