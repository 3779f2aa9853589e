// TarFile: header dialects (ustar prefix, GNU 'L', pax 'x'/'g' with path= and size=, base-256 sizes), offsets as
// Python's TarInfo.offset (checked against the .tar.idx files `energon prepare` wrote for tars from Python tarfile
// and GNU tar), and every defect as a Status naming file and offset: bad checksum, truncation, content past EOF,
// malformed pax, dangling extension headers. A corruption sweep checks "never a crash or a hang".
// Run: ./build/<dir>/tests/test_tar_reader
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "shard_test_util.hpp"
#include "vlpar/data/tar_reader.hpp"
#include "vlpar/data/webdataset.hpp"

namespace {

using namespace vlpar;
using namespace vlpar::data;
using tartest::Bytes;

const std::string kFixture = std::string(VLPAR_FIXTURES_DIR) + "/energon";

// All members of a tar, walking from offset 0.
Result<std::vector<TarMember>> walk(const TarFile& t) {
  std::vector<TarMember> out;
  TarPaxGlobals g;
  int64_t off = 0;
  for (;;) {
    VLPAR_ASSIGN_OR_RETURN(std::optional<TarMember> m, t.member_at(off, g));
    if (!m) return out;
    off = m->next_offset;
    out.push_back(std::move(*m));
  }
}

Bytes content(const TarFile& t, const TarMember& m) {
  Bytes b(static_cast<size_t>(m.size));
  EXPECT_TRUE(t.read(m.data_offset, b).ok());
  return b;
}

TarFile open_bytes(const tartest::TempDir& dir, const std::string& name, const Bytes& bytes) {
  tartest::write_file(dir / name, bytes);
  Result<TarFile> t = TarFile::open(dir / name);
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  return std::move(t).value();
}

std::vector<uint8_t> field(std::initializer_list<int> v) {
  std::vector<uint8_t> out;
  for (int x : v) out.push_back(static_cast<uint8_t>(x));
  return out;
}

TEST(TarNumber, OctalBase256AndInvalid) {
  auto num = [](const std::string& s) {
    std::vector<uint8_t> f(s.begin(), s.end());
    return parse_tar_number(f);
  };
  EXPECT_EQ(num("0000644\0"), 0644);
  EXPECT_EQ(num("   17 \0"), 017);
  EXPECT_EQ(num(std::string("00000001750\0", 12)), 01750);
  EXPECT_EQ(num(std::string("\0\0\0\0", 4)), 0);  // blank = 0 (Python nti)
  EXPECT_EQ(num("        "), 0);
  EXPECT_FALSE(num("0000008\0").has_value());  // 8 is not octal
  EXPECT_FALSE(num("12a4").has_value());
  EXPECT_FALSE(num("-17").has_value());
  EXPECT_FALSE(num("7777777777777777777777").has_value());  // > INT64_MAX
  EXPECT_EQ(parse_tar_number(field({0x80, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 1})), (int64_t{2} << 32) + 1);
  EXPECT_FALSE(parse_tar_number(field({0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe}))
                   .has_value());  // negative
  EXPECT_FALSE(parse_tar_number(field({0x81, 0, 0, 0})).has_value());
  EXPECT_FALSE(parse_tar_number(field({0x80, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}))
                   .has_value());  // > INT64_MAX
}

// Energon wrote <shard>.tar.idx by walking each tar with Python's tarfile; our grouping of our walk must give the
// identical u64 array for tars written by Python (GNU, PAX, USTAR formats) and by GNU tar (gnu, pax formats).
TEST(TarFixture, SampleOffsetsEqualEnergonTarIdx) {
  for (int k = 0; k < 5; ++k) {
    const std::string tar = kFixture + "/parts/shard-00" + std::to_string(k) + ".tar";
    SCOPED_TRACE(tar);
    Result<TarFile> t = TarFile::open(tar);
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    Result<std::vector<int64_t>> built = build_sample_offsets(t.value());
    ASSERT_TRUE(built.ok()) << built.status().to_string();
    Result<std::vector<int64_t>> energon = read_tar_index(tar + ".idx");
    ASSERT_TRUE(energon.ok()) << energon.status().to_string();
    EXPECT_EQ(built.value(), energon.value());
    EXPECT_GE(energon->size(), 4u);
  }
}

TEST(TarFixture, HeaderDialectsGiveFullNames) {
  const std::string long_dir =
      "deep/level00_directory_name/level01_directory_name/level02_directory_name/level03_directory_name/"
      "level04_directory_name/";
  auto names_of = [](const std::string& tar) {
    Result<TarFile> t = TarFile::open(tar);
    EXPECT_TRUE(t.ok());
    Result<std::vector<TarMember>> ms = walk(t.value());
    EXPECT_TRUE(ms.ok()) << ms.status().to_string();
    return ms.ok() ? ms.value() : std::vector<TarMember>{};
  };
  auto find = [](const std::vector<TarMember>& ms, const std::string& name) -> const TarMember* {
    for (const TarMember& m : ms)
      if (m.name == name) return &m;
    return nullptr;
  };
  // shard-000: Python GNU format: 'L' entries; the directory keeps no trailing slash.
  auto m0 = names_of(kFixture + "/parts/shard-000.tar");
  const TarMember* gnu_long = find(m0, long_dir + "s000001_long_key.jpg");
  ASSERT_NE(gnu_long, nullptr);
  EXPECT_EQ(gnu_long->data_offset - gnu_long->header_offset, 3 * 512);  // 'L' header + 1 block of name + own header
  const TarMember* dir = find(m0, "deep");
  ASSERT_NE(dir, nullptr);
  EXPECT_TRUE(dir->is_directory());
  EXPECT_NE(find(m0, "s000002.JPG"), nullptr);
  EXPECT_NE(find(m0, "__meta__/info.json"), nullptr);
  // shard-001: Python PAX: non-ASCII and long names through 'x' path=; the leading 'g' header is skipped.
  auto m1 = names_of(kFixture + "/parts/shard-001.tar");
  EXPECT_NE(find(m1, "caf\xc3\xa9_s000011.json"), nullptr);
  EXPECT_NE(find(m1, long_dir + "s000012_long_key.txt"), nullptr);
  EXPECT_EQ(m1.front().header_offset, 1024);
  // shard-002: USTAR prefix + name.
  auto m2 = names_of(kFixture + "/parts/shard-002.tar");
  const TarMember* prefixed = find(m2, long_dir + "s000021.json");
  ASSERT_NE(prefixed, nullptr);
  EXPECT_EQ(prefixed->data_offset - prefixed->header_offset, 512);
  // shard-003 / 004: GNU tar's gnu (././@LongLink) and pax (x path=) spellings of the same long names.
  auto m3 = names_of(kFixture + "/parts/shard-003.tar");
  EXPECT_NE(find(m3, long_dir + "s000031_with_a_long_key_for_gnu_tar.jpg"), nullptr);
  auto m4 = names_of(kFixture + "/parts/shard-004.tar");
  EXPECT_NE(find(m4, long_dir + "s000041_with_a_long_key_for_gnu_pax.txt"), nullptr);
  Result<TarFile> t4 = TarFile::open(kFixture + "/parts/shard-004.tar");
  ASSERT_TRUE(t4.ok());
  EXPECT_EQ(t4->first_member_offset(), 1024);
}

TEST(TarCrafted, PaxSizeAndPathOverrideTheHeader) {
  tartest::TempDir dir("tar_pax");
  Bytes t;
  const Bytes big = tartest::payload(1, 2, 1000);
  // The ustar size field says 0; the pax record says 1000 (how >8 GiB members are stored).
  tartest::append_pax(t, 'x', tartest::pax_record("size", "1000") + tartest::pax_record("path", "p/long.name.bin") +
                                  tartest::pax_record("mtime", "1700000000.5"));
  {
    tartest::Header sh;
    sh.name = "short.bin";
    Bytes h = tartest::header_block(sh);
    t.insert(t.end(), h.begin(), h.end());
    t.insert(t.end(), big.begin(), big.end());
    tartest::pad(t);
  }
  tartest::append_file(t, "after.txt", tartest::text("after"));
  tartest::finish(t);
  TarFile f = open_bytes(dir, "pax.tar", t);
  Result<std::vector<TarMember>> ms = walk(f);
  ASSERT_TRUE(ms.ok()) << ms.status().to_string();
  ASSERT_EQ(ms->size(), 2u);
  EXPECT_EQ(ms.value()[0].name, "p/long.name.bin");
  EXPECT_EQ(ms.value()[0].size, 1000);
  EXPECT_EQ(ms.value()[0].header_offset, 0);
  EXPECT_EQ(ms.value()[0].data_offset, 1536);  // x header + 1 block of records + own header
  EXPECT_EQ(content(f, ms.value()[0]), big);
  EXPECT_EQ(ms.value()[1].name, "after.txt");
  EXPECT_EQ(content(f, ms.value()[1]), tartest::text("after"));
}

TEST(TarCrafted, Base256SizeGnuLongNameChainAndSignedChecksum) {
  tartest::TempDir dir("tar_b256");
  Bytes t;
  const Bytes data = tartest::payload(3, 4, 777);
  const std::string long_name = std::string(150, 'n') + ".dat";
  tartest::append_gnu_long_name(t, long_name);
  tartest::append_pax(t, 'x', tartest::pax_record("comment", "chain"));  // 'L' then 'x' (no path=): 'L' name wins
  tartest::Header h;
  h.name = "truncated-name";
  h.size = static_cast<int64_t>(data.size());
  h.base256_size = true;
  h.magic = tartest::Magic::kGnu;
  tartest::append_raw(t, h, data);
  tartest::Header s;
  s.name = "caf\xc3\xa9.txt";  // bytes >= 0x80: signed and unsigned sums differ
  s.size = 3;
  s.signed_checksum = true;
  tartest::append_raw(t, s, tartest::text("abc"));
  tartest::finish(t);
  TarFile f = open_bytes(dir, "b256.tar", t);
  Result<std::vector<TarMember>> ms = walk(f);
  ASSERT_TRUE(ms.ok()) << ms.status().to_string();
  ASSERT_EQ(ms->size(), 2u);
  EXPECT_EQ(ms.value()[0].name, long_name);
  EXPECT_EQ(ms.value()[0].header_offset, 0);  // the first of its extension headers
  EXPECT_EQ(ms.value()[0].size, 777);
  EXPECT_EQ(content(f, ms.value()[0]), data);
  EXPECT_EQ(ms.value()[1].name, "caf\xc3\xa9.txt");
}

TEST(TarCrafted, GlobalHeadersApplyOnlyToMembersWithPaxHeaders) {
  // Python tarfile merges 'g' records only into members that carry their own 'x' header.
  tartest::TempDir dir("tar_g");
  Bytes t;
  tartest::append_pax(t, 'g', tartest::pax_record("path", "global/name.txt") + tartest::pax_record("comment", "c"));
  tartest::append_file(t, "plain.txt", tartest::text("p"));
  tartest::append_pax(t, 'x', tartest::pax_record("comment", "own"));
  tartest::append_file(t, "overridden.txt", tartest::text("o"));
  tartest::finish(t);
  TarFile f = open_bytes(dir, "g.tar", t);
  EXPECT_EQ(f.first_member_offset(), 1024);
  ASSERT_TRUE(f.leading_globals().path.has_value());
  EXPECT_EQ(*f.leading_globals().path, "global/name.txt");
  Result<std::vector<TarMember>> ms = walk(f);
  ASSERT_TRUE(ms.ok()) << ms.status().to_string();
  ASSERT_EQ(ms->size(), 2u);
  EXPECT_EQ(ms.value()[0].name, "plain.txt");
  EXPECT_EQ(ms.value()[0].header_offset, 1024);  // the 'g' header is not part of the member
  EXPECT_EQ(ms.value()[1].name, "global/name.txt");
  // A walk that starts mid-archive starts from the leading globals.
  TarPaxGlobals g = f.leading_globals();
  Result<std::optional<TarMember>> m = f.member_at(ms.value()[1].header_offset, g);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m.value()->name, "global/name.txt");
}

