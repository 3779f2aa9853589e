// The trainer: bit-exact resume (2N steps in one run equal N steps, a resume and N more, loss for loss and bit for
// bit), a SIGKILL in the middle of checkpoint writes always leaves a loadable checkpoint equal to the uninterrupted
// run's state at that step, non-finite steps are skipped (and K in a row abort with a message naming the cause),
// recompute modes and the loss weighting over micro-batches, the held-out loss. Runs on the golden fixtures'
// pre-packed batches.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>

#include <chrono>
#include <fstream>
#include <cmath>
#include <filesystem>
#include <random>
#include <thread>

#include "model_test_util.hpp"
#include "trainer.hpp"
#include "vlpar/io/safetensors.hpp"

extern char** environ;

namespace qwen3vl {
namespace {

namespace fs = std::filesystem;

std::string tmp(const std::string& tag) {
  const fs::path p = fs::temp_directory_path() / ("vlpar_trainer_" + tag + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  return p.string();
}

std::vector<std::string> batch_files() {
  return {test::fixture("dense") + "/batch.safetensors", test::fixture("moe") + "/batch.safetensors"};
}

TrainConfig config(const std::string& dir, int steps) {
  std::vector<std::string> o = {"--model.config_json=" + test::fixture("dense") + "/config.json",
                                "--training.steps=" + std::to_string(steps),
                                "--training.grad_accum=2",
                                "--training.threads=2",
                                "--schedule.warmup_steps=2",
                                "--checkpoint.dir=" + dir + "/ckpt",
                                "--checkpoint.keep_last=100",
                                "--metrics.dir=" + dir,
                                "--metrics.peak_gflops=100"};
  Result<TrainConfig> c = parse_train_config("", "test", o);
  EXPECT_TRUE(c.ok()) << c.status().message();
  return c.value();
}

std::unique_ptr<Trainer> make(const TrainConfig& c, std::vector<std::string> files = batch_files()) {
  auto src = FileBatchSource::create(std::move(files), test::fixture_mrope_desc(), 0, 1);
  EXPECT_TRUE(src.ok());
  Result<std::unique_ptr<Trainer>> t = Trainer::create(c, nullptr, std::move(src).value());
  EXPECT_TRUE(t.ok()) << t.status().message();
  return t.ok() ? std::move(t).value() : nullptr;
}

std::vector<std::vector<float>> values(const Trainer& t) {
  std::vector<std::vector<float>> out;
  const nn::ParamRegistry& reg = t.model().registry();
  for (size_t i = 0; i < reg.size(); ++i)
    out.emplace_back(reg.value(i).ptr<float>(), reg.value(i).ptr<float>() + reg.value(i).numel());
  return out;
}

TEST(Trainer, ResumeIsBitExact) {
  const std::string a = tmp("a"), b = tmp("b");
  // A: 6 steps in one run (checkpoints every 3 steps, so the run is the same as B's first half).
  TrainConfig ca = config(a, 6);
  ca.checkpoint.interval = 3;
  auto ta = make(ca);
  Result<TrainSummary> ra = ta->run();
  ASSERT_TRUE(ra.ok()) << ra.status().message();
  ASSERT_EQ(ra.value().losses.size(), 6u);
  // B: the same run interrupted after step 3 (its step-6 checkpoint removed, `latest` back at step 3), resumed.
  TrainConfig cb = config(b, 6);
  cb.checkpoint.interval = 3;
  auto tb1 = make(cb);
  ASSERT_TRUE(tb1->run().ok());
  fs::remove_all(b + "/ckpt/step-6");
  { std::ofstream(b + "/ckpt/latest") << "step-3\n"; }
  auto tb2 = make(cb);
  Result<TrainSummary> rb = tb2->run();
  ASSERT_TRUE(rb.ok()) << rb.status().message();
  EXPECT_EQ(rb.value().first_step, 3);
  ASSERT_EQ(rb.value().losses.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(rb.value().losses[i], ra.value().losses[3 + i]) << "step " << 4 + i;
    EXPECT_EQ(rb.value().grad_norms[i], ra.value().grad_norms[3 + i]) << "step " << 4 + i;
  }
  EXPECT_TRUE(values(*tb2) == values(*ta)) << "parameters after the resumed run differ from the uninterrupted run";
  // The metrics file of the resumed run continues the first one without duplicates.
  fs::remove_all(a);
  fs::remove_all(b);
}

/// Every parameter value's bytes, in registry order (any dtype).
std::vector<std::vector<char>> value_bytes(const Trainer& t) {
  std::vector<std::vector<char>> out;
  const nn::ParamRegistry& reg = t.model().registry();
  for (size_t i = 0; i < reg.size(); ++i) {
    const char* p = static_cast<const char*>(reg.value(i).data);
    out.emplace_back(p, p + reg.value(i).nbytes());
  }
  return out;
}

// bf16 training (bf16 values and activations; f32 gradients, masters and Adam state): the model stores bf16, a
// resumed run is bit for bit the uninterrupted one (checkpoints hold the f32 masters), the losses follow the f32
// run's (a sanity band: 5 %), and the bf16 run's checkpoint loads into an f32 run as the masters, whose bf16
// rounding is the bf16 run's values while they carry more precision than bf16.
TEST(Trainer, Bf16ResumesBitExactAndItsCheckpointLoadsInF32) {
  const std::string a = tmp("bf16a"), b = tmp("bf16b"), f = tmp("bf16f"), g = tmp("bf16g");
  auto bf16 = [](TrainConfig c) {
    c.training.dtype = "bf16";
    return c;
  };
  TrainConfig ca = bf16(config(a, 6));
  ca.checkpoint.interval = 3;
  auto ta = make(ca);
  Result<TrainSummary> ra = ta->run();
  ASSERT_TRUE(ra.ok()) << ra.status().message();
  const nn::ParamRegistry& reg = ta->model().registry();
  for (size_t i = 0; i < reg.size(); ++i) ASSERT_EQ(reg.value(i).dtype, vlpar::DType::kBF16) << reg.name(i);
  TrainConfig cb = bf16(config(b, 6));
  cb.checkpoint.interval = 3;
  ASSERT_TRUE(make(cb)->run().ok());
  fs::remove_all(b + "/ckpt/step-6");
  { std::ofstream(b + "/ckpt/latest") << "step-3\n"; }
  auto tb = make(cb);
  Result<TrainSummary> rb = tb->run();
  ASSERT_TRUE(rb.ok()) << rb.status().message();
  ASSERT_EQ(rb.value().losses.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(rb.value().losses[i], ra.value().losses[3 + i]) << "step " << 4 + i;
    EXPECT_EQ(rb.value().grad_norms[i], ra.value().grad_norms[3 + i]) << "step " << 4 + i;
  }
  EXPECT_TRUE(value_bytes(*tb) == value_bytes(*ta)) << "the resumed bf16 run's parameters differ";
  Result<TrainSummary> rf = make(config(f, 6))->run();
  ASSERT_TRUE(rf.ok());
  for (size_t i = 0; i < 6; ++i)
    EXPECT_NEAR(ra.value().losses[i], rf.value().losses[i], 0.05 * rf.value().losses[i]) << "step " << i + 1;
  // The f32 run resumes from the bf16 run's final checkpoint (nothing left to train: it only loads).
  fs::create_directories(g);
  fs::copy(a + "/ckpt", g + "/ckpt", fs::copy_options::recursive);
  auto tg = make(config(g, 6));
  const Result<TrainSummary> rg_run = tg->run();
  ASSERT_TRUE(rg_run.ok()) << rg_run.status().message();
  const nn::ParamRegistry& rg = tg->model().registry();
  bool finer = false;  // some master is not a bf16 number
  for (size_t i = 0; i < rg.size(); ++i) {
    ASSERT_EQ(rg.value(i).dtype, vlpar::DType::kF32);
    const float* m = rg.value(i).ptr<float>();
    const vlpar::bf16* v = reg.value(i).ptr<vlpar::bf16>();
    for (int64_t k = 0; k < rg.value(i).numel(); ++k) {
      ASSERT_EQ(vlpar::float_to_bf16(m[k]).bits, v[k].bits) << rg.name(i) << " element " << k;
      finer = finer || vlpar::bf16_to_float(v[k]) != m[k];
    }
  }
  EXPECT_TRUE(finer) << "the checkpoint held the bf16 values, not the f32 masters";
  for (const std::string& d : {a, b, f, g}) fs::remove_all(d);
}

// The MoE model in bf16 (grouped GEMMs and the token path on bf16 rows, f32 router and expert biases, the
// balancing update on): four steps follow the f32 run's losses within the same sanity band.
TEST(Trainer, Bf16MoeFollowsF32) {
  const std::string a = tmp("bf16moe"), f = tmp("f32moe");
  auto moe = [](TrainConfig c, const char* dtype) {
    c.model.config_json = test::fixture("moe") + "/config.json";
    c.moe.expert_bias_rate = 1e-3;
    c.training.dtype = dtype;
    return c;
  };
  const std::vector<std::string> files(1, test::fixture("moe") + "/batch.safetensors");
  Result<TrainSummary> ra = make(moe(config(a, 4), "bf16"), files)->run();
  Result<TrainSummary> rf = make(moe(config(f, 4), "f32"), files)->run();
  ASSERT_TRUE(ra.ok() && rf.ok()) << ra.status().message() << rf.status().message();
  for (size_t i = 0; i < 4; ++i)
    EXPECT_NEAR(ra.value().losses[i], rf.value().losses[i], 0.05 * rf.value().losses[i]) << "step " << i + 1;
  fs::remove_all(a);
  fs::remove_all(f);
}

TEST(Trainer, NonFiniteStepsAreSkippedAndKInARowAbort) {
  const std::string d = tmp("nan");
  // A batch whose pixels are NaN poisons exactly the steps that use it.
  Result<vlpar::data::PackedBatch> lb = load_batch(test::fixture("dense") + "/batch.safetensors",
                                                   test::fixture_mrope_desc());
  ASSERT_TRUE(lb.ok());
  for (float& v : lb.value().pixel_values) v = NAN;
  const std::string bad = d + "_bad.safetensors";
  const vlpar::Batch v = lb.value().view();
  std::vector<vlpar::io::NamedTensor> t = {{"input_ids", v.input_ids},
                                           {"labels", v.labels},
                                           {"cu_seqlens", v.cu_seqlens},
                                           {"pixel_values", v.pixel_values},
                                           {"pixel_values_videos", v.pixel_values_videos}};
  std::vector<int64_t> ig, vg;
  for (const auto& g : v.image_grids) ig.insert(ig.end(), {g.t, g.h, g.w});
  for (const auto& g : v.video_grids) vg.insert(vg.end(), {g.t, g.h, g.w});
  t.push_back({"image_grid_thw", TensorView(ig.data(), vlpar::DType::kI64, vlpar::Shape{int64_t(ig.size() / 3), 3})});
  t.push_back({"video_grid_thw", TensorView(vg.data(), vlpar::DType::kI64, vlpar::Shape{int64_t(vg.size() / 3), 3})});
  ASSERT_TRUE(vlpar::io::write_safetensors(bad, t).ok());
  const std::string good = test::fixture("moe") + "/batch.safetensors";
  {  // one poisoned micro-batch among good ones: that step is skipped, training goes on
    TrainConfig c = config(d, 3);
    c.training.grad_accum = 1;
    auto tr = make(c, {good, bad, good, good});
    testing::internal::CaptureStderr();
    Result<TrainSummary> r = tr->run();
    const std::string log = testing::internal::GetCapturedStderr();
    ASSERT_TRUE(r.ok()) << r.status().message();
    // The input is named before the loss goes NaN: the file's samples (the file has no images_per_sample to
    // tell which one), the tensor, the first NaN's row.
    EXPECT_NE(log.find(fmt::format("step 2 micro-batch 0: {} non-finite pixel values (NaN/Inf) in the batch, the "
                                   "first at one of the samples '{}#0' to '{}#{}' (the pack has no images_per_sample)"
                                   ": pixel_values row 0, column 0 is nan",
                                   lb.value().pixel_values.size(), bad, bad, lb.value().num_samples() - 1)),
              std::string::npos)
        << log;
    EXPECT_EQ(r.value().skipped_steps, 1);
    EXPECT_EQ(tr->step(), 3);
    EXPECT_TRUE(std::isnan(r.value().losses[1]));
  }
  fs::remove_all(d);
  {  // the same in the MoE model: the first MoE router's logits go NaN, a kNonFinite error naming the token, which
     // the trainer takes as a non-finite step (skipped, training goes on)
    TrainConfig c = config(d, 3);
    c.training.grad_accum = 1;
    c.model.config_json = test::fixture("moe") + "/config.json";
    auto tr = make(c, {good, bad, good, good});
    testing::internal::CaptureStderr();
    Result<TrainSummary> r = tr->run();
    const std::string log = testing::internal::GetCapturedStderr();
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_EQ(r.value().skipped_steps, 1);
    EXPECT_EQ(tr->step(), 3);
    EXPECT_NE(log.find("step 2: router_forward: the router logits of token"), std::string::npos) << log;
  }
  fs::remove_all(d);
  {  // only poisoned batches: K = 3 skipped steps in a row abort, naming the cause
    TrainConfig c = config(d, 5);
    c.training.grad_accum = 1;
    auto tr = make(c, {bad});
    Result<TrainSummary> r = tr->run();
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("3 consecutive steps"), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find("loss is nan"), std::string::npos) << r.status().message();
  }
  fs::remove_all(d);
  {  // a label outside the vocabulary stops training at its first step, naming the file, tensor and row
    std::vector<int64_t> labels(size_t(v.labels.numel()));
    for (size_t i = 0; i < labels.size(); ++i) labels[i] = v.labels.ptr<int64_t>()[i];
    labels.back() = -7;
    t[1].view = TensorView(labels.data(), vlpar::DType::kI64, v.labels.shape);
    for (float& x : lb.value().pixel_values) x = 0.f;
    ASSERT_TRUE(vlpar::io::write_safetensors(bad, t).ok());
    TrainConfig c = config(d, 2);
    c.training.grad_accum = 1;
    auto tr = make(c, {bad});
    Result<TrainSummary> r = tr->run();
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("sample '" + bad + "#"), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find("labels row " + std::to_string(labels.size() - 1)), std::string::npos)
        << r.status().message();
  }
  fs::remove_all(d);
  fs::remove(bad);
}

TEST(Trainer, RecomputeModesTrainIdentically) {
  std::vector<std::vector<float>> ref;
  std::vector<double> ref_losses;
  for (const char* mode : {"none", "selective", "full"}) {
    const std::string d = tmp(std::string("rc_") + mode);
    TrainConfig c = config(d, 3);
    c.training.recompute = mode;
    auto tr = make(c);
    Result<TrainSummary> r = tr->run();
    ASSERT_TRUE(r.ok()) << r.status().message();
    if (ref.empty()) {
      ref = values(*tr);
      ref_losses = r.value().losses;
    } else {
      EXPECT_TRUE(values(*tr) == ref) << mode;
      EXPECT_EQ(r.value().losses, ref_losses) << mode;
    }
    fs::remove_all(d);
  }
}

// Held-out loss (training.eval_interval): evaluated after step 2 and the last step 3 and logged with them in
// metrics.jsonl; training with evaluation equals training without it bit for bit (evaluation touches no training
// state); evaluate() before training equals the token-weighted mean cross-entropy of the initial model over the same
// micro-batches (Model::forward) and is the same twice in a row (the same micro-batches each time); evaluation
// without held-out data is a named error.
TEST(Trainer, HeldOutLossIsLoggedAndLeavesTrainingUntouched) {
  const std::string a = tmp("eval_a"), b = tmp("eval_b");
  auto plain = make(config(a, 3));
  ASSERT_TRUE(plain);
  // The reference before training: the initial model (same seed) over the first 3 held-out micro-batches.
  Allocator alloc;
  Context ctx = Context::cpu_default();
  ctx.num_threads = 2;
  ctx.allocator = &alloc;
  auto ref_src = FileBatchSource::create(batch_files(), test::fixture_mrope_desc(), 0, 1);
  ASSERT_TRUE(ref_src.ok());
  double num = 0, den = 0;
  for (int i = 0; i < 3; ++i) {
    Result<MicroBatch> mb = ref_src.value()->next();
    ASSERT_TRUE(mb.ok());
    Stash st;
    Result<StepLoss> l = plain->model().forward(ctx, mb.value().pack.view(), st);
    ASSERT_TRUE(l.ok()) << l.status().message();
    num += double(l.value().num_label_tokens) * l.value().ce_loss;
    den += double(l.value().num_label_tokens);
  }
  Result<TrainSummary> r0 = plain->run();
  ASSERT_TRUE(r0.ok()) << r0.status().message();

  TrainConfig c = config(b, 3);
  c.training.eval_interval = 2;
  c.training.eval_batches = 3;
  auto held = [] { return FileBatchSource::create(batch_files(), test::fixture_mrope_desc(), 0, 1).value(); };
  auto src = FileBatchSource::create(batch_files(), test::fixture_mrope_desc(), 0, 1);
  Result<std::unique_ptr<Trainer>> t = Trainer::create(c, nullptr, std::move(src).value(), held());
  ASSERT_TRUE(t.ok()) << t.status().message();
  Result<double> e0 = t.value()->evaluate(), e1 = t.value()->evaluate();
  ASSERT_TRUE(e0.ok() && e1.ok()) << e0.status().message();
  EXPECT_EQ(e0.value(), num / den);
  EXPECT_EQ(e1.value(), e0.value());
  Result<TrainSummary> r1 = t.value()->run();
  ASSERT_TRUE(r1.ok()) << r1.status().message();
  EXPECT_EQ(r1.value().losses, r0.value().losses);
  EXPECT_TRUE(values(*t.value()) == values(*plain)) << "evaluation changed the training";
  ASSERT_EQ(r1.value().eval_losses.size(), 2u);
  EXPECT_EQ(r1.value().eval_losses[0].first, 2);
  EXPECT_EQ(r1.value().eval_losses[1].first, 3);
  for (const auto& [step, loss] : r1.value().eval_losses) EXPECT_TRUE(std::isfinite(loss) && loss > 0) << step;
  EXPECT_LT(r1.value().eval_losses[1].second, e0.value()) << "three steps on the same batches lower their loss";
  std::ifstream in(b + "/metrics.jsonl");
  std::string line;
  std::vector<std::pair<int64_t, double>> logged;  // (step, eval_loss) of the metrics lines that have one
  while (std::getline(in, line)) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (j.contains("eval_loss")) logged.push_back({j["step"].get<int64_t>(), j["eval_loss"].get<double>()});
  }
  EXPECT_EQ(logged, r1.value().eval_losses);

