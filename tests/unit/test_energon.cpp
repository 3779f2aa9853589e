// Energon metadata without Python: brace expansion against python braceexpand, split.yaml (parts, brace patterns,
// shard and sample excludes) and .info.json against what Energon's own WebdatasetMeta/ShardInfosITarReader
// returned, dataset.yaml, the split.json/.info.yaml fallbacks, and every metadata defect as an error naming the file.
// Goldens: tests/fixtures/energon/ (tools/golden/make_energon_fixture.py). Run: ./build/<dir>/tests/test_energon
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "shard_test_util.hpp"
#include "vlpar/data/energon.hpp"
#include "vlpar/data/webdataset.hpp"

namespace {

using namespace vlpar;
using namespace vlpar::data;
namespace fs = std::filesystem;

const std::string kFixture = std::string(VLPAR_FIXTURES_DIR) + "/energon";

void write_text(const std::string& path, const std::string& s) {
  std::ofstream f(path, std::ios::trunc);
  f << s;
}

TEST(EnergonBraces, MatchPythonBraceexpand) {
  std::ifstream in(kFixture + "/expected_braces.txt");
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string pat;
    size_t count = 0;
    ls >> pat >> count;
    std::vector<std::string> want;
    for (std::string h; ls >> h;) want.push_back(tartest::unhex(h));
    ASSERT_EQ(want.size(), count);
    const std::string p = tartest::unhex(pat);
    Result<std::vector<std::string>> got = brace_expand(p);
    ASSERT_TRUE(got.ok()) << p << ": " << got.status().to_string();
    EXPECT_EQ(got.value(), want) << p;
    ++n;
  }
  EXPECT_GE(n, 25);
  for (const char* bad : {"{1{2,3}", "a}b", "{a,b"}) {
    Result<std::vector<std::string>> r = brace_expand(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("unbalanced braces"), std::string::npos);
  }
  EXPECT_FALSE(brace_expand("{0..99999999}").ok());  // refuses a runaway expansion instead of allocating it
}

// Both split configs and both parts: shard lists, counts and every sample equal Energon's reader; excluded samples
// are exactly the ones Energon's sample_filter dropped.
TEST(EnergonFixture, PartsAndSamplesEqualEnergon) {
  const std::vector<tartest::GoldenPart> parts = tartest::read_golden_samples(kFixture + "/expected_samples.txt");
  ASSERT_EQ(parts.size(), 4u);
  int excluded = 0, delivered = 0;
  for (const tartest::GoldenPart& p : parts) {
    SCOPED_TRACE(p.config + " " + p.part);
    EnergonOpenOptions opt;
    opt.split_part = p.part;
    opt.split_config = p.config;
    Result<EnergonDataset> ds = open_energon_dataset(kFixture, opt);
    ASSERT_TRUE(ds.ok()) << ds.status().to_string();
    EXPECT_EQ(ds->energon_version, "7.4.1");
    EXPECT_TRUE(ds->dataset_yaml.present);
    EXPECT_EQ(ds->dataset_yaml.module, "megatron.energon");
    EXPECT_EQ(ds->dataset_yaml.class_name, "CrudeWebdataset");
    ASSERT_EQ(ds->shards.size(), p.shards.size());
    for (size_t i = 0; i < p.shards.size(); ++i) {
      EXPECT_EQ(ds->shards[i].name, p.shards[i].first);
      EXPECT_EQ(ds->shards[i].num_samples, p.shards[i].second);
      EXPECT_EQ(ds->shards[i].path, (fs::path(kFixture) / p.shards[i].first).string());
    }
    EXPECT_EQ(ds->num_samples(), p.num_samples);
    ShardReadOptions keep_case;
    keep_case.lowercase_ext = false;
    size_t gi = 0;
    for (const EnergonShard& sh : ds->shards) {
      Result<ShardReader> r = ShardReader::open(sh.path, sh.name, sh.offsets, keep_case);
      ASSERT_TRUE(r.ok()) << r.status().to_string();
      for (int64_t i = 0; i < sh.num_samples; ++i, ++gi) {
        ASSERT_LT(gi, p.samples.size());
        const tartest::GoldenSample& g = p.samples[gi];
        Result<SampleRead> s = r->read(i);
        ASSERT_TRUE(s.ok()) << s.status().to_string();
        ASSERT_FALSE(s->skipped());
        EXPECT_EQ(g.shard, sh.name);
        EXPECT_EQ(g.index, i);
        EXPECT_EQ(ds->is_excluded(sh.name, s->sample.key), g.excluded) << sh.name << "/" << s->sample.key;
        if (g.excluded) {
          ++excluded;
          continue;
        }
        ++delivered;
        EXPECT_EQ(s->sample.key, g.key);
        ASSERT_EQ(s->sample.fields.size(), g.fields.size());
        for (size_t f = 0; f < g.fields.size(); ++f) {
          EXPECT_EQ(s->sample.fields[f].ext, g.fields[f].ext);
          EXPECT_EQ(tartest::fnv1a64(s->sample.fields[f].data), g.fields[f].fnv);
        }
      }
    }
    EXPECT_EQ(gi, p.samples.size());
  }
  // s000003, the long-key sample of shard 000 and s000030; "parts/shard-002.tar/s000021" excludes nothing, since
  // that sample's key is "deep/.../s000021" (keys keep their directories).
  EXPECT_EQ(excluded, 3);
  EXPECT_GT(delivered, 30);
}

