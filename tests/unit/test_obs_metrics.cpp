// The metrics line, metrics.jsonl (including resume truncation), timing helpers, data-wait meter, process memory.
// Run: ./build/<dir>/tests/test_obs_metrics
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "vlpar/obs/data_wait_meter.hpp"
#include "vlpar/obs/jsonl_writer.hpp"
#include "vlpar/obs/metrics_line.hpp"
#include "vlpar/obs/process_memory.hpp"
#include "vlpar/obs/stopwatch.hpp"

namespace fs = std::filesystem;
using namespace vlpar::obs;

namespace {

class TempDir {
 public:
  TempDir() {
    path_ = fs::temp_directory_path() / ("vlpar_obs_metrics_" + std::to_string(::getpid()) + "_" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) out.push_back(nlohmann::json::parse(line));
  return out;
}

MetricsLine full_line() {
  MetricsLine m;
  m.step = 12;
  m.total_steps = 100;
  m.loss = 2.345678;
  m.aux_loss = 0.0012;
  m.grad_norm = 1.23456;
  m.lr = 3e-4;
  m.tokens_per_s = 12345.4;
  m.images_per_s = 12.3;
  m.tflops = 0.1234;
  m.mfu_pct = 1.234;
  m.mem_current_mib = 123.4;
  m.mem_peak_mib = 456.6;
  m.data_wait_pct = 1.25;
  m.step_time_s = 0.1234;
  m.wall_time = 1700000000.5;
  return m;
}

}  // namespace

TEST(MetricsLine, PlainFormatIsFixed) {
  EXPECT_EQ(format_metrics_line(full_line(), false),
            "step:  12/100  loss:  2.34568  aux_loss: 0.00120  grad_norm:   1.2346  lr: 3.000e-04  tok/s:   12,345"
            "  img/s:   12.30  tflop/s:   0.12  mfu:  1.23%  mem:   123/  457 MiB  data:  1.2%  time:  0.123s");
  MetricsLine m;
  m.step = 3;
  m.loss = 10.5;
  EXPECT_EQ(format_metrics_line(m, false), "step:     3  loss: 10.50000");
  m.loss = NAN;
  m.mem_peak_mib = 2048;
  m.extra.push_back({"skipped", 1});
  EXPECT_EQ(format_metrics_line(m, false), "step:     3  loss:      nan  mem peak:  2048 MiB  skipped: 1");
  // Column widths do not depend on the values (within their normal ranges).
  MetricsLine a = full_line(), b = full_line();
  b.step = 99;
  b.loss = 0.5;
  b.grad_norm = 10.0;
  b.tokens_per_s = 99999.0;
  EXPECT_EQ(format_metrics_line(a, false).size(), format_metrics_line(b, false).size());
}

TEST(MetricsLine, ColourOnlyWhenAllowed) {
  const std::string plain = format_metrics_line(full_line(), false);
  const std::string color = format_metrics_line(full_line(), true);
  EXPECT_EQ(plain.find('\x1b'), std::string::npos);
  EXPECT_EQ(color.rfind("\x1b[31mstep:", 0), 0u) << color;
  EXPECT_EQ(color.substr(color.size() - 4), "\x1b[0m");
  // Removing the escape sequences gives the plain line.
  std::string stripped;
  for (size_t i = 0; i < color.size(); ++i) {
    if (color[i] == '\x1b') {
      i = color.find('m', i);
      continue;
    }
    stripped.push_back(color[i]);
  }
  EXPECT_EQ(stripped, plain);
  EXPECT_TRUE(color_allowed(true, nullptr));
  EXPECT_TRUE(color_allowed(true, ""));  // no-color.org: an empty NO_COLOR does not disable colour
  EXPECT_FALSE(color_allowed(true, "1"));
  EXPECT_FALSE(color_allowed(false, nullptr));
}

TEST(MetricsLine, GroupThousands) {
  EXPECT_EQ(group_thousands(0), "0");
  EXPECT_EQ(group_thousands(999.4), "999");
  EXPECT_EQ(group_thousands(999.5), "1,000");
  EXPECT_EQ(group_thousands(1234567), "1,234,567");
  EXPECT_EQ(group_thousands(-1234), "-1,234");
  EXPECT_EQ(group_thousands(NAN), "nan");
}

TEST(MetricsLine, ScalarsOrderAndThroughput) {
  MetricsLine m;
  m.step = 7;
  StepWork w;
  w.real_tokens = 4000;
  w.images = 8;
  w.flops = 2e12;
  w.seconds = 2.0;
  w.peak_tflops = 4.0;
  fill_throughput(m, w);
  EXPECT_DOUBLE_EQ(*m.tokens_per_s, 2000.0);
  EXPECT_DOUBLE_EQ(*m.images_per_s, 4.0);
  EXPECT_DOUBLE_EQ(*m.tflops, 1.0);
  EXPECT_DOUBLE_EQ(*m.mfu_pct, 25.0);
  EXPECT_DOUBLE_EQ(*m.step_time_s, 2.0);
  m.loss = 1.0;
  m.extra.push_back({"eval_acc", 0.5});
  std::vector<std::string> keys;
  for (const NamedScalar& s : metrics_scalars(m)) keys.push_back(s.key);
  EXPECT_EQ(keys, (std::vector<std::string>{"step", "loss", "tokens_per_s", "images_per_s", "tflops", "mfu_pct",
                                            "step_time_s", "eval_acc"}));
  MetricsLine none;
  w.peak_tflops.reset();
  fill_throughput(none, w);
  EXPECT_FALSE(none.mfu_pct.has_value());
  // Four devices (tp 2 × pp 2) shared the step: each did a quarter.
  w.peak_tflops = 4.0;
  w.devices = 4;
  MetricsLine shared;
  fill_throughput(shared, w);
  EXPECT_DOUBLE_EQ(*shared.tokens_per_s, 500.0);
  EXPECT_DOUBLE_EQ(*shared.images_per_s, 1.0);
  EXPECT_DOUBLE_EQ(*shared.tflops, 0.25);
  EXPECT_DOUBLE_EQ(*shared.mfu_pct, 6.25);
  EXPECT_DOUBLE_EQ(*shared.step_time_s, 2.0);
  w.devices = 1;
  w.seconds = 0.0;
  MetricsLine zero;
  fill_throughput(zero, w);
  EXPECT_FALSE(zero.tokens_per_s.has_value());
}

TEST(JsonlWriter, FreshRunWritesOneObjectPerLine) {
  TempDir tmp;
  const std::string path = tmp.file("metrics.jsonl");
  std::ofstream(path) << "{\"step\":99,\"loss\":1}\n";  // an old run: a fresh open truncates it
  {
    auto w = JsonlWriter::open(path, std::nullopt);
    ASSERT_TRUE(w.ok()) << w.status().to_string();
    MetricsLine m = full_line();
    ASSERT_TRUE(w->append(m).ok());
    m.step = 13;
    m.loss = INFINITY;
    m.extra = {{"eval_acc", 0.75}};
    ASSERT_TRUE(w->append(m).ok());
    // Flushed per line: readable before close.
    EXPECT_EQ(read_jsonl(path).size(), 2u);
    const NamedScalar ev[] = {{"eval/accuracy", 0.5}};
    ASSERT_TRUE(w->append(14, ev).ok());
  }
  EXPECT_EQ(metrics_json(full_line()).substr(0, 30), "{\"step\":12,\"loss\":2.345678,\"au");
  const auto lines = read_jsonl(path);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0]["step"], 12);
  EXPECT_TRUE(lines[0]["step"].is_number_integer());
  EXPECT_EQ(lines[0]["tokens_per_s"], 12345.4);
  EXPECT_EQ(lines[0]["wall_time"], 1700000000.5);
  EXPECT_FALSE(lines[0].contains("total_steps"));
  EXPECT_TRUE(lines[1]["loss"].is_null());  // JSON has no Inf
  EXPECT_EQ(lines[1]["eval_acc"], 0.75);
  EXPECT_EQ(lines[2]["eval/accuracy"], 0.5);
  EXPECT_EQ(lines[2].size(), 2u);
}

