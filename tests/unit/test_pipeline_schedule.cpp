// Pipeline schedules as data (include/vlpar/parallel/pipeline_schedule.hpp) against the worked examples and the
// simulator table of ../shared/spec/pipeline-and-experts.md A2.8 (there derived from PyTorch's generators and
// Megatron's schedule table): generated lists in the text form, the lowering example of A1.4, makespan, bubble and
// peak stashes per schedule; the validator's and simulator's named errors (missing backward, W before I, unmatched
// receive, a deadlock), and the text form's round trip and parse errors; the forward-only schedule of evaluation
// (its order, every placement lowered and simulated, its bubble, what its validation rejects).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "vlpar/parallel/pipeline_schedule.hpp"

namespace vlpar::pipeline {
namespace {

std::string ranks_text(const Result<Schedule>& s) {
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  return s.ok() ? to_string(s.value()) : "";
}

TEST(PipelineSchedule, OneFOneBMatchesTheWorkedExample) {
  EXPECT_EQ(ranks_text(one_f_one_b(4, 8)),
            "r0: 0F0 0F1 0F2 0F3 0B0 0F4 0B1 0F5 0B2 0F6 0B3 0F7 0B4 0B5 0B6 0B7\n"
            "r1: 1F0 1F1 1F2 1B0 1F3 1B1 1F4 1B2 1F5 1B3 1F6 1B4 1F7 1B5 1B6 1B7\n"
            "r2: 2F0 2F1 2B0 2F2 2B1 2F3 2B2 2F4 2B3 2F5 2B4 2F6 2B5 2F7 2B6 2B7\n"
            "r3: 3F0 3B0 3F1 3B1 3F2 3B2 3F3 3B3 3F4 3B4 3F5 3B5 3F6 3B6 3F7 3B7\n");
}

TEST(PipelineSchedule, ZeroBubbleH1MatchesTheWorkedExample) {
  EXPECT_EQ(ranks_text(zb_h1(4, 8)),
            "r0: 0F0 0F1 0F2 0F3 0I0 0W0 0F4 0I1 0W1 0F5 0I2 0W2 0F6 0I3 0W3 0F7 0I4 0W4 0I5 0W5 0I6 0W6 0I7 0W7\n"
            "r1: 1F0 1F1 1F2 1I0 1F3 1I1 1W0 1F4 1I2 1W1 1F5 1I3 1W2 1F6 1I4 1W3 1F7 1I5 1W4 1I6 1W5 1I7 1W6 1W7\n"
            "r2: 2F0 2F1 2I0 2F2 2I1 2F3 2I2 2W0 2F4 2I3 2W1 2F5 2I4 2W2 2F6 2I5 2W3 2F7 2I6 2W4 2I7 2W5 2W6 2W7\n"
            "r3: 3F0 3I0 3F1 3I1 3F2 3I2 3F3 3I3 3W0 3F4 3I4 3W1 3F5 3I5 3W2 3F6 3I6 3W3 3F7 3I7 3W4 3W5 3W6 3W7\n");
}

TEST(PipelineSchedule, InterleavedMatchesTheWorkedExample) {
  EXPECT_EQ(ranks_text(interleaved_1f1b(2, 2, 4, 2)),
            "r0: 0F0 0F1 2F0 2F1 0F2 2B0 0F3 2B1 2F2 0B0 2F3 0B1 2B2 2B3 0B2 0B3\n"
            "r1: 1F0 1F1 3F0 3B0 3F1 3B1 1F2 1B0 1F3 1B1 3F2 3B2 3F3 3B3 1B2 1B3\n");
}

TEST(PipelineSchedule, ZeroBubbleVMatchesTheWorkedExample) {
  EXPECT_EQ(ranks_text(zb_v(2, 4)),
            "r0: 0F0 0F1 0F2 3F0 3I0 3W0 3F1 3I1 3W1 0F3 0I0 0W0 3F2 3I2 3W2 0I1 0W1 3F3 3I3 3W3 0I2 0W2 0I3 0W3\n"
            "r1: 1F0 2F0 1F1 2F1 2I0 2W0 1F2 1I0 1W0 2F2 2I1 2W1 1F3 1I1 1W1 2F3 2I2 2W2 1I2 2I3 1I3 1W2 2W3 1W3\n");
}

TEST(PipelineSchedule, LoweringMatchesTheWorkedExample) {
  const Result<Schedule> s = one_f_one_b(2, 2);
  ASSERT_TRUE(s.ok());
  const Result<Schedule> low = lower(s.value());
  EXPECT_EQ(ranks_text(low), "r0: 0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1\n"
                             "r1: 1RECV_F0 1F0 1RECV_F1 1B0 1SEND_B0 1F1 1B1 1SEND_B1\n");
  ASSERT_TRUE(low.ok());
  EXPECT_TRUE(validate(low.value(), true).ok()) << validate(low.value(), true).to_string();
}

struct SimRow {
  const char* name;
  Result<Schedule> (*make)();
  double makespan;
  std::vector<int> peak_act, peak_w;
};

class PipelineSim : public ::testing::TestWithParam<SimRow> {};

/// Every schedule validates compute-only and lowered, and the compute-only and lowered runs of the simulator give
/// the spec's makespan (T_F = T_I = T_W = 1, T_B = 2), bubble 1 − ideal/makespan and peak stashes.
TEST_P(PipelineSim, MatchesTheSpecTable) {
  const SimRow& row = GetParam();
  const Result<Schedule> s = row.make();
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  ASSERT_TRUE(validate(s.value(), false).ok()) << validate(s.value(), false).to_string();
  const Result<Schedule> low = lower(s.value());
  ASSERT_TRUE(low.ok()) << low.status().to_string();
  ASSERT_TRUE(validate(low.value(), true).ok()) << validate(low.value(), true).to_string();
  for (const Schedule* sched : {&s.value(), &low.value()}) {
    const Result<SimResult> r = simulate(*sched);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(r->makespan, row.makespan) << row.name;
    const double ideal = r->busy[0];
    EXPECT_NEAR(r->bubble, 1.0 - ideal / row.makespan, 1e-12) << row.name;
    EXPECT_EQ(r->peak_activations, row.peak_act) << row.name;
    EXPECT_EQ(r->peak_wgrad, row.peak_w) << row.name;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Spec, PipelineSim,
    ::testing::Values(
        SimRow{"gpipe_p4_m8", [] { return gpipe(4, 8); }, 33, {8, 8, 8, 8}, {8, 8, 8, 8}},
        SimRow{"1f1b_p4_m8", [] { return one_f_one_b(4, 8); }, 33, {4, 3, 2, 1}, {4, 3, 2, 1}},
        SimRow{"zbh1_p4_m8", [] { return zb_h1(4, 8); }, 27, {4, 3, 2, 1}, {4, 4, 4, 4}},
        SimRow{"interleaved_p2_v2_m4", [] { return interleaved_1f1b(2, 2, 4, 2); }, 27, {5, 3}, {5, 3}},
        SimRow{"interleaved_p4_v2_m8", [] { return interleaved_1f1b(4, 2, 8); }, 57, {11, 9, 7, 5}, {11, 9, 7, 5}},
        SimRow{"zbv_p2_m4", [] { return zb_v(2, 4); }, 25, {4, 4}, {4, 4}},
        SimRow{"zbv_p4_m8", [] { return zb_v(4, 8); }, 51, {8, 8, 8, 8}, {8, 8, 8, 8}}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(PipelineSchedule, TextFormRoundTripsAndNamesBadActions) {
  const Result<Schedule> s = zb_v(2, 4);
  ASSERT_TRUE(s.ok());
  const auto parsed = parse_ranks(to_string(s.value()));
  ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
  EXPECT_EQ(parsed.value(), s->ranks);
  const Result<Action> a = parse_action("12SEND_B7");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a.value(), (Action{12, ActionKind::kSendB, 7}));
  for (const char* bad : {"F3", "3X4", "3F", "3SEND_F", "3F4x"}) {
    const Result<Action> r = parse_action(bad);
    EXPECT_FALSE(r.ok()) << bad;
  }
  const auto wrong_rank = parse_ranks("r0: 0F0\nr2: 1F0\n");
  ASSERT_FALSE(wrong_rank.ok());
  EXPECT_NE(wrong_rank.status().message().find("must start with 'r1:'"), std::string::npos);
}

TEST(PipelineSchedule, ValidatorNamesTheFirstViolation) {
  Schedule s = one_f_one_b(2, 2).value();
  Schedule missing = s;
  missing.ranks[1].pop_back();  // 1B1
  Status st = validate(missing, false);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("stage 1 micro-batch 1 needs one B or one I and one W"), std::string::npos)
      << st.message();
  Schedule wi = zb_h1(2, 2).value();  // r1: 1F0 1I0 1F1 1I1 1W0 1W1 → swap 1I1 and 1W0? use r0's W0 before I0
  std::swap(wi.ranks[0][2], wi.ranks[0][3]);  // r0: 0F0 0F1 0W0 0I0 …
  st = validate(wi, false);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("0W0 runs before its I"), std::string::npos) << st.message();
  Schedule low = lower(s).value();
  low.ranks[1].erase(low.ranks[1].begin());  // 1RECV_F0
  st = validate(low, true);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("needs 0SEND_F0 after 0F0 and one 1RECV_F0 before 1F0"), std::string::npos)
      << st.message();
}

TEST(PipelineSchedule, DeadlockIsANamedError) {
  Schedule s = one_f_one_b(2, 1).value();
  s.ranks[1] = {Action{1, ActionKind::kB, 0}, Action{1, ActionKind::kF, 0}};  // the spec's example
  const Result<SimResult> r = simulate(s);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("deadlocks"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("r1: 1B0 waits for 1F0"), std::string::npos) << r.status().message();
  EXPECT_FALSE(lower(s).ok());
}

/// Costs per action (the bubble benchmark feeds measured ones): GPipe, two stages, two micro-batches, stage 1
/// three times as slow as stage 0, micro-batch 1 one unit slower.
///   r0: F0 [0,1) F1 [1,3)   B0 after r1's B0: [13,15)   B1 after r1's B1: [19,22)
///   r1: F0 [1,4) F1 [4,8) B0 [8,13) B1 [13,19)           makespan 22; busy 8 + 18 of 2·22.
TEST(PipelineSchedule, PerActionCostsDriveTheSimulation) {
  SimCosts c;
  c.action = [](const Action& a) {
    const double base = a.kind == ActionKind::kF ? (a.stage == 0 ? 1 : 3) : (a.stage == 0 ? 2 : 5);
    return base + a.mb;
  };
  const Result<SimResult> r = simulate(gpipe(2, 2).value(), c);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r.value().makespan, 22);
  EXPECT_EQ(r.value().busy, (std::vector<double>{8, 18}));
  EXPECT_DOUBLE_EQ(r.value().bubble, 1 - 26.0 / 44);
  // A message cost on the three cross-rank hops of the critical path (F0 → r1, r1's B1 → r0; r1's F1 is later
  // than r0's F1 + 0.5 anyway): 22 + 0.5 + 0.5.
  c.message = 0.5;
  const Result<SimResult> m = simulate(gpipe(2, 2).value(), c);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m.value().makespan, 23);
  // Same-rank hand-offs are free: interleaved on one rank takes exactly its compute.
  EXPECT_EQ(simulate(interleaved_1f1b(1, 2, 2).value(), c).value().makespan, 2 * (1 + 3 + 2 + 5) + 4);
}

