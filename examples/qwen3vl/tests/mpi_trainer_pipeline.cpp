// The trainer with pipeline parallelism (parallel.pp = world, pipeline_runner.hpp) under mpirun -np 2 and 4, on the
// fixture models with 2·np + 1 decoder layers (stage 0 keeps the two deepstack layers), the two fixture packs
// cycled as 4 micro-batches of unequal size per step:
//   - without clipping, every step's loss and every parameter after training equal a one-process run's bit for bit
//     (each stage's gradients are the one-process ones bitwise, AdamW is elementwise; only the gradient norm is
//     summed in another order: within 1e-12 relative), for 1F1B and interleaved (vpp 2) on the dense model and
//     1F1B on the MoE model (its router statistics cross the stages), also with the router z-loss, the
//     sequence-level aux and the aux-loss-free expert bias, and the zero-bubble ZB-H1 (dense) and ZB-V (MoE; rank 0
//     holds the first and the last stage);
//   - a tied embedding (held by the first and the last stage) trains with clipping: the two copies stay bitwise
//     identical and the losses and gradient norms follow the one-process run within 1e-5 relative (the tied
//     gradient and the norm are sums in another order);
//   - a checkpoint written at PP=2 resumes at PP=1 (and at np 4 at PP=4): the continued steps equal an
//     uninterrupted one-process run bit for bit;
//   - np 4: PP=2 × DP=2 (ZeRO-1, full recompute), PP=2 × TP=2 and (MoE) PP=2 × TP=2 with sequence parallelism
//     and ep 2 follow one process on the same global batch within 1e-5 relative;
//   - the held-out loss (training.eval_interval: the forward-only schedule on the training placement) equals the
//     one-process one bit for bit in those runs;
//   - only pipeline rank 0 is given data sources (as qwen3vl-train does): the other stages train on what it sends
//     (data::share_packs_without_vision);
//   - the metrics line carries pp_bubble_pct; rank 0's trace has every pipeline rank's actions; a layout string
//     with the wrong stage count is a named error.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "model_test_util.hpp"
#include "mpi/mpi_test_util.hpp"
#include "trainer.hpp"

