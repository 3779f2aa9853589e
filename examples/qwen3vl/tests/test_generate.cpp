// Greedy KV-cache decoding (generate.hpp) on the dense and MoE fixtures (tests/fixtures/qwen3vl/{dense,moe}).
//   TeacherForcing: prefill on the first k tokens of a sample, then feed the sample's true next tokens one by one;
//     the logits at every position equal Model::forward + Model::logits over the whole sample. Tolerance 1e-5
//     relative to the row's largest logit: both sides run the same fp32 kernels except the attention (the varlen
//     kernel's online softmax vs kv_cache_attention_forward's two-pass softmax) and GEMM blocking over 1 row instead of N;
//     a few u32 = 6e-8 per op over ~20 ops to the logits gives ~1e-6, the bound keeps a decade of slack. A wrong
//     position, a missing q/k norm, a stale cache row or a dropped deepstack/vision row is an O(1) error.
//   MatchesTransformersGenerate: the ids HF transformers 4.57.1 `generate` produced greedily (eager, fp32,
//     use_cache, 12 new tokens; tests/fixtures/qwen3vl/generate.json from tools/golden/make_generate_fixture.py)
//     are reproduced exactly. The fixture records each step's top-1 − top-2 logit gap: the smallest is checked to
//     exceed 100× the logit error bound above, so exact equality is the right comparison (no near-ties).
//   Eos / max length / errors. (The attention over the cache: tests/unit/test_kv_cache_attention.cpp.)
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <optional>

#include "generate.hpp"
#include "model_test_util.hpp"
#include "tolerances.hpp"

