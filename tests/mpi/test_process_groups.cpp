// ProcessGroups over the MPI backend (4 ranks): for several layouts, every axis's communicator must contain
// exactly the expected world ranks in the expected order. Checked with rank-encoded payloads (STYLE §12): an
// all-reduce of 2^world_rank gives the membership bitmask of the group, and an all-gather of the world ranks gives
// their order (group rank i is world rank groups[i]). The expected groups are written out by hand here, not taken
// from the Mesh, so a wrong layout cannot agree with itself.
// Run: ctest --preset cpu -L mpi -R process_groups   (or mpirun -np 4 ./build/cpu/tests/test_process_groups)
#include <gtest/gtest.h>
#include <mpi.h>

#include <map>
#include <vector>

#include "mpi/mpi_test_util.hpp"
#include "vlpar/parallel/process_groups.hpp"

namespace vlpar::parallel {
namespace {

using Groups = std::vector<std::vector<int>>;

std::unique_ptr<comm::Communicator> make_world() { return test::world_comm(); }  // 20 s watchdog

// Checks this rank's communicator on `axis` against `expected` (all groups of the axis, world ranks by group rank).
void check_axis(const ProcessGroups& pg, Axis axis, const Groups& expected) {
  SCOPED_TRACE(axis_name(axis));
  const int me = pg.world_rank();
  const std::vector<int>* mine = nullptr;
  for (const auto& g : expected)
    for (int r : g)
      if (r == me) mine = &g;
  ASSERT_NE(mine, nullptr) << "rank " << me << " is in no expected group";
  comm::Communicator& c = pg.get(axis);
  ASSERT_EQ(c.size(), int(mine->size()));

  // Membership: Σ 2^r over the group, exact in f32 for a 4-rank world.
  float bit = float(1 << me);
  ASSERT_TRUE(c.all_reduce(TensorView(&bit, DType::kF32, {1}), comm::ReduceOp::kSum).ok());
  float want = 0.f;
  for (int r : *mine) want += float(1 << r);
  EXPECT_EQ(bit, want) << "rank " << me << " group bitmask";

  // Order: the group's rank i must be world rank (*mine)[i].
  int32_t rank_in = me;
  std::vector<int32_t> ranks(mine->size(), -1);
  ASSERT_TRUE(c.all_gather(TensorView(ranks.data(), DType::kI32, {int64_t(ranks.size())}),
                           TensorView(&rank_in, DType::kI32, {1}))
                  .ok());
  EXPECT_EQ(std::vector<int>(ranks.begin(), ranks.end()), *mine) << "rank " << me;
  EXPECT_EQ(c.rank(), pg.mesh().slot(axis, me).index);
}

const Groups kSingletons = {{0}, {1}, {2}, {3}};
const Groups kAll = {{0, 1, 2, 3}};

TEST(ProcessGroupsMpi, Tp2Dp2DefaultOrder) {
  auto world = make_world();
  ASSERT_NE(world, nullptr);
  ASSERT_EQ(world->size(), 4) << "run with mpirun -np 4";
  auto pg = ProcessGroups::create(*world, {.world = 4, .tp = 2});
  ASSERT_TRUE(pg.ok()) << pg.status().to_string();
  const Groups tp = {{0, 1}, {2, 3}}, dp = {{0, 2}, {1, 3}};
  const std::map<Axis, Groups> expected = {
      {Axis::kTp, tp},        {Axis::kCp, kSingletons},   {Axis::kDp, dp},  {Axis::kPp, kSingletons},
      {Axis::kDpCp, dp},      {Axis::kTpCp, tp},          {Axis::kEp, kSingletons}, {Axis::kEtp, tp},
      {Axis::kEdp, dp},       {Axis::kVisionTp, tp},      {Axis::kVisionDp, dp}};
  for (Axis a : kAllAxes) check_axis(pg.value(), a, expected.at(a));
}

TEST(ProcessGroupsMpi, Tp2Dp2DpFastestOrder) {
  auto world = make_world();
  ASSERT_NE(world, nullptr);
  auto pg = ProcessGroups::create(*world, {.world = 4, .tp = 2, .order = "dp-tp-cp-ep-pp"});
  ASSERT_TRUE(pg.ok()) << pg.status().to_string();
  check_axis(pg.value(), Axis::kTp, {{0, 2}, {1, 3}});
  check_axis(pg.value(), Axis::kDp, {{0, 1}, {2, 3}});
  check_axis(pg.value(), Axis::kPp, kSingletons);
}

// tp2 × cp2 with ep2 folded over cp (etp = tp) and a vision encoder at tp 4.
TEST(ProcessGroupsMpi, Tp2Cp2FoldedEp2VisionTp4) {
  auto world = make_world();
  ASSERT_NE(world, nullptr);
  auto pg = ProcessGroups::create(*world, {.world = 4, .tp = 2, .cp = 2, .ep = 2, .vision_tp = 4},
                                  {.num_heads = 4, .num_experts = 4, .vision_heads = 8});
  ASSERT_TRUE(pg.ok()) << pg.status().to_string();
  const Groups tp = {{0, 1}, {2, 3}}, cp = {{0, 2}, {1, 3}};
  check_axis(pg.value(), Axis::kTp, tp);
  check_axis(pg.value(), Axis::kCp, cp);
  check_axis(pg.value(), Axis::kDp, kSingletons);
  check_axis(pg.value(), Axis::kDpCp, cp);
  check_axis(pg.value(), Axis::kTpCp, kAll);
  check_axis(pg.value(), Axis::kEp, cp);
  check_axis(pg.value(), Axis::kEtp, tp);
  check_axis(pg.value(), Axis::kEdp, kSingletons);
  check_axis(pg.value(), Axis::kVisionTp, kAll);
  check_axis(pg.value(), Axis::kVisionDp, kSingletons);
}

TEST(ProcessGroupsMpi, InvalidConfigFailsOnEveryRankWithoutSplitting) {
  auto world = make_world();
  ASSERT_NE(world, nullptr);
  auto pg = ProcessGroups::create(*world, {.world = 4, .tp = 4}, {.num_heads = 6});
  ASSERT_FALSE(pg.ok());
  EXPECT_NE(pg.status().message().find("tp=4 does not divide 6 attention heads"), std::string::npos);
  EXPECT_TRUE(world->barrier().ok());  // nobody is stuck in a split
}

}  // namespace
}  // namespace vlpar::parallel