TEST(EnergonFixture, ExcludeSemantics) {
  EnergonOpenOptions opt;
  opt.split_config = "split_exclude.yaml";
  opt.split_part = "val";
  Result<EnergonDataset> val = open_energon_dataset(kFixture, opt);
  ASSERT_TRUE(val.ok()) << val.status().to_string();
  ASSERT_EQ(val->shards.size(), 1u);  // parts/shard-00{4,1}.tar minus the excluded shard-001
  EXPECT_EQ(val->shards[0].name, "parts/shard-004.tar");
  EXPECT_TRUE(val->sample_excludes.count("parts/shard-002.tar/s000021"));
  EXPECT_TRUE(val->sample_excludes.count("parts/shard-003.tar/s000030"));
  EXPECT_TRUE(val->sample_excludes.count("parts/shard-003.tar/s000021"));  // product of both brace groups
  EXPECT_TRUE(val->is_excluded("parts/shard-000.tar", "s000003"));
  EXPECT_FALSE(val->is_excluded("parts/shard-000.tar", "s000004"));
}

class EnergonErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::copy(kFixture, dir_.path / "ds", fs::copy_options::recursive);
    root_ = dir_ / "ds";
  }
  std::string meta(const std::string& f) const { return root_ + "/.nv-meta/" + f; }
  Status open(const std::string& part = "train", const std::string& config = "split.yaml") const {
    EnergonOpenOptions opt;
    opt.split_part = part;
    opt.split_config = config;
    return open_energon_dataset(root_, opt).status();
  }
  void expect_error(const Status& s, StatusCode code, const std::string& a, const std::string& b = "") {
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.code(), code) << s.to_string();
    EXPECT_NE(s.message().find(a), std::string::npos) << s.message();
    EXPECT_NE(s.message().find(b), std::string::npos) << s.message();
  }
  tartest::TempDir dir_{"energon"};
  std::string root_;
};

TEST_F(EnergonErrors, MissingShardOrIndex) {
  fs::remove(root_ + "/parts/shard-002.tar");
  expect_error(open(), StatusCode::kIoError, root_ + "/parts/shard-002.tar", "cannot stat");
  EXPECT_TRUE(open("val").ok());  // the other part does not need it
  fs::remove(root_ + "/parts/shard-004.tar.idx");
  expect_error(open("val"), StatusCode::kIoError, root_ + "/parts/shard-004.tar.idx");
}

