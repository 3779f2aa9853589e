// TraceRecorder: Chrome/Perfetto trace JSON, nesting, per-thread tracks, ring bound, disabled cost.
// Run: ./build/<dir>/tests/test_obs_trace
#include <fmt/core.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "vlpar/obs/trace_recorder.hpp"

namespace fs = std::filesystem;
using namespace vlpar::obs;
using nlohmann::json;

namespace {

std::vector<json> complete_events(const json& trace) {
  std::vector<json> out;
  for (const json& e : trace["traceEvents"])
    if (e["ph"] == "X") out.push_back(e);
  return out;
}

const json* find_named(const std::vector<json>& evs, const std::string& name) {
  for (const json& e : evs)
    if (e["name"] == name) return &e;
  return nullptr;
}

// Containment in the trace's own units (µs with 3 decimals, parsed as double): exact for these magnitudes.
bool contains(const json& parent, const json& child) {
  const double ps = parent["ts"].get<double>(), pe = ps + parent["dur"].get<double>();
  const double cs = child["ts"].get<double>(), ce = cs + child["dur"].get<double>();
  return ps <= cs && ce <= pe + 1e-9;
}

void spin_for(std::chrono::microseconds d) {
  const auto until = std::chrono::steady_clock::now() + d;
  while (std::chrono::steady_clock::now() < until) {
  }
}

}  // namespace

TEST(TraceRecorder, NestedSpansAndArgs) {
  TraceRecorder::Options opt;
  opt.pid = 3;
  opt.process_name = "rank 3";
  TraceRecorder rec(opt);
  rec.set_thread_name("train loop");
  {
    Span step = rec.span("step", "step 7");
    step.arg("step", 7).arg("loss", 2.5).arg("note", "a \"quoted\" name");
    {
      Span fwd = rec.span(trace_cat::kVisionEncoder, "vision forward");
      spin_for(std::chrono::microseconds(200));
      {
        Span inner = rec.span(trace_cat::kMerger, "merger");
        spin_for(std::chrono::microseconds(100));
      }
    }
    Span dec = rec.span(trace_cat::kDecoder, "decoder forward");
    spin_for(std::chrono::microseconds(100));
    dec.end();
    dec.end();  // idempotent
    Span opt_span = rec.span(trace_cat::kOptimizer, "adamw");
  }
  EXPECT_EQ(rec.event_count(), 5);
  const json trace = json::parse(rec.to_json());
  EXPECT_EQ(trace["displayTimeUnit"], "ms");
  EXPECT_EQ(trace["otherData"]["dropped_events"], 0);
  const auto evs = complete_events(trace);
  ASSERT_EQ(evs.size(), 5u);
  const json* step = find_named(evs, "step 7");
  const json* vis = find_named(evs, "vision forward");
  const json* mer = find_named(evs, "merger");
  const json* dec = find_named(evs, "decoder forward");
  const json* adam = find_named(evs, "adamw");
  ASSERT_TRUE(step && vis && mer && dec && adam);
  EXPECT_TRUE(contains(*step, *vis));
  EXPECT_TRUE(contains(*vis, *mer));
  EXPECT_TRUE(contains(*step, *dec));
  EXPECT_TRUE(contains(*step, *adam));
  EXPECT_FALSE(contains(*vis, *dec));  // siblings
  EXPECT_GE((*dec)["ts"].get<double>(), (*vis)["ts"].get<double>() + (*vis)["dur"].get<double>());
  EXPECT_GE((*vis)["dur"].get<double>(), 300.0);
  EXPECT_EQ((*vis)["cat"], "vision_encoder");
  EXPECT_EQ((*mer)["cat"], "merger");
  EXPECT_EQ((*step)["args"]["step"], 7);
  EXPECT_EQ((*step)["args"]["loss"], 2.5);
  EXPECT_EQ((*step)["args"]["note"], "a \"quoted\" name");
  EXPECT_FALSE(vis->contains("args"));
  for (const json& e : evs) {
    EXPECT_EQ(e["pid"], 3);
    EXPECT_EQ(e["tid"], 1);
  }
  // Parents come before their children in the file.
  EXPECT_EQ(evs[0]["name"], "step 7");
  EXPECT_EQ(evs[1]["name"], "vision forward");
  bool saw_process = false, saw_thread = false;
  for (const json& e : trace["traceEvents"]) {
    if (e["ph"] != "M") continue;
    if (e["name"] == "process_name") saw_process = e["args"]["name"] == "rank 3";
    if (e["name"] == "thread_name" && e["tid"] == 1) saw_thread = e["args"]["name"] == "train loop";
  }
  EXPECT_TRUE(saw_process);
  EXPECT_TRUE(saw_thread);
}

