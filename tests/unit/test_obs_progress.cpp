// ProgressBar: line formats (terminal and plain), rate/ETA, thread-safe counting, output to a non-TTY stream.
// Run: ./build/<dir>/tests/test_obs_progress
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "vlpar/obs/progress_bar.hpp"

using namespace vlpar::obs;

namespace {

std::string slurp(std::FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string out;
  char buf[4096];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
  return out;
}

std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < s.size()) {
    size_t nl = s.find('\n', pos);
    if (nl == std::string::npos) nl = s.size();
    out.push_back(s.substr(pos, nl - pos));
    pos = nl + 1;
  }
  return out;
}

}  // namespace

TEST(Progress, FormatDuration) {
  EXPECT_EQ(format_duration(0), "0:00:00");
  EXPECT_EQ(format_duration(41.4), "0:00:41");
  EXPECT_EQ(format_duration(3723), "1:02:03");
  EXPECT_EQ(format_duration(-1), "?");
  EXPECT_EQ(format_duration(1.0 / 0.0), "?");
}

TEST(Progress, LineFormats) {
  ProgressState s;
  s.label = "convert";
  s.done = 512;
  s.total = 1024;
  s.elapsed_s = 40.0;  // 12.8/s, 512 left -> 40 s
  s.unit = "shards";
  EXPECT_EQ(format_progress(s, false),
            "convert: 512/1024 shards (50.0%), 12.8 shards/s, ETA 0:00:40, elapsed 0:00:40");
  EXPECT_EQ(format_progress(s, true, 10),
            "convert [#####-----]  50.0%  512/1024 shards  12.8 shards/s  ETA 0:00:40  elapsed 0:00:40");
  s.total = 0;  // unknown total: no bar, percentage or ETA
  EXPECT_EQ(format_progress(s, false), "convert: 512 shards, 12.8 shards/s, elapsed 0:00:40");
  EXPECT_EQ(format_progress(s, true), "convert  512 shards  12.8 shards/s  elapsed 0:00:40");
  s.total = 10;
  s.done = 12;  // overshoot clamps the bar
  EXPECT_EQ(format_progress(s, true, 4).substr(0, 22), "convert [####] 100.0% ");
  ProgressState b;
  b.label = "write";
  b.bytes = true;
  b.done = 3 * 1024 * 1024;
  b.total = 12 * 1024 * 1024;
  b.elapsed_s = 2.0;
  EXPECT_EQ(format_progress(b, false), "write: 3.0 MiB/12.0 MiB (25.0%), 1.5 MiB/s, ETA 0:00:06, elapsed 0:00:02");
  b.elapsed_s = 0.0;  // nothing measured yet
  EXPECT_EQ(format_progress(b, false), "write: 3.0 MiB/12.0 MiB (25.0%), ? B/s, ETA ?, elapsed 0:00:00");
}

TEST(Progress, ThreadSafeCountAndPlainOutput) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  ProgressBar::Options opt;
  opt.out = f;
  opt.tty = false;
  opt.plain_interval_s = 0.02;
  opt.unit = "files";
  constexpr int kThreads = 4, kPer = 200000;
  {
    ProgressBar bar("prepare", kThreads * kPer, opt);
    std::vector<std::thread> pool;
    for (int t = 0; t < kThreads; ++t)
      pool.emplace_back([&bar] {
        for (int i = 0; i < kPer; ++i) {
          bar.add();
          if (i % 50000 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
      });
    for (auto& th : pool) th.join();
    EXPECT_EQ(bar.done(), kThreads * kPer);
  }  // destructor prints the final line
  const std::vector<std::string> lines = lines_of(slurp(f));
  std::fclose(f);
  ASSERT_GE(lines.size(), 2u);  // at least one periodic line and the final one
  for (const std::string& l : lines) {
    EXPECT_EQ(l.rfind("prepare: ", 0), 0u) << l;
    EXPECT_EQ(l.find('\r'), std::string::npos) << l;
    EXPECT_EQ(l.find('\x1b'), std::string::npos) << l;
  }
  EXPECT_EQ(lines.back().rfind("prepare: 800000/800000 files (100.0%)", 0), 0u) << lines.back();
}

TEST(Progress, TerminalRedrawsInPlace) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  ProgressBar::Options opt;
  opt.out = f;
  opt.tty = true;
  opt.tty_interval_s = 0.0;  // redraw on every add
  opt.bar_width = 4;
  {
    ProgressBar bar("x", 4, opt);
    for (int i = 0; i < 4; ++i) bar.add();
    bar.finish();
    bar.finish();  // idempotent
    bar.add();     // counted, not drawn
  }
  const std::string out = slurp(f);
  std::fclose(f);
  EXPECT_EQ(out.rfind("\rx [----]   0.0%", 0), 0u) << out;
  EXPECT_NE(out.find("\rx [##--]  50.0%"), std::string::npos) << out;
  EXPECT_EQ(out.back(), '\n');
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1);  // only the final line ends
  EXPECT_EQ(std::count(out.begin(), out.end(), '\r'), 6);  // initial + 4 adds + final
}
