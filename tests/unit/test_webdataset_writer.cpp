// WebDataset shard writer and Energon metadata (data/webdataset_writer.hpp):
//   - the ustar header bytes field by field (octal fields, checksum, magic, base-256 sizes) and pax records whose
//     length prefix counts itself (names across the digit boundaries);
//   - what GNU tar (`tar -tvf`) and Python's tarfile list for a written tar: names (a 150-byte one through pax),
//     sizes, mode 0444, bigdata/bigdata, mtime 0 and content digests (skipped, and saying so, without the tools);
//   - a round trip through the library's reader (tar_reader.hpp, webdataset.hpp, energon.hpp): members, samples in
//     extension order, the .tar.idx equal to the reader's own header scan, the Energon split parts and counts;
//   - shard rolling at max_count and max_size, printf patterns, determinism, atomic files (no final file before
//     finish, no temporary after an abandoned writer), and rejected names/metadata with messages naming the defect.
// Run: ./build/cpu/tests/test_webdataset_writer
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "vlpar/data/energon.hpp"
#include "vlpar/data/tar_reader.hpp"
#include "vlpar/data/webdataset.hpp"
#include "vlpar/data/webdataset_writer.hpp"

namespace vlpar::data {
namespace {

namespace fs = std::filesystem;

// A fresh directory per test under the system temp dir.
class TempDir {
 public:
  explicit TempDir(const std::string& name) {
    path_ = (fs::temp_directory_path() / fmt::format("vlpar_wds_{}_{}", name, ::getpid())).string();
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::vector<uint8_t> bytes_of(std::string_view s) { return std::vector<uint8_t>(s.begin(), s.end()); }

std::vector<uint8_t> pattern_bytes(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  uint32_t x = seed * 2654435761u + 1;
  for (auto& b : v) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    b = static_cast<uint8_t>(x);
  }
  return v;
}

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << "cannot open " << path;
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

uint64_t fnv1a64(const std::vector<uint8_t>& data) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (uint8_t b : data) {
    h ^= b;
    h *= 0x100000001B3ull;
  }
  return h;
}

// stdout of a shell command, with its exit status.
std::pair<int, std::string> run(const std::string& cmd) {
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return {-1, ""};
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), p)) > 0;) out.append(buf, n);
  const int rc = ::pclose(p);
  return {rc, out};
}

bool have_program(const std::string& name) { return run("command -v " + name + " >/dev/null 2>&1").first == 0; }

std::string octal_field(const std::vector<uint8_t>& h, size_t off, size_t len) {
  return std::string(reinterpret_cast<const char*>(&h[off]), len);
}

// ---- header bytes ------------------------------------------------------------------------------------------

TEST(WebDatasetWriter, UstarHeaderFieldByField) {
  TarWriterOptions opt;
  auto r = make_ustar_header("abc/000001.json", 1234, '0', opt);
  ASSERT_TRUE(r.ok()) << r.status().message();
  const std::vector<uint8_t>& h = r.value();
  ASSERT_EQ(h.size(), 512u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(h.data())), "abc/000001.json");
  EXPECT_EQ(octal_field(h, 100, 8), std::string("0000444\0", 8));
  EXPECT_EQ(octal_field(h, 108, 8), std::string("0000000\0", 8));
  EXPECT_EQ(octal_field(h, 116, 8), std::string("0000000\0", 8));
  EXPECT_EQ(octal_field(h, 124, 12), std::string("00000002322\0", 12));  // 1234 = 0o2322
  EXPECT_EQ(octal_field(h, 136, 12), std::string("00000000000\0", 12));
  EXPECT_EQ(h[156], '0');
  EXPECT_EQ(octal_field(h, 257, 8), std::string("ustar\0" "00", 8));
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(&h[265])), "bigdata");
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(&h[297])), "bigdata");
  // Checksum: byte sum with the field as spaces, stored as 6 octal digits + NUL + space.
  uint32_t sum = 0;
  for (size_t i = 0; i < 512; ++i) sum += (i >= 148 && i < 156) ? uint32_t(' ') : h[i];
  EXPECT_EQ(octal_field(h, 148, 8), fmt::format("{:06o}", sum) + std::string("\0 ", 2));
  EXPECT_EQ(parse_tar_number(std::span<const uint8_t>(&h[148], 8)), int64_t(sum));

  // 8 GiB does not fit 11 octal digits: base-256 with the high bit set.
  auto big = make_ustar_header("x.bin", uint64_t{1} << 33, '0', opt);
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(big.value()[124], 0x80);
  EXPECT_EQ(parse_tar_number(std::span<const uint8_t>(&big.value()[124], 12)), int64_t{1} << 33);
  auto just = make_ustar_header("x.bin", (uint64_t{1} << 33) - 1, '0', opt);
  ASSERT_TRUE(just.ok());
  EXPECT_EQ(octal_field(just.value(), 124, 12), std::string("77777777777\0", 12));

  EXPECT_FALSE(make_ustar_header(std::string(101, 'a'), 0, '0', opt).ok());
  TarWriterOptions bad = opt;
  bad.uname = std::string(32, 'u');
  EXPECT_FALSE(make_ustar_header("a.b", 0, '0', bad).ok());
}

