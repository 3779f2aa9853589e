// Row gathers and scatters by an index vector (kernels/index_rows.hpp): every op against a plain loop in fp64 over
// mixed storage dtypes, the same result for any thread count, and named errors for bad indices and views.
// Run: ./build/cpu/tests/test_index_rows
#include <gtest/gtest.h>

#include <vector>

#include "test_util.hpp"
#include "vlpar/kernels/index_rows.hpp"

namespace vlpar {
namespace {
using namespace vlpar::test;

constexpr int64_t kN = 29, kH = 13;
const std::vector<int64_t> kIndex = {27, 3, 0, 11, 28, 5, 6, 19};  // distinct, unsorted, both ends of [0, N)

TensorView index_view(const std::vector<int64_t>& v) {
  return TensorView(const_cast<int64_t*>(v.data()), DType::kI64, {int64_t(v.size())});
}

/// The value of a float rounded to dtype (what a store to that dtype keeps).
double rounded(double v, DType dt) { return dt == DType::kBF16 ? double(to_float(from_float<bf16>(float(v)))) : double(float(v)); }

TEST(IndexRows, GatherScatterAndAddMatchAPlainLoopForAnyThreadCount) {
  Allocator a;
  const int64_t n = int64_t(kIndex.size());
  for (DType big_dt : {DType::kF32, DType::kBF16}) {
    const Tensor big = random_tensor(a, {kN, kH}, big_dt, 1), small = random_tensor(a, {n, kH}, DType::kF32, 2);
    const std::vector<double> b64 = to_f64(big), s64 = to_f64(small);
    // gather: small_out[i] = big[index[i]]
    Tensor g1 = Tensor::empty(a, {n, kH}, DType::kF32).value(), g3 = Tensor::empty(a, {n, kH}, DType::kF32).value();
    ASSERT_TRUE(gather_rows(test_ctx(1), g1, big, index_view(kIndex)).ok());
    ASSERT_TRUE(gather_rows(test_ctx(3), g3, big, index_view(kIndex)).ok());
    EXPECT_TRUE(bitwise_equal("gather_rows 1 vs 3 threads", g1, g3));
    std::vector<double> want(size_t(n * kH));
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < kH; ++j) want[size_t(i * kH + j)] = b64[size_t(kIndex[size_t(i)] * kH + j)];
    EXPECT_TRUE(all_close("gather_rows", to_f64(g1), want, g1.shape(), 0.0));
    // scatter, scatter_add and zero into copies of big; untouched rows keep their values
    for (int mode = 0; mode < 3; ++mode) {
      Tensor d1 = Tensor::empty(a, {kN, kH}, big_dt).value(), d3 = Tensor::empty(a, {kN, kH}, big_dt).value();
      ASSERT_TRUE(copy_(d1, big).ok() && copy_(d3, big).ok());
      std::vector<double> expect = b64;
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < kH; ++j) {
          double& e = expect[size_t(kIndex[size_t(i)] * kH + j)];
          const double s = s64[size_t(i * kH + j)];
          e = mode == 0 ? rounded(s, big_dt) : mode == 1 ? rounded(float(e) + float(s), big_dt) : 0.0;
        }
      for (auto [ctx, d] : {std::pair{test_ctx(1), &d1}, std::pair{test_ctx(3), &d3}}) {
        const Status s = mode == 0   ? scatter_rows(ctx, *d, small, index_view(kIndex))
                         : mode == 1 ? scatter_add_rows(ctx, *d, small, index_view(kIndex))
                                     : zero_rows(ctx, *d, index_view(kIndex));
        ASSERT_TRUE(s.ok()) << s.to_string();
      }
      EXPECT_TRUE(bitwise_equal("scatter 1 vs 3 threads", d1, d3));
      EXPECT_TRUE(all_close("scatter mode " + std::to_string(mode), to_f64(d1), expect, d1.shape(), 0.0));
    }
  }
}

TEST(IndexRows, BadIndicesAndViewsAreNamedErrors) {
  Allocator a;
  Context ctx = test_ctx(1);
  Tensor big = Tensor::zeros(a, {kN, kH}, DType::kF32).value(), small = Tensor::zeros(a, {3, kH}, DType::kF32).value();
  const auto expect = [](const Status& s, const std::string& needle) {
    EXPECT_NE(s.message().find(needle), std::string::npos) << "expected \"" << needle << "\" in: " << s.message();
  };
  const std::vector<int64_t> out_of_range = {1, kN, 2}, negative = {1, -1, 2}, twice = {4, 9, 4};
  expect(gather_rows(ctx, small, big, index_view(out_of_range)), "gather_rows: index[1] = 29 is outside the 29 rows");
  expect(scatter_rows(ctx, big, small, index_view(negative)), "scatter_rows: index[1] = -1 is outside");
  expect(scatter_add_rows(ctx, big, small, index_view(twice)),
         "scatter_add_rows: row 4 appears twice in index (at 2 and earlier)");
  expect(zero_rows(ctx, big, index_view(twice)), "zero_rows: row 4 appears twice");
  EXPECT_TRUE(gather_rows(ctx, small, big, index_view(twice)).ok()) << "a gather may repeat rows";
  const std::vector<int64_t> two = {0, 1};
  expect(gather_rows(ctx, small, big, index_view(two)), "gather_rows: index must have shape [3]");
  Tensor narrow = Tensor::zeros(a, {3, kH - 1}, DType::kF32).value();
  const std::vector<int64_t> three = {0, 1, 2};
  expect(scatter_rows(ctx, big, narrow, index_view(three)), "differ in H");
  TensorView on_gpu(big.view().data, DType::kF32, {kN, kH}, Device::cuda(0));
  TensorView small_gpu(small.view().data, DType::kF32, {3, kH}, Device::cuda(0));
  EXPECT_EQ(gather_rows(ctx, small_gpu, on_gpu, index_view(three)).code(), StatusCode::kNotSupported);
}

}  // namespace
}  // namespace vlpar