TEST(TarCrafted, TypesWithoutContentAndOldStyleDirectories) {
  tartest::TempDir dir("tar_types");
  Bytes t;
  tartest::Header sym;
  sym.name = "link";
  sym.type = '2';
  sym.size = 600;  // a size field on a symlink: Python does not skip content for it, nor do we
  Bytes b = tartest::header_block(sym);
  t.insert(t.end(), b.begin(), b.end());
  tartest::Header old_dir;
  old_dir.name = "olddir/";
  old_dir.type = '\0';
  b = tartest::header_block(old_dir);
  t.insert(t.end(), b.begin(), b.end());
  tartest::append_file(t, "x.txt", tartest::text("x"));
  tartest::finish(t);
  TarFile f = open_bytes(dir, "types.tar", t);
  Result<std::vector<TarMember>> ms = walk(f);
  ASSERT_TRUE(ms.ok()) << ms.status().to_string();
  ASSERT_EQ(ms->size(), 3u);
  EXPECT_EQ(ms.value()[0].size, 0);
  EXPECT_FALSE(ms.value()[0].is_regular());
  EXPECT_TRUE(ms.value()[1].is_directory());
  EXPECT_EQ(ms.value()[1].name, "olddir");
  EXPECT_EQ(ms.value()[2].name, "x.txt");
}

