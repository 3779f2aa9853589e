// Packing (data/packing.hpp):
//   * plan_pack by hand: oldest first, then the largest sample that fits, ties to the older, every budget
//     (tokens, patches, samples) respected, stream order inside the pack;
//   * make_packed_batch: concatenation, cu_seqlens, per-sample counts, pixel rows in pack order, MRoPE positions
//     equal to each sample's positions computed alone (positions restart per sample);
//   * Packer: conservation (every admitted sample exactly once), bounded waiting, oversize samples skipped and
//     counted (no hang), determinism, efficiency >= 97% on a synthetic VQA length distribution (printed);
//   * balance_packs: equal pack counts, image-heavy packs spread, LPT within 4/3 of the exhaustive optimum,
//     deterministic, errors;
//   * check_pack_inputs: ids and labels outside the vocabulary named by sample, tensor, row and position; NaN/Inf
//     pixels counted, the first one placed in its sample (images and videos).
// Run: ./build/cpu/tests/test_data_packing
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <random>

#include "vlpar/data/image_processor.hpp"
#include "vlpar/data/pack_checks.hpp"
#include "vlpar/data/packing.hpp"

namespace vlpar::data {
namespace {

const MropeDesc kDesc{.image_token_id = 6, .video_token_id = 7, .vision_start_token_id = 3, .spatial_merge_size = 2};
constexpr int32_t kVisionEnd = 4;
constexpr int64_t kPatchDim = 6;  // small stand-in for 1536

// A synthetic sample: `text` text tokens (ids 100 + i), then one span per image grid and per video frame, with
// pixel rows whose values encode (sample id, row) so the pack order can be checked.
TokenizedSample synth(const std::string& key, int64_t text, std::vector<VisionGrid> images,
                      std::vector<VisionGrid> videos = {}, float id = 0.f) {
  TokenizedSample s;
  s.key = key;
  for (int64_t i = 0; i < text; ++i) {
    s.input_ids.push_back(static_cast<int32_t>(100 + i % 50));
    s.labels.push_back(i % 3 == 0 ? kIgnoreLabel : static_cast<int32_t>(100 + i % 50));
  }
  auto span = [&](int32_t pad, int64_t n) {
    s.input_ids.push_back(static_cast<int32_t>(kDesc.vision_start_token_id));
    s.labels.push_back(kIgnoreLabel);
    for (int64_t k = 0; k < n; ++k) {
      s.input_ids.push_back(pad);
      s.labels.push_back(kIgnoreLabel);
    }
    s.input_ids.push_back(kVisionEnd);
    s.labels.push_back(kIgnoreLabel);
  };
  for (const VisionGrid& g : images) span(static_cast<int32_t>(kDesc.image_token_id), g.patches() / 4);
  for (const VisionGrid& g : videos)
    for (int64_t t = 0; t < g.t; ++t) span(static_cast<int32_t>(kDesc.video_token_id), g.h * g.w / 4);
  s.image_grids = images;
  s.video_grids = videos;
  s.patch_dim = images.empty() && videos.empty() ? 0 : kPatchDim;
  for (int64_t r = 0; r < s.image_patches() * s.patch_dim; ++r) s.pixel_values.push_back(id + 0.001f * float(r));
  for (int64_t r = 0; r < s.video_patches() * s.patch_dim; ++r)
    s.pixel_values_videos.push_back(-id - 0.001f * float(r));
  return s;
}

PackingConfig cfg(int64_t tokens, int64_t patches = 0, int64_t samples = 0, int64_t lookahead = 8) {
  PackingConfig c;
  c.max_tokens = tokens;
  c.max_patches = patches;
  c.max_samples = samples;
  c.lookahead = lookahead;
  return c;
}

TEST(PlanPack, OldestFirstThenLargestThatFits) {
  // budget 100: oldest (40) first; then largest fitting: 50 (idx 3) -> 90; then 10 (idx 4) -> 100.
  const std::vector<PackItem> b = {{40, 0}, {70, 0}, {30, 0}, {50, 0}, {10, 0}, {5, 0}};
  EXPECT_EQ(plan_pack(b, cfg(100)), (std::vector<size_t>{0, 3, 4}));
  // Ties go to the older sample.
  const std::vector<PackItem> t = {{10, 0}, {20, 0}, {20, 0}, {20, 0}};
  EXPECT_EQ(plan_pack(t, cfg(50)), (std::vector<size_t>{0, 1, 2}));
  // The patch budget: 50 tokens would fit but its patches do not.
  const std::vector<PackItem> p = {{40, 8}, {50, 10}, {30, 2}};
  EXPECT_EQ(plan_pack(p, cfg(100, 12)), (std::vector<size_t>{0, 2}));
  EXPECT_EQ(plan_pack(p, cfg(100, 0)), (std::vector<size_t>{0, 1}));
  // The sample budget.
  EXPECT_EQ(plan_pack(b, cfg(100, 0, 2)), (std::vector<size_t>{0, 3}));
  EXPECT_EQ(plan_pack(b, cfg(100, 0, 1)), (std::vector<size_t>{0}));
  EXPECT_TRUE(plan_pack({}, cfg(100)).empty());
  // The oldest goes first even when a larger sample would fill the pack better.
  const std::vector<PackItem> o = {{10, 0}, {100, 0}};
  EXPECT_EQ(plan_pack(o, cfg(100)), (std::vector<size_t>{0}));
}

TEST(PackedBatch, ConcatenatesAndPositionsRestartPerSample) {
  const TokenizedSample a = synth("a", 5, {VisionGrid{1, 2, 4}}, {}, 1.f);
  const TokenizedSample b = synth("b", 3, {}, {}, 2.f);
  const TokenizedSample c = synth("c", 4, {VisionGrid{1, 4, 2}, VisionGrid{1, 2, 2}}, {VisionGrid{2, 2, 2}}, 3.f);
  const std::vector<const TokenizedSample*> ptrs = {&a, &b, &c};
  auto r = make_packed_batch(ptrs, kDesc, 100);
  ASSERT_TRUE(r.ok()) << r.status().message();
  const PackedBatch& p = r.value();
  const int64_t n = a.num_tokens() + b.num_tokens() + c.num_tokens();
  EXPECT_EQ(p.real_tokens, n);
  EXPECT_EQ(p.cu_seqlens, (std::vector<int64_t>{0, a.num_tokens(), a.num_tokens() + b.num_tokens(), n}));
  EXPECT_EQ(p.images_per_sample, (std::vector<int64_t>{1, 0, 2}));
  EXPECT_EQ(p.videos_per_sample, (std::vector<int64_t>{0, 0, 1}));
  EXPECT_EQ(p.sample_keys, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(p.num_images, 3);
  EXPECT_EQ(p.num_videos, 1);
  EXPECT_EQ(p.vision_patches, 8 + 8 + 4 + 8);
  EXPECT_EQ(p.patch_dim, kPatchDim);
  EXPECT_EQ(p.num_label_tokens, a.num_label_tokens() + b.num_label_tokens() + c.num_label_tokens());
  EXPECT_DOUBLE_EQ(p.efficiency(), double(n) / 100.0);
  ASSERT_EQ(p.image_grids.size(), 3u);
  EXPECT_EQ(p.image_grids[1].h, 4);
  // Pixel rows in pack order: a's image, then c's two images.
  ASSERT_EQ(p.pixel_values.size(), static_cast<size_t>((8 + 8 + 4) * kPatchDim));
  EXPECT_EQ(p.pixel_values[0], a.pixel_values[0]);
  EXPECT_EQ(p.pixel_values[static_cast<size_t>(8 * kPatchDim)], c.pixel_values[0]);
  EXPECT_TRUE(std::equal(p.pixel_values_videos.begin(), p.pixel_values_videos.end(), c.pixel_values_videos.begin(),
                         c.pixel_values_videos.end()));
  // ids and labels back to back; positions of each sample equal the sample's positions alone.
  std::vector<int64_t> ids, labels;
  for (const TokenizedSample* s : ptrs) {
    ids.insert(ids.end(), s->input_ids.begin(), s->input_ids.end());
    labels.insert(labels.end(), s->labels.begin(), s->labels.end());
  }
  EXPECT_EQ(p.input_ids, ids);
  EXPECT_EQ(p.labels, labels);
  ASSERT_EQ(p.positions.size(), static_cast<size_t>(3 * n));
  int64_t off = 0;
  for (const TokenizedSample* s : ptrs) {
    auto alone = make_packed_batch(std::vector<const TokenizedSample*>{s}, kDesc, 100);
    ASSERT_TRUE(alone.ok()) << alone.status().message();
    for (int axis = 0; axis < 3; ++axis)
      for (int64_t i = 0; i < s->num_tokens(); ++i)
        ASSERT_EQ(p.positions[static_cast<size_t>(axis * n + off + i)],
                  alone->positions[static_cast<size_t>(axis * s->num_tokens() + i)])
            << s->key << " axis " << axis << " token " << i;
    off += s->num_tokens();
  }
  // A text-only sample's positions are 0..S-1 on every axis.
  for (int axis = 0; axis < 3; ++axis)
    for (int64_t i = 0; i < b.num_tokens(); ++i)
      EXPECT_EQ(p.positions[static_cast<size_t>(axis * n + a.num_tokens() + i)], i);
  // The image span of `a` (grid 2x4 patches -> merged 1x2) after 5 text tokens and vision_start (pos 5):
  // pads at T = 6, H = 6, W = 6, 7.
  EXPECT_EQ(p.positions[static_cast<size_t>(0 * n + 6)], 6);
  EXPECT_EQ(p.positions[static_cast<size_t>(1 * n + 7)], 6);
  EXPECT_EQ(p.positions[static_cast<size_t>(2 * n + 7)], 7);
  EXPECT_NE(p.fingerprint(), 0u);
}

PackedBatch pack_of(const std::vector<TokenizedSample>& samples) {
  std::vector<const TokenizedSample*> ptrs;
  for (const TokenizedSample& s : samples) ptrs.push_back(&s);
  return make_packed_batch(ptrs, kDesc, 1000).value();
}

std::string check_error(const PackedBatch& pack, int64_t vocab) {
  Result<PackInputReport> r = check_pack_inputs(pack, vocab);
  return r.ok() ? std::string("ok") : r.status().message();
}

TEST(PackChecks, NamesSampleTensorRowAndPosition) {
  PackedBatch pack = pack_of({synth("a", 5, {}), synth("b", 6, {})});  // text ids 100 + i, rows 0-4 and 5-10
  Result<PackInputReport> ok = check_pack_inputs(pack, 200);
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_EQ(ok.value().nonfinite_pixels, 0);
  EXPECT_EQ(ok.value().first_nonfinite, "");
  pack.labels[9] = 999;
  EXPECT_NE(check_error(pack, 200).find("sample 'b': labels row 9 (position 4 of the sample) is 999, outside [0, 200) "
                                        "and not the ignore label -100"),
            std::string::npos)
      << check_error(pack, 200);
  pack.labels[9] = -1;
  EXPECT_NE(check_error(pack, 200).find("labels row 9 (position 4 of the sample) is -1"), std::string::npos);
  pack.labels[9] = kIgnoreLabel;
  EXPECT_EQ(check_error(pack, 200), "ok");
  pack.input_ids[2] = -1;
  EXPECT_NE(check_error(pack, 200).find("sample 'a': input_ids row 2 (position 2 of the sample) is -1, outside "
                                        "[0, 200)"),
            std::string::npos)
      << check_error(pack, 200);
  pack.input_ids[2] = 102;
  // A vocabulary smaller than the data's ids (a config that does not match the tokenizer): the first id past it.
  EXPECT_NE(check_error(pack, 103).find("sample 'a': input_ids row 3 (position 3 of the sample) is 103"),
            std::string::npos)
      << check_error(pack, 103);
  EXPECT_NE(check_error(pack, 0).find("vocab is 0"), std::string::npos);
}

TEST(PackChecks, CountsNonFinitePixelsAndPlacesTheFirst) {
  // Image rows: a 0-3, b 4-11; video rows: c 0-7.
  PackedBatch pack = pack_of({synth("a", 3, {VisionGrid{1, 2, 2}}), synth("b", 3, {VisionGrid{1, 2, 4}}),
                              synth("c", 2, {}, {VisionGrid{2, 2, 2}})});
  pack.pixel_values_videos[size_t(3 * kPatchDim + 1)] = -INFINITY;
  Result<PackInputReport> r = check_pack_inputs(pack, 200);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r.value().nonfinite_pixels, 1);
  EXPECT_EQ(r.value().first_nonfinite, "sample 'c': pixel_values_videos row 3, column 1 is -inf");
  pack.pixel_values[size_t(7 * kPatchDim + 2)] = NAN;
  pack.pixel_values[size_t(11 * kPatchDim + 5)] = INFINITY;
  r = check_pack_inputs(pack, 200);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r.value().nonfinite_pixels, 3);
  EXPECT_EQ(r.value().first_nonfinite, "sample 'b': pixel_values row 7, column 2 is nan");
  pack.pixel_values[size_t(7 * kPatchDim + 2)] = 0.f;
  r = check_pack_inputs(pack, 200);
  EXPECT_EQ(r.value().first_nonfinite, "sample 'b': pixel_values row 11, column 5 is inf");
  pack.pixel_values[size_t(4 * kPatchDim)] = NAN;  // the first row of b's image
  pack.pixel_values[size_t(3 * kPatchDim + 5)] = NAN;  // the last row of a's
  r = check_pack_inputs(pack, 200);
  EXPECT_EQ(r.value().nonfinite_pixels, 4);
  EXPECT_EQ(r.value().first_nonfinite, "sample 'a': pixel_values row 3, column 5 is nan");
  pack.pixel_values[size_t(3 * kPatchDim + 5)] = 0.f;
  EXPECT_EQ(check_pack_inputs(pack, 200).value().first_nonfinite, "sample 'b': pixel_values row 4, column 0 is nan");
}

TEST(PackedBatch, RejectsInconsistentSamples) {
  TokenizedSample bad = synth("bad", 4, {VisionGrid{1, 2, 2}});
  bad.pixel_values.pop_back();
  const std::vector<const TokenizedSample*> p1 = {&bad};
  auto r = make_packed_batch(p1, kDesc, 100);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("sample 'bad'"), std::string::npos) << r.status().message();
  TokenizedSample pads = synth("pads", 4, {VisionGrid{1, 2, 2}});
  pads.image_grids[0].w = 4;  // grid says 2 tokens, the span has 1
  pads.pixel_values.resize(static_cast<size_t>(8 * kPatchDim));
  const std::vector<const TokenizedSample*> p2 = {&pads};
  auto r2 = make_packed_batch(p2, kDesc, 100);
  ASSERT_FALSE(r2.ok());
  EXPECT_NE(r2.status().message().find("pads"), std::string::npos) << r2.status().message();
  EXPECT_FALSE(make_packed_batch({}, kDesc, 100).ok());
  // The Packer rejects both at push, naming the sample, and stays usable.
  Packer packer = Packer::create(cfg(100), kDesc).value();
  auto a1 = packer.push(bad);
  ASSERT_FALSE(a1.ok());
  EXPECT_NE(a1.status().message().find("sample 'bad'"), std::string::npos) << a1.status().message();
  auto a2 = packer.push(pads);
  ASSERT_FALSE(a2.ok());
  EXPECT_NE(a2.status().message().find("sample 'pads'"), std::string::npos) << a2.status().message();
  EXPECT_TRUE(packer.empty());
  ASSERT_TRUE(packer.push(synth("good", 4, {VisionGrid{1, 2, 2}})).ok());
  auto b = packer.pop();
  ASSERT_TRUE(b.ok()) << b.status().message();
  EXPECT_EQ(b->sample_keys, std::vector<std::string>{"good"});
}

