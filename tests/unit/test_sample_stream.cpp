// SampleStream: ranks partition every epoch (union = the epoch, intersection = ∅) by shard and by sample slice,
// seeded shard order and shuffle buffer, exact resume from save_state() at many positions (mid-buffer, at and
// across epoch boundaries, with skipped samples), skips counted, no hang when nothing is deliverable, the Energon
// fixture read in order. Throughput on a generated 200 MB dataset: VLPAR_SHARD_BENCH_MB=200 (skipped otherwise).
// Run: ./build/<dir>/tests/test_sample_stream
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "shard_test_util.hpp"
#include "vlpar/data/sample_stream.hpp"

namespace {

using namespace vlpar;
using namespace vlpar::data;
using tartest::Bytes;

const std::string kFixture = std::string(VLPAR_FIXTURES_DIR) + "/energon";

std::vector<StreamShard> make_dataset(const tartest::TempDir& dir, const std::vector<int64_t>& counts) {
  std::vector<std::string> paths;
  for (size_t k = 0; k < counts.size(); ++k) {
    paths.push_back(dir / fmt::format("shard-{:03}.tar", k));
    tartest::write_file(paths.back(), tartest::make_shard(static_cast<int>(k), counts[k]));
  }
  Result<std::vector<StreamShard>> s = index_webdataset_shards(paths);
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  return s.ok() ? s.value() : std::vector<StreamShard>{};
}

SampleStream make_stream(const std::vector<StreamShard>& shards, const SampleStreamConfig& cfg,
                         std::set<std::string> excludes = {}) {
  Result<SampleStream> s = SampleStream::create(shards, std::move(excludes), cfg);
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  return std::move(s).value();
}

SampleRef ref_of(const SampleStream& st, const Sample& s) {
  for (size_t i = 0; i < st.shards().size(); ++i)
    if (st.shards()[i].name == s.shard) return SampleRef{static_cast<int32_t>(i), s.index_in_shard};
  ADD_FAILURE() << "unknown shard " << s.shard;
  return SampleRef{};
}

std::vector<Sample> take(SampleStream& st, int64_t n) {
  std::vector<Sample> out;
  for (int64_t i = 0; i < n; ++i) {
    Result<std::optional<Sample>> s = st.next();
    EXPECT_TRUE(s.ok()) << s.status().to_string();
    if (!s.ok() || !s.value()) break;
    out.push_back(std::move(*s.value()));
  }
  return out;
}

std::vector<SampleRef> refs(const SampleStream& st, const std::vector<Sample>& v) {
  std::vector<SampleRef> out;
  for (const Sample& s : v) out.push_back(ref_of(st, s));
  return out;
}

// Same sample: identity, key and every byte.
::testing::AssertionResult same_samples(const std::vector<Sample>& a, const std::vector<Sample>& b) {
  if (a.size() != b.size()) return ::testing::AssertionFailure() << "lengths " << a.size() << " vs " << b.size();
  for (size_t i = 0; i < a.size(); ++i) {
    bool eq = a[i].shard == b[i].shard && a[i].index_in_shard == b[i].index_in_shard && a[i].key == b[i].key &&
              a[i].fields.size() == b[i].fields.size();
    for (size_t f = 0; eq && f < a[i].fields.size(); ++f)
      eq = a[i].fields[f].ext == b[i].fields[f].ext && a[i].fields[f].data == b[i].fields[f].data;
    if (!eq)
      return ::testing::AssertionFailure() << "sample " << i << ": " << a[i].shard << "#" << a[i].index_in_shard
                                           << " vs " << b[i].shard << "#" << b[i].index_in_shard;
  }
  return ::testing::AssertionSuccess();
}

struct SplitCase {
  std::vector<int64_t> counts;
  int64_t ranks;
  RankSplit split;
  bool expect_by_shard;
};

// Each rank reads its epoch; the ranks' outputs partition the epoch's samples, for both split rules.
TEST(SampleStreamSplit, RanksPartitionEveryEpoch) {
  const std::vector<int64_t> twelve = {5, 3, 7, 2, 6, 4, 8, 1, 5, 3, 6, 2};  // 52 samples
  const std::vector<SplitCase> cases = {
      {twelve, 1, RankSplit::kAuto, true},     {twelve, 2, RankSplit::kAuto, true},
      {twelve, 5, RankSplit::kAuto, true},     {twelve, 12, RankSplit::kAuto, true},
      {twelve, 16, RankSplit::kAuto, false},   {twelve, 3, RankSplit::kBySample, false},
      {twelve, 4, RankSplit::kByShard, true},  {{10, 7}, 3, RankSplit::kAuto, false},
      {{10, 0, 7}, 2, RankSplit::kAuto, true},  // empty shards take no part
  };
  tartest::TempDir dir("stream_split");
  for (const SplitCase& c : cases) {
    SCOPED_TRACE(fmt::format("{} shards, R={}, split={}", c.counts.size(), c.ranks, static_cast<int>(c.split)));
    tartest::TempDir sub("stream_split_case");
    const std::vector<StreamShard> shards = make_dataset(sub, c.counts);
    int64_t total = 0;
    for (int64_t n : c.counts) total += n;
    std::vector<SampleStream> streams;
    for (int64_t r = 0; r < c.ranks; ++r) {
      SampleStreamConfig cfg;
      cfg.seed = 11;
      cfg.shuffle_buffer = 4;
      cfg.dp_rank = r;
      cfg.dp_size = c.ranks;
      cfg.split = c.split;
      streams.push_back(make_stream(shards, cfg));
      EXPECT_EQ(streams.back().splits_by_shard(), c.expect_by_shard);
    }
    for (int64_t epoch = 0; epoch < 3; ++epoch) {
      std::map<SampleRef, int> seen;
      std::vector<int64_t> per_rank;
      std::map<int32_t, std::set<int64_t>> ranks_of_shard;
      for (int64_t r = 0; r < c.ranks; ++r) {
        SampleStream& st = streams[static_cast<size_t>(r)];
        std::vector<SampleRef> plan = st.epoch_inputs(epoch);
        const std::vector<Sample> got = take(st, static_cast<int64_t>(plan.size()));
        EXPECT_EQ(st.epoch(), epoch);
        std::vector<SampleRef> got_refs = refs(st, got);
        std::sort(plan.begin(), plan.end());
        std::sort(got_refs.begin(), got_refs.end());
        EXPECT_EQ(got_refs, plan) << "rank " << r << " epoch " << epoch;
        for (const SampleRef& x : got_refs) {
          ++seen[x];
          ranks_of_shard[x.shard].insert(r);
        }
        per_rank.push_back(static_cast<int64_t>(got.size()));
      }
      EXPECT_EQ(static_cast<int64_t>(seen.size()), total);  // union = the whole epoch
      for (const auto& [ref, n] : seen) EXPECT_EQ(n, 1) << ref.shard << "#" << ref.index;  // intersection = ∅
      const auto [lo, hi] = std::minmax_element(per_rank.begin(), per_rank.end());
      if (c.expect_by_shard) {
        for (const auto& [shard, rs] : ranks_of_shard) EXPECT_EQ(rs.size(), 1u) << "shard " << shard;
        EXPECT_LE(*hi - *lo, *std::max_element(c.counts.begin(), c.counts.end()));
        EXPECT_GE(*lo, 1);
      } else {
        EXPECT_LE(*hi - *lo, 1);
      }
    }
  }
}

TEST(SampleStreamSplit, ConfigErrors) {
  tartest::TempDir dir("stream_cfg");
  const std::vector<StreamShard> shards = make_dataset(dir, {3, 2});
  SampleStreamConfig cfg;
  cfg.dp_size = 2;
  cfg.dp_rank = 2;
  Result<SampleStream> s = SampleStream::create(shards, {}, cfg);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("dp_rank 2"), std::string::npos);
  cfg.dp_rank = 0;
  cfg.dp_size = 3;
  cfg.split = RankSplit::kByShard;
  s = SampleStream::create(shards, {}, cfg);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("2 shards, dp_size 3"), std::string::npos);
  cfg.split = RankSplit::kAuto;
  cfg.dp_size = 6;
  s = SampleStream::create(shards, {}, cfg);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("5 samples cannot give"), std::string::npos);
  cfg.dp_size = 1;
  cfg.shuffle_buffer = -1;
  EXPECT_FALSE(SampleStream::create(shards, {}, cfg).ok());
  EXPECT_FALSE(SampleStream::create({}, {}, SampleStreamConfig{}).ok());
}

