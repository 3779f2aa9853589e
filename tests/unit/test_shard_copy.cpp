// gather_shard_from_full (checkpoint import: "convert then split") is the inverse of scatter_shard_into_full,
// and the shard it takes from an initialised full tensor equals the shard init_param_shard makes directly.
#include <gtest/gtest.h>

#include "test_util.hpp"
#include "vlpar/core/shard.hpp"

namespace vlpar::nn {
namespace {

std::vector<ParamShard> shards_of_rank(int tp, int rank) {
  const InitRule n = InitRule::normal(0.f, 1.f);
  return {make_split_param("col", Shape{12, 5}, 0, even_shard(12, tp, rank), 1, n),
          make_split_param("row", Shape{5, 12}, 1, even_shard(12, tp, rank), 2, n),
          make_fused_gate_up_param("gate_up", 6, 5, even_shard(6, tp, rank), 3, n),
          make_replicated_param("norm", Shape{5}, 4, n)};
}

TEST(ShardCopy, GatherFromFullEqualsDirectShardInitAndInvertsScatter) {
  Allocator alloc;
  Context ctx;
  for (int tp : {1, 2, 3}) {
    for (int rank = 0; rank < tp; ++rank) {
      for (const ParamShard& p : shards_of_rank(tp, rank)) {
        Tensor full = Tensor::empty(alloc, p.full_shape, DType::kF32).value();
        ASSERT_TRUE(init_full(ctx, full, 9, p.param_id, p.init).ok());
        Tensor direct = Tensor::empty(alloc, p.local_shape(), DType::kF32).value();
        ASSERT_TRUE(init_param_shard(ctx, direct, p, 9).ok());
        Tensor gathered = Tensor::zeros(alloc, p.local_shape(), DType::kF32).value();
        ASSERT_TRUE(gather_shard_from_full(gathered, full, p).ok());
        EXPECT_TRUE(test::bitwise_equal(p.name + " tp" + std::to_string(tp), gathered, direct));
        Tensor back = Tensor::zeros(alloc, p.full_shape, DType::kF32).value();
        ASSERT_TRUE(scatter_shard_into_full(back, gathered, p).ok());
        Tensor again = Tensor::zeros(alloc, p.local_shape(), DType::kF32).value();
        ASSERT_TRUE(gather_shard_from_full(again, back, p).ok());
        EXPECT_TRUE(test::bitwise_equal(p.name + " round trip", again, gathered));
      }
    }
  }
}

// Expert weights under expert tensor parallelism: experts split over ep along dim 0, each expert's width over etp
// (gate_up [E, H, 2I]: the gate and up columns of the rank's block; down [E, I, H]: its rows).
std::vector<ParamShard> expert_shards(int ep, int ep_rank, int etp, int etp_rank) {
  const InitRule n = InitRule::normal(0.f, 1.f);
  const int64_t E = 4, H = 3, I = 6;
  const Range experts = even_shard(E, ep, ep_rank), width = even_shard(I, etp, etp_rank);
  return {split_inner(make_split_param("gate_up", Shape{E, H, 2 * I}, 0, experts, 5, n), 2, width, true),
          split_inner(make_split_param("down", Shape{E, I, H}, 0, experts, 6, n), 1, width, false)};
}

TEST(ShardCopy, TwoSplitDimsTileTheFullTensorAndMatchTheDirectInit) {
  Allocator alloc;
  Context ctx;
  for (auto [ep, etp] : {std::pair{1, 2}, {2, 2}, {2, 3}, {4, 1}}) {
    std::vector<Tensor> covered;  // per parameter: how many ranks hold each element
    for (int r = 0; r < ep * etp; ++r) {
      const std::vector<ParamShard> shards = expert_shards(ep, r / etp, etp, r % etp);
      for (size_t i = 0; i < shards.size(); ++i) {
        const ParamShard& p = shards[i];
        const std::string what = p.name + " ep" + std::to_string(ep) + " etp" + std::to_string(etp);
        Tensor full = Tensor::empty(alloc, p.full_shape, DType::kF32).value();
        ASSERT_TRUE(init_full(ctx, full, 9, p.param_id, p.init).ok());
        Tensor direct = Tensor::empty(alloc, p.local_shape(), DType::kF32).value();
        ASSERT_TRUE(init_param_shard(ctx, direct, p, 9).ok()) << what;
        Tensor gathered = Tensor::zeros(alloc, p.local_shape(), DType::kF32).value();
        ASSERT_TRUE(gather_shard_from_full(gathered, full, p).ok()) << what;
        EXPECT_TRUE(test::bitwise_equal(what, gathered, direct));
        if (covered.size() <= i) covered.push_back(Tensor::zeros(alloc, p.full_shape, DType::kF32).value());
        Tensor ones = Tensor::empty(alloc, p.local_shape(), DType::kF32).value();
        for (int64_t k = 0; k < ones.numel(); ++k) ones.ptr<float>()[k] = 1.f;
        Tensor mine = Tensor::zeros(alloc, p.full_shape, DType::kF32).value();
        ASSERT_TRUE(scatter_shard_into_full(mine, ones, p).ok());
        for (int64_t k = 0; k < mine.numel(); ++k) covered[i].ptr<float>()[k] += mine.ptr<float>()[k];
      }
    }
    for (const Tensor& c : covered)
      for (int64_t k = 0; k < c.numel(); ++k) ASSERT_EQ(c.ptr<float>()[k], 1.f) << "element " << k;
  }
  // A replicated parameter split along an inner dim only: its boxes are whole along every other dim.
  const ParamShard r = split_inner(make_replicated_param("w", Shape{3, 8}, 7, InitRule::normal(0.f, 1.f)), 1,
                                   Range{2, 6}, false);
  ASSERT_EQ(r.boxes().size(), 1u);
  EXPECT_EQ(r.local_shape(), (Shape{3, 4}));
  Tensor full = Tensor::empty(alloc, r.full_shape, DType::kF32).value();
  ASSERT_TRUE(init_full(ctx, full, 9, r.param_id, r.init).ok());
  Tensor direct = Tensor::empty(alloc, r.local_shape(), DType::kF32).value();
  ASSERT_TRUE(init_param_shard(ctx, direct, r, 9).ok());
  Tensor gathered = Tensor::zeros(alloc, r.local_shape(), DType::kF32).value();
  ASSERT_TRUE(gather_shard_from_full(gathered, full, r).ok());
  EXPECT_TRUE(test::bitwise_equal("inner split of a replicated parameter", gathered, direct));
  // The fused width keeps each rank's gate and up columns side by side: [E_l, H, gate I/etp | up I/etp].
  const ParamShard g = expert_shards(2, 1, 2, 1)[0];
  EXPECT_EQ(g.local_shape(), (Shape{2, 3, 6}));
  ASSERT_EQ(g.inner_pieces.size(), 2u);
  EXPECT_EQ(g.inner_pieces[0].full_begin, 3);
  EXPECT_EQ(g.inner_pieces[1].full_begin, 9);
  EXPECT_EQ(g.boxes().size(), 2u);
}

TEST(ShardCopy, ShapeMismatchNamesTheParameter) {
  Allocator alloc;
  const ParamShard p = make_split_param("model.x.weight", Shape{8, 4}, 0, Range{0, 4}, 1, InitRule::ones());
  Tensor full = Tensor::zeros(alloc, Shape{8, 5}, DType::kF32).value();
  Tensor local = Tensor::zeros(alloc, Shape{4, 4}, DType::kF32).value();
  Status s = gather_shard_from_full(local, full, p);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("model.x.weight"), std::string::npos);
}

}  // namespace
}  // namespace vlpar::nn
