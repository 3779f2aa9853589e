// WebDataset layer: the name rule against Energon's own regexes, sample reads through Energon's .tar.idx against
// what Energon's reader returned (tests/fixtures/energon/expected_*.txt), .tar.idx I/O, and the corrupt-data
// contract: a corrupt member is a counted skip carrying the key; an idx that disagrees with the tar, truncation
// and I/O failures are errors naming the shard and the offset.
// Run: ./build/<dir>/tests/test_webdataset
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "shard_test_util.hpp"
#include "vlpar/data/webdataset.hpp"

namespace {

using namespace vlpar;
using namespace vlpar::data;
using tartest::Bytes;

const std::string kFixture = std::string(VLPAR_FIXTURES_DIR) + "/energon";

std::string lower(std::string s) {
  for (char& c : s)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return s;
}

void expect_matches(const Sample& s, const tartest::GoldenSample& g, bool lowercase) {
  SCOPED_TRACE(g.shard + " #" + std::to_string(g.index) + " " + g.key);
  EXPECT_EQ(s.shard, g.shard);
  EXPECT_EQ(s.index_in_shard, g.index);
  EXPECT_EQ(s.key, g.key);
  ASSERT_EQ(s.fields.size(), g.fields.size());
  for (size_t i = 0; i < g.fields.size(); ++i) {
    EXPECT_EQ(s.fields[i].ext, lowercase ? lower(g.fields[i].ext) : g.fields[i].ext);
    EXPECT_EQ(static_cast<int64_t>(s.fields[i].data.size()), g.fields[i].size);
    EXPECT_EQ(tartest::fnv1a64(s.fields[i].data), g.fields[i].fnv);
  }
}

// Header offset of the member called `name` in a tar (for targeted corruptions).
int64_t header_of(const std::string& tar, const std::string& name, bool data_header = false) {
  Result<TarFile> t = TarFile::open(tar);
  EXPECT_TRUE(t.ok());
  TarPaxGlobals g;
  for (int64_t off = 0;;) {
    Result<std::optional<TarMember>> m = t->member_at(off, g);
    EXPECT_TRUE(m.ok());
    if (!m.ok() || !m.value()) break;
    if (m.value()->name == name) return data_header ? m.value()->data_offset - 512 : m.value()->header_offset;
    off = m.value()->next_offset;
  }
  ADD_FAILURE() << name << " not in " << tar;
  return -1;
}

TEST(WebdatasetNames, MatchEnergonRegexes) {
  std::ifstream in(kFixture + "/expected_names.txt");
  std::string name, key, ext;
  int n = 0;
  while (in >> name >> key >> ext) {
    ++n;
    const std::string nm = tartest::unhex(name);
    SCOPED_TRACE(nm);
    if (key == "meta") {
      EXPECT_TRUE(is_meta_member(nm));
      continue;
    }
    EXPECT_FALSE(is_meta_member(nm));
    const std::optional<MemberName> s = split_member_name(nm);
    if (key == "-") {
      EXPECT_FALSE(s.has_value()) << s->key << " | " << s->ext;
    } else {
      ASSERT_TRUE(s.has_value());
      EXPECT_EQ(s->key, tartest::unhex(key));
      EXPECT_EQ(s->ext, tartest::unhex(ext));
    }
  }
  EXPECT_GE(n, 20);
}

// Every sample of every fixture shard, read through Energon's .tar.idx, equals what Energon's reader returned
// (keys, extensions in Energon's case, sizes, content hashes); with lowercase_ext (the default), extensions are
// lower-cased and nothing else changes. The same with offsets built by our own header scan.
TEST(WebdatasetFixture, SamplesEqualEnergonReader) {
  const std::vector<tartest::GoldenPart> parts = tartest::read_golden_samples(kFixture + "/expected_samples.txt");
  ASSERT_EQ(parts.size(), 4u);
  int checked = 0;
  for (const tartest::GoldenPart& p : parts) {
    if (p.config != "split.yaml") continue;  // split.yaml train + val = all five shards, nothing excluded
    for (const auto& [shard, count] : p.shards) {
      Result<std::vector<int64_t>> idx = read_tar_index(kFixture + "/" + shard + ".idx");
      ASSERT_TRUE(idx.ok()) << idx.status().to_string();
      auto offsets = std::make_shared<const std::vector<int64_t>>(idx.value());
      for (int mode = 0; mode < 3; ++mode) {
        ShardReadOptions opt;
        opt.lowercase_ext = mode != 0;
        Result<ShardReader> r =
            ShardReader::open(kFixture + "/" + shard, shard, mode == 2 ? nullptr : offsets, opt);
        ASSERT_TRUE(r.ok()) << r.status().to_string();
        ASSERT_EQ(r->num_samples(), count);
        EXPECT_EQ(*r->offsets(), *offsets);
        for (const tartest::GoldenSample& g : p.samples) {
          if (g.shard != shard) continue;
          Result<SampleRead> s = r->read(g.index);
          ASSERT_TRUE(s.ok()) << s.status().to_string();
          ASSERT_FALSE(s->skipped()) << s->skip_reason;
          expect_matches(s->sample, g, opt.lowercase_ext);
          checked += mode == 0;
        }
      }
    }
  }
  EXPECT_EQ(checked, 19);
}

TEST(WebdatasetFixture, FieldFilterAndLookup) {
  ShardReadOptions opt;
  opt.only_ext = {"JPG", "png"};  // lower-cased like the extensions
  Result<ShardReader> r = ShardReader::open(kFixture + "/parts/shard-000.tar", "s0", nullptr, opt);
  ASSERT_TRUE(r.ok());
  Result<SampleRead> s = r->read(2);  // s000002: .JPG (511 B), .txt (0 B), .seg.mask.png (512 B)
  ASSERT_TRUE(s.ok());
  ASSERT_EQ(s->sample.fields.size(), 1u);
  EXPECT_EQ(s->sample.fields[0].ext, "jpg");
  EXPECT_EQ(s->sample.num_bytes(), 511);
  opt.only_ext = {};
  r = ShardReader::open(kFixture + "/parts/shard-000.tar", "s0", nullptr, opt);
  s = r->read(2);
  ASSERT_TRUE(s.ok());
  ASSERT_NE(s->sample.field("seg.mask.png"), nullptr);
  EXPECT_EQ(s->sample.field("seg.mask.png")->data.size(), 512u);
  ASSERT_NE(s->sample.field("txt"), nullptr);
  EXPECT_TRUE(s->sample.field("txt")->data.empty());
  EXPECT_EQ(s->sample.field("json"), nullptr);
  EXPECT_EQ(r->read(5).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r->read(-1).status().code(), StatusCode::kInvalidArgument);
}

TEST(WebdatasetIndex, WriteReadRoundTripIsByteIdenticalToEnergon) {
  tartest::TempDir dir("wds_idx");
  for (int k = 0; k < 5; ++k) {
    const std::string tar = kFixture + "/parts/shard-00" + std::to_string(k) + ".tar";
    Result<TarFile> t = TarFile::open(tar);
    ASSERT_TRUE(t.ok());
    Result<std::vector<int64_t>> built = build_sample_offsets(t.value());
    ASSERT_TRUE(built.ok());
    const std::string out = dir / fmt::format("s{}.tar.idx", k);
    ASSERT_TRUE(write_tar_index(out, built.value()).ok());
    EXPECT_EQ(tartest::read_file(out), tartest::read_file(tar + ".idx")) << tar;
    Result<std::vector<int64_t>> back = read_tar_index(out);
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(back.value(), built.value());
  }
}

TEST(WebdatasetIndex, MalformedIndexesAreErrors) {
  tartest::TempDir dir("wds_badidx");
  tartest::write_file(dir / "odd.idx", Bytes(12, 0));
  EXPECT_EQ(read_tar_index(dir / "odd.idx").status().code(), StatusCode::kInvalidArgument);
  tartest::write_file(dir / "empty.idx", {});
  EXPECT_EQ(read_tar_index(dir / "empty.idx").status().code(), StatusCode::kInvalidArgument);
  Result<std::vector<int64_t>> missing = read_tar_index(dir / "missing.idx");
  EXPECT_EQ(missing.status().code(), StatusCode::kIoError);
  EXPECT_NE(missing.status().message().find("missing.idx"), std::string::npos);
  Bytes neg(8, 0xff);
  tartest::write_file(dir / "neg.idx", neg);
  EXPECT_EQ(read_tar_index(dir / "neg.idx").status().code(), StatusCode::kInvalidArgument);

  auto msg = [](const std::vector<int64_t>& o, int64_t size, int64_t n) {
    Status s = validate_sample_offsets(o, size, n, "idx X");
    EXPECT_FALSE(s.ok());
    EXPECT_NE(s.message().find("idx X"), std::string::npos);
    return s.message();
  };
  EXPECT_TRUE(validate_sample_offsets(std::vector<int64_t>{0, 1024, 2048}, 4096, 2, "ok").ok());
  EXPECT_NE(msg({0, 1024, 1024}, 4096, -1).find("entry 2 (byte 16)"), std::string::npos);
  EXPECT_NE(msg({0, 1000, 2048}, 4096, -1).find("not a multiple of 512"), std::string::npos);
  EXPECT_NE(msg({0, 1024, 8192}, 4096, -1).find("past the end of the tar"), std::string::npos);
  EXPECT_NE(msg({0, 1024, 2048}, 4096, 3).find("dataset info says 3"), std::string::npos);
  EXPECT_NE(msg({}, 4096, -1).find("no entries"), std::string::npos);
}

// A corrupt member header inside a sample: the sample is skipped with its key and the reason; the other samples
// of the shard read normally.
TEST(WebdatasetCorrupt, CorruptMemberIsASkipWithItsKey) {
  tartest::TempDir dir("wds_corrupt");
  const std::string src = kFixture + "/parts/shard-000.tar";
  Bytes b = tartest::read_file(src);
  const int64_t json0 = header_of(src, "s000000.json");
  const int64_t jpg3 = header_of(src, "s000003.jpg");
  b[static_cast<size_t>(json0) + 2] ^= 0x01;  // name byte: checksum mismatch, magic intact
  b[static_cast<size_t>(jpg3) + 1] ^= 0x01;   // the FIRST header of sample 3
  tartest::write_file(dir / "c.tar", b);
  Result<std::vector<int64_t>> idx = read_tar_index(src + ".idx");
  ASSERT_TRUE(idx.ok());
  Result<ShardReader> r =
      ShardReader::open(dir / "c.tar", "parts/c.tar", std::make_shared<const std::vector<int64_t>>(idx.value()));
  ASSERT_TRUE(r.ok());
  Result<SampleRead> s0 = r->read(0);
  ASSERT_TRUE(s0.ok()) << s0.status().to_string();
  ASSERT_TRUE(s0->skipped());
  EXPECT_EQ(s0->sample.key, "s000000");
  EXPECT_TRUE(s0->sample.fields.empty());
  EXPECT_NE(s0->skip_reason.find("key 's000000'"), std::string::npos) << s0->skip_reason;
  EXPECT_NE(s0->skip_reason.find("bad header checksum at offset " + std::to_string(json0)), std::string::npos)
      << s0->skip_reason;
  EXPECT_NE(s0->skip_reason.find(dir / "c.tar"), std::string::npos);
  Result<SampleRead> s3 = r->read(3);
  ASSERT_TRUE(s3.ok()) << s3.status().to_string();
  ASSERT_TRUE(s3->skipped());
  EXPECT_NE(s3->skip_reason.find("key unknown"), std::string::npos) << s3->skip_reason;
  for (int64_t i : {1, 2, 4}) {
    Result<SampleRead> s = r->read(i);
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    EXPECT_FALSE(s->skipped()) << s->skip_reason;
  }
}

TEST(WebdatasetCorrupt, DuplicateExtensionIsASkip) {
  tartest::TempDir dir("wds_dup");
  Bytes t;
  tartest::append_file(t, "a.jpg", tartest::text("lower"));
  tartest::append_file(t, "a.JPG", tartest::text("upper"));
  tartest::append_file(t, "b.jpg", tartest::text("b"));
  tartest::finish(t);
  tartest::write_file(dir / "dup.tar", t);
  Result<ShardReader> r = ShardReader::open(dir / "dup.tar", "dup.tar");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ(r->num_samples(), 2);
  Result<SampleRead> s = r->read(0);
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE(s->skipped());
  EXPECT_NE(s->skip_reason.find("key 'a'"), std::string::npos);
  EXPECT_NE(s->skip_reason.find("extension 'jpg' twice"), std::string::npos) << s->skip_reason;
  ShardReadOptions keep_case;
  keep_case.lowercase_ext = false;  // Energon's rule: "jpg" and "JPG" are different fields
  r = ShardReader::open(dir / "dup.tar", "dup.tar", nullptr, keep_case);
  ASSERT_TRUE(r.ok());
  s = r->read(0);
  ASSERT_TRUE(s.ok());
  EXPECT_FALSE(s->skipped());
  EXPECT_EQ(s->sample.fields.size(), 2u);
}

// Offsets that disagree with the tar are errors (not skips) naming the shard and the offset.
TEST(WebdatasetCorrupt, IndexDisagreeingWithTarIsAnError) {
  tartest::TempDir dir("wds_disagree");
  tartest::write_file(dir / "s.tar", tartest::make_shard(0, 4));
  Result<TarFile> t = TarFile::open(dir / "s.tar");
  ASSERT_TRUE(t.ok());
  Result<std::vector<int64_t>> good = build_sample_offsets(t.value());
  ASSERT_TRUE(good.ok());
  ASSERT_EQ(good->size(), 5u);
  auto read_with = [&](std::vector<int64_t> offsets, int64_t i) {
    Result<ShardReader> r =
        ShardReader::open(dir / "s.tar", "s.tar", std::make_shared<const std::vector<int64_t>>(std::move(offsets)));
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    Result<SampleRead> s = r->read(i);
    EXPECT_FALSE(s.ok());
    EXPECT_NE(s.status().message().find(dir / "s.tar"), std::string::npos) << s.status().message();
    EXPECT_NE(s.status().message().find("index disagrees with the tar"), std::string::npos) << s.status().message();
    return s.status().message();
  };
  std::vector<int64_t> merged = good.value();
  merged.erase(merged.begin() + 1);  // samples 0 and 1 in one span
  EXPECT_NE(read_with(merged, 0).find("holds key 's0_0' and, at offset " + std::to_string(good.value()[1]) +
                                      ", key 's0_1'"),
            std::string::npos);
  std::vector<int64_t> mid = good.value();
  mid[1] = 1024;  // inside s0_0.jpg's content
  EXPECT_NE(read_with(mid, 0).find("past the end of sample 0"), std::string::npos);
  EXPECT_NE(read_with(mid, 1).find("starts at offset 1024, where there is no tar header"), std::string::npos);
  std::vector<int64_t> past_end = good.value();
  past_end[4] = past_end[4] + 512;  // the end offset points into the end-of-archive blocks
  EXPECT_NE(read_with(past_end, 3).find("end of archive at offset"), std::string::npos);
}

// The shard shrinks after the reader opened it: pread sees the short file, the read is an error, not a SIGBUS.
TEST(WebdatasetCorrupt, TruncatedAfterOpenIsAnIoError) {
  tartest::TempDir dir("wds_trunc");
  tartest::write_file(dir / "s.tar", tartest::make_shard(1, 6));
  Result<ShardReader> r = ShardReader::open(dir / "s.tar", "s.tar");
  ASSERT_TRUE(r.ok());
  std::filesystem::resize_file(dir / "s.tar", 3000);
  Result<SampleRead> s = r->read(5);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kIoError);
  EXPECT_NE(s.status().message().find(dir / "s.tar"), std::string::npos);
  // Reopening validates the offsets against the new size.
  Result<ShardReader> again = ShardReader::open(dir / "s.tar", "s.tar", r->offsets());
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.status().message().find("past the end of the tar"), std::string::npos);
}

}  // namespace
