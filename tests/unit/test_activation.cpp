// GELU (tanh, erf), SiLU, SwiGLU: reference derivatives vs finite differences; CPU kernels vs the fp64
// reference with the derived tolerance (f32, bf16); strided halves of a fused tensor.
// Run: ./build/cpu/tests/test_activation
#include <gtest/gtest.h>

#include <functional>

#include "fd_check.hpp"
#include "test_util.hpp"
#include "vlpar/kernels/activation.hpp"
#include "vlpar/kernels/elementwise.hpp"
#include "vlpar/reference/activation.hpp"

namespace vlpar {
namespace {
using namespace vlpar::test;

TEST(ActivationReference, DerivativesMatchFiniteDifferences) {
  Allocator a;
  auto x = to_f64(random_tensor(a, {64}, DType::kF32, 1, -4.f, 4.f));
  struct Case {
    const char* name;
    std::function<double(double)> f, df;
  };
  const Case cases[] = {
      {"gelu_tanh", reference::gelu_tanh<double>, reference::gelu_tanh_grad<double>},
      {"gelu_erf", reference::gelu_erf<double>, reference::gelu_erf_grad<double>},
      {"silu", reference::silu<double>, reference::silu_grad<double>},
  };
  for (const Case& c : cases) {
    std::vector<double> g(x.size());
    for (size_t i = 0; i < x.size(); ++i) g[i] = c.df(x[i]);
    auto loss = [&](const std::vector<double>& v) {
      double s = 0;
      for (double e : v) s += c.f(e);
      return s;
    };
    EXPECT_TRUE(finite_diff_matches(c.name, loss, x, g));
  }
}

// out = f(x) for the kernel, the fp64 reference and the float naive.
void check_unary(const char* name, DType dt, const std::function<Status(TensorView, TensorView)>& op,
                 const std::function<Status(TensorView, TensorView, TensorView)>& op_bwd,
                 double (*f64)(double), float (*f32)(float), double (*df64)(double), float (*df32)(float)) {
  Allocator a;
  Tensor x = random_tensor(a, {33, 40}, dt, 7, -5.f, 5.f), dy = random_tensor(a, {33, 40}, dt, 8);
  Tensor y = Tensor::empty(a, x.shape(), dt).value(), dx = Tensor::empty(a, x.shape(), dt).value();
  ASSERT_TRUE(op(y, x).ok());
  ASSERT_TRUE(op_bwd(dx, dy, x).ok());
  auto xv = to_f64(x), gv = to_f64(dy);
  std::vector<double> r(xv.size()), n(xv.size()), dr(xv.size()), dn(xv.size());
  for (size_t i = 0; i < xv.size(); ++i) {
    r[i] = f64(xv[i]);
    n[i] = f32(float(xv[i]));
    dr[i] = gv[i] * df64(xv[i]);
    dn[i] = float(gv[i]) * df32(float(xv[i]));
  }
  EXPECT_TRUE(close_to_reference(std::string(name) + " fwd", to_f64(y), r, round_to_dtype(n, dt), x.shape(),
                                 TolOp::kActivation, dt));
  EXPECT_TRUE(close_to_reference(std::string(name) + " bwd", to_f64(dx), dr, round_to_dtype(dn, dt), x.shape(),
                                 TolOp::kActivation, dt));
}

class ActivationKernel : public ::testing::TestWithParam<DType> {};

TEST_P(ActivationKernel, GeluSiluMatchReference) {
  const Context ctx = test_ctx(2);
  for (GeluKind k : {GeluKind::kTanh, GeluKind::kErf}) {
    const bool t = k == GeluKind::kTanh;
    check_unary(t ? "gelu_tanh" : "gelu_erf", GetParam(),
                [&](TensorView y, TensorView x) { return gelu_forward(ctx, y, x, k); },
                [&](TensorView dx, TensorView dy, TensorView x) { return gelu_backward(ctx, dx, dy, x, k); },
                t ? reference::gelu_tanh<double> : reference::gelu_erf<double>,
                t ? reference::gelu_tanh<float> : reference::gelu_erf<float>,
                t ? reference::gelu_tanh_grad<double> : reference::gelu_erf_grad<double>,
                t ? reference::gelu_tanh_grad<float> : reference::gelu_erf_grad<float>);
  }
  check_unary("silu", GetParam(), [&](TensorView y, TensorView x) { return silu_forward(ctx, y, x); },
              [&](TensorView dx, TensorView dy, TensorView x) { return silu_backward(ctx, dx, dy, x); },
              reference::silu<double>, reference::silu<float>, reference::silu_grad<double>,
              reference::silu_grad<float>);
}

TEST_P(ActivationKernel, SwiGluOnFusedHalvesMatchesReference) {
  const DType dt = GetParam();
  Allocator a;
  const Context ctx = test_ctx(2);
  const int64_t N = 29, I = 48;
  Tensor fused = random_tensor(a, {N, 2 * I}, dt, 9, -4.f, 4.f), dy = random_tensor(a, {N, I}, dt, 10);
  TensorView gate = fused.view().slice(1, 0, I), up = fused.view().slice(1, I, 2 * I);  // strided rows
  Tensor y = Tensor::empty(a, {N, I}, dt).value();
  Tensor dfused = Tensor::empty(a, {N, 2 * I}, dt).value();
  ASSERT_TRUE(swiglu_forward(ctx, y, gate, up).ok());
  ASSERT_TRUE(swiglu_backward(ctx, dfused.view().slice(1, 0, I), dfused.view().slice(1, I, 2 * I), dy, gate, up).ok());
  auto fv = to_f64(fused), gv = to_f64(dy);
  std::vector<double> r(size_t(N * I)), n(r.size()), dr(size_t(N * 2 * I)), dn(dr.size());
  for (int64_t i = 0; i < N; ++i)
    for (int64_t j = 0; j < I; ++j) {
      const double g = fv[size_t(i * 2 * I + j)], u = fv[size_t(i * 2 * I + I + j)], d = gv[size_t(i * I + j)];
      r[size_t(i * I + j)] = reference::swiglu(g, u);
      n[size_t(i * I + j)] = reference::swiglu(float(g), float(u));
      dr[size_t(i * 2 * I + j)] = d * u * reference::silu_grad(g);
      dr[size_t(i * 2 * I + I + j)] = d * reference::silu(g);
      dn[size_t(i * 2 * I + j)] = float(d) * float(u) * reference::silu_grad(float(g));
      dn[size_t(i * 2 * I + I + j)] = float(d) * reference::silu(float(g));
    }
  EXPECT_TRUE(close_to_reference("swiglu fwd", to_f64(y), r, round_to_dtype(n, dt), y.shape(), TolOp::kActivation, dt));
  EXPECT_TRUE(close_to_reference("swiglu bwd", to_f64(dfused), dr, round_to_dtype(dn, dt), dfused.shape(),
                                 TolOp::kActivation, dt));
}

INSTANTIATE_TEST_SUITE_P(Dtypes, ActivationKernel, ::testing::Values(DType::kF32, DType::kBF16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(ActivationKernelProps, MismatchedShapesAreNamed) {
  Allocator a;
  Tensor g = random_tensor(a, {4, 8}, DType::kF32, 1), u = random_tensor(a, {4, 7}, DType::kF32, 2);
  Tensor y = Tensor::empty(a, {4, 8}, DType::kF32).value();
  const Status s = swiglu_forward(test_ctx(1), y, g, u);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("swiglu_forward: up is [4 rows, 7]"), std::string::npos) << s.message();
}

TEST(Elementwise, AddAccumulatesInFp32AndRoundsOnceForAnyThreadCount) {
  Allocator a;
  const int64_t N = 1037;
  for (DType dt : {DType::kF32, DType::kBF16}) {
    Tensor d1 = random_tensor(a, {N}, dt, 31), src = random_tensor(a, {17, 61}, DType::kF32, 32);  // 17·61 = N elements
    Tensor d3 = Tensor::empty(a, {N}, dt).value();
    ASSERT_TRUE(copy_(d3, d1).ok());
    const std::vector<double> before = to_f64(d1), s64 = to_f64(src);
    ASSERT_TRUE(add_(test_ctx(1), d1, src).ok());
    ASSERT_TRUE(add_(test_ctx(3), d3, src).ok());
    EXPECT_TRUE(bitwise_equal("add_, 1 vs 3 threads", d1, d3));
    std::vector<double> want(before.size());
    for (size_t i = 0; i < want.size(); ++i) want[i] = double(to_float(from_float<bf16>(float(before[i] + s64[i]))));
    if (dt == DType::kF32)
      for (size_t i = 0; i < want.size(); ++i) want[i] = double(float(before[i]) + float(s64[i]));
    EXPECT_TRUE(all_close("add_ " + std::string(dtype_name(dt)), to_f64(d1), want, d1.shape(), 0.0));
  }
  Tensor x = Tensor::zeros(a, {4}, DType::kF32).value(), y = Tensor::zeros(a, {5}, DType::kF32).value();
  Status s = add_(test_ctx(1), x, y);
  EXPECT_NE(s.message().find("add_: f32[4] cpu += f32[5] cpu needs contiguous views of equal size"), std::string::npos)
      << s.message();
  TensorView on_gpu(x.view().data, DType::kF32, {4}, Device::cuda(0));
  s = add_(test_ctx(1), on_gpu, on_gpu);
  EXPECT_EQ(s.code(), StatusCode::kNotSupported) << s.to_string();
}

}  // namespace
}  // namespace vlpar
