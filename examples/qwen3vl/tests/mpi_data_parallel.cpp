// The trainer at data parallelism over the world (mpirun -np 2 and 4) fed by the data pipeline: each rank reads a
// disjoint share of a synthetic VQA dataset, and with data.balance_vision each step's packs are re-dealt over the
// ranks by vision cost (pack_exchange.hpp). Balancing only moves packs between ranks, so every step trains on the
// same global set of samples: the global loss of the first step (before any update) must equal the unbalanced
// run's up to summation order, and the later steps stay within float noise of it.
// Tolerance: the loss is a token-weighted sum of the same per-pack values added in another order (a few u32
// relative) → 1e-6; after two AdamW steps on gradients summed in another order → 1e-4.
#include <gtest/gtest.h>

#include <cmath>

#include "data_source.hpp"
#include "mpi/mpi_test_util.hpp"
#include "trainer.hpp"
#include "vqa_dataset.hpp"

namespace qwen3vl {
namespace {

Result<TrainSummary> train(vlpar::comm::Communicator& world, const std::string& data, bool balance) {
  // One checkpoint root for all ranks: rank 0's pid.
  int64_t pid = ::getpid();
  VLPAR_RETURN_IF_ERROR(world.broadcast(TensorView(&pid, vlpar::DType::kI64, vlpar::Shape{1}), 0));
  const std::string dir = (std::filesystem::temp_directory_path() /
                           ("vlpar_dp_" + std::to_string(pid) + (balance ? "_b" : "_u"))).string();
  if (world.rank() == 0) std::filesystem::remove_all(dir);
  VLPAR_RETURN_IF_ERROR(world.barrier());
  std::vector<std::string> o = {"--model.config_json=" + test::kDemoModel, "--data.train=" + data,
                                "--data.tokenizer=" + test::kTokenizer, "--data.min_pixels=4096",
                                "--data.max_pixels=25600", "--data.token_budget=384", "--data.workers=1",
                                "--data.balance_vision=" + std::string(balance ? "true" : "false"),
                                "--training.steps=3", "--training.grad_accum=2", "--training.threads=1",
                                "--schedule.warmup_steps=1", "--checkpoint.dir=" + dir + "/ckpt",
                                "--metrics.dir=" + dir, "--metrics.peak_gflops=100", "--metrics.tensorboard=false",
                                "--metrics.trace=false"};
  VLPAR_ASSIGN_OR_RETURN(TrainConfig c, parse_train_config("", "mpi test", o));
  VLPAR_ASSIGN_OR_RETURN(std::unique_ptr<BatchSource> src, make_dataset_source(c, world.rank(), world.size()));
  const BatchSource* source = src.get();  // owned by the trainer, which outlives the check below
  VLPAR_ASSIGN_OR_RETURN(std::unique_ptr<Trainer> t, Trainer::create(c, &world, std::move(src)));
  Result<TrainSummary> r = t->run();
  // With balancing, the summary reports the exchange; packs really moved on some rank.
  if (r.ok() && balance) {
    const std::string s = source->summary();
    EXPECT_NE(s.find("vision balance over 3 steps"), std::string::npos) << s;
    int64_t moved = s.find(" sent 0 and received 0 ") == std::string::npos ? 1 : 0;
    VLPAR_RETURN_IF_ERROR(world.all_reduce(TensorView(&moved, vlpar::DType::kI64, vlpar::Shape{1}),
                                           vlpar::comm::ReduceOp::kSum));
    EXPECT_GT(moved, 0) << "no rank sent or received a pack";
  }
  VLPAR_RETURN_IF_ERROR(world.barrier());
  if (world.rank() == 0) std::filesystem::remove_all(dir);
  return r;
}

TEST(DataParallelTrainer, VisionBalancingTrainsOnTheSameSamples) {
  auto world = vlpar::test::world_comm("world");
  ASSERT_TRUE(world);
  // Every rank builds the same bytes in its own directory (shard names are relative: the same stream).
  // 119 + the corrupt one = 3 shards of 40: every rank's share holds valid samples at np 2 and 4.
  const std::string data = test::make_vqa_dataset("dp" + std::to_string(world->rank()), 119, 4);
  Result<TrainSummary> unbalanced = train(*world, data, false);
  ASSERT_TRUE(unbalanced.ok()) << unbalanced.status().message();
  Result<TrainSummary> balanced = train(*world, data, true);
  ASSERT_TRUE(balanced.ok()) << balanced.status().message();
  ASSERT_EQ(balanced.value().losses.size(), 3u);
  const std::vector<double>& a = unbalanced.value().losses;
  const std::vector<double>& b = balanced.value().losses;
  EXPECT_NEAR(b[0], a[0], 1e-6 * std::abs(a[0]));
  for (size_t i = 1; i < 3; ++i) EXPECT_NEAR(b[i], a[i], 1e-4 * std::abs(a[i])) << "step " << i + 1;
  std::filesystem::remove_all(data);
}

}  // namespace
}  // namespace qwen3vl
