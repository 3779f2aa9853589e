// Parity with HF transformers 4.57.1 (fp32, eager attention, train mode): the golden fixtures of tools/golden
// (tests/fixtures/qwen3vl/{dense,moe}) hold tiny random models in HF format, a packed batch (two images of
// different sizes, a video with 2 temporal patches, plain text, 3 samples) and HF's logits, losses, vision
// outputs, MRoPE positions and every parameter gradient.
// Tolerances (relative to the largest reference magnitude of each tensor, max|a − b| / max|b|):
//   logits 1e-5, gradients 1e-4 (the bounds). Both runs are fp32 with different accumulation orders
//   (Eigen GEMM blocking and FA2 online softmax vs torch's); the expected gap is a few u32 = 6e-8 per op times
//   the depth of the graph (~20 ops to the logits, ~2× that for gradients), i.e. ~1e-6 and ~1e-5 — the bounds keep
//   an order of magnitude of slack. Positions compare exactly.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "batch_io.hpp"
#include "hf_weights.hpp"
#include "vlpar/io/safetensors.hpp"

namespace qwen3vl {
namespace {

namespace io = vlpar::io;
using vlpar::DType;

std::string fixture(const std::string& name) { return std::string(VLPAR_FIXTURES_DIR) + "/qwen3vl/" + name; }

// max|a − b| / max|b| over a reference tensor of the expected file.
double rel_error(const io::SafetensorsFile& expected, const std::string& name, TensorView got, Allocator& alloc) {
  const io::TensorInfo* info = expected.find(name);
  EXPECT_NE(info, nullptr) << name;
  if (info == nullptr) return INFINITY;
  EXPECT_EQ(info->shape, got.shape) << name;
  if (!(info->shape == got.shape)) return INFINITY;
  Tensor ref = Tensor::empty(alloc, info->shape, DType::kF64).value();
  EXPECT_TRUE(expected.read(name, ref).ok());
  Tensor mine = Tensor::empty(alloc, got.shape, DType::kF64).value();
  EXPECT_TRUE(vlpar::convert_(mine, got).ok());
  double diff = 0, scale = 0;
  for (int64_t i = 0; i < ref.numel(); ++i) {
    diff = std::max(diff, std::abs(mine.ptr<double>()[i] - ref.ptr<double>()[i]));
    scale = std::max(scale, std::abs(ref.ptr<double>()[i]));
  }
  return scale > 0 ? diff / scale : diff;
}

double scalar(const io::SafetensorsFile& f, const std::string& name) {
  float v = NAN;
  EXPECT_TRUE(f.read(name, TensorView(&v, DType::kF32, vlpar::Shape{})).ok()) << name;
  return v;
}

class Parity : public ::testing::TestWithParam<std::string> {};

TEST_P(Parity, LogitsLossesPositionsAndEveryGradientMatchTransformers) {
  const std::string dir = fixture(GetParam());
  Allocator alloc;
  Context ctx = Context::cpu_default();
  ctx.allocator = &alloc;
  Result<Model> model = load_hf_model(ctx, dir, Freeze{}, alloc);
  ASSERT_TRUE(model.ok()) << model.status().message();
  Result<vlpar::data::PackedBatch> lb = load_batch(dir + "/batch.safetensors", model.value().config().mrope_desc());
  ASSERT_TRUE(lb.ok()) << lb.status().message();
  Result<io::SafetensorsFile> expected = io::SafetensorsFile::open(dir + "/expected.safetensors");
  ASSERT_TRUE(expected.ok()) << expected.status().message();
  const io::SafetensorsFile& ex = expected.value();

  Stash stash;
  Result<StepLoss> loss = model.value().forward(ctx, lb.value().view(), stash);
  ASSERT_TRUE(loss.ok()) << loss.status().message();

  // Positions: exact.
  Tensor pos = Tensor::empty(alloc, stash.positions.shape, DType::kI64).value();
  ASSERT_TRUE(ex.read("position_ids", pos).ok());
  for (int64_t i = 0; i < pos.numel(); ++i)
    ASSERT_EQ(pos.ptr<int64_t>()[i], stash.positions.ptr<int64_t>()[i]) << "position_ids flat index " << i;

  // Vision outputs (a diagnostic on the way to the logits).
  if (stash.image) {
    EXPECT_LE(rel_error(ex, "image_embeds", stash.image->out.merged, alloc), 1e-5);
    for (size_t j = 0; j < stash.image->out.deepstack.size(); ++j)
      EXPECT_LE(rel_error(ex, "deepstack_image_embeds." + std::to_string(j), stash.image->out.deepstack[j], alloc),
                1e-5);
  }
  if (stash.video) {
    EXPECT_LE(rel_error(ex, "video_embeds", stash.video->out.merged, alloc), 1e-5);
  }

  Result<Tensor> logits = model.value().logits(ctx, stash, alloc);
  ASSERT_TRUE(logits.ok()) << logits.status().message();
  EXPECT_LE(rel_error(ex, "logits", logits.value(), alloc), 1e-5);
  EXPECT_NEAR(loss.value().ce_loss, scalar(ex, "ce_loss"), 1e-5 * std::abs(scalar(ex, "ce_loss")));
  EXPECT_NEAR(loss.value().aux_loss, scalar(ex, "aux_loss"), 1e-5 * std::abs(scalar(ex, "aux_loss")) + 1e-9);
  EXPECT_NEAR(loss.value().loss, scalar(ex, "loss"), 1e-5 * std::abs(scalar(ex, "loss")));

  ASSERT_TRUE(model.value().backward(ctx, lb.value().view(), stash).ok());
  Result<std::vector<io::NamedTensor>> grads = hf_tensors(model.value(), HfWhich::kGrads, "grad.");
  ASSERT_TRUE(grads.ok()) << grads.status().message();
  size_t expected_grads = 0;
  for (const io::TensorInfo& t : ex.tensors()) expected_grads += t.name.starts_with("grad.");
  EXPECT_EQ(grads.value().size(), expected_grads);
  double worst = 0;
  std::string worst_name;
  for (const io::NamedTensor& g : grads.value()) {
    const double e = rel_error(ex, g.name, g.view, alloc);
    EXPECT_LE(e, 1e-4) << g.name;
    if (e > worst) worst = e, worst_name = g.name;
  }
  std::printf("[parity %s] logits rel %.2e, worst gradient rel %.2e (%s), loss %.7f vs %.7f\n", GetParam().c_str(),
              rel_error(ex, "logits", logits.value(), alloc), worst, worst_name.c_str(), loss.value().loss,
              scalar(ex, "loss"));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Parity, ::testing::Values("dense", "moe"));

}  // namespace
}  // namespace qwen3vl
