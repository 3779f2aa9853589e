// The parameter registry: registration rules, freezing (no gradient buffer), layout-invariant init, counts.
#include <gtest/gtest.h>

#include <cstring>

#include "test_util.hpp"
#include "vlpar/nn/param_registry.hpp"

namespace vlpar::nn {
namespace {

ParamRegistry two_group_registry() {
  ParamRegistry reg;
  EXPECT_TRUE(reg.add(make_replicated_param("model.visual.pos_embed.weight", Shape{16, 8}, 1,
                                            InitRule::normal(0.f, 0.02f)),
                      "vision")
                  .ok());
  EXPECT_TRUE(reg.add(make_replicated_param("model.language_model.norm.weight", Shape{8}, 2, InitRule::ones()),
                      "language_model")
                  .ok());
  EXPECT_TRUE(reg.add(make_replicated_param("lm_head.weight", Shape{32, 8}, 3, InitRule::normal(0.f, 0.02f)),
                      "language_model")
                  .ok());
  return reg;
}

TEST(ParamRegistry, RegistersInOrderAndFindsByName) {
  ParamRegistry reg = two_group_registry();
  ASSERT_EQ(reg.size(), 3u);
  EXPECT_EQ(reg.find("lm_head.weight"), 2u);
  EXPECT_FALSE(reg.find("lm_head.bias").has_value());
  Result<size_t> missing = reg.index_of("lm_head.bias");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("lm_head.bias"), std::string::npos);
  EXPECT_EQ(reg.groups(), (std::vector<std::string>{"vision", "language_model"}));
}

TEST(ParamRegistry, RejectsDuplicatesEmptyDimsAndLateChanges) {
  ParamRegistry reg = two_group_registry();
  Result<size_t> dup = reg.add(make_replicated_param("lm_head.weight", Shape{4}, 9, InitRule::ones()), "x");
  ASSERT_FALSE(dup.ok());
  EXPECT_NE(dup.status().message().find("registered twice"), std::string::npos);
  EXPECT_FALSE(reg.add(make_replicated_param("w", Shape{4, 0}, 9, InitRule::ones()), "x").ok());
  Status unknown = reg.freeze_group("visoin");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.message().find("visoin"), std::string::npos);

  Allocator alloc;
  Context ctx;
  ASSERT_TRUE(reg.materialize(ctx, alloc, 7).ok());
  EXPECT_FALSE(reg.freeze_group("vision").ok());
  EXPECT_FALSE(reg.add(make_replicated_param("late", Shape{4}, 9, InitRule::ones()), "x").ok());
  EXPECT_FALSE(reg.materialize(ctx, alloc, 7).ok());
}

TEST(ParamRegistry, FrozenGroupsAllocateNoGradient) {
  Allocator alloc;
  Context ctx;
  ParamRegistry reg = two_group_registry();
  ASSERT_TRUE(reg.freeze_group("vision").ok());
  ASSERT_TRUE(reg.materialize(ctx, alloc, 7).ok());
  EXPECT_TRUE(reg.frozen(0));
  EXPECT_TRUE(reg.grad(0).empty());
  EXPECT_FALSE(reg.grad(1).empty());
  EXPECT_EQ(reg.trainable(), (std::vector<size_t>{1, 2}));
  const ParamCounts c = reg.counts();
  EXPECT_EQ(c.params, 16 * 8 + 8 + 32 * 8);
  EXPECT_EQ(c.trainable, 8 + 32 * 8);
  EXPECT_EQ(c.grad_bytes, (8 + 32 * 8) * 4);
  // The allocator saw values for all three and gradients for two: nothing for the frozen gradient.
  EXPECT_EQ(alloc.stats(Device::cpu()).current_bytes % 64, 0);
  EXPECT_GE(alloc.stats(Device::cpu()).current_bytes, c.value_bytes + c.grad_bytes);
  EXPECT_LT(alloc.stats(Device::cpu()).current_bytes, c.value_bytes + c.grad_bytes + 16 * 8 * 4);
}

TEST(ParamRegistry, InitIsTheSliceOfTheFullWeightAndGradsStartAtZero) {
  Allocator alloc;
  Context ctx;
  // The same parameter registered whole and as a row block: the block equals those rows of the whole.
  ParamRegistry whole, part;
  ASSERT_TRUE(whole.add(make_replicated_param("w", Shape{6, 4}, 5, InitRule::normal(0.f, 1.f)), "g").ok());
  ASSERT_TRUE(part.add(make_split_param("w", Shape{6, 4}, 0, Range{2, 4}, 5, InitRule::normal(0.f, 1.f)), "g").ok());
  ASSERT_TRUE(whole.materialize(ctx, alloc, 11).ok());
  ASSERT_TRUE(part.materialize(ctx, alloc, 11).ok());
  const float* w = static_cast<const float*>(whole.value(0).data);
  const float* p = static_cast<const float*>(part.value(0).data);
  EXPECT_EQ(std::memcmp(p, w + 2 * 4, 2 * 4 * sizeof(float)), 0);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(static_cast<const float*>(part.grad(0).data)[i], 0.f);
  static_cast<float*>(part.grad(0).data)[3] = 5.f;
  ASSERT_TRUE(part.zero_grads().ok());
  EXPECT_EQ(static_cast<const float*>(part.grad(0).data)[3], 0.f);
}

TEST(ParamRegistry, WithoutASeedValuesAreZerosForACheckpointToFill) {
  Allocator alloc;
  Context ctx;
  ParamRegistry reg = two_group_registry();
  ASSERT_TRUE(reg.materialize(ctx, alloc, std::nullopt).ok());
  for (size_t i = 0; i < reg.size(); ++i)
    for (int64_t k = 0; k < reg.value(i).numel(); ++k) ASSERT_EQ(reg.value(i).ptr<float>()[k], 0.f) << reg.name(i);
}

}  // namespace
}  // namespace vlpar::nn
