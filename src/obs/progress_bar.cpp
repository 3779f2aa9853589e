// Progress bar for long non-training work. See include/vlpar/obs/progress_bar.hpp.
#include "vlpar/obs/progress_bar.hpp"

#include <fmt/core.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>

namespace vlpar::obs {
namespace {

std::string human_bytes(double b) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (std::fabs(b) >= 1024.0 && u < 4) {
    b /= 1024.0;
    ++u;
  }
  return u == 0 ? fmt::format("{:.0f} B", b) : fmt::format("{:.1f} {}", b, kUnits[u]);
}

std::string count_text(const ProgressState& s, int64_t v) {
  return s.bytes ? human_bytes(static_cast<double>(v)) : fmt::format("{}", v);
}

std::string rate_text(const ProgressState& s, double rate) {
  if (s.bytes) return human_bytes(rate) + "/s";
  if (rate >= 100.0) return fmt::format("{:.0f} {}/s", rate, s.unit);
  return fmt::format("{:.3g} {}/s", rate, s.unit);
}

int64_t steady_ns_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0.0 || seconds > 1e9) return "?";
  const auto t = static_cast<int64_t>(std::llround(seconds));
  return fmt::format("{}:{:02d}:{:02d}", t / 3600, (t / 60) % 60, t % 60);
}

std::string format_progress(const ProgressState& s, bool tty, int bar_width) {
  const bool known = s.total > 0;
  const double frac = known ? std::clamp(static_cast<double>(s.done) / static_cast<double>(s.total), 0.0, 1.0) : 0.0;
  const double rate = s.elapsed_s > 0.0 ? static_cast<double>(s.done) / s.elapsed_s : 0.0;
  const std::string unit = s.bytes ? std::string() : " " + s.unit;
  std::string eta = "?";
  if (known && rate > 0.0) eta = format_duration(static_cast<double>(std::max<int64_t>(s.total - s.done, 0)) / rate);
  const std::string counts =
      known ? fmt::format("{}/{}{}", count_text(s, s.done), count_text(s, s.total), unit)
            : fmt::format("{}{}", count_text(s, s.done), unit);
  const std::string rate_s = s.elapsed_s > 0.0 ? rate_text(s, rate) : std::string("? ") + (s.bytes ? "B" : s.unit) + "/s";
  if (tty) {
    std::string line = s.label;
    if (known) {
      const int w = std::max(bar_width, 1);
      const int filled = static_cast<int>(std::floor(frac * w));
      line += fmt::format(" [{}{}] {:5.1f}%", std::string(static_cast<size_t>(filled), '#'),
                          std::string(static_cast<size_t>(w - filled), '-'), 100.0 * frac);
    }
    line += fmt::format("  {}  {}", counts, rate_s);
    if (known) line += fmt::format("  ETA {}", eta);
    line += fmt::format("  elapsed {}", format_duration(s.elapsed_s));
    return line;
  }
  std::string line = fmt::format("{}: {}", s.label, counts);
  if (known) line += fmt::format(" ({:.1f}%)", 100.0 * frac);
  line += fmt::format(", {}", rate_s);
  if (known) line += fmt::format(", ETA {}", eta);
  line += fmt::format(", elapsed {}", format_duration(s.elapsed_s));
  return line;
}

ProgressBar::ProgressBar(std::string label, int64_t total) : ProgressBar(std::move(label), total, Options{}) {}

ProgressBar::ProgressBar(std::string label, int64_t total, const Options& options)
    : label_(std::move(label)), total_(total), options_(options), start_(std::chrono::steady_clock::now()) {
  if (options_.out == nullptr) options_.out = stderr;
  tty_ = options_.tty.value_or(::isatty(::fileno(options_.out)) == 1);
  // The first plain line comes after one interval; a terminal shows the bar at once.
  next_draw_ns_.store(tty_ ? 0 : static_cast<int64_t>(options_.plain_interval_s * 1e9));
  if (tty_) draw(false);
}

ProgressBar::~ProgressBar() { finish(); }

ProgressState ProgressBar::state() const {
  ProgressState s;
  s.label = label_;
  s.done = done();
  s.total = total_;
  s.elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  s.unit = options_.unit;
  s.bytes = options_.bytes;
  return s;
}

void ProgressBar::add(int64_t n) {
  done_.fetch_add(n, std::memory_order_relaxed);
  const int64_t now = steady_ns_since(start_);
  if (now < next_draw_ns_.load(std::memory_order_relaxed)) return;
  std::unique_lock<std::mutex> lock(draw_mu_, std::try_to_lock);
  if (!lock.owns_lock() || finished_) return;  // another thread is drawing: it will show our count
  if (now < next_draw_ns_.load(std::memory_order_relaxed)) return;
  const double interval = tty_ ? options_.tty_interval_s : options_.plain_interval_s;
  next_draw_ns_.store(now + static_cast<int64_t>(interval * 1e9), std::memory_order_relaxed);
  draw(false);
}

void ProgressBar::finish() {
  std::lock_guard<std::mutex> lock(draw_mu_);
  if (finished_) return;
  finished_ = true;
  draw(true);
}

// Caller holds draw_mu_ (or is the constructor).
void ProgressBar::draw(bool final_line) {
  const std::string text = format_progress(state(), tty_, options_.bar_width);
  std::string out;
  if (tty_) {
    out = "\r" + text + "\x1b[K";  // erase what is left of a longer previous line
    if (final_line) out += "\n";
  } else {
    out = text + "\n";
  }
  std::fwrite(out.data(), 1, out.size(), options_.out);
  std::fflush(options_.out);
}

}  // namespace vlpar::obs