// Pushes samples through a Packer the way the loader does; returns the packs.
struct RunResult {
  std::vector<PackedBatch> packs;
  std::vector<std::vector<uint64_t>> tags;
  PackerStats stats;
};

RunResult run_packer(const std::vector<TokenizedSample>& samples, const PackingConfig& c) {
  RunResult out;
  Packer p = Packer::create(c, kDesc).value();
  auto pop = [&] {
    std::vector<uint64_t> tags;
    auto b = p.pop(&tags);
    EXPECT_TRUE(b.ok()) << b.status().message();
    out.packs.push_back(std::move(b).value());
    out.tags.push_back(tags);
  };
  for (size_t i = 0; i < samples.size(); ++i) {
    auto a = p.push(samples[i], i);
    EXPECT_TRUE(a.ok()) << a.status().message();
    while (p.ready()) pop();
  }
  while (!p.empty()) pop();
  out.stats = p.stats();
  return out;
}

TEST(Packer, ConservesOrdersAndSkipsOversize) {
  std::mt19937_64 rng(7);
  std::vector<TokenizedSample> samples;
  for (int i = 0; i < 300; ++i) {
    std::vector<VisionGrid> imgs;
    const int n_img = static_cast<int>(rng() % 3);
    for (int k = 0; k < n_img; ++k)
      imgs.push_back(VisionGrid{1, 2 * int64_t(1 + rng() % 2), 2 * int64_t(1 + rng() % 3)});  // <= 24 patches
    samples.push_back(synth(fmt::format("s{}", i), int64_t(5 + rng() % 60), imgs));
  }
  samples[17] = synth("too_long", 300, {});
  samples[42] = synth("too_many_patches", 4, {VisionGrid{1, 8, 8}});  // 64 patches, 16 pads
  const PackingConfig c = cfg(/*tokens=*/128, /*patches=*/48, /*samples=*/0, /*lookahead=*/16);
  const RunResult r = run_packer(samples, c);
  EXPECT_EQ(r.stats.samples_in, 300);
  EXPECT_EQ(r.stats.skipped_too_long, 1);
  EXPECT_EQ(r.stats.skipped_too_many_patches, 1);
  EXPECT_EQ(r.stats.samples_packed, 298);
  std::vector<int> seen(300, 0);
  for (size_t k = 0; k < r.packs.size(); ++k) {
    const PackedBatch& b = r.packs[k];
    EXPECT_LE(b.real_tokens, c.max_tokens);
    EXPECT_LE(b.vision_patches, c.max_patches);
    EXPECT_TRUE(std::is_sorted(r.tags[k].begin(), r.tags[k].end()));  // stream order inside a pack
    for (size_t j = 0; j < r.tags[k].size(); ++j) {
      const uint64_t t = r.tags[k][j];
      ++seen[t];
      EXPECT_EQ(b.sample_keys[j], samples[t].key);
    }
  }
  for (int i = 0; i < 300; ++i) EXPECT_EQ(seen[static_cast<size_t>(i)], (i == 17 || i == 42) ? 0 : 1) << i;
  // Determinism: the same input gives the same packs.
  const RunResult again = run_packer(samples, c);
  ASSERT_EQ(again.packs.size(), r.packs.size());
  for (size_t k = 0; k < r.packs.size(); ++k) EXPECT_EQ(again.packs[k].fingerprint(), r.packs[k].fingerprint());
}

