// Tests of examples/qwen3vl/flops.hpp: the spec §8 table (N_act, LLM forward FLOPs per token = a + b·S, ViT
// forward FLOPs per patch = a + b·S_seg) for every published preset to 4 significant digits, exact values for 8B
// and 30B-A3B, and a step of the tiny MoE preset computed by hand.
// Run: ctest --test-dir build/<dir> -R Flops
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "flops.hpp"

namespace {

using qwen3vl::Config;

Config must_preset(const char* name) {
  auto r = qwen3vl::preset(name);
  EXPECT_TRUE(r.ok()) << name << ": " << r.status().message();
  return r.ok() ? r.value() : Config{};
}

/// a and b agree when rounded to 4 significant digits.
bool same_4_digits(double a, double b) {
  const double scale = std::pow(10.0, std::floor(std::log10(std::fabs(b))) - 3);
  return std::llround(a / scale) == std::llround(b / scale);
}

struct SpecRow {
  const char* name;
  double n_act;                // "N_act (non-emb, per token)"
  double llm_a, llm_b;         // "LLM fwd FLOPs/token" = a + b·S
  double vit_a, vit_b;         // "ViT fwd FLOPs/patch" = a + b·S_seg
};

// Spec qwen3vl.md §8 table, verbatim.
const SpecRow kSpec[] = {
    {"2B", 1.409e9, 3.441e9, 229376, 657.5e6, 98304},
    {"4B", 3.633e9, 8.045e9, 589824, 661.7e6, 98304},
    {"8B", 6.946e9, 15.136e9, 589824, 905.9e6, 124416},
    {"32B", 31.206e9, 63.967e9, 2097152, 915.3e6, 124416},
    {"30B-A3B", 2.730e9, 6.083e9, 786432, 887.0e6, 124416},
    {"235B-A22B", 20.945e9, 43.135e9, 3080192, 905.9e6, 124416},
};

TEST(Flops, SpecTableToFourDigits) {
  for (const auto& r : kSpec) {
    const Config c = must_preset(r.name);
    const auto llm = qwen3vl::text_fwd_flops_per_token(c);
    const auto vit = qwen3vl::vision_fwd_flops_per_patch(c);
    EXPECT_TRUE(same_4_digits(double(qwen3vl::text_active_params(c)), r.n_act))
        << r.name << " N_act " << qwen3vl::text_active_params(c);
    EXPECT_TRUE(same_4_digits(llm.a, r.llm_a)) << r.name << " llm a " << llm.a;
    EXPECT_EQ(llm.b, r.llm_b) << r.name;
    EXPECT_TRUE(same_4_digits(vit.a, r.vit_a)) << r.name << " vit a " << vit.a;
    EXPECT_EQ(vit.b, r.vit_b) << r.name;
  }
}

TEST(Flops, ExactConstants8BAnd30B) {
  // 8B: per layer 4096·4096 + 2·4096·1024 + 4096·4096 + 3·4096·12288 = 192,937,984; × 36 layers.
  const Config b8 = must_preset("8B");
  EXPECT_EQ(qwen3vl::text_active_params(b8), 36LL * 192937984);
  EXPECT_EQ(qwen3vl::text_fwd_flops_per_token(b8).a, 2.0 * 36 * 192937984 + 2.0 * 4096 * 151936);
  // ViT: 2·1536·1152 + 27·(8·1152² + 4·1152·4304) + 4·(2·4608² + 2·4608·4096)/4 = 905,895,936.
  EXPECT_EQ(qwen3vl::vision_fwd_flops_per_patch(b8).a, 905895936.0);
  // 30B-A3B: per layer 2048·4096 + 2·2048·512 + 4096·2048 + (2048·128 + 8·3·2048·768) = 56,885,248.
  const Config a3 = must_preset("30B-A3B");
  EXPECT_EQ(qwen3vl::text_active_params(a3), 48LL * 56885248);
  EXPECT_EQ(qwen3vl::text_fwd_flops_per_token(a3).b, 4.0 * 48 * 32 * 128);
  EXPECT_EQ(qwen3vl::vision_fwd_flops_per_patch(a3).a,
            2.0 * 1536 * 1152 + 27.0 * (8.0 * 1152 * 1152 + 4.0 * 1152 * 4304) +
                4.0 * (2.0 * 4608 * 4608 + 2.0 * 4608 * 2048) / 4);
}

TEST(Flops, TinyMoeStepByHand) {
  // tiny-moe: H 64, L 3, nH 4, nKV 2, hd 32, I 96, V 256, E 8, k 2, I_moe 32, layer 1 dense.
  //   attention projections per layer: 64·128 + 2·64·64 + 128·64 = 24,576
  //   MoE layer MLP: router 64·8 = 512 + 2·3·64·32 = 12,288 -> 12,800;  dense layer: 3·64·96 = 18,432
  //   N_act = 3·24,576 + 2·12,800 + 18,432 = 117,760
  //   per token: 2·N_act = 235,520; LM head 2·64·256 = 32,768; attention 4·3·4·32 = 1,536 per unit of S
  // Samples of 5 and 3 tokens: llm = 235,520·8 + 1,536·(5² + 3²) = 1,936,384; head = 32,768·8 = 262,144.
  // Vision: Hv 64, Iv 128, depth 3, patch vector 3·2·4·4 = 96, D 64, 2 deepstack levels, m = 2:
  //   a = 2·96·64 + 3·(8·64² + 4·64·128) + 3·(2·256² + 2·256·64)/4 = 12,288 + 196,608 + 122,880 = 331,776
  //   b = 4·3·64 = 768
  // Image (1, 4, 4): 16 patches in one segment of 16: 16·(331,776 + 768·16) = 5,505,024.
  // Video (2, 2, 4): 2 frames of 8 patches: 16·(331,776 + 768·8) = 5,406,720.   vision = 10,911,744.
  const Config c = must_preset("tiny-moe");
  EXPECT_EQ(qwen3vl::text_active_params(c), 117760);
  const std::vector<int64_t> lengths = {5, 3};
  const std::vector<vlpar::VisionGrid> grids = {{1, 4, 4}, {2, 2, 4}};
  const auto s = qwen3vl::count_flops(c, lengths, grids);
  EXPECT_EQ(s.llm_fwd, 1936384.0);
  EXPECT_EQ(s.lm_head_fwd, 262144.0);
  EXPECT_EQ(s.vision_fwd, 10911744.0);
  EXPECT_EQ(s.tokens, 8);
  EXPECT_EQ(s.patches, 32);
  EXPECT_EQ(s.total_fwd(), 1936384.0 + 262144.0 + 10911744.0);
  EXPECT_EQ(s.train(), 3.0 * (1936384.0 + 262144.0 + 10911744.0));
}

TEST(Flops, AttentionIsPerSampleNotPerPack) {
  // One sample of 8 tokens attends over 8; two samples of 4 attend over 4 each: the difference is b·(64 − 32).
  const Config c = must_preset("tiny-dense");
  const std::vector<int64_t> one = {8}, two = {4, 4};
  const auto a = qwen3vl::count_flops(c, one, {});
  const auto b = qwen3vl::count_flops(c, two, {});
  EXPECT_EQ(a.llm_fwd - b.llm_fwd, qwen3vl::text_fwd_flops_per_token(c).b * (64 - 32));
  EXPECT_EQ(a.lm_head_fwd, b.lm_head_fwd);
  EXPECT_EQ(a.vision_fwd, 0.0);
  // A video frame is its own segment: (2, 4, 4) costs twice (1, 4, 4), not the S_seg = 32 price.
  const std::vector<vlpar::VisionGrid> frame = {{1, 4, 4}}, video = {{2, 4, 4}};
  EXPECT_EQ(qwen3vl::count_flops(c, {}, video).vision_fwd, 2 * qwen3vl::count_flops(c, {}, frame).vision_fwd);
}

TEST(Flops, DenseAndMoeLayersFollowIsMoeLayer) {
  // Making the dense layer of tiny-moe sparse changes N_act by (router + k experts) − dense MLP.
  Config c = must_preset("tiny-moe");
  const int64_t before = qwen3vl::text_active_params(c);
  c.text.mlp_only_layers.clear();
  EXPECT_EQ(qwen3vl::text_active_params(c) - before, (64 * 8 + 2 * 3 * 64 * 32) - 3 * 64 * 96);
  // A dense model counts 3·H·I everywhere.
  const Config d = must_preset("tiny-dense");
  EXPECT_EQ(qwen3vl::text_active_params(d), 3 * (24576 + 3 * 64 * 96));
}

}  // namespace