namespace qwen3vl {
namespace {

using vlpar::DType;
using vlpar::Shape;

constexpr int64_t kVisionEnd = 5;  // the fixtures' <|vision_end|> (tools/golden/qwen3vl_golden.py)
constexpr double kLogitTol = 1e-5;

// Index of the last <|vision_end|> of ids[0, n) (−1 if none).
int64_t last_vision_end(TensorView ids) {
  int64_t last = -1;
  for (int64_t i = 0; i < ids.numel(); ++i)
    if (ids.ptr<int64_t>()[i] == kVisionEnd) last = i;
  return last;
}

// max|a − b| / max|b| of two f32 [V] views.
double row_rel(TensorView a, TensorView b) { return test::rel_diff(a, b); }

TEST(GreedyToken, ArgmaxTiesToLowestIdNanIsAnError) {
  std::vector<float> l = {0.5f, 2.f, -1.f, 2.f};
  EXPECT_EQ(greedy_token(TensorView(l.data(), DType::kF32, Shape{4})).value(), 1);
  l[2] = NAN;
  const Result<int64_t> r = greedy_token(TensorView(l.data(), DType::kF32, Shape{4}));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("logit 2"), std::string::npos) << r.status().message();
}

// ---- teacher forcing -----------------------------------------------------------------------------------------

// Prefill on ids[0, k), then step with ids[k], ids[k+1], ...: every row equals the full forward's.
void teacher_force(const std::string& name, int64_t sample, int64_t extra_text,
                   Recompute recompute = Recompute::kNone) {
  test::Loaded l;
  test::load(l, name);
  l.model->set_recompute(recompute);  // kFull: the forward keeps no attention stash, prefill must not need it
  const vlpar::data::PackedBatch full_pack = test::sample_of(*l.batch, sample);
  const Batch full = full_pack.view();
  const int64_t N = full.input_ids.numel();
  Stash st;
  ASSERT_TRUE(l.model->forward(l.ctx, full, st).ok());
  Tensor want = l.model->logits(l.ctx, st, l.alloc).value();

  const int64_t k = last_vision_end(full.input_ids) + 1 + extra_text;
  ASSERT_LE(k, N - 3);  // at least three decode steps
  const vlpar::data::PackedBatch prompt_pack = vlpar::data::sample_of_pack(*l.batch, sample, k).value();
  Batch prompt = prompt_pack.view();
  prompt.labels = TensorView{};
  Result<Generator> g = Generator::create(*l.model, N, l.alloc);
  ASSERT_TRUE(g.ok()) << g.status().message();
  Result<TensorView> logits = g->prefill(l.ctx, prompt);
  ASSERT_TRUE(logits.ok()) << logits.status().message();
  // rope_delta: the full forward's position of token k − 1 is (k − 1) + delta, the decode positions continue it.
  EXPECT_EQ(st.positions.ptr<int64_t>()[k - 1], k - 1 + g->rope_delta()) << name << " sample " << sample;
  double worst = 0;
  for (int64_t i = k - 1; i < N; ++i) {
    if (i >= k) {
      logits = g->step(l.ctx, full.input_ids.ptr<int64_t>()[i]);
      ASSERT_TRUE(logits.ok()) << logits.status().message();
    }
    const double e = row_rel(logits.value(), want.view().slice(0, i, i + 1));
    worst = std::max(worst, e);
    EXPECT_LE(e, kLogitTol) << name << " sample " << sample << " position " << i;
  }
  EXPECT_EQ(g->length(), N);
  std::printf("[teacher forcing] %s sample %lld: prefill %lld + %lld steps, worst row error %.2e\n", name.c_str(),
              (long long)sample, (long long)k, (long long)(N - k), worst);
}

TEST(TeacherForcing, DenseImagesEqualTheFullForward) { teacher_force("dense", 0, 1); }
TEST(TeacherForcing, DenseVideoEqualsTheFullForward) { teacher_force("dense", 1, 0); }
TEST(TeacherForcing, MoeImagesEqualTheFullForward) { teacher_force("moe", 0, 1); }
TEST(TeacherForcing, MoeVideoEqualsTheFullForward) { teacher_force("moe", 1, 1); }
// Text only (sample 2): rope_delta 0, prefill of 2 tokens.
TEST(TeacherForcing, DenseTextOnlyEqualsTheFullForward) { teacher_force("dense", 2, 2); }
// The model's recompute mode changes what its forward keeps, never the generated logits.
TEST(TeacherForcing, MoeUnderFullRecomputeEqualsTheFullForward) { teacher_force("moe", 0, 1, Recompute::kFull); }
TEST(TeacherForcing, DenseUnderSelectiveRecomputeEqualsTheFullForward) {
  teacher_force("dense", 1, 0, Recompute::kSelective);
}

// ---- HF generate ---------------------------------------------------------------------------------------------

struct Case {
  std::string model;
  int64_t sample = 0, prompt_len = 0;
  std::vector<int64_t> generated;
  double min_gap = 0, max_abs_logit = 0;
};

std::vector<Case> hf_cases() {
  std::ifstream f(test::fixture("generate.json"));
  EXPECT_TRUE(f.good()) << test::fixture("generate.json");
  const nlohmann::json doc = nlohmann::json::parse(f);
  std::vector<Case> cases;
  for (const auto& c : doc.at("cases")) {
    Case k;
    k.model = c.at("model").get<std::string>();
    k.sample = c.at("sample").get<int64_t>();
    k.prompt_len = c.at("prompt_len").get<int64_t>();
    k.generated = c.at("generated").get<std::vector<int64_t>>();
    const auto gaps = c.at("top2_gap").get<std::vector<double>>();
    k.min_gap = *std::min_element(gaps.begin(), gaps.end());
    k.max_abs_logit = c.at("max_abs_logit").get<double>();
    cases.push_back(std::move(k));
  }
  EXPECT_EQ(cases.size(), 4u);
  return cases;
}

// The prompt of a case: the sample's first prompt_len tokens with all its images / videos.
vlpar::data::PackedBatch prompt_of(const test::Loaded& l, const Case& c) {
  Result<vlpar::data::PackedBatch> b = vlpar::data::sample_of_pack(*l.batch, c.sample, c.prompt_len);
  EXPECT_TRUE(b.ok()) << b.status().message();
  return b.ok() ? std::move(b).value() : vlpar::data::PackedBatch{};
}

TEST(Generate, MatchesTransformersGenerate) {
  std::map<std::string, std::unique_ptr<test::Loaded>> models;
  std::map<std::string, std::optional<Generator>> gens;
  for (const Case& c : hf_cases()) {
    // No near-ties: every step's argmax is decided by far more than the logit error.
    EXPECT_GT(c.min_gap, 100 * kLogitTol * c.max_abs_logit) << c.model << " sample " << c.sample;
    if (!models.count(c.model)) {
      models[c.model] = std::make_unique<test::Loaded>();
      test::load(*models[c.model], c.model);
      // One generator per model, reused across its prompts (a stale cache would show).
      Result<Generator> g = Generator::create(*models[c.model]->model, 64, models[c.model]->alloc);
      ASSERT_TRUE(g.ok()) << g.status().message();
      gens[c.model].emplace(std::move(g).value());
    }
    test::Loaded& l = *models[c.model];
    GenerateOptions o;
    o.max_new_tokens = int64_t(c.generated.size());
    Result<GenerateResult> r = gens[c.model]->generate(l.ctx, prompt_of(l, c).view(), o);
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_EQ(r->tokens, c.generated) << c.model << " sample " << c.sample;
    EXPECT_EQ(r->stop, StopReason::kMaxNewTokens);
    EXPECT_EQ(r->prompt_tokens, c.prompt_len);
    EXPECT_EQ(r->decode_steps, int64_t(c.generated.size()) - 1);
    EXPECT_EQ(gens[c.model]->length(), c.prompt_len + int64_t(c.generated.size()) - 1);
  }
}

// ---- stopping, capacity and errors ---------------------------------------------------------------------------

class GenerateLimits : public ::testing::Test {
 protected:
  void SetUp() override {
    c_ = hf_cases().front();  // dense, sample 0 (two images)
    ASSERT_EQ(c_.model, "dense");
    test::load(l_, c_.model);
    pack_ = prompt_of(l_, c_);
    prompt_ = pack_.view();
  }
  test::Loaded l_;
  Case c_;
  vlpar::data::PackedBatch pack_;
  Batch prompt_;
};

TEST_F(GenerateLimits, EosStopsAndIsKept) {
  const int64_t eos = c_.generated[3];
  const auto first = std::find(c_.generated.begin(), c_.generated.end(), eos);
  const std::vector<int64_t> want(c_.generated.begin(), first + 1);
  Generator g = Generator::create(*l_.model, 64, l_.alloc).value();
  GenerateOptions o;
  o.max_new_tokens = 12;
  o.eos_ids = {255, eos};
  Result<GenerateResult> r = g.generate(l_.ctx, prompt_, o);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->tokens, want);
  EXPECT_EQ(r->stop, StopReason::kEos);
  EXPECT_EQ(r->decode_steps, int64_t(want.size()) - 1);
}

