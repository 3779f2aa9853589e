// Data parallelism over the whole world (mpirun -np 2 and -np 4): each rank runs the TP1 decoder stack on its own
// packed batch, GradBuckets all-reduces the gradients in buckets launched from the backward's ready hook, and the
// averaged loss and every gradient equal the single-process run on all ranks' batches concatenated (within
// kParallelEquivalence, tests/tolerances.hpp). ZeRO-1 (DistributedOptimizer) parameters after 5 AdamW steps equal
// plain adamw_step on the averaged gradients bit for bit with the model's gradients at dp = 2 (other sizes and
// the replicated mode: tests/mpi/test_distributed_optimizer.cpp).
// Run: ctest --preset cpu -L mpi   (or: mpirun -np 2 ./build/cpu/tests/test_data_parallel)
#include <gtest/gtest.h>

#include <algorithm>

#include "mpi/mpi_test_util.hpp"
#include "mpi/nn_equivalence.hpp"
#include "vlpar/kernels/optimizer.hpp"
#include "vlpar/parallel/distributed_optimizer.hpp"
#include "vlpar/parallel/grad_buckets.hpp"

namespace vlpar::test {
namespace {

HostBatch rank_batch(const nn::TransformerConfig& cfg, int rank, uint64_t salt = 0) {
  return make_host_batch({11, 9}, cfg.vocab, 100 + salt + uint64_t(rank), cfg.ignore_index);
}

// bucket_bytes 4 gives one bucket per gradient (each all-reduce starts the moment its gradient is reported
// ready); 16 KiB groups several.
class DataParallel : public ::testing::TestWithParam<size_t> {};

TEST_P(DataParallel, BucketedGradientsMatchSingleProcess) {
  auto dp = world_comm("dp");
  ASSERT_TRUE(dp);
  const int n = dp->size();
  const nn::TransformerConfig cfg = tiny_decoder_config();
  std::vector<HostBatch> all;
  for (int r = 0; r < n; ++r) all.push_back(rank_batch(cfg, r));
  HostBatch mine = all[size_t(dp->rank())];

  Allocator alloc;
  Context ctx = test_ctx(1);
  ctx.allocator = &alloc;
  auto model = nn::DecoderModel::create(ctx, cfg, {}, kNnSeed, alloc).value();
  // Buckets in backward-completion order (the reverse of the parameter order).
  std::vector<TensorView> grads = model.grads();
  std::reverse(grads.begin(), grads.end());
  auto buckets = parallel::GradBuckets::create(*dp, grads, {.bucket_bytes = GetParam()}, alloc);
  ASSERT_TRUE(buckets.ok()) << buckets.status().to_string();
  if (GetParam() == 4) EXPECT_EQ(buckets->num_buckets(), model.num_params());
  else EXPECT_TRUE(buckets->num_buckets() > 2 && buckets->num_buckets() < model.num_params()) << buckets->num_buckets();
  const size_t last = model.num_params() - 1;
  nn::DecoderStash st;
  const Batch b = batch_views(mine);
  auto r = model.forward(ctx, b, st);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_TRUE(model.backward(ctx, b, st, 1.f, [&](size_t i) { return buckets->mark_ready(last - i); }).ok());
  ASSERT_TRUE(buckets->finish().ok());
  // Every rank has the same number of valid labels, so the global mean loss is the mean of the rank means.
  double loss = r->loss;
  ASSERT_TRUE(dp->all_reduce(TensorView(&loss, DType::kF64, {1}), comm::ReduceOp::kSum).ok());
  loss /= n;
  const HostBatch whole = concat_batches(all);
  const FullRun single = single_process_run(cfg, whole);
  ASSERT_EQ(single.num_valid, n * r->num_valid);
  expect_matches_single(cfg, single, whole, loss, views_as<double>(model.grads()), "dp" + std::to_string(n));
}
INSTANTIATE_TEST_SUITE_P(BucketBytes, DataParallel, ::testing::Values(size_t(4), size_t(16) << 10));

parallel::OptimizerConfig zero_config() {
  parallel::OptimizerConfig z;
  z.adamw.lr = 1e-2f;
  z.adamw.weight_decay = 0.1f;
  z.zero1 = true;
  z.bucket_bytes = 4 << 10;  // several buckets; tensors cut by shard edges
  return z;
}

std::vector<parallel::OptimParam> optim_params(const std::vector<TensorView>& p, const std::vector<TensorView>& g) {
  std::vector<parallel::OptimParam> out;
  for (size_t i = 0; i < p.size(); ++i) out.push_back({"param" + std::to_string(i), p[i], g[i], true, 1.0});
  return out;
}

// Plain AdamW on the mean gradient, one tensor at a time, with its own m and v.
struct PlainAdamW {
  std::vector<Tensor> p, m, v;
  PlainAdamW(Allocator& alloc, const std::vector<TensorView>& params) {
    for (const TensorView& t : params) {
      p.push_back(Tensor::empty(alloc, t.shape, DType::kF32).value());
      EXPECT_TRUE(copy_(p.back(), t).ok());
      m.push_back(Tensor::zeros(alloc, t.shape, DType::kF32).value());
      v.push_back(Tensor::zeros(alloc, t.shape, DType::kF32).value());
    }
  }
  /// Averages `grads` over dp (all-reduce sum, × 1/dp) into scratch, then steps every tensor.
  void step(const Context& ctx, comm::Communicator& dp, Allocator& alloc, const std::vector<TensorView>& grads,
            const AdamWConfig& cfg, int64_t t) {
    for (size_t i = 0; i < grads.size(); ++i) {
      Tensor g = Tensor::empty(alloc, grads[i].shape, DType::kF32).value();
      ASSERT_TRUE(copy_(g, grads[i]).ok());
      ASSERT_TRUE(dp.all_reduce(g, comm::ReduceOp::kSum).ok());
      ASSERT_TRUE(scale_(ctx, g, 1.0f / float(dp.size())).ok());
      ASSERT_TRUE(adamw_step(ctx, p[i], {}, g, m[i], v[i], cfg, t).ok());
    }
  }
};

// Why bitwise: with 2 ranks every element of the summed gradient is one IEEE addition a + b, which is
// commutative, so the reduce-scatter (ZeRO) and the all-reduce (reference) give the same bits; × 1/2 is exact;
// AdamW is elementwise, so running it on a shard or on the whole tensor computes the same operations per element.
TEST(ZeroOne, FiveStepsOnModelGradientsEqualPlainAdamWBitwise) {
  auto dp = world_comm("dp");
  ASSERT_TRUE(dp);
  if (dp->size() != 2) GTEST_SKIP() << "bitwise with model gradients needs exactly 2 ranks (a + b commutes); "
                                       "ExactGradientsAnyDp covers other sizes";
  const nn::TransformerConfig cfg = tiny_decoder_config();
  Allocator alloc;
  Context ctx = test_ctx(1);
  ctx.allocator = &alloc;
  auto model = nn::DecoderModel::create(ctx, cfg, {}, kNnSeed, alloc).value();
  const parallel::OptimizerConfig zc = zero_config();
  PlainAdamW plain(alloc, model.params());
  auto opt = parallel::DistributedOptimizer::create(ctx, parallel::OptimizerGroups::uniform(dp.get(), nullptr), optim_params(model.params(), model.grads()),
                                                    zc, alloc);
  ASSERT_TRUE(opt.ok()) << opt.status().to_string();
  int64_t total = 0;
  for (const TensorView& p : model.params()) total += p.numel();
  EXPECT_GT(opt->num_buckets(), size_t(1));
  EXPECT_LE(opt->state_elements(), 3 * (total / 2 + int64_t(opt->num_buckets())));  // a half, plus padding
  for (int64_t t = 1; t <= 5; ++t) {
    HostBatch mine = rank_batch(cfg, dp->rank(), uint64_t(10 * t));
    ASSERT_TRUE(model.zero_grads().ok());
    nn::DecoderStash st;
    const Batch b = batch_views(mine);
    ASSERT_TRUE(model.forward(ctx, b, st).ok());
    ASSERT_TRUE(model.backward(ctx, b, st).ok());
    plain.step(ctx, *dp, alloc, model.grads(), zc.adamw, t);
    ASSERT_TRUE(opt->step(ctx, zc.adamw.lr).ok());
    const std::vector<TensorView> params = model.params();
    bool same = true;
    for (size_t i = 0; i < params.size() && same; ++i) {
      const auto eq = bitwise_equal("step " + std::to_string(t) + " " + model.layout()[i].name, params[i], plain.p[i]);
      EXPECT_TRUE(eq);
      same = bool(eq);
    }
    if (!all_ranks_ok(*dp, same)) break;
  }
  // Not vacuous: the parameters moved.
  auto fresh = nn::DecoderModel::create(ctx, cfg, {}, kNnSeed, alloc).value();
  EXPECT_NE(to_f64(fresh.params()[1]), to_f64(model.params()[1]));
}

}  // namespace
}  // namespace vlpar::test
