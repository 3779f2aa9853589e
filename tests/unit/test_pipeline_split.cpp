// Pipeline stage layouts (parallel/pipeline_split.hpp): the layout grammar (Megatron's plus V) with its named
// errors and round trip, the uniform split, micro-batches in flight per stage for the generated schedules, and the
// cost-model split against brute force over every split of small random problems (bottleneck optimal, memory
// budget respected, tie rules), Qwen3-VL's deepstack rule, and the named errors with their suggestions.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "vlpar/core/philox.hpp"
#include "vlpar/parallel/pipeline_split.hpp"

namespace vlpar::pipeline {
namespace {

void expect_error(const Status& s, const std::string& want) {
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find(want), std::string::npos) << "got: " << s.message() << "\nwant: " << want;
}

TEST(PipelineSplit, LayoutGrammarRoundTripsAndExpandsGroups) {
  auto a = parse_layout("V E t*5 | t*9 | t*9 | t*8 L", 31);
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  EXPECT_EQ(a.value().bounds, (std::vector<int>{0, 5, 14, 23, 31}));
  EXPECT_TRUE(a.value().vision);
  EXPECT_EQ(a.value().to_string(), "V E t*5 | t*9 | t*9 | t*8 L");
  // Megatron's DeepSeek-V3 example with its MTP layer replaced by a decoder layer: 32 stages, the last only L.
  auto b = parse_layout("Et*3|(tt|)*29,t|L", 62);
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  ASSERT_EQ(b.value().num_stages(), 32);
  EXPECT_EQ(b.value().layers_of(0), 3);
  EXPECT_EQ(b.value().layers_of(1), 2);
  EXPECT_EQ(b.value().layers_of(30), 1);
  EXPECT_EQ(b.value().layers_of(31), 0);
  EXPECT_FALSE(b.value().vision);
  auto c = parse_layout(b.value().to_string(), 62);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c.value(), b.value());
  auto d = parse_layout("E(t*2|)*2 t L", 5);  // nested repetition, single-stage tail
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(d.value().bounds, (std::vector<int>{0, 2, 4, 5}));
}

TEST(PipelineSplit, LayoutErrorsAreNamed) {
  expect_error(parse_layout("Et*3|(tt|)*29,m|L", 61).status(), "'m' (an MTP layer) is not supported");
  expect_error(parse_layout("E t*2 x | t L", 3).status(), "unknown symbol 'x'");
  expect_error(parse_layout("E (t*2 | t L", 3).status(), "'(' not closed");
  expect_error(parse_layout("E t*2) | t L", 3).status(), "')' without '('");
  expect_error(parse_layout("E t* | t L", 3).status(), "'*' needs a repeat count");
  expect_error(parse_layout("E||t|L", 1).status(), "stage 1 holds nothing (remove a '|' or give it layers)");
  expect_error(parse_layout("t | E t L", 2).status(), "stage 0: E (embedding) and V (vision tower) go on stage 0");
  expect_error(parse_layout("E t | t", 2).status(), "stage 1: L (loss and head) goes on the last stage");
  expect_error(parse_layout("E t*3 | t L", 5).status(), "holds 4 decoder layers, the model has 5");
}

TEST(PipelineSplit, UniformSplitAndItsSuggestion) {
  auto u = uniform_layout(8, 4);
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u.value().bounds, (std::vector<int>{0, 2, 4, 6, 8}));
  expect_error(uniform_layout(28, 8).status(), "28 decoder layers do not divide into 8 stages (pp·vpp); give a "
                                               "layout, e.g. 'E t*3 | t*3 | t*3 | t*3 | t*4 | t*4 | t*4 | t*4 L'");
  expect_error(uniform_layout(3, 4).status(), "3 decoder layers cannot fill 4 stages (pp·vpp)");
}

TEST(PipelineSplit, MicroBatchesInFlightPerStage) {
  EXPECT_EQ(stage_in_flight(one_f_one_b(4, 8).value()), (std::vector<int>{4, 3, 2, 1}));
  EXPECT_EQ(stage_in_flight(gpipe(2, 3).value()), (std::vector<int>{3, 3}));
  EXPECT_EQ(stage_in_flight(one_f_one_b(4, 2).value()), (std::vector<int>{2, 2, 2, 1}));
}

/// Every split of L layers into S stages (each bounds vector), for brute force.
void each_split(int L, int S, const std::function<void(const std::vector<int>&)>& fn) {
  std::vector<int> b(size_t(S) + 1, 0);
  b[size_t(S)] = L;
  std::function<void(int)> rec = [&](int s) {
    if (s == S) return fn(b);
    for (int k = b[size_t(s) - 1]; k <= L; ++k) {
      b[size_t(s)] = k;
      rec(s + 1);
    }
  };
  if (S == 1) return fn(b);
  rec(1);
}

