#pragma once
// How much of each training step was spent waiting for the data pipeline (the "data: x%" of the metrics line).
// Usage per step:
//   meter.start_step();
//   { auto w = meter.wait(); batch = loader.next(); }   // time inside the scope counts as waiting
//   ... forward/backward/optimizer ...
//   DataWaitMeter::Report r = meter.end_step();          // r.wait_s, r.step_s, r.pct = 100 * wait / step
// Waits may also be added directly (add_wait_s) when the loader measures them itself. Totals over all steps are
// kept for an end-of-run summary. One meter per training loop thread (not thread-safe).
// Test: tests/unit/test_obs_metrics.cpp.
#include <cstdint>

#include "vlpar/obs/stopwatch.hpp"

namespace vlpar::obs {

class DataWaitMeter {
 public:
  struct Report {
    double wait_s = 0.0;  // waited for data during the step
    double step_s = 0.0;  // the step's wall time
    double pct = 0.0;     // 100 * wait_s / step_s (0 when step_s <= 0), clamped to [0, 100]
  };

  class Wait {
   public:
    explicit Wait(DataWaitMeter& meter) : meter_(meter) {}
    Wait(const Wait&) = delete;
    Wait& operator=(const Wait&) = delete;
    ~Wait() { meter_.add_wait_s(watch_.elapsed_s()); }

   private:
    DataWaitMeter& meter_;
    Stopwatch watch_;
  };

  /// @brief Starts timing a step; waits recorded before the first start_step count toward the first step.
  void start_step() { step_watch_.restart(); }
  /// @brief A scope whose duration is added as waiting time.
  [[nodiscard]] Wait wait() { return Wait(*this); }
  void add_wait_s(double seconds) { step_wait_s_ += seconds; }
  /// @brief Closes the step timed since start_step().
  Report end_step() { return end_step(step_watch_.elapsed_s()); }
  /// @brief Closes a step whose wall time the caller measured.
  Report end_step(double step_s);

  double total_wait_s() const { return total_wait_s_; }
  double total_step_s() const { return total_step_s_; }
  int64_t steps() const { return steps_; }
  /// 100 * total wait / total step time over all closed steps.
  double total_pct() const;

 private:
  Stopwatch step_watch_;
  double step_wait_s_ = 0.0;
  double total_wait_s_ = 0.0, total_step_s_ = 0.0;
  int64_t steps_ = 0;
};

}  // namespace vlpar::obs