TEST(WebDatasetWriter, PaxRecordLengthCountsItself) {
  for (size_t n : {1u, 88u, 89u, 90u, 91u, 92u, 93u, 100u, 986u, 987u, 988u, 989u, 990u, 2000u}) {
    const std::string name(n, 'n');
    const std::string rec = pax_path_record(name);
    const size_t sp = rec.find(' ');
    ASSERT_NE(sp, std::string::npos);
    EXPECT_EQ(std::stoul(rec.substr(0, sp)), rec.size()) << "name length " << n;
    EXPECT_EQ(rec.substr(sp + 1), "path=" + name + "\n");
  }
}

TEST(WebDatasetWriter, ShardNamePatterns) {
  EXPECT_EQ(format_shard_name("shard-%06d.tar", 7).value(), "shard-000007.tar");
  EXPECT_EQ(format_shard_name("s%d.tar", 12).value(), "s12.tar");
  EXPECT_EQ(format_shard_name("s%3d.tar", 7).value(), "s  7.tar");
  EXPECT_EQ(format_shard_name("p/100%%-%02d.tar", 3).value(), "p/100%-03.tar");
  for (const char* bad : {"shard.tar", "a-%s.tar", "%d-%d.tar", "x%", "%-5d.tar", "%ld.tar"}) {
    auto r = format_shard_name(bad, 1);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_NE(r.status().message().find(bad), std::string::npos) << r.status().message();
    }
  }
}

// ---- a written tar, read by three readers ------------------------------------------------------------------

struct Written {
  std::string path;
  std::vector<std::string> names;
  std::vector<std::vector<uint8_t>> data;
};

Written write_mixed_tar(const std::string& dir) {
  Written w;
  w.path = dir + "/mixed.tar";
  const std::string long_name = "deep/" + std::string(140, 'd') + "/000007.json";  // 150+ bytes: pax
  const std::vector<std::pair<std::string, size_t>> members = {
      {"000001.json", 37}, {"000001.jpg", 511}, {"000002.0.jpg", 512}, {"000002.1.png", 513},
      {"000003.txt", 0},   {long_name, 1000},   {"dir.with.dots/000004.json", 5}};
  auto tw = TarWriter::open(w.path);
  EXPECT_TRUE(tw.ok()) << tw.status().message();
  uint32_t seed = 1;
  for (const auto& [name, size] : members) {
    w.names.push_back(name);
    w.data.push_back(pattern_bytes(size, seed++));
    EXPECT_TRUE(tw.value().add(name, w.data.back()).ok());
  }
  EXPECT_FALSE(fs::exists(w.path)) << "the final file must not exist before finish()";
  EXPECT_TRUE(tw.value().finish().ok());
  return w;
}

