// The trainer saved at one layout and resumed at another (mpirun -np 2: TP2×DP1, -np 4: TP2×DP2 → TP1×DP1 and,
// at np 4, → TP1×DP2):
// every parameter of the resumed single-process model equals, bit for bit, the slice each TP2 rank held at the
// save; a dp change is refused unless checkpoint.allow_layout_change is set (the data position is per dp rank), a
// tp change alone keeps the data position; the resumed run trains on. The same with the vision tower's blocks
// split over the tp pair too (parallel.vision_tp = 2: its qkv thirds, proj, fc1 and fc2 shards resharded to whole),
// whose first losses equal the vision_tp 1 run's within 1e-5. A vision tp group wider than tp (tp 1, vision tp 2)
// follows the tower whole on every rank, reshards to whole, and survives a non-finite micro-batch on one rank.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
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

/// The trainer over the two fixture packs (dense, moe, repeated so that every one of the dp ranks gets some).
Result<std::unique_ptr<Trainer>> make(const TrainConfig& c, vlpar::comm::Communicator* world, int dp_rank, int dp) {
  std::vector<std::string> files;
  for (int i = 0; i < std::max(dp, 2); ++i)
    files.push_back(test::fixture(i % 2 == 0 ? "dense" : "moe") + "/batch.safetensors");
  VLPAR_ASSIGN_OR_RETURN(auto src, FileBatchSource::create(files, test::fixture_mrope_desc(), dp_rank, dp));
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

std::string shared_dir(vlpar::comm::Communicator& world, const char* name) {
  return vlpar::test::shared_temp_dir(world, name);
}

// A vision tp group wider than tp (tp 1, vision tp 2: each pair of data-parallel ranks runs the tower on both
// ranks' images, split over the pair; np 4 has two such pairs) against the tower whole on every rank: losses and
// gradient norms within 1e-5 over 3 steps; its checkpoint (vision blocks split over the pair) loads whole on one
// rank, every parameter equal bit for bit to the slices the pair held.
TEST(TrainerReshard, VisionTpWiderThanTpMatchesTheWholeTowerAndReshards) {
  auto world = vlpar::test::world_comm("world");
  ASSERT_TRUE(world);
  const int rank = world->rank(), dp = world->size();
  const std::string dir = shared_dir(*world, "vlpar_wide_vision_");
  auto wide = make(config(dir + "/wide", 1, 3, false, 2), world.get(), rank, dp);
  auto whole = make(config(dir + "/whole", 1, 3, false, 1), world.get(), rank, dp);
  ASSERT_TRUE(wide.ok()) << wide.status().message();
  ASSERT_TRUE(whole.ok()) << whole.status().message();
  ASSERT_TRUE(wide.value()->model().vision_spans_batches());
  Result<TrainSummary> a = wide.value()->run(), b = whole.value()->run();
  ASSERT_TRUE(a.ok()) << a.status().message();
  ASSERT_TRUE(b.ok()) << b.status().message();
  for (size_t s = 0; s < 3; ++s) {
    EXPECT_NEAR(a.value().losses[s], b.value().losses[s], 1e-5 * b.value().losses[s]) << "step " << s + 1;
    EXPECT_NEAR(a.value().grad_norms[s], b.value().grad_norms[s], 1e-5 * b.value().grad_norms[s]) << "step " << s + 1;
  }
  std::unique_ptr<Trainer> one;
  if (rank == 0) {
    auto t = make(config(dir + "/wide", 1, 3, true), nullptr, 0, 1);
    ASSERT_TRUE(t.ok()) << t.status().message();
    Result<TrainSummary> r = t.value()->run();
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_EQ(r.value().first_step, 3);
    one = std::move(t).value();
  }
  const nn::ParamRegistry& reg = wide.value()->model().registry();
  Allocator alloc;
  int split = 0;
  for (size_t i = 0; i < reg.size(); ++i) {
    const vlpar::ParamShard& p = reg.entry(i).shard;
    split += p.shard_dim >= 0;
    Tensor full = Tensor::zeros(alloc, p.full_shape, vlpar::DType::kF32).value();
    if (rank == 0) {
      ASSERT_TRUE(vlpar::copy_(full, one->model().registry().value(i)).ok());
    }
    ASSERT_TRUE(world->broadcast(full, 0).ok());
    Tensor back = Tensor::empty(alloc, p.local_shape(), vlpar::DType::kF32).value();
    ASSERT_TRUE(vlpar::gather_shard_from_full(back, full, p).ok());
    EXPECT_EQ(std::memcmp(back.view().data, reg.value(i).data, size_t(back.view().nbytes())), 0) << p.name;
  }
  EXPECT_GT(split, 0) << "no vision parameter was split";
  ASSERT_TRUE(world->barrier().ok());
  if (rank == 0) std::filesystem::remove_all(dir);
}

// A wide vision group whose rank 0 gets a micro-batch of NaN pixels (the MoE model: its router logits go NaN, a
// kNonFinite forward error on that rank only): rank 0 still meets its peer in the vision backward's exchange
// (Model::release_vision) and the later micro-batches', so nobody waits; the step is skipped everywhere and the
// next one trains.
TEST(TrainerReshard, WideVisionGroupSurvivesANonFiniteMicroBatch) {
  auto world = vlpar::test::world_comm("world");
  ASSERT_TRUE(world);
  const int rank = world->rank(), dp = world->size();
  const std::string dir = shared_dir(*world, "vlpar_wide_nan_");
  if (rank == 0) {
    std::filesystem::create_directories(dir);
    test::write_nan_pixel_batch(dir + "/nan.safetensors");
  }
  ASSERT_TRUE(world->barrier().ok());
  // Round-robin over the data ranks, two micro-batches per step: rank 0's first step has the NaN pack first; the
  // skipped step is retried with the next packs (8 per rank: the NaN pack does not come round again).
  std::vector<std::string> files(size_t(8 * dp), test::fixture("dense") + "/batch.safetensors");
  files[0] = dir + "/nan.safetensors";
  TrainConfig c = test::mpi_trainer_config(dir, 1, 2, {"--parallel.vision_tp=2", "--training.grad_accum=2",
                                                       "--model.config_json=" + test::fixture("moe") + "/config.json"});
  auto src = FileBatchSource::create(files, test::fixture_mrope_desc(), rank, dp);
  ASSERT_TRUE(src.ok()) << src.status().message();
  auto t = Trainer::create(c, world.get(), std::move(src).value());
  ASSERT_TRUE(t.ok()) << t.status().message();
  Result<TrainSummary> r = t.value()->run();
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r.value().skipped_steps, 1);
  ASSERT_EQ(r.value().losses.size(), 3u);  // the skipped attempt (NaN), then steps 1 and 2
  EXPECT_TRUE(std::isnan(r.value().losses[0]));
  EXPECT_TRUE(std::isfinite(r.value().losses[1]) && std::isfinite(r.value().losses[2]));
  ASSERT_TRUE(world->barrier().ok());
  if (rank == 0) std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace qwen3vl
