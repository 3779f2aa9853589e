// Freezing: a frozen group allocates no gradient (the registry's grad views are empty and the allocator holds
// less), its weight-gradient GEMMs are skipped, and every trainable gradient is bitwise the same as in the
// unfrozen run (the same kernels see the same inputs; only work is removed). The backward's ready hook reports
// every trainable parameter exactly once, in Model::backward_order(), and never a frozen one (the data-parallel
// optimizer has no slot for it: a frozen MoE layer once reported its weights and failed the trainer).
#include <cmath>

#include "model_test_util.hpp"

namespace qwen3vl {
namespace {

struct Case {
  const char* label;
  Freeze freeze;
};

void run_step(test::Loaded& l) {
  Stash st;
  ASSERT_TRUE(l.model->forward(l.ctx, l.batch->view(), st).ok());
  std::vector<size_t> reported;
  const nn::GradReadyFn ready = [&](size_t i) {
    reported.push_back(i);
    return Status::Ok();
  };
  ASSERT_TRUE(l.model->backward(l.ctx, l.batch->view(), st, 1.f, ready).ok());
  std::vector<size_t> want;
  for (size_t i : l.model->backward_order())
    if (!l.model->registry().frozen(i)) want.push_back(i);
  EXPECT_EQ(reported, want);
}

void check_freeze(const std::string& fixture, const Case& c) {
  test::Loaded full, part;
  test::load(full, fixture);
  test::load(part, fixture, c.freeze);
  run_step(full);
  run_step(part);
  const nn::ParamRegistry& fr = full.model->registry();
  const nn::ParamRegistry& pr = part.model->registry();
  int frozen = 0;
  for (size_t i = 0; i < pr.size(); ++i) {
    const std::string& g = pr.entry(i).group;
    const bool want_frozen = (g == "vision" && c.freeze.vision) || (g == "merger" && c.freeze.merger) ||
                             (g == "language_model" && c.freeze.language_model);
    EXPECT_EQ(pr.frozen(i), want_frozen) << pr.name(i);
    if (want_frozen) {
      EXPECT_TRUE(pr.grad(i).empty()) << pr.name(i);
      ++frozen;
    } else {
      EXPECT_TRUE(test::bitwise(pr.grad(i), fr.grad(i))) << c.label << ": " << pr.name(i);
    }
  }
  EXPECT_GT(frozen, 0);
  EXPECT_LT(pr.counts().grad_bytes, fr.counts().grad_bytes);
}

TEST(Freeze, VisionTower) { check_freeze("dense", {"vision", {true, false, false}}); }
TEST(Freeze, VisionAndMergers) { check_freeze("dense", {"vision+merger", {true, true, false}}); }
TEST(Freeze, LanguageModel) { check_freeze("moe", {"language_model", {false, false, true}}); }
TEST(Freeze, MergersOnlyTrainable) { check_freeze("moe", {"vision+lm", {true, false, true}}); }

// text_config.pad_token_id is nn.Embedding's padding_idx in transformers: the row of that id in embed_tokens gets
// no gradient, every other gradient is bitwise the one of the run without it (issue 18: it was parsed and ignored).
TEST(PadTokenId, ItsEmbeddingRowGetsNoGradientAndNothingElseChanges) {
  test::Loaded plain;
  test::load(plain, "dense");
  const Config& cfg = plain.model->config();
  const TensorView ids = plain.batch->view().input_ids;
  int64_t pad = -1;  // a text token of the batch (visual pad rows get no embedding gradient anyway)
  for (int64_t i = 0; i < ids.numel() && pad < 0; ++i) {
    const int64_t id = vlpar::index_at(ids, i);
    if (id != cfg.image_token_id && id != cfg.video_token_id) pad = id;
  }
  ASSERT_GE(pad, 0);
  test::Loaded padded;
  test::load(padded, "dense", {}, [pad](Config& c) { c.text.pad_token_id = pad; });
  run_step(plain);
  run_step(padded);
  const nn::ParamRegistry& a = plain.model->registry();
  const nn::ParamRegistry& b = padded.model->registry();
  for (size_t i = 0; i < a.size(); ++i) {
    if (a.name(i) != "model.language_model.embed_tokens.weight") {
      EXPECT_TRUE(test::bitwise(a.grad(i), b.grad(i))) << a.name(i);
      continue;
    }
    const TensorView ga = a.grad(i), gb = b.grad(i);
    const int64_t H = ga.size(1);
    double row_plain = 0.0;
    for (int64_t r = 0; r < ga.size(0); ++r)
      for (int64_t c = 0; c < H; ++c) {
        const float va = ga.ptr<float>()[r * H + c], vb = gb.ptr<float>()[r * H + c];
        if (r == pad) {
          row_plain += std::abs(double(va));
          ASSERT_EQ(vb, 0.f) << "row " << pad << " (pad_token_id) has a gradient";
        } else {
          ASSERT_EQ(va, vb) << "embed_tokens row " << r;
        }
      }
    EXPECT_GT(row_plain, 0.0) << "the pad id's row has no gradient even without pad_token_id: the test shows nothing";
  }
}

}  // namespace
}  // namespace qwen3vl