TEST(TarCrafted, EndOfArchiveForms) {
  tartest::TempDir dir("tar_end");
  TarFile empty = open_bytes(dir, "empty.tar", {});
  Result<std::vector<TarMember>> ms = walk(empty);
  ASSERT_TRUE(ms.ok());
  EXPECT_TRUE(ms->empty());
  Bytes t;
  tartest::append_file(t, "a.txt", tartest::text("abc"));  // no end-of-archive blocks: EOF ends it
  TarFile noend = open_bytes(dir, "noend.tar", t);
  ms = walk(noend);
  ASSERT_TRUE(ms.ok()) << ms.status().to_string();
  EXPECT_EQ(ms->size(), 1u);
}

// Every defect: a Status with the right code whose message names the file and the offset.
TEST(TarErrors, DefectsNameFileAndOffset) {
  tartest::TempDir dir("tar_err");
  auto expect_error = [&](const std::string& name, const Bytes& bytes, StatusCode code, const std::string& needle) {
    SCOPED_TRACE(name);
    tartest::write_file(dir / name, bytes);
    Result<TarFile> f = TarFile::open(dir / name);
    ASSERT_TRUE(f.ok());
    Result<std::vector<TarMember>> ms = walk(f.value());
    ASSERT_FALSE(ms.ok());
    EXPECT_EQ(ms.status().code(), code) << ms.status().to_string();
    EXPECT_NE(ms.status().message().find(dir / name), std::string::npos) << ms.status().message();
    EXPECT_NE(ms.status().message().find(needle), std::string::npos) << ms.status().message();
  };
  Bytes good;
  tartest::append_file(good, "a.txt", tartest::text("first"));
  const size_t second = good.size();
  tartest::append_file(good, "b.txt", tartest::payload(1, 1, 700));
  tartest::finish(good);

  Bytes bad_sum = good;
  bad_sum[second + 3] ^= 0x20;  // a name byte of the second header: checksum no longer matches
  expect_error("bad_sum.tar", bad_sum, StatusCode::kInvalidArgument, "bad header checksum at offset 1024");

  Bytes bad_size = good;
  {
    tartest::Header h;
    h.name = "b.txt";
    h.size = 700;
    Bytes blk = tartest::header_block(h);
    blk[126] = '9';  // non-octal digit, checksum recomputed so only the field is wrong
    std::memset(&blk[148], ' ', 8);
    int64_t sum = 0;
    for (uint8_t c : blk) sum += c;
    tartest::put_octal(&blk[148], 7, sum);
    std::copy(blk.begin(), blk.end(), bad_size.begin() + static_cast<std::ptrdiff_t>(second));
  }
  expect_error("bad_size.tar", bad_size, StatusCode::kInvalidArgument, "invalid size field");

  Bytes cut_header(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(second + 100));
  expect_error("cut_header.tar", cut_header, StatusCode::kIoError, "header at offset 1024");

  Bytes cut_content(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(second + 512 + 300));
  expect_error("cut_content.tar", cut_content, StatusCode::kIoError, "member 'b.txt' (header at offset 1024)");

  Bytes huge;
  tartest::append_pax(huge, 'x', tartest::pax_record("size", "999999999999999"));
  tartest::append_file(huge, "h.bin", tartest::text("h"));
  tartest::finish(huge);
  expect_error("huge.tar", huge, StatusCode::kIoError, "past the end of the file");

  Bytes bad_pax;
  tartest::append_pax(bad_pax, 'x', "13 path=abc\n");  // length says 13, the record has 12 bytes
  tartest::append_file(bad_pax, "p.txt", tartest::text("p"));
  tartest::finish(bad_pax);
  expect_error("bad_pax.tar", bad_pax, StatusCode::kInvalidArgument, "malformed pax record");

  Bytes dangling;
  tartest::append_gnu_long_name(dangling, "never.used");
  tartest::finish(dangling);
  expect_error("dangling.tar", dangling, StatusCode::kInvalidArgument, "followed by the end-of-archive block");

  Bytes dangling_eof;
  tartest::append_gnu_long_name(dangling_eof, "never.used");
  expect_error("dangling_eof.tar", dangling_eof, StatusCode::kIoError, "after an extension header");

  Result<TarFile> missing = TarFile::open(dir / "missing.tar");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kIoError);
  EXPECT_NE(missing.status().message().find(dir / "missing.tar"), std::string::npos);

  TarFile f = open_bytes(dir, "good.tar", good);
  Bytes out(10);
  Status s = f.read(f.file_size() - 5, out);
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  TarPaxGlobals g;
  EXPECT_EQ(f.member_at(100, g).status().code(), StatusCode::kInvalidArgument);  // not a block boundary
}

