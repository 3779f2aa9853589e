// Rotary embeddings: the MRoPE axis assignment of spec §4.4 and the vision row/column split of §3.3 checked
// against hand-computed angles; CPU kernel vs the independent fp64 reference for 1D, MRoPE and vision 2D
// (f32, bf16); backward = exact inverse rotation; in-place use. Run: ./build/cpu/tests/test_rotary
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "test_util.hpp"
#include "vlpar/kernels/rotary.hpp"
#include "vlpar/reference/rotary.hpp"

namespace vlpar {
namespace {
using namespace vlpar::test;

TEST(RotaryMath, InterleavedMropeAxesMatchSpec) {
  // Spec §4.4, hd = 128, sections [24, 20, 20]: H = {1, 4, …, 58}, W = {2, 5, …, 59}, T = rest (24 indices).
  const int sec[3] = {24, 20, 20};
  std::set<int> T, H, W;
  for (int j = 0; j < 64; ++j) (mrope_axis(j, sec) == 0 ? T : mrope_axis(j, sec) == 1 ? H : W).insert(j);
  std::set<int> want_h, want_w, want_t = {60, 61, 62, 63};
  for (int j = 1; j <= 58; j += 3) want_h.insert(j);
  for (int j = 2; j <= 59; j += 3) want_w.insert(j);
  for (int j = 0; j <= 57; j += 3) want_t.insert(j);
  EXPECT_EQ(H, want_h);
  EXPECT_EQ(W, want_w);
  EXPECT_EQ(T, want_t);
  EXPECT_EQ(H.size(), 20u);
  EXPECT_EQ(W.size(), 20u);
  EXPECT_EQ(T.size(), 24u);
}

TEST(RotaryMath, HandComputedAnglesForEachKind) {
  // MRoPE, hd 128, theta 5e6: pair 4 is an H frequency, inv_freq = 5e6^(-8/128).
  RotaryDesc m{RotaryKind::kMRoPE, 128, 5e6f, {24, 20, 20}};
  RotaryFreq f = rotary_freq(m, 4);
  EXPECT_EQ(f.axis, 1);
  EXPECT_NEAR(f.inv_freq, std::pow(5e6, -8.0 / 128), 1e-7 * std::pow(5e6, -8.0 / 128));
  EXPECT_EQ(rotary_freq(m, 5).axis, 2);
  EXPECT_EQ(rotary_freq(m, 61).axis, 0);
  // Vision, hd 72: 18 frequencies; pairs 0..17 rotate by row, 18..35 by column with the same table.
  RotaryDesc v{RotaryKind::kVision2D, 72, 10000.f, {0, 0, 0}};
  EXPECT_EQ(rotary_freq(v, 0).axis, 0);
  EXPECT_EQ(rotary_freq(v, 17).axis, 0);
  EXPECT_EQ(rotary_freq(v, 18).axis, 1);
  EXPECT_EQ(rotary_freq(v, 35).axis, 1);
  EXPECT_FLOAT_EQ(rotary_freq(v, 18).inv_freq, 1.0f);
  EXPECT_NEAR(rotary_freq(v, 3).inv_freq, std::pow(10000.0, -6.0 / 36), 1e-7);
  EXPECT_FLOAT_EQ(rotary_freq(v, 21).inv_freq, rotary_freq(v, 3).inv_freq);
}

TEST(RotaryKernel, HandComputedRotationOfOneToken) {
  // One token, one head, D = 8, 1D RoPE, theta 100, position 3: pair j rotates by 3·100^(-2j/8).
  Allocator a;
  Tensor x = random_tensor(a, {1, 1, 8}, DType::kF32, 5), y = Tensor::empty(a, {1, 1, 8}, DType::kF32).value();
  Tensor pos = Tensor::empty(a, {1}, DType::kI64).value();
  pos.ptr<int64_t>()[0] = 3;
  ASSERT_TRUE(rotary_forward(test_ctx(1), y, x, pos, RotaryDesc{RotaryKind::k1D, 8, 100.f, {0, 0, 0}}).ok());
  const float* xi = x.ptr<float>();
  for (int j = 0; j < 4; ++j) {
    const double th = 3.0 * std::pow(100.0, -2.0 * j / 8);
    EXPECT_NEAR(y.ptr<float>()[j], xi[j] * std::cos(th) - xi[j + 4] * std::sin(th), 2e-6);
    EXPECT_NEAR(y.ptr<float>()[j + 4], xi[j + 4] * std::cos(th) + xi[j] * std::sin(th), 2e-6);
  }
}

struct RotaryCase {
  RotaryKind kind;
  int head_dim;
  float theta;
  DType dtype;
};

std::string rotary_case_name(const RotaryCase& c) {
  static const char* kinds[] = {"rope1d", "mrope", "vision2d"};
  return std::string(kinds[int(c.kind)]) + "_hd" + std::to_string(c.head_dim) + "_" + std::string(dtype_name(c.dtype));
}

class RotaryKernelVsReference : public ::testing::TestWithParam<RotaryCase> {};

TEST_P(RotaryKernelVsReference, ForwardAndBackward) {
  const RotaryCase c = GetParam();
  const RotaryDesc d{c.kind, c.head_dim, c.theta, {24, 20, 20}};
  const int64_t N = 21, H = 3, axes = d.num_axes();
  Allocator a;
  Context ctx = test_ctx(2);
  Tensor x = random_tensor(a, {N, H, c.head_dim}, c.dtype, 17), y = Tensor::empty(a, x.shape(), c.dtype).value();
  Tensor back = Tensor::empty(a, x.shape(), c.dtype).value();
  Tensor pos = integer_tensor(a, {axes, N}, DType::kI64, 18, 0, 3000);  // large positions stress fp32 angles
  ASSERT_TRUE(rotary_forward(ctx, y, x, pos, d).ok());
  ASSERT_TRUE(rotary_backward(ctx, back, y, pos, d).ok());
  auto xv = to_f64(x);
  std::vector<double> r(xv.size()), rinv(xv.size());
  reference::rotary_apply(r.data(), xv.data(), pos.ptr<int64_t>(), N, H, d, +1);
  // Naive at float: the same formulas in float, output rounded to storage.
  std::vector<float> xf(xv.begin(), xv.end()), nf(xv.size());
  reference::rotary_apply(nf.data(), xf.data(), pos.ptr<int64_t>(), N, H, d, +1);
  EXPECT_TRUE(close_to_reference("rotary fwd", to_f64(y), r, round_to_dtype(std::vector<double>(nf.begin(), nf.end()),
                                 c.dtype), x.shape(), TolOp::kRotary, c.dtype));
  // Backward: Rᵀ applied to y recovers x up to the rounding of y.
  auto yv = to_f64(y);
  reference::rotary_apply(rinv.data(), yv.data(), pos.ptr<int64_t>(), N, H, d, -1);
  std::vector<float> yf(yv.begin(), yv.end()), binf(yv.size());
  reference::rotary_apply(binf.data(), yf.data(), pos.ptr<int64_t>(), N, H, d, -1);
  EXPECT_TRUE(close_to_reference("rotary bwd", to_f64(back), rinv,
                                 round_to_dtype(std::vector<double>(binf.begin(), binf.end()), c.dtype), x.shape(),
                                 TolOp::kRotary, c.dtype));
}

INSTANTIATE_TEST_SUITE_P(
    Kinds, RotaryKernelVsReference,
    ::testing::Values(RotaryCase{RotaryKind::k1D, 128, 1e6f, DType::kF32},
                      RotaryCase{RotaryKind::kMRoPE, 128, 5e6f, DType::kF32},
                      RotaryCase{RotaryKind::kMRoPE, 128, 5e6f, DType::kBF16},
                      RotaryCase{RotaryKind::kMRoPE, 64, 1e6f, DType::kF32},  // sections clipped at hd/2
                      RotaryCase{RotaryKind::kVision2D, 72, 1e4f, DType::kF32},
                      RotaryCase{RotaryKind::kVision2D, 80, 1e4f, DType::kBF16}),
    [](const auto& info) { return rotary_case_name(info.param); });

TEST(RotaryKernel, InPlaceEqualsOutOfPlaceAndTextMropeEquals1D) {
  // With equal T/H/W rows (pure text) MRoPE reduces exactly to 1D RoPE (spec §4.4).
  Allocator a;
  Context ctx = test_ctx(2);
  const int64_t N = 9, H = 2, D = 128;
  Tensor x = random_tensor(a, {N, H, D}, DType::kF32, 3), y1 = Tensor::empty(a, x.shape(), DType::kF32).value();
  Tensor y2 = Tensor::empty(a, x.shape(), DType::kF32).value();
  Tensor p1 = integer_tensor(a, {N}, DType::kI32, 4, 0, 500), p3 = Tensor::empty(a, {3, N}, DType::kI32).value();
  for (int r = 0; r < 3; ++r)
    for (int64_t t = 0; t < N; ++t) p3.ptr<int32_t>()[r * N + t] = p1.ptr<int32_t>()[t];
  ASSERT_TRUE(rotary_forward(ctx, y1, x, p1, RotaryDesc{RotaryKind::k1D, 128, 5e6f, {24, 20, 20}}).ok());
  ASSERT_TRUE(rotary_forward(ctx, y2, x, p3, RotaryDesc{RotaryKind::kMRoPE, 128, 5e6f, {24, 20, 20}}).ok());
  EXPECT_TRUE(bitwise_equal("text MRoPE vs 1D RoPE", y1, y2));
  ASSERT_TRUE(rotary_forward(ctx, x, x, p1, RotaryDesc{RotaryKind::k1D, 128, 5e6f, {24, 20, 20}}).ok());
  EXPECT_TRUE(bitwise_equal("in place vs out of place", x, y1));
}

TEST(RotaryKernel, BadDescriptorsAndPositionsAreNamed) {
  Allocator a;
  Tensor x = random_tensor(a, {2, 1, 70}, DType::kF32, 1), y = Tensor::empty(a, x.shape(), DType::kF32).value();
  Tensor p = Tensor::zeros(a, {2, 2}, DType::kI32).value();
  Status s = rotary_forward(test_ctx(1), y, x, p, RotaryDesc{RotaryKind::kVision2D, 70, 1e4f, {0, 0, 0}});
  EXPECT_NE(s.message().find("head_dim 70 is not a multiple of 4"), std::string::npos) << s.message();
  Tensor x2 = random_tensor(a, {2, 1, 72}, DType::kF32, 1), y2 = Tensor::empty(a, x2.shape(), DType::kF32).value();
  s = rotary_forward(test_ctx(1), y2, x2, p, RotaryDesc{RotaryKind::kMRoPE, 72, 1e4f, {24, -1, 20}});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("mrope_section"), std::string::npos) << s.message();
  // x's head dim must be the descriptor's.
  s = rotary_forward(test_ctx(1), y2, x2, p, RotaryDesc{RotaryKind::k1D, 64, 1e4f, {0, 0, 0}});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("x head dim 72 != desc.head_dim 64"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace vlpar