TEST(WebDatasetWriter, TarLayoutAndLibraryReader) {
  TempDir dir("layout");
  const Written w = write_mixed_tar(dir.path());
  ASSERT_TRUE(fs::exists(w.path));
  for (const auto& e : fs::directory_iterator(dir.path()))
    EXPECT_EQ(e.path().string().find(".tmp"), std::string::npos) << "temporary left: " << e.path();
  const std::vector<uint8_t> raw = read_file(w.path);
  // Expected size: per member header + padded data, one extra header + padded record for the pax name, end blocks.
  uint64_t expect = 1024;
  for (size_t i = 0; i < w.names.size(); ++i) {
    expect += 512 + (w.data[i].size() + 511) / 512 * 512;
    if (w.names[i].size() > 100) expect += 512 + (pax_path_record(w.names[i]).size() + 511) / 512 * 512;
  }
  EXPECT_EQ(raw.size(), expect);
  for (size_t i = raw.size() - 1024; i < raw.size(); ++i) ASSERT_EQ(raw[i], 0) << "end blocks must be zero";

  auto tar = TarFile::open(w.path);
  ASSERT_TRUE(tar.ok()) << tar.status().message();
  TarPaxGlobals g;
  int64_t off = 0;
  for (size_t i = 0;; ++i) {
    auto m = tar.value().member_at(off, g);
    ASSERT_TRUE(m.ok()) << m.status().message();
    if (!m.value()) {
      EXPECT_EQ(i, w.names.size());
      break;
    }
    ASSERT_LT(i, w.names.size());
    const TarMember& mem = *m.value();
    EXPECT_EQ(mem.name, w.names[i]);
    EXPECT_TRUE(mem.is_regular());
    ASSERT_EQ(mem.size, int64_t(w.data[i].size()));
    std::vector<uint8_t> content(w.data[i].size());
    ASSERT_TRUE(tar.value().read(mem.data_offset, content).ok());
    EXPECT_TRUE(content == w.data[i]) << mem.name;
    off = mem.next_offset;
  }
}

TEST(WebDatasetWriter, GnuTarListsWhatWeWrote) {
  if (!have_program("tar")) GTEST_SKIP() << "GNU tar not on PATH: listing not checked";
  TempDir dir("gnutar");
  const Written w = write_mixed_tar(dir.path());
  auto [rc, out] = run("TZ=UTC LC_ALL=C tar --numeric-owner -tvf '" + w.path + "' 2>&1");
  ASSERT_EQ(rc, 0) << out;
  auto [rc2, out2] = run("TZ=UTC LC_ALL=C tar -tvf '" + w.path + "' 2>&1");
  ASSERT_EQ(rc2, 0) << out2;
  std::istringstream numeric(out), named(out2);
  std::string line, line2;
  for (size_t i = 0; i < w.names.size(); ++i) {
    ASSERT_TRUE(std::getline(numeric, line)) << out;
    ASSERT_TRUE(std::getline(named, line2)) << out2;
    const std::string want = fmt::format("-r--r--r-- 0/0 {:>5} 1970-01-01 00:00 {}", w.data[i].size(), w.names[i]);
    // GNU tar pads the size column to the widest entry; compare with single spaces.
    auto squeeze = [](std::string s) {
      std::string o;
      for (char c : s)
        if (!(c == ' ' && !o.empty() && o.back() == ' ')) o += c;
      return o;
    };
    EXPECT_EQ(squeeze(line), squeeze(want));
    EXPECT_NE(line2.find("bigdata/bigdata"), std::string::npos) << line2;
  }
  EXPECT_FALSE(std::getline(numeric, line)) << "extra entry: " << line;
  // GNU tar extracts byte-identical contents (-O writes them to stdout in archive order).
  auto [rc3, out3] = run("tar -xOf '" + w.path + "' 2>&1");
  ASSERT_EQ(rc3, 0);
  std::string all;
  for (const auto& d : w.data) all.append(d.begin(), d.end());
  EXPECT_TRUE(out3 == all);
}

