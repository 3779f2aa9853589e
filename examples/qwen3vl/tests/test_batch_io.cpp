// The batch file of the example's programs: optional tensors really are optional (a text-only batch with just
// input_ids runs), and malformed batches are errors naming the file and the tensor — never a crash.
#include <filesystem>

#include "model_test_util.hpp"
#include "vlpar/io/safetensors.hpp"

namespace qwen3vl {
namespace {

namespace io = vlpar::io;
using vlpar::DType;
using vlpar::Shape;

std::string write_batch(const std::string& tag, const std::vector<io::NamedTensor>& tensors) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("vlpar_batch_" + tag + "_" + std::to_string(::getpid()) + ".safetensors"))
                               .string();
  EXPECT_TRUE(io::write_safetensors(path, tensors).ok());
  return path;
}

TEST(BatchIo, InputIdsAloneIsATextOnlySampleWithoutLabels) {
  std::vector<int64_t> ids = {9, 10, 11, 12, 13};
  const std::string path = write_batch("ids", {{"input_ids", TensorView(ids.data(), DType::kI64, Shape{5})}});
  Result<vlpar::data::PackedBatch> lb = load_batch(path, test::fixture_mrope_desc());
  ASSERT_TRUE(lb.ok()) << lb.status().message();
  EXPECT_EQ(lb.value().cu_seqlens.size(), 2u);
  EXPECT_EQ(lb.value().labels[3], -100);
  EXPECT_TRUE(lb.value().image_grids.empty());
  EXPECT_TRUE(lb.value().images_per_sample.empty());
  const std::vector<int64_t> text_positions = {0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 0, 1, 2, 3, 4};
  EXPECT_EQ(lb.value().positions, text_positions);  // computed once, at load: text rows T = H = W
  test::Loaded l;
  test::load(l, "dense");
  Stash st;
  Result<StepLoss> loss = l.model->forward(l.ctx, lb.value().view(), st);
  ASSERT_TRUE(loss.ok()) << loss.status().message();
  EXPECT_EQ(loss.value().num_label_tokens, 0);
  std::filesystem::remove(path);
}

void expect_error(const std::string& tag, const std::vector<io::NamedTensor>& tensors, const std::string& needle) {
  const std::string path = write_batch(tag, tensors);
  Result<vlpar::data::PackedBatch> lb = load_batch(path, test::fixture_mrope_desc());
  ASSERT_FALSE(lb.ok()) << tag;
  EXPECT_NE(lb.status().message().find(needle), std::string::npos) << lb.status().message();
  EXPECT_NE(lb.status().message().find(path), std::string::npos) << lb.status().message();
  std::filesystem::remove(path);
}

TEST(BatchIo, MalformedBatchesNameTheTensor) {
  std::vector<int64_t> ids = {9, 10, 11, 12};
  std::vector<int64_t> grid = {1, 4, 4, 1};
  std::vector<float> px(4, 0.f);
  const TensorView v_ids(ids.data(), DType::kI64, Shape{4});
  expect_error("unknown", {{"input_ids", v_ids}, {"pixel_valeus", TensorView(px.data(), DType::kF32, Shape{1, 4})}},
               "pixel_valeus");
  expect_error("grid", {{"input_ids", v_ids}, {"image_grid_thw", TensorView(grid.data(), DType::kI64, Shape{4})}},
               "image_grid_thw");
  expect_error("labels", {{"input_ids", v_ids}, {"labels", TensorView(ids.data(), DType::kI64, Shape{3})}}, "labels");
  expect_error("float ids", {{"input_ids", TensorView(px.data(), DType::kF32, Shape{4})}}, "input_ids");
  expect_error("per sample", {{"input_ids", v_ids}, {"images_per_sample", TensorView(ids.data(), DType::kI64, Shape{3})}},
               "images_per_sample");
}