TEST(PipelineSchedule, TimelineDrawsTheSimulation) {
  const Schedule s = one_f_one_b(2, 2).value();
  const Result<SimResult> r = simulate(s);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(timeline(s, r.value()), "r0: F0 F1 .  .  B0 B0 .  B1 B1\n"
                                    "r1: .  F0 B0 B0 F1 B1 B1 .  .\n");
  const Schedule v = zb_v(1, 2).value();  // two stages on one rank: the stage is named
  EXPECT_EQ(timeline(v, simulate(v).value()), "r0: 0F0 1F0 1I0 1W0 0F1 0I0 0W0 1F1 1I1 1W1 0I1 0W1\n");
}

TEST(PipelineSchedule, GeneratorsByName) {
  EXPECT_EQ(to_string(generate("gpipe", 2, 3).value()), to_string(gpipe(2, 3).value()));
  EXPECT_EQ(to_string(generate("1f1b", 4, 8).value()), to_string(one_f_one_b(4, 8).value()));
  EXPECT_EQ(to_string(generate("interleaved", 2, 4, 3).value()), to_string(interleaved_1f1b(2, 3, 4).value()));
  EXPECT_EQ(to_string(generate("zb_h1", 4, 8).value()), to_string(zb_h1(4, 8).value()));
  EXPECT_EQ(to_string(generate("zb_v", 2, 4).value()), to_string(zb_v(2, 4).value()));
  EXPECT_EQ(to_string(generate("forward_only", 3, 5).value()), to_string(forward_only(3, 5).value()));
  const Status bad = generate("dualpipe", 2, 4).status();
  EXPECT_NE(bad.message().find("pipeline schedule 'dualpipe': expected gpipe, 1f1b, interleaved, zb_h1, zb_v or "
                               "forward_only"), std::string::npos) << bad.message();
}

