// The trainer's TOML config: every key maps one to one, overrides win over the file, unknown keys and wrong types
// are errors naming file, line and key, validation gives one sentence, and the printed config parses back equal.
#include <gtest/gtest.h>

#include "train_config.hpp"

namespace qwen3vl {
namespace {

TEST(TrainConfig, FileThenOverridesThenValidate) {
  const std::string toml = R"(
[model]
preset = "tiny-moe"
freeze_vision = true
[training]
steps = 50
recompute = "selective"
[optimizer]
lr = 3e-4
)";
  const std::vector<std::string> overrides = {"--training.steps=70", "data.workers=3", "--optimizer.beta2=0.99"};
  Result<TrainConfig> c = parse_train_config(toml, "t.toml", overrides);
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c.value().model.preset, "tiny-moe");
  EXPECT_TRUE(c.value().model.freeze_vision);
  EXPECT_EQ(c.value().training.steps, 70);
  EXPECT_EQ(c.value().training.recompute, "selective");
  EXPECT_EQ(c.value().data.loader.num_workers, 3);
  EXPECT_FLOAT_EQ(c.value().optimizer.adamw.lr, 3e-4f);
  EXPECT_FLOAT_EQ(c.value().optimizer.adamw.beta2, 0.99f);
}

// Keys land in the library's configs, and the derived fields follow the keys they depend on.
TEST(TrainConfig, KeysFillTheLibraryConfigs) {
  const std::vector<std::string> o = {"--training.steps=40",       "--schedule.warmup_steps=4",
                                      "--optimizer.min_lr_ratio=0.2", "--schedule.decay=linear",
                                      "--training.max_grad_norm=0.5", "--parallel.zero1=true",
                                      "--parallel.bucket_mb=2",       "--data.token_budget=512",
                                      "--data.patch_budget=99",       "--data.seed=5",
                                      "--data.shuffle_buffer=7",      "--parallel.tp=2"};
  Result<TrainConfig> c = parse_train_config("", "t", o);
  ASSERT_TRUE(c.ok()) << c.status().message();
  const TrainConfig& t = c.value();
  EXPECT_EQ(t.schedule.total_steps, 40);
  EXPECT_EQ(t.schedule.warmup_steps, 4);
  EXPECT_EQ(t.schedule.min_lr_ratio, 0.2);
  EXPECT_EQ(t.schedule.decay, "linear");
  EXPECT_EQ(t.optimizer.max_grad_norm, 0.5);
  EXPECT_TRUE(t.optimizer.zero1);
  EXPECT_EQ(t.optimizer.bucket_bytes, size_t(2) << 20);
  EXPECT_EQ(t.data.loader.packing.max_tokens, 512);
  EXPECT_EQ(t.data.loader.packing.max_patches, 99);
  EXPECT_EQ(t.data.stream.seed, 5u);
  EXPECT_EQ(t.data.stream.shuffle_buffer, 7);
  EXPECT_EQ(t.parallel.tp, 2);
  // The schedule the trainer runs: warmup to the peak, linear to 0.2 · lr at the end.
  EXPECT_FLOAT_EQ(float(t.schedule.at(t.optimizer.adamw.lr, 3)), t.optimizer.adamw.lr);
  EXPECT_NEAR(t.schedule.at(1.0, 40), 0.2, 1e-12);
  // The library's own checks run too (an AdamW beta2 of 1 is rejected by both).
  Result<TrainConfig> bad = parse_train_config("", "t", std::vector<std::string>{"--optimizer.beta2=1"});
  ASSERT_FALSE(bad.ok());
}

TEST(TrainConfig, PrintedConfigParsesBackEqual) {
  const std::vector<std::string> overrides = {"--data.train=/d/x y", "--metrics.peak_gflops=12.5",
                                              "--model.seed=9223372036854775807"};
  Result<TrainConfig> c = parse_train_config("", "defaults", overrides);
  ASSERT_TRUE(c.ok()) << c.status().message();
  const std::string text = c.value().to_toml();
  Result<TrainConfig> back = parse_train_config(text, "printed");
  ASSERT_TRUE(back.ok()) << back.status().message() << "\n" << text;
  EXPECT_EQ(back.value().to_toml(), text);
  EXPECT_EQ(back.value().data.train, "/d/x y");
  EXPECT_EQ(back.value().model.seed, 9223372036854775807ull);
}

void expect_error(const std::string& toml, const std::vector<std::string>& overrides, const std::string& needle) {
  Result<TrainConfig> c = parse_train_config(toml, "bad.toml", overrides);
  ASSERT_FALSE(c.ok()) << toml;
  EXPECT_NE(c.status().message().find(needle), std::string::npos) << c.status().message();
}

