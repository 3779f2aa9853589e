// Freezing: a frozen group allocates no gradient (the registry's grad views are empty and the allocator holds
// less), its weight-gradient GEMMs are skipped, and every trainable gradient is bitwise the same as in the
// unfrozen run (the same kernels see the same inputs; only work is removed). The backward's ready hook reports
// every trainable parameter exactly once, in Model::backward_order(), and never a frozen one (the data-parallel
// optimizer has no slot for it: a frozen MoE layer once reported its weights and failed the trainer).
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

}  // namespace
}  // namespace qwen3vl
