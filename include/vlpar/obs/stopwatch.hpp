#pragma once
// Wall-clock timing on the steady clock.
//   Stopwatch   : started at construction; elapsed_s(), lap_s() (time since the previous lap, then restarts the
//                 lap), restart().
//   ScopedTimer : adds the duration of a scope to a double (seconds), e.g. per-phase accumulators.
// Test: tests/unit/test_obs_metrics.cpp.
#include <chrono>

namespace vlpar::obs {

class Stopwatch {
 public:
  using Clock = std::chrono::steady_clock;
  Stopwatch() : start_(Clock::now()), lap_(start_) {}
  void restart() { start_ = lap_ = Clock::now(); }
  double elapsed_s() const { return seconds(Clock::now() - start_); }
  /// Seconds since the previous lap_s() (or the start), and starts a new lap.
  double lap_s() {
    const Clock::time_point now = Clock::now();
    const double s = seconds(now - lap_);
    lap_ = now;
    return s;
  }
  static double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

 private:
  Clock::time_point start_, lap_;
};

class ScopedTimer {
 public:
  explicit ScopedTimer(double& accumulator_s) : acc_(accumulator_s) {}
  ScopedTimer(const ScopedTimer&) = delete;
  ScopedTimer& operator=(const ScopedTimer&) = delete;
  ~ScopedTimer() { acc_ += watch_.elapsed_s(); }

 private:
  double& acc_;
  Stopwatch watch_;
};

}  // namespace vlpar::obs
