#pragma once
// Shared helpers of the example's model tests: loading a golden fixture, splitting a pack into its samples,
// comparing gradient sets.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "batch_io.hpp"
#include "hf_weights.hpp"
#include "train_config.hpp"

namespace qwen3vl {
namespace nn = vlpar::nn;
}  // namespace qwen3vl

namespace qwen3vl::test {

inline std::string fixture(const std::string& name) { return std::string(VLPAR_FIXTURES_DIR) + "/qwen3vl/" + name; }

/// The MRoPE ids of the fixtures' models (the dense and the MoE fixture share them), for load_batch.
inline vlpar::data::MropeDesc fixture_mrope_desc() {
  Result<Config> c = load_hf_config(fixture("dense"));
  EXPECT_TRUE(c.ok()) << c.status().message();
  return c.ok() ? c.value().mrope_desc() : vlpar::data::MropeDesc{};
}

/// The trainer config of the multi-process trainer tests: the dense fixture's model, `steps` steps at tensor
/// parallel `tp`, one thread per rank, warmup 1, checkpoints in <dir>/ckpt and metrics in dir (no TensorBoard, no
/// trace, a fixed MFU peak), then `extra` overrides.
inline TrainConfig mpi_trainer_config(const std::string& dir, int tp, int steps, const std::vector<std::string>& extra) {
  std::vector<std::string> o = {"--model.config_json=" + fixture("dense") + "/config.json",
                                "--parallel.tp=" + std::to_string(tp),
                                "--training.steps=" + std::to_string(steps),
                                "--training.threads=1",
                                "--schedule.warmup_steps=1",
                                "--checkpoint.dir=" + dir + "/ckpt",
                                "--metrics.dir=" + dir,
                                "--metrics.peak_gflops=100",
                                "--metrics.tensorboard=false",
                                "--metrics.trace=false"};
  o.insert(o.end(), extra.begin(), extra.end());
  Result<TrainConfig> c = parse_train_config("", "mpi test", o);
  EXPECT_TRUE(c.ok()) << c.status().message();
  return c.ok() ? c.value() : TrainConfig{};
}

/// A model loaded from a fixture directory with its own allocator and context.
struct Loaded {
  Allocator alloc;
  Context ctx = Context::cpu_default();
  std::optional<Model> model;
  std::optional<vlpar::data::PackedBatch> batch;
};

/// @brief Loads fixture `name` with `freeze`; `edit` may change the config before the model is built.
template <class Edit = void (*)(Config&)>
void load(Loaded& l, const std::string& name, const Freeze& freeze = {}, Edit edit = [](Config&) {}) {
  l.ctx.allocator = &l.alloc;
  Result<Config> cfg = load_hf_config(fixture(name));
  ASSERT_TRUE(cfg.ok()) << cfg.status().message();
  edit(cfg.value());
  Result<Model> m = Model::create(l.ctx, cfg.value(), freeze, 0, l.alloc);
  ASSERT_TRUE(m.ok()) << m.status().message();
  l.model.emplace(std::move(m).value());
  ASSERT_TRUE(load_hf_weights(*l.model, fixture(name)).ok());
  Result<vlpar::data::PackedBatch> b = load_batch(fixture(name) + "/batch.safetensors", l.model->config().mrope_desc());
  ASSERT_TRUE(b.ok()) << b.status().message();
  l.batch.emplace(std::move(b).value());
}

/// @brief Writes the dense fixture's batch with every pixel NaN to `path` (a poisoned micro-batch: the vision
/// features and then every hidden state and router logit go NaN).
inline void write_nan_pixel_batch(const std::string& path) {
  Result<vlpar::data::PackedBatch> lb = load_batch(fixture("dense") + "/batch.safetensors", fixture_mrope_desc());
  ASSERT_TRUE(lb.ok()) << lb.status().message();
  for (float& v : lb.value().pixel_values) v = NAN;
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
  ASSERT_TRUE(vlpar::io::write_safetensors(path, t).ok());
}

/// @brief Sample s of a pack as a pack of its own (data::sample_of_pack); the test fails on an error.
inline vlpar::data::PackedBatch sample_of(const vlpar::data::PackedBatch& pack, int64_t s) {
  Result<vlpar::data::PackedBatch> r = vlpar::data::sample_of_pack(pack, s);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? std::move(r).value() : vlpar::data::PackedBatch{};
}

/// @brief max|a − b| / max|b| of two f32 tensors of one shape.
inline double rel_diff(TensorView a, TensorView b) {
  double diff = 0, scale = 0;
  for (int64_t i = 0; i < b.numel(); ++i) {
    diff = std::max(diff, double(std::abs(a.ptr<float>()[i] - b.ptr<float>()[i])));
    scale = std::max(scale, double(std::abs(b.ptr<float>()[i])));
  }
  return scale > 0 ? diff / scale : diff;
}

inline bool bitwise(TensorView a, TensorView b) {
  return a.shape == b.shape && std::memcmp(a.data, b.data, a.nbytes()) == 0;
}

}  // namespace qwen3vl::test