TEST(Packer, OldestSampleLeavesWithTheNextPack) {
  // After every pop the oldest buffered tag must be gone: no sample waits while younger ones are packed past it.
  std::mt19937_64 rng(3);
  Packer p = Packer::create(cfg(200, 0, 0, 12), kDesc).value();
  for (uint64_t i = 0; i < 500; ++i) {
    ASSERT_TRUE(p.push(synth("x", int64_t(1 + rng() % 150), {}), i).ok());
    while (p.ready()) {
      const uint64_t oldest = p.buffer().front().tag;
      std::vector<uint64_t> tags;
      ASSERT_TRUE(p.pop(&tags).ok());
      ASSERT_FALSE(tags.empty());
      EXPECT_EQ(tags.front(), oldest);
    }
  }
}

// A synthetic VQA length distribution: natural photo sizes (random crops of 4:3 / 16:9 / portrait photos between
// 320 and 2000 px) through Qwen3-VL smart_resize with max_pixels = 1024² (<= 1024 image tokens) and min 256²;
// prompts 12–60 tokens, answers 1–40, the template's ~17 tokens per turn pair; 25% multi-turn (2–4 QA pairs),
// 10% two images, 5% text-only.
std::vector<TokenizedSample> vqa_samples(int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> side(320, 2000), prompt(12, 60), answer(1, 40), pct(0, 99);
  const double aspects[] = {4.0 / 3.0, 16.0 / 9.0, 3.0 / 4.0, 1.0, 3.0 / 2.0};
  std::vector<TokenizedSample> out;
  for (int i = 0; i < n; ++i) {
    const int kind = pct(rng);
    const int n_img = kind < 5 ? 0 : (kind < 15 ? 2 : 1);
    std::vector<VisionGrid> imgs;
    for (int k = 0; k < n_img; ++k) {
      const double a = aspects[rng() % 5];
      const int64_t w = side(rng), h = std::max<int64_t>(64, static_cast<int64_t>(double(w) / a));
      const ResizedSize rs = smart_resize(h, w, 32, 256 * 256, 1024 * 1024).value();
      imgs.push_back(VisionGrid{1, rs.height / 16, rs.width / 16});
    }
    const int turns = pct(rng) < 25 ? 2 + int(rng() % 3) : 1;
    int64_t text = 0;
    for (int t = 0; t < turns; ++t) text += 17 + prompt(rng) + answer(rng);
    out.push_back(synth(fmt::format("v{}", i), text, imgs));
    TokenizedSample& t = out.back();  // pixels do not matter here: one value per patch keeps memory small
    t.patch_dim = t.image_patches() > 0 ? 1 : 0;
    t.pixel_values.assign(static_cast<size_t>(t.image_patches()), 0.f);
  }
  return out;
}