TEST(TraceRecorder, ThreadsGetTheirOwnTracks) {
  TraceRecorder rec;
  rec.set_thread_name("main");
  constexpr int kThreads = 4, kSpans = 50;
  std::vector<std::thread> pool;
  for (int t = 0; t < kThreads; ++t) {
    pool.emplace_back([&rec, t] {
      rec.set_thread_name(fmt::format("worker {}", t));
      for (int i = 0; i < kSpans; ++i) {
        Span outer = rec.span(trace_cat::kData, fmt::format("w{} outer", t));
        Span inner = rec.span(trace_cat::kCommunication, fmt::format("w{} inner", t));
        inner.arg("i", i);
      }
    });
  }
  for (auto& th : pool) th.join();
  // A span opened on a worker and ended on the main thread stays on the worker's track.
  std::optional<Span> moved;
  std::thread([&] { moved.emplace(rec.span(trace_cat::kCheckpoint, "handed over")); }).join();
  moved->end();
  const json trace = json::parse(rec.to_json());
  std::map<std::string, int64_t> tid_of_worker;  // thread name -> tid
  for (const json& e : trace["traceEvents"])
    if (e["ph"] == "M" && e["name"] == "thread_name") tid_of_worker[e["args"]["name"]] = e["tid"];
  // main + the workers; the handed-over thread may reuse a finished worker's std::thread::id and so its track.
  ASSERT_GE(tid_of_worker.size(), static_cast<size_t>(kThreads + 1)) << trace["traceEvents"].dump();
  EXPECT_EQ(tid_of_worker["main"], 1);
  std::set<int64_t> tids;
  for (const auto& [name, tid] : tid_of_worker) tids.insert(tid);
  EXPECT_EQ(tids.size(), tid_of_worker.size());
  std::map<int64_t, int> per_tid;
  for (const json& e : complete_events(trace)) {
    const std::string name = e["name"];
    if (name == "handed over") {
      EXPECT_NE(e["tid"], 1);
      continue;
    }
    const std::string worker = fmt::format("worker {}", name.substr(1, name.find(' ') - 1));
    EXPECT_EQ(e["tid"], tid_of_worker[worker]) << name;
    ++per_tid[e["tid"]];
  }
  EXPECT_EQ(per_tid.size(), static_cast<size_t>(kThreads));
  for (const auto& [tid, n] : per_tid) EXPECT_EQ(n, 2 * kSpans) << tid;
  // Nesting holds per track: every inner span lies inside an outer span of its own thread.
  const auto evs = complete_events(trace);
  for (const json& in : evs) {
    const std::string name = in["name"];
    if (name.find("inner") == std::string::npos) continue;
    bool inside = false;
    for (const json& out : evs)
      if (out["tid"] == in["tid"] && out["name"].get<std::string>().find("outer") != std::string::npos &&
          contains(out, in))
        inside = true;
    EXPECT_TRUE(inside) << name << " i=" << in["args"]["i"];
  }
}

// Named tracks (another rank's events gathered here): each name is one track of its own, apart from the calling
// thread's, counted and cleared with the others; the ring bounds them too.
TEST(TraceRecorder, NamedTracksHoldEventsTimedElsewhere) {
  TraceRecorder::Options opt;
  opt.max_events_per_thread = 4;
  TraceRecorder rec(opt);
  rec.set_thread_name("main");
  rec.record_complete("pipeline", "0F0", 0, 100);
  for (int i = 0; i < 6; ++i)
    rec.record_complete_on("pipeline rank 1", "pipeline", fmt::format("1F{}", i), 1000 * i, 10);
  rec.record_complete_on("pipeline rank 2", "pipeline", "2F0", 500, 10);
  EXPECT_EQ(rec.event_count(), 1 + 4 + 1);
  EXPECT_EQ(rec.dropped_events(), 2);
  const json trace = json::parse(rec.to_json());
  std::map<std::string, int64_t> tid_of;  // track name -> tid
  for (const json& e : trace["traceEvents"])
    if (e["ph"] == "M" && e["name"] == "thread_name") tid_of[e["args"]["name"]] = e["tid"];
  ASSERT_EQ(tid_of.size(), 3u) << trace.dump();
  EXPECT_EQ(tid_of["main"], 1);
  EXPECT_NE(tid_of["pipeline rank 1"], tid_of["pipeline rank 2"]);
  std::map<int64_t, std::vector<std::string>> names;  // tid -> event names in time order
  for (const json& e : complete_events(trace)) names[e["tid"]].push_back(e["name"]);
  EXPECT_EQ(names[tid_of["main"]], std::vector<std::string>{"0F0"});
  EXPECT_EQ(names[tid_of["pipeline rank 1"]], (std::vector<std::string>{"1F2", "1F3", "1F4", "1F5"}));
  EXPECT_EQ(names[tid_of["pipeline rank 2"]], std::vector<std::string>{"2F0"});
  rec.clear();
  EXPECT_EQ(rec.event_count(), 0);
}

