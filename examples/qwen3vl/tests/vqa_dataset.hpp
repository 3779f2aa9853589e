#pragma once
// A synthetic VQA dataset for the example's tests: Energon split parts "train" (n_train samples + one truncated
// JPEG that the loader must skip and count) and "val", each sample "<image>\nWhich half of the picture is brighter,
// left or right?" over a noisy image of random size (64–128 px) whose named half is brighter by ~60 levels, so the
// answer is in the pixels only. Deterministic (seed 42): every process that builds it gets the same bytes.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <random>
#include <string>

#include <nlohmann/json.hpp>

#include "vlpar/data/image_encode.hpp"
#include "vlpar/data/webdataset_writer.hpp"

namespace qwen3vl::test {

namespace data = vlpar::data;

inline const std::string kTokenizer = std::string(VLPAR_FIXTURES_DIR) + "/tokenizer/tokenizer.json";
inline const std::string kDemoModel = std::string(VLPAR_FIXTURES_DIR) + "/../../examples/qwen3vl/configs/demo_model.json";

// A W×H image whose `bright_left` half is brighter by ~60 levels, with per-pixel noise and a random tint.
inline data::Image half_bright(int64_t w, int64_t h, bool bright_left, std::mt19937_64& rng) {
  data::Image im = data::Image::zeros(w, h);
  std::uniform_int_distribution<int> base(40, 150), noise(-25, 25), tint(-20, 20);
  const int b = base(rng), tr = tint(rng), tg = tint(rng), tb = tint(rng);
  for (int64_t y = 0; y < h; ++y)
    for (int64_t x = 0; x < w; ++x) {
      const bool left = x < w / 2;
      const int v = b + (left == bright_left ? 60 : 0) + noise(rng);
      const int c[3] = {v + tr, v + tg, v + tb};
      for (int k = 0; k < 3; ++k) im.rgb[size_t((y * w + x) * 3 + k)] = uint8_t(std::clamp(c[k], 0, 255));
    }
  return im;
}

inline data::WdsSample vqa_sample(const std::string& key, std::mt19937_64& rng) {
  std::uniform_int_distribution<int64_t> side(64, 128);
  const bool left = rng() % 2 == 0;
  const data::Image im = half_bright(side(rng), side(rng), left, rng);
  nlohmann::json rec = {{"question_type", "brighter_lr"},
                        {"conversations",
                         {{{"from", "human"}, {"value", "<image>\nWhich half of the picture is brighter, left or right?"}},
                          {{"from", "gpt"}, {"value", left ? "left" : "right"}}}}};
  const std::string js = rec.dump();
  data::WdsSample s{key, {{"json", std::vector<uint8_t>(js.begin(), js.end())}}};
  s.members.push_back({"jpg", data::encode_jpeg(im).value()});
  return s;
}

// <root>/.nv-meta with split parts train (n_train samples + 1 corrupt) and val (n_val samples).
inline std::string make_vqa_dataset(const std::string& tag, int n_train, int n_val) {
  const std::string root = (std::filesystem::temp_directory_path() / ("vlpar_ds_" + tag + "_" + std::to_string(::getpid()))).string();
  std::filesystem::remove_all(root);
  std::mt19937_64 rng(42);
  data::EnergonMetadata meta;
  for (const auto& [part, n] : {std::pair<std::string, int>{"train", n_train}, {"val", n_val}}) {
    data::ShardWriterOptions o;
    o.pattern = part + "-%03d.tar";
    o.max_count = 40;
    o.tar.fsync = false;
    auto w = data::ShardWriter::open(root, o);
    EXPECT_TRUE(w.ok());
    for (int i = 0; i < n; ++i) EXPECT_TRUE(w.value().write(vqa_sample(part + "-" + std::to_string(i), rng)).ok());
    if (part == "train") {  // a truncated JPEG: skipped and counted, never fatal
      data::WdsSample bad = vqa_sample("train-corrupt", rng);
      bad.members[1].data.resize(bad.members[1].data.size() / 3);
      EXPECT_TRUE(w.value().write(bad).ok());
    }
    EXPECT_TRUE(w.value().finish().ok());
    data::EnergonSplitPart sp{part, {}};
    for (const data::ShardInfo& s : w.value().shards()) {
      meta.shards.push_back(s);
      sp.shards.push_back(s.name);
    }
    meta.parts.push_back(sp);
  }
  EXPECT_TRUE(data::write_energon_metadata(root, meta).ok());
  return root;
}


}  // namespace qwen3vl::test
