// Tests of examples/qwen3vl/config.hpp: parsing hub-like config.json text in both transformers spellings, every
// validation message, parse(to_hf_config_json(c)) == c, presets, and parameter counts against the modules
// transformers 4.57.1 builds (counted on the meta device) and the spec §8 table.
// Run: ctest --test-dir build/<dir> -R Config   (or ./build/<dir>/examples/qwen3vl/tests/test_config)
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "config.hpp"
#include "model.hpp"

namespace {

using qwen3vl::Config;

// Qwen/Qwen3-VL-30B-A3B-Instruct config.json as the hub serves it (transformers 4.57 spelling), written out by
// hand with the keys transformers adds on save (dtype, use_cache, bos/eos ids, ...) that we must tolerate.
constexpr const char* kHub30bA3b = R"json({
  "architectures": ["Qwen3VLMoeForConditionalGeneration"],
  "image_token_id": 151655,
  "model_type": "qwen3_vl_moe",
  "text_config": {
    "attention_bias": false,
    "attention_dropout": 0.0,
    "bos_token_id": 151643,
    "decoder_sparse_step": 1,
    "dtype": "bfloat16",
    "eos_token_id": 151645,
    "head_dim": 128,
    "hidden_act": "silu",
    "hidden_size": 2048,
    "initializer_range": 0.02,
    "intermediate_size": 6144,
    "max_position_embeddings": 262144,
    "mlp_only_layers": [],
    "model_type": "qwen3_vl_moe_text",
    "moe_intermediate_size": 768,
    "norm_topk_prob": true,
    "num_attention_heads": 32,
    "num_experts": 128,
    "num_experts_per_tok": 8,
    "num_hidden_layers": 48,
    "num_key_value_heads": 4,
    "rms_norm_eps": 1e-06,
    "rope_scaling": {
      "mrope_interleaved": true,
      "mrope_section": [24, 20, 20],
      "rope_type": "default"
    },
    "rope_theta": 5000000,
    "router_aux_loss_coef": 0.001,
    "use_cache": true,
    "vocab_size": 151936
  },
  "tie_word_embeddings": false,
  "transformers_version": "4.57.0.dev0",
  "video_token_id": 151656,
  "vision_config": {
    "deepstack_visual_indexes": [8, 16, 24],
    "depth": 27,
    "hidden_act": "gelu_pytorch_tanh",
    "hidden_size": 1152,
    "in_channels": 3,
    "initializer_range": 0.02,
    "intermediate_size": 4304,
    "model_type": "qwen3_vl_moe",
    "num_heads": 16,
    "num_position_embeddings": 2304,
    "out_hidden_size": 2048,
    "patch_size": 16,
    "spatial_merge_size": 2,
    "temporal_patch_size": 2
  },
  "vision_end_token_id": 151653,
  "vision_start_token_id": 151652
})json";

// The same model in the transformers v5 spelling: rope_parameters carries rope_theta and mrope_section, there is
// no rope_scaling and no text-level rope_theta, and the expert count is spelled num_local_experts.
constexpr const char* kV5_30bA3b = R"json({
  "architectures": ["Qwen3VLMoeForConditionalGeneration"],
  "model_type": "qwen3_vl_moe",
  "image_token_id": 151655, "video_token_id": 151656,
  "vision_start_token_id": 151652, "vision_end_token_id": 151653,
  "tie_word_embeddings": false,
  "text_config": {
    "model_type": "qwen3_vl_moe_text",
    "vocab_size": 151936, "hidden_size": 2048, "intermediate_size": 6144, "num_hidden_layers": 48,
    "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128, "rms_norm_eps": 1e-06,
    "max_position_embeddings": 262144, "tie_word_embeddings": false,
    "rope_parameters": {"rope_type": "default", "rope_theta": 5000000.0, "mrope_section": [24, 20, 20],
                        "mrope_interleaved": true},
    "num_local_experts": 128, "num_experts_per_tok": 8, "moe_intermediate_size": 768,
    "decoder_sparse_step": 1, "mlp_only_layers": [], "router_aux_loss_coef": 0.001
  },
  "vision_config": {
    "model_type": "qwen3_vl_moe_vision", "depth": 27, "hidden_size": 1152, "hidden_act": "gelu_pytorch_tanh",
    "intermediate_size": 4304, "num_heads": 16, "in_channels": 3, "patch_size": 16, "spatial_merge_size": 2,
    "temporal_patch_size": 2, "out_hidden_size": 2048, "num_position_embeddings": 2304,
    "deepstack_visual_indexes": [8, 16, 24]
  }
})json";

