// exchange_balanced_packs over real ranks (mpirun -np 2 and 4): rank 0 holds all the image-heavy packs; after the
// exchange every pack is on exactly one rank, byte-identical, each rank has K packs, and the most loaded rank's
// vision cost is the LPT optimum's (far below rank 0's load before). Unequal K is an error on every rank.
// share_packs_without_vision: the loading rank's packs reach every rank without vision input; its error too.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include <fmt/core.h>

#include "mpi/mpi_test_util.hpp"
#include "vlpar/data/pack_exchange.hpp"

namespace vlpar::data {
namespace {

// Pack i of rank r: an image of side 2·(r == 0 ? 6 + i : 1) patches, so rank 0's packs are heavy.
PackedBatch pack(int rank, int64_t i) {
  PackedBatch b;
  const int64_t side = rank == 0 ? 2 * (6 + i) : 2;
  b.image_grids = {VisionGrid{1, side, side}};
  b.patch_dim = 3;
  for (int64_t p = 0; p < side * side * 3; ++p) b.pixel_values.push_back(float(rank * 1000 + i * 10) + float(p));
  b.input_ids = {rank, i, 5};
  b.labels = {-100, i, 5};
  b.cu_seqlens = {0, 3};
  b.positions.assign(9, rank);
  b.rope_deltas = {0};
  b.images_per_sample = {1};
  b.videos_per_sample = {0};
  b.sample_keys = {fmt::format("r{}/p{}", rank, i)};
  b.real_tokens = 3;
  b.num_images = 1;
  b.vision_patches = side * side;
  return b;
}

TEST(PackExchange, SpreadsImageHeavyPacksAndLosesNothing) {
  auto world = test::world_comm("dp");
  ASSERT_TRUE(world);
  const int me = world->rank(), n = world->size();
  const int64_t k = 3;
  std::vector<PackedBatch> mine;
  for (int64_t i = 0; i < k; ++i) mine.push_back(pack(me, i));
  PackBalanceReport rep;
  Result<std::vector<PackedBatch>> out = exchange_balanced_packs(world.get(), mine, {}, &rep);
  ASSERT_TRUE(out.ok()) << out.status().message();
  ASSERT_EQ(int64_t(out.value().size()), k);
  // Every pack once: gather the fingerprints of what each rank now holds.
  std::vector<int64_t> fp(static_cast<size_t>(k)), all(static_cast<size_t>(k * n));
  for (int64_t i = 0; i < k; ++i) fp[size_t(i)] = int64_t(out.value()[size_t(i)].fingerprint());
  ASSERT_TRUE(world->all_gather(TensorView(all.data(), DType::kI64, Shape{k * n}),
                                TensorView(fp.data(), DType::kI64, Shape{k})).ok());
  std::multiset<int64_t> got(all.begin(), all.end()), want;
  for (int r = 0; r < n; ++r)
    for (int64_t i = 0; i < k; ++i) want.insert(int64_t(pack(r, i).fingerprint()));
  EXPECT_EQ(got, want);
  // The balance: before, rank 0 carries every heavy pack; after, the max is what LPT gives on the same costs.
  std::vector<double> costs;
  for (int r = 0; r < n; ++r)
    for (int64_t i = 0; i < k; ++i) costs.push_back(vision_cost(pack(r, i)));
  const auto assign = balance_packs(costs, n).value();
  double lpt_max = 0;
  for (const auto& a : assign) {
    double s = 0;
    for (int64_t g : a) s += costs[size_t(g)];
    lpt_max = std::max(lpt_max, s);
  }
  EXPECT_DOUBLE_EQ(rep.max_rank_cost_after, lpt_max);
  EXPECT_LT(rep.max_rank_cost_after, 0.75 * rep.max_rank_cost_before);
  EXPECT_GE(rep.max_rank_cost_after, rep.mean_rank_cost);
  // What this rank received is what the assignment says, in ascending global order.
  for (size_t j = 0; j < assign[size_t(me)].size(); ++j) {
    const int64_t g = assign[size_t(me)][j];
    EXPECT_EQ(out.value()[j].fingerprint(), pack(int(g / k), g % k).fingerprint()) << "pack " << g;
  }
}

TEST(PackExchange, UnequalPackCountsAreAnErrorEverywhere) {
  auto world = test::world_comm("dp");
  ASSERT_TRUE(world);
  std::vector<PackedBatch> mine = {pack(world->rank(), 0)};
  if (world->rank() == 1) mine.push_back(pack(1, 1));
  Result<std::vector<PackedBatch>> out = exchange_balanced_packs(world.get(), mine);
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("packs"), std::string::npos) << out.status().message();
}

// Pipeline data sharing: the last rank loads 3 packs (with images); every other rank receives them with the tokens,
// labels, sample bounds and positions byte for byte and no vision input; the root keeps its own packs unchanged.
TEST(PackExchange, SharedWithoutVisionFromTheLoadingRank) {
  auto world = test::world_comm("pp");
  ASSERT_TRUE(world);
  const int root = world->size() - 1;
  std::vector<PackedBatch> loaded;
  for (int64_t i = 0; i < 3; ++i) loaded.push_back(pack(0, i));
  Result<std::vector<PackedBatch>> got =
      share_packs_without_vision(*world, root, world->rank() == root ? loaded : std::vector<PackedBatch>{});
  ASSERT_TRUE(got.ok()) << got.status().message();
  ASSERT_EQ(got.value().size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    const PackedBatch& a = got.value()[i];
    const PackedBatch& b = loaded[i];
    if (world->rank() == root) {
      EXPECT_EQ(a.fingerprint(), b.fingerprint()) << i;
      continue;
    }
    EXPECT_EQ(a.input_ids, b.input_ids) << i;
    EXPECT_EQ(a.labels, b.labels) << i;
    EXPECT_EQ(a.cu_seqlens, b.cu_seqlens) << i;
    EXPECT_EQ(a.positions, b.positions) << i;
    EXPECT_EQ(a.sample_keys, b.sample_keys) << i;
    EXPECT_EQ(a.num_images, b.num_images) << i;
    EXPECT_EQ(a.vision_patches, b.vision_patches) << i;
    EXPECT_TRUE(a.pixel_values.empty() && a.image_grids.empty()) << i;
    EXPECT_EQ(a.images_per_sample, std::vector<int64_t>{0}) << i;
    EXPECT_TRUE(a.view().validate().ok()) << a.view().validate().message();
  }
}

// The loading rank's error reaches every rank as an error naming it; nobody waits for packs that never come.
TEST(PackExchange, SharingFailsEverywhereWhenTheLoadingRankFails) {
  auto world = test::world_comm("pp");
  ASSERT_TRUE(world);
  Result<std::vector<PackedBatch>> bad = Status(StatusCode::kIoError, "shard 3: truncated record");
  Result<std::vector<PackedBatch>> got = share_packs_without_vision(*world, 0, std::move(bad));
  ASSERT_FALSE(got.ok());
  const std::string want = world->rank() == 0 ? "shard 3: truncated record" : "the loading rank 0 failed";
  EXPECT_NE(got.status().message().find(want), std::string::npos) << got.status().message();
}

}  // namespace
}  // namespace vlpar::data
