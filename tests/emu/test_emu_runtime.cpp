// The CUDA emulation tier itself (src/kernels/cuda/emu/): semantics of the built-ins against closed forms
// (shuffles of every kind and width, votes, barrier reductions, coordinates of 3-D grids and blocks, atomics,
// shared memory static and dynamic), and one test per rule the emulator must enforce: each runs a deliberately
// broken kernel (tests/emu/emu_kernels.cu) and expects a Status naming the kernel, the block and thread, and the
// rule — or, for faults that cannot be recovered from (fiber stack overflow, a spin loop that never yields), a
// death with that report. Run: ctest --test-dir build/emu -L emu
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "emu/launch.hpp"
#include "emu_kernels.hpp"
#include "emu_test_util.hpp"

namespace vlpar {
namespace {

using namespace vlpar::emu_test;

/// Runs the test body under every scheduling order the CI uses: round robin and two random seeds.
class EmuScheduled : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    const std::string p = GetParam();
    setenv("VLPAR_EMU_SCHED", p == "rr" ? "rr" : "random", 1);
    setenv("VLPAR_EMU_SEED", p == "rr" ? "1" : p.c_str(), 1);
  }
  void TearDown() override {
    unsetenv("VLPAR_EMU_SCHED");
    unsetenv("VLPAR_EMU_SEED");
  }
};

// ---- semantics ---------------------------------------------------------------------------------------------

/// Source lane of lane l for a shuffle of kind k (CUDA C++ Programming Guide, warp shuffle functions).
int expected_source(char k, int l, int a, int w) {
  const int seg = l & ~(w - 1), pos = l & (w - 1);
  switch (k) {
    case 'i': return seg + (a & (w - 1));
    case 'u': return pos - a < 0 ? l : l - a;
    case 'd': return pos + a >= w ? l : l + a;
    default: return (l ^ a) > seg + w - 1 ? l : (l ^ a);
  }
}

TEST_P(EmuScheduled, ShufflesOfEveryKindAndWidth) {
  std::vector<uint32_t> in(32);
  std::vector<int> arg(32);
  for (int l = 0; l < 32; ++l) {
    in[size_t(l)] = 1000u + uint32_t(l) * 7u;
    arg[size_t(l)] = (l * 5 + 3) % 37;  // some beyond the width: taken modulo the width
  }
  for (int width : {1, 2, 4, 8, 16, 32}) {
    for (int d : {0, 1, 3, 16}) {
      const int m = (d * 3 + 1) % 32;
      DeviceArray<uint32_t> din(32, in), out(128);
      DeviceArray<int> darg(32, arg);
      ASSERT_TRUE(shuffles(din.get(), darg.get(), d, m, width, out.get()).ok());
      const std::vector<uint32_t> got = out.host();
      for (int l = 0; l < 32; ++l) {
        EXPECT_EQ(got[size_t(l)], in[size_t(expected_source('i', l, arg[size_t(l)], width))]) << "idx " << l;
        EXPECT_EQ(got[size_t(32 + l)], in[size_t(expected_source('u', l, d, width))]) << "up " << l << " d " << d;
        EXPECT_EQ(got[size_t(64 + l)], in[size_t(expected_source('d', l, d, width))]) << "down " << l << " d " << d;
        EXPECT_EQ(got[size_t(96 + l)], in[size_t(expected_source('x', l, m, width))]) << "xor " << l << " m " << m;
      }
    }
  }
}

TEST_P(EmuScheduled, VotesAndBarrierReductions) {
  std::vector<int> pred(32);
  for (int l = 0; l < 32; ++l) pred[size_t(l)] = (l % 3 == 0) ? l + 1 : 0;
  DeviceArray<int> dpred(32, pred);
  DeviceArray<uint32_t> out(3);
  ASSERT_TRUE(votes(dpred.get(), out.get()).ok());
  uint32_t ballot = 0;
  for (int l = 0; l < 32; l += 3) ballot |= 1u << l;
  EXPECT_EQ(out.host(), (std::vector<uint32_t>{ballot, 1u, 0u}));

  for (int n : {1, 37, 256}) {
    std::vector<int> p(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) p[size_t(i)] = (i * 7) % 5 == 0;
    DeviceArray<int> dp(size_t(n), p), r(3);
    ASSERT_TRUE(barrier_reductions(n, dp.get(), r.get()).ok());
    int count = 0;
    for (int v : p) count += v;
    EXPECT_EQ(r.host(), (std::vector<int>{count, count == n, count > 0})) << "n " << n;
  }
}