// Qwen3-VL-2B-Instruct-like (dense, tied at both levels).
constexpr const char* kHub2b = R"json({
  "architectures": ["Qwen3VLForConditionalGeneration"], "model_type": "qwen3_vl",
  "image_token_id": 151655, "video_token_id": 151656, "vision_start_token_id": 151652, "vision_end_token_id": 151653,
  "tie_word_embeddings": true,
  "text_config": {
    "model_type": "qwen3_vl_text", "attention_bias": false, "attention_dropout": 0.0, "bos_token_id": 151643,
    "dtype": "bfloat16", "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu", "hidden_size": 2048,
    "initializer_range": 0.02, "intermediate_size": 6144, "max_position_embeddings": 262144,
    "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8, "rms_norm_eps": 1e-06,
    "rope_scaling": {"mrope_interleaved": true, "mrope_section": [24, 20, 20], "rope_type": "default"},
    "rope_theta": 5000000, "tie_word_embeddings": true, "use_cache": true, "vocab_size": 151936
  },
  "vision_config": {
    "deepstack_visual_indexes": [5, 11, 17], "depth": 24, "hidden_act": "gelu_pytorch_tanh", "hidden_size": 1024,
    "in_channels": 3, "initializer_range": 0.02, "intermediate_size": 4096, "model_type": "qwen3_vl",
    "num_heads": 16, "num_position_embeddings": 2304, "out_hidden_size": 2048, "patch_size": 16,
    "spatial_merge_size": 2, "temporal_patch_size": 2
  }
})json";

Config must_preset(const char* name) {
  auto r = qwen3vl::preset(name);
  EXPECT_TRUE(r.ok()) << name << ": " << r.status().message();
  return r.ok() ? r.value() : Config{};
}

::testing::AssertionResult fails_with(const vlpar::Status& s, const std::string& want) {
  if (s.ok()) return ::testing::AssertionFailure() << "expected an error containing \"" << want << "\", got Ok";
  if (s.message().find(want) == std::string::npos)
    return ::testing::AssertionFailure() << "error \"" << s.message() << "\" does not contain \"" << want << "\"";
  return ::testing::AssertionSuccess();
}

// ------------------------------------------------------------------------------------------------- parsing

TEST(Config, ParsesHub30bA3bAsThePreset) {
  auto r = qwen3vl::parse_hf_config(kHub30bA3b, "30b/config.json");
  ASSERT_TRUE(r.ok()) << r.status().message();
  const Config& c = r.value();
  EXPECT_TRUE(c.moe);
  EXPECT_EQ(c.text.num_experts, 128);
  EXPECT_EQ(c.text.top_k, 8);
  EXPECT_EQ(c.text.moe_intermediate, 768);
  EXPECT_EQ(c.text.rope_theta, 5e6);
  EXPECT_EQ(c.text.mrope_section[1], 20);
  EXPECT_EQ(c.vision.deepstack_indexes, (std::vector<int>{8, 16, 24}));
  EXPECT_EQ(c.text.num_moe_layers(), 48);
  EXPECT_EQ(c, must_preset("30B-A3B"));
}

TEST(Config, ParsesV5SpellingToTheSameConfig) {
  auto v4 = qwen3vl::parse_hf_config(kHub30bA3b, "v4");
  auto v5 = qwen3vl::parse_hf_config(kV5_30bA3b, "v5");
  ASSERT_TRUE(v4.ok()) << v4.status().message();
  ASSERT_TRUE(v5.ok()) << v5.status().message();
  EXPECT_EQ(v4.value(), v5.value());
}

TEST(Config, ParsesHub2bTied) {
  auto r = qwen3vl::parse_hf_config(kHub2b, "2b");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_FALSE(r->moe);
  EXPECT_TRUE(r->text.tie_word_embeddings);
  EXPECT_EQ(r.value(), must_preset("2B"));
}

// Smallest dense config transformers accepts, as a JSON string to be edited by the tests below.
std::string tiny_json(const std::string& text_extra, const std::string& top_extra = "",
                      const std::string& rope = R"("rope_scaling": {"rope_type": "default", "mrope_section": [6, 5, 5]})",
                      const std::string& model_type = "qwen3_vl") {
  return R"({"model_type": ")" + model_type + R"(", )" + top_extra +
         R"("image_token_id": 251, "video_token_id": 252, "vision_start_token_id": 248, "vision_end_token_id": 249,
  "text_config": {"vocab_size": 256, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 3,
                  "num_attention_heads": 4, "num_key_value_heads": 2, )" +
         text_extra + (text_extra.empty() ? "" : ", ") + rope + R"(},
  "vision_config": {"depth": 3, "hidden_size": 64, "intermediate_size": 128, "num_heads": 4, "patch_size": 4,
                    "out_hidden_size": 64, "num_position_embeddings": 64, "deepstack_visual_indexes": [0, 2]}})";
}

TEST(Config, HeadDimDefaultsFollowTransformers) {
  // Dense Qwen3VLTextConfig: head_dim defaults to 128, not hidden/heads = 16.
  auto dense = qwen3vl::parse_hf_config(tiny_json("", "", R"("rope_scaling": {"mrope_section": [24, 20, 20]})"), "d");
  ASSERT_TRUE(dense.ok()) << dense.status().message();
  EXPECT_EQ(dense->text.head_dim, 128);
  // MoE text config: `head_dim or hidden_size // num_attention_heads` = 16 -> mrope sum must be 8.
  auto moe = qwen3vl::parse_hf_config(
      tiny_json(R"("num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32)", "",
                R"("rope_scaling": {"mrope_section": [4, 2, 2]})", "qwen3_vl_moe"),
      "m");
  ASSERT_TRUE(moe.ok()) << moe.status().message();
  EXPECT_EQ(moe->text.head_dim, 16);
  // An absent mrope_section takes the rotary module's default [24, 20, 20].
  EXPECT_EQ(dense->text.mrope_section, (std::array<int, 3>{24, 20, 20}));
  // Absent rope_theta in the v4.57 spelling: the class default 5e6. Absent kv heads: class default 32 (dense).
  EXPECT_EQ(dense->text.rope_theta, 5e6);
}