TEST(Packer, EfficiencyOnVqaDistribution) {
  const std::vector<TokenizedSample> samples = vqa_samples(6000, 11);
  double mean = 0;
  for (const TokenizedSample& s : samples) mean += double(s.num_tokens());
  mean /= double(samples.size());
  struct Case {
    int64_t budget, lookahead;
    double min_eff;
  };
  // The target (>= 97%) at the demo budgets with the default lookahead; smaller lookaheads shown for scale.
  for (const Case& cs : {Case{8192, 64, 0.97}, Case{16384, 64, 0.97}, Case{4096, 64, 0.97}, Case{8192, 16, 0.0},
                         Case{8192, 1, 0.0}, Case{4096, 4, 0.0}}) {
    const RunResult r = run_packer(samples, cfg(cs.budget, 0, 0, cs.lookahead));
    // The final drain packs leftovers; measure the steady state (all packs but the last `lookahead` ones) and all.
    int64_t real = 0, budget = 0;
    const size_t steady = r.packs.size() > size_t(cs.lookahead) ? r.packs.size() - size_t(cs.lookahead) : 0;
    for (size_t k = 0; k < steady; ++k) {
      real += r.packs[k].real_tokens;
      budget += r.packs[k].token_budget;
    }
    const double steady_eff = budget > 0 ? double(real) / double(budget) : 0.0;
    std::printf("[packing] mean sample %.0f tokens, budget %lld, lookahead %lld: %zu packs, efficiency %.2f%% "
                "(steady state %.2f%%)\n",
                mean, static_cast<long long>(cs.budget), static_cast<long long>(cs.lookahead), r.packs.size(),
                100.0 * r.stats.efficiency(), 100.0 * steady_eff);
    EXPECT_GE(steady_eff, cs.min_eff) << "budget " << cs.budget << " lookahead " << cs.lookahead;
    EXPECT_EQ(r.stats.samples_packed, 6000);
  }
}

