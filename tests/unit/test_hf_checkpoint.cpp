// HF checkpoint directories: huggingface_hub's shard split, the golden sharded directory (bit-exact reads,
// byte-identical writes of every shard and of the index), single-file layout, stale-file cleanup, and the index
// defects (each message names the file and the defect).
// Golden directory: tests/fixtures/safetensors/sharded/ (tools/golden/make_safetensors_fixtures.py).
// Run: ctest --test-dir build/cpu -R HfCheckpoint
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "vlpar/io/hf_checkpoint.hpp"

namespace vlpar::io {
namespace {

namespace fs = std::filesystem;

const std::string kSharded = std::string(VLPAR_FIXTURES_DIR) + "/safetensors/sharded";

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

std::vector<std::string> listing(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = (fs::temp_directory_path() /
             fmt::format("vlpar_hf_{}_{}_{}", ::getpid(), info->test_suite_name(), info->name())).string();
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// ---- shard plan ----------------------------------------------------------------------------------------------------

std::vector<std::vector<size_t>> plan(std::vector<uint64_t> sizes, uint64_t max) { return plan_hf_shards(sizes, max); }
using Plan = std::vector<std::vector<size_t>>;

TEST(HfCheckpointPlan, MatchesHuggingfaceHubSplit) {
  // Expected values printed by huggingface_hub 0.36.2 split_state_dict_into_shards_factory on the same sizes.
  EXPECT_EQ(plan({6, 10, 30, 2, 2}, 10), (Plan{{0}, {2}, {1}, {3, 4}}));
  EXPECT_EQ(plan({6, 10, 30, 2, 2}, 100), (Plan{{0, 1, 2, 3, 4}}));
  EXPECT_EQ(plan({0, 0, 5, 0, 5, 0}, 5), (Plan{{0, 1, 2, 3}, {4, 5}}));
  EXPECT_EQ(plan({11, 3, 11, 3}, 10), (Plan{{0}, {2}, {1, 3}}));
  EXPECT_EQ(plan({}, 10), Plan{});
}

// ---- golden sharded directory ------------------------------------------------------------------------------------

// The fixture's tensors, recomputed here as torch computed them (float32 arithmetic, RNE to bf16/f16).
struct Golden {
  std::vector<float> a, c, f;
  std::vector<bf16> b;
  std::vector<int64_t> d;
  std::vector<f16> e;
  Golden() {
    for (int i = 0; i < 10; ++i) a.push_back(float(i) * 0.5f);
    for (int i = 0; i < 20; ++i) b.push_back(float_to_bf16(float(i) - 7.25f));
    for (int i = 0; i < 40; ++i) c.push_back(float(i) / 3.0f);
    d = {1, -2, 3, int64_t(1) << 50};
    for (int i = 0; i < 8; ++i) e.push_back(float_to_f16(float(i) / 7.0f));
    f = {9.0f, -8.0f, 7.5f};
  }
  std::vector<NamedTensor> tensors() {  // in the fixture's state-dict order
    return {{"a", TensorView(a.data(), DType::kF32, Shape{10})}, {"b", TensorView(b.data(), DType::kBF16, Shape{20})},
            {"c", TensorView(c.data(), DType::kF32, Shape{40})}, {"d", TensorView(d.data(), DType::kI64, Shape{4})},
            {"e", TensorView(e.data(), DType::kF16, Shape{8})},  {"f", TensorView(f.data(), DType::kF32, Shape{3})}};
  }
};

TEST(HfCheckpointGolden, ReadsShardedReferenceDirectory) {
  auto src = HfTensorSource::open(kSharded);
  ASSERT_TRUE(src.ok()) << src.status().to_string();
  EXPECT_TRUE(src->sharded());
  EXPECT_EQ(src->files().size(), 3u);
  EXPECT_EQ(src->names(), (std::vector<std::string>{"a", "b", "c", "d", "e", "f"}));
  ASSERT_NE(src->file_of("c"), nullptr);
  EXPECT_TRUE(src->file_of("c")->ends_with("/model-00001-of-00003.safetensors"));  // the oversize tensor's own shard
  EXPECT_TRUE(src->file_of("a")->ends_with("/model-00002-of-00003.safetensors"));
  EXPECT_TRUE(src->file_of("f")->ends_with("/model-00003-of-00003.safetensors"));
  EXPECT_EQ(src->find("zz"), nullptr);
  EXPECT_EQ(src->file_of("zz"), nullptr);
  Golden g;
  for (const NamedTensor& t : g.tensors()) {
    SCOPED_TRACE(t.name);
    const TensorInfo* info = src->find(t.name);
    ASSERT_NE(info, nullptr);
    EXPECT_EQ(info->dtype, t.view.dtype);
    EXPECT_TRUE(info->shape == t.view.shape);
    std::vector<std::byte> out(t.view.nbytes());
    ASSERT_TRUE(src->read(t.name, TensorView(out.data(), t.view.dtype, t.view.shape)).ok());
    EXPECT_EQ(std::memcmp(out.data(), t.view.data, out.size()), 0) << "not bit-exact";
  }
}

TEST(HfCheckpointGolden, WritesReferenceDirectoryByteForByte) {
  Golden g;
  const auto tensors = g.tensors();
  TempDir tmp;
  ASSERT_TRUE(write_hf_safetensors(tmp.path(), tensors, 100).ok());
  const auto ref_files = listing(kSharded);
  ASSERT_EQ(ref_files.size(), 4u);
  EXPECT_EQ(listing(tmp.path()), ref_files);
  for (const std::string& f : ref_files) {
    SCOPED_TRACE(f);
    const std::string ours = read_bytes(tmp.file(f)), ref = read_bytes(kSharded + "/" + f);
    ASSERT_FALSE(ref.empty());
    EXPECT_TRUE(ours == ref) << "ours:\n" << (f.ends_with(".json") ? ours : ours.substr(8, 160)) << "\nref:\n"
                             << (f.ends_with(".json") ? ref : ref.substr(8, 160));
  }
}

// ---- layouts and cleanup -------------------------------------------------------------------------------------------

TEST(HfCheckpointWrite, SingleFileWhenItFitsAndStaleFilesRemoved) {
  Golden g;
  const auto tensors = g.tensors();
  TempDir tmp;
  write_text(tmp.file("config.json"), "{}");  // not ours: must survive every save
  // 1) sharded save (3 shards), 2) single-file save over it, 3) sharded again with another shard count.
  ASSERT_TRUE(write_hf_safetensors(tmp.path(), tensors, 100).ok());
  ASSERT_TRUE(write_hf_safetensors(tmp.path(), tensors).ok());
  EXPECT_EQ(listing(tmp.path()), (std::vector<std::string>{"config.json", "model.safetensors"}));
  {
    auto src = HfTensorSource::open(tmp.path());
    ASSERT_TRUE(src.ok()) << src.status().to_string();
    EXPECT_FALSE(src->sharded());
    EXPECT_EQ(src->names().size(), 6u);
    std::vector<int64_t> d(4);
    ASSERT_TRUE(src->read("d", TensorView(d.data(), DType::kI64, Shape{4})).ok());
    EXPECT_EQ(d, g.d);
  }
  ASSERT_TRUE(write_hf_safetensors(tmp.path(), tensors, 200).ok());  // [a,b,c]=240 > 200: splits differently
  const auto files = listing(tmp.path());
  EXPECT_EQ(std::count(files.begin(), files.end(), "model.safetensors"), 0);
  EXPECT_EQ(std::count(files.begin(), files.end(), "config.json"), 1);
  auto src = HfTensorSource::open(tmp.path());
  ASSERT_TRUE(src.ok()) << src.status().to_string();
  EXPECT_TRUE(src->sharded());
  for (const std::string& f : files)
    if (f.starts_with("model-")) {
      EXPECT_TRUE(f.ends_with(fmt::format("-of-{:05d}.safetensors", src->files().size()))) << f;
    }
  EXPECT_EQ(files.size(), src->files().size() + 2);  // shards + index + config.json
  for (const NamedTensor& t : tensors) {
    std::vector<std::byte> out(t.view.nbytes());
    ASSERT_TRUE(src->read(t.name, TensorView(out.data(), t.view.dtype, t.view.shape)).ok()) << t.name;
    EXPECT_EQ(std::memcmp(out.data(), t.view.data, out.size()), 0) << t.name;
  }
}

TEST(HfCheckpointWrite, OversizeSingleTensorIsOneFile) {
  std::vector<float> big(64, 1.5f);
  const NamedTensor t{"big", TensorView(big.data(), DType::kF32, Shape{64})};
  TempDir tmp;
  ASSERT_TRUE(write_hf_safetensors(tmp.path(), std::span(&t, 1), 16).ok());
  EXPECT_EQ(listing(tmp.path()), std::vector<std::string>{"model.safetensors"});
}

TEST(HfCheckpointWrite, DuplicateNamesWriteNothing) {
  float v[2] = {1, 2};
  const NamedTensor ts[] = {{"x", TensorView(v, DType::kF32, Shape{2})}, {"x", TensorView(v, DType::kF32, Shape{2})}};
  TempDir tmp;
  const std::string dir = tmp.file("ckpt");
  const Status s = write_hf_safetensors(dir, ts, 4);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("duplicate tensor name 'x'"), std::string::npos) << s.message();
  EXPECT_FALSE(fs::exists(dir));
}

// ---- index defects -------------------------------------------------------------------------------------------------

// A copy of the golden sharded directory to damage.
class HfCheckpointDefects : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const auto& e : fs::directory_iterator(kSharded)) fs::copy_file(e.path(), tmp_.file(e.path().filename().string()));
    index_ = tmp_.file("model.safetensors.index.json");
    ASSERT_TRUE(HfTensorSource::open(tmp_.path()).ok());
  }
  void expect_error(const std::string& needle, const std::string& defect) {
    auto r = HfTensorSource::open(tmp_.path());
    ASSERT_FALSE(r.ok()) << "accepted: " << defect;
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find(defect), std::string::npos) << r.status().message();
  }
  TempDir tmp_;
  std::string index_;
};