TEST(Config, MoeDefaultsFollowTransformers) {
  auto r = qwen3vl::parse_hf_config(
      tiny_json(R"("head_dim": 32)", "", R"("rope_scaling": {"mrope_section": [6, 5, 5]})", "qwen3_vl_moe"), "m");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->text.num_experts, 60);
  EXPECT_EQ(r->text.top_k, 4);
  EXPECT_EQ(r->text.moe_intermediate, 1408);
  EXPECT_EQ(r->text.decoder_sparse_step, 1);
  EXPECT_TRUE(r->text.mlp_only_layers.empty());
  EXPECT_EQ(r->text.router_aux_loss_coef, 0.001);
}

TEST(Config, NullKvHeadsMeansAllHeads) {
  std::string j = tiny_json(R"("head_dim": 32)");
  const std::string kv = "\"num_key_value_heads\": 2";
  j.replace(j.find(kv), kv.size(), "\"num_key_value_heads\": null");
  auto r = qwen3vl::parse_hf_config(j, "n");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->text.kv_heads, 4);
}

TEST(Config, TieFlags) {
  const std::string t = R"("head_dim": 32, "tie_word_embeddings": true)";
  auto both = qwen3vl::parse_hf_config(tiny_json(t, R"("tie_word_embeddings": true, )"), "both");
  ASSERT_TRUE(both.ok()) << both.status().message();
  EXPECT_TRUE(both->text.tie_word_embeddings);
  // transformers 4.57.1 ignores the top-level flag: top true + text absent (false) would NOT tie. Rejected.
  EXPECT_TRUE(fails_with(qwen3vl::parse_hf_config(tiny_json(R"("head_dim": 32)", R"("tie_word_embeddings": true, )"),
                                                  "top").status(),
                         "top: tie_word_embeddings is true at the top level but false in text_config"));
  EXPECT_TRUE(fails_with(qwen3vl::parse_hf_config(tiny_json(t), "text").status(),
                         "tie_word_embeddings is false at the top level but true in text_config"));
}

TEST(Config, BothRopeSpellingsMustAgree) {
  const std::string both =
      R"("rope_scaling": {"rope_type": "default", "mrope_section": [6, 5, 5]}, "rope_theta": 1e6,
         "rope_parameters": {"rope_type": "default", "mrope_section": [6, 5, 5], "rope_theta": 1e6})";
  auto ok = qwen3vl::parse_hf_config(tiny_json(R"("head_dim": 32)", "", both), "agree");
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_EQ(ok->text.rope_theta, 1e6);
  std::string bad_theta = both;
  bad_theta.replace(bad_theta.rfind("1e6"), 3, "2e6");
  EXPECT_TRUE(fails_with(qwen3vl::parse_hf_config(tiny_json(R"("head_dim": 32)", "", bad_theta), "t").status(),
                         "text_config.rope_theta 1000000 disagrees with rope_parameters.rope_theta 2000000"));
  std::string bad_section = both;
  bad_section.replace(bad_section.rfind("[6, 5, 5]"), 9, "[8, 4, 4]");
  EXPECT_TRUE(fails_with(qwen3vl::parse_hf_config(tiny_json(R"("head_dim": 32)", "", bad_section), "s").status(),
                         "text_config.rope_parameters.mrope_section [8, 4, 4] disagrees with "
                         "rope_scaling.mrope_section [6, 5, 5]"));
}

struct ParseCase {
  const char* name;
  std::string json;
  const char* want;
};

