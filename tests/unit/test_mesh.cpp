// Device mesh, no MPI: RankGrid against Megatron's documented examples, Mesh invariants checked exhaustively over
// several configs (partition, slot/groups agreement, coordinate round trips, groups varying only their axis),
// MoE parallel folding, vision TP groups, every ParallelConfig::validate message, and ProcessGroups::create over a
// fake communicator that records its split calls.
// Run: ctest --test-dir build/cpu -R 'Mesh|RankGrid|ParallelConfig|ProcessGroupsFake'
#include <fmt/core.h>
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "vlpar/parallel/mesh.hpp"
#include "vlpar/parallel/parallel_config.hpp"
#include "vlpar/parallel/optimizer_groups.hpp"
#include "vlpar/parallel/process_groups.hpp"

namespace vlpar::parallel {
namespace {

using Groups = std::vector<std::vector<int>>;

// A valid config's mesh; on an unexpected error the test fails and gets the 1-rank mesh, so the checks that follow
// fail on sizes instead of reading an empty Result.
Mesh make_mesh(const ParallelConfig& cfg, const ModelDims& dims = {}) {
  auto m = Mesh::create(cfg, dims);
  if (m.ok()) return std::move(m).value();
  ADD_FAILURE() << m.status().to_string();
  return Mesh::create(ParallelConfig{}).value();
}

// ---- RankGrid: Megatron's generate_masked_orthogonal_rank_groups docstring example ------------------------------
// tp=2, pp=3, dp=4 in order tp-pp-dp (24 ranks): dp groups [[0,6,12,18], [1,7,13,19], ..., [5,11,17,23]] and
// tp-pp groups [[0..5], [6..11], [12..17], [18..23]].
TEST(RankGrid, MegatronDocstringExampleTpPpDp) {
  const RankGrid g({2, 3, 4});
  ASSERT_EQ(g.world(), 24);
  const bool dp_mask[] = {false, false, true};
  EXPECT_EQ(g.groups(dp_mask),
            (Groups{{0, 6, 12, 18}, {1, 7, 13, 19}, {2, 8, 14, 20}, {3, 9, 15, 21}, {4, 10, 16, 22}, {5, 11, 17, 23}}));
  const bool tp_pp_mask[] = {true, true, false};
  EXPECT_EQ(g.groups(tp_pp_mask), (Groups{{0, 1, 2, 3, 4, 5}, {6, 7, 8, 9, 10, 11}, {12, 13, 14, 15, 16, 17},
                                          {18, 19, 20, 21, 22, 23}}));
  // Masked axes enumerate inside a group with the first masked axis fastest: tp-dp groups of pp coordinate 1.
  const bool tp_dp_mask[] = {true, false, true};
  EXPECT_EQ(g.groups(tp_dp_mask)[1], (std::vector<int>{2, 3, 8, 9, 14, 15, 20, 21}));
}

TEST(RankGrid, CoordinatesRoundTripAndOutOfRangeIsRejected) {
  const RankGrid g({3, 1, 2, 4});
  for (int r = 0; r < g.world(); ++r) {
    const auto c = g.coords(r);
    EXPECT_EQ(c[0], r % 3);
    EXPECT_EQ(c[2], (r / 3) % 2);
    EXPECT_EQ(c[3], r / 6);
    EXPECT_EQ(g.rank_of(c), r);
  }
  EXPECT_EQ(g.rank_of(std::vector<int>{3, 0, 0, 0}), -1);
  EXPECT_EQ(g.rank_of(std::vector<int>{0, 0, 0, -1}), -1);
  EXPECT_EQ(g.rank_of(std::vector<int>{0, 0, 0}), -1);
}

// ---- Mesh: Megatron's documented parallel_state example ---------------------------------------------------------
// initialize_model_parallel docstring: 16 GPUs, tp=2, pp=4 (so dp=2) give
//   8 tp groups [g0,g1] [g2,g3] ... [g14,g15];  8 dp groups [g0,g2] [g1,g3] [g4,g6] [g5,g7] ...;
//   4 pp groups [g0,g4,g8,g12] [g1,g5,g9,g13] [g2,g6,g10,g14] [g3,g7,g11,g15].
TEST(Mesh, MegatronParallelStateExampleWorld16Tp2Pp4) {
  const Mesh m = make_mesh({.world = 16, .tp = 2, .pp = 4});
  EXPECT_EQ(m.config().dp, 2);
  EXPECT_EQ(m.groups(Axis::kTp), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}}));
  EXPECT_EQ(m.groups(Axis::kDp), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}}));
  EXPECT_EQ(m.groups(Axis::kPp), (Groups{{0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15}}));
  EXPECT_EQ(m.attention_coord(13), (AttentionCoord{.tp = 1, .cp = 0, .dp = 0, .pp = 3}));
  EXPECT_EQ(m.rank_of(AttentionCoord{.tp = 0, .cp = 0, .dp = 1, .pp = 2}), 10);
}

