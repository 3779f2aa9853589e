#pragma once
// A progress bar for long non-training work (checkpoint conversion, data preparation).
// On a terminal it redraws one line in place at most every `tty_interval_s`:
//   convert [##########----------]  50.0%  512/1024 shards  12.3 shards/s  ETA 0:00:41
// Otherwise (a log file, CI) it prints a plain line every `plain_interval_s` and one at the end:
//   convert: 512/1024 shards (50.0%), 12.3 shards/s, ETA 0:00:41
// With `bytes`, counts print as KiB/MiB/GiB. total <= 0 means unknown: no bar, percentage or ETA.
// add() may be called from any number of threads: the count is atomic and at most one thread redraws at a time
// (the others do not wait for it).
// Test: tests/unit/test_obs_progress.cpp.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <optional>
#include <string>

namespace vlpar::obs {

/// What one progress line shows.
struct ProgressState {
  std::string label;
  int64_t done = 0;
  int64_t total = 0;        // <= 0: unknown
  double elapsed_s = 0.0;
  std::string unit = "it";  // ignored with bytes
  bool bytes = false;
};

/// @brief The text of one progress line, without "\r" or "\n". `tty` selects the bar form.
std::string format_progress(const ProgressState& s, bool tty, int bar_width = 24);

/// @brief 0:00:41, 1:02:03, or "?" for a non-finite or negative duration.
std::string format_duration(double seconds);

class ProgressBar {
 public:
  struct Options {
    std::FILE* out = stderr;
    std::optional<bool> tty;          // default: isatty(fileno(out))
    double tty_interval_s = 0.1;
    double plain_interval_s = 10.0;
    int bar_width = 24;
    std::string unit = "it";
    bool bytes = false;
  };

  ProgressBar(std::string label, int64_t total);
  ProgressBar(std::string label, int64_t total, const Options& options);
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;
  ~ProgressBar();  // finish()

  /// @brief Adds n to the count (thread-safe) and redraws when the interval has passed.
  void add(int64_t n = 1);
  /// @brief Draws the final state and ends the line (idempotent; later add() calls only count).
  void finish();

  int64_t done() const { return done_.load(std::memory_order_relaxed); }
  ProgressState state() const;

 private:
  void draw(bool final_line);
  std::string label_;
  int64_t total_;
  Options options_;
  bool tty_ = false;
  std::chrono::steady_clock::time_point start_;
  std::atomic<int64_t> done_{0};
  std::atomic<int64_t> next_draw_ns_{0};  // steady-clock ns since start_ of the next allowed redraw
  std::mutex draw_mu_;
  bool finished_ = false;                 // guarded by draw_mu_
};

}  // namespace vlpar::obs