TEST(Config, ParseErrorsNameTheField) {
  const std::string hd = R"("head_dim": 32)";
  const std::vector<ParseCase> cases = {
      {"not json", "{\"model_type\": ", "src: not valid JSON"},
      // a number beyond double's range: nlohmann throws out_of_range, not parse_error (found by fuzz_hf_config)
      {"number overflow", R"({"ct": 4e366})", "src: not valid JSON"},
      {"array", "[1, 2]", "src: the top level must be a JSON object"},
      {"no model_type", R"({"text_config": {}, "vision_config": {}})", "src: model_type is missing"},
      {"other model", tiny_json(hd, "", R"("rope_scaling": {})", "qwen2_5_vl"),
       "src: model_type 'qwen2_5_vl' is not qwen3_vl or qwen3_vl_moe"},
      {"arch mismatch", tiny_json(hd, R"("architectures": ["Qwen3VLForConditionalGeneration"], )",
                                  R"("rope_scaling": {"mrope_section": [6, 5, 5]})", "qwen3_vl_moe"),
       "src: architectures entry \"Qwen3VLForConditionalGeneration\" is not Qwen3VLMoeForConditionalGeneration"},
      {"arch unknown", tiny_json(hd, R"("architectures": ["LlavaForConditionalGeneration"], )"),
       "architectures entry \"LlavaForConditionalGeneration\" is not Qwen3VLForConditionalGeneration"},
      {"no text", R"({"model_type": "qwen3_vl", "vision_config": {}})", "src: text_config is missing"},
      {"no vision", R"({"model_type": "qwen3_vl", "text_config": {}})", "src: vision_config is missing"},
      {"text type", tiny_json(R"("model_type": "qwen3_vl_moe_text", "head_dim": 32)"),
       "src: text_config.model_type 'qwen3_vl_moe_text' is not qwen3_vl_text"},
      {"string int", tiny_json(R"("head_dim": "32")"), "src: text_config.head_dim must be an integer, got \"32\""},
      {"float int", tiny_json(R"("head_dim": 32.5)"), "src: text_config.head_dim must be an integer, got 32.5"},
      {"int32 overflow", tiny_json(R"("head_dim": 4294967296)"), "text_config.head_dim 4294967296 is out of range (int32)"},
      {"bool", tiny_json(R"("head_dim": 32, "attention_bias": 0)"),
       "text_config.attention_bias must be true or false, got 0"},
      {"no rope", tiny_json(hd, "", R"("rope_theta": 1e6)"),
       "src: text_config.rope_scaling is missing (and there is no rope_parameters)"},
      {"rope not object", tiny_json(hd, "", R"("rope_scaling": [6, 5, 5])"),
       "text_config.rope_scaling must be an object, got [6,5,5]"},
      {"yarn", tiny_json(hd, "", R"("rope_scaling": {"rope_type": "yarn", "mrope_section": [6, 5, 5]})"),
       "src: text_config.rope_scaling.rope_type 'yarn' is not supported"},
      {"section length", tiny_json(hd, "", R"("rope_scaling": {"mrope_section": [8, 8]})"),
       "text_config.rope_scaling.mrope_section must be a list of 3 integers (T, H, W), got [8,8]"},
      {"v5 no theta", tiny_json(hd, "", R"("rope_parameters": {"mrope_section": [6, 5, 5]})"),
       "src: text_config.rope_parameters.rope_theta is missing"},
      {"text act", tiny_json(R"("head_dim": 32, "hidden_act": "gelu")"),
       "src: text_config.hidden_act 'gelu' is not supported"},
      {"dropout", tiny_json(R"("head_dim": 32, "attention_dropout": 0.1)"),
       "src: text_config.attention_dropout 0.1 is not supported"},
      {"vision type", [&] {
         std::string j = tiny_json(hd);
         j.replace(j.find("\"depth\""), 7, "\"model_type\": \"siglip\", \"depth\"");
         return j;
       }(),
       "src: vision_config.model_type 'siglip' is not a Qwen3-VL vision config"},
      {"list type", [&] {
         std::string j = tiny_json(hd);
         j.replace(j.find("[0, 2]"), 6, "[0, \"2\"]");
         return j;
       }(),
       "vision_config.deepstack_visual_indexes must be a list of integers"},
      // validate() errors come back prefixed with the source name
      {"validate", tiny_json(R"("head_dim": 30)"), "src: text_config mrope_section [6, 5, 5] sums to 16 but head_dim/2 is 15"},
  };
  for (const auto& c : cases) {
    auto r = qwen3vl::parse_hf_config(c.json, "src");
    EXPECT_TRUE(fails_with(r.status(), c.want)) << "case: " << c.name;
  }
}

// --------------------------------------------------------------------------------------------- validation

struct ValidateCase {
  const char* name;
  const char* base;  // preset
  std::function<void(Config&)> edit;
  const char* want;
};