TEST(VisionCost, ByHand) {
  const std::vector<VisionGrid> img = {VisionGrid{1, 4, 6}};
  const std::vector<VisionGrid> vid = {VisionGrid{3, 2, 2}};
  const VisionCostModel m{.per_patch = 2.0, .per_attention_pair = 0.5};
  // image: 24 patches, 24² pairs; video: 12 patches, 3 frames of 4² pairs.
  EXPECT_DOUBLE_EQ(vision_cost(img, vid, m), 2.0 * (24 + 12) + 0.5 * (24.0 * 24.0 + 3 * 16.0));
  EXPECT_DOUBLE_EQ(vision_cost({}, {}, m), 0.0);
}

double max_load(const std::vector<std::vector<int64_t>>& ranks, const std::vector<double>& costs) {
  double mx = 0;
  for (const auto& r : ranks) {
    double s = 0;
    for (int64_t p : r) s += costs[static_cast<size_t>(p)];
    mx = std::max(mx, s);
  }
  return mx;
}

// Exhaustive optimum of the equal-cardinality partition (small n only).
double optimum(const std::vector<double>& costs, int64_t dp) {
  const int64_t n = static_cast<int64_t>(costs.size()), k = n / dp;
  std::vector<double> load(static_cast<size_t>(dp), 0);
  std::vector<int64_t> count(static_cast<size_t>(dp), 0);
  double best = 1e300;
  std::function<void(int64_t)> rec = [&](int64_t i) {
    if (i == n) {
      best = std::min(best, *std::max_element(load.begin(), load.end()));
      return;
    }
    for (int64_t r = 0; r < dp; ++r) {
      if (count[static_cast<size_t>(r)] == k) continue;
      load[static_cast<size_t>(r)] += costs[static_cast<size_t>(i)];
      ++count[static_cast<size_t>(r)];
      if (*std::max_element(load.begin(), load.end()) < best) rec(i + 1);
      load[static_cast<size_t>(r)] -= costs[static_cast<size_t>(i)];
      --count[static_cast<size_t>(r)];
      if (count[static_cast<size_t>(r)] == 0) break;  // symmetric empty ranks
    }
  };
  rec(0);
  return best;
}

