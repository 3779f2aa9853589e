// Tensor × data parallelism (mpirun -np 4: tp 2 × dp 2 from ProcessGroups, tp fastest): each dp replica runs the
// decoder stack with TP2 (with and without SP) on its own batch, GradBuckets averages over the dp group, and the
// loss and every gradient gathered to full shape over tp equal the single-process run on both replicas' batches
// concatenated, within kParallelEquivalence (tests/tolerances.hpp).
// Run: ctest --preset cpu -L mpi   (or: mpirun -np 4 ./build/cpu/tests/test_tp_dp)
#include <gtest/gtest.h>

#include <algorithm>

#include "mpi/mpi_test_util.hpp"
#include "mpi/nn_equivalence.hpp"
#include "vlpar/parallel/grad_buckets.hpp"
#include "vlpar/parallel/process_groups.hpp"

namespace vlpar::test {
namespace {

void run_tp_dp(bool sp) {
  auto world = world_comm("world");
  ASSERT_TRUE(world);
  ASSERT_EQ(world->size(), 4) << "this test runs under mpirun -np 4";
  const nn::TransformerConfig cfg = tiny_decoder_config();
  auto pg = parallel::ProcessGroups::create(*world, {.world = 4, .tp = 2},
                                            {.num_layers = cfg.num_layers, .num_heads = cfg.heads,
                                             .num_kv_heads = cfg.kv_heads, .vocab = cfg.vocab,
                                             .intermediate = cfg.intermediate});
  ASSERT_TRUE(pg.ok()) << pg.status().to_string();
  comm::Communicator& tp = pg->tp();
  comm::Communicator& dp = pg->dp();
  ASSERT_EQ(tp.size(), 2);
  ASSERT_EQ(dp.size(), 2);
  std::vector<HostBatch> all;
  for (int r = 0; r < dp.size(); ++r) all.push_back(make_host_batch({11, 9}, cfg.vocab, 300 + uint64_t(r), cfg.ignore_index));
  HostBatch mine = all[size_t(dp.rank())];

  Allocator alloc;
  Context ctx = test_ctx(1);
  ctx.allocator = &alloc;
  auto model = nn::DecoderModel::create(ctx, cfg, {&tp, sp}, kNnSeed, alloc);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  std::vector<TensorView> grads = model->grads();
  std::reverse(grads.begin(), grads.end());
  auto buckets = parallel::GradBuckets::create(dp, grads, {.bucket_bytes = 8 << 10}, alloc);
  ASSERT_TRUE(buckets.ok()) << buckets.status().to_string();
  const size_t last = model->num_params() - 1;
  nn::DecoderStash st;
  const Batch b = batch_views(mine);
  auto r = model->forward(ctx, b, st);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_TRUE(model->backward(ctx, b, st, 1.f, [&](size_t i) { return buckets->mark_ready(last - i); }).ok());
  ASSERT_TRUE(buckets->finish().ok());
  double loss = r->loss;
  ASSERT_TRUE(dp.all_reduce(TensorView(&loss, DType::kF64, {1}), comm::ReduceOp::kSum).ok());
  loss /= dp.size();
  const std::string what = std::string("tp2xdp2") + (sp ? "+sp" : "");
  const auto full = gather_full(cfg, &tp, sp, model->grads(), what);
  const HostBatch whole = concat_batches(all);
  const FullRun single = single_process_run(cfg, whole);
  expect_matches_single(cfg, single, whole, loss, full, what);
}

TEST(TpDp, MatchesSingleProcess) { run_tp_dp(false); }
TEST(TpDp, WithSequenceParallelMatchesSingleProcess) { run_tp_dp(true); }

}  // namespace
}  // namespace vlpar::test
