// CUDA grouped GEMM (src/kernels/cuda/grouped_gemm_kernel.cuh) through the public grouped_gemm with CUDA views,
// against an fp64 loop with the derived rule of tests/tolerances.hpp (naive = the same loop in float, rounded to
// c's dtype): bf16 and f16 inputs, c in the input dtype or f32, b as [Kd, N] and as [N, Kd] (trans_b), per-group
// and broadcast b, ragged groups (0, 1, 17, 130 rows), N and Kd that are not multiples of the tile, alpha and beta
// (beta reads c), rows outside the groups untouched, the persistent grid (a capped CTA count gives bitwise the
// same result), and named errors; the grouped weight gradient (dw[g] += a[rows of g]ᵀ · dc[rows of g], fp32)
// against the same per-group loops with aᵀ; the dense gemm with CUDA views on those kernels (one group per batch
// entry). Run: ctest --test-dir build/emu -R Grouped (emulated), or -L gpu on a
// GPU.
#include <fmt/core.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "gpu_test_util.hpp"
#include "test_util.hpp"
#include "vlpar/kernels/moe.hpp"
#include "vlpar/reference/linear.hpp"

namespace vlpar {
namespace {
using namespace vlpar::test;

struct GgCase {
  DType dtype, out;
  bool trans_b, broadcast_b;
  int64_t n, kd;
  float alpha, beta;
};

std::string gg_name(const GgCase& c) {
  return fmt::format("{}_to_{}{}{}_n{}_k{}{}", dtype_name(c.dtype), dtype_name(c.out), c.trans_b ? "_transb" : "",
                     c.broadcast_b ? "_bcast" : "", c.n, c.kd, c.beta != 0.f ? "_beta" : "");
}

// Rows 0..2 precede the groups and the last 5 follow them: neither may change.
const std::vector<int64_t> kOffsets = {3, 3, 4, 134, 151, 151, 215};
constexpr int64_t kRows = 220;

/// c_ref = alpha · a[rows of g] · op(b[g]) + beta · c0 in scalar S over the groups (reference::gemm per group);
/// other rows keep c0.
template <class S>
std::vector<double> reference(const GgCase& c, const std::vector<double>& a, const std::vector<double>& b,
                              const std::vector<double>& c0) {
  const std::vector<S> as = cast_vec<S>(a), bs = cast_vec<S>(b);
  std::vector<S> out = cast_vec<S>(c0);
  for (size_t g = 0; g + 1 < kOffsets.size(); ++g) {
    const int64_t r0 = kOffsets[g], rows = kOffsets[g + 1] - r0;
    const S* bg = bs.data() + (c.broadcast_b ? 0 : int64_t(g) * c.n * c.kd);
    reference::gemm<S>(out.data() + r0 * c.n, as.data() + r0 * c.kd, bg, rows, c.n, c.kd, false, c.trans_b,
                       S(c.alpha), S(c.beta));
  }
  return to_double(out);
}

class VLPAR_SUITE(GroupedGemm) : public ::testing::TestWithParam<GgCase> {};

VLPAR_TEST_P(VLPAR_SUITE(GroupedGemm), MatchesFp64AndLeavesOtherRows) {
  VLPAR_REQUIRE_GPU();
  const GgCase& c = GetParam();
  Allocator al;
  const int64_t G = int64_t(kOffsets.size()) - 1, bg = c.broadcast_b ? 1 : G;
  const Tensor a = random_tensor(al, {kRows, c.kd}, c.dtype, 1, -2.f, 2.f);
  const Tensor b = random_tensor(al, c.trans_b ? Shape{bg, c.n, c.kd} : Shape{bg, c.kd, c.n}, c.dtype, 2);
  const Tensor c0 = random_tensor(al, {kRows, c.n}, c.out, 3);
  const Tensor ad = upload(al, a), bd = upload(al, b);
  Tensor cd = upload(al, c0);
  VLPAR_ASSERT_OK_OR_SKIP(grouped_gemm(gpu_ctx(), cd, ad, bd, kOffsets, GemmDesc{false, c.trans_b, c.alpha, c.beta}));
  const std::vector<double> got = to_f64(download(al, cd)), before = to_f64(c0);
  const auto a64 = to_f64(a), b64 = to_f64(b);
  const std::vector<double> r64 = reference<double>(c, a64, b64, before);
  const std::vector<double> rf = round_to_dtype(reference<float>(c, a64, b64, before), c.out);
  EXPECT_TRUE(close_to_reference("grouped_gemm_c", got, r64, rf, Shape{kRows, c.n}, TolOp::kGemm, c.out));
  for (int64_t r : {0, 1, 2, 215, 219})
    for (int64_t j = 0; j < c.n; ++j)
      ASSERT_EQ(got[size_t(r * c.n + j)], before[size_t(r * c.n + j)]) << "row " << r << " is outside the groups";
}

VLPAR_INSTANTIATE(Shapes, VLPAR_SUITE(GroupedGemm),
    ::testing::Values(
        GgCase{DType::kBF16, DType::kBF16, true, false, 136, 40, 1.f, 0.f},    // the MoE forward: x · Wᵀ
        GgCase{DType::kBF16, DType::kF32, false, false, 64, 96, 1.f, 0.f},     // dX = dY · W
        GgCase{DType::kF16, DType::kF16, false, true, 136, 96, 0.5f, -1.5f},  // broadcast b, beta reads c
        GgCase{DType::kF16, DType::kF32, true, false, 64, 40, 1.f, 1.f},     // accumulate into f32
        // the other (input, output, b layout) instantiations, each launched once (tools/check_emu_coverage.py)
        GgCase{DType::kBF16, DType::kBF16, false, false, 64, 40, 1.f, 0.f},
        GgCase{DType::kBF16, DType::kF32, true, true, 64, 40, 1.f, 0.f},
        GgCase{DType::kF16, DType::kF16, true, false, 64, 40, 1.f, 0.f},
        GgCase{DType::kF16, DType::kF32, false, false, 64, 40, 2.f, 0.f}),
    [](const auto& info) { return gg_name(info.param); });

struct WgCase {
  DType dtype;
  int64_t kd, n;
};

/// dw_ref[g] = dw0[g] + a[rows of g]ᵀ · dc[rows of g] in scalar S (reference::gemm per group, aᵀ through trans_a).
template <class S>
std::vector<double> wgrad_reference(const WgCase& c, const std::vector<double>& a, const std::vector<double>& dc,
                                    const std::vector<double>& dw0) {
  const std::vector<S> as = cast_vec<S>(a), dcs = cast_vec<S>(dc);
  std::vector<S> out = cast_vec<S>(dw0);
  for (size_t g = 0; g + 1 < kOffsets.size(); ++g) {
    const int64_t r0 = kOffsets[g], rows = kOffsets[g + 1] - r0;
    reference::gemm<S>(out.data() + int64_t(g) * c.kd * c.n, as.data() + r0 * c.kd, dcs.data() + r0 * c.n, c.kd, c.n,
                       rows, true, false, S(1), S(1));
  }
  return to_double(out);
}

class VLPAR_SUITE(GroupedWeightGrad) : public ::testing::TestWithParam<WgCase> {};

/// dw accumulates (dw0 random, so a missing read of dw fails); the empty groups' dw stay bitwise dw0.
VLPAR_TEST_P(VLPAR_SUITE(GroupedWeightGrad), AccumulatesFp64Sum) {
  VLPAR_REQUIRE_GPU();
  const WgCase& c = GetParam();
  Allocator al;
  const int64_t G = int64_t(kOffsets.size()) - 1;
  const Tensor a = random_tensor(al, {kRows, c.kd}, c.dtype, 4, -2.f, 2.f);
  const Tensor dc = random_tensor(al, {kRows, c.n}, c.dtype, 5);
  const Tensor dw0 = random_tensor(al, {G, c.kd, c.n}, DType::kF32, 6);
  Tensor dwd = upload(al, dw0);
  VLPAR_ASSERT_OK_OR_SKIP(grouped_weight_grad(gpu_ctx(), dwd, upload(al, a), upload(al, dc), kOffsets));
  const std::vector<double> got = to_f64(download(al, dwd)), before = to_f64(dw0);
  const auto a64 = to_f64(a), dc64 = to_f64(dc);
  const std::vector<double> r64 = wgrad_reference<double>(c, a64, dc64, before);
  const std::vector<double> rf = wgrad_reference<float>(c, a64, dc64, before);
  EXPECT_TRUE(close_to_reference("grouped_weight_grad_dw", got, r64, rf, Shape{G, c.kd, c.n}, TolOp::kGemm,
                                 DType::kF32));
  for (size_t g = 0; g + 1 < kOffsets.size(); ++g) {
    if (kOffsets[g + 1] != kOffsets[g]) continue;
    for (int64_t i = 0; i < c.kd * c.n; ++i)
      ASSERT_EQ(got[g * size_t(c.kd * c.n) + size_t(i)], before[g * size_t(c.kd * c.n) + size_t(i)])
          << "empty group " << g << " changed";
  }
}

VLPAR_INSTANTIATE(Shapes, VLPAR_SUITE(GroupedWeightGrad),
    ::testing::Values(WgCase{DType::kBF16, 136, 40},    // Kd past one tile, N a partial tile
                      WgCase{DType::kF16, 40, 136}),   // N past one tile
    [](const auto& info) { return fmt::format("{}_kd{}_n{}", dtype_name(info.param.dtype), info.param.kd,
                                              info.param.n); });

struct DenseCase {
  DType dtype, out;
  bool trans_a, trans_b;
  int64_t batch, b_batch, m, n, k;
  float alpha, beta;
};

class VLPAR_SUITE(DenseGemm) : public ::testing::TestWithParam<DenseCase> {};

/// The public gemm with CUDA views runs the grouped kernels with one group per batch entry (op(A) = Aᵀ on the
/// weight-gradient kernel): against reference::gemm per batch entry in fp64 and in float.
VLPAR_TEST_P(VLPAR_SUITE(DenseGemm), MatchesFp64) {
  VLPAR_REQUIRE_GPU();
  const DenseCase& c = GetParam();
  Allocator al;
  auto shape = [](int64_t batch, int64_t r, int64_t cols) {
    return batch == 0 ? Shape{r, cols} : Shape{batch, r, cols};
  };
  const int64_t nb = std::max<int64_t>(c.batch, 1);
  const Tensor a = random_tensor(al, c.trans_a ? shape(c.batch, c.k, c.m) : shape(c.batch, c.m, c.k), c.dtype, 9,
                                 -2.f, 2.f);
  const Tensor b = random_tensor(al, c.trans_b ? shape(c.b_batch, c.n, c.k) : shape(c.b_batch, c.k, c.n), c.dtype,
                                 10);
  const Tensor c0 = random_tensor(al, shape(c.batch, c.m, c.n), c.out, 11);
  Tensor cd = upload(al, c0);
  VLPAR_ASSERT_OK_OR_SKIP(gemm(gpu_ctx(), cd, upload(al, a), upload(al, b), GemmDesc{c.trans_a, c.trans_b, c.alpha,
                                                                                     c.beta}));
  const auto a64 = to_f64(a), b64 = to_f64(b), before = to_f64(c0);
  auto ref = [&]<class S>() {
    const std::vector<S> as = cast_vec<S>(a64), bs = cast_vec<S>(b64);
    std::vector<S> out = cast_vec<S>(before);
    for (int64_t i = 0; i < nb; ++i)
      reference::gemm<S>(out.data() + i * c.m * c.n, as.data() + i * c.m * c.k,
                         bs.data() + (c.b_batch > 1 ? i * c.k * c.n : 0), c.m, c.n, c.k, c.trans_a, c.trans_b,
                         S(c.alpha), S(c.beta));
    return to_double(out);
  };
  EXPECT_TRUE(close_to_reference("gemm_c", to_f64(download(al, cd)), ref.operator()<double>(),
                                 round_to_dtype(ref.operator()<float>(), c.out), Shape{nb, c.m, c.n}, TolOp::kGemm,
                                 c.out));
}

VLPAR_INSTANTIATE(Shapes, VLPAR_SUITE(DenseGemm),
    ::testing::Values(
        DenseCase{DType::kBF16, DType::kBF16, false, false, 0, 0, 70, 40, 136, 1.f, 0.f},   // 2D, NN
        DenseCase{DType::kF16, DType::kF32, false, true, 0, 0, 130, 136, 40, 0.5f, 1.f},   // y = x · Wᵀ, accumulate
        DenseCase{DType::kBF16, DType::kF32, true, false, 0, 0, 136, 40, 70, 1.f, 0.f},    // dW = xᵀ · dy
        DenseCase{DType::kF16, DType::kF32, true, false, 3, 1, 40, 24, 33, 1.f, 1.5f},     // batched, B broadcast
        DenseCase{DType::kBF16, DType::kBF16, false, false, 2, 1, 17, 16, 8, 2.f, 0.f}),   // batched NN
    [](const auto& info) {
      const DenseCase& c = info.param;
      return fmt::format("{}_to_{}_{}{}_b{}_m{}_n{}_k{}", dtype_name(c.dtype), dtype_name(c.out), c.trans_a ? "T" : "N",
                         c.trans_b ? "T" : "N", c.batch, c.m, c.n, c.k);
    });

/// The persistent grid: 3 CTAs walking all 10 tiles give bitwise the result of one CTA per tile.
VLPAR_TEST(VLPAR_SUITE(GroupedGemmProps), CappedGridIsBitwiseEqual) {
  VLPAR_REQUIRE_GPU();
  Allocator al;
  const GgCase c{DType::kBF16, DType::kBF16, true, false, 136, 40, 1.f, 0.f};
  const Tensor a = upload(al, random_tensor(al, {kRows, c.kd}, c.dtype, 1, -2.f, 2.f));
  const Tensor b = upload(al, random_tensor(al, {int64_t(kOffsets.size()) - 1, c.n, c.kd}, c.dtype, 2));
  Tensor c1 = Tensor::zeros(al, {kRows, c.n}, c.out, Device::cuda(0)).value();
  Tensor c2 = Tensor::zeros(al, {kRows, c.n}, c.out, Device::cuda(0)).value();
  const GemmDesc desc{false, true, 1.f, 0.f};
  VLPAR_ASSERT_OK_OR_SKIP(grouped_gemm(gpu_ctx(), c1, a, b, kOffsets, desc));
  setenv("VLPAR_GROUPED_GEMM_MAX_CTAS", "3", 1);
  const Status st = grouped_gemm(gpu_ctx(), c2, a, b, kOffsets, desc);
  unsetenv("VLPAR_GROUPED_GEMM_MAX_CTAS");
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_TRUE(bitwise_equal("c: one CTA per tile vs 3 CTAs", download(al, c1), download(al, c2)));
}

/// The weight gradient's persistent grid: 2 CTAs walking the 8 tiles of the 4 non-empty groups give bitwise the
/// result of one CTA per tile.
VLPAR_TEST(VLPAR_SUITE(GroupedGemmProps), WeightGradCappedGridIsBitwiseEqual) {
  VLPAR_REQUIRE_GPU();
  Allocator al;
  const Tensor a = upload(al, random_tensor(al, {kRows, 136}, DType::kBF16, 7, -2.f, 2.f));
  const Tensor dc = upload(al, random_tensor(al, {kRows, 40}, DType::kBF16, 8));
  const Shape dw_shape{int64_t(kOffsets.size()) - 1, 136, 40};
  Tensor dw1 = Tensor::zeros(al, dw_shape, DType::kF32, Device::cuda(0)).value();
  Tensor dw2 = Tensor::zeros(al, dw_shape, DType::kF32, Device::cuda(0)).value();
  VLPAR_ASSERT_OK_OR_SKIP(grouped_weight_grad(gpu_ctx(), dw1, a, dc, kOffsets));
  setenv("VLPAR_GROUPED_GEMM_MAX_CTAS", "2", 1);
  const Status st = grouped_weight_grad(gpu_ctx(), dw2, a, dc, kOffsets);
  unsetenv("VLPAR_GROUPED_GEMM_MAX_CTAS");
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_TRUE(bitwise_equal("dw: one CTA per tile vs 2 CTAs", download(al, dw1), download(al, dw2)));
}

VLPAR_TEST(VLPAR_SUITE(GroupedGemmProps), WhatTheKernelCannotTakeIsANamedError) {
  VLPAR_REQUIRE_GPU();
  Allocator al;
  const Device dev = Device::cuda(0);
  const std::vector<int64_t> off = {0, 5, 9};
  auto t = [&](Shape s, DType dt) { return Tensor::zeros(al, s, dt, dev).value(); };
  auto expect = [](const Status& st, StatusCode code, const std::string& needle) {
    ASSERT_FALSE(st.ok()) << needle;
    EXPECT_EQ(st.code(), code) << st.to_string();
    EXPECT_NE(st.message().find(needle), std::string::npos) << st.message();
  };
  const GemmDesc tb{false, true, 1.f, 0.f};
  expect(grouped_gemm(gpu_ctx(), t({9, 16}, DType::kF32), t({9, 16}, DType::kF32), t({2, 16, 16}, DType::kF32), off,
                      tb),
         StatusCode::kNotSupported, "the CUDA kernel takes bf16 or f16 operands");
  expect(grouped_gemm(gpu_ctx(), t({9, 16}, DType::kBF16), t({9, 16}, DType::kBF16), t({2, 16, 16}, DType::kF16), off,
                      tb),
         StatusCode::kInvalidArgument, "b has dtype f16 but a has bf16");
  expect(grouped_gemm(gpu_ctx(), t({9, 16}, DType::kBF16), t({9, 12}, DType::kBF16), t({2, 16, 12}, DType::kBF16), off,
                      tb),
         StatusCode::kNotSupported, "must be multiples of 8 elements");
  expect(grouped_gemm(gpu_ctx(), t({9, 16}, DType::kF16), t({9, 16}, DType::kBF16), t({2, 16, 16}, DType::kBF16), off,
                      tb),
         StatusCode::kNotSupported, "c must be bf16 or f32");
  expect(grouped_weight_grad(gpu_ctx(), t({2, 16, 8}, DType::kBF16), t({9, 16}, DType::kBF16), t({9, 8}, DType::kBF16),
                             off),
         StatusCode::kNotSupported, "dw must be f32");
  expect(grouped_weight_grad(gpu_ctx(), t({2, 16, 8}, DType::kF32), t({9, 16}, DType::kBF16), t({9, 8}, DType::kF16),
                             off),
         StatusCode::kInvalidArgument, "dc has dtype f16 but a has bf16");
  expect(grouped_weight_grad(gpu_ctx(), t({2, 12, 8}, DType::kF32), t({9, 12}, DType::kBF16), t({9, 8}, DType::kBF16),
                             off),
         StatusCode::kNotSupported, "must be multiples of 8");
}

}  // namespace
}  // namespace vlpar