TEST(Config, EveryValidationMessage) {
  const std::vector<ValidateCase> cases = {
      {"vocab", "tiny-dense", [](Config& c) { c.text.vocab = 0; }, "text_config.vocab_size must be positive, got 0"},
      {"vocab 2^40", "tiny-dense", [](Config& c) { c.text.vocab = int64_t(1) << 40; },
       "text_config.vocab_size 1099511627776 is out of range: at most 2147483647 (token ids are 32-bit in the "
       "kernels)"},
      {"layers 10^5", "tiny-dense", [](Config& c) { c.text.layers = 100000; },
       "text_config.num_hidden_layers 100000 is out of range: at most 4096 (a sanity bound"},
      {"vision width", "tiny-dense", [](Config& c) { c.vision.hidden = int64_t(1) << 20; },
       "vision_config.hidden_size 1048576 is out of range: at most 65536"},
      {"vision positions", "tiny-dense", [](Config& c) { c.vision.num_position_embeddings = int64_t(1) << 40; },
       "vision_config.num_position_embeddings 1099511627776 is out of range: at most 16777216"},
      {"hidden", "tiny-dense", [](Config& c) { c.text.hidden = -1; }, "text_config.hidden_size must be positive"},
      {"layers", "tiny-dense", [](Config& c) { c.text.layers = 0; }, "text_config.num_hidden_layers must be positive"},
      {"heads", "tiny-dense", [](Config& c) { c.text.heads = 0; }, "text_config.num_attention_heads must be positive"},
      {"kv heads", "tiny-dense", [](Config& c) { c.text.kv_heads = 0; },
       "text_config.num_key_value_heads must be positive"},
      {"gqa", "tiny-dense", [](Config& c) { c.text.heads = 6; c.text.kv_heads = 4; },
       "text_config.num_attention_heads 6 is not a multiple of num_key_value_heads 4"},
      {"head_dim 0", "tiny-dense", [](Config& c) { c.text.head_dim = 0; }, "text_config.head_dim must be positive"},
      {"head_dim odd", "tiny-dense", [](Config& c) { c.text.head_dim = 31; },
       "text_config.head_dim 31 is odd; rotary pairs dim j with dim j + head_dim/2"},
      {"eps", "tiny-dense", [](Config& c) { c.text.rms_eps = 0; }, "text_config.rms_norm_eps must be positive"},
      {"theta", "tiny-dense", [](Config& c) { c.text.rope_theta = -1; }, "text_config.rope_theta must be positive"},
      {"max pos", "tiny-dense", [](Config& c) { c.text.max_position_embeddings = 0; },
       "text_config.max_position_embeddings must be positive"},
      {"init", "tiny-dense", [](Config& c) { c.text.initializer_range = 0; },
       "text_config.initializer_range must be positive"},
      {"bias", "tiny-dense", [](Config& c) { c.text.attention_bias = true; },
       "text_config.attention_bias is true; Qwen3-VL's q/k/v/o projections have no bias"},
      {"pad id", "tiny-dense", [](Config& c) { c.text.pad_token_id = 256; },
       "text_config.pad_token_id 256 is outside the vocabulary of 256 ids"},
      {"section negative", "tiny-dense", [](Config& c) { c.text.mrope_section = {17, 0, -1}; },
       "text_config mrope_section [17, 0, -1] has a negative entry"},
      {"section sum", "tiny-dense", [](Config& c) { c.text.mrope_section = {6, 5, 6}; },
       "text_config mrope_section [6, 5, 6] sums to 17 but head_dim/2 is 16"},
      {"section H", "tiny-dense", [](Config& c) { c.text.mrope_section = {2, 9, 5}; },
       "text_config mrope_section [2, 9, 5]: the H axis's 9 interleaved frequencies reach index 25 but head_dim/2 "
       "is 16"},
      {"section W", "tiny-dense", [](Config& c) { c.text.mrope_section = {5, 5, 6}; },
       "text_config mrope_section [5, 5, 6]: the W axis's 6 interleaved frequencies reach index 17 but head_dim/2 "
       "is 16"},
      {"dense experts", "tiny-dense", [](Config& c) { c.text.num_experts = 8; },
       "text_config.num_experts is 8 but Qwen3VLForConditionalGeneration is dense"},
      {"dense mlp_only", "tiny-dense", [](Config& c) { c.text.mlp_only_layers = {1}; },
       "text_config.mlp_only_layers [1] is set in a dense model"},
      {"dense intermediate", "tiny-dense", [](Config& c) { c.text.intermediate = 0; },
       "text_config.intermediate_size must be positive (layers 3 use the dense MLP), got 0"},
      {"experts negative", "tiny-moe", [](Config& c) { c.text.num_experts = -2; },
       "text_config.num_experts must not be negative, got -2"},
      {"sparse step", "tiny-moe", [](Config& c) { c.text.decoder_sparse_step = 0; },
       "text_config.decoder_sparse_step must be at least 1, got 0"},
      {"top_k 0", "tiny-moe", [](Config& c) { c.text.top_k = 0; },
       "text_config.num_experts_per_tok 0 is outside [1, num_experts 8]"},
      {"top_k > E", "tiny-moe", [](Config& c) { c.text.top_k = 9; },
       "text_config.num_experts_per_tok 9 is outside [1, num_experts 8]"},
      {"moe width", "tiny-moe", [](Config& c) { c.text.moe_intermediate = 0; },
       "text_config.moe_intermediate_size must be positive, got 0"},
      {"mlp_only range", "tiny-moe", [](Config& c) { c.text.mlp_only_layers = {3}; },
       "text_config.mlp_only_layers entry 3 is outside [0, 3)"},
      {"mlp_only twice", "tiny-moe", [](Config& c) { c.text.mlp_only_layers = {1, 1}; },
       "text_config.mlp_only_layers lists layer 1 twice"},
      {"aux coef", "tiny-moe", [](Config& c) { c.text.router_aux_loss_coef = -0.1; },
       "text_config.router_aux_loss_coef must not be negative"},
      {"z coef", "tiny-moe", [](Config& c) { c.text.router_z_loss_coef = -0.1; },
       "text_config.router_z_loss_coef must be finite and not negative"},
      {"z coef dense", "tiny-dense", [](Config& c) { c.text.router_z_loss_coef = 0.01; },
       "text_config.router_z_loss_coef is set in a dense model (no router)"},
      {"seq aux dense", "tiny-dense", [](Config& c) { c.text.router_seq_aux_loss_coef = 0.01; },
       "text_config.router_seq_aux_loss_coef is set in a dense model (no router)"},
      {"expert bias dense", "tiny-dense", [](Config& c) { c.text.router_expert_bias = true; },
       "text_config.router_expert_bias is set in a dense model (no router)"},
      {"moe dense layer width", "tiny-moe", [](Config& c) { c.text.intermediate = 0; },
       "text_config.intermediate_size must be positive (layers 1 use the dense MLP)"},
      {"vision depth", "tiny-dense", [](Config& c) { c.vision.depth = 0; }, "vision_config.depth must be positive"},
      {"vision hidden", "tiny-dense", [](Config& c) { c.vision.hidden = 0; },
       "vision_config.hidden_size must be positive"},
      {"vision inter", "tiny-dense", [](Config& c) { c.vision.intermediate = 0; },
       "vision_config.intermediate_size must be positive"},
      {"vision heads", "tiny-dense", [](Config& c) { c.vision.heads = 0; }, "vision_config.num_heads must be positive"},
      {"vision divisible", "tiny-dense", [](Config& c) { c.vision.heads = 7; },
       "vision_config.hidden_size 64 is not a multiple of num_heads 7"},
      {"vision head_dim", "tiny-dense", [](Config& c) { c.vision.hidden = 72; c.vision.heads = 4; },
       "vision head_dim 18 (hidden_size 72 / num_heads 4) is not a multiple of 4"},
      {"patch", "tiny-dense", [](Config& c) { c.vision.patch = 0; }, "vision_config.patch_size must be positive"},
      {"temporal", "tiny-dense", [](Config& c) { c.vision.temporal_patch = 0; },
       "vision_config.temporal_patch_size must be positive"},
      {"merge", "tiny-dense", [](Config& c) { c.vision.merge = 0; },
       "vision_config.spatial_merge_size must be positive"},
      {"channels", "tiny-dense", [](Config& c) { c.vision.in_channels = 0; },
       "vision_config.in_channels must be positive"},
      {"out hidden 0", "tiny-dense", [](Config& c) { c.vision.out_hidden = 0; },
       "vision_config.out_hidden_size must be positive"},
      {"pos table", "tiny-dense", [](Config& c) { c.vision.num_position_embeddings = 60; },
       "vision_config.num_position_embeddings 60 is not a perfect square"},
      {"act", "tiny-dense", [](Config& c) { c.vision.hidden_act = "gelu"; },
       "vision_config.hidden_act 'gelu' is not supported; Qwen3-VL's ViT uses gelu_pytorch_tanh"},
      {"vision init", "tiny-dense", [](Config& c) { c.vision.initializer_range = 0; },
       "vision_config.initializer_range must be positive"},
      {"deepstack range", "tiny-dense", [](Config& c) { c.vision.deepstack_indexes = {0, 3}; },
       "vision_config.deepstack_visual_indexes entry 3 is outside [0, depth 3)"},
      {"deepstack negative", "tiny-dense", [](Config& c) { c.vision.deepstack_indexes = {-1}; },
       "vision_config.deepstack_visual_indexes entry -1 is outside [0, depth 3)"},
      {"deepstack order", "tiny-dense", [](Config& c) { c.vision.deepstack_indexes = {2, 0}; },
       "vision_config.deepstack_visual_indexes [2, 0] is not strictly increasing"},
      {"deepstack repeat", "tiny-dense", [](Config& c) { c.vision.deepstack_indexes = {1, 1}; },
       "vision_config.deepstack_visual_indexes [1, 1] is not strictly increasing"},
      {"out hidden", "tiny-dense", [](Config& c) { c.vision.out_hidden = 3584; },
       "vision_config.out_hidden_size 3584 does not equal text_config.hidden_size 64"},
      {"deepstack levels", "tiny-dense", [](Config& c) { c.text.layers = 1; },
       "vision_config.deepstack_visual_indexes has 2 levels but the text model has only 1 layers"},
      {"tie", "tiny-dense", [](Config& c) { c.tie_word_embeddings = false; },
       "tie_word_embeddings is false at the top level but true in text_config"},
      {"image id", "tiny-dense", [](Config& c) { c.image_token_id = 151655; },
       "image_token_id 151655 is outside the text vocabulary of 256 ids"},
      {"video id", "tiny-dense", [](Config& c) { c.video_token_id = -1; },
       "video_token_id -1 is outside the text vocabulary of 256 ids"},
      {"start id", "tiny-dense", [](Config& c) { c.vision_start_token_id = 256; },
       "vision_start_token_id 256 is outside"},
      {"end id", "tiny-dense", [](Config& c) { c.vision_end_token_id = 1000; }, "vision_end_token_id 1000 is outside"},
      {"same ids", "tiny-dense", [](Config& c) { c.video_token_id = c.image_token_id; },
       "image_token_id and video_token_id are both 251"},
      {"same ids 2", "tiny-dense", [](Config& c) { c.vision_end_token_id = c.vision_start_token_id; },
       "vision_start_token_id and vision_end_token_id are both 248"},
  };
  for (const auto& c : cases) {
    Config cfg = must_preset(c.base);
    ASSERT_TRUE(cfg.validate().ok()) << c.base;
    c.edit(cfg);
    EXPECT_TRUE(fails_with(cfg.validate(), c.want)) << "case: " << c.name;
  }
}

