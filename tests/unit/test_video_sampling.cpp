// Qwen3-VL frame sampling and timestamps (data/video_sampling.hpp): HF 4.57.1 outputs on a table of videos
// (tests/fixtures/processor/video_sampling.txt, made by tools/golden/make_processor_fixture.py), hand cases for
// the clamps, numpy's linspace with half-to-even rounding, Python's ".1f" formatting, and the errors.
// Run: ./build/cpu/tests/test_video_sampling
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "vlpar/data/video_sampling.hpp"

namespace vlpar::data {
namespace {

std::string join_indices(const std::vector<int64_t>& v) {
  std::string s;
  for (int64_t i : v) {
    if (!s.empty()) s += ",";
    s += std::to_string(i);
  }
  return s;
}

std::vector<int64_t> sample(int64_t total, double fps, FrameSamplingConfig cfg = {}) {
  auto r = sample_frame_indices(total, fps, cfg);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? r.value() : std::vector<int64_t>{};
}

TEST(VideoSampling, MatchesHfTable) {
  std::ifstream f(std::string(VLPAR_FIXTURES_DIR) + "/processor/video_sampling.txt");
  ASSERT_TRUE(f.good());
  int64_t rows = 0;
  for (std::string line; std::getline(f, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ss(line);
    std::string total, fps, idx, ts;
    ss >> total >> fps >> idx >> ts;
    SCOPED_TRACE(line);
    const double video_fps = std::stod(fps);
    const auto got = sample(std::stoll(total), video_fps);
    EXPECT_EQ(join_indices(got), idx);
    auto stamps = temporal_patch_timestamps(got, video_fps, 2);
    ASSERT_TRUE(stamps.ok()) << stamps.status().message();
    std::string texts;
    for (double s : stamps.value()) {
      std::string t = timestamp_text(s);
      std::replace(t.begin(), t.end(), ' ', '_');
      if (!texts.empty()) texts += ",";
      texts += t;
    }
    EXPECT_EQ(texts, ts);
    ++rows;
  }
  EXPECT_GE(rows, 16);
}

TEST(VideoSampling, ClampsAndRounding) {
  // 15 frames at 6 fps: int(15/6·2) = 5 samples of linspace(0, 14, 5) = 0, 3.5, 7, 10.5, 14 -> 0, 4, 7, 10, 14.
  EXPECT_EQ(sample(15, 6.0), (std::vector<int64_t>{0, 4, 7, 10, 14}));
  // Too few wanted (int(10/30·2) = 0): min_frames 4 of linspace(0, 9, 4) = 0, 3, 6, 9.
  EXPECT_EQ(sample(10, 30.0), (std::vector<int64_t>{0, 3, 6, 9}));
  // Fewer frames than min_frames: all of them.
  EXPECT_EQ(sample(3, 30.0), (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(sample(1, 30.0), (std::vector<int64_t>{0}));
  // max_frames caps long videos: 20000 frames at 24 fps want 1666, get 768, first 0 and last 19999.
  const auto many = sample(20000, 24.0);
  ASSERT_EQ(many.size(), 768u);
  EXPECT_EQ(many.front(), 0);
  EXPECT_EQ(many.back(), 19999);
  EXPECT_TRUE(std::is_sorted(many.begin(), many.end()));
  // A custom config.
  FrameSamplingConfig cfg;
  cfg.fps = 1.0;
  cfg.min_frames = 2;
  cfg.max_frames = 3;
  EXPECT_EQ(sample(100, 10.0, cfg), (std::vector<int64_t>{0, 50, 99}));  // int(10) -> 3; 49.5 -> 50 (even)
}

TEST(VideoSampling, TimestampsAndText) {
  const std::vector<int64_t> idx = {0, 4, 7, 10, 14};
  auto ts = temporal_patch_timestamps(idx, 6.0, 2);
  ASSERT_TRUE(ts.ok());
  ASSERT_EQ(ts->size(), 3u);  // padded with 14
  EXPECT_DOUBLE_EQ(ts.value()[0], (0.0 / 6 + 4.0 / 6) / 2);
  EXPECT_DOUBLE_EQ(ts.value()[2], 14.0 / 6);
  // Python's format: exact binary value, ties to even.
  EXPECT_EQ(timestamp_text(0.25), "<0.2 seconds>");
  EXPECT_EQ(timestamp_text(0.75), "<0.8 seconds>");
  EXPECT_EQ(timestamp_text(1.25), "<1.2 seconds>");
  EXPECT_EQ(timestamp_text(0.35), "<0.3 seconds>");  // 0.35 is 0.34999... in binary
  EXPECT_EQ(timestamp_text(0.05), "<0.1 seconds>");  // 0.05 is 0.050000000000000003 in binary
  EXPECT_EQ(timestamp_text(123.0), "<123.0 seconds>");
  auto single = temporal_patch_timestamps(std::vector<int64_t>{5}, 2.0, 2);
  ASSERT_TRUE(single.ok());
  EXPECT_EQ(single->size(), 1u);
  EXPECT_DOUBLE_EQ(single.value()[0], 2.5);
}

TEST(VideoSampling, ErrorsNameTheProblem) {
  const FrameSamplingConfig cfg;
  EXPECT_NE(sample_frame_indices(0, 30.0, cfg).status().message().find("0 frames"), std::string::npos);
  EXPECT_NE(sample_frame_indices(10, 0.0, cfg).status().message().find("video_fps"), std::string::npos);
  EXPECT_NE(sample_frame_indices(10, std::nan(""), cfg).status().message().find("video_fps"), std::string::npos);
  EXPECT_NE(sample_frame_indices(10, 1e-300, cfg).status().message().find("asks for"), std::string::npos);
  FrameSamplingConfig bad;
  bad.min_frames = 5;
  bad.max_frames = 4;
  EXPECT_NE(sample_frame_indices(10, 30.0, bad).status().message().find("min_frames 5"), std::string::npos);
  bad = FrameSamplingConfig{};
  bad.fps = -1;
  EXPECT_NE(sample_frame_indices(10, 30.0, bad).status().message().find("fps must be positive"), std::string::npos);
  EXPECT_FALSE(temporal_patch_timestamps({}, 2.0, 2).ok());
  EXPECT_FALSE(temporal_patch_timestamps(std::vector<int64_t>{1}, 2.0, 0).ok());
  EXPECT_FALSE(temporal_patch_timestamps(std::vector<int64_t>{1}, -2.0, 2).ok());
}

}  // namespace
}  // namespace vlpar::data
