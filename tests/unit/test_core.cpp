// Core runtime: dtype rounding, Philox KAT vectors and layout invariance, tensors, allocator, Status.
// Run: ctest --test-dir build/cpu -R Core
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "vlpar/core/allocator.hpp"
#include "vlpar/core/dtype.hpp"
#include "vlpar/core/init.hpp"
#include "vlpar/core/philox.hpp"
#include "vlpar/core/rows.hpp"
#include "vlpar/core/tensor.hpp"

namespace vlpar {
namespace {

// Reference bf16 rounding done in double arithmetic: pick the nearer of the two bf16 neighbours, ties to even.
uint16_t bf16_reference(float f) {
  if (std::isnan(f)) return 0x7fc0;
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t lo = u & 0xffff0000u, hi = lo + 0x10000u;
  float flo, fhi;
  std::memcpy(&flo, &lo, 4);
  std::memcpy(&fhi, &hi, 4);
  if (std::isinf(flo)) return uint16_t(lo >> 16);
  const double dlo = std::fabs(double(f) - double(flo));
  // Past the largest finite bf16 the upper neighbour is inf, which IEEE treats as the value 2^128.
  const double dhi = std::fabs((std::isinf(fhi) ? std::copysign(std::ldexp(1.0, 128), double(f)) : double(fhi)) - double(f));
  if (dlo < dhi) return uint16_t(lo >> 16);
  if (dhi < dlo) return uint16_t(hi >> 16);
  return ((lo >> 16) & 1u) ? uint16_t(hi >> 16) : uint16_t(lo >> 16);
}

TEST(CoreDType, Bf16RoundsToNearestEvenOnSampledFloats) {
  int64_t checked = 0;
  for (uint64_t u = 0; u <= 0xffffffffull; u += 0x10001ull) {  // ~65k patterns across every exponent and sign
    float f;
    const uint32_t bits = uint32_t(u);
    std::memcpy(&f, &bits, 4);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(f))));
      continue;
    }
    ASSERT_EQ(float_to_bf16(f).bits, bf16_reference(f)) << "bits 0x" << std::hex << bits;
    ++checked;
  }
  // Exact ties: 1 + 2^-8 lies halfway between 1 and 1 + 2^-7; even mantissa is 1.
  EXPECT_EQ(bf16_to_float(float_to_bf16(1.0f + 1.0f / 256)), 1.0f);
  EXPECT_EQ(bf16_to_float(float_to_bf16(1.0f + 3.0f / 256)), 1.0f + 4.0f / 256);
  EXPECT_GT(checked, 60000);
}

TEST(CoreDType, F16MatchesCompilerFloat16Exhaustively) {
  // Every f16 pattern round-trips, and float→f16 matches the compiler's _Float16 (IEEE RNE) on ~16M floats.
#if defined(__clang__) && __clang_major__ < 15
  GTEST_SKIP() << "clang " << __clang_major__ << " has no _Float16 on x86-64 (the GCC build runs this test)";
#else
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    const f16 x{uint16_t(h)};
    const float f = f16_to_float(x);
    _Float16 ref;
    std::memcpy(&ref, &h, 2);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(float(ref)));
      continue;
    }
    ASSERT_EQ(f, float(ref)) << "f16 bits " << h;
    ASSERT_EQ(float_to_f16(f).bits, uint16_t(h)) << "round trip of f16 bits " << h;
  }
  for (uint64_t u = 0; u <= 0xffffffffull; u += 251) {
    float f;
    const uint32_t bits = uint32_t(u);
    std::memcpy(&f, &bits, 4);
    if (std::isnan(f)) continue;
    const _Float16 ref = _Float16(f);
    uint16_t rb;
    std::memcpy(&rb, &ref, 2);
    ASSERT_EQ(float_to_f16(f).bits, rb) << "float bits 0x" << std::hex << bits;
  }
#endif
}

TEST(CorePhilox, MatchesRandom123KnownAnswers) {
  // Random123 kat_vectors, philox4x32 with 10 rounds.
  auto check = [](Philox4 ctr, uint32_t k0, uint32_t k1, Philox4 want) {
    const Philox4 got = philox4x32_10(ctr, k0, k1);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(got.v[i], want.v[i]) << "word " << i;
  };
  check({{0, 0, 0, 0}}, 0, 0, {{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}});
  check({{~0u, ~0u, ~0u, ~0u}}, ~0u, ~0u, {{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}});
  check({{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}}, 0xa4093822, 0x299f31d0,
        {{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}});
}

