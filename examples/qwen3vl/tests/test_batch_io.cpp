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