TEST(PipelineSplit, BalancedSplitEqualsBruteForce) {
  uint64_t ctr = 0;
  auto u = [&](float lo, float hi) { return philox_uniform(99, 1, ctr++, lo, hi); };
  for (int trial = 0; trial < 60; ++trial) {
    const int L = 2 + trial % 8, S = 1 + trial % 4;
    SplitCosts c;
    for (int i = 0; i < L; ++i) {
      c.layer.push_back(std::round(u(1, 9)));
      c.layer_static.push_back(int64_t(u(10, 50)));
      c.layer_stash.push_back(int64_t(u(1, 20)));
    }
    c.first = trial % 3 == 0 ? std::round(u(0, 12)) : 0;
    c.last = trial % 2 == 0 ? std::round(u(0, 6)) : 0;
    c.first_stash = 15;
    c.vision = c.first > 0;
    c.min_first_layers = trial % 5 == 0 ? 1 : 0;
    for (int s = 0; s < S; ++s) c.in_flight.push_back(S - s);
    c.budget = trial % 4 == 1 ? int64_t(u(60, 200)) : 0;
    SCOPED_TRACE(testing::Message() << "trial " << trial << " L " << L << " S " << S);

    double best = INFINITY;
    each_split(L, S, [&](const std::vector<int>& b) {
      auto e = evaluate_layout(c, Layout{b, c.vision});
      ASSERT_TRUE(e.ok());
      for (int s = 0; s < S; ++s) {
        const int n = b[size_t(s) + 1] - b[size_t(s)];
        const bool own = (s == 0 && (c.first > 0 || c.vision)) || (s == S - 1 && c.last > 0) || S == 1;
        if (n < (own ? 0 : 1) || (s == 0 && n < c.min_first_layers)) return;
        if (c.budget && e.value().stage_memory[size_t(s)] > c.budget) return;
      }
      best = std::min(best, e.value().bottleneck);
    });
    auto plan = balanced_layout(c, S);
    if (best == INFINITY) {
      EXPECT_FALSE(plan.ok());
      continue;
    }
    ASSERT_TRUE(plan.ok()) << plan.status().to_string();
    EXPECT_EQ(plan.value().bottleneck, best);
    for (int s = 0; s < S && c.budget; ++s) EXPECT_LE(plan.value().stage_memory[size_t(s)], c.budget) << "stage " << s;
    // Secondary: no split with that bottleneck is more even (Σ C_s²); tertiary: none as even has fewer layers on
    // stage 0.
    const auto sumsq = [](const SplitPlan& e) {
      double q = 0;
      for (double x : e.stage_cost) q += x * x;
      return q;
    };
    const double plan_sq = sumsq(plan.value());
    each_split(L, S, [&](const std::vector<int>& b) {
      auto e = evaluate_layout(c, Layout{b, c.vision});
      if (e.value().bottleneck > best) return;
      for (int s = 0; s < S; ++s) {
        const int n = b[size_t(s) + 1] - b[size_t(s)];
        const bool own = (s == 0 && (c.first > 0 || c.vision)) || (s == S - 1 && c.last > 0) || S == 1;
        if (n < (own ? 0 : 1) || (s == 0 && n < c.min_first_layers)) return;
        if (c.budget && e.value().stage_memory[size_t(s)] > c.budget) return;
      }
      const double q = sumsq(e.value());
      EXPECT_GE(q, plan_sq) << "more even: " << Layout{b, c.vision}.to_string();
      EXPECT_TRUE(q > plan_sq || b[1] >= plan.value().layout.bounds[1]) << Layout{b, c.vision}.to_string();
    });
  }
}

TEST(PipelineSplit, VisionOnStageZeroAndDeepstackRule) {
  // 8 unit layers, a vision tower of cost 3 on stage 0, 2 stages: stage 0 = 3 + k, stage 1 = 8 − k; k = 2 gives
  // (5, 6) and k = 3 gives (6, 5), equally even: the tie goes to fewer layers on stage 0.
  SplitCosts c;
  c.layer.assign(8, 1.0);
  c.first = 3;
  c.vision = true;
  auto p = balanced_layout(c, 2);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(p.value().layout.to_string(), "V E t*2 | t*6 L");
  EXPECT_EQ(p.value().bottleneck, 6);
  // Deepstack: layers 0..2 on stage 0 whatever it costs.
  c.min_first_layers = 3;
  p = balanced_layout(c, 2);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p.value().layout.bounds, (std::vector<int>{0, 3, 8}));
  // A vision-heavy first stage may hold no decoder layer (the vision tower as its own stage); the others even.
  c.min_first_layers = 0;
  c.first = 20;
  p = balanced_layout(c, 3);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p.value().layout.to_string(), "V E | t*4 | t*4 L");
}

TEST(PipelineSplit, ImpossibleSplitsAreNamedWithASuggestion) {
  SplitCosts c;
  c.layer.assign(4, 1.0);
  expect_error(balanced_layout(c, 6).status(), "4 decoder layers cannot fill 6 stages (pp·vpp): 6 of them need a "
                                               "layer; use at most 4 stages");
  c.layer_static.assign(4, 100);
  c.layer_stash.assign(4, 10);
  c.in_flight = {2, 1};
  c.budget = 150;
  expect_error(balanced_layout(c, 2).status(), "fits the budget of 150 bytes per stage: the least any split needs on "
                                               "its fullest stage is 240 bytes");
  c.layer[2] = -1;
  expect_error(balanced_layout(c, 2).status(), "layer 2 has cost -1");
}

}  // namespace
}  // namespace vlpar::pipeline
