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