TEST(TrainConfig, ErrorsNameFileLineAndKey) {
  expect_error("[training]\nstpes = 3\n", {}, "bad.toml:2: unknown key training.stpes");
  expect_error("[trainin]\nsteps = 3\n", {}, "unknown section [trainin]");
  expect_error("[training]\nsteps = \"many\"\n", {}, "bad.toml:2: training.steps = \"many\" must be a 32-bit integer");
  expect_error("[training]\nsteps = 99999999999\n", {},
               "bad.toml:2: training.steps = 99999999999 is out of range for a 32-bit integer");
  expect_error("[training]\nsteps = [3]\n", {}, "bad.toml:2: training.steps = a TOML array must be a 32-bit integer");
  expect_error("[model]\nfreeze_vision = 1\n", {}, "model.freeze_vision = 1 must be true or false");
  expect_error("[training\n", {}, "bad.toml:1");
  expect_error("", {"--training.steps=ten"}, "training.steps must be a 32-bit integer");
  expect_error("", {"--training.step=10"}, "unknown key training.step");
  expect_error("", {"training.steps"}, "--section.key=value");
  expect_error("", {"--model.seed=-1"}, "model.seed is out of range for an integer in [0, 2^63)");
  expect_error("", {"--model.seed=18446744073709551615"}, "model.seed is out of range for an integer in [0, 2^63)");
  expect_error("", {"--training.steps=4294967296"}, "training.steps is out of range for a 32-bit integer");
}

TEST(TrainConfig, ValidationIsOneSentenceNamingTheKey) {
  expect_error("", {"--training.recompute=some"}, "training.recompute must be none, selective or full");
  expect_error("", {"--training.dtype=f16"}, "training.dtype must be f32 or bf16, got 'f16'");
  expect_error("", {"--checkpoint.export_dtype=f64"}, "checkpoint.export_dtype must be f32 or bf16, got 'f64'");
  const std::vector<std::string> bf16 = {"--training.dtype=bf16", "--checkpoint.export_dtype=bf16"};
  EXPECT_TRUE(parse_train_config("", "ok.toml", bf16).ok());
  expect_error("", {"--schedule.warmup_steps=500", "--training.steps=100"}, "schedule.warmup_steps 500");
  expect_error("", {"--data.mode=chat"}, "data.mode must be sft or caption");
  expect_error("", {"--model.hf_dir=a", "--model.config_json=b"}, "at most one of model.hf_dir");
  expect_error("", {"--optimizer.beta2=1"}, "optimizer.beta1 and beta2");
  expect_error("", {"--parallel.pp=0"}, "parallel.pp and parallel.vpp must be >= 1, got 0 and 1");
  expect_error("", {"--training.eval_batches=0"}, "training.eval_interval must be >= 0 and training.eval_batches >= 1, "
               "got 0 and 0");
  expect_error("", {"--parallel.schedule=zb"}, "parallel.schedule must be gpipe, 1f1b, interleaved, zb_h1 or zb_v, "
               "got 'zb'");
  expect_error("", {"--parallel.schedule=zb_v"}, "zb_v (two chunks per rank in a V) vpp = 2");
  expect_error("", {"--parallel.schedule=zb_h1", "--parallel.vpp=2"},
               "parallel.schedule = 'zb_h1' with parallel.vpp = 2");
  expect_error("", {"--parallel.schedule=interleaved"}, "the interleaved schedule needs vpp > 1");
  expect_error("", {"--parallel.vpp=2"}, "parallel.schedule = '1f1b' with parallel.vpp = 2");
  expect_error("", {"--parallel.pp=2", "--checkpoint.export_hf=out"}, "checkpoint.export_hf needs parallel.tp = 1, "
               "parallel.vision_tp = 1 and parallel.pp = 1, got tp 1, vision_tp 0 and pp 2");
  expect_error("", {"--parallel.vision_tp=3", "--parallel.tp=2"}, "parallel.vision_tp = 3 and parallel.tp = 2: one "
               "must divide the other");
  expect_error("", {"--parallel.ep=2", "--parallel.tp=2"}, "parallel.ep = 2 with parallel.tp = 2 needs "
               "parallel.sequence_parallel = true");
  expect_error("", {"--moe.expert_bias_rate=-0.001"}, "moe.expert_bias_rate must be finite and not negative");
  expect_error("", {"--moe.z_loss_coef=-1"}, "moe.z_loss_coef must be finite and not negative, got -1");
  expect_error("", {"--moe.seq_aux_coef=-1"}, "moe.seq_aux_coef must be finite and not negative, got -1");
}

TEST(TrainConfig, MissingFileIsAnIoError) {
  Result<TrainConfig> c = load_train_config("/nonexistent/train.toml");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("/nonexistent/train.toml"), std::string::npos);
}

}  // namespace
}  // namespace qwen3vl