// Default order tp-cp-ep-dp-pp: tp stride 1, cp stride tp, dp stride tp·cp, pp stride world/pp.
TEST(Mesh, DefaultOrderStridesWithContextParallel) {
  const Mesh m = make_mesh({.world = 16, .tp = 2, .cp = 2, .pp = 2});
  ASSERT_EQ(m.config().dp, 2);
  for (int r = 0; r < 16; ++r) {
    const AttentionCoord c = m.attention_coord(r);
    EXPECT_EQ(c, (AttentionCoord{.tp = r % 2, .cp = (r / 2) % 2, .dp = (r / 4) % 2, .pp = r / 8})) << "rank " << r;
  }
  EXPECT_EQ(m.groups(Axis::kCp)[0], (std::vector<int>{0, 2}));
  EXPECT_EQ(m.groups(Axis::kDpCp), (Groups{{0, 2, 4, 6}, {1, 3, 5, 7}, {8, 10, 12, 14}, {9, 11, 13, 15}}));
  EXPECT_EQ(m.groups(Axis::kTpCp), (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9, 10, 11}, {12, 13, 14, 15}}));
}

// A non-default order moves the strides: dp fastest, then tp.
TEST(Mesh, CustomOrderDpFirst) {
  const Mesh m = make_mesh({.world = 8, .tp = 2, .order = "dp-tp-cp-ep-pp"});
  EXPECT_EQ(m.groups(Axis::kDp), (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_EQ(m.groups(Axis::kTp), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(m.attention_coord(5), (AttentionCoord{.tp = 1, .cp = 0, .dp = 1, .pp = 0}));
}

// ---- Mesh invariants, exhaustively over several configs ---------------------------------------------------------
struct MeshCase {
  const char* name;
  ParallelConfig cfg;
};
void PrintTo(const MeshCase& c, std::ostream* os) { *os << c.name; }

// The coordinates (in the axis's own layout) that must be constant across a group of `axis`, and the ones that
// vary: a group of axis A differs only in A's coordinates.
std::vector<int> fixed_coords(const Mesh& m, Axis axis, int r) {
  const AttentionCoord a = m.attention_coord(r);
  const ExpertCoord e = m.expert_coord(r);
  const VisionCoord v = m.vision_coord(r);
  switch (axis) {
    case Axis::kTp: return {a.cp, a.dp, a.pp};
    case Axis::kCp: return {a.tp, a.dp, a.pp};
    case Axis::kDp: return {a.tp, a.cp, a.pp};
    case Axis::kPp: return {a.tp, a.cp, a.dp};
    case Axis::kDpCp: return {a.tp, a.pp};
    case Axis::kTpCp: return {a.dp, a.pp};
    case Axis::kEp: return {e.etp, e.edp, e.pp};
    case Axis::kEtp: return {e.ep, e.edp, e.pp};
    case Axis::kEdp: return {e.etp, e.ep, e.pp};
    case Axis::kVisionTp: return {v.dp, v.pp};
    case Axis::kVisionDp: return {v.tp, v.pp};
  }
  return {};
}
std::vector<int> varying_coords(const Mesh& m, Axis axis, int r) {
  const AttentionCoord a = m.attention_coord(r);
  const ExpertCoord e = m.expert_coord(r);
  const VisionCoord v = m.vision_coord(r);
  switch (axis) {
    case Axis::kTp: return {a.tp};
    case Axis::kCp: return {a.cp};
    case Axis::kDp: return {a.dp};
    case Axis::kPp: return {a.pp};
    case Axis::kDpCp: return {a.cp, a.dp};
    case Axis::kTpCp: return {a.tp, a.cp};
    case Axis::kEp: return {e.ep};
    case Axis::kEtp: return {e.etp};
    case Axis::kEdp: return {e.edp};
    case Axis::kVisionTp: return {v.tp};
    case Axis::kVisionDp: return {v.dp};
  }
  return {};
}
int expected_size(const ParallelConfig& c, Axis axis) {
  switch (axis) {
    case Axis::kTp: return c.tp;
    case Axis::kCp: return c.cp;
    case Axis::kDp: return c.dp_size();
    case Axis::kPp: return c.pp;
    case Axis::kDpCp: return c.dp_size() * c.cp;
    case Axis::kTpCp: return c.tp * c.cp;
    case Axis::kEp: return c.ep;
    case Axis::kEtp: return c.etp_size();
    case Axis::kEdp: return c.edp_size();
    case Axis::kVisionTp: return c.vision_tp_size();
    case Axis::kVisionDp: return c.vision_dp_size();
  }
  return 0;
}

class MeshInvariants : public ::testing::TestWithParam<MeshCase> {};

TEST_P(MeshInvariants, EveryAxisPartitionsTheWorldAndVariesOnlyItsCoordinates) {
  const ParallelConfig& cfg = GetParam().cfg;
  const Mesh m = make_mesh(cfg);
  const int W = cfg.world;
  for (Axis axis : kAllAxes) {
    SCOPED_TRACE(axis_name(axis));
    const Groups groups = m.groups(axis);
    ASSERT_EQ(int(groups.size()) * expected_size(cfg, axis), W);
    EXPECT_EQ(m.size(axis), expected_size(cfg, axis));
    std::vector<int> seen(size_t(W), 0);
    for (size_t g = 0; g < groups.size(); ++g) {
      ASSERT_EQ(int(groups[g].size()), expected_size(cfg, axis));
      std::set<std::vector<int>> varying;
      for (size_t i = 0; i < groups[g].size(); ++i) {
        const int r = groups[g][i];
        ASSERT_TRUE(r >= 0 && r < W) << r;
        ++seen[size_t(r)];
        const GroupSlot s = m.slot(axis, r);  // slot() is the inverse of groups()
        EXPECT_EQ(s.group, int(g)) << "rank " << r;
        EXPECT_EQ(s.index, int(i)) << "rank " << r;
        EXPECT_EQ(s.size, int(groups[g].size()));
        EXPECT_EQ(fixed_coords(m, axis, r), fixed_coords(m, axis, groups[g][0])) << "rank " << r << " group " << g;
        varying.insert(varying_coords(m, axis, r));
      }
      EXPECT_EQ(varying.size(), groups[g].size()) << "group " << g << " repeats a coordinate";
    }
    for (int r = 0; r < W; ++r) EXPECT_EQ(seen[size_t(r)], 1) << "rank " << r;
  }
}

TEST_P(MeshInvariants, CoordinatesRoundTripInEveryLayoutAndShareThePipelineStage) {
  const ParallelConfig& cfg = GetParam().cfg;
  const Mesh m = make_mesh(cfg);
  std::set<std::vector<int>> attention, expert, vision;
  for (int r = 0; r < cfg.world; ++r) {
    const AttentionCoord a = m.attention_coord(r);
    const ExpertCoord e = m.expert_coord(r);
    const VisionCoord v = m.vision_coord(r);
    EXPECT_EQ(m.rank_of(a), r);
    EXPECT_EQ(m.rank_of(e), r);
    EXPECT_EQ(m.rank_of(v), r);
    EXPECT_EQ(e.pp, a.pp) << "rank " << r;
    EXPECT_EQ(v.pp, a.pp) << "rank " << r;
    attention.insert({a.tp, a.cp, a.dp, a.pp});
    expert.insert({e.etp, e.ep, e.edp, e.pp});
    vision.insert({v.tp, v.dp, v.pp});
  }
  EXPECT_EQ(int(attention.size()), cfg.world);  // coordinates are a bijection
  EXPECT_EQ(int(expert.size()), cfg.world);
  EXPECT_EQ(int(vision.size()), cfg.world);
  EXPECT_EQ(m.rank_of(AttentionCoord{.tp = m.config().tp}), -1);
  EXPECT_EQ(m.rank_of(ExpertCoord{.ep = cfg.ep}), -1);
  EXPECT_EQ(m.rank_of(VisionCoord{.pp = cfg.pp}), -1);
  // The folding identity: both layouts use all ranks of a stage.
  EXPECT_EQ(cfg.tp * cfg.cp * m.config().dp, m.config().etp * cfg.ep * cfg.edp_size());
}

const MeshCase kMeshCases[] = {
    {"single", {.world = 1}},
    {"tp2_pp4", {.world = 16, .tp = 2, .pp = 4}},
    {"tp2_cp2_dp2", {.world = 8, .tp = 2, .cp = 2}},
    {"tp2_cp2_ep4_pp2", {.world = 16, .tp = 2, .cp = 2, .ep = 4, .pp = 2}},
    {"tp2_dp6_pp2_ep3_etp1_vtp4", {.world = 24, .tp = 2, .ep = 3, .etp = 1, .pp = 2, .vision_tp = 4}},
    {"tp4_ep8_etp1_vtp2", {.world = 8, .tp = 4, .ep = 8, .etp = 1, .vision_tp = 2}},
    {"tp2_ep2_etp4_folds_over_tp", {.world = 8, .tp = 2, .ep = 2, .etp = 4}},
    {"cp_first_tp3", {.world = 12, .tp = 3, .cp = 2, .order = "cp-tp-ep-dp-pp"}},
    {"dp_before_cp_ep_before_tp", {.world = 16, .tp = 2, .cp = 2, .ep = 4, .order = "ep-tp-dp-cp-pp"}},
    {"pp_first_equal_folding", {.world = 8, .tp = 2, .ep = 2, .pp = 2, .order = "pp-tp-cp-ep-dp"}},
};
INSTANTIATE_TEST_SUITE_P(Configs, MeshInvariants, ::testing::ValuesIn(kMeshCases),
                         [](const auto& info) { return std::string(info.param.name); });

// ---- MoE parallel folding ---------------------------------------------------------------------------------------
// With etp = tp (default) expert parallelism folds over dp×cp: every ep group lies inside one dp_cp group.
TEST(MeshFolding, EpFoldsOverDpCpWhenEtpEqualsTp) {
  const Mesh m = make_mesh({.world = 16, .tp = 2, .cp = 2, .ep = 4, .pp = 2});
  EXPECT_EQ(m.config().etp, 2);
  EXPECT_EQ(m.config().edp_size(), 1);
  // Stage 0 holds ranks 0..7; tp pairs (0,1), (2,3), ...; ep takes stride etp = 2.
  EXPECT_EQ(m.groups(Axis::kEp), (Groups{{0, 2, 4, 6}, {1, 3, 5, 7}, {8, 10, 12, 14}, {9, 11, 13, 15}}));
  EXPECT_EQ(m.groups(Axis::kEtp), m.groups(Axis::kTp));
  EXPECT_EQ(m.groups(Axis::kEdp).size(), 16u);
  for (const auto& g : m.groups(Axis::kEp)) {
    const GroupSlot s = m.slot(Axis::kDpCp, g[0]);
    for (int r : g) {
      EXPECT_EQ(m.slot(Axis::kDpCp, r).group, s.group) << "ep group member " << r << " leaves its dp_cp group";
      EXPECT_EQ(m.attention_coord(r).tp, m.attention_coord(g[0]).tp);
    }
  }
}

// Folding with ep smaller than dp×cp: edp = tp·cp·dp / (etp·ep) replicas of each expert shard.
TEST(MeshFolding, ExpertDataParallelIsDerived) {
  const Mesh m = make_mesh({.world = 16, .tp = 1, .ep = 4});
  EXPECT_EQ(m.config().edp_size(), 4);
  EXPECT_EQ(m.groups(Axis::kEp), (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9, 10, 11}, {12, 13, 14, 15}}));
  EXPECT_EQ(m.groups(Axis::kEdp), (Groups{{0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15}}));
  EXPECT_EQ(m.expert_coord(9), (ExpertCoord{.etp = 0, .ep = 1, .edp = 2, .pp = 0}));
}

// Folding across tp: etp=1, ep=8 over tp=4 × dp=2 puts all 8 ranks in one expert group (Megatron's
// "attention TP4 / expert EP8" folding); with etp > tp the expert tensor groups span several attention tp groups.
TEST(MeshFolding, ExpertGroupsMayFoldAcrossAttentionTp) {
  const Mesh a = make_mesh({.world = 8, .tp = 4, .ep = 8, .etp = 1});
  EXPECT_EQ(a.groups(Axis::kEp), (Groups{{0, 1, 2, 3, 4, 5, 6, 7}}));
  EXPECT_EQ(a.groups(Axis::kEtp).size(), 8u);
  EXPECT_EQ(a.config().edp_size(), 1);
  const Mesh b = make_mesh({.world = 8, .tp = 2, .ep = 2, .etp = 4});
  EXPECT_EQ(b.groups(Axis::kEtp), (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_EQ(b.groups(Axis::kEp), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
}

// pp must mean the same stages in both layouts; pp first with equal products is fine.
TEST(MeshFolding, PipelineGroupsAgreeAcrossLayouts) {
  const Mesh m = make_mesh({.world = 16, .tp = 2, .ep = 4, .etp = 1, .pp = 2, .vision_tp = 4});
  const Groups pp = m.groups(Axis::kPp);
  EXPECT_EQ(pp, (Groups{{0, 8}, {1, 9}, {2, 10}, {3, 11}, {4, 12}, {5, 13}, {6, 14}, {7, 15}}));
  for (int r = 0; r < 16; ++r) {
    EXPECT_EQ(m.expert_coord(r).pp, r / 8);
    EXPECT_EQ(m.vision_coord(r).pp, r / 8);
  }
}

// ---- Vision encoder TP ------------------------------------------------------------------------------------------
TEST(MeshVision, SmallerVisionTpNestsInsideLanguageTpGroups) {
  const Mesh m = make_mesh({.world = 8, .tp = 4, .vision_tp = 2});
  EXPECT_EQ(m.groups(Axis::kVisionTp), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(m.groups(Axis::kVisionDp), (Groups{{0, 2, 4, 6}, {1, 3, 5, 7}}));
  for (const auto& g : m.groups(Axis::kVisionTp))
    for (int r : g) EXPECT_EQ(m.slot(Axis::kTp, r).group, m.slot(Axis::kTp, g[0]).group);
}

TEST(MeshVision, LargerVisionTpContainsWholeLanguageTpGroupsWithinAStage) {
  const Mesh m = make_mesh({.world = 16, .tp = 2, .cp = 2, .pp = 2, .vision_tp = 4});
  EXPECT_EQ(m.groups(Axis::kVisionTp), (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9, 10, 11}, {12, 13, 14, 15}}));
  EXPECT_EQ(m.groups(Axis::kVisionDp), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}, {8, 12}, {9, 13}, {10, 14}, {11, 15}}));
  EXPECT_EQ(m.vision_coord(6), (VisionCoord{.tp = 2, .dp = 1, .pp = 0}));
}