TEST(CorePhilox, NormalMomentsAreStandard) {
  double s = 0, s2 = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    const double x = philox_normal(1234, 7, uint64_t(i));
    s += x;
    s2 += x * x;
  }
  // Mean has std 1/sqrt(n) ≈ 0.0022 and the variance estimate sqrt(2/n) ≈ 0.0032: 5 sigma bounds.
  EXPECT_NEAR(s / n, 0.0, 0.012);
  EXPECT_NEAR(s2 / n, 1.0, 0.016);
}

TEST(CoreInit, ShardIsExactSliceOfFullTensorAnyLayout) {
  Allocator alloc;
  Context ctx;
  ctx.num_threads = 2;
  const Shape full{6, 10};
  auto t = Tensor::empty(alloc, full, DType::kF32);
  ASSERT_TRUE(t.ok());
  ASSERT_TRUE(init_full(ctx, t.value(), 42, 3, InitRule::normal(0.f, 0.02f)).ok());
  const float* f = t.value().ptr<float>();
  // Column-parallel (dim 0 split in 3) and row-parallel (dim 1 split in 2) shards.
  for (int split_dim : {0, 1}) {
    const int parts = split_dim == 0 ? 3 : 2;
    for (int p = 0; p < parts; ++p) {
      Shape ss = full;
      ss[split_dim] = full[split_dim] / parts;
      auto s = Tensor::empty(alloc, ss, DType::kF32);
      ASSERT_TRUE(s.ok());
      int64_t off[kMaxDims] = {0, 0};
      off[split_dim] = p * ss[split_dim];
      ASSERT_TRUE(init_shard(ctx, s.value(), full, off, 42, 3, InitRule::normal(0.f, 0.02f)).ok());
      for (int64_t r = 0; r < ss[0]; ++r)
        for (int64_t c = 0; c < ss[1]; ++c)
          ASSERT_EQ(s.value().ptr<float>()[r * ss[1] + c], f[(r + off[0]) * full[1] + c + off[1]]);
    }
  }
  // A different param id or seed gives different numbers.
  auto u = Tensor::empty(alloc, full, DType::kF32);
  ASSERT_TRUE(init_full(ctx, u.value(), 42, 4, InitRule::normal(0.f, 0.02f)).ok());
  EXPECT_NE(std::memcmp(u.value().view().data, f, 60 * 4), 0);
}

TEST(CoreInit, RejectsShardOutsideFullShape) {
  Allocator alloc;
  Context ctx;
  auto s = Tensor::empty(alloc, {4, 4}, DType::kF32);
  int64_t off[kMaxDims] = {3, 0};
  const Status st = init_shard(ctx, s.value(), Shape{6, 4}, off, 1, 1, InitRule::ones());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("exceeds full shape [6, 4]"), std::string::npos) << st.message();
}

TEST(CoreAllocator, TracksCurrentAndPeakBytes) {
  Allocator alloc;
  {
    auto a = Tensor::empty(alloc, {1024}, DType::kF32);
    auto b = Tensor::empty(alloc, {256}, DType::kBF16);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(alloc.stats(Device::cpu()).current_bytes, 4096 + 512);
    EXPECT_EQ(alloc.stats(Device::cpu()).num_allocs, 2);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a.value().ptr<float>()) % Allocator::kHostAlignment, 0u);
  }
  EXPECT_EQ(alloc.stats(Device::cpu()).current_bytes, 0);
  EXPECT_EQ(alloc.stats(Device::cpu()).peak_bytes, 4096 + 512);
  alloc.reset_peak(Device::cpu());
  EXPECT_EQ(alloc.stats(Device::cpu()).peak_bytes, 0);
}