TEST(SampleStreamShuffle, SeededAndDeterministic) {
  tartest::TempDir dir("stream_shuffle");
  const std::vector<StreamShard> shards = make_dataset(dir, {9, 8, 7, 6, 5});  // 35 samples
  SampleStreamConfig cfg;
  cfg.seed = 3;
  cfg.shuffle_buffer = 8;
  SampleStream a = make_stream(shards, cfg), b = make_stream(shards, cfg);
  const std::vector<Sample> sa = take(a, 70), sb = take(b, 70);
  EXPECT_TRUE(same_samples(sa, sb));
  const std::vector<SampleRef> ra = refs(a, sa);
  const std::vector<SampleRef> e0(ra.begin(), ra.begin() + 35), e1(ra.begin() + 35, ra.end());
  EXPECT_NE(e0, a.epoch_inputs(0));  // the buffer reorders
  EXPECT_NE(e0, e1);                 // epochs differ
  EXPECT_NE(a.epoch_inputs(0), a.epoch_inputs(1));  // the shard order is redrawn per epoch
  cfg.seed = 4;
  SampleStream c = make_stream(shards, cfg);
  EXPECT_NE(refs(c, take(c, 35)), e0);
  // B <= 1: plan order; no shard shuffle: shard 0, 1, ... in order.
  cfg.shuffle_buffer = 1;
  SampleStream d = make_stream(shards, cfg);
  EXPECT_EQ(refs(d, take(d, 35)), d.epoch_inputs(0));
  cfg.shuffle_buffer = 0;
  cfg.shuffle_shards = false;
  SampleStream e = make_stream(shards, cfg);
  const std::vector<SampleRef> plain = refs(e, take(e, 35));
  for (size_t i = 1; i < plain.size(); ++i) EXPECT_TRUE(plain[i - 1] < plain[i]);
}