TEST(PipelineSchedule, BadConfigurationsAreNamedErrors) {
  EXPECT_FALSE(interleaved_1f1b(4, 2, 6).ok());   // m mod g = 2 < p
  EXPECT_FALSE(interleaved_1f1b(4, 1, 8).ok());   // one chunk
  EXPECT_FALSE(one_f_one_b(0, 4).ok());
  EXPECT_TRUE(interleaved_1f1b(2, 2, 5, 3).ok());  // Megatron's own example: p=2, g=3, m=5
  EXPECT_TRUE(one_f_one_b(4, 2).ok());             // fewer micro-batches than ranks: warm-up capped
}

// Forward-only (evaluation): micro-batches in groups of p through each stage, on the placement given; lowered, the
// receives land before the F that consumes them.
TEST(PipelineSchedule, ForwardOnlyMatchesItsOrderAndLowers) {
  EXPECT_EQ(ranks_text(forward_only(2, 3)),
            "r0: 0F0 0F1 0F2\n"
            "r1: 1F0 1F1 1F2\n");
  EXPECT_EQ(ranks_text(forward_only(2, 3, loop_placement(2, 2))),  // groups {0, 1}, {2}
            "r0: 0F0 0F1 2F0 2F1 0F2 2F2\n"
            "r1: 1F0 1F1 3F0 3F1 1F2 3F2\n");
  EXPECT_EQ(ranks_text(forward_only(2, 2, v_placement(2))),  // r0 holds stages 0 and 3, r1 stages 1 and 2
            "r0: 0F0 0F1 3F0 3F1\n"
            "r1: 1F0 1F1 2F0 2F1\n");
  EXPECT_EQ(ranks_text(lower(forward_only(2, 2).value())),
            "r0: 0F0 0SEND_F0 0F1 0SEND_F1\n"
            "r1: 1RECV_F0 1F0 1RECV_F1 1F1\n");
}