/// Sizes within the bounds whose parameters still cannot fit the machine: a named error before any allocation
/// (not the allocator's "out of host memory").
TEST(Config, ModelTooLargeForTheMachineIsNamedBeforeAllocating) {
  vlpar::Result<Config> c = qwen3vl::preset("tiny-dense");
  ASSERT_TRUE(c.ok());
  c.value().text.vocab = INT32_MAX;
  c.value().text.hidden = c.value().vision.out_hidden = int64_t(1) << 16;
  ASSERT_TRUE(c.value().validate().ok()) << c.value().validate().message();
  vlpar::Allocator alloc;
  vlpar::Context ctx;
  ctx.allocator = &alloc;
  vlpar::Result<qwen3vl::Model> m = qwen3vl::Model::create(ctx, c.value(), qwen3vl::Freeze{}, 0, alloc);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), vlpar::StatusCode::kOutOfMemory);
  EXPECT_NE(m.status().message().find("largest: model.language_model.embed_tokens.weight [2147483647, 65536], "
                                      "1125899.9 GB); check the config's sizes"),
            std::string::npos)
      << m.status().message();
  EXPECT_EQ(alloc.stats(vlpar::Device::cpu()).peak_bytes, 0);
}

TEST(Config, MoeWithoutExpertsOrDenseLayersIsValid) {
  // All layers MoE: the dense width is unused (the hub 30B sets it anyway) and may be 0.
  Config c = must_preset("tiny-moe");
  c.text.mlp_only_layers.clear();
  c.text.intermediate = 0;
  EXPECT_TRUE(c.validate().ok()) << c.validate().message();
}

