#pragma once
// The per-step training metrics and their one-line console form (torchtitan style, spec §4).
//   MetricsLine          : every field optional except the step; absent fields are left out of every output.
//   metrics_scalars      : the present fields as (key, value) pairs in a fixed order; the keys are the JSONL keys
//                          and the TensorBoard tags (JsonlWriter, TensorBoardWriter, plot_metrics_png read them).
//   format_metrics_line  : the console line, fixed widths so columns line up from step to step, e.g.
//     step:    12/100  loss:  2.34567  aux_loss: 0.00120  grad_norm:   1.2345  lr: 3.000e-04  tok/s:   12,345
//     img/s:   12.30  tflop/s:   0.12  mfu:  1.23%  mem:   123/  456 MiB  data:  1.2%  time:  0.123s
//   (one line); ANSI colours only when asked (see color_allowed).
//   color_allowed        : the colour decision: a TTY and NO_COLOR absent or empty (no-color.org).
//   fill_throughput      : tokens/s, images/s, TFLOP/s and MFU from one step's counts.
// Test: tests/unit/test_obs_metrics.cpp.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace vlpar::obs {

struct NamedScalar {
  std::string key;
  double value = 0.0;
};

struct MetricsLine {
  int64_t step = 0;
  std::optional<int64_t> total_steps;     // printed as step/total
  std::optional<double> loss;             // token-weighted mean over the global batch
  std::optional<double> aux_loss;         // MoE load-balancing loss (already scaled by its coefficient)
  std::optional<double> grad_norm;        // global L2 norm before clipping
  std::optional<double> lr;
  std::optional<double> tokens_per_s;     // real (non-padding) tokens per second, per device
  std::optional<double> images_per_s;     // images per second (a video clip counts as one), per device
  std::optional<double> tflops;           // achieved TFLOP/s per device (vision encoder + language model)
  std::optional<double> mfu_pct;          // 100 * tflops / peak TFLOP/s of the device
  std::optional<double> mem_current_mib;  // memory in use at the end of the step
  std::optional<double> mem_peak_mib;     // peak since the previous logged step
  std::optional<double> data_wait_pct;    // % of the step spent waiting for the data pipeline
  std::optional<double> step_time_s;      // wall time of the step
  std::optional<double> wall_time;        // Unix seconds at the end of the step (JSONL/TensorBoard only)
  std::vector<NamedScalar> extra;         // more scalars (eval accuracy, skipped steps, ...), printed as key: value
  std::vector<NamedScalar> detail;        // JSONL/TensorBoard only: series too many for the console (per layer)
};

/// @brief The keys of MetricsLine's fields, in the order metrics_scalars emits them (step first).
inline constexpr std::string_view kMetricKeys[] = {
    "step",           "loss",   "aux_loss", "grad_norm",       "lr",           "tokens_per_s", "images_per_s",
    "tflops",         "mfu_pct", "mem_current_mib", "mem_peak_mib", "data_wait_pct", "step_time_s", "wall_time"};

/// @brief (key, value) of every present field: "step" first, then the fields in kMetricKeys order, then `extra`,
/// then `detail`.
std::vector<NamedScalar> metrics_scalars(const MetricsLine& m);

/// @brief The console line (no trailing newline). With `color`, ANSI SGR colours per group and a reset at the end.
std::string format_metrics_line(const MetricsLine& m, bool color);

/// @brief True when `is_tty` and `no_color_env` (the value of NO_COLOR, nullptr when unset) is null or empty.
bool color_allowed(bool is_tty, const char* no_color_env);

/// @brief color_allowed(isatty(stdout), getenv("NO_COLOR")).
bool stdout_color_allowed();

/// @brief 1234567 -> "1,234,567" (rounded to the nearest integer; negative and non-finite values handled).
std::string group_thousands(double value);

/// @brief One step's work, for fill_throughput. Counts are per device (divide global counts by the number of
/// devices that shared the step), as torchtitan reports them.
struct StepWork {
  int64_t real_tokens = 0;              // text tokens that are not padding (image placeholder tokens included)
  int64_t images = 0;                   // images + video clips in the step
  double flops = 0.0;                   // model FLOPs of the step (forward + backward), vision + language
  double seconds = 0.0;                 // step wall time
  std::optional<double> peak_tflops;    // the device's peak dense TFLOP/s; no MFU without it
  int devices = 1;                      // devices that shared the counts above (the tp · pp ranks of one data
                                        // replica): every rate is divided by it
};

/// @brief Sets tokens_per_s, images_per_s, tflops (per device: ÷ w.devices), mfu_pct and step_time_s from `w`
/// (left unset when seconds <= 0 or devices < 1).
void fill_throughput(MetricsLine& m, const StepWork& w);

}  // namespace vlpar::obs
