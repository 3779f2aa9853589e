// The PTX wrappers (src/kernels/cuda/ptx/) doing real work: one m16n8k16 tile staged by cp.async, loaded by
// ldmatrix (A without .trans; B N-major with .trans and K-major without) and multiplied by mma.sync, bf16 and f16,
// against an fp64 matmul; a 128×128×64 block tile of 4 warps; cp.async with zero fill; a warp-specialised
// producer/consumer pipeline over named barriers. One source, two runs: in the emulated build (suites Emu*, label
// emu) it checks that the emulator's fragment layouts and copy semantics give the right numbers; on a GPU
// (suites Cuda*, label gpu; bench/gpu/validate.sh) the same kernels run on the hardware, which is the ground truth
// the emulator is built to match. The broken variants are tests/emu/test_emu_warp_matrix.cpp (emulated only).
// Kernels: tests/emu/warp_matrix_kernels.cu. Run: ctest --test-dir build/emu -R WarpMatrix|MmaTile|CpAsync
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "emu_test_util.hpp"
#include "gpu_test_util.hpp"
#include "vlpar/core/device.hpp"
#include "vlpar/core/dtype.hpp"
#include "warp_matrix_kernels.hpp"

namespace vlpar {
namespace {

using namespace vlpar::emu_test;

/// Random 16-bit values of the format (bf16 or f16) in [-2, 2], and their exact values.
std::vector<uint16_t> random_halves(size_t n, bool is_bf16, uint32_t seed, std::vector<double>* values) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-2.f, 2.f);
  std::vector<uint16_t> bits(n);
  values->resize(n);
  for (size_t i = 0; i < n; ++i) {
    const float f = u(rng);
    bits[i] = is_bf16 ? float_to_bf16(f).bits : float_to_f16(f).bits;
    (*values)[i] = is_bf16 ? bf16_to_float(bf16{bits[i]}) : f16_to_float(f16{bits[i]});
  }
  return bits;
}

/// |d − Σ_k a·b − c| ≤ (K + 1) · u32 · (Σ_k |a·b| + |c|): any order of a K-term f32 accumulation of exact products.
void expect_gemm_close(const std::vector<float>& d, const std::vector<double>& a, const std::vector<double>& b_kn,
                       const std::vector<float>& c, int M, int N, int K) {
  const double u32 = std::ldexp(1.0, -24);
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) {
      double exact = c.empty() ? 0.0 : c[size_t(m * N + n)], mag = std::fabs(exact);
      for (int k = 0; k < K; ++k) {
        exact += a[size_t(m * K + k)] * b_kn[size_t(k * N + n)];
        mag += std::fabs(a[size_t(m * K + k)] * b_kn[size_t(k * N + n)]);
      }
      ASSERT_LE(std::fabs(d[size_t(m * N + n)] - exact), (K + 1) * u32 * mag + 1e-30) << "(" << m << "," << n << ")";
    }
}

struct TileCase {
  bool bf16, b_n_major;
};

class VLPAR_SUITE(MmaTile) : public ::testing::TestWithParam<TileCase> {};

VLPAR_TEST_P(VLPAR_SUITE(MmaTile), CpAsyncLdmatrixMmaMatchesFp64) {
  VLPAR_REQUIRE_GPU();
  const auto [is_bf16, b_n_major] = GetParam();
  std::vector<double> a64, b64;
  const std::vector<uint16_t> a = random_halves(16 * 16, is_bf16, 1, &a64);
  const std::vector<uint16_t> b_kn = random_halves(16 * 8, is_bf16, 2, &b64);  // K×N row-major
  std::vector<uint16_t> b = b_kn;
  if (!b_n_major)  // N×K row-major (K-major)
    for (int k = 0; k < 16; ++k)
      for (int n = 0; n < 8; ++n) b[size_t(n * 16 + k)] = b_kn[size_t(k * 8 + n)];
  std::vector<float> c(16 * 8);
  for (size_t i = 0; i < c.size(); ++i) c[i] = float(i % 7) * 0.25f - 0.5f;
  DeviceArray<uint16_t> da(a), db(b);
  DeviceArray<float> dc(c), dd(std::vector<float>(16 * 8, 0.f));
  const Status s = mma_tile(is_bf16, b_n_major, da.get(), db.get(), dc.get(), dd.get());
  ASSERT_TRUE(s.ok()) << s.to_string();
  expect_gemm_close(dd.host(), a64, b64, c, 16, 8, 16);
}

VLPAR_INSTANTIATE(Operands, VLPAR_SUITE(MmaTile),
                         ::testing::Values(TileCase{true, true}, TileCase{true, false}, TileCase{false, true},
                                           TileCase{false, false}),
                         [](const auto& info) {
                           return std::string(info.param.bf16 ? "bf16" : "f16") +
                                  (info.param.b_n_major ? "_B_nmajor_trans" : "_B_kmajor");
                         });

VLPAR_TEST(VLPAR_SUITE(MmaTile), FourWarpBlockTile128x128x64) {
  VLPAR_REQUIRE_GPU();
  std::vector<double> a64, b64;
  const std::vector<uint16_t> a = random_halves(128 * 64, true, 3, &a64);
  const std::vector<uint16_t> b = random_halves(64 * 128, true, 4, &b64);
  DeviceArray<uint16_t> da(a), db(b);
  DeviceArray<float> dd(std::vector<float>(128 * 128, 0.f));
  ASSERT_TRUE(mma_block_tile(da.get(), db.get(), dd.get()).ok());
  expect_gemm_close(dd.host(), a64, b64, {}, 128, 128, 64);
}

VLPAR_TEST(VLPAR_SUITE(CpAsync), CopiesAndZeroFill) {
  VLPAR_REQUIRE_GPU();
  std::vector<uint8_t> src(2048);
  for (size_t i = 0; i < src.size(); ++i) src[i] = uint8_t(i * 7 + 3);
  DeviceArray<uint8_t> dsrc(src), out(std::vector<uint8_t>(2048, 0xAB));
  ASSERT_TRUE(cp_async_roundtrip(dsrc.get(), out.get(), 2048, 16).ok());
  EXPECT_EQ(out.host(), src);
  ASSERT_TRUE(cp_async_roundtrip(dsrc.get(), out.get(), 2048, 6).ok());  // src-size 6: bytes 6..15 are zero
  const std::vector<uint8_t> z = out.host();
  for (size_t i = 0; i < z.size(); ++i) ASSERT_EQ(z[i], i % 16 < 6 ? src[i] : 0) << i;
}

VLPAR_TEST(VLPAR_SUITE(NamedBarrier), ProducerConsumerPipelineUnderEveryOrder) {
  VLPAR_REQUIRE_GPU();
  for (const char* seed : {"1", "2", "3"}) {
    setenv("VLPAR_EMU_SEED", seed, 1);
    DeviceArray<float> out(128);
    const Status s = named_barrier_pipeline(out.get(), PipelineFault::kNone);
    ASSERT_TRUE(s.ok()) << s.to_string();
    const std::vector<float> r = out.host();
    for (int i = 0; i < 128; ++i) EXPECT_EQ(r[size_t(i)], float(100 * (i / 64) + i % 64)) << i;
  }
  unsetenv("VLPAR_EMU_SEED");
}

}  // namespace
}  // namespace vlpar