TEST(BalancePacks, SpreadsImageHeavyPacksEvenly) {
  // 8 packs for dp = 4 (K = 2): packs 0 and 1 are image-heavy (big grids, quadratic attention), the rest text.
  std::vector<PackedBatch> packs(8);
  packs[0].image_grids = {VisionGrid{1, 64, 64}};
  packs[1].image_grids = {VisionGrid{1, 60, 60}, VisionGrid{1, 16, 16}};
  for (int i = 2; i < 8; ++i) packs[static_cast<size_t>(i)].image_grids = {VisionGrid{1, 4, 4}};
  std::vector<double> costs;
  for (const PackedBatch& p : packs) costs.push_back(vision_cost(p));
  auto r = balance_packs(costs, 4);
  ASSERT_TRUE(r.ok()) << r.status().message();
  const auto& ranks = r.value();
  ASSERT_EQ(ranks.size(), 4u);
  int heavy_ranks = 0;
  for (const auto& rk : ranks) {
    EXPECT_EQ(rk.size(), 2u);
    EXPECT_TRUE(std::is_sorted(rk.begin(), rk.end()));
    const int heavy = int(std::count_if(rk.begin(), rk.end(), [](int64_t p) { return p < 2; }));
    EXPECT_LE(heavy, 1);
    heavy_ranks += heavy;
  }
  EXPECT_EQ(heavy_ranks, 2);
  // Round robin in stream order would put both heavy packs on ranks 0 and 1 with a light one each; also fine
  // here, so check against a stream where contiguous assignment (ranks take consecutive packs) stacks them.
  std::vector<int64_t> all;
  for (const auto& rk : ranks) all.insert(all.end(), rk.begin(), rk.end());
  std::sort(all.begin(), all.end());
  for (int64_t i = 0; i < 8; ++i) EXPECT_EQ(all[static_cast<size_t>(i)], i);
  const std::vector<std::vector<int64_t>> contiguous = {{0, 1}, {2, 3}, {4, 5}, {6, 7}};
  EXPECT_LT(max_load(ranks, costs), max_load(contiguous, costs));
}