struct ResumeCase {
  int64_t ranks, rank, buffer;
  RankSplit split;
};

// Read K samples, save, restore into a new stream: the next samples equal the uninterrupted run's, for K at the
// start, mid-buffer, at and across epoch boundaries, with a corrupt and an excluded sample in the data.
TEST(SampleStreamResume, ContinuesWithExactlyTheNextSample) {
  tartest::TempDir dir("stream_resume");
  std::vector<StreamShard> shards = make_dataset(dir, {7, 5, 9, 4});  // 25 samples
  {  // corrupt the .txt header of sample 2 of shard 1 (a skip), exclude sample 3 of shard 0
    Bytes b = tartest::read_file(shards[1].path);
    const int64_t begin = (*shards[1].offsets)[2];
    b[static_cast<size_t>(begin) + 3 * 512 + 1] ^= 0x01;  // .txt header: after the .jpg header + 2 blocks (774 B)
    tartest::write_file(shards[1].path, b);
  }
  const std::set<std::string> excludes = {shards[0].name + "/s0_3"};
  const std::vector<ResumeCase> cases = {
      {1, 0, 6, RankSplit::kAuto}, {2, 1, 6, RankSplit::kAuto}, {3, 0, 5, RankSplit::kBySample},
      {1, 0, 40, RankSplit::kAuto}, {2, 0, 0, RankSplit::kAuto}};
  for (const ResumeCase& c : cases) {
    SCOPED_TRACE(fmt::format("R={} r={} B={} split={}", c.ranks, c.rank, c.buffer, static_cast<int>(c.split)));
    SampleStreamConfig cfg;
    cfg.seed = 99;
    cfg.shuffle_buffer = c.buffer;
    cfg.dp_rank = c.rank;
    cfg.dp_size = c.ranks;
    cfg.split = c.split;
    SampleStream ref_stream = make_stream(shards, cfg, excludes);
    const std::vector<Sample> reference = take(ref_stream, 60);
    ASSERT_EQ(reference.size(), 60u);
    if (c.ranks == 1) {  // 60 samples = 2 full epochs of 23 + part of a third: each skip met at least twice
      EXPECT_GE(ref_stream.stats().skipped_corrupt, 2);
      EXPECT_GE(ref_stream.stats().skipped_excluded, 2);
    }
    // Delivered per epoch (skips included in the plan) — to place K at epoch boundaries.
    SampleStream probe = make_stream(shards, cfg, excludes);
    take(probe, 1);
    const std::vector<SampleRef> plan0 = probe.epoch_inputs(0);
    int64_t skipped0 = 0;
    for (const SampleRef& r : plan0) skipped0 += (r.shard == 1 && r.index == 2) || (r.shard == 0 && r.index == 3);
    const int64_t e0 = static_cast<int64_t>(plan0.size()) - skipped0;
    const int64_t B = std::max<int64_t>(1, c.buffer);
    std::set<int64_t> ks = {0, 1, B - 1, B, B + 1, e0 - 1, e0, e0 + 1, e0 + B, e0 + 7, 2 * e0 + 3};
    for (int64_t k : ks) {
      if (k < 0 || k > 50) continue;
      SCOPED_TRACE("K=" + std::to_string(k));
      SampleStream a = make_stream(shards, cfg, excludes);
      EXPECT_TRUE(same_samples(take(a, k), std::vector<Sample>(reference.begin(), reference.begin() + k)));
      const std::string state = a.save_state();
      EXPECT_LT(state.size(), 400 + 24 * static_cast<size_t>(B));  // small: references, not bytes
      SampleStream b = make_stream(shards, cfg, excludes);
      take(b, 3);  // restore also works on a stream that has moved
      const Status st = b.restore(state);
      ASSERT_TRUE(st.ok()) << st.to_string();
      EXPECT_EQ(b.stats().samples, k);
      const std::vector<Sample> rest = take(b, 10);
      EXPECT_TRUE(same_samples(rest, std::vector<Sample>(reference.begin() + k, reference.begin() + k + 10)));
    }
  }
}