TEST_F(HfCheckpointDefects, IndexNotJson) {
  write_text(index_, "{\"weight_map\": {");
  expect_error(index_, "is not valid JSON");
}

TEST_F(HfCheckpointDefects, IndexWithoutWeightMap) {
  write_text(index_, R"({"metadata": {"total_size": 300}})");
  expect_error(index_, "has no weight_map");
  write_text(index_, R"({"weight_map": ["a"]})");
  expect_error(index_, "weight_map is a array, not an object");
  write_text(index_, R"({"weight_map": {"a": 1}})");
  expect_error(index_, "weight_map['a'] is a number");
}

TEST_F(HfCheckpointDefects, ShardFileMissing) {
  fs::remove(tmp_.file("model-00002-of-00003.safetensors"));
  expect_error(index_, "lists shard 'model-00002-of-00003.safetensors', which is missing");
}

TEST_F(HfCheckpointDefects, TensorAbsentFromItsShard) {
  write_text(index_, R"({"weight_map": {"a": "model-00002-of-00003.safetensors", "c": "model-00002-of-00003.safetensors"}})");
  expect_error(index_, "maps tensor 'c' to '" + tmp_.file("model-00002-of-00003.safetensors") + "', but that shard has no such tensor");
}

TEST_F(HfCheckpointDefects, ShardOutsideDirectory) {
  write_text(index_, R"({"weight_map": {"a": "../model-00002-of-00003.safetensors"}})");
  expect_error(index_, "is not a file inside the directory");
}