TEST_P(EmuScheduled, CoordinatesOf3dGridsAndBlocks) {
  const dim3 grid(3, 2, 2), block(5, 3, 2);
  const unsigned threads = 5 * 3 * 2, blocks = 3 * 2 * 2;
  DeviceArray<uint32_t> coords(threads * blocks);
  ASSERT_TRUE(coordinates(grid, block, coords.get()).ok());
  const std::vector<uint32_t> got = coords.host();
  for (unsigned bz = 0; bz < 2; ++bz)
    for (unsigned by = 0; by < 2; ++by)
      for (unsigned bx = 0; bx < 3; ++bx)
        for (unsigned tz = 0; tz < 2; ++tz)
          for (unsigned ty = 0; ty < 3; ++ty)
            for (unsigned tx = 0; tx < 5; ++tx) {
              const unsigned b = bx + 3 * (by + 2 * bz), t = tx + 5 * (ty + 3 * tz);
              EXPECT_EQ(got[b * threads + t], tx | ty << 6 | tz << 12 | bx << 16 | by << 20 | bz << 24);
            }
}

TEST_P(EmuScheduled, AtomicsSharedMemoryAndWarpOrdering) {
  DeviceArray<float> global(1), out(64);
  ASSERT_TRUE(atomics(96, global.get(), out.get()).ok());
  EXPECT_EQ(global.host()[0], 96.f);
  EXPECT_EQ(out.host()[1], 96.f);

  DeviceArray<float> w(32);
  ASSERT_TRUE(warp_ordered_smem(w.get()).ok());
  for (float v : w.host()) EXPECT_EQ(v, 42.f);

  std::vector<float> in(200);
  float sum = 0.f;
  for (size_t i = 0; i < in.size(); ++i) sum += (in[i] = float(i % 17));
  DeviceArray<float> din(in.size(), in), s(1);
  ASSERT_TRUE(block_sum(200, din.get(), s.get()).ok());
  EXPECT_EQ(s.host()[0], sum);

  for (size_t bytes : {size_t(1024), size_t(100 * 1024)}) {  // the second needs the opt-in above 48 KiB
    DeviceArray<int> bad(1);
    ASSERT_TRUE(dynamic_smem(bytes, bad.get()).ok()) << bytes;
    EXPECT_EQ(bad.host()[0], 0);
  }
}

TEST_P(EmuScheduled, AtomicsOfEveryKind) {
  const int n = 100;
  DeviceArray<int> gi(8, {0, 0, 1000, 0, -1, 0, 0, 42});
  DeviceArray<unsigned> gu(5, {0u, 0u, 0xffffffffu, 0u, 0u});
  DeviceArray<double> gd(1);
  ASSERT_TRUE(atomics_of_every_kind(n, gi.get(), gu.get(), gd.get()).ok());
  const std::vector<int> i = gi.host();
  EXPECT_EQ(i[0], n - 1);
  EXPECT_EQ(i[1], -(n - 1));
  EXPECT_EQ(i[2], 1000 - 2 * n);
  EXPECT_EQ(i[3], n);  // the CAS loop added exactly one per thread
  EXPECT_GE(i[4], 0);
  EXPECT_LT(i[4], n);
  EXPECT_EQ(i[5], n - 1);  // shared-memory max and add
  EXPECT_EQ(i[6], 3 * n);
  EXPECT_EQ(i[7], 42);  // a CAS whose compare fails stores nothing
  const std::vector<unsigned> u = gu.host();
  EXPECT_EQ(u[0], 0xffffffffu);
  unsigned x = 0;  // thread t flips bit t % 32: bits 0..3 flipped 4 times, 4..31 three times
  for (int t = 0; t < n; ++t) x ^= 1u << (t % 32);
  EXPECT_EQ(u[1], x);
  EXPECT_EQ(u[2], 0u);
  EXPECT_EQ(u[3], unsigned(n % 7));
  unsigned dec = 0;  // from 0: wraps to 100, then counts down
  for (int t = 0; t < n; ++t) dec = (dec == 0 || dec > 100u) ? 100u : dec - 1;
  EXPECT_EQ(u[4], dec);
  EXPECT_EQ(gd.host()[0], 0.5 * n);
}