TEST(JsonlWriter, ResumeTruncatesStepsAfterTheCheckpoint) {
  TempDir tmp;
  const std::string path = tmp.file("metrics.jsonl");
  {  // first attempt: steps 1..15, checkpoint at 10, then the process dies in the middle of writing step 16
    auto w = JsonlWriter::open(path, std::nullopt);
    ASSERT_TRUE(w.ok());
    for (int64_t s = 1; s <= 15; ++s) {
      MetricsLine m;
      m.step = s;
      m.loss = static_cast<double>(s);
      ASSERT_TRUE(w->append(m).ok());
    }
  }
  std::ofstream(path, std::ios::app) << "{\"step\":16,\"lo";  // torn line
  {
    auto w = JsonlWriter::open(path, 10);
    ASSERT_TRUE(w.ok()) << w.status().to_string();
    EXPECT_EQ(w->dropped_on_open(), 6);  // 11..15 and the torn line
    EXPECT_EQ(read_jsonl(path).size(), 10u);
    for (int64_t s = 11; s <= 20; ++s) {
      MetricsLine m;
      m.step = s;
      m.loss = 100.0 + static_cast<double>(s);
      ASSERT_TRUE(w->append(m).ok());
    }
  }
  const auto lines = read_jsonl(path);
  ASSERT_EQ(lines.size(), 20u);
  for (int64_t i = 0; i < 20; ++i) {
    EXPECT_EQ(lines[static_cast<size_t>(i)]["step"], i + 1);
    EXPECT_EQ(lines[static_cast<size_t>(i)]["loss"], i < 10 ? static_cast<double>(i + 1) : 101.0 + static_cast<double>(i));
  }
  // Resuming at a step beyond the file keeps everything; resuming with no file creates one.
  auto again = JsonlWriter::open(path, 1000);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->dropped_on_open(), 0);
  ASSERT_TRUE(again->close().ok());
  EXPECT_EQ(read_jsonl(path).size(), 20u);
  auto fresh = JsonlWriter::open(tmp.file("new.jsonl"), 5);
  ASSERT_TRUE(fresh.ok());
  EXPECT_TRUE(fs::exists(tmp.file("new.jsonl")));
  // Garbage lines are dropped, not fatal.
  std::ofstream(tmp.file("bad.jsonl")) << "not json\n{\"step\":\"x\"}\n{\"step\":2}\n[1]\n";
  auto bad = JsonlWriter::open(tmp.file("bad.jsonl"), 5);
  ASSERT_TRUE(bad.ok());
  EXPECT_EQ(bad->dropped_on_open(), 3);
  EXPECT_EQ(read_text(tmp.file("bad.jsonl")), "{\"step\":2}\n");
}