TEST(MeshVision, DefaultVisionTpIsLanguageTp) {
  const Mesh m = make_mesh({.world = 8, .tp = 2, .cp = 2});
  EXPECT_EQ(m.config().vision_tp, 2);
  EXPECT_EQ(m.groups(Axis::kVisionTp), m.groups(Axis::kTp));
  EXPECT_EQ(m.groups(Axis::kVisionDp), m.groups(Axis::kDpCp));  // no vision cp: cp ranks become vision replicas
}

// ---- ParallelConfig::validate: every message ----------------------------------------------------------------------
struct BadCase {
  const char* name;
  ParallelConfig cfg;
  ModelDims dims;
  const char* message;
};
void PrintTo(const BadCase& c, std::ostream* os) { *os << c.name; }

const ModelDims kQwenLike{.num_layers = 28, .num_heads = 16, .num_kv_heads = 8, .vocab = 151936,
                          .intermediate = 3072, .num_experts = 64, .expert_intermediate = 768,
                          .vision_heads = 16, .vision_intermediate = 4304};

class ParallelConfigValidate : public ::testing::TestWithParam<BadCase> {};

TEST_P(ParallelConfigValidate, ExplainsTheConflictInOneSentence) {
  const BadCase& c = GetParam();
  const Status s = c.cfg.validate(c.dims);
  ASSERT_FALSE(s.ok()) << c.message;
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find(c.message), std::string::npos) << "got: " << s.message() << "\nwant: " << c.message;
  // Mesh::create refuses the same config with the same error.
  const auto m = Mesh::create(c.cfg, c.dims);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find(c.message), std::string::npos);
}

