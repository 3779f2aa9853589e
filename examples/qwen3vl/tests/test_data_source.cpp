// The trainer fed by the data pipeline (data_source.hpp), the model back from a training checkpoint
// (checkpoint_model.hpp) and held-out VQA accuracy (vqa_eval.hpp), on a synthetic Energon dataset written here:
// "Which half of the picture is brighter, left or right?" over noisy images of random sizes whose answer is in the
// pixels only, plus one corrupt JPEG that must be skipped and counted.
//   - the dataset source resumes exactly (a restored source yields the same micro-batches);
//   - training from the dataset resumes bit for bit (2N steps = N, resume, N), the data position included;
//   - a short run learns to look: held-out accuracy well above chance (the README main job's claim, shortened),
//     and the checkpoint loaded for inference reproduces the trained model's answers.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "checkpoint_model.hpp"
#include "data_source.hpp"
#include "trainer.hpp"
#include "vqa_dataset.hpp"
#include "vqa_eval.hpp"

namespace qwen3vl {
namespace {

namespace fs = std::filesystem;

using test::kDemoModel;
using test::kTokenizer;

const std::string& dataset() {
  static const std::string root = test::make_vqa_dataset("shared", 480, 64);
  return root;
}

TrainConfig config(const std::string& dir, int steps, std::vector<std::string> extra = {}) {
  std::vector<std::string> o = {"--model.config_json=" + kDemoModel, "--data.train=" + dataset(),
                                "--data.tokenizer=" + kTokenizer,    "--data.min_pixels=4096",
                                "--data.max_pixels=25600",           "--data.token_budget=768",
                                "--data.workers=2",                  "--data.shuffle_buffer=32",
                                "--training.steps=" + std::to_string(steps), "--training.threads=2",
                                "--schedule.warmup_steps=2",          "--optimizer.lr=3e-3",
                                "--checkpoint.dir=" + dir + "/ckpt", "--checkpoint.keep_last=100",
                                "--metrics.dir=" + dir,              "--metrics.peak_gflops=100",
                                "--metrics.tensorboard=false",       "--metrics.trace=false"};
  o.insert(o.end(), extra.begin(), extra.end());
  Result<TrainConfig> c = parse_train_config("", "test", o);
  EXPECT_TRUE(c.ok()) << c.status().message();
  return c.value();
}

std::unique_ptr<Trainer> make_trainer(const TrainConfig& c) {
  auto src = make_dataset_source(c, 0, 1);
  EXPECT_TRUE(src.ok()) << src.status().message();
  auto t = Trainer::create(c, nullptr, std::move(src).value());
  EXPECT_TRUE(t.ok()) << t.status().message();
  return t.ok() ? std::move(t).value() : nullptr;
}

std::string tmp(const std::string& tag) {
  const fs::path p = fs::temp_directory_path() / ("vlpar_dstrain_" + tag + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  return p.string();
}

std::vector<int64_t> ids_of(const MicroBatch& mb) {
  std::vector<int64_t> out = mb.pack.input_ids;
  out.insert(out.end(), mb.pack.labels.begin(), mb.pack.labels.end());
  out.insert(out.end(), mb.pack.positions.begin(), mb.pack.positions.end());
  for (float p : mb.pack.pixel_values) out.push_back(int64_t(std::bit_cast<uint32_t>(p)));
  return out;
}

TEST(DatasetSource, PacksTheDatasetAndResumesExactly) {
  const TrainConfig c = config(tmp("src"), 10);
  auto a = make_dataset_source(c, 0, 1).value();
  EXPECT_NE(a->describe().find("energon split 'train'"), std::string::npos) << a->describe();
  for (int i = 0; i < 3; ++i) {
    Result<MicroBatch> mb = a->next();
    ASSERT_TRUE(mb.ok()) << mb.status().message();
    EXPECT_GT(mb.value().images, 1);
    EXPECT_EQ(mb.value().real_tokens, int64_t(mb.value().pack.input_ids.size()));
    EXPECT_LE(mb.value().real_tokens, 768);
    EXPECT_EQ(int64_t(mb.value().pack.image_grids.size()), mb.value().images);
    EXPECT_EQ(mb.value().pack.cu_seqlens.size(), mb.value().pack.images_per_sample.size() + 1);
    EXPECT_TRUE(mb.value().pack.view().validate().ok());
  }
  const std::string state = a->state().value();
  std::vector<std::vector<int64_t>> want;
  for (int i = 0; i < 40; ++i) want.push_back(ids_of(a->next().value()));  // > one epoch: the corrupt one is met
  EXPECT_NE(a->summary().find("train-corrupt"), std::string::npos) << a->summary();
  auto b = make_dataset_source(c, 0, 1).value();
  ASSERT_TRUE(b->restore(state).ok());
  for (int i = 0; i < 40; ++i) EXPECT_EQ(ids_of(b->next().value()), want[size_t(i)]) << "micro-batch " << i;
  // Data-parallel ranks read disjoint samples.
  auto r0 = make_dataset_source(c, 0, 2).value();
  auto r1 = make_dataset_source(c, 1, 2).value();
  EXPECT_NE(ids_of(r0->next().value()), ids_of(r1->next().value()));
  // A bad dataset is an error naming it.
  TrainConfig bad = c;
  bad.data.train = "/nonexistent/dataset";
  Result<std::unique_ptr<BatchSource>> e = make_dataset_source(bad, 0, 1);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("/nonexistent/dataset"), std::string::npos) << e.status().message();
}

TEST(DatasetSource, TrainingResumeIsBitExact) {
  const std::string a = tmp("a"), b = tmp("b");
  TrainConfig ca = config(a, 4, {"--checkpoint.interval=2"});
  Result<TrainSummary> ra = make_trainer(ca)->run();
  ASSERT_TRUE(ra.ok()) << ra.status().message();
  TrainConfig cb = config(b, 2);
  ASSERT_TRUE(make_trainer(cb)->run().ok());
  cb.training.steps = 4;
  Result<TrainSummary> rb = make_trainer(cb)->run();
  ASSERT_TRUE(rb.ok()) << rb.status().message();
  EXPECT_EQ(rb.value().first_step, 2);
  ASSERT_EQ(rb.value().losses.size(), 2u);
  for (size_t i = 0; i < 2; ++i) EXPECT_EQ(rb.value().losses[i], ra.value().losses[2 + i]) << "step " << 3 + i;
  fs::remove_all(a);
  fs::remove_all(b);
}

TEST(VqaEval, ScoresExactAnswers) {
  EXPECT_TRUE(vqa_correct({10, 2}, {10, 2}));
  EXPECT_FALSE(vqa_correct({10}, {10, 2}));        // no <|im_end|>
  EXPECT_FALSE(vqa_correct({10, 11, 2}, {10, 2}));  // more than the answer
  EXPECT_FALSE(vqa_correct({11, 2}, {10, 2}));
}

TEST(VqaEval, AShortRunLearnsToLookAtThePicture) {
  const std::string d = tmp("learn");
  const TrainConfig c = config(d, 150);
  auto trainer = make_trainer(c);
  Result<TrainSummary> r = trainer->run();
  ASSERT_TRUE(r.ok()) << r.status().message();
  Allocator alloc;
  Context ctx = Context::cpu_default();
  ctx.num_threads = 2;
  ctx.allocator = &alloc;
  auto builder = make_conversation_builder(c.data).value();
  VqaEvalOptions o;
  o.dataset = dataset();
  o.split = "val";
  Result<VqaEvalReport> e = evaluate_vqa(ctx, trainer->model(), *builder, o, alloc);
  ASSERT_TRUE(e.ok()) << e.status().message();
  std::printf("%s\n", e.value().to_string().c_str());
  EXPECT_EQ(e.value().total, 64);
  EXPECT_DOUBLE_EQ(e.value().chance, 0.5);
  // Chance is 0.5; 64 questions answered at random exceed 0.75 with probability < 1e-4 (binomial tail).
  EXPECT_GE(e.value().accuracy(), 0.75) << e.value().to_string();
  // The checkpoint, loaded frozen for inference, gives the same answers.
  Result<CheckpointModel> cm = load_checkpoint_model(ctx, c.checkpoint.dir, Freeze{true, true, true}, alloc);
  ASSERT_TRUE(cm.ok()) << cm.status().message();
  EXPECT_EQ(cm.value().step, 150);
  EXPECT_EQ(cm.value().config.data.tokenizer, kTokenizer);
  Result<VqaEvalReport> e2 = evaluate_vqa(ctx, cm.value().model, *builder, o, alloc);
  ASSERT_TRUE(e2.ok()) << e2.status().message();
  EXPECT_EQ(e2.value().correct, e.value().correct);
  fs::remove_all(d);
}

}  // namespace
}  // namespace qwen3vl
