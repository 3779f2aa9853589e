// The packed-batch contract (include/vlpar/core/batch.hpp) and its owner, data::PackedBatch:
//   - PackedBatch::view() is the pack without copies (every field points into the pack) and validates;
//   - Batch::validate names the field of each malformed batch (ids, labels, boundaries, host copy, positions,
//     pixel rows vs grids);
//   - sample_of_pack takes a sample (and a prompt prefix) out of a pack: its tokens, the pack's position columns,
//     its own grids and pixel rows (counted through images_per_sample), and names its errors.
#include <gtest/gtest.h>

#include <limits>

#include <string>

#include "vlpar/core/batch.hpp"
#include "vlpar/core/checked.hpp"
#include "vlpar/data/packing.hpp"

namespace vlpar::test {
namespace {

// Three samples of 3, 2 and 7 tokens; images: one 2x2 in sample 0, none in 1, a 4x4 and a 2x2x2 video-like grid
// in sample 2 (28 patch rows of width 1, values 0..27). Positions: column index + 100·row (easy to recognise).
data::PackedBatch synthetic_pack() {
  data::PackedBatch p;
  p.input_ids = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  p.labels = {-100, 2, 3, -100, 5, 6, 7, 8, 9, 10, 11, 12};
  p.cu_seqlens = {0, 3, 5, 12};
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t i = 0; i < 12; ++i) p.positions.push_back(100 * r + i);
  p.patch_dim = 1;
  for (int i = 0; i < 28; ++i) p.pixel_values.push_back(float(i));
  p.image_grids = {{1, 2, 2}, {1, 4, 4}, {2, 2, 2}};
  p.images_per_sample = {1, 0, 2};
  p.videos_per_sample = {0, 0, 0};
  p.sample_keys = {"a", "b", "c"};
  return p;
}

TEST(Batch, PackViewPointsIntoThePackAndValidates) {
  const data::PackedBatch p = synthetic_pack();
  const Batch b = p.view();
  EXPECT_TRUE(b.validate().ok()) << b.validate().to_string();
  EXPECT_EQ(b.input_ids.data, p.input_ids.data());
  EXPECT_EQ(b.labels.data, p.labels.data());
  EXPECT_EQ(b.positions.data, p.positions.data());
  EXPECT_EQ(b.positions.shape, (Shape{3, 12}));
  EXPECT_EQ(b.pixel_values.data, p.pixel_values.data());
  EXPECT_EQ(b.pixel_values.shape, (Shape{28, 1}));
  EXPECT_EQ(b.host_cu_seqlens.data(), p.cu_seqlens.data());
  EXPECT_EQ(b.num_samples(), 3);
  EXPECT_EQ(b.num_tokens(), 12);
  EXPECT_TRUE(b.pixel_values_videos.empty());
}

void expect_invalid(const Batch& b, const std::string& needle) {
  const Status s = b.validate();
  ASSERT_FALSE(s.ok()) << needle;
  EXPECT_NE(s.message().find(needle), std::string::npos) << s.message();
}

TEST(Batch, ValidateNamesTheBadField) {
  data::PackedBatch p = synthetic_pack();
  Batch b = p.view();
  {
    Batch c = b;
    c.labels = c.labels.slice(0, 0, 11);
    expect_invalid(c, "labels");
  }
  {
    Batch c = b;
    c.positions = c.positions.reshape(Shape{36}).value();
    expect_invalid(c, "positions");
  }
  {
    Batch c = b;
    c.image_grids.pop_back();  // 24 patches from the grids, 28 rows
    expect_invalid(c, "pixel_values has 28 rows");
  }
  {
    Batch c = b;
    c.host_cu_seqlens = std::span<const int64_t>(p.cu_seqlens.data(), 3);  // ends at 5, not 12
    c.cu_seqlens = c.cu_seqlens.slice(0, 0, 3);
    expect_invalid(c, "ends at 5");
  }
  {
    std::vector<int64_t> other = {0, 3, 6, 12};  // the host copy disagrees with the tensor
    Batch c = b;
    c.host_cu_seqlens = other;
    expect_invalid(c, "host copy");
  }
  {
    std::vector<int64_t> flat = {0, 5, 5, 12};
    Batch c = b;
    c.host_cu_seqlens = flat;
    c.cu_seqlens = TensorView(flat.data(), DType::kI64, Shape{4});
    expect_invalid(c, "increase strictly");
  }
  {
    Batch c = b;
    c.input_ids = TensorView(p.pixel_values.data(), DType::kF32, Shape{12});
    expect_invalid(c, "input_ids");
  }
  {  // a crafted grid whose t·h·w wraps to the true 8 patches: (2^61 + 1)·2·4 = 2^64 + 8
    Batch c = b;
    c.image_grids.back() = {(int64_t{1} << 61) + 1, 2, 4};
    expect_invalid(c, "image_grids[2] is (2305843009213693953, 2, 4): t·h·w is out of range");
  }
}

TEST(CheckedArithmetic, OverflowIsNulloptAndExactValuesPass) {
  const int64_t big = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(checked_add(big - 1, 1), big);
  EXPECT_FALSE(checked_add(big, 1).has_value());
  EXPECT_FALSE(checked_add(-big - 1, -1).has_value());
  EXPECT_EQ(checked_mul(int64_t{1} << 31, int64_t{1} << 31), int64_t{1} << 62);
  EXPECT_FALSE(checked_mul(int64_t{1} << 32, int64_t{1} << 32).has_value());
  EXPECT_FALSE(checked_mul((int64_t{1} << 61) + 1, 8).has_value());  // wraps to 8 without the check
  EXPECT_EQ(checked_mul(-3, 7), -21);
}

TEST(Batch, SampleOfPackTakesTheSampleItsPositionsAndItsImages) {
  const data::PackedBatch p = synthetic_pack();
  Result<data::PackedBatch> s2 = data::sample_of_pack(p, 2);
  ASSERT_TRUE(s2.ok()) << s2.status().to_string();
  const data::PackedBatch& s = s2.value();
  EXPECT_EQ(s.input_ids, (std::vector<int64_t>{6, 7, 8, 9, 10, 11, 12}));
  EXPECT_EQ(s.cu_seqlens, (std::vector<int64_t>{0, 7}));
  ASSERT_EQ(s.positions.size(), 21u);
  EXPECT_EQ(s.positions[0], 5);        // row T, pack column 5
  EXPECT_EQ(s.positions[7], 105);      // row H
  EXPECT_EQ(s.positions[20], 211);     // row W, last column
  EXPECT_EQ(s.rope_deltas, (std::vector<int64_t>{212 - 7}));
  ASSERT_EQ(s.image_grids.size(), 2u);  // images 1 and 2 of the pack
  EXPECT_EQ(s.image_grids[0].h, 4);
  ASSERT_EQ(s.pixel_values.size(), 24u);
  EXPECT_EQ(s.pixel_values.front(), 4.f);  // after sample 0's 4 rows
  EXPECT_EQ(s.sample_keys, (std::vector<std::string>{"c"}));
  EXPECT_EQ(s.num_label_tokens, 7);
  EXPECT_TRUE(s.view().validate().ok());
  // A prompt prefix keeps the sample's images; sample 1 has none.
  EXPECT_EQ(data::sample_of_pack(p, 2, 4).value().input_ids.size(), 4u);
  EXPECT_EQ(data::sample_of_pack(p, 2, 4).value().image_grids.size(), 2u);
  EXPECT_TRUE(data::sample_of_pack(p, 1).value().image_grids.empty());
}

TEST(Batch, SampleOfPackNamesItsErrors) {
  data::PackedBatch p = synthetic_pack();
  auto expect_error = [](const Result<data::PackedBatch>& r, const std::string& needle) {
    ASSERT_FALSE(r.ok()) << needle;
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
  };
  expect_error(data::sample_of_pack(p, 3), "outside the pack's 3 samples");
  expect_error(data::sample_of_pack(p, 0, 4), "prefix_tokens 4");
  p.images_per_sample = {1, 0, 3};
  expect_error(data::sample_of_pack(p, 2), "images_per_sample asks for 3");
  p.images_per_sample.clear();
  expect_error(data::sample_of_pack(p, 0), "images_per_sample has 0 entries");
}

}  // namespace
}  // namespace vlpar::test