// Every placement the training generators use, p 1..5 and m around p: validates lowered, simulates without
// deadlock, holds no stash between actions, and with one stage per rank and equal costs has the closed-form bubble
// (p − 1) / (m + p − 1): rank r runs F(r, j) at time r + j.
TEST(PipelineSchedule, ForwardOnlySweepValidatesWithTheClosedFormBubble) {
  for (int p = 1; p <= 5; ++p)
    for (int m : {1, p, p + 1, 2 * p + 1}) {
      std::vector<std::pair<std::string, std::vector<int>>> placements = {{"loop1", loop_placement(p, 1)},
                                                                          {"loop3", loop_placement(p, 3)}};
      if (p > 1) placements.push_back({"v", v_placement(p)});
      for (const auto& [name, placement] : placements) {
        SCOPED_TRACE(fmt::format("p {} m {} {}", p, m, name));
        const Result<Schedule> s = forward_only(p, m, placement);
        ASSERT_TRUE(s.ok()) << s.status().to_string();
        EXPECT_TRUE(s->forward_only);
        const Result<Schedule> low = lower(s.value());
        ASSERT_TRUE(low.ok()) << low.status().to_string();
        EXPECT_TRUE(low->forward_only);
        ASSERT_TRUE(validate(low.value(), true).ok()) << validate(low.value(), true).to_string();
        const Result<SimResult> sim = simulate(low.value());
        ASSERT_TRUE(sim.ok()) << sim.status().to_string();
        for (int r = 0; r < p; ++r) {
          EXPECT_EQ(sim->peak_activations[size_t(r)], 0) << "rank " << r;
          EXPECT_EQ(sim->peak_wgrad[size_t(r)], 0) << "rank " << r;
          EXPECT_EQ(sim->busy[size_t(r)], double(m * int(placement.size()) / p)) << "rank " << r;
        }
        if (name == "loop1") {
          EXPECT_EQ(sim->makespan, double(m + p - 1));
          EXPECT_NEAR(sim->bubble, double(p - 1) / double(m + p - 1), 1e-12);
        }
      }
    }
}

TEST(PipelineSchedule, ForwardOnlyRejectsBackwardAndTrainingNeedsIt) {
  Schedule s = forward_only(2, 2).value();
  Schedule with_b = s;
  with_b.ranks[1].push_back({1, ActionKind::kB, 0});
  Status st = validate(with_b, false);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("r1 position 2: 1B0 in a forward-only schedule"), std::string::npos) << st.message();
  Schedule low = lower(s).value();
  low.ranks[0].push_back({0, ActionKind::kRecvB, 0});
  st = validate(low, true);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("0RECV_B0 in a forward-only schedule"), std::string::npos) << st.message();
  Schedule training = s;
  training.forward_only = false;  // the same lists as a training schedule: every backward missing
  st = validate(training, false);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("stage 0 micro-batch 0 needs one B or one I and one W"), std::string::npos)
      << st.message();
  EXPECT_FALSE(forward_only(2, 0).ok());
  const Status placed = forward_only(2, 2, {0, 2}).status();
  EXPECT_NE(placed.message().find("forward_only: stage 1 is placed on rank 2, outside [0, 2)"), std::string::npos)
      << placed.message();
}

}  // namespace
}  // namespace vlpar::pipeline