TEST_P(EmuScheduled, MatchAnyAndAll) {
  for (bool wide : {false, true}) {
    std::vector<uint64_t> v(32);
    for (int l = 0; l < 32; ++l) v[size_t(l)] = uint64_t(l % 3) << (wide ? 40 : 0);  // 64-bit: differ above bit 31
    DeviceArray<uint64_t> dv(32, v);
    DeviceArray<unsigned> out(96);
    ASSERT_TRUE(matches(dv.get(), wide, out.get()).ok());
    const std::vector<unsigned> r = out.host();
    for (int l = 0; l < 32; ++l) {
      unsigned same = 0;
      for (int o = 0; o < 32; ++o) same |= (o % 3 == l % 3 ? 1u : 0u) << o;
      EXPECT_EQ(r[size_t(l)], same) << "lane " << l;
      EXPECT_EQ(r[size_t(32 + l)], 0u);
      EXPECT_EQ(r[size_t(64 + l)], 0u);
    }
    std::fill(v.begin(), v.end(), uint64_t(7) << (wide ? 40 : 0));
    DeviceArray<uint64_t> dsame(32, v);
    ASSERT_TRUE(matches(dsame.get(), wide, out.get()).ok());
    const std::vector<unsigned> all = out.host();
    EXPECT_EQ(all[5], 0xffffffffu);
    EXPECT_EQ(all[32 + 5], 0xffffffffu);
    EXPECT_EQ(all[64 + 5], 1u);
  }
}

TEST(EmuIntrinsics, BitExactAsCudaDefinesThem) {
  for (unsigned x : {0u, 1u, 0x80000000u, 0x12345678u, 0xffffffffu}) {
    DeviceArray<unsigned> out(8);
    ASSERT_TRUE(intrinsics(x, out.get()).ok());
    const std::vector<unsigned> r = out.host();
    unsigned rev = 0;
    for (int i = 0; i < 32; ++i) rev |= ((x >> i) & 1u) << (31 - i);
    EXPECT_EQ(r[0], unsigned(std::popcount(x))) << x;
    EXPECT_EQ(r[1], unsigned(std::countl_zero(x))) << x;  // 32 for 0
    EXPECT_EQ(r[2], x == 0 ? 0u : unsigned(std::countr_zero(x)) + 1) << x;
    EXPECT_EQ(r[3], rev) << x;
    EXPECT_EQ(r[4], unsigned((uint64_t(x) * x) >> 32)) << x;
    EXPECT_EQ(r[5], 0x3FC00000u);
    EXPECT_EQ(r[6], 0xfffffffeu);
    EXPECT_EQ(r[7], 1u);
  }
}

INSTANTIATE_TEST_SUITE_P(Orders, EmuScheduled, ::testing::Values("rr", "7", "12345"));

TEST(EmuLaunch, RecordsEveryKernelItRan) {
  DeviceArray<float> w(32);
  ASSERT_TRUE(warp_ordered_smem(w.get()).ok());
  bool found = false;
  for (const std::string& n : emu::launched_kernels()) found = found || n.find("warp_ordered_smem_kernel") != n.npos;
  EXPECT_TRUE(found);
}

TEST(EmuLaunch, InvalidConfigurationsNameKernelAndLimit) {
  expect_fault(block_too_large(), {"noop_kernel", "2048 threads", "1024"});
  expect_fault(dynamic_smem_over_limit(), {"noop_kernel", "307200 bytes of dynamic shared memory", "allows"});
  expect_fault(too_much_static_smem(), {"too_much_static_smem_kernel", "too much shared memory", "245760"});
}

// ---- rules the emulator enforces -------------------------------------------------------------------------

TEST(EmuFaults, SharedMemoryOutOfBounds) {
  expect_fault(smem_out_of_bounds(), {"smem_out_of_bounds_kernel", "thread (32,0,0)", "out of bounds"});
}

TEST(EmuFaults, ReadOfUninitialisedSharedMemory) {
  DeviceArray<float> out(64);
  expect_fault(smem_uninitialised_read(out.get()), {"block (0,0,0)", "uninitialised shared memory", "no thread"});
}

