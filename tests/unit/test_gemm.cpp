// GEMM and linear: exact (bitwise) results on small-integer inputs for every transpose combination and
// strided batches (order-independent sums, STYLE §11); random inputs vs the fp64 reference with the derived
// tolerance; the linear backward vs finite differences (reference) and vs the reference (kernel).
// Run: ./build/cpu/tests/test_gemm
#include <gtest/gtest.h>

#include "fd_check.hpp"
#include "test_util.hpp"
#include "vlpar/kernels/gemm.hpp"
#include "vlpar/reference/linear.hpp"

namespace vlpar {
namespace {
using namespace vlpar::test;

struct GemmCase {
  bool ta, tb;
  DType dtype;
};
class GemmExact : public ::testing::TestWithParam<GemmCase> {};

TEST_P(GemmExact, IntegerInputsGiveExactResults) {
  const auto [ta, tb, dt] = GetParam();
  const int64_t B = 3, M = 70, N = 130, K = 45;  // M, N above the 64-wide split so two threads share the work
  Allocator a;
  Tensor A = integer_tensor(a, ta ? Shape{B, K, M} : Shape{B, M, K}, dt, 1, -3, 3);
  Tensor Bm = integer_tensor(a, tb ? Shape{B, N, K} : Shape{B, K, N}, dt, 2, -3, 3);
  // Inputs in [-3, 3] are exact in every dtype; C is f32 and |C| ≤ 2·45·9 + 2 < 2^24, so every partial sum is
  // an exactly representable integer whatever the summation order.
  Tensor C = integer_tensor(a, {B, M, N}, DType::kF32, 3, -2, 2);
  auto c0 = to_f64(C);
  ASSERT_TRUE(gemm(test_ctx(2), C, A, Bm, GemmDesc{ta, tb, 2.f, 1.f}).ok());
  auto av = to_f64(A), bv = to_f64(Bm), out = to_f64(C);
  std::vector<double> ref(c0);
  for (int64_t b = 0; b < B; ++b)
    reference::gemm(ref.data() + b * M * N, av.data() + b * M * K, bv.data() + b * K * N, M, N, K, ta, tb, 2.0, 1.0);
  EXPECT_GT(max_abs(ref), 0.0);
  EXPECT_TRUE(all_close("gemm exact", out, ref, C.shape(), 0.0));
}

INSTANTIATE_TEST_SUITE_P(AllTransposes, GemmExact,
                         ::testing::Values(GemmCase{false, false, DType::kF32}, GemmCase{true, false, DType::kF32},
                                           GemmCase{false, true, DType::kF32}, GemmCase{true, true, DType::kF32},
                                           GemmCase{false, true, DType::kBF16}, GemmCase{true, false, DType::kF16}),
                         [](const auto& i) {
                           return std::string(i.param.ta ? "T" : "N") + (i.param.tb ? "T" : "N") + "_" +
                                  std::string(dtype_name(i.param.dtype));
                         });

TEST(Gemm, BroadcastBatchAndStridedRowsAreExact) {
  Allocator a;
  const int64_t B = 4, M = 5, N = 6, K = 7;
  Tensor A = integer_tensor(a, {B, M, K}, DType::kF32, 4, -4, 4);
  Tensor W = integer_tensor(a, {1, N, 2 * K}, DType::kF32, 5, -4, 4);  // one weight, strided view of its left half
  TensorView Wl = W.view().slice(2, 0, K);
  Tensor C = Tensor::empty(a, {B, M, N}, DType::kF32).value();
  ASSERT_TRUE(gemm(test_ctx(2), C, A, Wl, GemmDesc{false, true}).ok());
  auto av = to_f64(A), wv = to_f64(W), out = to_f64(C);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double s = 0;
        for (int64_t k = 0; k < K; ++k) s += av[size_t((b * M + m) * K + k)] * wv[size_t(n * 2 * K + k)];
        ASSERT_EQ(out[size_t((b * M + m) * N + n)], s) << "at " << coords(C.shape(), (b * M + m) * N + n);
      }
}

TEST(Gemm, RandomF32WithinDerivedTolerance) {
  Allocator a;
  const int64_t M = 67, N = 91, K = 300;
  Tensor A = random_tensor(a, {M, K}, DType::kF32, 6), Bm = random_tensor(a, {K, N}, DType::kF32, 7);
  Tensor C = Tensor::empty(a, {M, N}, DType::kF32).value();
  ASSERT_TRUE(gemm(test_ctx(2), C, A, Bm, GemmDesc{}).ok());
  auto av = to_f64(A), bv = to_f64(Bm);
  std::vector<double> ref(size_t(M * N));
  reference::gemm(ref.data(), av.data(), bv.data(), M, N, K, false, false, 1.0, 0.0);
  std::vector<float> af(av.begin(), av.end()), bf(bv.begin(), bv.end()), nf(ref.size());
  reference::gemm(nf.data(), af.data(), bf.data(), M, N, K, false, false, 1.f, 0.f);
  EXPECT_TRUE(close_to_reference("gemm f32", to_f64(C), ref, to_double(nf), C.shape(), TolOp::kGemm, DType::kF32));
}

TEST(Linear, ReferenceBackwardMatchesFiniteDifferences) {
  const int64_t N = 3, in = 4, out = 5;
  Allocator a;
  auto x = to_f64(random_tensor(a, {N, in}, DType::kF32, 8)), W = to_f64(random_tensor(a, {out, in}, DType::kF32, 9));
  auto b = to_f64(random_tensor(a, {out}, DType::kF32, 10)), G = to_f64(random_tensor(a, {N, out}, DType::kF32, 11));
  auto L = [&](const std::vector<double>& xx, const std::vector<double>& ww, const std::vector<double>& bb) {
    std::vector<double> y(size_t(N * out));
    reference::linear_forward(y.data(), xx.data(), ww.data(), bb.data(), N, in, out);
    return dot(y, G);
  };
  std::vector<double> dx(size_t(N * in)), dW(size_t(out * in), 0.0), db(size_t(out), 0.0);
  reference::linear_backward(dx.data(), dW.data(), db.data(), G.data(), x.data(), W.data(), N, in, out);
  EXPECT_TRUE(finite_diff_matches("linear dx", [&](auto& v) { return L(v, W, b); }, x, dx));
  EXPECT_TRUE(finite_diff_matches("linear dW", [&](auto& v) { return L(x, v, b); }, W, dW));
  EXPECT_TRUE(finite_diff_matches("linear db", [&](auto& v) { return L(x, W, v); }, b, db));
}

TEST(Linear, KernelForwardBackwardMatchReference) {
  const int64_t N = 50, in = 72, out = 96;
  Allocator a;
  Context ctx = test_ctx(2);
  Tensor x = random_tensor(a, {N, in}, DType::kF32, 12), W = random_tensor(a, {out, in}, DType::kF32, 13);
  Tensor b = random_tensor(a, {out}, DType::kF32, 14), dy = random_tensor(a, {N, out}, DType::kF32, 15);
  Tensor y = Tensor::empty(a, {N, out}, DType::kF32).value(), dx = Tensor::empty(a, {N, in}, DType::kF32).value();
  Tensor dW = random_tensor(a, {out, in}, DType::kF32, 16), db = random_tensor(a, {out}, DType::kF32, 17);
  auto dW0 = to_f64(dW), db0 = to_f64(db);  // gradients accumulate into existing contents
  ASSERT_TRUE(linear_forward(ctx, y, x, W, b).ok());
  ASSERT_TRUE(linear_backward(ctx, dx, dW, db, dy, x, W).ok());
  auto xv = to_f64(x), wv = to_f64(W), bv = to_f64(b), gv = to_f64(dy);
  std::vector<double> y64(size_t(N * out)), dx64(size_t(N * in)), dW64(dW0), db64(db0);
  reference::linear_forward(y64.data(), xv.data(), wv.data(), bv.data(), N, in, out);
  reference::linear_backward(dx64.data(), dW64.data(), db64.data(), gv.data(), xv.data(), wv.data(), N, in, out);
  auto xf = cast_vec<float>(xv), wf = cast_vec<float>(wv), bf = cast_vec<float>(bv), gf = cast_vec<float>(gv);
  std::vector<float> yf(y64.size()), dxf(dx64.size()), dWf(dW0.begin(), dW0.end()), dbf(db0.begin(), db0.end());
  reference::linear_forward(yf.data(), xf.data(), wf.data(), bf.data(), N, in, out);
  reference::linear_backward(dxf.data(), dWf.data(), dbf.data(), gf.data(), xf.data(), wf.data(), N, in, out);
  EXPECT_TRUE(close_to_reference("linear y", to_f64(y), y64, to_double(yf), y.shape(), TolOp::kLinear, DType::kF32));
  EXPECT_TRUE(close_to_reference("linear dx", to_f64(dx), dx64, to_double(dxf), dx.shape(), TolOp::kLinear, DType::kF32));
  EXPECT_TRUE(close_to_reference("linear dW", to_f64(dW), dW64, to_double(dWf), dW.shape(), TolOp::kLinear, DType::kF32));
  EXPECT_TRUE(close_to_reference("linear db", to_f64(db), db64, to_double(dbf), db.shape(), TolOp::kLinear, DType::kF32));
}

TEST(Linear, FrozenWeightSkipsGradient) {
  Allocator a;
  Tensor x = random_tensor(a, {4, 3}, DType::kF32, 1), W = random_tensor(a, {2, 3}, DType::kF32, 2);
  Tensor dy = random_tensor(a, {4, 2}, DType::kF32, 3), dx = Tensor::empty(a, {4, 3}, DType::kF32).value();
  EXPECT_TRUE(linear_backward(test_ctx(1), dx, TensorView(), TensorView(), dy, x, W).ok());
}

TEST(Gemm, ShapeMismatchIsNamed) {
  Allocator a;
  Tensor A = random_tensor(a, {4, 5}, DType::kF32, 1), Bm = random_tensor(a, {6, 3}, DType::kF32, 2);
  Tensor C = Tensor::empty(a, {4, 3}, DType::kF32).value();
  const Status s = gemm(test_ctx(1), C, A, Bm, GemmDesc{});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("inner dims differ"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace vlpar