TEST(SampleStreamResume, RejectsForeignStates) {
  tartest::TempDir dir("stream_foreign");
  const std::vector<StreamShard> shards = make_dataset(dir, {6, 6, 6});
  SampleStreamConfig cfg;
  cfg.seed = 5;
  cfg.shuffle_buffer = 4;
  cfg.dp_size = 2;
  SampleStream a = make_stream(shards, cfg);
  take(a, 5);
  const std::string state = a.save_state();
  auto expect_reject = [&](SampleStream& s, const std::string& st, const std::string& needle) {
    SampleStream twin = make_stream(s.shards(), s.config());
    take(twin, 2);
    take(s, 2);
    const Status r = s.restore(st);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.message().find(needle), std::string::npos) << r.message();
    EXPECT_TRUE(same_samples(take(s, 4), take(twin, 4)));  // unchanged by the failed restore
  };
  SampleStreamConfig other = cfg;
  other.seed = 6;
  SampleStream s1 = make_stream(shards, other);
  expect_reject(s1, state, "seed");
  other = cfg;
  other.dp_rank = 1;
  SampleStream s2 = make_stream(shards, other);
  expect_reject(s2, state, "dp_rank");
  other = cfg;
  other.shuffle_buffer = 5;
  SampleStream s3 = make_stream(shards, other);
  expect_reject(s3, state, "shuffle_buffer");
  std::vector<StreamShard> fewer(shards.begin(), shards.end() - 1);
  SampleStream s4 = make_stream(fewer, cfg);
  expect_reject(s4, state, "dataset");
  SampleStream s5 = make_stream(shards, cfg);
  expect_reject(s5, "not json", "not JSON");
  std::string bad_ref = state;
  const size_t at = bad_ref.find("\"buffer\":[[");
  ASSERT_NE(at, std::string::npos);
  bad_ref.replace(at + 10, bad_ref.find(']', at + 10) - (at + 10) + 1, "[2,999]");
  SampleStream s6 = make_stream(shards, cfg);
  expect_reject(s6, bad_ref, "names no sample");
  std::string bad_cursor = state;
  const size_t c = bad_cursor.find("\"cursor\":");
  bad_cursor.replace(c, bad_cursor.find(',', c) - c, "\"cursor\":1000");
  SampleStream s7 = make_stream(shards, cfg);
  expect_reject(s7, bad_cursor, "cursor 1000");
}