// The host block cache: a freed large block comes back for the next allocation of its size class (same address,
// no new memory), small blocks are not kept, the accounting of live bytes is unchanged, the limit bounds what is
// kept, release_cached() empties it; the size classes round up by at most 1/8.
TEST(CoreAllocator, HostCacheReusesLargeBlocksWithinItsLimit) {
  const size_t mib = size_t(1) << 20;
  EXPECT_EQ(Allocator::host_capacity(100), 128u);
  EXPECT_EQ(Allocator::host_capacity(mib), mib);
  EXPECT_EQ(Allocator::host_capacity(mib + 1), mib + mib / 8);
  EXPECT_EQ(Allocator::host_capacity(5 * mib + 3), 5 * mib + mib / 2);  // class step 4 MiB / 8
  for (size_t b = mib; b < 64 * mib; b += 777777) {
    const size_t c = Allocator::host_capacity(b);
    EXPECT_GE(c, b);
    EXPECT_LE(double(c), 1.125 * double(b) + 64) << b;
    EXPECT_EQ(Allocator::host_capacity(c), c) << b;  // a class's capacity is its own class
  }
  Allocator alloc(8 * mib);
  void* a = alloc.allocate(3 * mib, Device::cpu()).value();
  alloc.deallocate(a, 3 * mib, Device::cpu());
  EXPECT_EQ(alloc.stats(Device::cpu()).current_bytes, 0);
  EXPECT_EQ(alloc.stats(Device::cpu()).cached_bytes, int64_t(3 * mib));
  void* b = alloc.allocate(3 * mib - 4096, Device::cpu()).value();  // the same class
  EXPECT_EQ(b, a);
  EXPECT_EQ(alloc.stats(Device::cpu()).cached_bytes, 0);
  EXPECT_EQ(alloc.stats(Device::cpu()).current_bytes, int64_t(3 * mib - 4096));
  std::memset(b, 1, 3 * mib - 4096);  // the whole requested size is usable
  alloc.deallocate(b, 3 * mib - 4096, Device::cpu());
  void* small = alloc.allocate(1000, Device::cpu()).value();  // below kHostCacheMinBytes: never cached
  alloc.deallocate(small, 1000, Device::cpu());
  EXPECT_EQ(alloc.stats(Device::cpu()).cached_bytes, int64_t(3 * mib));
  void* big = alloc.allocate(6 * mib, Device::cpu()).value();  // 3 + 6 > 8 MiB: freed, not kept
  alloc.deallocate(big, 6 * mib, Device::cpu());
  EXPECT_EQ(alloc.stats(Device::cpu()).cached_bytes, int64_t(3 * mib));
  alloc.release_cached();
  EXPECT_EQ(alloc.stats(Device::cpu()).cached_bytes, 0);
  Allocator none(0);  // limit 0: nothing kept
  void* c = none.allocate(2 * mib, Device::cpu()).value();
  none.deallocate(c, 2 * mib, Device::cpu());
  EXPECT_EQ(none.stats(Device::cpu()).cached_bytes, 0);
}

TEST(CoreAllocator, CudaWithoutCudaIsANamedError) {
  if (built_with_cuda()) GTEST_SKIP() << "CUDA build: covered by the gpu tests";
  Allocator alloc;
  auto t = Tensor::empty(alloc, {4}, DType::kF32, Device::cuda(0));
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kNotSupported);
  EXPECT_NE(t.status().message().find("no CUDA support"), std::string::npos);
}

TEST(CoreTensor, ViewsSliceReshapeAndRows) {
  Allocator alloc;
  auto t = Tensor::zeros(alloc, {4, 6}, DType::kF32).value();
  for (int i = 0; i < 24; ++i) t.ptr<float>()[i] = float(i);
  const TensorView right = t.view().slice(1, 3, 6);  // [4, 3] with row stride 6
  EXPECT_FALSE(right.is_contiguous());
  EXPECT_EQ(right.ptr<float>()[0], 3.f);
  auto rows = as_rows(right, "test");
  ASSERT_TRUE(rows.ok());
  EXPECT_EQ(rows->rows, 4);
  EXPECT_EQ(rows->row_stride, 6);
  EXPECT_FALSE(right.reshape({12}).ok());
  auto flat = t.view().reshape({2, 12});
  ASSERT_TRUE(flat.ok());
  EXPECT_EQ(flat->stride(0), 12);
  TensorView col = t.view();
  col.strides[1] = 4;  // last dim not contiguous
  auto bad = as_rows(col, "my_op");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("my_op: last dim"), std::string::npos) << bad.status().message();
}

TEST(CoreStatus, CheckCarriesFileLineAndRank) {
  auto f = [](int x) -> Status {
    VLPAR_CHECK(x > 0, "x must be positive, got {}", x);
    return Status::Ok();
  };
  const Status s = f(-3);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("x must be positive, got -3"), std::string::npos);
  EXPECT_NE(s.message().find("test_core.cpp:"), std::string::npos);
  EXPECT_NE(s.message().find("rank "), std::string::npos);
  EXPECT_NE(s.to_string().find("InvalidArgument"), std::string::npos);
  EXPECT_TRUE(f(1).ok());
}

}  // namespace
}  // namespace vlpar
