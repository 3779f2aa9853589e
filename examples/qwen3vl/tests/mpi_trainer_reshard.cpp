// The trainer saved at one layout and resumed at another (mpirun -np 2: TP2×DP1, -np 4: TP2×DP2 → TP1×DP1 and,
// at np 4, → TP1×DP2):
// every parameter of the resumed single-process model equals, bit for bit, the slice each TP2 rank held at the
// save; a dp change is refused unless checkpoint.allow_layout_change is set (the data position is per dp rank), a
// tp change alone keeps the data position; the resumed run trains on. The same with the vision tower's blocks
// split over the tp pair too (parallel.vision_tp = 2: its qkv thirds, proj, fc1 and fc2 shards resharded to whole),
// whose first losses equal the vision_tp 1 run's within 1e-5.
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

TrainConfig config(const std::string& dir, int tp, int steps, bool allow_layout_change, int vision_tp = 1) {
  return test::mpi_trainer_config(
      dir, tp, steps, {"--checkpoint.allow_layout_change=" + std::string(allow_layout_change ? "true" : "false"),
                       "--parallel.vision_tp=" + std::to_string(vision_tp)});
}

Result<std::unique_ptr<Trainer>> make(const TrainConfig& c, vlpar::comm::Communicator* world, int dp_rank, int dp) {
  VLPAR_ASSIGN_OR_RETURN(auto src, FileBatchSource::create({test::fixture("dense") + "/batch.safetensors",
                                                            test::fixture("moe") + "/batch.safetensors"},
                                                           test::fixture_mrope_desc(), dp_rank, dp));
  return Trainer::create(c, world, std::move(src));
}

void check_reshard(int vision_tp) {
  auto world = vlpar::test::world_comm("world");
  ASSERT_TRUE(world);
  const int rank = world->rank(), dp = world->size() / 2;
  int64_t pid = ::getpid();
  ASSERT_TRUE(world->broadcast(TensorView(&pid, vlpar::DType::kI64, vlpar::Shape{1}), 0).ok());
  const std::string dir = (std::filesystem::temp_directory_path() / ("vlpar_reshard_" + std::to_string(pid))).string();
  if (rank == 0) std::filesystem::remove_all(dir);
  ASSERT_TRUE(world->barrier().ok());

  // 1. Two steps at TP2 × DP(world/2), checkpoint at step 2.
  auto tp2 = make(config(dir, 2, 2, false, vision_tp), world.get(), rank / 2, dp);
  ASSERT_TRUE(tp2.ok()) << tp2.status().message();
  Result<TrainSummary> r2 = tp2.value()->run();
  ASSERT_TRUE(r2.ok()) << r2.status().message();
  if (vision_tp > 1) {  // the same two steps with the tower whole on each rank
    auto whole = make(config(dir + "/whole", 2, 2, false), world.get(), rank / 2, dp);
    ASSERT_TRUE(whole.ok()) << whole.status().message();
    Result<TrainSummary> rw = whole.value()->run();
    ASSERT_TRUE(rw.ok()) << rw.status().message();
    for (size_t s = 0; s < 2; ++s)
      EXPECT_NEAR(r2.value().losses[s], rw.value().losses[s], 1e-5 * rw.value().losses[s]) << "step " << s + 1;
  }

  // 2. Rank 0 alone resumes at TP1 × DP1 (no steps left to run: the model is exactly the loaded one).
  std::unique_ptr<Trainer> tp1;
  if (rank == 0) {
    if (dp > 1) {  // a dp change needs the explicit opt-in
      auto refused = make(config(dir, 1, 2, false), nullptr, 0, 1);
      ASSERT_TRUE(refused.ok());
      Result<TrainSummary> e = refused.value()->run();
      ASSERT_FALSE(e.ok());
      EXPECT_NE(e.status().message().find("allow_layout_change"), std::string::npos) << e.status().message();
    }
    auto t = make(config(dir, 1, 2, dp > 1), nullptr, 0, 1);
    ASSERT_TRUE(t.ok()) << t.status().message();
    Result<TrainSummary> r1 = t.value()->run();
    ASSERT_TRUE(r1.ok()) << r1.status().message();
    EXPECT_EQ(r1.value().first_step, 2);
    EXPECT_EQ(r1.value().steps_done, 0);
    tp1 = std::move(t).value();
  }
  // 3. Each TP2 rank's shards equal the slices of rank 0's TP1 parameters (broadcast in registry order).
  const nn::ParamRegistry& reg = tp2.value()->model().registry();
  Allocator alloc;
  for (size_t i = 0; i < reg.size(); ++i) {
    const vlpar::ParamShard& p = reg.entry(i).shard;
    Tensor full = Tensor::zeros(alloc, p.full_shape, vlpar::DType::kF32).value();
    if (rank == 0) {
      const nn::ParamRegistry& r1 = tp1->model().registry();
      ASSERT_EQ(r1.entry(i).shard.name, p.name);
      ASSERT_TRUE(vlpar::copy_(full, r1.value(i)).ok());
    }
    ASSERT_TRUE(world->broadcast(full, 0).ok());
    Tensor back = Tensor::empty(alloc, p.local_shape(), vlpar::DType::kF32).value();
    ASSERT_TRUE(vlpar::gather_shard_from_full(back, full, p).ok());
    EXPECT_EQ(std::memcmp(back.view().data, reg.value(i).data, size_t(back.view().nbytes())), 0)
        << p.name << " differs after the TP2 -> TP1 resume";
  }
  // 4. np 4: ranks 0 and 1 resume at TP1 × DP2 (a tp change only): dp rank d continues from the data position the
  // saving run's dp rank d held (its first tp rank, world rank 2d); reading another share's state is an error.
  if (world->size() == 4) {
    auto half = world->split(rank < 2 ? 0 : 1, rank, vlpar::test::test_options("half"));
    ASSERT_TRUE(half.ok()) << half.status().message();
    if (rank < 2) {
      auto t = make(config(dir, 1, 2, false), half.value().get(), rank, 2);
      ASSERT_TRUE(t.ok()) << t.status().message();
      Result<TrainSummary> r = t.value()->run();
      ASSERT_TRUE(r.ok()) << r.status().message();
      EXPECT_EQ(r.value().first_step, 2);
    }
  }
  ASSERT_TRUE(world->barrier().ok());
  // 5. The resumed run trains on.
  if (rank == 0) {
    auto t = make(config(dir, 1, 3, dp > 1), nullptr, 0, 1);
    ASSERT_TRUE(t.ok());
    Result<TrainSummary> r3 = t.value()->run();
    ASSERT_TRUE(r3.ok()) << r3.status().message();
    ASSERT_EQ(r3.value().losses.size(), 1u);
    EXPECT_TRUE(std::isfinite(r3.value().losses[0]));
  }
  ASSERT_TRUE(world->barrier().ok());
  if (rank == 0) std::filesystem::remove_all(dir);
}

TEST(TrainerReshard, Tp2CheckpointResumesAtTp1) { check_reshard(1); }
TEST(TrainerReshard, Tp2WithVisionTp2CheckpointResumesAtTp1) { check_reshard(2); }

}  // namespace
}  // namespace qwen3vl
