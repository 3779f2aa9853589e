// pack_exchange.hpp without communication: the byte image of a PackedBatch round-trips every field, corrupt images
// are errors naming the defect, and one rank (no communicator) keeps its packs.
#include <gtest/gtest.h>

#include "vlpar/data/pack_exchange.hpp"

namespace vlpar::data {
namespace {

PackedBatch sample_pack(int64_t seed) {
  PackedBatch b;
  b.input_ids = {1, 3, 6, 6, 6, 6, 4, 9 + seed, 2, 1, 10};
  b.labels = {-100, -100, -100, -100, -100, -100, -100, 9 + seed, 2, -100, 10};
  b.cu_seqlens = {0, 9, 11};
  for (int r = 0; r < 3; ++r)
    for (int64_t i = 0; i < 11; ++i) b.positions.push_back(i + r * seed);
  b.rope_deltas = {-3, 0};
  b.image_grids = {VisionGrid{1, 4, 4}};
  b.patch_dim = 6;
  for (int i = 0; i < 16 * 6; ++i) b.pixel_values.push_back(0.25f * float(i) - float(seed));
  b.images_per_sample = {1, 0};
  b.videos_per_sample = {0, 0};
  b.sample_keys = {"shard-0/a" + std::to_string(seed), "b"};
  b.real_tokens = 11;
  b.token_budget = 16;
  b.num_images = 1;
  b.vision_patches = 16;
  b.num_label_tokens = 3;
  return b;
}

TEST(PackBytes, RoundTripsEveryField) {
  const PackedBatch a = sample_pack(7);
  const std::vector<uint8_t> bytes = serialize_packed_batch(a);
  Result<PackedBatch> b = deserialize_packed_batch(bytes);
  ASSERT_TRUE(b.ok()) << b.status().message();
  EXPECT_EQ(b.value().fingerprint(), a.fingerprint());
  EXPECT_EQ(b.value().sample_keys, a.sample_keys);
  EXPECT_EQ(b.value().positions, a.positions);
  EXPECT_EQ(b.value().pixel_values, a.pixel_values);
  EXPECT_EQ(serialize_packed_batch(b.value()), bytes);
  EXPECT_NE(serialize_packed_batch(sample_pack(8)), bytes);
}

// A batch file may leave out the per-sample image and video counts (they are optional): such a pack round-trips
// too (a pipeline shares it with the other stages), and a count list of the wrong length is still an error.
TEST(PackBytes, PacksWithoutPerSampleVisionCountsRoundTrip) {
  PackedBatch a = sample_pack(3);
  a.images_per_sample.clear();
  a.videos_per_sample.clear();
  Result<PackedBatch> b = deserialize_packed_batch(serialize_packed_batch(a));
  ASSERT_TRUE(b.ok()) << b.status().message();
  EXPECT_EQ(b.value().fingerprint(), a.fingerprint());
  a.images_per_sample = {1};
  Result<PackedBatch> c = deserialize_packed_batch(serialize_packed_batch(a));
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("2 samples but 2 keys, 1 image counts"), std::string::npos)
      << c.status().message();
}

TEST(PackBytes, CorruptImagesAreNamedErrors) {
  const std::vector<uint8_t> good = serialize_packed_batch(sample_pack(1));
  for (size_t cut : {size_t(0), size_t(3), size_t(8), size_t(40), good.size() / 2, good.size() - 1}) {
    Result<PackedBatch> r = deserialize_packed_batch(std::span<const uint8_t>(good.data(), cut));
    ASSERT_FALSE(r.ok()) << "cut at " << cut;
    EXPECT_NE(r.status().message().find("packed batch bytes"), std::string::npos) << r.status().message();
  }
  std::vector<uint8_t> bad = good;
  bad[0] = 'X';
  EXPECT_NE(deserialize_packed_batch(bad).status().message().find("magic"), std::string::npos);
  bad = good;
  bad.push_back(0);
  EXPECT_NE(deserialize_packed_batch(bad).status().message().find("trailing"), std::string::npos);
  bad = good;
  bad[8] = 0xff;  // the input_ids count's low byte: a huge count that cannot fit
  EXPECT_FALSE(deserialize_packed_batch(bad).ok());
  // Images that decode but describe an impossible pack.
  PackedBatch q = sample_pack(1);
  q.cu_seqlens = {0, 12, 11};
  EXPECT_NE(deserialize_packed_batch(serialize_packed_batch(q)).status().message().find("does not increase"),
            std::string::npos);
  q = sample_pack(1);
  q.image_grids = {VisionGrid{1, -4, -4}};
  EXPECT_NE(deserialize_packed_batch(serialize_packed_batch(q)).status().message().find("grid 0"), std::string::npos);
  q = sample_pack(1);
  q.images_per_sample = {2, 0};
  EXPECT_NE(deserialize_packed_batch(serialize_packed_batch(q)).status().message().find("per-sample counts"),
            std::string::npos);
  // A consistent-looking image whose pixels disagree with its grid.
  PackedBatch p = sample_pack(1);
  p.pixel_values.pop_back();
  Result<PackedBatch> r = deserialize_packed_batch(serialize_packed_batch(p));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("disagree with the grids"), std::string::npos) << r.status().message();
}

TEST(PackExchange, OneRankKeepsItsPacks) {
  std::vector<PackedBatch> packs = {sample_pack(1), sample_pack(2)};
  PackBalanceReport rep;
  Result<std::vector<PackedBatch>> out = exchange_balanced_packs(nullptr, packs, {}, &rep);
  ASSERT_TRUE(out.ok());
  ASSERT_EQ(out.value().size(), 2u);
  EXPECT_EQ(out.value()[0].fingerprint(), packs[0].fingerprint());
  EXPECT_EQ(out.value()[1].fingerprint(), packs[1].fingerprint());
  EXPECT_DOUBLE_EQ(rep.max_rank_cost_before, rep.max_rank_cost_after);
  EXPECT_FALSE(exchange_balanced_packs(nullptr, {}).ok());
}

}  // namespace
}  // namespace vlpar::data
