// CUDA MoE token path (src/kernels/cuda/moe_permute_kernel.cuh) through the public ops with CUDA views:
//   - moe_dispatch_plan from device indices equals the CPU plan exactly (offsets and both maps: the stable counting
//     sort), over one and several 2048-assignment chunks, with an expert nobody picks; out-of-range and repeated ids
//     are the host check's named errors (the first invalid assignment), and no half-built plan is left behind;
//   - moe_permute / moe_unpermute / moe_row_dot / moe_scale_rows for bf16, f16 and f32 rows, 16-byte vector and
//     scalar instantiations (F = 40 and F = 13), against fp64 with the derived rule of tests/tolerances.hpp (naive =
//     the same loops in float, rounded to the row dtype); permute without weights is an exact copy; unpermute sums
//     in ascending expert order and is bitwise reproducible;
//   - a padded plan (moe_pad_plan): padding rows zero after permute and scale_rows, the rest the CPU path's.
// Run: ctest --test-dir build/emu -R MoePermute (emulated), or -L gpu on a GPU.
#include <fmt/core.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "gpu_test_util.hpp"
#include "test_util.hpp"
#include "vlpar/kernels/moe.hpp"

namespace vlpar {
namespace {
using namespace vlpar::test;

/// [T, K] i32 host indices: K distinct experts per token from [0, E) without `skip` (a deterministic LCG).
Tensor route(Allocator& al, int64_t T, int64_t K, int E, int skip, uint64_t seed) {
  Tensor idx = Tensor::empty(al, {T, K}, DType::kI32).value();
  uint64_t s = seed;
  for (int64_t t = 0; t < T; ++t) {
    std::vector<int32_t> pool;
    for (int e = 0; e < E; ++e)
      if (e != skip) pool.push_back(e);
    for (int64_t k = 0; k < K; ++k) {  // partial Fisher–Yates
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      const size_t j = size_t(k) + size_t((s >> 33) % (pool.size() - size_t(k)));
      std::swap(pool[size_t(k)], pool[j]);
      idx.ptr<int32_t>()[t * K + k] = pool[size_t(k)];
    }
  }
  return idx;
}

class VLPAR_SUITE(MoePermutePlan) : public ::testing::TestWithParam<int64_t> {};

VLPAR_TEST_P(VLPAR_SUITE(MoePermutePlan), EqualsTheCpuPlan) {
  VLPAR_REQUIRE_GPU();
  Allocator al;
  const int64_t T = GetParam(), K = 4;
  const int E = 7;
  const Tensor idx = route(al, T, K, E, 3, 11);
  MoeDispatch want, got;
  ASSERT_TRUE(moe_dispatch_plan(test_ctx(), want, idx, E).ok());
  VLPAR_ASSERT_OK_OR_SKIP(moe_dispatch_plan(gpu_ctx(), got, upload(al, idx), E));
  EXPECT_EQ(got.num_experts, E);
  EXPECT_EQ(got.top_k, K);
  EXPECT_EQ(got.num_tokens, T);
  EXPECT_EQ(got.offsets, want.offsets);
  EXPECT_EQ(got.row_assignment, want.row_assignment);
  EXPECT_EQ(got.assignment_row, want.assignment_row);
  EXPECT_EQ(got.expert_rows(3), 0);
}

// 150 tokens: one chunk; 1100 tokens: 4400 assignments in three chunks; 0 tokens: the empty plan.
VLPAR_INSTANTIATE(Tokens, VLPAR_SUITE(MoePermutePlan), ::testing::Values(int64_t{150}, int64_t{1100}, int64_t{0}),
                  [](const auto& info) { return fmt::format("t{}", info.param); });

VLPAR_TEST(VLPAR_SUITE(MoePermuteProps), BadIdsAreTheHostChecksNamedErrors) {
  VLPAR_REQUIRE_GPU();
  Allocator al;
  const int E = 5;
  for (const auto& [t, k, e, needle] : {std::tuple{40, 1, 5, "indices[40, 1] = 5 is outside [0, 5)"},
                                        std::tuple{30, 2, -1, "indices[30, 2] = -1 is outside [0, 5)"},
                                        std::tuple{20, 2, -7, "indices[20, 2] = -7 is outside [0, 5)"}}) {
    Tensor idx = route(al, 60, 3, E, -1, 5);
    idx.ptr<int32_t>()[t * 3 + k] = e;
    idx.ptr<int32_t>()[55 * 3 + 1] = idx.ptr<int32_t>()[55 * 3];  // a later repeat: not the first bad one
    MoeDispatch plan;
    const Status st = moe_dispatch_plan(gpu_ctx(), plan, upload(al, idx), E);
    ASSERT_FALSE(st.ok()) << needle;
    EXPECT_NE(st.message().find(needle), std::string::npos) << st.message();
    EXPECT_TRUE(plan.offsets.empty()) << "a failed plan must not look built";
  }
  Tensor idx = route(al, 60, 3, E, -1, 5);
  idx.ptr<int32_t>()[9 * 3 + 2] = idx.ptr<int32_t>()[9 * 3 + 0];
  MoeDispatch plan;
  const Status st = moe_dispatch_plan(gpu_ctx(), plan, upload(al, idx), E);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("indices row 9 selects expert"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("twice (slots 0 and 2)"), std::string::npos) << st.message();
}

struct RowsCase {
  DType dtype;
  int64_t f;
};

class VLPAR_SUITE(MoePermuteRows) : public ::testing::TestWithParam<RowsCase> {
 protected:
  static constexpr int64_t kT = 37, kK = 3;
  static constexpr int kE = 6;
  void SetUp() override {
    idx_ = route(al_, kT, kK, kE, 2, 21);
    ASSERT_TRUE(moe_dispatch_plan(test_ctx(), plan_, idx_, kE).ok());
    weights_ = random_tensor(al_, {kT, kK}, DType::kF32, 22, 0.05f, 1.f);
  }
  Allocator al_;
  Tensor idx_, weights_;
  MoeDispatch plan_;
};

VLPAR_TEST_P(VLPAR_SUITE(MoePermuteRows), PermuteUnpermuteRowDotScale) {
  VLPAR_REQUIRE_GPU();
  const RowsCase& c = GetParam();
  const int64_t R = kT * kK, F = c.f;
  const Tensor x = random_tensor(al_, {kT, F}, c.dtype, 23, -2.f, 2.f);
  const Tensor y = random_tensor(al_, {R, F}, c.dtype, 24, -2.f, 2.f);
  const Tensor wd = upload(al_, weights_);
  const auto x64 = to_f64(x), y64 = to_f64(y), w64 = to_f64(weights_);
  const Context ctx = gpu_ctx();
  // permute without weights: an exact gather
  Tensor xp = Tensor::zeros(al_, {R, F}, c.dtype, Device::cuda(0)).value();
  VLPAR_ASSERT_OK_OR_SKIP(moe_permute(ctx, xp, upload(al_, x), {}, plan_));
  const auto xp64 = to_f64(download(al_, xp));
  for (int64_t r = 0; r < R; ++r)
    for (int64_t f = 0; f < F; ++f)
      ASSERT_EQ(xp64[size_t(r * F + f)], x64[size_t(plan_.row_assignment[size_t(r)] / kK * F + f)]) << r << "," << f;
  // permute with weights: out[r] = w[a] · x[a / K], one rounding
  std::vector<double> pw64(size_t(R * F)), pwf(size_t(R * F));
  for (int64_t r = 0; r < R; ++r) {
    const int32_t a = plan_.row_assignment[size_t(r)];
    for (int64_t f = 0; f < F; ++f) {
      pw64[size_t(r * F + f)] = w64[size_t(a)] * x64[size_t(a / kK * F + f)];
      pwf[size_t(r * F + f)] = double(float(w64[size_t(a)]) * float(x64[size_t(a / kK * F + f)]));
    }
  }
  VLPAR_ASSERT_OK_OR_SKIP(moe_permute(ctx, xp, upload(al_, x), wd, plan_));
  EXPECT_TRUE(close_to_reference("moe_permute_weighted", to_f64(download(al_, xp)), pw64,
                                 round_to_dtype(pwf, c.dtype), Shape{R, F}, TolOp::kActivation, c.dtype));
  // scale_rows in place: y[r] *= w[a(r)]
  std::vector<double> s64(size_t(R * F)), sf(size_t(R * F));
  for (int64_t r = 0; r < R; ++r)
    for (int64_t f = 0; f < F; ++f) {
      const double w = w64[size_t(plan_.row_assignment[size_t(r)])];
      s64[size_t(r * F + f)] = w * y64[size_t(r * F + f)];
      sf[size_t(r * F + f)] = double(float(w) * float(y64[size_t(r * F + f)]));
    }
  Tensor ys = upload(al_, y);
  VLPAR_ASSERT_OK_OR_SKIP(moe_scale_rows(ctx, ys, wd, plan_));
  EXPECT_TRUE(close_to_reference("moe_scale_rows", to_f64(download(al_, ys)), s64, round_to_dtype(sf, c.dtype),
                                 Shape{R, F}, TolOp::kActivation, c.dtype));
  // unpermute: out[t] = Σ_k ascending expert w[t, k] · y[row(t, k)]
  std::vector<double> u64(size_t(kT * F), 0.0);
  std::vector<float> uf(size_t(kT * F), 0.f);
  for (int64_t t = 0; t < kT; ++t) {
    std::vector<int32_t> rows;
    for (int64_t k = 0; k < kK; ++k) rows.push_back(plan_.assignment_row[size_t(t * kK + k)]);
    std::sort(rows.begin(), rows.end());
    for (const int32_t r : rows) {
      const double w = w64[size_t(plan_.row_assignment[size_t(r)])];
      for (int64_t f = 0; f < F; ++f) {
        u64[size_t(t * F + f)] += w * y64[size_t(r * F + f)];
        uf[size_t(t * F + f)] += float(w) * float(y64[size_t(r * F + f)]);
      }
    }
  }
  const Tensor yd = upload(al_, y);
  Tensor u1 = Tensor::zeros(al_, {kT, F}, c.dtype, Device::cuda(0)).value();
  Tensor u2 = Tensor::zeros(al_, {kT, F}, c.dtype, Device::cuda(0)).value();
  VLPAR_ASSERT_OK_OR_SKIP(moe_unpermute(ctx, u1, yd, wd, plan_));
  VLPAR_ASSERT_OK_OR_SKIP(moe_unpermute(ctx, u2, yd, wd, plan_));
  EXPECT_TRUE(close_to_reference("moe_unpermute", to_f64(download(al_, u1)), u64,
                                 round_to_dtype(to_double(uf), c.dtype), Shape{kT, F}, TolOp::kGemm, c.dtype));
  EXPECT_TRUE(bitwise_equal("moe_unpermute twice", download(al_, u1), download(al_, u2)));
  // row_dot: dweights[t, k] = <x_p[row(t, k)], y[row(t, k)]> (fp32 out)
  std::vector<double> d64(size_t(R), 0.0);
  std::vector<float> df(size_t(R), 0.f);
  for (int64_t a = 0; a < R; ++a) {
    const int64_t r = plan_.assignment_row[size_t(a)];
    for (int64_t f = 0; f < F; ++f) {
      d64[size_t(a)] += xp64[size_t(r * F + f)] * y64[size_t(r * F + f)];
      df[size_t(a)] += float(xp64[size_t(r * F + f)]) * float(y64[size_t(r * F + f)]);
    }
  }
  Tensor xp2 = Tensor::zeros(al_, {R, F}, c.dtype, Device::cuda(0)).value();
  VLPAR_ASSERT_OK_OR_SKIP(moe_permute(ctx, xp2, upload(al_, x), {}, plan_));
  Tensor dots = Tensor::zeros(al_, {kT, kK}, DType::kF32, Device::cuda(0)).value();
  VLPAR_ASSERT_OK_OR_SKIP(moe_row_dot(ctx, dots, xp2, yd, plan_));
  EXPECT_TRUE(close_to_reference("moe_row_dot", to_f64(download(al_, dots)), d64, to_double(df), Shape{kT, kK},
                                 TolOp::kGemm, DType::kF32));
}

VLPAR_INSTANTIATE(Dtypes, VLPAR_SUITE(MoePermuteRows),
    ::testing::Values(RowsCase{DType::kBF16, 40}, RowsCase{DType::kBF16, 13},  // 16-byte vectors; scalar
                      RowsCase{DType::kF16, 40}, RowsCase{DType::kF16, 13},
                      RowsCase{DType::kF32, 40}, RowsCase{DType::kF32, 13}),
    [](const auto& info) { return fmt::format("{}_f{}", dtype_name(info.param.dtype), info.param.f); });

/// The plan built on the device drives the CPU ops unchanged (one layout for both paths).
VLPAR_TEST(VLPAR_SUITE(MoePermuteProps), DevicePlanDrivesTheCpuOps) {
  VLPAR_REQUIRE_GPU();
  Allocator al;
  const Tensor idx = route(al, 50, 2, 4, -1, 31);
  MoeDispatch host, dev;
  ASSERT_TRUE(moe_dispatch_plan(test_ctx(), host, idx, 4).ok());
  VLPAR_ASSERT_OK_OR_SKIP(moe_dispatch_plan(gpu_ctx(), dev, upload(al, idx), 4));
  const Tensor x = random_tensor(al, {50, 8}, DType::kF32, 32);
  Tensor a = Tensor::empty(al, {100, 8}, DType::kF32).value(), b = Tensor::empty(al, {100, 8}, DType::kF32).value();
  ASSERT_TRUE(moe_permute(test_ctx(), a, x, {}, host).ok());
  ASSERT_TRUE(moe_permute(test_ctx(), b, x, {}, dev).ok());
  EXPECT_TRUE(bitwise_equal("CPU permute with the host plan vs the device plan", a, b));
}

/// A padded plan (moe_pad_plan, rows per expert a multiple of 8): the CUDA permute and scale_rows write zeros into
/// the padding rows and equal the CPU path bitwise elsewhere (f32); row_dot and unpermute never read the padding.
VLPAR_TEST(VLPAR_SUITE(MoePermuteProps), PaddedPlanZeroFillsAndMatchesTheCpu) {
  VLPAR_REQUIRE_GPU();
  Allocator al;
  const int64_t T = 40, K = 2, F = 8;
  const Tensor idx = route(al, T, K, 5, 1, 51);
  MoeDispatch plan;
  ASSERT_TRUE(moe_dispatch_plan(test_ctx(), plan, idx, 5).ok());
  ASSERT_TRUE(moe_pad_plan(plan, 8).ok());
  const int64_t R = plan.num_rows();
  ASSERT_GT(R, T * K);
  const Tensor x = random_tensor(al, {T, F}, DType::kF32, 52);
  const Tensor w = random_tensor(al, {T, K}, DType::kF32, 53, 0.1f, 1.f);
  Tensor garbage = Tensor::empty(al, {R, F}, DType::kF32).value();
  std::fill(garbage.ptr<float>(), garbage.ptr<float>() + R * F, 7.f);
  Tensor cpu = Tensor::empty(al, {R, F}, DType::kF32).value();
  ASSERT_TRUE(moe_permute(test_ctx(), cpu, x, w, plan).ok());
  Tensor dev = upload(al, garbage);
  VLPAR_ASSERT_OK_OR_SKIP(moe_permute(gpu_ctx(), dev, upload(al, x), upload(al, w), plan));
  EXPECT_TRUE(bitwise_equal("padded permute: CUDA vs CPU", download(al, dev), cpu));
  Tensor scaled = upload(al, garbage);
  VLPAR_ASSERT_OK_OR_SKIP(moe_scale_rows(gpu_ctx(), scaled, upload(al, w), plan));
  const std::vector<double> s64 = to_f64(download(al, scaled));
  for (int64_t r = 0; r < R; ++r) {
    const int32_t a = plan.row_assignment[size_t(r)];
    EXPECT_EQ(s64[size_t(r * F)], a < 0 ? 0.0 : double(7.f * w.ptr<float>()[a])) << "row " << r;
  }
  Tensor back = Tensor::zeros(al, {T, F}, DType::kF32, Device::cuda(0)).value();
  VLPAR_ASSERT_OK_OR_SKIP(moe_unpermute(gpu_ctx(), back, dev, {}, plan));
  Tensor back_cpu = Tensor::empty(al, {T, F}, DType::kF32).value();
  ASSERT_TRUE(moe_unpermute(test_ctx(), back_cpu, cpu, {}, plan).ok());
  EXPECT_TRUE(close_to_reference("padded unpermute", to_f64(download(al, back)), to_f64(back_cpu), to_f64(back_cpu),
                                 Shape{T, F}, TolOp::kGemm, DType::kF32));
}

/// A plan with dropped assignments (moe_capacity_plan, then padded): the CUDA permute writes only the kept rows
/// (bitwise the CPU's), unpermute leaves the dropped out of the sum (the CPU's within fp32 rounding: the CUDA sum
/// contracts to FMAs) and row_dot gives them 0.
VLPAR_TEST(VLPAR_SUITE(MoePermuteProps), CapacityPlanSkipsDroppedAssignmentsAsTheCpu) {
  VLPAR_REQUIRE_GPU();
  Allocator al;
  const int64_t T = 40, K = 2, F = 8;
  const Tensor idx = route(al, T, K, 5, -1, 61);
  MoeDispatch plan;
  ASSERT_TRUE(moe_dispatch_plan(test_ctx(), plan, idx, 5).ok());
  const Result<int64_t> dropped = moe_capacity_plan(plan, 10);  // 80 rows over 5 experts: some above 10
  ASSERT_TRUE(dropped.ok());
  ASSERT_GT(dropped.value(), 0);
  ASSERT_TRUE(moe_pad_plan(plan, 4).ok());
  const int64_t R = plan.num_rows();
  const Tensor x = random_tensor(al, {T, F}, DType::kF32, 62);
  const Tensor w = random_tensor(al, {T, K}, DType::kF32, 63, 0.1f, 1.f);
  Tensor cpu = Tensor::empty(al, {R, F}, DType::kF32).value();
  ASSERT_TRUE(moe_permute(test_ctx(), cpu, x, {}, plan).ok());
  Tensor dev = Tensor::empty(al, {R, F}, DType::kF32, Device::cuda(0)).value();
  VLPAR_ASSERT_OK_OR_SKIP(moe_permute(gpu_ctx(), dev, upload(al, x), {}, plan));
  EXPECT_TRUE(bitwise_equal("capacity permute: CUDA vs CPU", download(al, dev), cpu));
  Tensor back = Tensor::empty(al, {T, F}, DType::kF32, Device::cuda(0)).value();
  VLPAR_ASSERT_OK_OR_SKIP(moe_unpermute(gpu_ctx(), back, dev, upload(al, w), plan));
  Tensor back_cpu = Tensor::empty(al, {T, F}, DType::kF32).value();
  ASSERT_TRUE(moe_unpermute(test_ctx(), back_cpu, cpu, w, plan).ok());
  EXPECT_TRUE(close_to_reference("capacity unpermute", to_f64(download(al, back)), to_f64(back_cpu), to_f64(back_cpu),
                                 Shape{T, F}, TolOp::kGemm, DType::kF32));  // the weighted sum: FMA contraction
  Tensor dw = Tensor::empty(al, {T, K}, DType::kF32, Device::cuda(0)).value();
  VLPAR_ASSERT_OK_OR_SKIP(moe_row_dot(gpu_ctx(), dw, dev, dev, plan));
  const Tensor got = download(al, dw);
  for (int64_t a = 0; a < T * K; ++a)
    if (plan.assignment_row[size_t(a)] < 0) {
      EXPECT_EQ(got.ptr<float>()[a], 0.f) << "dropped assignment " << a;
    }
}

VLPAR_TEST(VLPAR_SUITE(MoePermuteProps), WhatTheKernelsCannotTakeIsANamedError) {
  VLPAR_REQUIRE_GPU();
  Allocator al;
  const Tensor idx = route(al, 6, 2, 4, -1, 41);
  MoeDispatch plan;
  ASSERT_TRUE(moe_dispatch_plan(test_ctx(), plan, idx, 4).ok());
  const Device dev = Device::cuda(0);
  auto t = [&](Shape s, DType dt) { return Tensor::zeros(al, s, dt, dev).value(); };
  Status st = moe_permute(gpu_ctx(), t({12, 8}, DType::kF16), t({6, 8}, DType::kBF16), {}, plan);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("out has dtype f16 but in has bf16"), std::string::npos) << st.message();
  st = moe_unpermute(gpu_ctx(), t({6, 8}, DType::kBF16), t({12, 8}, DType::kBF16), t({6, 2}, DType::kBF16), plan);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("weights must be f32"), std::string::npos) << st.message();
  st = moe_permute(gpu_ctx(), t({12, 8}, DType::kI32), t({6, 8}, DType::kI32), {}, plan);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("bf16, f16 or f32 rows"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace vlpar