TEST(SampleStreamSkips, CountedAndNeverAHang) {
  tartest::TempDir dir("stream_skips");
  const std::vector<StreamShard> shards = make_dataset(dir, {3});
  SampleStreamConfig cfg;
  cfg.num_epochs = 2;
  SampleStream two = make_stream(shards, cfg, {shards[0].name + "/s0_1"});
  EXPECT_EQ(take(two, 10).size(), 4u);  // 2 epochs × 2 delivered, then the end
  Result<std::optional<Sample>> end = two.next();
  ASSERT_TRUE(end.ok());
  EXPECT_FALSE(end.value().has_value());
  EXPECT_EQ(two.stats().skipped_excluded, 2);
  EXPECT_EQ(two.stats().epochs_completed, 2);
  EXPECT_EQ(two.stats().samples, 4);
  cfg.num_epochs = 0;
  SampleStream none = make_stream(shards, cfg, {shards[0].name + "/s0_0", shards[0].name + "/s0_1",
                                                shards[0].name + "/s0_2"});
  // A missing guard would loop over epochs forever: a watchdog turns that hang into a failure.
  std::atomic<bool> done{false};
  std::thread watchdog([&done] {
    for (int i = 0; i < 300 && !done; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (!done) {
      std::fprintf(stderr, "SampleStreamSkips: next() did not return within 30 s (hang)\n");
      std::_Exit(1);
    }
  });
  Result<std::optional<Sample>> r = none.next();
  done = true;
  watchdog.join();
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("epoch 0 delivered no sample on rank 0"), std::string::npos)
      << r.status().message();
}

// The Energon fixture through the stream, in plan order: exactly Energon's non-excluded samples.
TEST(SampleStreamEnergon, FixtureInOrderEqualsEnergon) {
  const std::vector<tartest::GoldenPart> parts = tartest::read_golden_samples(kFixture + "/expected_samples.txt");
  for (const tartest::GoldenPart& p : parts) {
    SCOPED_TRACE(p.config + " " + p.part);
    EnergonOpenOptions opt;
    opt.split_part = p.part;
    opt.split_config = p.config;
    Result<EnergonDataset> ds = open_energon_dataset(kFixture, opt);
    ASSERT_TRUE(ds.ok()) << ds.status().to_string();
    SampleStreamConfig cfg;
    cfg.shuffle_shards = false;
    cfg.num_epochs = 1;
    cfg.read.lowercase_ext = false;
    Result<SampleStream> st = SampleStream::create(ds.value(), cfg);
    ASSERT_TRUE(st.ok()) << st.status().to_string();
    std::vector<Sample> got = take(st.value(), 100);
    std::vector<const tartest::GoldenSample*> want;
    for (const tartest::GoldenSample& g : p.samples)
      if (!g.excluded) want.push_back(&g);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].shard, want[i]->shard);
      EXPECT_EQ(got[i].index_in_shard, want[i]->index);
      EXPECT_EQ(got[i].key, want[i]->key);
      ASSERT_EQ(got[i].fields.size(), want[i]->fields.size());
      for (size_t f = 0; f < got[i].fields.size(); ++f)
        EXPECT_EQ(tartest::fnv1a64(got[i].fields[f].data), want[i]->fields[f].fnv);
    }
    EXPECT_EQ(st->stats().skipped_excluded, static_cast<int64_t>(p.samples.size() - want.size()));
  }
}