// Random single-byte corruptions and truncations of a real shard: every walk and every indexed read ends with a
// value or a Status (no crash, no hang, no runaway allocation).
TEST(TarErrors, CorruptionSweepNeverCrashes) {
  tartest::TempDir dir("tar_sweep");
  const Bytes orig = tartest::read_file(kFixture + "/parts/shard-000.tar");
  Result<std::vector<int64_t>> idx = read_tar_index(kFixture + "/parts/shard-000.tar.idx");
  ASSERT_TRUE(idx.ok());
  ASSERT_GT(orig.size(), 20000u);
  auto offsets = std::make_shared<const std::vector<int64_t>>(idx.value());
  uint64_t x = 0x1234567;
  int errors = 0, skips = 0;
  for (int trial = 0; trial < 300; ++trial) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    Bytes b = orig;
    const size_t pos = static_cast<size_t>((x >> 20) % 24000);  // inside the members
    if (trial % 10 == 9) {
      b.resize(pos);
    } else {
      b[pos] = static_cast<uint8_t>(x >> 8);
    }
    const std::string path = dir / "c.tar";
    tartest::write_file(path, b);
    Result<TarFile> f = TarFile::open(path);
    ASSERT_TRUE(f.ok());
    errors += !walk(f.value()).ok();
    Result<ShardReader> r = ShardReader::open(path, "c.tar", offsets);
    if (!r.ok()) {
      ++errors;
      continue;
    }
    for (int64_t i = 0; i < r->num_samples(); ++i) {
      Result<SampleRead> s = r->read(i);
      errors += !s.ok();
      skips += s.ok() && s->skipped();
    }
  }
  EXPECT_GT(errors + skips, 0);  // the sweep did hit headers
}

}  // namespace