TEST(JsonlWriter, ErrorsNameThePath) {
  auto w = JsonlWriter::open("/nonexistent_dir_vlpar/metrics.jsonl", std::nullopt);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("/nonexistent_dir_vlpar/metrics.jsonl"), std::string::npos);
  EXPECT_FALSE(JsonlWriter::open("", std::nullopt).ok());
  JsonlWriter closed;
  EXPECT_FALSE(closed.append(MetricsLine{}).ok());
}

TEST(Timing, StopwatchAndScopedTimer) {
  Stopwatch sw;
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const double lap1 = sw.lap_s();
  EXPECT_GE(lap1, 0.020);
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const double lap2 = sw.lap_s();
  EXPECT_GE(lap2, 0.010);
  EXPECT_GE(sw.elapsed_s(), lap1 + lap2);
  double acc = 1.0;
  {
    ScopedTimer t(acc);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_GE(acc, 1.010);
  EXPECT_LT(acc, 1.0 + 5.0);  // generous upper bound for a loaded machine
}

TEST(Timing, DataWaitMeter) {
  DataWaitMeter m;
  m.start_step();
  m.add_wait_s(0.25);
  m.add_wait_s(0.25);
  DataWaitMeter::Report r = m.end_step(2.0);
  EXPECT_DOUBLE_EQ(r.wait_s, 0.5);
  EXPECT_DOUBLE_EQ(r.pct, 25.0);
  r = m.end_step(1.0);  // a step without waits
  EXPECT_DOUBLE_EQ(r.wait_s, 0.0);
  EXPECT_DOUBLE_EQ(r.pct, 0.0);
  EXPECT_EQ(m.steps(), 2);
  EXPECT_DOUBLE_EQ(m.total_pct(), 100.0 * 0.5 / 3.0);
  m.add_wait_s(5.0);
  EXPECT_DOUBLE_EQ(m.end_step(1.0).pct, 100.0);  // clamped (a wait measured across the step boundary)
  EXPECT_DOUBLE_EQ(m.end_step(0.0).pct, 0.0);
  // Real clock: the waited scope is counted, the rest of the step is not.
  m.start_step();
  {
    auto w = m.wait();
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  r = m.end_step();
  EXPECT_GE(r.wait_s, 0.030);
  EXPECT_GE(r.step_s, 0.060);
  EXPECT_LT(r.pct, 100.0);
  EXPECT_GT(r.pct, 0.0);
}

TEST(ProcessMemory, ParsesProcStatus) {
  auto m = parse_proc_status("Name:\tx\nVmPeak:\t  9999 kB\nVmHWM:\t    2048 kB\nVmRSS:\t    1024 kB\n");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(m->rss_bytes, 1024 * 1024);
  EXPECT_EQ(m->peak_rss_bytes, 2048 * 1024);
  EXPECT_FALSE(parse_proc_status("Name:\tx\n").ok());
  auto bad = parse_proc_status("VmRSS:\t12 MB\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("not in kB"), std::string::npos);
  auto self = read_process_memory();
  ASSERT_TRUE(self.ok()) << self.status().to_string();
  EXPECT_GT(self->rss_bytes, 1 << 20);
  EXPECT_GE(self->peak_rss_bytes, self->rss_bytes);
}