TEST_F(HfCheckpointDefects, CorruptShard) {
  const std::string shard = tmp_.file("model-00003-of-00003.safetensors");
  std::string bytes = read_bytes(shard);
  bytes.pop_back();
  write_text(shard, bytes);
  expect_error(shard, "truncated");
}

TEST_F(HfCheckpointDefects, NeitherIndexNorSingleFile) {
  for (const auto& e : fs::directory_iterator(tmp_.path())) fs::remove(e.path());
  expect_error(tmp_.path(), "has neither model.safetensors.index.json nor model.safetensors");
  auto r = HfTensorSource::open(tmp_.file("nope"));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("is not a directory"), std::string::npos) << r.status().message();
}

TEST_F(HfCheckpointDefects, ReadErrorsNameTheShard) {
  auto src = HfTensorSource::open(tmp_.path());
  ASSERT_TRUE(src.ok()) << src.status().to_string();
  float buf[40];
  Status s = src->read("c", TensorView(buf, DType::kF32, Shape{4, 10}));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("model-00001-of-00003.safetensors"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("[40]"), std::string::npos) << s.message();
  s = src->read("zz", TensorView(buf, DType::kF32, Shape{1}));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("has no tensor 'zz'"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find(tmp_.path()), std::string::npos) << s.message();
}

}  // namespace
}  // namespace vlpar::io