TEST(EmuFaults, RacesBetweenBarriersUnderEveryOrder) {
  for (const char* seed : {"1", "2", "3"}) {
    setenv("VLPAR_EMU_SEED", seed, 1);
    DeviceArray<float> out(128);
    expect_fault(smem_race_read_after_write(out.get()), {"shared-memory race", "__syncthreads"});
    expect_fault(smem_race_write_after_read(out.get()), {"shared-memory race (write after read)"});
  }
  unsetenv("VLPAR_EMU_SEED");
}

TEST(EmuFaults, ReadAfterWriteAndWriteAfterWrite) {
  setenv("VLPAR_EMU_SCHED", "rr", 1);  // thread 0 writes before thread 32 reads or writes
  DeviceArray<float> out(1);
  expect_fault(smem_race_after_write(false, out.get()), {"thread (32,0,0)", "shared-memory race (read after write)"});
  expect_fault(smem_race_after_write(true, out.get()), {"thread (32,0,0)", "shared-memory race (write after write)"});
  unsetenv("VLPAR_EMU_SCHED");
}

TEST(EmuFaults, BarrierInDivergentCode) {
  expect_fault(barrier_in_divergent_code(), {"barrier_in_divergent_code_kernel", "exited"});
  expect_fault(barriers_at_different_sites(), {"different barriers", "emu_kernels.cu"});
}

TEST(EmuFaults, DeadlockIsReportedWithWhereEveryThreadWaits) {
  expect_fault(deadlock_collective_vs_barrier(), {"deadlock", "__shfl_sync", "__syncthreads", "emu_kernels.cu"});
}

TEST(EmuFaults, ShuffleMasks) {
  expect_fault(shuffle_lane_outside_mask(), {"lane not in its own collective's mask", "0x0000ffff"});
  expect_fault(shuffle_source_outside_mask(), {"shuffle from a lane outside the mask", "reads lane 20"});
}

TEST(EmuFaults, GlobalAccessOutsideItsAllocation) {
  DeviceArray<float> buf(100);
  expect_fault(global_out_of_bounds(buf.get(), 100), {"thread (31,0,0)", "outside its allocation", "past its end"});
  float* freed = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&freed), 64), cudaSuccess);
  ASSERT_EQ(cudaFree(freed), cudaSuccess);
  expect_fault(global_use_after_free(freed), {"no live cudaMalloc"});
  EXPECT_EQ(cudaGetLastError(), cudaErrorLaunchFailure);  // like a device fault: sticky until read
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

TEST(EmuFaults, MisalignedVectorAccess) {
  DeviceArray<float> buf(8), out(1);
  expect_fault(misaligned_vector_load(buf.get(), out.get()), {"misaligned vector access", "16-byte"});
}

TEST(EmuFaultsDeathTest, FiberStackOverflowIsNamed) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        setenv("VLPAR_EMU_STACK_KB", "64", 1);
        (void)stack_overflow();
      },
      "stack_overflow_kernel.*thread \\(0,0,0\\).*fiber stack overflow.*VLPAR_EMU_STACK_KB");
}

TEST(EmuFaultsDeathTest, SpinLoopWithoutYieldHitsTheLaunchTimeout) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  DeviceArray<int> flag(1);
  EXPECT_EXIT(
      {
        setenv("VLPAR_EMU_TIMEOUT_S", "1", 1);
        (void)spin_without_yield(flag.get());
      },
      ::testing::ExitedWithCode(124), "spin_kernel.*VLPAR_EMU_TIMEOUT_S");
}

TEST(EmuDeviceMemory, CopiesAndInvalidPointers) {
  std::vector<float> h = {1.f, 2.f, 3.f};
  float* d = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&d), 3 * sizeof(float)), cudaSuccess);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(d) % 256, 0u);
  ASSERT_EQ(cudaMemcpy(d, h.data(), 12, cudaMemcpyHostToDevice), cudaSuccess);
  std::vector<float> back(3);
  ASSERT_EQ(cudaMemcpy(back.data(), d, 12, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(back, h);
  EXPECT_EQ(cudaMemcpy(back.data(), d, 16, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);  // past the end
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  ASSERT_EQ(cudaFree(d), cudaSuccess);
  EXPECT_EQ(cudaFree(d), cudaErrorInvalidValue);  // double free
  (void)cudaGetLastError();
}

}  // namespace
}  // namespace vlpar
