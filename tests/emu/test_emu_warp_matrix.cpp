// The rules of warp-level matrix instructions and cp.async under emulation (src/kernels/cuda/ptx/,
// emu/warp_matrix.cpp, emu/async_copy.cpp), each provoked by a broken variant of the tile kernels of
// warp_matrix_kernels.cu: reading a cp.async destination before the wait, reading other threads' copies without a
// barrier, exiting with copies in flight, refilling a stage another thread is reading, misaligned ldmatrix rows,
// mma in a partial warp, named barriers left out, miscounted or never reached. The same kernels' correct runs are
// tests/gpu/test_cuda_warp_matrix.cpp (emulated here, on the hardware on a GPU day).
// Run: ctest --test-dir build/emu -L emu
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstdint>
#include <string>
#include <vector>

#include "emu_test_util.hpp"
#include "warp_matrix_kernels.hpp"

namespace vlpar {
namespace {

using namespace vlpar::emu_test;

TEST(EmuFaults, CpAsyncDestinationReadBeforeItsWait) {
  DeviceArray<uint16_t> a(std::vector<uint16_t>(256, 0x3F80)), b(std::vector<uint16_t>(128, 0x3F80));
  DeviceArray<float> c(std::vector<float>(128, 0.f)), d(std::vector<float>(128, 0.f));
  expect_fault(mma_tile(true, true, a.get(), b.get(), c.get(), d.get(), TileFault::kNoWait),
               {"mma_tile_kernel", "read of a cp.async destination before its wait"});
  expect_fault(mma_tile(true, true, a.get(), b.get(), c.get(), d.get(), TileFault::kNoBarrier),
               {"shared-memory race (read after write)"});
  expect_fault(mma_tile(true, true, a.get(), b.get(), c.get(), d.get(), TileFault::kExitInFlight),
               {"thread (5,0,0)", "exited with cp.async copies in flight"});
  DeviceArray<uint8_t> src(std::vector<uint8_t>(512, 1)), out(std::vector<uint8_t>(32, 0));
  // Whichever order the fibers ran in is reported: the refill after the read (write after read), the read of a
  // piece whose refill is in flight, or the read of a piece already refilled (read after write).
  for (const char* seed : {"1", "2", "3", "4"}) {
    setenv("VLPAR_EMU_SEED", seed, 1);
    const Status race = cp_async_refill_race(src.get(), out.get());
    ASSERT_FALSE(race.ok());
    EXPECT_TRUE(race.message().find("shared-memory race") != std::string::npos ||
                race.message().find("read of a cp.async destination before its wait") != std::string::npos)
        << race.message();
  }
  unsetenv("VLPAR_EMU_SEED");
}

TEST(EmuFaults, LdmatrixAndMmaRules) {
  DeviceArray<uint16_t> a(std::vector<uint16_t>(256, 0x3F80)), b(std::vector<uint16_t>(128, 0x3F80));
  DeviceArray<float> c(std::vector<float>(128, 0.f)), d(std::vector<float>(128, 0.f));
  expect_fault(mma_tile(true, true, a.get(), b.get(), c.get(), d.get(), TileFault::kMisalignedRow),
               {"misaligned ldmatrix row", "not 16-byte aligned"});
  expect_fault(mma_tile(true, true, a.get(), b.get(), c.get(), d.get(), TileFault::kPartialWarp),
               {"lanes that do not exist", "ldmatrix"});
}

TEST(EmuFaults, NamedBarrierRules) {
  DeviceArray<float> out(128);
  for (const char* seed : {"1", "2", "3"}) {  // whichever order: a race or a read of unwritten memory
    setenv("VLPAR_EMU_SEED", seed, 1);
    const Status full = named_barrier_pipeline(out.get(), PipelineFault::kNoFullBarrier);
    ASSERT_FALSE(full.ok());
    EXPECT_TRUE(full.message().find("shared-memory race") != std::string::npos ||
                full.message().find("uninitialised") != std::string::npos) << full.message();
    expect_fault(named_barrier_pipeline(out.get(), PipelineFault::kNoFreeBarrier), {"shared-memory race"});
  }
  unsetenv("VLPAR_EMU_SEED");
  expect_fault(named_barrier_pipeline(out.get(), PipelineFault::kCountMismatch), {"named barrier count mismatch"});
  expect_fault(named_barrier_pipeline(out.get(), PipelineFault::kNoProducer), {"deadlock", "named barrier 1"});
}

}  // namespace
}  // namespace vlpar