  auto src2 = FileBatchSource::create(batch_files(), test::fixture_mrope_desc(), 0, 1);
  const Status missing = Trainer::create(c, nullptr, std::move(src2).value()).status();
  EXPECT_NE(missing.message().find("training.eval_interval = 2 needs held-out data (data.eval, or --eval-batches "
                                   "files)"), std::string::npos) << missing.message();
  fs::remove_all(a);
  fs::remove_all(b);
}

// qwen3vl-train is killed with SIGKILL at random moments while it writes a checkpoint every step; each time, the
// latest checkpoint must load and equal, bit for bit, the checkpoint of an uninterrupted run at that step.
TEST(Trainer, SigkillDuringCheckpointWritesLeavesALoadableCheckpoint) {
  const std::string ref_dir = tmp("kill_ref"), run_dir = tmp("kill_run");
  const int steps = 12;
  auto args = [&](const std::string& dir) {
    return std::vector<std::string>{QWEN3VL_TRAIN_BIN,
                                    "--batches=" + batch_files()[0] + "," + batch_files()[1],
                                    "--model.config_json=" + test::fixture("dense") + "/config.json",
                                    "--training.steps=" + std::to_string(steps), "--training.threads=1",
                                    "--checkpoint.interval=1", "--checkpoint.keep_last=100",
                                    "--checkpoint.dir=" + dir + "/ckpt", "--metrics.dir=" + dir,
                                    "--metrics.peak_gflops=100", "--metrics.trace=false"};
  };
  auto spawn = [&](const std::vector<std::string>& a) {
    std::vector<char*> argv;
    for (const std::string& s : a) argv.push_back(const_cast<char*>(s.c_str()));
    argv.push_back(nullptr);
    pid_t pid = 0;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    EXPECT_EQ(posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ), 0);
    posix_spawn_file_actions_destroy(&fa);
    return pid;
  };
  int status = 0;
  const pid_t ref = spawn(args(ref_dir));
  ASSERT_EQ(waitpid(ref, &status, 0), ref);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "reference run failed";
  std::mt19937 rng(7);
  int checked = 0;
  for (int attempt = 0; attempt < 6; ++attempt) {
    fs::remove_all(run_dir);
    const pid_t pid = spawn(args(run_dir));
    std::this_thread::sleep_for(std::chrono::milliseconds(150 + rng() % 400));
    kill(pid, SIGKILL);
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    Result<std::optional<vlpar::io::CheckpointInfo>> latest = vlpar::io::latest_checkpoint(run_dir + "/ckpt");
    ASSERT_TRUE(latest.ok()) << latest.status().message();
    if (!latest.value()) continue;  // killed before the first commit: nothing to load, nothing lost
    // Load it into a model and compare with the reference run's checkpoint of the same step.
    const std::string ref_ckpt = ref_dir + "/ckpt/step-" + std::to_string(latest.value()->step);
    test::Loaded a, b;
    test::load(a, "dense");
    test::load(b, "dense");
    for (auto [l, dir] : {std::pair{&a, latest.value()->dir}, std::pair{&b, ref_ckpt}}) {
      std::vector<vlpar::io::CheckpointTensor> ts;
      const nn::ParamRegistry& reg = l->model->registry();
      for (size_t i = 0; i < reg.size(); ++i) ts.push_back(vlpar::io::sharded_tensor(reg.name(i), reg.value(i), reg.entry(i).shard));
      Status s = vlpar::io::load_checkpoint(dir, ts, nullptr);
      ASSERT_TRUE(s.ok()) << s.message();
    }
    for (size_t i = 0; i < a.model->registry().size(); ++i)
      ASSERT_TRUE(test::bitwise(a.model->registry().value(i), b.model->registry().value(i)))
          << "step " << latest.value()->step << " " << a.model->registry().name(i);
    ++checked;
  }
  EXPECT_GE(checked, 3) << "the kills came too early to test anything";
  fs::remove_all(ref_dir);
  fs::remove_all(run_dir);
}

}  // namespace
}  // namespace qwen3vl