TEST(WebDatasetWriter, PythonTarfileListsWhatWeWrote) {
  if (!have_program("python3")) GTEST_SKIP() << "python3 not on PATH: tarfile listing not checked";
  TempDir dir("pytar");
  const Written w = write_mixed_tar(dir.path());
  const std::string script = dir.path() + "/list.py";
  {
    std::ofstream f(script);
    f << "import sys, tarfile\n"
         "def fnv(b):\n"
         "    h = 0xCBF29CE484222325\n"
         "    for x in b:\n"
         "        h ^= x; h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF\n"
         "    return h\n"
         "with tarfile.open(sys.argv[1], 'r:') as t:\n"
         "    for m in t:\n"
         "        print(m.name, m.size, oct(m.mode), m.uname, m.gname, m.mtime, m.isreg(), m.offset,\n"
         "              fnv(t.extractfile(m).read()))\n";
  }
  auto [rc, out] = run("python3 '" + script + "' '" + w.path + "' 2>&1");
  ASSERT_EQ(rc, 0) << out;
  std::istringstream in(out);
  auto tar = TarFile::open(w.path);
  ASSERT_TRUE(tar.ok());
  TarPaxGlobals g;
  int64_t off = 0;
  for (size_t i = 0; i < w.names.size(); ++i) {
    std::string line;
    ASSERT_TRUE(std::getline(in, line)) << out;
    auto m = tar.value().member_at(off, g);
    ASSERT_TRUE(m.ok() && m.value());
    // Python's TarInfo.offset = first header including the pax header: what the .tar.idx stores.
    EXPECT_EQ(line, fmt::format("{} {} 0o444 bigdata bigdata 0 True {} {}", w.names[i], w.data[i].size(),
                                m.value()->header_offset, fnv1a64(w.data[i])));
    off = m.value()->next_offset;
  }
  std::string extra;
  EXPECT_FALSE(std::getline(in, extra)) << "extra entry: " << extra;
}

// ---- samples and shards ------------------------------------------------------------------------------------

WdsSample make_sample(int i) {
  WdsSample s;
  s.key = fmt::format("{:06d}", i);
  // Members deliberately out of extension order: the writer sorts them.
  s.members.push_back({"json", bytes_of(fmt::format(R"({{"id": "{}", "conversations": []}})", s.key))});
  if (i % 3 == 2) {
    s.members.push_back({"1.png", pattern_bytes(100 + size_t(i), uint32_t(i) * 7 + 1)});
    s.members.push_back({"0.jpg", pattern_bytes(700 + size_t(i), uint32_t(i) * 7 + 2)});
  } else {
    s.members.push_back({"jpg", pattern_bytes(300 + 37 * size_t(i), uint32_t(i) * 7 + 3)});
  }
  return s;
}

TEST(WebDatasetWriter, ShardsRoundTripThroughShardReaderAndIndex) {
  TempDir dir("shards");
  ShardWriterOptions opt;
  opt.pattern = "parts/train-%04d.tar";
  opt.max_count = 3;
  opt.tar.fsync = false;
  auto sw = ShardWriter::open(dir.path(), opt);
  ASSERT_TRUE(sw.ok()) << sw.status().message();
  std::vector<WdsSample> samples;
  for (int i = 0; i < 10; ++i) {
    samples.push_back(make_sample(i));
    ASSERT_TRUE(sw.value().write(samples.back()).ok());
  }
  ASSERT_TRUE(sw.value().finish().ok());
  ASSERT_TRUE(sw.value().finish().ok()) << "finish() is idempotent";
  EXPECT_EQ(sw.value().samples_written(), 10);
  const auto& shards = sw.value().shards();
  ASSERT_EQ(shards.size(), 4u);
  const std::vector<int64_t> counts = {3, 3, 3, 1};
  int sample = 0;
  for (size_t k = 0; k < shards.size(); ++k) {
    EXPECT_EQ(shards[k].name, fmt::format("parts/train-{:04d}.tar", k));
    EXPECT_EQ(shards[k].samples, counts[k]);
    const std::string path = dir.path() + "/" + shards[k].name;
    EXPECT_EQ(fs::file_size(path), shards[k].bytes);
    // The .tar.idx equals the reader's own header scan (what `energon prepare` would write).
    auto idx = read_tar_index(path + ".idx");
    ASSERT_TRUE(idx.ok()) << idx.status().message();
    auto tar = TarFile::open(path);
    ASSERT_TRUE(tar.ok());
    auto scan = build_sample_offsets(tar.value());
    ASSERT_TRUE(scan.ok()) << scan.status().message();
    EXPECT_EQ(idx.value(), scan.value()) << shards[k].name;
    EXPECT_EQ(idx.value().back() + 1024, int64_t(shards[k].bytes));

    auto reader = ShardReader::open(path, shards[k].name,
                                    std::make_shared<const std::vector<int64_t>>(idx.value()));
    ASSERT_TRUE(reader.ok()) << reader.status().message();
    ASSERT_EQ(reader.value().num_samples(), counts[k]);
    for (int64_t i = 0; i < counts[k]; ++i, ++sample) {
      auto got = reader.value().read(i);
      ASSERT_TRUE(got.ok()) << got.status().message();
      ASSERT_FALSE(got.value().skipped()) << got.value().skip_reason;
      const Sample& s = got.value().sample;
      const WdsSample& want = samples[size_t(sample)];
      EXPECT_EQ(s.key, want.key);
      ASSERT_EQ(s.fields.size(), want.members.size());
      for (size_t f = 0; f + 1 < s.fields.size(); ++f) EXPECT_LT(s.fields[f].ext, s.fields[f + 1].ext);
      for (const WdsMember& m : want.members) {
        const SampleField* field = s.field(m.ext);
        ASSERT_NE(field, nullptr) << want.key << "." << m.ext;
        EXPECT_TRUE(field->data == m.data) << want.key << "." << m.ext;
      }
    }
  }
  EXPECT_EQ(sample, 10);
}

