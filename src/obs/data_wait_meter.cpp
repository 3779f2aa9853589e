// Data-wait accounting. See include/vlpar/obs/data_wait_meter.hpp.
#include "vlpar/obs/data_wait_meter.hpp"

#include <algorithm>

namespace vlpar::obs {

DataWaitMeter::Report DataWaitMeter::end_step(double step_s) {
  Report r;
  r.wait_s = step_wait_s_;
  r.step_s = step_s;
  r.pct = step_s > 0.0 ? std::clamp(100.0 * r.wait_s / step_s, 0.0, 100.0) : 0.0;
  total_wait_s_ += r.wait_s;
  total_step_s_ += std::max(step_s, 0.0);
  ++steps_;
  step_wait_s_ = 0.0;
  step_watch_.restart();  // a step that is not started explicitly begins where the previous one ended
  return r;
}

double DataWaitMeter::total_pct() const {
  return total_step_s_ > 0.0 ? std::clamp(100.0 * total_wait_s_ / total_step_s_, 0.0, 100.0) : 0.0;
}

}  // namespace vlpar::obs
