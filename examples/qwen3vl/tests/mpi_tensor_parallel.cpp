// Qwen3-VL under tensor parallelism over the whole world (mpirun -np 2 and 4): the model is loaded from the HF
// fixtures with "convert then split" (each rank builds every full tensor, then takes its shard), and its loss and
// every gradient, assembled back to full shape, equal the single-process run's (which every rank computes for
// itself). At np 4 the dense fixture's 2 kv heads are replicated on 2 ranks each.
// With sequence parallelism (…WithSequenceParallel) each rank holds N / tp tokens between the TP regions and the
// MoE layers route each rank's own tokens; the batch is padded to a multiple of tp (pad_for_sequence_parallel: at
// np 4 its 78 tokens become 80), the single-process reference runs the same padded batch. The expert gradients
// are then each rank's tokens' part (the optimizer sums them over expert-dp, which spans the tp ranks): assembled
// by summing over the ranks instead of averaging the replicas.
// Tolerance: the same fp32 kernels with the reductions over heads / SwiGLU width / vocab split across ranks and
// summed by all-reduce: a few u32 per op → 1e-5 relative to each tensor's largest value.
#include <gtest/gtest.h>

#include "model_test_util.hpp"
#include "mpi/mpi_test_util.hpp"

namespace qwen3vl {
namespace {

using vlpar::DType;
using vlpar::Shape;

// Full-shape gradient of parameter i assembled over the group: Σ over ranks of each rank's shard placed in a zero
// tensor, divided by how many ranks hold each element (replicated elements agree, checked below) unless each rank
// holds a part of the sum (`parts`).
Tensor assemble(vlpar::comm::Communicator& comm, const nn::ParamRegistry& reg, size_t i, Allocator& alloc,
                bool parts = false) {
  const vlpar::ParamShard& p = reg.entry(i).shard;
  Tensor sum = Tensor::zeros(alloc, p.full_shape, DType::kF32).value();
  Tensor count = Tensor::zeros(alloc, p.full_shape, DType::kF32).value();
  Tensor ones = Tensor::empty(alloc, p.local_shape(), DType::kF32).value();
  for (int64_t k = 0; k < ones.numel(); ++k) ones.ptr<float>()[k] = 1.f;
  EXPECT_TRUE(vlpar::scatter_shard_into_full(sum, reg.grad(i), p).ok());
  EXPECT_TRUE(vlpar::scatter_shard_into_full(count, ones, p).ok());
  EXPECT_TRUE(comm.all_reduce(sum, vlpar::comm::ReduceOp::kSum).ok());
  EXPECT_TRUE(comm.all_reduce(count, vlpar::comm::ReduceOp::kSum).ok());
  for (int64_t k = 0; k < sum.numel(); ++k) {
    EXPECT_GT(count.ptr<float>()[k], 0.f) << p.name << " element " << k << " held by no rank";
    if (!parts) sum.ptr<float>()[k] /= std::max(1.f, count.ptr<float>()[k]);
  }
  if (parts) return sum;
  // This rank's shard must equal its place in the assembly (replicas agree).
  Tensor back = Tensor::empty(alloc, p.local_shape(), DType::kF32).value();
  EXPECT_TRUE(vlpar::gather_shard_from_full(back, sum, p).ok());
  EXPECT_LE(test::rel_diff(back, reg.grad(i)), 1e-6) << p.name << ": ranks holding the same elements disagree";
  return sum;
}

void check_tp(const std::string& fixture, bool sp = false) {
  auto world = vlpar::test::world_comm("tp");
  ASSERT_TRUE(world);
  test::Loaded single;
  test::load(single, fixture);
  if (sp) pad_for_sequence_parallel(*single.batch, world->size(), 0);
  Stash s1;
  Result<StepLoss> l1 = single.model->forward(single.ctx, single.batch->view(), s1);
  ASSERT_TRUE(l1.ok()) << l1.status().message();
  ASSERT_TRUE(single.model->backward(single.ctx, single.batch->view(), s1).ok());

  Allocator alloc;
  Context ctx = Context::cpu_default();
  ctx.allocator = &alloc;
  Result<Config> cfg = load_hf_config(test::fixture(fixture));
  ASSERT_TRUE(cfg.ok());
  Result<Model> m = Model::create(ctx, cfg.value(), Freeze{}, 0, alloc, nn::TensorParallel{world.get(), sp});
  ASSERT_TRUE(m.ok()) << m.status().message();
  ASSERT_TRUE(load_hf_weights(m.value(), test::fixture(fixture)).ok());
  Stash st;
  Result<StepLoss> l = m.value().forward(ctx, single.batch->view(), st);
  ASSERT_TRUE(l.ok()) << l.status().message();
  ASSERT_TRUE(m.value().backward(ctx, single.batch->view(), st).ok());
  EXPECT_NEAR(l.value().loss, l1.value().loss, 1e-5 * l1.value().loss);
  EXPECT_NEAR(l.value().aux_loss, l1.value().aux_loss, 1e-5 * l1.value().aux_loss + 1e-9);
  const nn::ParamRegistry& reg = m.value().registry();
  ASSERT_EQ(reg.size(), single.model->registry().size());
  int sharded = 0;
  for (size_t i = 0; i < reg.size(); ++i) {
    sharded += reg.entry(i).shard.shard_dim >= 0;
    const bool parts = sp && reg.entry(i).shard.replica == vlpar::ReplicaGroup::kExpert;
    Tensor full = assemble(*world, reg, i, alloc, parts);
    EXPECT_LE(test::rel_diff(full, single.model->registry().grad(i)), 1e-5) << fixture << " " << reg.name(i);
  }
  EXPECT_GT(sharded, 0);
}

TEST(Qwen3VlTensorParallel, DenseMatchesSingleProcess) { check_tp("dense"); }
TEST(Qwen3VlTensorParallel, MoeMatchesSingleProcess) { check_tp("moe"); }
TEST(Qwen3VlTensorParallel, DenseWithSequenceParallelMatchesSingleProcess) { check_tp("dense", true); }

// Vision tp 2 with language tp 1 (np 2: the world; np 4: two groups of two ranks): the vision blocks' heads and MLP
// split over the pair (qkv's three thirds, proj and fc2 by columns, fc1 by rows), the rest whole; loss and every
// gradient, assembled over the pair, equal the single-process run's.
TEST(Qwen3VlTensorParallel, VisionTp2WithLanguageTp1MatchesSingleProcess) {
  auto world = vlpar::test::world_comm("world");
  ASSERT_TRUE(world);
  const int r = world->rank();
  auto pair = world->split(r / 2, r % 2, vlpar::test::test_options("vision_tp"));
  ASSERT_TRUE(pair.ok()) << pair.status().to_string();
  vlpar::comm::Communicator& vtp = *pair.value();
  ASSERT_EQ(vtp.size(), 2);
  test::Loaded single;
  test::load(single, "moe");
  Stash s1;
  Result<StepLoss> l1 = single.model->forward(single.ctx, single.batch->view(), s1);
  ASSERT_TRUE(l1.ok()) << l1.status().message();
  ASSERT_TRUE(single.model->backward(single.ctx, single.batch->view(), s1).ok());
  Allocator alloc;
  Context ctx = Context::cpu_default();
  ctx.allocator = &alloc;
  Result<Config> cfg = load_hf_config(test::fixture("moe"));
  ASSERT_TRUE(cfg.ok());
  Result<Model> m = Model::create(ctx, cfg.value(), Freeze{}, 0, alloc, {}, {}, {}, nn::TensorParallel{&vtp, false});
  ASSERT_TRUE(m.ok()) << m.status().message();
  ASSERT_TRUE(load_hf_weights(m.value(), test::fixture("moe")).ok());
  Stash st;
  Result<StepLoss> l = m.value().forward(ctx, single.batch->view(), st);
  ASSERT_TRUE(l.ok()) << l.status().message();
  ASSERT_TRUE(m.value().backward(ctx, single.batch->view(), st).ok());
  EXPECT_NEAR(l.value().loss, l1.value().loss, 1e-5 * l1.value().loss);
  const nn::ParamRegistry& reg = m.value().registry();
  int sharded = 0;
  for (size_t i = 0; i < reg.size(); ++i) {
    const vlpar::ParamShard& p = reg.entry(i).shard;
    sharded += p.replica == vlpar::ReplicaGroup::kVision && p.local_shape() != p.full_shape;
    Tensor full = assemble(vtp, reg, i, alloc);
    EXPECT_LE(test::rel_diff(full, single.model->registry().grad(i)), 1e-5) << reg.name(i);
  }
  EXPECT_EQ(sharded, 6 * cfg.value().vision.depth);  // per block: qkv w and b, proj w, fc1 w and b, fc2 w
}
TEST(Qwen3VlTensorParallel, MoeWithSequenceParallelMatchesSingleProcess) { check_tp("moe", true); }

}  // namespace
}  // namespace qwen3vl