TEST(BatchIo, LabelOutsideTheVocabularyNamesTheFileTensorAndRow) {
  test::Loaded l;
  test::load(l, "dense");
  const int64_t vocab = l.model->config().text.vocab;
  std::vector<int64_t> ids = {9, 10, 11, 12, 13, 14};
  std::vector<int64_t> cu = {0, 3, 6};
  std::vector<int64_t> labels = {-100, 10, 11, -100, vocab, 13};  // row 4 = position 1 of sample 1
  const std::string path = write_batch("vocab", {{"input_ids", TensorView(ids.data(), DType::kI64, Shape{6})},
                                                 {"cu_seqlens", TensorView(cu.data(), DType::kI64, Shape{3})},
                                                 {"labels", TensorView(labels.data(), DType::kI64, Shape{6})}});
  Result<vlpar::data::PackedBatch> lb = load_batch(path, test::fixture_mrope_desc());
  ASSERT_TRUE(lb.ok()) << lb.status().message();
  const vlpar::Status s = check_model_inputs(lb.value(), vocab, "test");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find(fmt::format("sample '{}#1': labels row 4 (position 1 of the sample) is {}, outside "
                                         "[0, {})", path, vocab, vocab)),
            std::string::npos)
      << s.message();
  lb.value().labels[4] = vocab - 1;
  EXPECT_TRUE(check_model_inputs(lb.value(), vocab, "test").ok());
  std::filesystem::remove(path);
}

TEST(BatchIo, PadCountThatDisagreesWithTheGridsIsAnError) {
  test::Loaded l;
  test::load(l, "dense");
  Batch b = l.batch->view();
  b.image_grids.pop_back();  // one grid fewer than the pads need
  Stash st;
  Result<StepLoss> loss = l.model->forward(l.ctx, b, st);
  ASSERT_FALSE(loss.ok());
  EXPECT_NE(loss.status().message().find("grid"), std::string::npos) << loss.status().message();
}

}  // namespace
}  // namespace qwen3vl

namespace qwen3vl {
namespace {

// pad_for_sequence_parallel: the fixture's 78 tokens padded to a multiple of 4 gain one sample of 2 tokens (ids
// pad, labels −100, positions 0, 1 on the three MRoPE rows, no image), the other fields untouched; the padded pack
// validates and gives the dense model the same cross-entropy and label count; a multiple already met adds nothing.
TEST(BatchIo, PaddingForSequenceParallelIsOneUnsupervisedSample) {
  test::Loaded l;
  test::load(l, "dense");
  const vlpar::data::PackedBatch before = *l.batch;
  vlpar::data::PackedBatch p = before;
  ASSERT_EQ(before.real_tokens, 78);
  EXPECT_EQ(pad_for_sequence_parallel(p, 2, 3), 0);
  EXPECT_EQ(p.fingerprint(), before.fingerprint());
  EXPECT_EQ(pad_for_sequence_parallel(p, 4, 3), 2);
  const int64_t N = 80, B = before.num_samples() + 1;
  ASSERT_EQ(int64_t(p.input_ids.size()), N);
  EXPECT_EQ(p.num_samples(), B);
  EXPECT_EQ(p.cu_seqlens.back(), N);
  EXPECT_EQ(p.cu_seqlens[size_t(B - 1)], 78);
  for (int64_t t = 78; t < N; ++t) {
    EXPECT_EQ(p.input_ids[size_t(t)], 3);
    EXPECT_EQ(p.labels[size_t(t)], vlpar::data::kIgnoreLabel);
    for (int64_t row = 0; row < 3; ++row) EXPECT_EQ(p.positions[size_t(row * N + t)], t - 78);
  }
  for (int64_t row = 0; row < 3; ++row)
    for (int64_t t = 0; t < 78; ++t)
      ASSERT_EQ(p.positions[size_t(row * N + t)], before.positions[size_t(row * 78 + t)]) << row << " " << t;
  EXPECT_EQ(p.images_per_sample.back(), 0);
  EXPECT_EQ(p.num_label_tokens, before.num_label_tokens);
  ASSERT_TRUE(p.view().validate().ok()) << p.view().validate().to_string();
  Stash s1, s2;
  const Result<StepLoss> a = l.model->forward(l.ctx, before.view(), s1);
  const Result<StepLoss> b = l.model->forward(l.ctx, p.view(), s2);
  ASSERT_TRUE(a.ok()) << a.status().message();
  ASSERT_TRUE(b.ok()) << b.status().message();
  EXPECT_EQ(b.value().num_label_tokens, a.value().num_label_tokens);
  EXPECT_NEAR(b.value().ce_loss, a.value().ce_loss, 1e-6 * a.value().ce_loss);
}

}  // namespace
}  // namespace qwen3vl