TEST(WebDatasetWriter, RollsAtMaxSize) {
  TempDir dir("maxsize");
  ShardWriterOptions opt;
  opt.max_size = 8192;
  opt.tar.fsync = false;
  auto sw = ShardWriter::open(dir.path(), opt);
  ASSERT_TRUE(sw.ok());
  // Samples of 2 members: 1024 + 1536 bytes in the tar each (json 10 B, bin 1000 B) = 2560 B.
  for (int i = 0; i < 7; ++i) {
    WdsSample s{fmt::format("k{}", i), {{"json", pattern_bytes(10, 1)}, {"bin", pattern_bytes(1000, 2)}}};
    ASSERT_TRUE(sw.value().write(s).ok());
  }
  // One sample larger than max_size gets a shard of its own.
  WdsSample big{"big", {{"bin", pattern_bytes(20000, 3)}}};
  ASSERT_TRUE(sw.value().write(big).ok());
  WdsSample after{"after", {{"json", pattern_bytes(5, 4)}}};
  ASSERT_TRUE(sw.value().write(after).ok());
  ASSERT_TRUE(sw.value().finish().ok());
  const auto& shards = sw.value().shards();
  // 3 samples = 7680 + 1024 end = 8704 > 8192, so 2 per shard: 2, 2, 2, 1, big, after.
  ASSERT_EQ(shards.size(), 6u);
  const std::vector<int64_t> counts = {2, 2, 2, 1, 1, 1};
  for (size_t k = 0; k < shards.size(); ++k) {
    EXPECT_EQ(shards[k].samples, counts[k]) << k;
    if (k != 4) {
      EXPECT_LE(shards[k].bytes, opt.max_size) << k;
    }
    EXPECT_EQ(shards[k].name, fmt::format("shard-{:06d}.tar", k));
  }
}

