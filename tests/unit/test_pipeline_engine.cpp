// The pipeline engine on one rank (parallel/pipeline_engine.hpp): every generator's schedule for one rank, with
// one to four chunks of the toy model (tests/pipeline_toy.hpp) on that rank, so every boundary is a same-rank
// hand-off. Checks: loss and every gradient bitwise equal to the single-process reference over two steps; the
// allocator's peak within the bound derived from the simulator's in-flight stashes; per-action timings; and the
// named errors (wrong group size, stages the schedule does not place here, a split schedule for a stage type without
// backward_input/backward_weight, ports of neighbouring stages that disagree); forward-only evaluation (the losses,
// no gradient, no stash kept).
// The multi-rank half: tests/mpi/test_pipeline_ranks.cpp.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "pipeline_toy.hpp"
#include "vlpar/comm/single_communicator.hpp"
#include "vlpar/parallel/pipeline_engine.hpp"

namespace vlpar::test {
namespace {

using pipeline::Schedule;

constexpr int64_t kHidden = 16;
constexpr int kLayers = 8;
const std::vector<int64_t> kRows = {5, 3, 6, 4};

void expect_same_grads(const ToyModel& got, const ToyModel& want) {
  for (int l = 0; l < got.layers(); ++l)
    for (auto [g, w] : {std::pair{&got.dw, &want.dw}, std::pair{&got.db, &want.db}}) {
      const Tensor& a = (*g)[size_t(l)];
      const Tensor& b = (*w)[size_t(l)];
      ASSERT_EQ(0, std::memcmp(a.ptr<float>(), b.ptr<float>(), size_t(a.numel()) * 4)) << "layer " << l;
    }
}

struct Case {
  std::string name;
  std::function<Result<Schedule>()> make;
};

std::vector<Case> one_rank_cases() {
  const int m = int(kRows.size());
  return {{"gpipe", [=] { return pipeline::gpipe(1, m); }},
          {"1f1b", [=] { return pipeline::one_f_one_b(1, m); }},
          {"zb_h1", [=] { return pipeline::zb_h1(1, m); }},
          {"interleaved_v2", [=] { return pipeline::interleaved_1f1b(1, 2, m); }},
          {"interleaved_v4", [=] { return pipeline::interleaved_1f1b(1, 4, m); }},
          {"zb_v", [=] { return pipeline::zb_v(1, m); }}};
}

TEST(PipelineEngine, OneRankMatchesReferenceBitwiseWithinMemoryBound) {
  for (const Case& c : one_rank_cases()) {
    SCOPED_TRACE(c.name);
    auto compute = c.make();
    ASSERT_TRUE(compute.ok()) << compute.status().to_string();
    auto lowered = pipeline::lower(compute.value());
    ASSERT_TRUE(lowered.ok()) << lowered.status().to_string();
    auto sim = pipeline::simulate(lowered.value());
    ASSERT_TRUE(sim.ok()) << sim.status().to_string();

    comm::SingleCommunicator world;
    auto run = ToyRun::make(lowered.value(), world, kHidden, kLayers, kRows, 11);
    ASSERT_TRUE(run.ok()) << run.status().to_string();
    ToyRun& t = *run.value();

    const int64_t bound = toy_memory_bound(t.model, t.mine, lowered.value(), 0, sim.value().peak_wgrad[0]);
    std::vector<double> want;
    for (int step = 0; step < 2; ++step) {  // the second step accumulates onto the first's gradients
      const ToyStepResult r = t.step();
      ASSERT_TRUE(r.status.ok()) << r.status.to_string();
      want = r.want;
      EXPECT_EQ(r.left, 0) << "the step left allocations behind";
      EXPECT_LE(r.peak, bound) << "peak_wgrad " << sim.value().peak_wgrad[0];
    }
    const ToyStage& last = t.mine.stages.back();
    ASSERT_EQ(last.losses().size(), want.size());
    for (size_t j = 0; j < want.size(); ++j) EXPECT_EQ(last.losses()[j], want[j]) << "micro-batch " << j;
    expect_same_grads(t.model, t.ref);

    const auto& times = t.engine->timings();
    ASSERT_EQ(times.size(), lowered.value().ranks[0].size());
    for (size_t i = 0; i < times.size(); ++i) {
      EXPECT_EQ(times[i].action, lowered.value().ranks[0][i]);
      EXPECT_LE(times[i].start, times[i].end);
      EXPECT_LE(times[i].wait, times[i].end - times[i].start + 1e-9);
      if (i) {
        EXPECT_LE(times[i - 1].end, times[i].start);
      }
    }
  }
}

// Forward-only (evaluation) on one rank with one to three chunks: the losses of the training forward bitwise, no
// parameter gradient touched, no stash past its F (the peak fits one in-flight micro-batch), nothing left after.
TEST(PipelineEngine, ForwardOnlyGivesTheLossesWithoutGradientsOrStashes) {
  for (int chunks = 1; chunks <= 3; ++chunks) {
    SCOPED_TRACE(fmt::format("{} chunks", chunks));
    auto lowered = pipeline::lower(pipeline::forward_only(1, int(kRows.size()), pipeline::loop_placement(1, chunks))
                                       .value());
    ASSERT_TRUE(lowered.ok()) << lowered.status().to_string();
    comm::SingleCommunicator world;
    auto run = ToyRun::make(lowered.value(), world, kHidden, kLayers, kRows, 13);
    ASSERT_TRUE(run.ok()) << run.status().to_string();
    ToyRun& t = *run.value();
    const ToyStepResult r = t.step();
    ASSERT_TRUE(r.status.ok()) << r.status.to_string();
    EXPECT_EQ(r.left, 0) << "the step left allocations behind";
    EXPECT_LE(r.peak, toy_memory_bound(t.model, t.mine, lowered.value(), 0, 1)) << "more than one stash alive";
    const ToyStage& last = t.mine.stages.back();
    for (size_t j = 0; j < r.want.size(); ++j) EXPECT_EQ(last.losses()[j], r.want[j]) << "micro-batch " << j;
    for (int l = 0; l < kLayers; ++l)
      for (const Tensor* g : {&t.model.dw[size_t(l)], &t.model.db[size_t(l)]})
        for (int64_t i = 0; i < g->numel(); ++i) ASSERT_EQ(g->ptr<float>()[i], 0.f) << "layer " << l;
    EXPECT_EQ(t.engine->timings().size(), lowered.value().ranks[0].size());
  }
}

void expect_error(const Status& s, StatusCode code, const std::string& want) {
  EXPECT_EQ(s.code(), code) << s.to_string();
  EXPECT_NE(s.message().find(want), std::string::npos) << "got: " << s.message() << "\nwant: " << want;
}

TEST(PipelineEngine, SetupErrorsAreNamed) {
  Allocator params;
  ToyModel model = ToyModel::make(params, kHidden, kLayers, kRows, 3);
  comm::SingleCommunicator world;
  auto two = pipeline::lower(pipeline::one_f_one_b(2, 4).value());
  ASSERT_TRUE(two.ok());
  ToyRank r0 = toy_rank(model, two.value(), 0);
  expect_error(pipeline::Engine<ToyStage>::create(two.value(), r0.args(), world).status(),
               StatusCode::kInvalidArgument, "the schedule has 2 ranks, the pipeline group 'world' 1");

  auto v2 = pipeline::lower(pipeline::interleaved_1f1b(1, 2, 4).value());
  ASSERT_TRUE(v2.ok());
  ToyRank only0 = toy_rank(model, v2.value(), 0);
  auto args = only0.args();
  args.pop_back();
  expect_error(pipeline::Engine<ToyStage>::create(v2.value(), args, world).status(), StatusCode::kInvalidArgument,
               "the schedule runs stage 1 on rank 0, which was not given it");
  args = only0.args();
  args.push_back({5, args[0].second});
  expect_error(pipeline::Engine<ToyStage>::create(v2.value(), args, world).status(), StatusCode::kInvalidArgument,
               "rank 0 was given stage 5, which the schedule places on no rank");
}

/// The toy with only a full backward: not a SplitStage.
struct FullBackwardOnly {
  ToyStage* s;
  using Stash = ToyStage::Stash;
  pipeline::Port input_port(int j) const { return s->input_port(j); }
  pipeline::Port output_port(int j) const { return s->output_port(j); }
  int64_t stash_bytes(int j) const { return s->stash_bytes(j); }
  Status forward(const Context& c, std::span<const TensorView> o, std::span<const TensorView> i, int j, Stash& st) {
    return s->forward(c, o, i, j, st);
  }
  Status backward(const Context& c, std::span<const TensorView> d, std::span<const TensorView> g, int j, Stash& st) {
    return s->backward(c, d, g, j, st);
  }
};
static_assert(pipeline::Stage<FullBackwardOnly> && !pipeline::SplitStage<FullBackwardOnly>);

/// Stage 1 wants a wider hidden state than stage 0 produces.
struct WrongPort : ToyStage {
  using ToyStage::ToyStage;
  int id = 0;
  pipeline::Port input_port(int j) const {
    pipeline::Port p = ToyStage::input_port(j);
    if (id == 1) p.act[0].shape[1] += 1;
    return p;
  }
};

TEST(PipelineEngine, SplitScheduleNeedsSplitStageAndPortsMustAgree) {
  Allocator params, acts;
  Context ctx;
  ctx.allocator = &acts;
  ToyModel model = ToyModel::make(params, kHidden, kLayers, kRows, 5);
  comm::SingleCommunicator world;
  auto zbv = pipeline::lower(pipeline::zb_v(1, 4).value());
  ASSERT_TRUE(zbv.ok());
  ToyRank rs = toy_rank(model, zbv.value(), 0);
  std::vector<FullBackwardOnly> full = {{&rs.stages[0]}, {&rs.stages[1]}};
  expect_error(pipeline::Engine<FullBackwardOnly>::create(zbv.value(), {{0, &full[0]}, {1, &full[1]}}, world)
                   .status(),
               StatusCode::kNotSupported, "splits the backward (r0: 1I0)");
  // The same stages with full backwards run a 1F1B-style schedule (interleaved, v = 2) fine.
  auto v2 = pipeline::lower(pipeline::interleaved_1f1b(1, 2, 4).value());
  auto ok = pipeline::Engine<FullBackwardOnly>::create(v2.value(), {{0, &full[0]}, {1, &full[1]}}, world);
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  EXPECT_TRUE(ok.value().step(ctx).ok());

  std::vector<WrongPort> wrong;
  wrong.emplace_back(model, 0, 2, 0, 4);
  wrong.emplace_back(model, 1, 2, 4, 8);
  wrong[1].id = 1;
  auto e = pipeline::Engine<WrongPort>::create(v2.value(), {{0, &wrong[0]}, {1, &wrong[1]}}, world);
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  expect_error(e.value().step(ctx), StatusCode::kInvalidArgument,
               "pipeline rank 0, action 1F0 (#1 of 16): inputs of stage 1 for micro-batch 0: the neighbouring stage "
               "0 gives [f32[5, 16], f32[2]], stage 1's port wants [f32[5, 17], f32[2]]");
}

}  // namespace
}  // namespace vlpar::test