TEST_F(EnergonErrors, IndexDisagreesWithInfoOrTar) {
  const tartest::Bytes raw = tartest::read_file(meta(".info.json"));
  std::string info(raw.begin(), raw.end());
  const size_t at = info.find("\"parts/shard-000.tar\": 5");
  ASSERT_NE(at, std::string::npos);
  info.replace(at, 24, "\"parts/shard-000.tar\": 6");
  write_text(meta(".info.json"), info);
  expect_error(open(), StatusCode::kInvalidArgument, "shard-000.tar.idx", "dataset info says 6 samples");
  EXPECT_TRUE(open("val").ok());
  fs::resize_file(root_ + "/parts/shard-004.tar", 15000);  // idx end offset = 15360
  expect_error(open("val"), StatusCode::kInvalidArgument, "shard-004.tar.idx", "end offset 15360 is past the end");
}

TEST_F(EnergonErrors, SplitConfigDefects) {
  expect_error(open("test"), StatusCode::kInvalidArgument, "no split part 'test'", "it has: train, val");
  write_text(meta("bad1.yaml"), "split_parts:\n  train:\n    - parts/shard-009.tar\n");
  expect_error(open("train", "bad1.yaml"), StatusCode::kInvalidArgument, "bad1.yaml", "shard 'parts/shard-009.tar'");
  write_text(meta("bad2.yaml"), "split_parts:\n  train: [parts/shard-000.tar]\nexcludes: []\n");
  expect_error(open("train", "bad2.yaml"), StatusCode::kInvalidArgument, "bad2.yaml", "unknown key 'excludes'");
  write_text(meta("bad3.yaml"), "split_parts:\n  train: [parts/shard-000.tar\n");
  expect_error(open("train", "bad3.yaml"), StatusCode::kInvalidArgument, "bad3.yaml", "YAML syntax error");
  write_text(meta("bad4.yaml"), "split_parts:\n  train: ['parts/shard-{000..001.tar']\n");
  expect_error(open("train", "bad4.yaml"), StatusCode::kInvalidArgument, "bad4.yaml", "unbalanced braces");
  write_text(meta("bad5.yaml"), "split_parts:\n  train: [parts/shard-000.tar]\nexclude: [parts/shard-000.tar]\n");
  expect_error(open("train", "bad5.yaml"), StatusCode::kInvalidArgument, "bad5.yaml", "has no shards");
  expect_error(open("train", "absent.yaml"), StatusCode::kIoError, "absent.yaml");
  write_text(meta("dataset.yaml"), "field_map: {image: jpg}\n");
  expect_error(open(), StatusCode::kInvalidArgument, "dataset.yaml", "names no dataset class");
}

TEST_F(EnergonErrors, FallbacksAndOptionalFiles) {
  fs::remove(meta("split.yaml"));
  write_text(meta("split.json"),
             "{\"split_parts\": {\"train\": [\"parts/shard-{000..001}.tar\"], \"val\": []}, \"exclude\": []}");
  fs::remove(meta(".info.json"));
  write_text(meta(".info.yaml"),
             "energon_version: 6.0.0\nshard_counts:\n  parts/shard-000.tar: 5\n  parts/shard-001.tar: 4\n");
  fs::remove(meta("dataset.yaml"));
  EnergonOpenOptions opt;
  Result<EnergonDataset> ds = open_energon_dataset(root_, opt);
  ASSERT_TRUE(ds.ok()) << ds.status().to_string();
  EXPECT_FALSE(ds->dataset_yaml.present);
  EXPECT_EQ(ds->energon_version, "6.0.0");
  ASSERT_EQ(ds->shards.size(), 2u);
  EXPECT_EQ(ds->num_samples(), 9);
  opt.split_part = "val";
  expect_error(open_energon_dataset(root_, opt).status(), StatusCode::kInvalidArgument, "has no shards");
  fs::remove(meta(".info.yaml"));
  expect_error(open(), StatusCode::kIoError, "no dataset info");
  fs::remove_all(root_ + "/.nv-meta");
  expect_error(open(), StatusCode::kIoError, "no .nv-meta directory");
}

}  // namespace