TEST(BalancePacks, WithinFourThirdsOfOptimumAndDeterministic) {
  std::mt19937_64 rng(5);
  for (int trial = 0; trial < 40; ++trial) {
    const int64_t dp = 2 + trial % 3;          // 2, 3, 4
    const int64_t k = 2 + (trial / 3) % 2;     // 2 or 3 packs per rank
    std::vector<double> costs;
    for (int64_t i = 0; i < dp * k; ++i) {
      const bool heavy = rng() % 4 == 0;
      costs.push_back(double(rng() % 100) + (heavy ? 1000.0 + double(rng() % 3000) : 0.0));
    }
    auto r = balance_packs(costs, dp);
    ASSERT_TRUE(r.ok());
    for (const auto& rk : r.value()) EXPECT_EQ(static_cast<int64_t>(rk.size()), k);
    const double got = max_load(r.value(), costs), opt = optimum(costs, dp);
    EXPECT_LE(got, opt * 4.0 / 3.0 + 1e-9) << "trial " << trial;
    EXPECT_GE(got, opt - 1e-9);
    auto again = balance_packs(costs, dp);
    EXPECT_EQ(again.value(), r.value());
  }
}

TEST(BalancePacks, Errors) {
  const std::vector<double> c = {1, 2, 3};
  EXPECT_FALSE(balance_packs(c, 2).ok());
  EXPECT_FALSE(balance_packs(c, 0).ok());
  const std::vector<double> neg = {1, -2};
  EXPECT_FALSE(balance_packs(neg, 2).ok());
  const std::vector<double> nan = {1, std::nan("")};
  EXPECT_FALSE(balance_packs(nan, 1).ok());
  auto one = balance_packs(c, 1);
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one.value(), (std::vector<std::vector<int64_t>>{{0, 1, 2}}));
  EXPECT_FALSE(Packer::create(cfg(0), kDesc).ok());
  EXPECT_FALSE(Packer::create(cfg(10, 0, 0, 0), kDesc).ok());
}

}  // namespace
}  // namespace vlpar::data
