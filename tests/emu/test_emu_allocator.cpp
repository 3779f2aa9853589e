// The allocator's device block cache (vlpar/core/allocator.hpp) over the emulated CUDA runtime: freed blocks come
// back for the next allocation of their size class (no cudaMalloc, no cudaFree), the cached bytes are reported
// apart from the bytes in use, the limit is kept, a failed cudaMalloc frees the cache and tries again, a real
// out-of-memory names the size, the bytes in use and the peak; and the emulated build's default (no cache) keeps
// every block at its exact cudaMalloc size, which the emulator's bounds checks rely on.
// Run: ./build/emu/tests/test_emu_allocator
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "emu/device_memory.hpp"
#include "vlpar/core/allocator.hpp"

namespace vlpar {
namespace {

constexpr Device kDev = Device::cuda(0);

/// The emulator's bounds verdict on [p, p + n): "" inside a live allocation (its per-thread cache of the last hit
/// forgotten first, as at a launch: allocations changed).
std::string access(const void* p, size_t n) {
  emu::reset_global_access_cache();
  return emu::check_global_access(reinterpret_cast<uintptr_t>(p), n);
}

TEST(EmuDeviceCache, OffByDefaultSoBlocksKeepTheirExactSize) {
  EXPECT_EQ(Allocator::default_device_cache_limit(), 0u);
  Allocator a;
  void* p = a.allocate(1000, kDev).value();
  const char* at = static_cast<const char*>(p);
  EXPECT_EQ(access(at + 996, 4), "");
  EXPECT_NE(access(at + 1000, 4), "") << "a byte past the 1000 asked for is inside the block";
  a.deallocate(p, 1000, kDev);
  EXPECT_EQ(a.stats(kDev).cached_bytes, 0);
  EXPECT_NE(access(at, 4), "") << "the block was not freed";
}

TEST(EmuDeviceCache, FreedBlocksServeTheirSizeClass) {
  Allocator a(Allocator::kDefaultHostCacheLimit, Allocator::kNoCacheLimit);
  EXPECT_EQ(Allocator::device_capacity(1000), 1024u);
  EXPECT_EQ(Allocator::device_capacity(size_t(3) << 20), size_t(3) << 20);
  EXPECT_EQ(Allocator::device_capacity((size_t(3) << 20) + 1), size_t(13) << 18);  // 3.25 MiB: eighths of 2 MiB
  void* p = a.allocate(1000, kDev).value();
  a.deallocate(p, 1000, kDev);
  MemoryStats s = a.stats(kDev);
  EXPECT_EQ(s.cached_bytes, 1024);
  EXPECT_EQ(s.current_bytes, 0);
  EXPECT_EQ(s.num_allocs, 0);
  EXPECT_EQ(access(p, 1024), "") << "a cached block stays allocated";
  void* q = a.allocate(1020, kDev).value();  // the same class: the cached block
  EXPECT_EQ(q, p);
  s = a.stats(kDev);
  EXPECT_EQ(s.cached_bytes, 0);
  EXPECT_EQ(s.current_bytes, 1020);
  void* r = a.allocate(size_t(3) << 20, kDev).value();  // another class: a new block
  EXPECT_NE(r, p);
  a.deallocate(q, 1020, kDev);
  a.deallocate(r, size_t(3) << 20, kDev);
  EXPECT_EQ(a.stats(kDev).cached_bytes, int64_t(1024 + (size_t(3) << 20)));
  EXPECT_EQ(a.stats(kDev).peak_bytes, int64_t(1020 + (size_t(3) << 20)));
  EXPECT_EQ(a.stats(Device::cpu()).cached_bytes, 0) << "device blocks counted on the host";
  a.release_cached();
  EXPECT_EQ(a.stats(kDev).cached_bytes, 0);
  EXPECT_NE(access(p, 4), "") << "release_cached kept the block";
}

TEST(EmuDeviceCache, KeepsItsLimit) {
  Allocator a(Allocator::kDefaultHostCacheLimit, 2048);
  void* b[3];
  for (void*& p : b) p = a.allocate(1024, kDev).value();
  for (void* p : b) a.deallocate(p, 1024, kDev);
  EXPECT_EQ(a.stats(kDev).cached_bytes, 2048);
  EXPECT_NE(access(b[2], 4), "") << "the block over the limit stayed";
}

TEST(EmuDeviceCache, AFailedAllocationFreesTheCacheAndTriesAgain) {
  // The emulated device has 64 GiB of address space: a cached 40 GiB block leaves no room for 44 GiB until the
  // cache is freed (the blocks are never touched, so nothing is committed).
  Allocator a(Allocator::kDefaultHostCacheLimit, Allocator::kNoCacheLimit);
  const size_t big = size_t(40) << 30, bigger = size_t(41) << 30;
  void* p = a.allocate(big, kDev).value();
  a.deallocate(p, big, kDev);
  EXPECT_EQ(a.stats(kDev).cached_bytes, int64_t(big));
  Result<void*> q = a.allocate(bigger, kDev);
  ASSERT_TRUE(q.ok()) << q.status().to_string();
  EXPECT_EQ(a.stats(kDev).cached_bytes, 0);
  EXPECT_EQ(a.stats(kDev).current_bytes, int64_t(bigger));
  // More than the device has: named, with what is in use and the peak.
  Result<void*> r = a.allocate(size_t(70) << 30, kDev);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kOutOfMemory);
  const std::string m = r.status().message();
  EXPECT_NE(m.find("cudaMalloc of " + std::to_string(size_t(70) << 30) + " bytes on cuda:0 failed"),
            std::string::npos) << m;
  EXPECT_NE(m.find("in use " + std::to_string(bigger) + " bytes, peak " + std::to_string(bigger) + " bytes"),
            std::string::npos) << m;
  a.deallocate(q.value(), bigger, kDev);
  // A size the size-class rounding would wrap around (a negative size cast to size_t) is named, not rounded.
  Result<void*> w = a.allocate(~size_t(0) - 100, kDev);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("is beyond any memory"), std::string::npos) << w.status().to_string();
}

}  // namespace
}  // namespace vlpar