TEST(WebDatasetWriter, EnergonMetadataOpensWithTheLibraryReader) {
  TempDir dir("energon");
  std::vector<ShardInfo> all;
  for (const char* split : {"train", "val"}) {
    ShardWriterOptions opt;
    opt.pattern = std::string(split) + "-%06d.tar";
    opt.max_count = split == std::string("train") ? 4 : 100;
    opt.tar.fsync = false;
    auto sw = ShardWriter::open(dir.path(), opt);
    ASSERT_TRUE(sw.ok());
    const int n = split == std::string("train") ? 9 : 3;
    for (int i = 0; i < n; ++i) ASSERT_TRUE(sw.value().write(make_sample(i)).ok());
    ASSERT_TRUE(sw.value().finish().ok());
    all.insert(all.end(), sw.value().shards().begin(), sw.value().shards().end());
  }
  EnergonMetadata meta;
  meta.shards = all;
  meta.parts = {{"train", {"train-{000000..000002}.tar"}}, {"val", {"val-000000.tar"}}};
  meta.exclude = {"train-000001.tar/000005"};
  ASSERT_TRUE(write_energon_metadata(dir.path(), meta).ok());

  EXPECT_EQ(std::string(reinterpret_cast<const char*>(read_file(dir.path() + "/.nv-meta/dataset.yaml").data()), 56),
            "__module__: megatron.energon\n__class__: CrudeWebdataset\n");
  const std::vector<uint8_t> info = read_file(dir.path() + "/.nv-meta/.info.json");
  EXPECT_EQ(std::string(info.begin(), info.end()),
            "{\n  \"energon_version\": \"vlpar-0.1.0\",\n  \"shard_counts\": {\n    \"train-000000.tar\": 4,\n"
            "    \"train-000001.tar\": 4,\n    \"train-000002.tar\": 1,\n    \"val-000000.tar\": 3\n  }\n}\n");

  auto train = open_energon_dataset(dir.path(), {.split_part = "train"});
  ASSERT_TRUE(train.ok()) << train.status().message();
  EXPECT_EQ(train.value().num_samples(), 9);
  ASSERT_EQ(train.value().shards.size(), 3u);
  EXPECT_TRUE(train.value().is_excluded("train-000001.tar", "000005"));
  EXPECT_EQ(train.value().dataset_yaml.class_name, "CrudeWebdataset");
  auto val = open_energon_dataset(dir.path(), {.split_part = "val"});
  ASSERT_TRUE(val.ok()) << val.status().message();
  EXPECT_EQ(val.value().num_samples(), 3);
  EXPECT_EQ(val.value().energon_version, "vlpar-0.1.0");
}

TEST(WebDatasetWriter, SameSamplesSameBytes) {
  std::vector<std::vector<uint8_t>> runs;
  for (int r = 0; r < 2; ++r) {
    TempDir dir(fmt::format("det{}", r));
    ShardWriterOptions opt;
    opt.tar.fsync = false;
    auto sw = ShardWriter::open(dir.path(), opt);
    ASSERT_TRUE(sw.ok());
    for (int i = 0; i < 5; ++i) ASSERT_TRUE(sw.value().write(make_sample(i)).ok());
    ASSERT_TRUE(sw.value().finish().ok());
    runs.push_back(read_file(dir.path() + "/shard-000000.tar"));
  }
  EXPECT_FALSE(runs[0].empty());
  EXPECT_TRUE(runs[0] == runs[1]);
}

TEST(WebDatasetWriter, AbandonedWritersLeaveNoTemporaries) {
  TempDir dir("abandon");
  {
    auto tw = TarWriter::open(dir.path() + "/a.tar");
    ASSERT_TRUE(tw.ok());
    ASSERT_TRUE(tw.value().add("x.json", bytes_of("{}")).ok());
  }
  {
    ShardWriterOptions opt;
    opt.max_count = 2;
    opt.tar.fsync = false;
    auto sw = ShardWriter::open(dir.path(), opt);
    ASSERT_TRUE(sw.ok());
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(sw.value().write(make_sample(i)).ok());
    // shard 0 is finished (2 samples), shard 1 is open; the writer goes away without finish().
  }
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir.path())) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"shard-000000.tar", "shard-000000.tar.idx"}));
}

// ---- rejections --------------------------------------------------------------------------------------------

void expect_rejected(const WdsSample& s, const std::string& fragment) {
  const Status st = validate_sample(s);
  EXPECT_FALSE(st.ok()) << "key '" << s.key << "' accepted";
  EXPECT_NE(st.message().find(fragment), std::string::npos) << st.message();
}