TEST(TraceRecorder, RingKeepsTheNewestEvents) {
  TraceRecorder::Options opt;
  opt.max_events_per_thread = 8;
  TraceRecorder rec(opt);
  for (int i = 0; i < 20; ++i) rec.record_complete("data", fmt::format("e{}", i), 1000 * i, 10);
  EXPECT_EQ(rec.event_count(), 8);
  EXPECT_EQ(rec.dropped_events(), 12);
  const json trace = json::parse(rec.to_json());
  EXPECT_EQ(trace["otherData"]["dropped_events"], 12);
  const auto evs = complete_events(trace);
  ASSERT_EQ(evs.size(), 8u);
  for (size_t k = 0; k < evs.size(); ++k) {
    EXPECT_EQ(evs[k]["name"], fmt::format("e{}", 12 + k));
    EXPECT_EQ(evs[k]["ts"].get<double>(), static_cast<double>(12 + k));  // 1000 ns = 1 µs
    EXPECT_EQ(evs[k]["dur"].get<double>(), 0.01);
  }
  rec.clear();
  EXPECT_EQ(rec.event_count(), 0);
  EXPECT_EQ(rec.dropped_events(), 0);
}

TEST(TraceRecorder, WritesAtomicallyAndDisabledRecordsNothing) {
  const fs::path dir = fs::temp_directory_path() / ("vlpar_obs_trace_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string path = (dir / "trace.json").string();
  TraceRecorder rec;
  { Span s = rec.span("loss", "ce"); }
  ASSERT_TRUE(rec.write_json(path).ok());
  std::ifstream in(path);
  const json trace = json::parse(std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>()));
  EXPECT_EQ(complete_events(trace).size(), 1u);
  EXPECT_FALSE(rec.write_json((dir / "missing" / "t.json").string()).ok());
  for (const auto& entry : fs::directory_iterator(dir))  // no temporaries left behind
    EXPECT_EQ(entry.path().filename(), "trace.json");
  fs::remove_all(dir);

  TraceRecorder::Options off;
  off.enabled = false;
  TraceRecorder disabled(off);
  EXPECT_FALSE(disabled.enabled());
  {
    Span s = disabled.span("data", "x");
    EXPECT_FALSE(s.active());
    s.arg("k", 1);
  }
  disabled.record_complete("data", "y", 0, 1);
  disabled.set_thread_name("t");
  EXPECT_EQ(disabled.event_count(), 0);
  const json empty = json::parse(disabled.to_json());
  EXPECT_TRUE(empty["traceEvents"].empty());
}

TEST(TraceRecorder, DisabledSpanCostsAlmostNothing) {
  // A disabled span is a branch and a few stores (~1-13 ns by optimisation level), an enabled one reads the clock
  // twice and appends an event (~250 ns). Checked as a ratio measured in the same run (best of 5 each, so a
  // loaded machine does not make it flaky), not as an absolute time: a disabled span costs under a fifth of an
  // enabled one. The absolute figures go to the test's properties.
  TraceRecorder::Options off;
  off.enabled = false;
  TraceRecorder disabled(off);
  TraceRecorder enabled;
  const auto best_ns = [](int n, const auto& body) {
    double best = 1e30;
    for (int rep = 0; rep < 5; ++rep) {
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < n; ++i) body();
      const std::chrono::duration<double, std::nano> took = std::chrono::steady_clock::now() - t0;
      best = std::min(best, took.count() / n);
    }
    return best;
  };
  const double off_ns = best_ns(1000000, [&] {
    Span s = disabled.span(trace_cat::kDecoder, "layer");
    if (s.active()) std::abort();
  });
  const double on_ns = best_ns(20000, [&] { Span s = enabled.span(trace_cat::kDecoder, "layer"); });
  EXPECT_LT(off_ns * 5.0, on_ns) << "disabled span " << off_ns << " ns, enabled " << on_ns << " ns";
  RecordProperty("disabled_span_ns", std::to_string(off_ns));
  RecordProperty("enabled_span_ns", std::to_string(on_ns));
  std::printf("disabled span: %.2f ns, enabled span: %.1f ns\n", off_ns, on_ns);
}
