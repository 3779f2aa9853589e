// The pipeline engine under mpirun (parallel/pipeline_engine.hpp): the toy model (tests/pipeline_toy.hpp) split
// over the pipeline ranks by every generator (GPipe, 1F1B, interleaved 1F1B with v = 2, ZB-H1, ZB-V), micro-batches
// of unequal size, two steps. Checks on every rank: the loss (last stage) and every gradient of its layers bitwise
// equal to the single-process reference (each stage runs its backwards in micro-batch order, as the reference
// does), the allocator's peak within the bound derived from the simulator's in-flight stashes, nothing left
// allocated after a step; and a peer that never runs its part is reported by the watchdog naming the rank, the
// action and the pending receive. Tied parameters: sum_tied_gradient leaves the first + second copies' sum in both,
// bitwise equal, and a rank without a copy gets a named error. Forward-only evaluation on the training placements:
// the reference's losses, no gradient, one stash at a time.
// Run: ctest --preset emu -R test_pipeline_ranks   (mpirun -np 2 and -np 4)
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "mpi/mpi_test_util.hpp"
#include "pipeline_toy.hpp"
#include "test_util.hpp"
#include "vlpar/parallel/pipeline_engine.hpp"
#include "vlpar/parallel/pipeline_tied.hpp"

namespace vlpar::test {
namespace {

using pipeline::Schedule;

constexpr int64_t kHidden = 16;
constexpr int kLayers = 8;
const std::vector<int64_t> kRows = {5, 3, 6, 4, 7, 2, 5, 3};

struct Case {
  std::string name;
  std::function<Result<Schedule>(int ranks, int mbs)> make;
};

const Case kCases[] = {
    {"gpipe", [](int p, int m) { return pipeline::gpipe(p, m); }},
    {"1f1b", [](int p, int m) { return pipeline::one_f_one_b(p, m); }},
    {"interleaved_v2", [](int p, int m) { return pipeline::interleaved_1f1b(p, 2, m); }},
    {"zb_h1", [](int p, int m) { return pipeline::zb_h1(p, m); }},
    {"zb_v", [](int p, int m) { return pipeline::zb_v(p, m); }},
};

TEST(PipelineEngineRanks, EveryScheduleMatchesReferenceBitwiseWithinMemoryBound) {
  auto world = world_comm("pp");
  ASSERT_NE(world, nullptr);
  const int p = world->size(), rank = world->rank();
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    auto compute = c.make(p, int(kRows.size()));
    ASSERT_TRUE(compute.ok()) << compute.status().to_string();
    auto lowered = pipeline::lower(compute.value());
    ASSERT_TRUE(lowered.ok()) << lowered.status().to_string();
    const Schedule& s = lowered.value();
    auto sim = pipeline::simulate(s);
    ASSERT_TRUE(sim.ok()) << sim.status().to_string();

    auto run = ToyRun::make(s, *world, kHidden, kLayers, kRows, 21);
    ASSERT_TRUE(run.ok()) << run.status().to_string();
    ToyRun& t = *run.value();
    const ToyModel &model = t.model, &ref = t.ref;
    const int64_t bound = toy_memory_bound(t.model, t.mine, s, rank, sim.value().peak_wgrad[size_t(rank)]);
    std::vector<double> want;
    for (int step = 0; step < 2; ++step) {
      const ToyStepResult r = t.step();
      ASSERT_TRUE(r.status.ok()) << r.status.to_string();
      want = r.want;
      EXPECT_EQ(r.left, 0) << "rank " << rank << " kept allocations";
      EXPECT_LE(r.peak, bound) << "rank " << rank << ": peak_wgrad " << sim.value().peak_wgrad[size_t(rank)];
    }
    const std::vector<ToyStage>& stages = t.mine.stages;
    const std::vector<int>& ids = t.mine.ids;
    for (size_t i = 0; i < stages.size(); ++i) {
      const auto [a, b] = toy_layers(kLayers, ids[i], s.num_stages());
      for (int l = a; l < b; ++l) {
        for (auto [g, w] : {std::pair{&model.dw, &ref.dw}, std::pair{&model.db, &ref.db}})
          ASSERT_EQ(0, std::memcmp((*g)[size_t(l)].ptr<float>(), (*w)[size_t(l)].ptr<float>(),
                                   size_t((*g)[size_t(l)].numel()) * 4))
              << "rank " << rank << " layer " << l;
      }
      if (ids[i] != s.num_stages() - 1) continue;
      for (size_t j = 0; j < want.size(); ++j) EXPECT_EQ(stages[i].losses()[j], want[j]) << "micro-batch " << j;
    }
    ASSERT_TRUE(world->barrier().ok());
  }
}

/// Forward-only evaluation on the placements of the training schedules (one stage per rank, two loop chunks, V):
/// the last stage's losses bitwise equal to the reference's forward, no gradient touched, at most one stash alive
/// (the bound with one in-flight micro-batch), nothing left allocated after the step.
TEST(PipelineEngineRanks, ForwardOnlyOnEveryTrainingPlacementGivesTheReferenceLosses) {
  auto world = world_comm("pp");
  ASSERT_NE(world, nullptr);
  const int p = world->size(), rank = world->rank();
  const std::pair<const char*, std::vector<int>> placements[] = {
      {"loop1", pipeline::loop_placement(p, 1)}, {"loop2", pipeline::loop_placement(p, 2)},
      {"v", pipeline::v_placement(p)}};
  for (const auto& [name, placement] : placements) {
    SCOPED_TRACE(name);
    auto lowered = pipeline::lower(pipeline::forward_only(p, int(kRows.size()), placement).value());
    ASSERT_TRUE(lowered.ok()) << lowered.status().to_string();
    const Schedule& s = lowered.value();
    auto run = ToyRun::make(s, *world, kHidden, kLayers, kRows, 23);
    ASSERT_TRUE(run.ok()) << run.status().to_string();
    ToyRun& t = *run.value();
    const ToyStepResult r = t.step();
    ASSERT_TRUE(r.status.ok()) << r.status.to_string();
    EXPECT_EQ(r.left, 0) << "rank " << rank << " kept allocations";
    EXPECT_LE(r.peak, toy_memory_bound(t.model, t.mine, s, rank, 1)) << "rank " << rank;
    for (size_t i = 0; i < t.mine.stages.size(); ++i) {
      const auto [a, b] = toy_layers(kLayers, t.mine.ids[i], s.num_stages());
      for (int l = a; l < b; ++l)
        for (const Tensor* g : {&t.model.dw[size_t(l)], &t.model.db[size_t(l)]})
          for (int64_t k = 0; k < g->numel(); ++k) ASSERT_EQ(g->ptr<float>()[k], 0.f) << "layer " << l;
      if (t.mine.ids[i] != s.num_stages() - 1) continue;
      for (size_t j = 0; j < r.want.size(); ++j)
        EXPECT_EQ(t.mine.stages[i].losses()[j], r.want[j]) << "micro-batch " << j;
    }
    ASSERT_TRUE(world->barrier().ok());
  }
}

/// Pairs of ranks (0,1), (2,3): the second of each pair never runs its step; the first reports the watchdog's
/// timeout on its first receive, naming itself, the action, the peer and the peer's stage.
TEST(PipelineEngineRanks, DeadPeerIsNamedByTheWatchdog) {
  auto world = world_comm("world");
  ASSERT_NE(world, nullptr);
  if (world->size() % 2 != 0) GTEST_SKIP() << "needs an even number of ranks";
  auto pair = world->split(world->rank() / 2, world->rank(), comm::CommOptions{"pp", std::chrono::milliseconds(800)});
  ASSERT_TRUE(pair.ok()) << pair.status().to_string();
  auto lowered = pipeline::lower(pipeline::one_f_one_b(2, 2).value());
  ASSERT_TRUE(lowered.ok());
  Allocator params, acts;
  Context ctx;
  ctx.allocator = &acts;
  ToyModel model = ToyModel::make(params, kHidden, 4, std::vector<int64_t>{3, 4}, 5);
  const int r = pair.value()->rank();
  ToyStage stage(model, r, 2, 2 * r, 2 * r + 2);
  auto engine = pipeline::Engine<ToyStage>::create(lowered.value(), {{r, &stage}}, *pair.value());
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  if (r == 0) {
    const Status s = engine.value().step(ctx);
    EXPECT_EQ(s.code(), StatusCode::kTimeout) << s.to_string();
    EXPECT_NE(s.message().find("pipeline rank 0, action 0B0 (#5 of 8): waiting for 0RECV_B0 from rank 1 (stage 1): "),
              std::string::npos) << s.message();
    EXPECT_NE(s.message().find("timed out after 800 ms"), std::string::npos) << s.message();
  }
  ASSERT_TRUE(world->barrier().ok());
}

/// The first and the last pipeline rank hold copies of a tied gradient (odd size, values of every magnitude): both
/// end with the f32 sum first + second, bitwise; a rank in between is told it holds no copy.
TEST(PipelineTied, BothCopiesHoldTheSameSumBitwise) {
  auto pp = world_comm("pp");
  ASSERT_NE(pp, nullptr);
  const int first = 0, second = pp->size() - 1, me = pp->rank();
  Allocator alloc;
  Context ctx;
  ctx.allocator = &alloc;
  const Shape shape{37, 3};
  const Tensor a = random_tensor(alloc, shape, DType::kF32, 11, -1e3f, 1e3f);
  const Tensor b = random_tensor(alloc, shape, DType::kF32, 12, -1e-3f, 1e-3f);
  Tensor mine = random_tensor(alloc, shape, DType::kF32, me == first ? 11 : 12, me == first ? -1e3f : -1e-3f,
                              me == first ? 1e3f : 1e-3f);
  const Status s = pipeline::sum_tied_gradient(ctx, *pp, mine, first, second);
  if (me != first && me != second) {
    EXPECT_NE(s.message().find("pipeline rank " + std::to_string(me) + " holds no copy"), std::string::npos)
        << s.to_string();
    return;
  }
  ASSERT_TRUE(s.ok()) << s.to_string();
  for (int64_t k = 0; k < mine.numel(); ++k) {
    const float want = a.ptr<float>()[k] + b.ptr<float>()[k];
    ASSERT_EQ(std::memcmp(&mine.ptr<float>()[k], &want, sizeof want), 0) << "element " << k;
  }
  // Both copies are the same bits (each rank sends its result to the other and compares).
  Tensor other = Tensor::empty(alloc, shape, DType::kF32).value();
  const int peer = me == first ? second : first;
  auto recv = pp->irecv(other, peer, 1);
  auto send = pp->isend(mine, peer, 1);
  ASSERT_TRUE(recv.ok() && send.ok());
  ASSERT_TRUE(send.value()->wait().ok() && recv.value()->wait().ok());
  EXPECT_EQ(std::memcmp(other.view().data, mine.view().data, size_t(mine.view().nbytes())), 0);
}

}  // namespace
}  // namespace vlpar::test