// Throughput on generated data (not committed): VLPAR_SHARD_BENCH_MB=200 [VLPAR_SHARD_BENCH_DIR=/tmp/...].
TEST(SampleStreamBench, Throughput) {
  const char* mb_env = std::getenv("VLPAR_SHARD_BENCH_MB");
  if (mb_env == nullptr) GTEST_SKIP() << "set VLPAR_SHARD_BENCH_MB=200 to measure";
  const int64_t member = 100 * 1024, per_shard = 128;
  const int64_t n_samples = std::max<int64_t>(1, std::atoll(mb_env) * 1000 * 1000 / member);
  const int64_t n_shards = (n_samples + per_shard - 1) / per_shard;
  const char* dir_env = std::getenv("VLPAR_SHARD_BENCH_DIR");
  const std::filesystem::path root = dir_env ? dir_env : "/tmp/vlpar_shard_bench";
  std::filesystem::create_directories(root);
  std::vector<std::string> paths;
  for (int64_t k = 0; k < n_shards; ++k) {
    paths.push_back((root / fmt::format("shard-{:05}.tar", k)).string());
    if (std::filesystem::exists(paths.back())) continue;
    Bytes t;
    for (int64_t i = 0; i < per_shard; ++i) {
      const std::string key = fmt::format("{:05}_{:04}", k, i);
      tartest::append_file(t, key + ".jpg", tartest::payload(static_cast<uint64_t>(k), static_cast<uint64_t>(i),
                                                             static_cast<size_t>(member)));
      tartest::append_file(t, key + ".json", tartest::text(fmt::format("{{\"key\": \"{}\"}}", key)));
    }
    tartest::finish(t);
    tartest::write_file(paths.back(), t);
  }
  auto t0 = std::chrono::steady_clock::now();
  Result<std::vector<StreamShard>> shards = index_webdataset_shards(paths);
  ASSERT_TRUE(shards.ok());
  const double index_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  int64_t total = 0;
  for (const StreamShard& s : shards.value()) total += s.num_samples();
  // Raw read of the same files (one pread per MiB) as the ceiling.
  t0 = std::chrono::steady_clock::now();
  int64_t raw_bytes = 0;
  {
    std::vector<uint8_t> buf(1 << 20);
    for (const std::string& p : paths) {
      Result<TarFile> f = TarFile::open(p);
      ASSERT_TRUE(f.ok());
      for (int64_t off = 0; off < f->file_size(); off += static_cast<int64_t>(buf.size())) {
        const int64_t n = std::min<int64_t>(static_cast<int64_t>(buf.size()), f->file_size() - off);
        ASSERT_TRUE(f->read(off, std::span<uint8_t>(buf.data(), static_cast<size_t>(n))).ok());
        raw_bytes += n;
      }
    }
  }
  const double raw_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("[bench] %lld samples in %lld shards, %.1f MB; index by header scan %.3f s; raw pread %.0f MB/s\n",
              static_cast<long long>(total), static_cast<long long>(n_shards), raw_bytes / 1e6, index_s,
              raw_bytes / 1e6 / raw_s);
  for (int64_t buffer : {0, 256}) {
    SampleStreamConfig cfg;
    cfg.seed = 1;
    cfg.shuffle_buffer = buffer;
    cfg.num_epochs = 1;
    SampleStream st = make_stream(shards.value(), cfg);
    t0 = std::chrono::steady_clock::now();
    int64_t n = 0, bytes = 0;
    for (;;) {
      Result<std::optional<Sample>> s = st.next();
      ASSERT_TRUE(s.ok()) << s.status().to_string();
      if (!s.value()) break;
      ++n;
      bytes += s.value()->num_bytes();
    }
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(n, total);
    std::printf("[bench] shuffle_buffer %4lld: %lld samples, %.1f MB in %.3f s = %.0f samples/s, %.0f MB/s\n",
                static_cast<long long>(buffer), static_cast<long long>(n), bytes / 1e6, sec, n / sec,
                bytes / 1e6 / sec);
  }
}

}  // namespace
