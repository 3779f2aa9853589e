#pragma once
// The learning-rate schedule of a training run: linear warmup, then cosine or linear decay to min_lr_ratio·lr, or
// constant (torchtitan's / Megatron's warmup + decay):
//   step s (0-based optimizer step), W = warmup_steps, S = total_steps, r = min_lr_ratio:
//     s < W: lr·(s+1)/W;  else p = min(1, (s − W)/max(1, S − W)):
//     cosine: lr·(r + (1 − r)·(1 + cos(π·p))/2)    linear: lr·(1 − (1 − r)·p)    constant: lr
// A pure function of (schedule, peak lr, step), so a resumed run needs only the step count. Header-only.
// Test: tests/unit/test_lr_schedule.cpp.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <string>

#include "vlpar/core/status.hpp"

namespace vlpar::parallel {

struct LrSchedule {
  int64_t warmup_steps = 0;      // W: linear warmup from lr/W to lr
  int64_t total_steps = 1;       // S: the decay ends here
  std::string decay = "cosine";  // cosine | linear | constant
  double min_lr_ratio = 0.1;     // r: the decay's floor as a fraction of the peak lr

  /// @brief 0 <= W <= S, S >= 1, decay one of the three, r in [0, 1]; one sentence per conflict.
  Status validate() const {
    VLPAR_CHECK(total_steps >= 1, "lr schedule: total_steps must be >= 1, got {}", total_steps);
    VLPAR_CHECK(warmup_steps >= 0 && warmup_steps <= total_steps,
                "lr schedule: warmup_steps {} must be in [0, total_steps = {}]", warmup_steps, total_steps);
    VLPAR_CHECK(decay == "cosine" || decay == "linear" || decay == "constant",
                "lr schedule: decay must be cosine, linear or constant, got '{}'", decay);
    VLPAR_CHECK(min_lr_ratio >= 0 && min_lr_ratio <= 1, "lr schedule: min_lr_ratio must be in [0, 1], got {}",
                min_lr_ratio);
    return Status::Ok();
  }

  /// The learning rate of optimizer step `step` for peak rate `lr`.
  double at(double lr, int64_t step) const {
    const int64_t W = warmup_steps, S = total_steps;
    const double r = min_lr_ratio;
    if (step < W) return lr * double(step + 1) / double(W);
    if (decay == "constant") return lr;
    const double p = std::min(1.0, double(step - W) / double(std::max<int64_t>(1, S - W)));
    if (decay == "linear") return lr * (1.0 - (1.0 - r) * p);
    return lr * (r + (1.0 - r) * 0.5 * (1.0 + std::cos(std::numbers::pi * p)));
  }
};

}  // namespace vlpar::parallel
