// RMSNorm and LayerNorm: fp64 reference backward vs finite differences; CPU kernel vs fp64 reference with
// the derived tolerance (f32, bf16, f16 storage); strided rows; determinism; argument errors.
// Run: ./build/cpu/tests/test_norm
#include <gtest/gtest.h>

#include "fd_check.hpp"
#include "test_util.hpp"
#include "vlpar/kernels/norm.hpp"
#include "vlpar/reference/norm.hpp"

namespace vlpar {
namespace {
using namespace vlpar::test;

constexpr int64_t kRows = 37, kH = 96;  // 37 rows: an odd split across threads

TEST(NormReference, RmsNormBackwardMatchesFiniteDifferences) {
  const int64_t R = 3, H = 8;
  Allocator a;
  auto x = to_f64(random_tensor(a, {R, H}, DType::kF32, 1));
  auto w = to_f64(random_tensor(a, {H}, DType::kF32, 2, 0.5f, 1.5f));
  auto G = to_f64(random_tensor(a, {R, H}, DType::kF32, 3));
  auto loss_x = [&](const std::vector<double>& xx) {
    std::vector<double> y(size_t(R * H)), rs(static_cast<size_t>(R));
    reference::rmsnorm_forward(y.data(), rs.data(), xx.data(), w.data(), R, H, 1e-6);
    return dot(y, G);
  };
  auto loss_w = [&](const std::vector<double>& ww) {
    std::vector<double> y(size_t(R * H)), rs(static_cast<size_t>(R));
    reference::rmsnorm_forward(y.data(), rs.data(), x.data(), ww.data(), R, H, 1e-6);
    return dot(y, G);
  };
  std::vector<double> y(size_t(R * H)), rs(static_cast<size_t>(R)), dx(size_t(R * H)), dw(size_t(H), 0.0);
  reference::rmsnorm_forward(y.data(), rs.data(), x.data(), w.data(), R, H, 1e-6);
  reference::rmsnorm_backward(dx.data(), dw.data(), G.data(), x.data(), w.data(), rs.data(), R, H);
  EXPECT_TRUE(finite_diff_matches("rmsnorm dx", loss_x, x, dx));
  EXPECT_TRUE(finite_diff_matches("rmsnorm dw", loss_w, w, dw));
}

TEST(NormReference, LayerNormBackwardMatchesFiniteDifferences) {
  const int64_t R = 3, H = 8;
  Allocator a;
  auto x = to_f64(random_tensor(a, {R, H}, DType::kF32, 4, -1.f, 3.f));
  auto w = to_f64(random_tensor(a, {H}, DType::kF32, 5, 0.5f, 1.5f));
  auto b = to_f64(random_tensor(a, {H}, DType::kF32, 6));
  auto G = to_f64(random_tensor(a, {R, H}, DType::kF32, 7));
  auto run = [&](const std::vector<double>& xx, const std::vector<double>& ww, const std::vector<double>& bb) {
    std::vector<double> y(size_t(R * H)), mu(static_cast<size_t>(R)), rs(static_cast<size_t>(R));
    reference::layernorm_forward(y.data(), mu.data(), rs.data(), xx.data(), ww.data(), bb.data(), R, H, 1e-6);
    return dot(y, G);
  };
  std::vector<double> y(size_t(R * H)), mu(static_cast<size_t>(R)), rs(static_cast<size_t>(R)), dx(size_t(R * H)), dw(size_t(H), 0.0),
      db(size_t(H), 0.0);
  reference::layernorm_forward(y.data(), mu.data(), rs.data(), x.data(), w.data(), b.data(), R, H, 1e-6);
  reference::layernorm_backward(dx.data(), dw.data(), db.data(), G.data(), x.data(), w.data(), mu.data(), rs.data(),
                                R, H);
  EXPECT_TRUE(finite_diff_matches("layernorm dx", [&](auto& v) { return run(v, w, b); }, x, dx));
  EXPECT_TRUE(finite_diff_matches("layernorm dw", [&](auto& v) { return run(x, v, b); }, w, dw));
  EXPECT_TRUE(finite_diff_matches("layernorm db", [&](auto& v) { return run(x, w, v); }, b, db));
}

class NormKernel : public ::testing::TestWithParam<DType> {};

TEST_P(NormKernel, RmsNormMatchesReference) {
  const DType dt = GetParam();
  Allocator a;
  Context ctx = test_ctx(2);
  Tensor x = random_tensor(a, {kRows, kH}, dt, 11, -2.f, 2.f), w = random_tensor(a, {kH}, dt, 12, 0.5f, 1.5f);
  Tensor dy = random_tensor(a, {kRows, kH}, dt, 13);
  Tensor y = Tensor::empty(a, {kRows, kH}, dt).value(), dx = Tensor::empty(a, {kRows, kH}, dt).value();
  Tensor rstd = Tensor::empty(a, {kRows}, DType::kF32).value(), dw = Tensor::zeros(a, {kH}, DType::kF32).value();
  ASSERT_TRUE(rmsnorm_forward(ctx, y, rstd, x, w, 1e-6f).ok());
  ASSERT_TRUE(rmsnorm_backward(ctx, dx, dw, dy, x, w, rstd).ok());

  auto x64 = to_f64(x), w64 = to_f64(w), g64 = to_f64(dy);
  std::vector<double> y64(size_t(kRows * kH)), r64(static_cast<size_t>(kRows)), dx64(y64.size()), dw64(size_t(kH), 0.0);
  reference::rmsnorm_forward(y64.data(), r64.data(), x64.data(), w64.data(), kRows, kH, 1e-6);
  reference::rmsnorm_backward(dx64.data(), dw64.data(), g64.data(), x64.data(), w64.data(), r64.data(), kRows, kH);
  auto xf = cast_vec<float>(x64), wf = cast_vec<float>(w64), gf = cast_vec<float>(g64);
  std::vector<float> yf(y64.size()), rf(r64.size()), dxf(y64.size()), dwf(size_t(kH), 0.f);
  reference::rmsnorm_forward(yf.data(), rf.data(), xf.data(), wf.data(), kRows, kH, 1e-6f);
  reference::rmsnorm_backward(dxf.data(), dwf.data(), gf.data(), xf.data(), wf.data(), rf.data(), kRows, kH);

  EXPECT_TRUE(close_to_reference("rmsnorm y", to_f64(y), y64, round_to_dtype(to_double(yf), dt), y.shape(),
                                 TolOp::kRmsNorm, dt));
  EXPECT_TRUE(close_to_reference("rmsnorm dx", to_f64(dx), dx64, round_to_dtype(to_double(dxf), dt), dx.shape(),
                                 TolOp::kRmsNorm, dt));
  EXPECT_TRUE(close_to_reference("rmsnorm dw", to_f64(dw), dw64, to_double(dwf), dw.shape(), TolOp::kRmsNorm,
                                 DType::kF32));
  EXPECT_TRUE(close_to_reference("rmsnorm rstd", to_f64(rstd), r64, to_double(rf), rstd.shape(), TolOp::kRmsNorm,
                                 DType::kF32));
}

TEST_P(NormKernel, RmsNormWeightGradMatchesReferenceForAnyThreadCount) {
  const DType dt = GetParam();
  Allocator a;
  const int64_t rows = 2 * 64 + 17;  // two full fixed chunks and a tail
  Tensor x = random_tensor(a, {rows, kH}, dt, 21, -2.f, 2.f), w = random_tensor(a, {kH}, dt, 22, 0.5f, 1.5f);
  Tensor dy = random_tensor(a, {rows, kH}, dt, 23), y = Tensor::empty(a, {rows, kH}, dt).value();
  Tensor rstd = Tensor::empty(a, {rows}, DType::kF32).value();
  ASSERT_TRUE(rmsnorm_forward(test_ctx(2), y, rstd, x, w, 1e-6f).ok());
  Tensor dw1 = Tensor::zeros(a, {kH}, DType::kF32).value(), dw3 = Tensor::zeros(a, {kH}, DType::kF32).value();
  ASSERT_TRUE(rmsnorm_weight_grad(test_ctx(1), dw1, dy, x, rstd).ok());
  ASSERT_TRUE(rmsnorm_weight_grad(test_ctx(3), dw3, dy, x, rstd).ok());
  EXPECT_TRUE(bitwise_equal("rmsnorm_weight_grad, 1 vs 3 threads", dw1, dw3));
  auto x64 = to_f64(x), w64 = to_f64(w), g64 = to_f64(dy), r64 = to_f64(rstd);
  std::vector<double> dx64(size_t(rows * kH)), dw64(size_t(kH), 0.0);
  reference::rmsnorm_backward(dx64.data(), dw64.data(), g64.data(), x64.data(), w64.data(), r64.data(), rows, kH);
  auto xf = cast_vec<float>(x64), wf = cast_vec<float>(w64), gf = cast_vec<float>(g64), rf = cast_vec<float>(r64);
  std::vector<float> dxf(dx64.size()), dwf(size_t(kH), 0.f);
  reference::rmsnorm_backward(dxf.data(), dwf.data(), gf.data(), xf.data(), wf.data(), rf.data(), rows, kH);
  EXPECT_TRUE(close_to_reference("rmsnorm_weight_grad dw", to_f64(dw1), dw64, to_double(dwf), dw1.shape(),
                                 TolOp::kRmsNorm, DType::kF32));
  ASSERT_TRUE(rmsnorm_weight_grad(test_ctx(1), dw1, dy, x, rstd).ok());  // accumulates: now twice the gradient
  for (double& v : dw64) v *= 2.0;
  for (float& v : dwf) v *= 2.f;
  EXPECT_TRUE(close_to_reference("rmsnorm_weight_grad dw accumulated", to_f64(dw1), dw64, to_double(dwf),
                                 dw1.shape(), TolOp::kRmsNorm, DType::kF32));
}

TEST_P(NormKernel, LayerNormMatchesReference) {
  const DType dt = GetParam();
  Allocator a;
  Context ctx = test_ctx(2);
  Tensor x = random_tensor(a, {kRows, kH}, dt, 21, -1.f, 3.f), w = random_tensor(a, {kH}, dt, 22, 0.5f, 1.5f);
  Tensor b = random_tensor(a, {kH}, dt, 23), dy = random_tensor(a, {kRows, kH}, dt, 24);
  Tensor y = Tensor::empty(a, {kRows, kH}, dt).value(), dx = Tensor::empty(a, {kRows, kH}, dt).value();
  Tensor mean = Tensor::empty(a, {kRows}, DType::kF32).value(), rstd = Tensor::empty(a, {kRows}, DType::kF32).value();
  Tensor dw = Tensor::zeros(a, {kH}, DType::kF32).value(), db = Tensor::zeros(a, {kH}, DType::kF32).value();
  ASSERT_TRUE(layernorm_forward(ctx, y, mean, rstd, x, w, b, 1e-6f).ok());
  ASSERT_TRUE(layernorm_backward(ctx, dx, dw, db, dy, x, w, mean, rstd).ok());

  auto x64 = to_f64(x), w64 = to_f64(w), b64 = to_f64(b), g64 = to_f64(dy);
  const size_t n = size_t(kRows * kH);
  std::vector<double> y64(n), m64(static_cast<size_t>(kRows)), r64(static_cast<size_t>(kRows)), dx64(n), dw64(size_t(kH), 0), db64(size_t(kH), 0);
  reference::layernorm_forward(y64.data(), m64.data(), r64.data(), x64.data(), w64.data(), b64.data(), kRows, kH, 1e-6);
  reference::layernorm_backward(dx64.data(), dw64.data(), db64.data(), g64.data(), x64.data(), w64.data(), m64.data(),
                                r64.data(), kRows, kH);
  auto xf = cast_vec<float>(x64), wf = cast_vec<float>(w64), bf = cast_vec<float>(b64), gf = cast_vec<float>(g64);
  std::vector<float> yf(n), mf(static_cast<size_t>(kRows)), rf(static_cast<size_t>(kRows)), dxf(n), dwf(size_t(kH), 0), dbf(size_t(kH), 0);
  reference::layernorm_forward(yf.data(), mf.data(), rf.data(), xf.data(), wf.data(), bf.data(), kRows, kH, 1e-6f);
  reference::layernorm_backward(dxf.data(), dwf.data(), dbf.data(), gf.data(), xf.data(), wf.data(), mf.data(),
                                rf.data(), kRows, kH);
  EXPECT_TRUE(close_to_reference("layernorm y", to_f64(y), y64, round_to_dtype(to_double(yf), dt), y.shape(),
                                 TolOp::kLayerNorm, dt));
  EXPECT_TRUE(close_to_reference("layernorm dx", to_f64(dx), dx64, round_to_dtype(to_double(dxf), dt), dx.shape(),
                                 TolOp::kLayerNorm, dt));
  EXPECT_TRUE(close_to_reference("layernorm dw", to_f64(dw), dw64, to_double(dwf), dw.shape(), TolOp::kLayerNorm,
                                 DType::kF32));
  EXPECT_TRUE(close_to_reference("layernorm db", to_f64(db), db64, to_double(dbf), db.shape(), TolOp::kLayerNorm,
                                 DType::kF32));
}

INSTANTIATE_TEST_SUITE_P(Dtypes, NormKernel, ::testing::Values(DType::kF32, DType::kBF16, DType::kF16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(NormKernelProps, StridedRowsAndQkNormShape) {
  // q_norm applies over [T, heads, hd] with per-head weight [hd]; the gate half of a fused tensor is strided.
  Allocator a;
  Context ctx = test_ctx(2);
  Tensor fused = random_tensor(a, {5, 2 * 16}, DType::kF32, 31);
  TensorView left = fused.view().slice(1, 0, 16);
  Tensor dense = Tensor::empty(a, {5, 16}, DType::kF32).value();
  for (int r = 0; r < 5; ++r)
    for (int c = 0; c < 16; ++c) dense.ptr<float>()[r * 16 + c] = fused.ptr<float>()[r * 32 + c];
  Tensor w = random_tensor(a, {16}, DType::kF32, 32);
  Tensor y1 = Tensor::empty(a, {5, 16}, DType::kF32).value(), y2 = Tensor::empty(a, {5, 16}, DType::kF32).value();
  ASSERT_TRUE(rmsnorm_forward(ctx, y1, TensorView(), left, w, 1e-6f).ok());
  ASSERT_TRUE(rmsnorm_forward(ctx, y2, TensorView(), dense, w, 1e-6f).ok());
  EXPECT_TRUE(bitwise_equal("strided vs dense rows", y1, y2));
  Tensor q = random_tensor(a, {3, 4, 16}, DType::kF32, 33), yq = Tensor::empty(a, {3, 4, 16}, DType::kF32).value();
  EXPECT_TRUE(rmsnorm_forward(ctx, yq, TensorView(), q, w, 1e-6f).ok());
}

TEST(NormKernelProps, DeterministicForFixedThreads) {
  Allocator a;
  Context ctx = test_ctx(2);
  Tensor x = random_tensor(a, {kRows, kH}, DType::kF32, 41), w = random_tensor(a, {kH}, DType::kF32, 42);
  Tensor dy = random_tensor(a, {kRows, kH}, DType::kF32, 43), rstd = Tensor::empty(a, {kRows}, DType::kF32).value();
  Tensor y = Tensor::empty(a, {kRows, kH}, DType::kF32).value(), dx = Tensor::empty(a, {kRows, kH}, DType::kF32).value();
  Tensor dw1 = Tensor::zeros(a, {kH}, DType::kF32).value(), dw2 = Tensor::zeros(a, {kH}, DType::kF32).value();
  ASSERT_TRUE(rmsnorm_forward(ctx, y, rstd, x, w, 1e-6f).ok());
  ASSERT_TRUE(rmsnorm_backward(ctx, dx, dw1, dy, x, w, rstd).ok());
  ASSERT_TRUE(rmsnorm_backward(ctx, dx, dw2, dy, x, w, rstd).ok());
  EXPECT_TRUE(bitwise_equal("dw run 1 vs run 2", dw1, dw2));
}

TEST(NormKernelProps, BadArgumentsAreNamed) {
  Allocator a;
  Context ctx = test_ctx(1);
  Tensor x = random_tensor(a, {4, 8}, DType::kF32, 1), w = random_tensor(a, {7}, DType::kF32, 2);
  Tensor y = Tensor::empty(a, {4, 8}, DType::kF32).value();
  Status s = rmsnorm_forward(ctx, y, TensorView(), x, w, 1e-6f);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("rmsnorm_forward: weight must have shape [8]"), std::string::npos) << s.message();
  Tensor y_bad = Tensor::empty(a, {4, 9}, DType::kF32).value();
  s = layernorm_forward(ctx, y_bad, TensorView(), TensorView(), x, w, w, 1e-6f);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.message();
}

}  // namespace
}  // namespace vlpar
