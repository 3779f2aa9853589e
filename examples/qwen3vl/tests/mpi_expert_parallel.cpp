// The trainer with expert parallelism (parallel.ep = world, folded over data parallelism) under mpirun -np 2 and 4,
// on the MoE fixture model (8 experts: 4 or 2 per rank), against data parallelism alone (every rank all experts):
//   - the first step's loss is bitwise equal (the forward moves rows, it does not change their arithmetic), later
//     losses and every gradient norm within 1e-5 relative (an expert's weight gradient is one GEMM over every
//     rank's rows instead of per-rank GEMMs summed by the dp all-reduce: fp32 reassociation), and every expert
//     weight a rank holds after 3 steps is within 1e-4 of the data-parallel run's;
//   - a checkpoint written at EP = np loads at EP = 1 (same dp): each rank's expert slices equal the EP run's bit
//     for bit (each expert shard written once, by its expert-dp rank 0); the EP run's HF export (experts gathered
//     over ep) is byte for byte the EP = 1 run's;
//   - memory: the expert parameters, gradients and AdamW state per rank shrink by EP (registry and allocator);
//   - the aux-loss-free expert bias (moe.expert_bias_rate) is the same on every rank and under DP, and resumes;
//   - ep × tp with sequence parallelism matches data parallelism alone; ep with tp > 1 without it is a named
//     config error;
//   - expert tensor parallelism (etp 2, × ep 2 at np 4) matches data parallelism, reshards to EP = 1 and exports
//     byte for byte the EP = 1 export;
//   - a capacity factor drops the same rows as data parallelism and counts them;
//   - HF parity: the MoE fixture with its experts split over ep (and etp × ep) gives transformers' logits and losses.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "model_test_util.hpp"
#include "mpi/mpi_test_util.hpp"
#include "trainer.hpp"
#include "vlpar/io/safetensors.hpp"