TEST(WebDatasetWriter, RejectsNamesReadersWouldMisread) {
  const std::vector<uint8_t> d = bytes_of("x");
  EXPECT_TRUE(validate_sample({"a.b/c-1", {{"seg.mask.png", d}, {"json", d}}}).ok());
  EXPECT_TRUE(validate_sample({"__x__", {{"json", d}}}).ok());  // "__x__.json" is not a meta name
  expect_rejected({"", {{"json", d}}}, "empty");
  expect_rejected({"a.b", {{"json", d}}}, "contains '.'");
  expect_rejected({"/abs", {{"json", d}}}, "absolute");
  expect_rejected({"a//b", {{"json", d}}}, "empty path component");
  expect_rejected({"../b", {{"json", d}}}, "'..'");
  expect_rejected({"dir/", {{"json", d}}}, "empty path component");
  expect_rejected({"k", {}}, "no members");
  expect_rejected({"k", {{"", d}}}, "empty extension");
  expect_rejected({"k", {{"a/b", d}}}, "contains '/'");
  expect_rejected({"k", {{"JPG", d}, {"jpg", d}}}, "twice");
  expect_rejected({"k", {{"__key__", d}}}, "__fields__");
  expect_rejected({"__meta__/k", {{"json", d}}}, "metadata");
  expect_rejected({std::string("a\0b", 3), {{"json", d}}}, "NUL");

  TempDir dir("reject");
  ShardWriterOptions opt;
  opt.tar.fsync = false;
  auto sw = ShardWriter::open(dir.path(), opt);
  ASSERT_TRUE(sw.ok());
  ASSERT_TRUE(sw.value().write({"k", {{"json", d}}}).ok());
  const Status dup = sw.value().write({"k", {{"jpg", d}}});
  EXPECT_FALSE(dup.ok());
  EXPECT_NE(dup.message().find("occurs twice in shard"), std::string::npos) << dup.message();

  auto with = [](auto edit) {
    ShardWriterOptions o;
    edit(o);
    return o;
  };
  const std::vector<std::pair<std::string, ShardWriterOptions>> bad_options = {
      {"max_count", with([](ShardWriterOptions& o) { o.max_count = 0; })},
      {"max_size", with([](ShardWriterOptions& o) { o.max_size = 10; })},
      {"integer conversions", with([](ShardWriterOptions& o) { o.pattern = "fixed.tar"; })},
      {"absolute", with([](ShardWriterOptions& o) { o.pattern = "/tmp/x-%d.tar"; })}};
  for (const auto& [field, o] : bad_options) {
    auto r = ShardWriter::open(dir.path(), o);
    EXPECT_FALSE(r.ok()) << field;
    if (!r.ok()) {
      EXPECT_NE(r.status().message().find(field), std::string::npos) << r.status().message();
    }
  }
}

TEST(WebDatasetWriter, RejectsInconsistentEnergonMetadata) {
  TempDir dir("badmeta");
  const std::vector<ShardInfo> shards = {{"a.tar", 2, 4096}, {"b.tar", 1, 2048}};
  auto fails = [&](std::vector<ShardInfo> s, std::vector<EnergonSplitPart> parts, const std::string& fragment) {
    EnergonMetadata m;
    m.shards = std::move(s);
    m.parts = std::move(parts);
    const Status st = write_energon_metadata(dir.path(), m);
    EXPECT_FALSE(st.ok()) << fragment;
    EXPECT_NE(st.message().find(fragment), std::string::npos) << st.message();
  };
  fails({}, {{"train", {"a.tar"}}}, "no shards");
  fails(shards, {}, "no split parts");
  fails(shards, {{"train", {}}}, "has no shards");
  fails(shards, {{"train", {"c.tar"}}}, "'c.tar'");
  fails(shards, {{"train", {"a.tar"}}, {"train", {"b.tar"}}}, "listed twice");
  fails({{"a.tar", 1, 0}, {"a.tar", 1, 0}}, {{"train", {"a.tar"}}}, "listed twice");
  fails({{"../a.tar", 1, 0}}, {{"train", {"../a.tar"}}}, "'..'");
  EXPECT_FALSE(fs::exists(dir.path() + "/.nv-meta/.info.json")) << "nothing is written when validation fails";
}

}  // namespace
}  // namespace vlpar::data
