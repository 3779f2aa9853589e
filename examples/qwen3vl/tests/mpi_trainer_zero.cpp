// The trainer on the library's data-parallel optimizer with ZeRO-1 (mpirun -np 2: TP1×DP2, -np 4: TP2×DP2), two
// micro-batches a step (the second one's backward starts the bucket reductions):
//   - ZeRO-1 and replicated optimizer state train the same loss curve. Bound, derived: the first loss is computed
//     before any update, so it is bitwise the same; the reduced gradients are the same bits (dp = 2: every sum is
//     one commutative addition a + b); only the global norm's fp64 summation order differs (per tensor vs per
//     slice, a few ulps), which can move the clip factor by one f32 ulp; Adam's update m̂/(√v̂ + ε) is invariant
//     to a common gradient scale up to ε, so parameters move by ≲ 1e-7 relative and losses by far less than 1e-6;
//   - a ZeRO-1 run resumed from its own checkpoint equals the uninterrupted run bit for bit;
//   - a ZeRO-1 checkpoint resumes without ZeRO-1 (the state is saved per parameter in both modes).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>

#include "model_test_util.hpp"
#include "mpi/mpi_test_util.hpp"
#include "trainer.hpp"

namespace qwen3vl {
namespace {

TrainConfig config(const std::string& dir, int tp, int steps, bool zero1) {
  return test::mpi_trainer_config(dir, tp, steps,
                                  {"--parallel.zero1=" + std::string(zero1 ? "true" : "false"),
                                   "--parallel.bucket_mb=0.01",  // several buckets
                                   "--training.grad_accum=2", "--checkpoint.interval=2"});
}

struct TrainRun {
  std::unique_ptr<Trainer> trainer;
  TrainSummary summary;
};

TrainRun train(vlpar::comm::Communicator& world, const std::string& dir, int steps, bool zero1) {
  const int tp = world.size() == 4 ? 2 : 1, dp = world.size() / tp;
  auto src = FileBatchSource::create({test::fixture("dense") + "/batch.safetensors",
                                      test::fixture("moe") + "/batch.safetensors"},
                                     test::fixture_mrope_desc(), world.rank() / tp, dp);
  EXPECT_TRUE(src.ok()) << src.status().message();
  auto t = Trainer::create(config(dir, tp, steps, zero1), &world, std::move(src).value());
  EXPECT_TRUE(t.ok()) << t.status().message();
  if (!t.ok()) return {};
  Result<TrainSummary> s = t.value()->run();
  EXPECT_TRUE(s.ok()) << s.status().message();
  return {std::move(t).value(), s.ok() ? s.value() : TrainSummary{}};
}

std::string temp_root(vlpar::comm::Communicator& world, const std::string& name) {
  return vlpar::test::shared_temp_dir(world, name);
}

/// Largest |a − b| / (1 + |b|) over every parameter of the two models (this rank's shards).
double max_param_diff(const Model& a, const Model& b) {
  double worst = 0;
  for (size_t i = 0; i < a.registry().size(); ++i) {
    const float* x = a.registry().value(i).ptr<float>();  // f32 storage
    const float* y = b.registry().value(i).ptr<float>();
    for (int64_t k = 0; k < a.registry().value(i).numel(); ++k)
      worst = std::max(worst, std::abs(double(x[k]) - y[k]) / (1 + std::abs(double(y[k]))));
  }
  return worst;
}

TEST(TrainerZero1, SameLossCurveAsReplicatedState) {
  auto world = vlpar::test::world_comm("world");
  ASSERT_TRUE(world);
  const std::string dir = temp_root(*world, "vlpar_zero_");
  TrainRun rep = train(*world, dir + "/rep", 4, false);
  TrainRun zero = train(*world, dir + "/zero", 4, true);
  ASSERT_TRUE(rep.trainer && zero.trainer);
  ASSERT_EQ(rep.summary.losses.size(), 4u);
  ASSERT_EQ(zero.summary.losses.size(), 4u);
  EXPECT_EQ(zero.summary.losses[0], rep.summary.losses[0]);
  EXPECT_NEAR(zero.summary.grad_norms[0], rep.summary.grad_norms[0], 1e-12 * rep.summary.grad_norms[0]);
  for (size_t s = 1; s < 4; ++s)
    EXPECT_NEAR(zero.summary.losses[s], rep.summary.losses[s], 1e-6 * std::abs(rep.summary.losses[s])) << "step " << s + 1;
  EXPECT_LT(rep.summary.losses[3], rep.summary.losses[0]);  // it trains
  EXPECT_LT(max_param_diff(zero.trainer->model(), rep.trainer->model()), 1e-6);
  ASSERT_TRUE(world->barrier().ok());
  if (world->rank() == 0) std::filesystem::remove_all(dir);
}

TEST(TrainerZero1, ResumeIsBitExactAndCrossesModes) {
  auto world = vlpar::test::world_comm("world");
  ASSERT_TRUE(world);
  const std::string dir = temp_root(*world, "vlpar_zero_resume_");
  TrainRun whole = train(*world, dir + "/whole", 4, true);
  ASSERT_TRUE(whole.trainer);
  // Two steps (checkpoint at step 2), then a fresh trainer resumes them to step 4: bit for bit.
  TrainRun half = train(*world, dir + "/half", 2, true);
  ASSERT_TRUE(half.trainer);
  std::filesystem::path copy = dir + "/cross";
  if (world->rank() == 0) std::filesystem::copy(dir + "/half", copy, std::filesystem::copy_options::recursive);
  ASSERT_TRUE(world->barrier().ok());
  TrainRun resumed = train(*world, dir + "/half", 4, true);
  ASSERT_TRUE(resumed.trainer);
  EXPECT_EQ(resumed.summary.first_step, 2);
  ASSERT_EQ(resumed.summary.losses.size(), 2u);
  EXPECT_EQ(resumed.summary.losses[1], whole.summary.losses[3]);
  EXPECT_EQ(max_param_diff(resumed.trainer->model(), whole.trainer->model()), 0.0);
  // The same step-2 checkpoint resumed with the optimizer state replicated.
  TrainRun cross = train(*world, copy.string(), 4, false);
  ASSERT_TRUE(cross.trainer);
  EXPECT_EQ(cross.summary.first_step, 2);
  EXPECT_LT(max_param_diff(cross.trainer->model(), whole.trainer->model()), 1e-6);
  ASSERT_TRUE(world->barrier().ok());
  if (world->rank() == 0) std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace qwen3vl
