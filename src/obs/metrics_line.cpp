// The per-step metrics line. See include/vlpar/obs/metrics_line.hpp.
#include "vlpar/obs/metrics_line.hpp"

#include <fmt/core.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace vlpar::obs {
namespace {

// ANSI SGR colours per group (torchtitan's scheme: step red, loss green, throughput blue/cyan, memory, ...).
constexpr const char* kRed = "\x1b[31m";
constexpr const char* kGreen = "\x1b[32m";
constexpr const char* kYellow = "\x1b[33m";
constexpr const char* kBlue = "\x1b[34m";
constexpr const char* kMagenta = "\x1b[35m";
constexpr const char* kCyan = "\x1b[36m";
constexpr const char* kGrey = "\x1b[90m";
constexpr const char* kReset = "\x1b[0m";

struct LineBuilder {
  bool color;
  std::string out;
  void field(const char* sgr, const std::string& text) {
    if (!out.empty()) out += "  ";
    if (color) out += sgr;
    out += text;
  }
};

int decimal_digits(int64_t v) {
  int d = 1;
  for (v = v < 0 ? -v : v; v >= 10; v /= 10) ++d;
  return d;
}

}  // namespace

std::string group_thousands(double value) {
  if (!std::isfinite(value)) return fmt::format("{}", value);
  const double r = std::round(value);
  if (std::fabs(r) >= 1e18) return fmt::format("{:.3e}", value);
  const auto v = static_cast<int64_t>(r);
  std::string digits = std::to_string(v < 0 ? -v : v);
  std::string out;
  const int n = static_cast<int>(digits.size());
  for (int i = 0; i < n; ++i) {
    if (i > 0 && (n - i) % 3 == 0) out.push_back(',');
    out.push_back(digits[static_cast<size_t>(i)]);
  }
  return v < 0 ? "-" + out : out;
}

std::vector<NamedScalar> metrics_scalars(const MetricsLine& m) {
  std::vector<NamedScalar> out;
  out.push_back({"step", static_cast<double>(m.step)});
  const std::optional<double>* fields[] = {&m.loss,         &m.aux_loss,        &m.grad_norm,    &m.lr,
                                           &m.tokens_per_s, &m.images_per_s,    &m.tflops,       &m.mfu_pct,
                                           &m.mem_current_mib, &m.mem_peak_mib, &m.data_wait_pct, &m.step_time_s,
                                           &m.wall_time};
  static_assert(std::size(fields) + 1 == std::size(kMetricKeys), "kMetricKeys and MetricsLine disagree");
  for (size_t i = 0; i < std::size(fields); ++i)
    if (fields[i]->has_value()) out.push_back({std::string(kMetricKeys[i + 1]), **fields[i]});
  for (const NamedScalar& e : m.extra) out.push_back(e);
  for (const NamedScalar& e : m.detail) out.push_back(e);
  return out;
}

std::string format_metrics_line(const MetricsLine& m, bool color) {
  LineBuilder b{color, {}};
  if (m.total_steps)
    b.field(kRed, fmt::format("step: {:>{}}/{}", m.step, decimal_digits(*m.total_steps), *m.total_steps));
  else
    b.field(kRed, fmt::format("step: {:>5}", m.step));
  if (m.loss) b.field(kGreen, fmt::format("loss: {:>8.5f}", *m.loss));
  if (m.aux_loss) b.field(kGreen, fmt::format("aux_loss: {:>7.5f}", *m.aux_loss));
  if (m.grad_norm) b.field(kYellow, fmt::format("grad_norm: {:>8.4f}", *m.grad_norm));
  if (m.lr) b.field(kYellow, fmt::format("lr: {:.3e}", *m.lr));
  if (m.tokens_per_s) b.field(kBlue, fmt::format("tok/s: {:>8}", group_thousands(*m.tokens_per_s)));
  if (m.images_per_s) b.field(kBlue, fmt::format("img/s: {:>7.2f}", *m.images_per_s));
  if (m.tflops) b.field(kCyan, fmt::format("tflop/s: {:>6.2f}", *m.tflops));
  if (m.mfu_pct) b.field(kCyan, fmt::format("mfu: {:>5.2f}%", *m.mfu_pct));
  if (m.mem_current_mib && m.mem_peak_mib)
    b.field(kMagenta, fmt::format("mem: {:>5.0f}/{:>5.0f} MiB", *m.mem_current_mib, *m.mem_peak_mib));
  else if (m.mem_current_mib)
    b.field(kMagenta, fmt::format("mem: {:>5.0f} MiB", *m.mem_current_mib));
  else if (m.mem_peak_mib)
    b.field(kMagenta, fmt::format("mem peak: {:>5.0f} MiB", *m.mem_peak_mib));
  if (m.data_wait_pct) b.field(kGrey, fmt::format("data: {:>4.1f}%", *m.data_wait_pct));
  if (m.step_time_s) b.field(kGrey, fmt::format("time: {:>6.3f}s", *m.step_time_s));
  for (const NamedScalar& e : m.extra) b.field(kGrey, fmt::format("{}: {:.6g}", e.key, e.value));
  if (color) b.out += kReset;
  return b.out;
}

bool color_allowed(bool is_tty, const char* no_color_env) {
  return is_tty && (no_color_env == nullptr || no_color_env[0] == '\0');
}

bool stdout_color_allowed() { return color_allowed(::isatty(STDOUT_FILENO) == 1, std::getenv("NO_COLOR")); }

void fill_throughput(MetricsLine& m, const StepWork& w) {
  if (!(w.seconds > 0.0) || w.devices < 1) return;
  m.step_time_s = w.seconds;
  const double per_device_s = w.seconds * double(w.devices);
  m.tokens_per_s = static_cast<double>(w.real_tokens) / per_device_s;
  m.images_per_s = static_cast<double>(w.images) / per_device_s;
  m.tflops = w.flops / per_device_s / 1e12;
  if (w.peak_tflops && *w.peak_tflops > 0.0) m.mfu_pct = 100.0 * *m.tflops / *w.peak_tflops;
}

}  // namespace vlpar::obs