TEST(Config, IsMoeLayer) {
  Config c = must_preset("tiny-moe");
  c.text.layers = 8;
  c.text.decoder_sparse_step = 2;
  c.text.mlp_only_layers = {3};
  std::vector<int> moe;
  for (int l = 0; l < c.text.layers; ++l)
    if (c.text.is_moe_layer(l)) moe.push_back(l);
  EXPECT_EQ(moe, (std::vector<int>{1, 5, 7}));  // (l+1) % 2 == 0 minus mlp-only 3
  EXPECT_EQ(c.text.num_moe_layers(), 3);
  c.text.num_experts = 0;
  EXPECT_EQ(c.text.num_moe_layers(), 0);
  const Config d = must_preset("8B");
  for (int l = 0; l < d.text.layers; ++l) EXPECT_FALSE(d.text.is_moe_layer(l));
  const Config m = must_preset("tiny-moe");
  EXPECT_TRUE(m.text.is_moe_layer(0));
  EXPECT_FALSE(m.text.is_moe_layer(1));
  EXPECT_TRUE(m.text.is_moe_layer(2));
}

// ------------------------------------------------------------------------------------- writing, presets

TEST(Config, RoundTripEveryPreset) {
  for (const char* name : {"2B", "4B", "8B", "32B", "30B-A3B", "235B-A22B", "tiny-dense", "tiny-moe"}) {
    const Config c = must_preset(name);
    auto r = qwen3vl::parse_hf_config(qwen3vl::to_hf_config_json(c), name);
    ASSERT_TRUE(r.ok()) << name << ": " << r.status().message();
    EXPECT_EQ(r.value(), c) << name;
  }
}

TEST(Config, RoundTripNonDefaultValues) {
  Config c = must_preset("tiny-moe");
  c.text.rms_eps = 1e-5;
  c.text.rope_theta = 123456.789;
  c.text.mrope_section = {8, 4, 4};
  c.text.pad_token_id = 7;
  c.text.initializer_range = 0.0123;
  c.text.decoder_sparse_step = 2;
  c.text.mlp_only_layers = {0, 2};
  c.text.router_aux_loss_coef = 0.0;
  c.text.router_z_loss_coef = 0.004;  // vlpar's extensions
  c.text.router_seq_aux_loss_coef = 0.0001;
  c.text.router_expert_bias = true;
  c.text.max_position_embeddings = 77;
  c.vision.deepstack_indexes = {1};
  c.vision.initializer_range = 0.05;
  c.vision.in_channels = 1;
  c.vision.temporal_patch = 1;
  c.vision.merge = 1;
  c.vision.patch = 2;
  ASSERT_TRUE(c.validate().ok()) << c.validate().message();
  auto r = qwen3vl::parse_hf_config(qwen3vl::to_hf_config_json(c), "rt");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r.value(), c);
}