TEST_F(GenerateLimits, MaxNewTokensAndMaxLengthAreRespected) {
  GenerateOptions o;
  o.max_new_tokens = 3;
  Generator g = Generator::create(*l_.model, 64, l_.alloc).value();
  Result<GenerateResult> r = g.generate(l_.ctx, prompt_, o);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->tokens, std::vector<int64_t>(c_.generated.begin(), c_.generated.begin() + 3));
  EXPECT_EQ(r->stop, StopReason::kMaxNewTokens);

  // max_length = prompt + 5: five tokens, the cache filled to the prompt + 4 fed tokens.
  Generator small = Generator::create(*l_.model, c_.prompt_len + 5, l_.alloc).value();
  o.max_new_tokens = 12;
  r = small.generate(l_.ctx, prompt_, o);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->tokens, std::vector<int64_t>(c_.generated.begin(), c_.generated.begin() + 5));
  EXPECT_EQ(r->stop, StopReason::kMaxLength);
  EXPECT_EQ(small.length(), c_.prompt_len + 4);
  ASSERT_TRUE(small.step(l_.ctx, r->tokens.back()).ok());  // the last free row
  const Result<TensorView> full = small.step(l_.ctx, 9);
  ASSERT_FALSE(full.ok());
  EXPECT_NE(full.status().message().find("full"), std::string::npos) << full.status().message();

  // A prompt that fills max_length leaves no room; a longer one does not fit the cache.
  Generator exact = Generator::create(*l_.model, c_.prompt_len, l_.alloc).value();
  EXPECT_FALSE(exact.generate(l_.ctx, prompt_, o).ok());
  EXPECT_TRUE(exact.prefill(l_.ctx, prompt_).ok());
  Generator tiny = Generator::create(*l_.model, c_.prompt_len - 1, l_.alloc).value();
  const Result<TensorView> too_long = tiny.prefill(l_.ctx, prompt_);
  ASSERT_FALSE(too_long.ok());
  EXPECT_NE(too_long.status().message().find("max_length"), std::string::npos) << too_long.status().message();
  o.max_new_tokens = 0;
  EXPECT_FALSE(g.generate(l_.ctx, prompt_, o).ok());
}

TEST_F(GenerateLimits, CacheIsPreallocatedAndReported) {
  const TextConfig& t = l_.model->config().text;
  const int64_t before = l_.alloc.stats(vlpar::Device::cpu()).current_bytes;
  Generator g = Generator::create(*l_.model, 100, l_.alloc).value();
  const int64_t expected = int64_t(t.layers) * 2 * 100 * t.kv_heads * t.head_dim * int64_t(sizeof(float));
  EXPECT_EQ(g.cache_bytes(), expected);
  EXPECT_GE(l_.alloc.stats(vlpar::Device::cpu()).current_bytes - before, expected);
}

TEST_F(GenerateLimits, BadPromptsAndCallsAreErrors) {
  Generator g = Generator::create(*l_.model, 64, l_.alloc).value();
  EXPECT_FALSE(g.step(l_.ctx, 9).ok());  // no prefill yet
  // Cut inside the second image's pad run: fewer pads than its grid gives.
  const vlpar::data::PackedBatch cut = vlpar::data::sample_of_pack(*l_.batch, c_.sample, 20).value();
  const Result<TensorView> r = g.prefill(l_.ctx, cut.view());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("grid"), std::string::npos) << r.status().message();
  EXPECT_FALSE(g.step(l_.ctx, 9).ok());  // the failed prefill left no sequence
  // Two samples.
  std::vector<int64_t> two = {0, 10, c_.prompt_len};
  Batch packed = prompt_;
  packed.cu_seqlens = TensorView(two.data(), DType::kI64, Shape{3});
  packed.host_cu_seqlens = two;
  const Result<TensorView> p = g.prefill(l_.ctx, packed);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("one sample"), std::string::npos) << p.status().message();
  // A token outside the vocabulary.
  ASSERT_TRUE(g.prefill(l_.ctx, prompt_).ok());
  const Result<TensorView> s = g.step(l_.ctx, l_.model->config().text.vocab);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("vocabulary"), std::string::npos) << s.status().message();
  EXPECT_FALSE(Generator::create(*l_.model, 1, l_.alloc).ok());
}

}  // namespace
}  // namespace qwen3vl
