#pragma once
// Learning-rate schedule of the trainer: linear warmup, then cosine / linear decay to min_lr_ratio·lr, or constant.
//   step s (0-based optimizer step):  s < W: lr·(s+1)/W;  else p = (s − W)/max(1, S − W) ∈ [0, 1]:
//     cosine: lr·(r + (1 − r)·(1 + cos(π·p))/2)   linear: lr·(1 − (1 − r)·p)   constant: lr
// A pure function of (config, step), so a resumed run needs only the step count.
// Test: examples/qwen3vl/tests/test_trainer_parts.cpp.
#include <cmath>
#include <cstdint>
#include <numbers>

#include "train_config.hpp"

namespace qwen3vl {

inline double lr_at(const TrainConfig& c, int64_t step) {
  const double lr = c.optimizer.lr, r = c.optimizer.min_lr_ratio;
  const int64_t W = c.schedule.warmup_steps, S = c.training.steps;
  if (step < W) return lr * double(step + 1) / double(W);
  if (c.schedule.decay == "constant") return lr;
  const double p = std::min(1.0, double(step - W) / double(std::max<int64_t>(1, S - W)));
  if (c.schedule.decay == "linear") return lr * (1.0 - (1.0 - r) * p);
  return lr * (r + (1.0 - r) * 0.5 * (1.0 + std::cos(std::numbers::pi * p)));
}

}  // namespace qwen3vl
