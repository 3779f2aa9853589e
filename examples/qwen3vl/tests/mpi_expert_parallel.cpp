// The trainer with expert parallelism (parallel.ep = world, folded over data parallelism) under mpirun -np 2 and 4,
// on the MoE fixture model (8 experts: 4 or 2 per rank), against data parallelism alone (every rank all experts):
//   - the first step's loss is bitwise equal (the forward moves rows, it does not change their arithmetic), later
//     losses and every gradient norm within 1e-5 relative (an expert's weight gradient is one GEMM over every
//     rank's rows instead of per-rank GEMMs summed by the dp all-reduce: fp32 reassociation), and every expert
//     weight a rank holds after 3 steps is within 1e-4 of the data-parallel run's;
//   - a checkpoint written at EP = np loads at EP = 1 (same dp): each rank's expert slices equal the EP run's bit
//     for bit (each expert shard written once, by its expert-dp rank 0);
//   - ep with tp > 1 is a named config error.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include "model_test_util.hpp"
#include "mpi/mpi_test_util.hpp"
#include "trainer.hpp"

namespace qwen3vl {
namespace {

namespace fs = std::filesystem;
using vlpar::comm::Communicator;

TrainConfig config(const std::string& dir, int steps, std::vector<std::string> extra) {
  extra.push_back("--model.config_json=" + test::fixture("moe") + "/config.json");
  extra.push_back("--training.grad_accum=2");
  return test::mpi_trainer_config(dir, 1, steps, extra);
}

Result<std::unique_ptr<Trainer>> make(const TrainConfig& c, Communicator& world) {
  VLPAR_ASSIGN_OR_RETURN(const DataRank d, data_rank_of(c, world.rank(), world.size()));
  const std::string dense = test::fixture("dense") + "/batch.safetensors";
  const std::string moe = test::fixture("moe") + "/batch.safetensors";
  VLPAR_ASSIGN_OR_RETURN(auto src, FileBatchSource::create({dense, moe, moe, dense}, test::fixture_mrope_desc(), d.rank,
                                                           d.size));
  return Trainer::create(c, &world, std::move(src));
}

std::unique_ptr<Trainer> train(const TrainConfig& c, Communicator& world, TrainSummary& out) {
  auto t = make(c, world);
  EXPECT_TRUE(t.ok()) << t.status().message();
  if (!t.ok()) return nullptr;
  Result<TrainSummary> r = t.value()->run();
  EXPECT_TRUE(r.ok()) << r.status().message();
  if (r.ok()) out = r.value();
  return std::move(t).value();
}

std::string shared_dir(Communicator& world) {
  int64_t pid = ::getpid();
  EXPECT_TRUE(world.broadcast(TensorView(&pid, vlpar::DType::kI64, vlpar::Shape{1}), 0).ok());
  const std::string dir = (fs::temp_directory_path() / ("vlpar_ep_" + std::to_string(pid))).string();
  if (world.rank() == 0) fs::remove_all(dir);
  EXPECT_TRUE(world.barrier().ok());
  return dir;
}

/// Each expert tensor `mine` holds (its slice of the full [E, …]) against the same rows of `whole`.
void compare_experts(const Model& mine, const Model& whole, double tol) {
  const nn::ParamRegistry& reg = mine.registry();
  int compared = 0;
  for (size_t i = 0; i < reg.size(); ++i) {
    const nn::ParamShard& p = reg.entry(i).shard;
    if (p.replica != nn::ReplicaGroup::kExpert) continue;
    const auto w = whole.registry().find(p.name);
    ASSERT_TRUE(w.has_value()) << p.name;
    ASSERT_EQ(p.pieces.size(), 1u) << p.name;
    const TensorView full = whole.registry().value(*w);
    const TensorView want = full.slice(0, p.pieces[0].full_begin, p.pieces[0].full_begin + p.pieces[0].length);
    const TensorView got = reg.value(i);
    ASSERT_EQ(got.numel(), want.numel()) << p.name;
    const float* a = got.ptr<float>();
    const float* b = want.ptr<float>();
    for (int64_t k = 0; k < got.numel(); ++k) {
      if (tol == 0) {
        ASSERT_EQ(std::memcmp(&a[k], &b[k], sizeof(float)), 0) << p.name << " element " << k;
      } else {
        ASSERT_NEAR(a[k], b[k], tol * (1 + std::abs(b[k]))) << p.name << " element " << k;
      }
    }
    ++compared;
  }
  EXPECT_GT(compared, 0) << "no expert tensors";
}

TEST(TrainerExpertParallel, MatchesDataParallelAndReshardsToEp1) {
  auto world = vlpar::test::world_comm("world");
  ASSERT_TRUE(world);
  const int P = world->size();
  const std::string dir = shared_dir(*world);
  TrainSummary dp, ep;
  const auto dp_run = train(config(dir + "/dp", 3, {}), *world, dp);
  const auto ep_run = train(config(dir + "/ep", 3, {"--parallel.ep=" + std::to_string(P)}), *world, ep);
  ASSERT_TRUE(dp_run && ep_run);
  ASSERT_EQ(dp.losses.size(), 3u);
  ASSERT_EQ(ep.losses.size(), 3u);
  EXPECT_EQ(ep.losses[0], dp.losses[0]) << "the first forward differs";
  for (size_t s = 0; s < 3; ++s) {
    EXPECT_NEAR(ep.losses[s], dp.losses[s], 1e-5 * dp.losses[s]) << "step " << s + 1;
    EXPECT_NEAR(ep.grad_norms[s], dp.grad_norms[s], 1e-5 * dp.grad_norms[s]) << "step " << s + 1;
  }
  compare_experts(ep_run->model(), dp_run->model(), 1e-4);
  // The EP checkpoint (step 3) loads at EP = 1: every rank's slices of the whole experts are the EP run's.
  TrainSummary none;
  const auto back = train(config(dir + "/ep", 3, {}), *world, none);
  ASSERT_TRUE(back);
  EXPECT_EQ(none.first_step, 3);
  EXPECT_EQ(none.steps_done, 0);
  compare_experts(ep_run->model(), back->model(), 0.0);
  ASSERT_TRUE(world->barrier().ok());
  if (world->rank() == 0) fs::remove_all(dir);
}

TEST(TrainerExpertParallel, EpWithTpIsANamedConfigError) {
  const Result<TrainConfig> c = parse_train_config("", "test", std::vector<std::string>{"--parallel.ep=2",
                                                                                        "--parallel.tp=2"});
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("parallel.ep = 2 with parallel.tp = 2: expert parallelism with tensor "
                                      "parallelism needs sequence parallelism"),
            std::string::npos) << c.status().message();
}

}  // namespace
}  // namespace qwen3vl