namespace qwen3vl {
namespace {

namespace fs = std::filesystem;
using vlpar::comm::Communicator;

TrainConfig config(const std::string& dir, int steps, std::vector<std::string> extra) {
  extra.push_back("--model.config_json=" + test::fixture("moe") + "/config.json");
  extra.push_back("--training.grad_accum=2");
  return test::mpi_trainer_config(dir, 1, steps, extra);
}

/// The trainer over the fixture packs `order` (d = dense, m = moe) dealt round-robin over the data ranks.
Result<std::unique_ptr<Trainer>> make(const TrainConfig& c, Communicator& world, const std::string& order) {
  VLPAR_ASSIGN_OR_RETURN(const DataRank d, data_rank_of(c, world.rank(), world.size()));
  std::vector<std::string> files;
  for (const char f : order) files.push_back(test::fixture(f == 'd' ? "dense" : "moe") + "/batch.safetensors");
  VLPAR_ASSIGN_OR_RETURN(auto src, FileBatchSource::create(files, test::fixture_mrope_desc(), d.rank, d.size));
  return Trainer::create(c, &world, std::move(src));
}

std::unique_ptr<Trainer> train(const TrainConfig& c, Communicator& world, TrainSummary& out,
                               const std::string& order = "dmmd") {
  auto t = make(c, world, order);
  EXPECT_TRUE(t.ok()) << t.status().message();
  if (!t.ok()) return nullptr;
  Result<TrainSummary> r = t.value()->run();
  EXPECT_TRUE(r.ok()) << r.status().message();
  if (r.ok()) out = r.value();
  return std::move(t).value();
}

std::string shared_dir(Communicator& world) { return vlpar::test::shared_temp_dir(world, "vlpar_ep_"); }

/// Rank 0: the HF export under `dir`/`a` is byte for byte the one under `dir`/`b` (model.safetensors).
void expect_same_export(Communicator& world, const std::string& a_dir, const std::string& b_dir, const char* what) {
  if (world.rank() != 0) return;
  auto bytes = [](const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  };
  const std::string a = bytes(a_dir + "/model.safetensors"), b = bytes(b_dir + "/model.safetensors");
  EXPECT_FALSE(a.empty());
  EXPECT_TRUE(a == b) << "the " << what << " export differs from the EP = 1 export (" << a.size() << " vs "
                      << b.size() << " bytes)";
}

/// Each expert tensor `mine` holds (its experts of the full [E, …], and under etp its block of their width)
/// against the same elements of `whole` (a model holding every expert whole).
void compare_experts(const Model& mine, const Model& whole, double tol) {
  const nn::ParamRegistry& reg = mine.registry();
  vlpar::Allocator alloc;
  int compared = 0;
  for (size_t i = 0; i < reg.size(); ++i) {
    const vlpar::ParamShard& p = reg.entry(i).shard;
    if (p.replica != vlpar::ReplicaGroup::kExpert) continue;
    const auto w = whole.registry().find(p.name);
    ASSERT_TRUE(w.has_value()) << p.name;
    ASSERT_EQ(whole.registry().value(*w).shape, p.full_shape) << p.name;
    Tensor want = Tensor::empty(alloc, p.local_shape(), vlpar::DType::kF32).value();
    ASSERT_TRUE(vlpar::gather_shard_from_full(want, whole.registry().value(*w), p).ok()) << p.name;
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
  const auto ep_run = train(config(dir + "/ep", 3, {"--parallel.ep=" + std::to_string(P),
                                                   "--checkpoint.export_hf=" + dir + "/ep_hf"}), *world, ep);
  ASSERT_TRUE(dp_run && ep_run);
  ASSERT_EQ(dp.losses.size(), 3u);
  ASSERT_EQ(ep.losses.size(), 3u);
  EXPECT_EQ(ep.losses[0], dp.losses[0]) << "the first forward differs";
  for (size_t s = 0; s < 3; ++s) {
    EXPECT_NEAR(ep.losses[s], dp.losses[s], 1e-5 * dp.losses[s]) << "step " << s + 1;
    EXPECT_NEAR(ep.grad_norms[s], dp.grad_norms[s], 1e-5 * dp.grad_norms[s]) << "step " << s + 1;
  }
  compare_experts(ep_run->model(), dp_run->model(), 1e-4);
  // Memory: this rank holds E / P of the experts, their gradients and their AdamW moments (registry counts, and
  // the allocator's live bytes after training: values, gradients, m and v at 4 bytes each).
  int64_t expert_elems = 0;
  const nn::ParamRegistry& dreg = dp_run->model().registry();
  for (size_t i = 0; i < dreg.size(); ++i) {
    const vlpar::ParamShard& p = dreg.entry(i).shard;
    if (p.replica == vlpar::ReplicaGroup::kExpert) expert_elems += p.full_shape.numel();
  }
  const int64_t not_held = expert_elems - expert_elems / P;
  ASSERT_GT(expert_elems, 0);
  EXPECT_EQ(dreg.counts().params - ep_run->model().registry().counts().params, not_held);
  const int64_t dp_bytes = dp_run->allocator().stats(vlpar::Device::cpu()).current_bytes;
  const int64_t ep_bytes = ep_run->allocator().stats(vlpar::Device::cpu()).current_bytes;
  EXPECT_GE(dp_bytes - ep_bytes, 16 * not_held) << dp_bytes << " vs " << ep_bytes;
  // The EP checkpoint (step 3) loads at EP = 1: every rank's slices of the whole experts are the EP run's.
  TrainSummary none;
  const auto back = train(config(dir + "/ep", 3, {"--checkpoint.export_hf=" + dir + "/one_hf"}), *world, none);
  ASSERT_TRUE(back);
  EXPECT_EQ(none.first_step, 3);
  EXPECT_EQ(none.steps_done, 0);
  compare_experts(ep_run->model(), back->model(), 0.0);
  // The HF export of the EP run (every expert gathered over ep) is byte for byte the EP = 1 run's of the same model.
  expect_same_export(*world, dir + "/ep_hf", dir + "/one_hf", "EP");
  ASSERT_TRUE(world->barrier().ok());
  if (world->rank() == 0) fs::remove_all(dir);
}

// Expert tensor parallelism: etp 2 (× ep = np / 2 at np 4) folded over data parallelism, and at np 4 tp 2 with
// sequence parallelism × etp 2 × ep 2, against data parallelism alone: losses and gradient norms within 1e-5,
// every weight block a rank holds within 1e-4 after 3 steps; expert
// parameters per rank shrink by ep · etp; the checkpoint (experts split along two dims) loads at EP = 1 bit for bit
// and the HF export (experts gathered over etp, then ep) is byte for byte the EP = 1 export.
TEST(TrainerExpertParallel, ExpertTensorParallelMatchesDataParallelAndReshards) {
  auto world = vlpar::test::world_comm("world");
  ASSERT_TRUE(world);
  const int P = world->size();
  const std::string dir = shared_dir(*world);
  TrainSummary dp, et;
  const auto dp_run = train(config(dir + "/dp", 3, {}), *world, dp);
  const auto et_run = train(config(dir + "/etp", 3, {"--parallel.etp=2", "--parallel.ep=" + std::to_string(P / 2),
                                                     "--checkpoint.export_hf=" + dir + "/etp_hf"}), *world, et);
  ASSERT_TRUE(dp_run && et_run);
  ASSERT_EQ(et.losses.size(), 3u);
  for (size_t s = 0; s < 3; ++s) {
    EXPECT_NEAR(et.losses[s], dp.losses[s], 1e-5 * dp.losses[s]) << "step " << s + 1;
    EXPECT_NEAR(et.grad_norms[s], dp.grad_norms[s], 1e-5 * dp.grad_norms[s]) << "step " << s + 1;
  }
  compare_experts(et_run->model(), dp_run->model(), 1e-4);
  if (P == 4) {  // tp 2 with sequence parallelism, each expert's width over the tp pair (etp 2) and ep 2 across
    TrainSummary tp;
    const auto tp_run = train(config(dir + "/tp", 3, {"--parallel.tp=2", "--parallel.sequence_parallel=true",
                                                      "--parallel.etp=2", "--parallel.ep=2",
                                                      "--training.grad_accum=4"}), *world, tp);
    ASSERT_TRUE(tp_run);
    ASSERT_EQ(tp.losses.size(), 3u);
    for (size_t s = 0; s < 3; ++s) {
      EXPECT_NEAR(tp.losses[s], dp.losses[s], 1e-5 * dp.losses[s]) << "tp 2 etp 2, step " << s + 1;
      EXPECT_NEAR(tp.grad_norms[s], dp.grad_norms[s], 1e-5 * dp.grad_norms[s]) << "tp 2 etp 2, step " << s + 1;
    }
    compare_experts(tp_run->model(), dp_run->model(), 1e-4);
  }
  int64_t expert_elems = 0;
  const nn::ParamRegistry& dreg = dp_run->model().registry();
  for (size_t i = 0; i < dreg.size(); ++i) {
    const vlpar::ParamShard& p = dreg.entry(i).shard;
    if (p.replica == vlpar::ReplicaGroup::kExpert) expert_elems += p.full_shape.numel();
  }
  ASSERT_GT(expert_elems, 0);
  EXPECT_EQ(dreg.counts().params - et_run->model().registry().counts().params, expert_elems - expert_elems / P);
  TrainSummary none;
  const auto back = train(config(dir + "/etp", 3, {"--checkpoint.export_hf=" + dir + "/one_hf"}), *world, none);
  ASSERT_TRUE(back);
  EXPECT_EQ(none.first_step, 3);
  compare_experts(et_run->model(), back->model(), 0.0);
  expect_same_export(*world, dir + "/etp_hf", dir + "/one_hf", "ETP");
  ASSERT_TRUE(world->barrier().ok());
  if (world->rank() == 0) fs::remove_all(dir);
}

/// Every MoE layer's expert bias of `m` (all layers' [E] in order), and that it is the same on every rank.
std::vector<float> biases_agreed_by_all(const Model& m, Communicator& world) {
  std::vector<float> mine;
  for (int l = 0; l < m.config().text.layers; ++l) {
    const TensorView b = m.expert_bias(l);
    if (b.empty()) continue;  // a dense layer
    mine.insert(mine.end(), b.ptr<float>(), b.ptr<float>() + b.numel());
  }
  const auto n = int64_t(mine.size());
  std::vector<float> all(size_t(n * world.size()));
  EXPECT_TRUE(world.all_gather(TensorView(all.data(), vlpar::DType::kF32, vlpar::Shape{n * world.size()}),
                               TensorView(mine.data(), vlpar::DType::kF32, vlpar::Shape{n})).ok());
  for (int r = 0; r < world.size(); ++r)
    EXPECT_EQ(std::memcmp(all.data() + r * n, mine.data(), size_t(n) * sizeof(float)), 0) << "rank " << r;
  return mine;
}

// Aux-loss-free balancing (moe.expert_bias_rate): the expert loads are summed over every rank before the bias
// step, so the bias is bitwise the same on every rank and under EP the same as under data parallelism alone (the
// same global counts); it moves (some element ≠ 0, none beyond steps · rate); it is checkpointed: 4 straight steps
// equal 3 steps, a checkpoint and a resumed 4th bitwise (the 4th loss and the bias). The metrics carry the
// per-layer load statistics. The router z-loss and the sequence-level aux are on in every run (their values in the
// metrics, the first EP loss equal to the DP one bitwise).
TEST(TrainerExpertParallel, ExpertBiasAgreesOnEveryRankAndResumes) {
  const std::string kUneven = "ddmdmmdd";  // at np 2 and 4 the ranks see different packs: their own loads differ
  auto world = vlpar::test::world_comm("world");
  ASSERT_TRUE(world);
  const int P = world->size();
  const std::string dir = shared_dir(*world);
  const std::string rate = "--moe.expert_bias_rate=0.01", ep = "--parallel.ep=" + std::to_string(P);
  const std::string z = "--moe.z_loss_coef=0.001", seq = "--moe.seq_aux_coef=0.001";
  TrainSummary dp, ep3, ep4, resumed;
  const auto dp_run = train(config(dir + "/dp", 3, {rate, z, seq}), *world, dp, kUneven);
  const auto ep_run = train(config(dir + "/ep", 3, {rate, z, seq, ep}), *world, ep3, kUneven);
  ASSERT_TRUE(dp_run && ep_run);
  const std::vector<float> b_dp = biases_agreed_by_all(dp_run->model(), *world);
  const std::vector<float> b_ep = biases_agreed_by_all(ep_run->model(), *world);
  ASSERT_FALSE(b_ep.empty()) << "no expert bias registered";
  ASSERT_EQ(b_ep.size(), b_dp.size());
  EXPECT_EQ(ep3.losses[0], dp.losses[0]) << "the first forward differs (with the z-loss and sequence aux)";
  EXPECT_EQ(std::memcmp(b_ep.data(), b_dp.data(), b_ep.size() * sizeof(float)), 0) << "EP and DP biases differ";
  EXPECT_TRUE(std::any_of(b_ep.begin(), b_ep.end(), [](float b) { return b != 0.f; })) << "the bias never moved";
  for (const float b : b_ep) EXPECT_LE(std::abs(b), 3 * 0.01f * (1 + 1e-6f));
  // 4 straight steps (one lr schedule over 4) saving at step 3 too; that checkpoint alone, resumed, runs step 4.
  const auto straight =
      train(config(dir + "/ep4", 4, {rate, z, seq, ep, "--checkpoint.interval=3"}), *world, ep4, kUneven);
  if (world->rank() == 0) {
    fs::create_directories(dir + "/ep4r/ckpt");
    fs::copy(dir + "/ep4/ckpt/step-3", dir + "/ep4r/ckpt/step-3", fs::copy_options::recursive);
  }
  ASSERT_TRUE(world->barrier().ok());
  const auto again = train(config(dir + "/ep4r", 4, {rate, z, seq, ep}), *world, resumed, kUneven);
  ASSERT_TRUE(straight && again);
  ASSERT_EQ(resumed.first_step, 3);
  ASSERT_EQ(resumed.losses.size(), 1u);
  EXPECT_EQ(resumed.losses[0], ep4.losses[3]) << "the resumed step differs";
  const std::vector<float> b4 = biases_agreed_by_all(straight->model(), *world);
  const std::vector<float> b_res = biases_agreed_by_all(again->model(), *world);
  EXPECT_EQ(std::memcmp(b4.data(), b_res.data(), b4.size() * sizeof(float)), 0) << "the resumed bias differs";
  if (world->rank() == 0) {  // the last metrics line: the worst layer's load statistics and every layer's
    std::ifstream in(dir + "/ep4/metrics.jsonl");
    std::string line, last;
    while (std::getline(in, line)) last = line;
    for (const char* key : {"\"z_loss\"", "\"seq_aux_loss\"", "\"moe_load_cv\"", "\"moe_load_max\"", "\"moe_load_min\"",
                            "\"moe_load/layer0_cv\"",
                            "\"moe_load/layer2_max_over_mean\""})
      EXPECT_NE(last.find(key), std::string::npos) << key << " missing in " << last;
  }
  ASSERT_TRUE(world->barrier().ok());
  if (world->rank() == 0) fs::remove_all(dir);
}

// A capacity factor (moe.capacity_factor = 0.5): the expert-parallel run drops the same rows as data parallelism
// alone (capacity per source rank: each rank routes its own tokens either way), so losses and gradient norms agree
// within 1e-5 (the first loss bitwise); the drops change the loss against the dropless run and are counted
// (moe_dropped, the share of assignments dropped, in the metrics).
TEST(TrainerExpertParallel, CapacityFactorDropsTheSameRowsAsDataParallelAndCountsThem) {
  auto world = vlpar::test::world_comm("world");
  ASSERT_TRUE(world);
  const int P = world->size();
  const std::string dir = shared_dir(*world);
  const std::string cf = "--moe.capacity_factor=0.5";
  TrainSummary dp, ep, dropless;
  const auto dp_run = train(config(dir + "/dp", 2, {cf}), *world, dp);
  const auto ep_run = train(config(dir + "/ep", 2, {cf, "--parallel.ep=" + std::to_string(P)}), *world, ep);
  const auto all_run = train(config(dir + "/all", 2, {}), *world, dropless);
  ASSERT_TRUE(dp_run && ep_run && all_run);
  ASSERT_EQ(ep.losses.size(), 2u);
  EXPECT_EQ(ep.losses[0], dp.losses[0]) << "the first forward differs";
  for (size_t s = 0; s < 2; ++s) {
    EXPECT_NEAR(ep.losses[s], dp.losses[s], 1e-5 * dp.losses[s]) << "step " << s + 1;
    EXPECT_NEAR(ep.grad_norms[s], dp.grad_norms[s], 1e-5 * dp.grad_norms[s]) << "step " << s + 1;
  }
  EXPECT_GT(std::abs(dropless.losses[0] - dp.losses[0]), 1e-6 * dp.losses[0]) << "the capacity dropped nothing";
  if (world->rank() == 0) {
    std::ifstream in(dir + "/ep/metrics.jsonl");
    std::string line, last;
    while (std::getline(in, line)) last = line;
    const size_t at = last.find("\"moe_dropped\":");
    ASSERT_NE(at, std::string::npos) << last;
    const double share = std::stod(last.substr(at + 14));
    EXPECT_GT(share, 0.0);
    EXPECT_LT(share, 1.0);
  }
  ASSERT_TRUE(world->barrier().ok());
  if (world->rank() == 0) fs::remove_all(dir);
}

// HF parity under expert parallelism: the MoE fixture loaded from its HF files with its 8 experts split over the
// world (ep = np, and etp 2 × ep np/2) and run on the fixture batch (the same on every rank: each rank's tokens
// travel to the experts' ranks and back) gives transformers' logits and losses within 1e-5, as one process does.
TEST(ExpertParallelParity, MoeFixtureMatchesTransformersWithEpAndEtp) {
  auto world = vlpar::test::world_comm("world");
  ASSERT_TRUE(world);
  const int P = world->size(), r = world->rank();
  auto etp = world->split(r / 2, r % 2, vlpar::test::test_options("etp"));
  auto ep_half = world->split(r % 2, r / 2, vlpar::test::test_options("ep_half"));
  ASSERT_TRUE(etp.ok() && ep_half.ok());
  const std::string dir = test::fixture("moe");
  Result<vlpar::io::SafetensorsFile> ex = vlpar::io::SafetensorsFile::open(dir + "/expected.safetensors");
  ASSERT_TRUE(ex.ok()) << ex.status().message();
  auto scalar = [&](const char* name) {
    float v = NAN;
    EXPECT_TRUE(ex.value().read(name, TensorView(&v, vlpar::DType::kF32, vlpar::Shape{})).ok()) << name;
    return double(v);
  };
  Result<Config> cfg = load_hf_config(dir);
  ASSERT_TRUE(cfg.ok());
  for (const nn::ExpertParallel& ep : {nn::ExpertParallel{world.get()},
                                       nn::ExpertParallel{P > 2 ? ep_half.value().get() : nullptr, etp.value().get()}}) {
    SCOPED_TRACE(fmt::format("ep {} x etp {}", ep.size(), ep.etp_size()));
    Allocator alloc;
    Context ctx = Context::cpu_default();
    ctx.allocator = &alloc;
    Result<Model> m = Model::create(ctx, cfg.value(), Freeze{}, std::nullopt, alloc, {}, {}, ep);
    ASSERT_TRUE(m.ok()) << m.status().message();
    ASSERT_TRUE(load_hf_weights(m.value(), dir).ok());
    Result<vlpar::data::PackedBatch> lb = load_batch(dir + "/batch.safetensors", cfg.value().mrope_desc());
    ASSERT_TRUE(lb.ok()) << lb.status().message();
    Stash st;
    Result<StepLoss> loss = m.value().forward(ctx, lb.value().view(), st);
    ASSERT_TRUE(loss.ok()) << loss.status().message();
    Result<Tensor> logits = m.value().logits(ctx, st, alloc);
    ASSERT_TRUE(logits.ok());
    const vlpar::io::TensorInfo* info = ex.value().find("logits");
    ASSERT_NE(info, nullptr);
    Tensor ref = Tensor::empty(alloc, info->shape, vlpar::DType::kF32).value();
    ASSERT_TRUE(ex.value().read("logits", ref).ok());
    ASSERT_EQ(ref.numel(), logits.value().numel());
    double diff = 0, scale = 0;
    for (int64_t i = 0; i < ref.numel(); ++i) {
      diff = std::max(diff, double(std::abs(logits.value().ptr<float>()[i] - ref.ptr<float>()[i])));
      scale = std::max(scale, double(std::abs(ref.ptr<float>()[i])));
    }
    EXPECT_LE(diff / scale, 1e-5) << "logits";
    EXPECT_NEAR(loss.value().ce_loss, scalar("ce_loss"), 1e-5 * std::abs(scalar("ce_loss")));
    EXPECT_NEAR(loss.value().aux_loss, scalar("aux_loss"), 1e-5 * std::abs(scalar("aux_loss")) + 1e-9);
  }
}

TEST(TrainerExpertParallel, EpOrEtpWithTpWithoutSequenceParallelIsANamedConfigError) {
  const Result<TrainConfig> c = parse_train_config("", "test", std::vector<std::string>{"--parallel.ep=2",
                                                                                        "--parallel.tp=2"});
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("parallel.ep = 2 with parallel.tp = 2 needs parallel.sequence_parallel = true"),
            std::string::npos) << c.status().message();
  const Result<TrainConfig> e = parse_train_config("", "test", std::vector<std::string>{"--parallel.etp=2",
                                                                                        "--parallel.tp=2"});
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("parallel.etp = 2 with parallel.tp = 2 needs parallel.sequence_parallel"),
            std::string::npos) << e.status().message();
}

// EP × TP with sequence parallelism (tp 2, ep = world: at np 2 the ep group is the tp group, at np 4 it spans both
// tp groups; each tp rank routes its own half of every micro-batch) against data parallelism alone over the same
// global batch (grad_accum scaled by tp, so the same packs make each step): losses and gradient norms within
// 1e-5, every expert weight this rank holds within 1e-4 after 3 steps; the same with the experts whole on every
// rank (ep 1). The fixture packs' 78 tokens split over tp 2 without padding.
TEST(TrainerExpertParallel, TensorAndSequenceParallelWithEpMatchesDataParallel) {
  auto world = vlpar::test::world_comm("world");
  ASSERT_TRUE(world);
  const int P = world->size();
  const std::string dir = shared_dir(*world);
  TrainSummary dp, tp;
  const auto dp_run = train(config(dir + "/dp", 3, {}), *world, dp);
  const auto tp_run = train(config(dir + "/tp", 3, {"--parallel.tp=2", "--parallel.sequence_parallel=true",
                                                    "--parallel.ep=" + std::to_string(P), "--training.grad_accum=4"}),
                            *world, tp);
  ASSERT_TRUE(dp_run && tp_run);
  ASSERT_EQ(tp.losses.size(), 3u);
  for (size_t s = 0; s < 3; ++s) {
    EXPECT_NEAR(tp.losses[s], dp.losses[s], 1e-5 * dp.losses[s]) << "step " << s + 1;
    EXPECT_NEAR(tp.grad_norms[s], dp.grad_norms[s], 1e-5 * dp.grad_norms[s]) << "step " << s + 1;
  }
  compare_experts(tp_run->model(), dp_run->model(), 1e-4);
  // SP with the experts whole on every rank (ep 1): each tp rank's expert gradients are parts of one sum, which
  // the optimizer adds over expert-dp (it spans the tp ranks: no duplicates).
  TrainSummary sp;
  const auto sp_run = train(config(dir + "/sp", 3, {"--parallel.tp=2", "--parallel.sequence_parallel=true",
                                                    "--training.grad_accum=4"}), *world, sp);
  ASSERT_TRUE(sp_run);
  ASSERT_EQ(sp.losses.size(), 3u);
  for (size_t s = 0; s < 3; ++s) {
    EXPECT_NEAR(sp.losses[s], dp.losses[s], 1e-5 * dp.losses[s]) << "ep 1, step " << s + 1;
    EXPECT_NEAR(sp.grad_norms[s], dp.grad_norms[s], 1e-5 * dp.grad_norms[s]) << "ep 1, step " << s + 1;
  }
  compare_experts(sp_run->model(), dp_run->model(), 1e-4);
  if (P == 4) {  // tp 4: the trainer pads each 78-token pack to 80 (one unsupervised 2-token sample), whose rows
                 // enter the router statistics: the losses within 1e-4
    TrainSummary tp4;
    const auto tp4_run = train(config(dir + "/tp4", 3, {"--parallel.tp=4", "--parallel.sequence_parallel=true",
                                                        "--training.grad_accum=8"}), *world, tp4);
    ASSERT_TRUE(tp4_run);
    ASSERT_EQ(tp4.losses.size(), 3u);
    for (size_t s = 0; s < 3; ++s)
      EXPECT_NEAR(tp4.losses[s], dp.losses[s], 1e-4 * dp.losses[s]) << "tp 4 (padded), step " << s + 1;
  }
  ASSERT_TRUE(world->barrier().ok());
  if (world->rank() == 0) fs::remove_all(dir);
}

}  // namespace
}  // namespace qwen3vl
