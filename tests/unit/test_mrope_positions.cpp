// MRoPE position ids of a packed batch (data/mrope_positions.hpp): hand-computed cases (text only, one image,
// image + video frames, two samples restarting at 0, a non-square grid, an image with t = 2), bit-exact agreement
// with transformers 4.57.1 Qwen3VLModel.get_rope_index on random packs (fixture tests/fixtures/mrope/
// hf_get_rope_index.txt, made by make_fixture.py next to it), the i32 cu_seqlens overload, and every error.
// Run: ./build/cpu/tests/test_mrope_positions
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "vlpar/data/mrope_positions.hpp"

namespace vlpar::data {
namespace {

// Small ids, as in the Qwen3-VL golden fixtures: <|vision_start|> 4, <|vision_end|> 5, image pad 6, video pad 7.
constexpr int64_t S = 4, E = 5, I = 6, V = 7;
const MropeDesc kDesc{I, V, S, 2};

using Rows = std::vector<std::vector<int64_t>>;  // {T row, H row, W row}

Rows rows_of(const MropePositions& p) {
  Rows r(3);
  for (int a = 0; a < 3; ++a)
    for (int64_t i = 0; i < p.num_tokens; ++i) r[a].push_back(p.at(a, i));
  return r;
}

MropePositions must(std::vector<int64_t> ids, std::vector<int64_t> cu, std::vector<VisionGrid> images,
                    std::vector<VisionGrid> videos, const MropeDesc& d = kDesc) {
  auto r = mrope_positions(ids, cu, images, videos, d);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? r.value() : MropePositions{};
}

TEST(MropePositions, TextOnlyIsArangeOnAllRows) {
  const auto p = must({10, 11, 12, 13, 14}, {0, 5}, {}, {});
  const std::vector<int64_t> ar = {0, 1, 2, 3, 4};
  EXPECT_EQ(rows_of(p), (Rows{ar, ar, ar}));
  EXPECT_EQ(p.rope_deltas, (std::vector<int64_t>{0}));
}

TEST(MropePositions, OneImage) {
  // text(2) <vs> image grid (1, 4, 6) -> merged (1, 2, 3) = 6 pads, <ve>, text(1)
  // text 0 1, <vs> 2, pads base 3: T 3; H 3 3 3 4 4 4; W 3 4 5 3 4 5; next = 3 + max(1, 2, 3) = 6: <ve> 6, text 7.
  const auto p = must({10, 11, S, I, I, I, I, I, I, E, 12}, {0, 11}, {{1, 4, 6}}, {});
  EXPECT_EQ(rows_of(p), (Rows{{0, 1, 2, 3, 3, 3, 3, 3, 3, 6, 7},
                              {0, 1, 2, 3, 3, 3, 4, 4, 4, 6, 7},
                              {0, 1, 2, 3, 4, 5, 3, 4, 5, 6, 7}}));
  EXPECT_EQ(p.rope_deltas, (std::vector<int64_t>{8 - 11}));
}

TEST(MropePositions, TallImageAdvancesByItsHeight) {
  // grid (1, 6, 2) -> merged (1, 3, 1): H 3 4 5, W 3 3 3, next = 3 + 3 = 6.
  const auto p = must({10, 11, S, I, I, I, E}, {0, 7}, {{1, 6, 2}}, {});
  EXPECT_EQ(rows_of(p), (Rows{{0, 1, 2, 3, 3, 3, 6}, {0, 1, 2, 3, 4, 5, 6}, {0, 1, 2, 3, 3, 3, 6}}));
}

TEST(MropePositions, ImageWithTwoTemporalPatches) {
  // grid (2, 2, 4) -> merged (2, 1, 2) = 4 pads: T 1 1 2 2, H 1 1 1 1, W 1 2 1 2; next = 1 + 2 = 3.
  const auto p = must({S, I, I, I, I, E}, {0, 6}, {{2, 2, 4}}, {});
  EXPECT_EQ(rows_of(p), (Rows{{0, 1, 1, 2, 2, 3}, {0, 1, 1, 1, 1, 3}, {0, 1, 2, 1, 2, 3}}));
}

TEST(MropePositions, ImageThenVideoFrames) {
  // image (1, 2, 2) -> 1 pad; video (2, 2, 4) -> two frames (1, 2, 4) of merged (1, 1, 2) = 2 pads each, each
  // frame behind its own timestamp token and <vs>.
  //   idx: 0 <vs> | 1 I | 2 <ve> | 3 ts | 4 <vs> | 5 V 6 V | 7 <ve> | 8 ts | 9 <vs> | 10 V 11 V | 12 <ve>
  //   pos: 0      | 1   | 2      | 3    | 4      | T 5 5, H 5 5, W 5 6 | 7 | 8 | 9 | T 10 10, W 10 11 | 12
  const auto p = must({S, I, E, 20, S, V, V, E, 21, S, V, V, E}, {0, 13}, {{1, 2, 2}}, {{2, 2, 4}});
  EXPECT_EQ(rows_of(p), (Rows{{0, 1, 2, 3, 4, 5, 5, 7, 8, 9, 10, 10, 12},
                              {0, 1, 2, 3, 4, 5, 5, 7, 8, 9, 10, 10, 12},
                              {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}}));
  EXPECT_EQ(p.rope_deltas, (std::vector<int64_t>{0}));
}

TEST(MropePositions, TwoSamplesRestartAndShareGridRows) {
  // Sample 0 uses image row 0, sample 1 uses image row 1: rows are consumed in pack order across samples.
  const auto p = must({10, S, I, E, /* sample 1 */ 11, 12, S, I, I, E}, {0, 4, 10}, {{1, 2, 2}, {1, 2, 4}}, {});
  EXPECT_EQ(rows_of(p), (Rows{{0, 1, 2, 3, 0, 1, 2, 3, 3, 5},
                              {0, 1, 2, 3, 0, 1, 2, 3, 3, 5},
                              {0, 1, 2, 3, 0, 1, 2, 3, 4, 5}}));
  EXPECT_EQ(p.rope_deltas, (std::vector<int64_t>{0, 0}));
}

TEST(MropePositions, Int32CuSeqlensAndCallerBuffers) {
  const std::vector<int64_t> ids = {10, S, I, E, 11, 12, S, I, I, E};
  const std::vector<int32_t> cu = {0, 4, 10};
  const std::vector<VisionGrid> images = {{1, 2, 2}, {1, 2, 4}};
  std::vector<int64_t> pos(30, -7), deltas(2, -7);
  ASSERT_TRUE(compute_mrope_positions(pos, deltas, ids, std::span<const int32_t>(cu), images, {}, kDesc).ok());
  const auto ref = must(ids, {0, 4, 10}, images, {});
  EXPECT_EQ(pos, ref.positions);
  EXPECT_EQ(deltas, ref.rope_deltas);
}

// --- transformers fixture -------------------------------------------------------------------------------------

struct HfCase {
  std::string name;
  MropeDesc desc;
  std::vector<int64_t> ids, cu, pos, deltas;  // pos: [3, N] rows T, H, W
  std::vector<VisionGrid> images, videos;
};

std::vector<int64_t> read_list(std::istream& in, const std::string& want_key) {
  std::string key;
  size_t n = 0;
  in >> key >> n;
  EXPECT_EQ(key, want_key);
  std::vector<int64_t> v(n);
  for (auto& x : v) in >> x;
  return v;
}

std::vector<VisionGrid> read_grids(std::istream& in, const std::string& want_key) {
  std::string key;
  size_t n = 0;
  in >> key >> n;
  EXPECT_EQ(key, want_key);
  std::vector<VisionGrid> g(n);
  for (auto& x : g) in >> x.t >> x.h >> x.w;
  return g;
}

std::vector<HfCase> read_fixture() {
  const std::string path = std::string(VLPAR_FIXTURES_DIR) + "/mrope/hf_get_rope_index.txt";
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "missing fixture " << path << " (make it with tests/fixtures/mrope/make_fixture.py)";
  std::vector<HfCase> cases;
  std::string line;
  std::getline(in, line);  // comment
  std::string word;
  while (in >> word && word == "case") {
    HfCase c;
    std::string k;
    in >> c.name >> k >> c.desc.spatial_merge_size >> k >> c.desc.image_token_id >> k >> c.desc.video_token_id >> k >>
        c.desc.vision_start_token_id;
    c.ids = read_list(in, "ids");
    c.cu = read_list(in, "cu");
    c.images = read_grids(in, "image_grids");
    c.videos = read_grids(in, "video_grids");
    for (const char* row : {"pos_t", "pos_h", "pos_w"}) {
      auto r = read_list(in, row);
      c.pos.insert(c.pos.end(), r.begin(), r.end());
    }
    c.deltas = read_list(in, "deltas");
    cases.push_back(std::move(c));
  }
  EXPECT_EQ(word, "end") << "fixture truncated";
  return cases;
}

TEST(MropePositions, MatchesTransformersGetRopeIndex) {
  const auto cases = read_fixture();
  ASSERT_EQ(cases.size(), 6u);
  int64_t vision_tokens = 0, samples = 0;
  for (const auto& c : cases) {
    auto r = mrope_positions(c.ids, c.cu, c.images, c.videos, c.desc);
    ASSERT_TRUE(r.ok()) << c.name << ": " << r.status().message();
    const int64_t n = static_cast<int64_t>(c.ids.size());
    ASSERT_EQ(r->positions.size(), c.pos.size()) << c.name;
    int shown = 0;
    for (int64_t i = 0; i < 3 * n && shown < 10; ++i)
      if (r->positions[size_t(i)] != c.pos[size_t(i)])
        ADD_FAILURE() << c.name << ": position [" << i / n << ", " << i % n << "] (token " << c.ids[size_t(i % n)]
                      << ") is " << r->positions[size_t(i)] << ", HF has " << c.pos[size_t(i)] << " (" << ++shown
                      << ")";
    EXPECT_EQ(r->rope_deltas, c.deltas) << c.name;
    for (int64_t id : c.ids) vision_tokens += (id == c.desc.image_token_id || id == c.desc.video_token_id);
    samples += static_cast<int64_t>(c.cu.size()) - 1;
  }
  EXPECT_GT(vision_tokens, 300);  // the fixture exercises vision spans, not only text
  EXPECT_GE(samples, 15);
}

// --- errors ---------------------------------------------------------------------------------------------------

struct ErrorCase {
  const char* name;
  std::vector<int64_t> ids, cu;
  std::vector<VisionGrid> images, videos;
  const char* want;
};

TEST(MropePositions, ErrorsNameTheDefect) {
  const std::vector<ErrorCase> cases = {
      {"run too short", {10, S, I, I, I, E}, {0, 6}, {{1, 4, 4}}, {},
       "sample 0: the image span at pack index 2 has 3 <|image_pad|> tokens but image_grids[0] = (1, 4, 4) needs "
       "1·(4/2)·(4/2) = 4"},
      {"run too long", {10, S, I, I, I, I, I, E}, {0, 8}, {{1, 4, 4}}, {},
       "the image span at pack index 2 has 5 <|image_pad|> tokens but image_grids[0] = (1, 4, 4) needs"},
      {"video frame run", {S, V, V, V, V, E}, {0, 6}, {}, {{2, 2, 4}},
       "the video span at pack index 1 has 4 <|video_pad|> tokens but video_grids[0] frame 0 = (2, 2, 4) needs "
       "1·(2/2)·(4/2) = 2"},
      {"second frame short", {S, V, V, E, 20, S, V, E}, {0, 8}, {}, {{2, 2, 4}},
       "the video span at pack index 6 has 1 <|video_pad|> tokens but video_grids[0] frame 1 = (2, 2, 4) needs"},
      {"pad outside span", {10, I, E}, {0, 3}, {{1, 2, 2}}, {},
       "sample 0: <|image_pad|> at pack index 1 is not part of a vision span"},
      {"mixed run", {S, I, V, V, E}, {0, 5}, {{1, 2, 2}}, {{1, 2, 4}},
       "<|video_pad|> at pack index 2 is not part of a vision span"},
      {"span split by boundary", {10, S, I, I, E}, {0, 3, 5}, {{1, 2, 4}}, {},
       "sample 0: the image span at pack index 2 has 1 <|image_pad|> tokens"},
      {"start at sample end", {10, S, I, E}, {0, 2, 4}, {{1, 2, 2}}, {},
       "sample 1: <|image_pad|> at pack index 2 is not part of a vision span"},
      {"more spans than rows", {S, I, E, S, I, E}, {0, 6}, {{1, 2, 2}}, {},
       "sample 0: the image span at pack index 4 is image span number 2 but only 1 image grid rows were given"},
      {"no grids at all", {S, V, E}, {0, 3}, {}, {},
       "the video span at pack index 1 is video span number 1 but only 0 video grid frames"},
      {"rows left over", {S, I, E}, {0, 3}, {{1, 2, 2}, {1, 2, 2}}, {},
       "1 image grid rows left over: the pack has 1 image spans but 2 were given"},
      {"frames left over", {S, V, E}, {0, 3}, {}, {{3, 2, 2}},
       "2 video grid frames left over: the pack has 1 video spans but 3 were given"},
      {"grid zero", {S, I, E}, {0, 3}, {{0, 2, 2}}, {}, "image_grids[0] is (0, 2, 2): every side must be >= 1"},
      // t·h·w = 2^64 wraps to 0 in int64 arithmetic: rejected, never used as a size.
      {"grid wraps", {S, I, E}, {0, 3}, {{int64_t{1} << 32, 1 << 16, 1 << 16}}, {},
       "image_grids[0] is (4294967296, 65536, 65536): t·h·w is out of range"},
      {"grid too large", {S, V, E}, {0, 3}, {}, {{1, 1 << 16, 1 << 16}},
       "video_grids[0] is (1, 65536, 65536): t·h·w is out of range (more than 2147483647 patches)"},
      {"grid odd", {S, V, E}, {0, 3}, {}, {{1, 3, 2}},
       "video_grids[0] = (1, 3, 2): h and w must be multiples of spatial_merge_size 2"},
      {"cu empty", {10}, {}, {}, {}, "cu_seqlens is empty"},
      {"cu start", {10, 11}, {1, 2}, {}, {}, "cu_seqlens[0] is 1, not 0"},
      {"cu empty sample", {10, 11}, {0, 1, 1, 2}, {}, {}, "cu_seqlens[2] = 1 is not above cu_seqlens[1] = 1"},
      {"cu end", {10, 11, 12}, {0, 2}, {}, {}, "cu_seqlens ends at 2 but input_ids has 3 tokens"},
  };
  for (const auto& c : cases) {
    auto r = mrope_positions(c.ids, c.cu, c.images, c.videos, kDesc);
    ASSERT_FALSE(r.ok()) << c.name;
    EXPECT_NE(r.status().message().find(c.want), std::string::npos)
        << c.name << "\n got: " << r.status().message() << "\nwant: " << c.want;
  }
}

TEST(MropePositions, ArgumentErrors) {
  const std::vector<int64_t> ids = {10, 11};
  const std::vector<int64_t> cu = {0, 2};
  std::vector<int64_t> pos(6), deltas(1), short_pos(5), no_deltas;
  EXPECT_NE(compute_mrope_positions(short_pos, deltas, ids, cu, {}, {}, kDesc).message().find(
                "positions has 5 entries, expected 3 x 2 tokens"),
            std::string::npos);
  EXPECT_NE(compute_mrope_positions(pos, no_deltas, ids, cu, {}, {}, kDesc).message().find(
                "rope_deltas has 0 entries, expected one per sample (1)"),
            std::string::npos);
  MropeDesc bad = kDesc;
  bad.spatial_merge_size = 0;
  EXPECT_NE(compute_mrope_positions(pos, deltas, ids, cu, {}, {}, bad).message().find(
                "spatial_merge_size must be at least 1, got 0"),
            std::string::npos);
  bad = kDesc;
  bad.video_token_id = bad.image_token_id;
  EXPECT_NE(compute_mrope_positions(pos, deltas, ids, cu, {}, {}, bad).message().find(
                "image (6), video (6) and vision_start (4) token ids must differ"),
            std::string::npos);
}

}  // namespace
}  // namespace vlpar::data