const BadCase kBadCases[] = {
    {"world0", {.world = 0}, {}, "world size 0 must be at least 1"},
    {"tp0", {.world = 8, .tp = 0}, {}, "tp=0 must be at least 1"},
    {"cp0", {.world = 8, .cp = 0}, {}, "cp=0 must be at least 1"},
    {"ep0", {.world = 8, .ep = 0}, {}, "ep=0 must be at least 1"},
    {"pp0", {.world = 8, .pp = 0}, {}, "pp=0 must be at least 1"},
    {"dp_negative", {.world = 8, .dp = -1}, {}, "dp=-1 must be at least 1 (or 0 to derive it from the world size)"},
    {"etp_negative", {.world = 8, .etp = -2}, {}, "etp=-2 must be at least 1 (or 0 for the same as tp)"},
    {"vision_tp_negative", {.world = 8, .vision_tp = -1}, {}, "vision tp=-1 must be at least 1 (or 0 for the same as tp)"},
    {"world_product", {.world = 8, .tp = 3, .dp = 4}, {}, "tp*cp*pp*dp = 12 does not equal world size 8"},
    {"world_divide", {.world = 8, .tp = 3}, {}, "tp*cp*pp = 3 does not divide world size 8"},
    {"heads", {.world = 6, .tp = 3}, kQwenLike, "tp=3 does not divide 16 attention heads"},
    {"kv_heads", {.world = 4, .tp = 4}, {.num_heads = 16, .num_kv_heads = 6},
     "tp=4 neither divides 6 kv heads nor is a multiple of them"},
    {"vocab", {.world = 2, .tp = 2}, {.vocab = 151935}, "tp=2 does not divide vocab size 151935"},
    {"intermediate", {.world = 2, .tp = 2}, {.intermediate = 3071}, "tp=2 does not divide MLP intermediate size 3071"},
    {"layers", {.world = 4, .pp = 4}, {.num_layers = 2}, "pp=4 exceeds the 2 decoder layers"},
    {"experts", {.world = 6, .ep = 3}, kQwenLike, "ep=3 does not divide 64 experts"},
    {"expert_intermediate", {.world = 8, .tp = 8, .ep = 1, .etp = 3, .dp = 1}, {.expert_intermediate = 768 * 2 + 1},
     "etp=3 does not divide expert intermediate size 1537"},
    {"folding", {.world = 8, .ep = 3}, {}, "etp*ep = 3 does not divide the 8 ranks of a pipeline stage"},
    {"ep_tp_without_sp", {.world = 4, .tp = 2, .ep = 2, .etp = 1}, kQwenLike,
     "ep=2 with etp=1 < tp=2 needs sequence parallelism: the ep groups span tp ranks"},
    {"ep_tp_not_nested", {.world = 12, .tp = 4, .ep = 6, .etp = 1, .sequence_parallel = true},
     {.num_heads = 16, .num_experts = 12}, "ep=6 and tp=4 under sequence parallelism: one must divide the other"},
    {"folding_with_tp", {.world = 8, .tp = 2, .ep = 8}, {}, "etp*ep = 16 does not divide the 8 ranks of a pipeline stage"},
    {"vision_heads", {.world = 6, .tp = 2, .vision_tp = 3}, {.vision_heads = 16}, "vision tp=3 does not divide 16 vision heads"},
    {"vision_default_tp_heads", {.world = 6, .tp = 3}, {.num_heads = 24, .vision_heads = 16},
     "vision tp=3 does not divide 16 vision heads"},
    {"vision_intermediate", {.world = 4, .vision_tp = 4}, {.vision_intermediate = 4306},
     "vision tp=4 does not divide vision MLP size 4306"},
    {"vision_stage", {.world = 8, .pp = 2, .vision_tp = 8}, {}, "vision tp=8 does not divide the 4 ranks of a pipeline stage"},
    {"order_unknown", {.world = 8, .order = "tp-xp-ep-dp-pp"}, {},
     "order 'tp-xp-ep-dp-pp' names unknown axis 'xp' (known axes: tp, cp, ep, dp, pp)"},
    {"order_empty_token", {.world = 8, .order = "tp--ep-dp-pp"}, {}, "order 'tp--ep-dp-pp' names unknown axis ''"},
    {"order_duplicate", {.world = 8, .order = "tp-cp-tp-dp-pp"}, {}, "order 'tp-cp-tp-dp-pp' names axis tp twice"},
    {"order_missing", {.world = 8, .order = "tp-cp-dp-pp"}, {},
     "order 'tp-cp-dp-pp' does not name axis ep (it must name each of tp, cp, ep, dp, pp once)"},
    {"pp_groups_expert", {.world = 8, .tp = 2, .ep = 2, .etp = 1, .pp = 2, .order = "tp-pp-cp-ep-dp"}, {},
     "order 'tp-pp-cp-ep-dp' gives the MoE layers (etp=1, ep=2) other pipeline groups than the attention layers"},
    {"pp_groups_vision", {.world = 8, .tp = 2, .pp = 2, .vision_tp = 4, .order = "tp-pp-cp-ep-dp"}, {},
     "order 'tp-pp-cp-ep-dp' gives the vision encoder (vision tp=4) other pipeline groups than the language model"},
};
INSTANTIATE_TEST_SUITE_P(Messages, ParallelConfigValidate, ::testing::ValuesIn(kBadCases),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(ParallelConfigValidateOk, AcceptsConsistentConfigs) {
  EXPECT_TRUE(ParallelConfig{}.validate({}).ok());
  // Qwen-like MoE on 32 ranks: tp2 cp2 pp2 dp4 for attention; ep8 over dp×cp with etp=tp.
  const ParallelConfig cfg{.world = 32, .tp = 2, .cp = 2, .ep = 8, .pp = 2, .vision_tp = 4};
  EXPECT_TRUE(cfg.validate(kQwenLike).ok()) << cfg.validate(kQwenLike).to_string();
  EXPECT_EQ(cfg.dp_size(), 4);
  EXPECT_EQ(cfg.edp_size(), 1);
  EXPECT_EQ(cfg.vision_dp_size(), 4);
  // kv heads replicated when tp exceeds them; an explicit dp that matches (with and without pp).
  EXPECT_TRUE((ParallelConfig{.world = 8, .tp = 8, .dp = 1}.validate({.num_heads = 32, .num_kv_heads = 4}).ok()));
  EXPECT_TRUE((ParallelConfig{.world = 16, .tp = 2, .pp = 2, .dp = 4}.validate({}).ok()));
  // pp first is accepted when every layout has the same pp stride (1).
  EXPECT_TRUE((ParallelConfig{.world = 8, .tp = 2, .ep = 2, .pp = 2, .order = "pp-tp-cp-ep-dp"}.validate({}).ok()));
}

// ---- ProcessGroups over a fake communicator (no MPI) ---------------------------------------------------------------
// The fake world records every split call; the sub-communicators it returns take their rank from the key and their
// size from a per-axis table (or a deliberately wrong one), so create()'s plumbing is checked for every world rank.
struct SplitCall {
  int world_rank, color, key;
  std::string name;
};

class FakeComm : public comm::Communicator {
 public:
  FakeComm(int rank, int size, std::string name, std::vector<SplitCall>* log, std::map<std::string, int> sizes)
      : rank_(rank), size_(size), log_(log), sizes_(std::move(sizes)) {
    options_.name = std::move(name);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  comm::Backend backend() const override { return comm::Backend::kSingle; }
  const comm::CommOptions& options() const override { return options_; }
  // The simulated ranks run one after another, so the closing all-reduce of create() sees only this rank.
  Result<comm::WorkHandle> iall_reduce(TensorView, comm::ReduceOp) override {
    ++all_reduces;
    return comm::WorkHandle(new Done);
  }
  int all_reduces = 0;
  Result<comm::WorkHandle> iall_gather(TensorView, TensorView) override { return unsupported(); }
  Result<comm::WorkHandle> ireduce_scatter(TensorView, TensorView, comm::ReduceOp) override { return unsupported(); }
  Result<comm::WorkHandle> ibroadcast(TensorView, int) override { return unsupported(); }
  Result<comm::WorkHandle> iall_to_all(TensorView, std::span<const int64_t>, TensorView,
                                       std::span<const int64_t>) override {
    return unsupported();
  }
  Result<comm::WorkHandle> isend(TensorView, int, int) override { return unsupported(); }
  Result<comm::WorkHandle> irecv(TensorView, int, int) override { return unsupported(); }
  Status barrier() override { return Status::Ok(); }
  Result<std::unique_ptr<comm::Communicator>> split(int color, int key, comm::CommOptions opt) override {
    log_->push_back({rank_, color, key, opt.name});
    EXPECT_EQ(opt.timeout, options_.timeout) << opt.name;
    const std::string axis = opt.name.substr(0, opt.name.find('['));
    return std::unique_ptr<comm::Communicator>(new FakeComm(key, sizes_.at(axis), opt.name, log_, {}));
  }

 private:
  struct Done : comm::Work {
    Status wait() override { return Status::Ok(); }
    bool test() override { return true; }
  };
  static Result<comm::WorkHandle> unsupported() { return Status(StatusCode::kNotSupported, "fake"); }
  int rank_, size_;
  comm::CommOptions options_;
  std::vector<SplitCall>* log_;
  std::map<std::string, int> sizes_;
};

const std::map<std::string, int> kTp2Dp2Sizes = {{"tp", 2},  {"cp", 1},  {"dp", 2},  {"pp", 1},
                                                 {"dp_cp", 2}, {"tp_cp", 2}, {"ep", 1}, {"etp", 2},
                                                 {"edp", 2}, {"vision_tp", 2}, {"vision_dp", 2}};

TEST(ProcessGroupsFake, SplitsEveryAxisWithMeshColorsAndKeys) {
  const ParallelConfig cfg{.world = 4, .tp = 2};
  std::vector<SplitCall> log;
  for (int r = 0; r < 4; ++r) {
    FakeComm world(r, 4, "world", &log, kTp2Dp2Sizes);
    auto pg = ProcessGroups::create(world, cfg);
    ASSERT_TRUE(pg.ok()) << pg.status().to_string();
    EXPECT_EQ(pg->world_rank(), r);
    EXPECT_EQ(pg->tp().rank(), r % 2);
    EXPECT_EQ(pg->dp().rank(), r / 2);
    EXPECT_EQ(pg->tp().options().name, fmt::format("tp[{}]", r / 2));
    EXPECT_EQ(pg->dp().options().name, fmt::format("dp[{}]", r % 2));
    for (Axis a : kAllAxes) EXPECT_EQ(pg->get(a).size(), pg->mesh().size(a)) << axis_name(a);
    EXPECT_EQ(world.all_reduces, 1) << "create() agrees on its outcome with one world all-reduce";
  }
  ASSERT_EQ(log.size(), 4 * kAllAxes.size());
  // Same call order on every rank (split is collective), and members by (axis, color) are the expected groups.
  std::map<std::pair<std::string, int>, std::vector<int>> members;  // (axis, color) -> world ranks by key
  for (size_t i = 0; i < log.size(); ++i) {
    const SplitCall& c = log[i];
    const std::string axis = c.name.substr(0, c.name.find('['));
    EXPECT_EQ(axis, axis_name(kAllAxes[i % kAllAxes.size()]));
    EXPECT_EQ(c.name, fmt::format("{}[{}]", axis, c.color));
    auto& v = members[{axis, c.color}];
    if (int(v.size()) <= c.key) v.resize(size_t(c.key) + 1, -1);
    v[size_t(c.key)] = c.world_rank;
  }
  EXPECT_EQ((members[{"tp", 0}]), (std::vector<int>{0, 1}));
  EXPECT_EQ((members[{"tp", 1}]), (std::vector<int>{2, 3}));
  EXPECT_EQ((members[{"dp", 0}]), (std::vector<int>{0, 2}));
  EXPECT_EQ((members[{"dp", 1}]), (std::vector<int>{1, 3}));
  EXPECT_EQ((members[{"pp", 0}]), (std::vector<int>{0}));
  EXPECT_EQ((members[{"pp", 3}]), (std::vector<int>{3}));
  EXPECT_EQ((members[{"dp_cp", 1}]), (std::vector<int>{1, 3}));
  EXPECT_EQ((members[{"tp_cp", 1}]), (std::vector<int>{2, 3}));
}

// A vision tower and experts replicated over the language model's tp = 2 ranks (vision tp 1, etp 1, ep 1) run the
// same data on both tp ranks: their gradient replicas count each tp pair as duplicates.
TEST(ProcessGroupsFake, OptimizerGroupsCountNarrowerTowersAsDuplicates) {
  const ParallelConfig cfg{.world = 4, .tp = 2, .etp = 1, .vision_tp = 1};
  std::map<std::string, int> sizes = kTp2Dp2Sizes;
  sizes["etp"] = 1;
  sizes["edp"] = 4;
  sizes["vision_tp"] = 1;
  sizes["vision_dp"] = 4;
  std::vector<SplitCall> log;
  FakeComm world(1, 4, "world", &log, sizes);
  auto pg = ProcessGroups::create(world, cfg);
  ASSERT_TRUE(pg.ok()) << pg.status().to_string();
  const OptimizerGroups g = OptimizerGroups::from(pg.value());
  EXPECT_EQ(g[ReplicaGroup::kDense].duplicates, 1);
  EXPECT_EQ(g[ReplicaGroup::kVision].duplicates, 2);
  EXPECT_EQ(g[ReplicaGroup::kExpert].duplicates, 2);
  EXPECT_EQ(g[ReplicaGroup::kVision].replicas->size(), 4);
  EXPECT_EQ(g.stages, &pg.value().pp());
  // Under sequence parallelism the tp ranks route different tokens: the experts' gradients are no duplicates (the
  // vision tower still sees the same images on both).
  ParallelConfig sp = cfg;
  sp.sequence_parallel = true;
  FakeComm world_sp(1, 4, "world", &log, sizes);
  auto pg_sp = ProcessGroups::create(world_sp, sp);
  ASSERT_TRUE(pg_sp.ok()) << pg_sp.status().to_string();
  const OptimizerGroups g_sp = OptimizerGroups::from(pg_sp.value());
  EXPECT_EQ(g_sp[ReplicaGroup::kExpert].duplicates, 1);
  EXPECT_EQ(g_sp[ReplicaGroup::kExpert].parts, 2);  // an average over the 4 expert replicas is ÷ 2 data replicas
  EXPECT_EQ(g_sp[ReplicaGroup::kVision].duplicates, 2);
  EXPECT_EQ(g[ReplicaGroup::kExpert].parts, 1);
  // With tp-wide towers (the default) nothing is duplicated.
  FakeComm world2(1, 4, "world", &log, kTp2Dp2Sizes);
  auto pg2 = ProcessGroups::create(world2, ParallelConfig{.world = 4, .tp = 2});
  ASSERT_TRUE(pg2.ok());
  const OptimizerGroups g2 = OptimizerGroups::from(pg2.value());
  for (const ReplicaComms& r : g2.by_group) EXPECT_EQ(r.duplicates, 1);
  // A vision tower wider than tp (tp 1, vision tp 2): each vision replica's gradient sums 2 data-parallel batches.
  const std::map<std::string, int> wide = {{"tp", 1}, {"cp", 1}, {"dp", 4}, {"pp", 1}, {"dp_cp", 4}, {"tp_cp", 1},
                                           {"ep", 1}, {"etp", 1}, {"edp", 4}, {"vision_tp", 2}, {"vision_dp", 2}};
  FakeComm world3(1, 4, "world", &log, wide);
  auto pg3 = ProcessGroups::create(world3, ParallelConfig{.world = 4, .tp = 1, .vision_tp = 2});
  ASSERT_TRUE(pg3.ok()) << pg3.status().to_string();
  const OptimizerGroups g3 = OptimizerGroups::from(pg3.value());
  EXPECT_EQ(g3[ReplicaGroup::kVision].batches, 2);
  EXPECT_EQ(g3[ReplicaGroup::kVision].duplicates, 1);
  EXPECT_EQ(g3[ReplicaGroup::kDense].batches, 1);
}

TEST(ProcessGroupsFake, RefusesInvalidConfigWrongWorldAndAMismatchedBackend) {
  std::vector<SplitCall> log;
  FakeComm world(0, 4, "world", &log, kTp2Dp2Sizes);
  const auto bad = ProcessGroups::create(world, {.world = 4, .tp = 3});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("tp*cp*pp = 3 does not divide world size 4"), std::string::npos);
  const auto heads = ProcessGroups::create(world, {.world = 4, .tp = 4}, {.num_heads = 6});
  ASSERT_FALSE(heads.ok());
  EXPECT_NE(heads.status().message().find("tp=4 does not divide 6 attention heads"), std::string::npos);
  const auto size = ProcessGroups::create(world, {.world = 8, .tp = 2});
  ASSERT_FALSE(size.ok());
  EXPECT_NE(size.status().message().find("the world communicator has 4 ranks but the config says world=8"),
            std::string::npos)
      << size.status().message();
  EXPECT_TRUE(log.empty()) << "no split may happen before the config is accepted";
  auto wrong_sizes = kTp2Dp2Sizes;
  wrong_sizes["dp"] = 4;  // a backend whose split disagrees with the mesh
  FakeComm liar(0, 4, "world", &log, wrong_sizes);
  const size_t calls_before = log.size();
  const auto mismatch = ProcessGroups::create(liar, {.world = 4, .tp = 2});
  ASSERT_FALSE(mismatch.ok());
  EXPECT_EQ(log.size() - calls_before, kAllAxes.size()) << "a mismatch must not stop the other ranks' splits";
  EXPECT_EQ(liar.all_reduces, 1);
  EXPECT_EQ(mismatch.status().code(), StatusCode::kInternal);
  EXPECT_NE(mismatch.status().message().find("split for dp gave rank 0 of 4 but the mesh expects rank 0 of 2"),
            std::string::npos)
      << mismatch.status().message();
}

}  // namespace
}  // namespace vlpar::parallel