namespace qwen3vl {
namespace {

namespace fs = std::filesystem;
using vlpar::comm::Communicator;

/// A scratch directory shared by the ranks (rank 0's pid), removed at the end.
struct SharedDir {
  std::string path;
  Communicator* world;
  explicit SharedDir(Communicator& w, const std::string& what) : world(&w) {
    int64_t pid = ::getpid();
    EXPECT_TRUE(w.broadcast(TensorView(&pid, vlpar::DType::kI64, vlpar::Shape{1}), 0).ok());
    path = (fs::temp_directory_path() / ("vlpar_pp_" + what + "_" + std::to_string(pid))).string();
    if (w.rank() == 0) {
      fs::remove_all(path);
      fs::create_directories(path);
    }
    EXPECT_TRUE(w.barrier().ok());
  }
  ~SharedDir() {
    (void)world->barrier();
    if (world->rank() == 0) fs::remove_all(path);
  }
};

/// The fixture's config.json with `layers` decoder layers (and tied embeddings when asked), written by rank 0 to
/// the shared dir; every rank gets its path after a barrier.
std::string write_config(Communicator& world, const std::string& fixture, const std::string& dir, int layers,
                         bool tied) {
  const std::string path = dir + "/" + fixture + (tied ? "_tied" : "") + ".json";
  if (world.rank() == 0) {
    std::ifstream in(test::fixture(fixture) + "/config.json");
    nlohmann::json j = nlohmann::json::parse(in);
    j["text_config"]["num_hidden_layers"] = layers;
    j["text_config"]["tie_word_embeddings"] = tied;
    j["tie_word_embeddings"] = tied;
    std::ofstream(path) << j.dump();
  }
  EXPECT_TRUE(world.barrier().ok());
  return path;
}

TrainConfig config(const std::string& model_json, const std::string& dir, int steps,
                   std::vector<std::string> extra) {
  extra.push_back("--model.config_json=" + model_json);
  extra.push_back("--training.grad_accum=4");
  return test::mpi_trainer_config(dir, 1, steps, extra);
}

Result<std::unique_ptr<Trainer>> make(const TrainConfig& c, Communicator* world, std::vector<std::string> files = {}) {
  VLPAR_ASSIGN_OR_RETURN(const DataRank d, data_rank_of(c, world ? world->rank() : 0, world ? world->size() : 1));
  if (files.empty())
    files = {test::fixture("dense") + "/batch.safetensors", test::fixture("moe") + "/batch.safetensors"};
  // As qwen3vl-train: only the ranks that read data get sources (pipeline rank 0; the others receive).
  std::unique_ptr<BatchSource> src, held_out;
  if (d.loads) {
    VLPAR_ASSIGN_OR_RETURN(src, FileBatchSource::create(files, test::fixture_mrope_desc(), d.rank, d.size));
    VLPAR_ASSIGN_OR_RETURN(held_out, FileBatchSource::create(files, test::fixture_mrope_desc(), d.rank, d.size));
  }
  return Trainer::create(c, world, std::move(src), std::move(held_out));
}

/// Trains `c` over `world` (null: one process) on `files` (default: the two fixture packs); the summary, or a
/// failed test.
TrainSummary train(const TrainConfig& c, Communicator* world, std::unique_ptr<Trainer>* keep = nullptr,
                   const std::vector<std::string>& files = {}) {
  auto t = make(c, world, files);
  EXPECT_TRUE(t.ok()) << t.status().message();
  if (!t.ok()) return {};
  Result<TrainSummary> r = t.value()->run();
  EXPECT_TRUE(r.ok()) << r.status().message();
  if (keep) *keep = std::move(t).value();
  return r.ok() ? r.value() : TrainSummary{};
}

/// Every parameter this rank holds equals the one-process model's of the same name, bit for bit.
void expect_same_parameters(const Model& mine, const Model& ref) {
  const nn::ParamRegistry& reg = mine.registry();
  for (size_t i = 0; i < reg.size(); ++i) {
    const auto w = ref.registry().find(reg.name(i));
    ASSERT_TRUE(w.has_value()) << reg.name(i);
    const TensorView a = reg.value(i), b = ref.registry().value(*w);
    EXPECT_EQ(std::memcmp(a.data, b.data, size_t(a.nbytes())), 0) << reg.name(i) << " differs from one process";
  }
}

void check_matches_one_process(const std::string& fixture, const std::vector<std::string>& schedule,
                               const std::vector<std::string>& extra = {}) {
  auto world = vlpar::test::world_comm("world");
  ASSERT_TRUE(world);
  const int P = world->size();
  SharedDir dir(*world, fixture);
  const std::string json = write_config(*world, fixture, dir.path, 2 * P + 1, false);
  std::vector<std::string> common = {"--training.max_grad_norm=0", "--training.eval_interval=2",
                                     "--training.eval_batches=3"};
  common.insert(common.end(), extra.begin(), extra.end());
  // One process (every rank runs it, in its own directory).
  const std::string own = dir.path + "/r" + std::to_string(world->rank());
  std::unique_ptr<Trainer> ref;
  const TrainSummary one = train(config(json, own, 3, common), nullptr, &ref);
  // The pipeline over every rank.
  std::vector<std::string> pp = common;
  pp.push_back("--parallel.pp=" + std::to_string(P));
  pp.insert(pp.end(), schedule.begin(), schedule.end());
  std::unique_ptr<Trainer> mine;
  const TrainSummary got = train(config(json, dir.path + "/pp", 3, pp), world.get(), &mine);
  ASSERT_EQ(got.losses.size(), 3u);
  ASSERT_EQ(one.losses.size(), 3u);
  for (size_t s = 0; s < 3; ++s) {
    EXPECT_EQ(got.losses[s], one.losses[s]) << "step " << s + 1;
    EXPECT_NEAR(got.grad_norms[s], one.grad_norms[s], 1e-12 * one.grad_norms[s]) << "step " << s + 1;
  }
  expect_same_parameters(mine->model(), ref->model());
  // The held-out loss through the forward-only schedule: the one-process value bit for bit (the same forward per
  // micro-batch, summed in the same order on the last stage).
  EXPECT_EQ(got.eval_losses, one.eval_losses);
  EXPECT_EQ(got.eval_losses.size(), 2u);
  // The metrics line of the pipeline run has the bubble.
  if (world->rank() == 0) {
    std::ifstream in(dir.path + "/pp/metrics.jsonl");
    std::string line;
    ASSERT_TRUE(std::getline(in, line));
    const nlohmann::json m = nlohmann::json::parse(line);
    ASSERT_TRUE(m.contains("pp_bubble_pct")) << line;
    EXPECT_GE(m["pp_bubble_pct"].get<double>(), 0.0);
    EXPECT_LT(m["pp_bubble_pct"].get<double>(), 100.0);
  }
  // With the trace on, rank 0's trace.json shows every other pipeline rank's compute actions on a track of its own:
  // at least F and B (or I and W) of each of the 4 micro-batches in each of the 3 steps, named by their stage.
  if (world->rank() == 0 && std::find(extra.begin(), extra.end(), "--metrics.trace=true") != extra.end()) {
    std::ifstream in(dir.path + "/pp/trace.json");
    const nlohmann::json trace = nlohmann::json::parse(in);
    std::map<int64_t, std::string> track_of;  // tid -> track name
    for (const nlohmann::json& e : trace["traceEvents"])
      if (e["ph"] == "M" && e["name"] == "thread_name") track_of[e["tid"].get<int64_t>()] = e["args"]["name"];
    std::map<std::string, int> actions;  // track -> compute actions on it
    for (const nlohmann::json& e : trace["traceEvents"])
      if (e["ph"] == "X" && e["cat"] == "pipeline" && e["name"] != "wait")
        ++actions[track_of[e["tid"].get<int64_t>()]];
    for (int r = 1; r < P; ++r) EXPECT_GE(actions[fmt::format("pipeline rank {}", r)], 2 * 4 * 3) << "rank " << r;
  }
}

TEST(TrainerPipeline, Dense1F1BEqualsOneProcessBitwise) {
  check_matches_one_process("dense", {}, {"--metrics.trace=true"});
}
TEST(TrainerPipeline, DenseInterleavedEqualsOneProcessBitwise) {
  check_matches_one_process("dense", {"--parallel.vpp=2", "--parallel.schedule=interleaved"});
}
TEST(TrainerPipeline, Moe1F1BEqualsOneProcessBitwise) { check_matches_one_process("moe", {}); }
// The zero-bubble schedules run the stages' split backward (I, then W from the queued weight-gradient work).
TEST(TrainerPipeline, DenseZeroBubbleH1EqualsOneProcessBitwise) {
  check_matches_one_process("dense", {"--parallel.schedule=zb_h1"});
}
TEST(TrainerPipeline, MoeZeroBubbleVEqualsOneProcessBitwise) {
  check_matches_one_process("moe", {"--parallel.vpp=2", "--parallel.schedule=zb_v"});
}
// The router z-loss and the sequence-level aux travel in the stage boundary's statistics, the expert loads are
// gathered from the stages holding the layers, the expert biases (checked with every parameter) move as in one
// process.
TEST(TrainerPipeline, MoeWithRouterLossesAndExpertBiasEqualsOneProcessBitwise) {
  check_matches_one_process("moe", {}, {"--moe.z_loss_coef=0.01", "--moe.seq_aux_coef=0.01",
                                        "--moe.expert_bias_rate=0.01"});
}

TEST(TrainerPipeline, TiedEmbeddingCopiesStayIdentical) {
  auto world = vlpar::test::world_comm("world");
  ASSERT_TRUE(world);
  const int P = world->size(), rank = world->rank();
  SharedDir dir(*world, "tied");
  const std::string json = write_config(*world, "dense", dir.path, 2 * P + 1, true);
  const TrainSummary one = train(config(json, dir.path + "/r" + std::to_string(rank), 3, {}), nullptr);
  std::unique_ptr<Trainer> mine;
  const TrainSummary got =
      train(config(json, dir.path + "/pp", 3, {"--parallel.pp=" + std::to_string(P)}), world.get(), &mine);
  ASSERT_EQ(got.losses.size(), 3u);
  ASSERT_EQ(one.losses.size(), 3u);
  EXPECT_GT(one.grad_norms[0], 1.0) << "clipping should be active (max_grad_norm 1)";
  for (size_t s = 0; s < 3; ++s) {
    EXPECT_NEAR(got.losses[s], one.losses[s], 1e-5 * one.losses[s]) << "step " << s + 1;
    EXPECT_NEAR(got.grad_norms[s], one.grad_norms[s], 1e-5 * one.grad_norms[s]) << "step " << s + 1;
  }
  // The first and the last pipeline rank hold embed_tokens: the same bits.
  const nn::ParamRegistry& reg = mine->model().registry();
  const auto e = reg.find("model.language_model.embed_tokens.weight");
  ASSERT_EQ(e.has_value(), rank == 0 || rank == P - 1);
  if (!e) return;
  const TensorView v = reg.value(*e);
  Allocator alloc;
  Tensor other = Tensor::empty(alloc, v.shape, vlpar::DType::kF32).value();
  const int peer = rank == 0 ? P - 1 : 0;
  auto recv = world->irecv(other, peer, 7);
  auto send = world->isend(v, peer, 7);
  ASSERT_TRUE(recv.ok() && send.ok());
  ASSERT_TRUE(send.value()->wait().ok() && recv.value()->wait().ok());
  EXPECT_EQ(std::memcmp(other.view().data, v.data, size_t(v.nbytes())), 0) << "the two embed_tokens copies differ";
}

/// PP=2 (ranks 0, 1) trains 2 steps and checkpoints; rank 0 resumes at PP=1 and, at np 4, all ranks at PP=4, for
/// 2 more steps: both equal 4 uninterrupted one-process steps bit for bit.
TEST(TrainerPipeline, CheckpointResumesAtOtherPipelineSizes) {
  auto world = vlpar::test::world_comm("world");
  ASSERT_TRUE(world);
  const int P = world->size(), rank = world->rank();
  SharedDir dir(*world, "reshard");
  const std::string json = write_config(*world, "dense", dir.path, 2 * P + 1, false);
  const std::vector<std::string> common = {"--training.max_grad_norm=0"};
  const TrainSummary one = train(config(json, dir.path + "/r" + std::to_string(rank), 4, common), nullptr);
  ASSERT_EQ(one.losses.size(), 4u);
  auto pair = world->split(rank < 2 ? 0 : 1, rank, vlpar::test::test_options("pair"));
  ASSERT_TRUE(pair.ok()) << pair.status().message();
  std::vector<std::string> pp2 = common;
  pp2.push_back("--parallel.pp=2");
  const std::string saved = dir.path + "/pp2";
  if (rank < 2) {
    const TrainSummary two = train(config(json, saved, 2, pp2), pair.value().get());
    ASSERT_EQ(two.losses.size(), 2u);
    EXPECT_EQ(two.losses[0], one.losses[0]);
    EXPECT_EQ(two.losses[1], one.losses[1]);
  }
  ASSERT_TRUE(world->barrier().ok());
  // Copy the checkpoint so that each resumed run continues from step 2 in its own directory.
  const auto resume_in = [&](const std::string& to) {
    if (rank == 0) fs::copy(saved, to, fs::copy_options::recursive);
    ASSERT_TRUE(world->barrier().ok());
  };
  resume_in(dir.path + "/pp1");
  if (rank == 0) {
    const TrainSummary r = train(config(json, dir.path + "/pp1", 4, common), nullptr);
    EXPECT_EQ(r.first_step, 2);
    ASSERT_EQ(r.losses.size(), 2u);
    EXPECT_EQ(r.losses[0], one.losses[2]);
    EXPECT_EQ(r.losses[1], one.losses[3]);
  }
  if (P == 4) {
    resume_in(dir.path + "/pp4");
    std::vector<std::string> pp4 = common;
    pp4.push_back("--parallel.pp=4");
    const TrainSummary r = train(config(json, dir.path + "/pp4", 4, pp4), world.get());
    EXPECT_EQ(r.first_step, 2);
    ASSERT_EQ(r.losses.size(), 2u);
    EXPECT_EQ(r.losses[0], one.losses[2]);
    EXPECT_EQ(r.losses[1], one.losses[3]);
  }
}

/// np 4: PP=2 composed with DP=2 (ZeRO-1, full recompute; and with the vision tower split over both dp ranks of
/// stage 0, vision tp 2 > tp 1) and with TP=2, with clipping, against one process training on the same global batch
/// (DP: dp rank 0 reads the dense pack, rank 1 the MoE pack, 4 micro-batches each; one process reads both, 8
/// micro-batches): the same sums in another order, within 1e-5 relative.
TEST(TrainerPipeline, ComposesWithDataAndTensorParallel) {
  auto world = vlpar::test::world_comm("world");
  ASSERT_TRUE(world);
  if (world->size() != 4) GTEST_SKIP() << "needs 4 ranks (pp 2 x dp 2, pp 2 x tp 2)";
  const int rank = world->rank();
  SharedDir dir(*world, "compose");
  const std::string json = write_config(*world, "dense", dir.path, 5, false);
  const std::string own = dir.path + "/r" + std::to_string(rank);
  const TrainSummary one8 = train(config(json, own + "a", 3, {"--training.grad_accum=8"}), nullptr);
  const TrainSummary one4 = train(config(json, own + "b", 3, {}), nullptr);
  const TrainSummary dp = train(config(json, dir.path + "/dp", 3, {"--parallel.pp=2", "--parallel.zero1=true",
                                                                   "--training.recompute=full"}),
                                world.get());
  const TrainSummary tp = train(config(json, dir.path + "/tp", 3, {"--parallel.pp=2", "--parallel.tp=2"}), world.get());
  // The vision tower over both data-parallel ranks of stage 0 (vision tp 2 > tp 1: their images exchanged).
  const TrainSummary wide = train(config(json, dir.path + "/wide", 3, {"--parallel.pp=2", "--parallel.vision_tp=2"}),
                                  world.get());
  ASSERT_EQ(dp.losses.size(), 3u);
  ASSERT_EQ(tp.losses.size(), 3u);
  ASSERT_EQ(wide.losses.size(), 3u);
  for (size_t s = 0; s < 3; ++s) {
    EXPECT_NEAR(wide.losses[s], one8.losses[s], 1e-5 * one8.losses[s]) << "pp 2 x dp 2, vision tp 2, step " << s + 1;
    EXPECT_NEAR(wide.grad_norms[s], one8.grad_norms[s], 1e-5 * one8.grad_norms[s]) << "vision tp 2, step " << s + 1;
    EXPECT_NEAR(dp.losses[s], one8.losses[s], 1e-5 * one8.losses[s]) << "pp 2 x dp 2, step " << s + 1;
    EXPECT_NEAR(dp.grad_norms[s], one8.grad_norms[s], 1e-5 * one8.grad_norms[s]) << "pp 2 x dp 2, step " << s + 1;
    EXPECT_NEAR(tp.losses[s], one4.losses[s], 1e-5 * one4.losses[s]) << "pp 2 x tp 2, step " << s + 1;
    EXPECT_NEAR(tp.grad_norms[s], one4.grad_norms[s], 1e-5 * one4.grad_norms[s]) << "pp 2 x tp 2, step " << s + 1;
  }
}

// np 4, the MoE model: PP=2 × TP=2 with sequence parallelism and the experts split over the tp pair (ep 2: each tp
// rank routes its half of every micro-batch, the stages pass N/2 rows and the router statistics) follows one process
// within 1e-5 relative, also with the router z-loss and the sequence-level aux.
TEST(TrainerPipeline, ComposesWithSequenceAndExpertParallel) {
  auto world = vlpar::test::world_comm("world");
  ASSERT_TRUE(world);
  if (world->size() != 4) GTEST_SKIP() << "needs 4 ranks (pp 2 x tp 2)";
  SharedDir dir(*world, "sp_ep");
  const std::string json = write_config(*world, "moe", dir.path, 5, false);
  const std::vector<std::string> losses = {"--moe.z_loss_coef=0.001", "--moe.seq_aux_coef=0.001"};
  std::vector<std::string> par = losses;
  par.insert(par.end(), {"--parallel.pp=2", "--parallel.tp=2", "--parallel.sequence_parallel=true",
                         "--parallel.ep=2"});
  const TrainSummary one = train(config(json, dir.path + "/r" + std::to_string(world->rank()), 3, losses), nullptr);
  const TrainSummary sp = train(config(json, dir.path + "/sp", 3, par), world.get());
  ASSERT_EQ(sp.losses.size(), 3u);
  for (size_t s = 0; s < 3; ++s) {
    EXPECT_NEAR(sp.losses[s], one.losses[s], 1e-5 * one.losses[s]) << "step " << s + 1;
    EXPECT_NEAR(sp.grad_norms[s], one.grad_norms[s], 1e-5 * one.grad_norms[s]) << "step " << s + 1;
  }
}

// A micro-batch whose pixels are NaN in the MoE model under pp = np: its router logits go NaN on stage 0 (a
// kNonFinite error there), the stage poisons the micro-batch instead of failing the schedule, every stage runs the
// step to the end and the step is skipped; the next steps train (finite losses), and no rank waits. In f32 and in
// bf16 (the poisoned boundary tensors then bf16 NaN).
TEST(TrainerPipeline, NonFiniteRouterLogitsSkipTheStepOnEveryStage) {
  auto world = vlpar::test::world_comm("world");
  ASSERT_TRUE(world);
  const int P = world->size();
  SharedDir dir(*world, "nan");
  const std::string json = write_config(*world, "moe", dir.path, 2 * P + 1, false);
  const std::string bad = dir.path + "/nan.safetensors";
  if (world->rank() == 0) test::write_nan_pixel_batch(bad);
  ASSERT_TRUE(world->barrier().ok());
  const std::string good = test::fixture("moe") + "/batch.safetensors";
  std::vector<std::string> files(16, good);  // 4 micro-batches a step: steps 1, 2 (poisoned), 2 again, 3
  files[5] = bad;
  for (const std::string dtype : {"f32", "bf16"}) {
    SCOPED_TRACE(dtype);
    const TrainSummary s = train(config(json, dir.path + "/pp_" + dtype, 3,
                                        {"--parallel.pp=" + std::to_string(P), "--training.dtype=" + dtype}),
                                 world.get(), nullptr, files);
    EXPECT_EQ(s.skipped_steps, 1);
    ASSERT_EQ(s.losses.size(), 4u);  // steps 1, 2 (skipped), 2 again, 3
    EXPECT_TRUE(std::isfinite(s.losses[0]));
    EXPECT_TRUE(std::isnan(s.losses[1]));
    EXPECT_TRUE(std::isfinite(s.losses[2]) && std::isfinite(s.losses[3]));
  }
}

// np 4, pp 2 × dp 2 with the vision tower split over both dp ranks of stage 0 (vision tp 2 > tp 1): one dp rank's
// micro-batch has NaN pixels, its stage 0 poisons it but still meets its vision peer in that micro-batch's
// backward exchange (Model::release_vision), so nobody waits; the step is skipped and the next ones train.
TEST(TrainerPipeline, WideVisionGroupSurvivesAPoisonedMicroBatch) {
  auto world = vlpar::test::world_comm("world");
  ASSERT_TRUE(world);
  if (world->size() != 4) GTEST_SKIP() << "needs 4 ranks (pp 2 x dp 2)";
  SharedDir dir(*world, "wide_nan");
  const std::string json = write_config(*world, "moe", dir.path, 5, false);
  const std::string bad = dir.path + "/nan.safetensors";
  if (world->rank() == 0) test::write_nan_pixel_batch(bad);
  ASSERT_TRUE(world->barrier().ok());
  std::vector<std::string> files(32, test::fixture("moe") + "/batch.safetensors");
  files[2] = bad;  // dp rank 0's second micro-batch of step 1 (round-robin over the 2 dp ranks)
  const TrainSummary s = train(config(json, dir.path + "/pp", 2, {"--parallel.pp=2", "--parallel.vision_tp=2"}),
                               world.get(), nullptr, files);
  EXPECT_EQ(s.skipped_steps, 1);
  ASSERT_EQ(s.losses.size(), 3u);  // step 1 (skipped), 1 again, 2
  EXPECT_TRUE(std::isnan(s.losses[0]));
  EXPECT_TRUE(std::isfinite(s.losses[1]) && std::isfinite(s.losses[2]));
}

TEST(TrainerPipeline, LayoutWithWrongStageCountIsNamed) {
  auto world = vlpar::test::world_comm("world");
  ASSERT_TRUE(world);
  const int P = world->size();
  SharedDir dir(*world, "layout");
  const std::string json = write_config(*world, "dense", dir.path, 2 * P + 1, false);
  auto t = make(config(json, dir.path, 1,
                       {"--parallel.pp=" + std::to_string(P), "--parallel.pipeline_layout=V E t*" +
                                                                  std::to_string(2 * P + 1) + " L"}),
                world.get());
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("has 1 stages, but pp · vpp = " + std::to_string(P)), std::string::npos)
      << t.status().message();
}

}  // namespace
}  // namespace qwen3vl
