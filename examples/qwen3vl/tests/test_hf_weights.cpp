// HF checkpoints in and out: load → export reproduces every tensor of the fixture's model.safetensors bit for
// bit (the split of the fused dense gate_up back into gate_proj/up_proj, the Conv3d patch-embed shape, the fused
// vision qkv and MoE experts kept as on disk, the tied head left out); sharded export loads back to the same
// values; config.json round-trips; a checkpoint with a tensor missing, extra or misshapen is an error naming it.
#include <cstring>
#include <filesystem>

#include "model_test_util.hpp"
#include "vlpar/io/hf_checkpoint.hpp"
#include "vlpar/io/safetensors.hpp"

namespace qwen3vl {
namespace {

namespace fs = std::filesystem;
namespace io = vlpar::io;

std::string temp_dir(const std::string& tag) {
  const fs::path p = fs::temp_directory_path() / ("vlpar_hf_" + tag + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  return p.string();
}

// Every tensor of `a` has the same dtype, shape and bytes in `b`, and b has no others.
void expect_same_tensors(const std::string& dir_a, const std::string& dir_b) {
  Result<io::HfTensorSource> a = io::HfTensorSource::open(dir_a), b = io::HfTensorSource::open(dir_b);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a.value().names(), b.value().names());
  for (const std::string& n : a.value().names()) {
    const io::TensorInfo* ia = a.value().find(n);
    const io::TensorInfo* ib = b.value().find(n);
    EXPECT_EQ(ia->dtype_name, ib->dtype_name) << n;
    EXPECT_EQ(ia->dims, ib->dims) << n;
    Allocator alloc;
    Tensor ta = Tensor::empty(alloc, ia->shape, ia->dtype).value(), tb = Tensor::empty(alloc, ib->shape, ib->dtype).value();
    ASSERT_TRUE(a.value().read(n, ta).ok() && b.value().read(n, tb).ok());
    EXPECT_TRUE(test::bitwise(ta, tb)) << n;
  }
}

class HfRoundTrip : public ::testing::TestWithParam<std::string> {};

TEST_P(HfRoundTrip, LoadThenExportIsBitExactAndConfigRoundTrips) {
  test::Loaded l;
  test::load(l, GetParam());
  const std::string out = temp_dir("rt_" + GetParam());
  ASSERT_TRUE(export_hf(*l.model, out).ok());
  expect_same_tensors(test::fixture(GetParam()), out);
  Result<Config> back = load_hf_config(out);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_TRUE(back.value() == l.model->config());
  fs::remove_all(out);
}

TEST_P(HfRoundTrip, ShardedExportLoadsBackToTheSameValues) {
  test::Loaded l;
  test::load(l, GetParam());
  const std::string out = temp_dir("sh_" + GetParam());
  ASSERT_TRUE(export_hf(*l.model, out, vlpar::DType::kF32, 64 * 1024).ok());
  EXPECT_TRUE(fs::exists(out + "/model.safetensors.index.json"));
  Allocator alloc;
  Context ctx = Context::cpu_default();
  Result<Model> again = load_hf_model(ctx, out, Freeze{}, alloc);
  ASSERT_TRUE(again.ok()) << again.status().message();
  for (size_t i = 0; i < l.model->registry().size(); ++i)
    EXPECT_TRUE(test::bitwise(again.value().registry().value(i), l.model->registry().value(i)))
        << l.model->registry().name(i);
  fs::remove_all(out);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, HfRoundTrip, ::testing::Values("dense", "moe", "unseen_dense"));

// Writes the fixture's tensors with one dropped / one added / one reshaped, then expects load to name it.
void expect_load_error(const std::string& tag, const std::function<void(std::vector<io::NamedTensor>&)>& edit,
                       const std::string& needle) {
  test::Loaded l;
  test::load(l, "dense");
  Result<std::vector<io::NamedTensor>> tensors = hf_tensors(*l.model, HfWhich::kValues);
  ASSERT_TRUE(tensors.ok());
  edit(tensors.value());
  const std::string dir = temp_dir(tag);
  ASSERT_TRUE(io::write_hf_safetensors(dir, tensors.value()).ok());
  fs::copy_file(test::fixture("dense") + "/config.json", dir + "/config.json");
  Allocator alloc;
  Result<Model> m = load_hf_model(Context::cpu_default(), dir, Freeze{}, alloc);
  ASSERT_FALSE(m.ok()) << tag;
  EXPECT_NE(m.status().message().find(needle), std::string::npos) << m.status().message();
  fs::remove_all(dir);
}

TEST(HfLoad, MissingTensorIsNamed) {
  const std::string victim = "model.language_model.layers.1.mlp.up_proj.weight";
  expect_load_error("missing", [&](auto& t) { std::erase_if(t, [&](const io::NamedTensor& x) { return x.name == victim; }); },
                    victim);
}

TEST(HfLoad, UnknownTensorIsNamed) {
  float extra[4] = {};
  expect_load_error("extra",
                    [&](auto& t) { t.push_back({"model.visual.blocks.9.norm1.weight", TensorView(extra, vlpar::DType::kF32, vlpar::Shape{4})}); },
                    "model.visual.blocks.9.norm1.weight");
}

TEST(HfLoad, MisshapenTensorIsNamed) {
  expect_load_error("shape",
                    [&](auto& t) {
                      for (io::NamedTensor& x : t)
                        if (x.name == "model.visual.merger.linear_fc2.bias") x.view = x.view.slice(0, 0, 3);
                    },
                    "model.visual.merger.linear_fc2.bias");
}

// A pipeline rank's part (PipelinePart) reads its own tensors from a whole HF directory: every parameter it holds
// equals the whole model's; the other stages' tensors are not "unknown"; a tensor no part holds still is.
// vlpar's expert bias (text.router_expert_bias): an HF checkpoint without it loads with zero biases (routing as
// HF), every other tensor as before; an export writes the biases and the config key, and loads back bit for bit
// into a model that has them again; a model without them names the tensors as unknown.
TEST(HfLoad, ExpertBiasStartsAtZeroAndRoundTripsThroughExport) {
  test::Loaded plain;
  test::load(plain, "moe");
  Config cfg = plain.model->config();
  cfg.text.router_expert_bias = true;
  Allocator alloc;
  const Context ctx = Context::cpu_default();
  Result<Model> m = Model::create(ctx, cfg, Freeze{}, std::nullopt, alloc);
  ASSERT_TRUE(m.ok()) << m.status().message();
  ASSERT_TRUE(load_hf_weights(m.value(), test::fixture("moe")).ok());
  int biased = 0;
  for (int l = 0; l < cfg.text.layers; ++l) {
    const TensorView b = m.value().expert_bias(l);
    if (b.empty()) continue;
    ++biased;
    for (int64_t e = 0; e < b.numel(); ++e) EXPECT_EQ(b.ptr<float>()[e], 0.f) << "layer " << l;
    for (int64_t e = 0; e < b.numel(); ++e) b.ptr<float>()[e] = 0.01f * float(e - l);  // as if trained
  }
  EXPECT_EQ(biased, cfg.text.num_moe_layers());
  for (size_t i = 0; i < plain.model->registry().size(); ++i)  // the HF tensors as without the bias
    EXPECT_TRUE(test::bitwise(m.value().registry().value(i), plain.model->registry().value(i)))
        << plain.model->registry().name(i);
  const std::string out = temp_dir("bias");
  ASSERT_TRUE(export_hf(m.value(), out).ok());
  Allocator alloc2;
  Result<Model> back = load_hf_model(ctx, out, Freeze{}, alloc2);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_TRUE(back.value().config().text.router_expert_bias);
  for (size_t i = 0; i < m.value().registry().size(); ++i)
    EXPECT_TRUE(test::bitwise(back.value().registry().value(i), m.value().registry().value(i)))
        << m.value().registry().name(i);
  Allocator alloc3;
  Result<Model> without = Model::create(ctx, plain.model->config(), Freeze{}, std::nullopt, alloc3);
  ASSERT_TRUE(without.ok());
  const Status s = load_hf_weights(without.value(), out);
  EXPECT_NE(s.message().find("mlp.gate.e_score_correction_bias"), std::string::npos) << s.message();
  fs::remove_all(out);
}

TEST(HfLoad, PipelinePartsReadTheirStagesOnly) {
  test::Loaded whole;
  test::load(whole, "dense");
  const PipelinePart parts[] = {PipelinePart::of({{0, 2}}, true, false), PipelinePart::of({{2, 3}}, false, true),
                                PipelinePart::of({{1, 2}}, false, false)};
  for (const PipelinePart& part : parts) {
    Allocator alloc;
    const Context ctx = Context::cpu_default();
    Result<Model> m = Model::create(ctx, whole.model->config(), Freeze{}, std::nullopt, alloc, {}, part);
    ASSERT_TRUE(m.ok()) << m.status().message();
    const Status s = load_hf_weights(m.value(), test::fixture("dense"));
    ASSERT_TRUE(s.ok()) << s.message();
    const nn::ParamRegistry& reg = m.value().registry();
    ASSERT_GT(reg.size(), 0u);
    for (size_t i = 0; i < reg.size(); ++i) {
      const auto w = whole.model->registry().find(reg.name(i));
      ASSERT_TRUE(w.has_value()) << reg.name(i);
      const TensorView a = reg.value(i), b = whole.model->registry().value(*w);
      EXPECT_EQ(std::memcmp(a.data, b.data, size_t(a.nbytes())), 0) << reg.name(i);
    }
  }
  // An unknown layer is still named for a part.
  float extra[4] = {};
  Result<std::vector<io::NamedTensor>> tensors = hf_tensors(*whole.model, HfWhich::kValues);
  ASSERT_TRUE(tensors.ok());
  tensors.value().push_back({"model.language_model.layers.x.bias", TensorView(extra, vlpar::DType::kF32, {4})});
  const std::string dir = temp_dir("part_extra");
  ASSERT_TRUE(io::write_hf_safetensors(dir, tensors.value()).ok());
  Allocator alloc;
  Result<Model> m = Model::create(Context::cpu_default(), whole.model->config(), Freeze{}, std::nullopt, alloc, {},
                                  parts[1]);
  ASSERT_TRUE(m.ok());
  const Status s = load_hf_weights(m.value(), dir);
  EXPECT_NE(s.message().find("model.language_model.layers.x.bias"), std::string::npos) << s.message();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace qwen3vl