TEST(Config, LoadFromDirectoryOrFile) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("qwen3vl_test_config_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  {
    std::ofstream(dir / "config.json") << kHub30bA3b;
  }
  auto a = qwen3vl::load_hf_config(dir.string());
  auto b = qwen3vl::load_hf_config((dir / "config.json").string());
  ASSERT_TRUE(a.ok()) << a.status().message();
  ASSERT_TRUE(b.ok()) << b.status().message();
  EXPECT_EQ(a.value(), must_preset("30B-A3B"));
  EXPECT_EQ(b.value(), a.value());
  auto missing = qwen3vl::load_hf_config((dir / "nope").string());
  EXPECT_EQ(missing.status().code(), vlpar::StatusCode::kIoError);
  EXPECT_TRUE(fails_with(missing.status(), "nope: cannot open"));
  {
    std::ofstream(dir / "config.json") << "{\"model_type\": \"llama\"}";
  }
  EXPECT_TRUE(fails_with(qwen3vl::load_hf_config(dir.string()).status(),
                         (dir / "config.json").string() + ": model_type 'llama'"));
  fs::remove_all(dir);
}

TEST(Config, ParsesTheGoldenFixtureConfigs) {
  // config.json files written by tools/golden/qwen3vl_golden.py through transformers 4.57.1 (save_pretrained).
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(VLPAR_FIXTURES_DIR) / "qwen3vl";
  int parsed = 0;
  if (fs::is_directory(dir)) {
    for (const auto& e : fs::directory_iterator(dir)) {
      if (!fs::exists(e.path() / "config.json")) continue;
      auto r = qwen3vl::load_hf_config(e.path().string());
      EXPECT_TRUE(r.ok()) << r.status().message();
      if (r.ok()) {
        auto again = qwen3vl::parse_hf_config(qwen3vl::to_hf_config_json(r.value()), "rt");
        ASSERT_TRUE(again.ok()) << again.status().message();
        EXPECT_EQ(again.value(), r.value()) << e.path();
      }
      ++parsed;
    }
  }
  if (parsed == 0) GTEST_SKIP() << "no golden fixtures under " << dir;
}

TEST(Config, UnknownPreset) {
  EXPECT_TRUE(fails_with(qwen3vl::preset("7B").status(), "unknown Qwen3-VL preset '7B'"));
}

// --------------------------------------------------------------------------------------- parameter counts

struct Published {
  const char* name;
  int64_t hf_vision;  // sum of numel over model.visual parameters, transformers 4.57.1 on the meta device
  int64_t hf_text;    // model.language_model + lm_head (once when tied)
  double spec_text;   // spec §8 "LLM total params"
  double spec_vit;    // spec §8 "ViT params"
};

// hf_* columns: built by Qwen3VL(Moe)ForConditionalGeneration._from_config(AutoConfig of to_hf_config_json(preset))
// under torch.device("meta"), sum(p.numel() for p in model.parameters()) split by name prefix.
const Published kPublished[] = {
    {"2B", 406957056, 1720574976, 1.72e9, 407e6},
    {"4B", 415347712, 4022468096, 4.02e9, 415e6},
    {"8B", 576388336, 8190735360, 8.19e9, 576e6},
    {"32B", 595266800, 32762123264, 32.76e9, 595e6},
    {"30B-A3B", 538631408, 30532122624, 30.53e9, 539e6},
    {"235B-A22B", 576388336, 235093634560, 235.09e9, 576e6},
};

bool same_3_digits(double a, double b) {
  const double e = std::floor(std::log10(std::fabs(b)));
  const double scale = std::pow(10.0, e - 2);
  return std::llround(a / scale) == std::llround(b / scale);
}

TEST(Config, ParameterCountsMatchTransformersAndSpec) {
  for (const auto& p : kPublished) {
    const auto n = qwen3vl::count_params(must_preset(p.name));
    EXPECT_EQ(n.vision, p.hf_vision) << p.name;
    EXPECT_EQ(n.text_total(), p.hf_text) << p.name;
    EXPECT_EQ(n.total(), p.hf_vision + p.hf_text) << p.name;
    EXPECT_TRUE(same_3_digits(double(n.text_total()), p.spec_text)) << p.name << " " << n.text_total();
    EXPECT_TRUE(same_3_digits(double(n.vision), p.spec_vit)) << p.name << " " << n.vision;
  }
  const auto tied = qwen3vl::count_params(must_preset("2B"));
  EXPECT_EQ(tied.lm_head, 0);
  EXPECT_EQ(tied.text_embedding, 151936LL * 2048);
}

TEST(Config, TinyParameterCountsMatchTransformers) {
  // Same recipe as kPublished, for the debug presets; transformers also put layers 0 and 2 of tiny-moe in
  // Qwen3VLMoeTextSparseMoeBlock and tied tiny-dense's lm_head.
  constexpr int64_t kTinyDenseHf = 358592 + 146048;
  constexpr int64_t kTinyMoeHf = 358592 + 224896;
  EXPECT_EQ(qwen3vl::count_params(must_preset("tiny-dense")).total(), kTinyDenseHf);
  EXPECT_EQ(qwen3vl::count_params(must_preset("tiny-moe")).total(), kTinyMoeHf);
}

}  // namespace
