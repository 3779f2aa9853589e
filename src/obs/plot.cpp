// Loss and throughput curves from metrics.jsonl to PNG. See include/vlpar/obs/plot.hpp.
#include "vlpar/obs/plot.hpp"

#include <png.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <vector>

#include "canvas.hpp"
#include "vlpar/io/safetensors.hpp"  // atomic_write_file
#include "vlpar/obs/metrics_line.hpp"  // group_thousands

namespace vlpar::obs {

int PlotPanel::px(double x) const {
  const double t = xmax > xmin ? (x - xmin) / (xmax - xmin) : 0.5;
  return x0 + static_cast<int>(std::lround(t * (x1 - x0)));
}
int PlotPanel::py(double y) const {
  const double t = ymax > ymin ? (y - ymin) / (ymax - ymin) : 0.5;
  return y1 - static_cast<int>(std::lround(t * (y1 - y0)));
}

namespace {

using detail::Canvas;
using detail::ClipRect;
using Series = std::map<int64_t, double>;  // step -> value; the last entry for a step wins

constexpr int kFontScale = 2;      // tick labels and legend: 10x14 px glyphs
constexpr int kTitleScale = 3;     // figure title
constexpr int kLeftMargin = 110;   // room for 7-character y tick labels at scale 2
constexpr int kRightMargin = 24;
constexpr int kTopMargin = 48;     // figure title
constexpr int kPanelTitle = 30;    // panel title above each panel
constexpr int kBottomMargin = 56;  // x tick labels + "STEP"
constexpr int kPanelGap = 44;      // x tick labels of the upper panel

struct Data {
  Series loss, throughput;
  int64_t lines = 0, skipped = 0;
};

Result<Data> read_series(const std::string& jsonl, const PlotOptions& opt) {
  std::ifstream in(jsonl, std::ios::binary);
  VLPAR_CHECK_CODE(static_cast<bool>(in), StatusCode::kIoError, "plot: cannot open '{}': {}", jsonl,
                   std::strerror(errno));
  Data d;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    ++d.lines;
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || !j.contains("step") || !j["step"].is_number_integer()) {
      ++d.skipped;
      continue;
    }
    const auto step = j["step"].get<int64_t>();
    auto take = [&](const std::string& key, Series& s) {
      auto it = j.find(key);
      if (it == j.end() || !it->is_number()) return;
      const double v = it->get<double>();
      if (std::isfinite(v)) s[step] = v;
    };
    take(opt.loss_key, d.loss);
    take(opt.throughput_key, d.throughput);
  }
  VLPAR_CHECK(!d.loss.empty(), "plot: '{}' has no finite '{}' values ({} lines, {} without an integer step)", jsonl,
              opt.loss_key, d.lines, d.skipped);
  return d;
}

// 1, 2 or 5 times a power of ten, close to range / target.
double nice_step(double range, int target) {
  const double raw = range / std::max(target, 1);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double f = raw / mag;
  return (f < 1.5 ? 1.0 : f < 3.5 ? 2.0 : f < 7.5 ? 5.0 : 10.0) * mag;
}

std::vector<double> ticks(double lo, double hi, double step) {
  std::vector<double> t;
  for (double k = std::ceil(lo / step - 1e-9); k * step <= hi + 1e-9 * step && t.size() < 64; k += 1.0)
    t.push_back(std::fabs(k) < 0.5 ? 0.0 : k * step);  // no "-0"
  return t;
}

// Tick label: K/M suffixes for large values, as many decimals as the tick step needs.
std::string tick_label(double v, double step, double max_abs) {
  if (step < 1e-3 && max_abs < 1e-2) return fmt::format("{:.1e}", v);
  double scale = 1.0;
  const char* suffix = "";
  if (max_abs >= 1e6) scale = 1e6, suffix = "M";
  else if (max_abs >= 1e4) scale = 1e3, suffix = "K";
  const int decimals = std::clamp(static_cast<int>(std::ceil(-std::log10(step / scale) - 1e-9)), 0, 6);
  return fmt::format("{:.{}f}{}", v / scale, decimals, suffix);
}

void y_range(const Series& a, const Series* b, double& lo, double& hi) {
  lo = INFINITY;
  hi = -INFINITY;
  for (const Series* s : {&a, b}) {
    if (s == nullptr) continue;
    for (const auto& [k, v] : *s) lo = std::min(lo, v), hi = std::max(hi, v);
  }
  if (!(hi > lo)) {  // flat or a single point
    const double pad = lo == 0.0 ? 1.0 : 0.05 * std::fabs(lo);
    lo -= pad;
    hi += pad;
    return;
  }
  const double pad = 0.05 * (hi - lo);
  lo -= pad;
  hi += pad;
}

// The frame, grid, ticks and tick labels of one panel whose frame is (x0, y0)-(x1, y1); returns the panel with its
// data area (inset by kPlotInset) and data ranges.
PlotPanel draw_axes(Canvas& cv, const PlotOptions& opt, int x0, int y0, int x1, int y1, double xmin, double xmax,
                    double ymin, double ymax, const std::string& title) {
  PlotPanel p;
  p.fx0 = x0, p.fy0 = y0, p.fx1 = x1, p.fy1 = y1;
  p.x0 = x0 + kPlotInset, p.y0 = y0 + kPlotInset, p.x1 = x1 - kPlotInset, p.y1 = y1 - kPlotInset;
  p.xmin = xmin, p.xmax = xmax, p.ymin = ymin, p.ymax = ymax;
  const double xstep = nice_step(xmax - xmin, std::max(2, (x1 - x0) / 110));
  const double ystep = nice_step(ymax - ymin, std::max(2, (y1 - y0) / 50));
  const std::vector<double> xt = ticks(xmin, xmax, xstep), yt = ticks(ymin, ymax, ystep);
  const double ymax_abs = std::max(std::fabs(ymin), std::fabs(ymax));
  const double xmax_abs = std::max(std::fabs(xmin), std::fabs(xmax));
  for (double y : yt) {
    const int py = p.py(y);
    cv.hline(x0 + 1, x1 - 1, py, opt.grid);
    cv.hline(x0 - 5, x0 - 1, py, opt.axis);
    const std::string s = tick_label(y, ystep, ymax_abs);
    cv.text(x0 - 9 - Canvas::text_width(s, kFontScale), py - Canvas::text_height(kFontScale) / 2, s, kFontScale,
            opt.text);
  }
  for (double x : xt) {
    const int px = p.px(x);
    cv.vline(px, y0 + 1, y1 - 1, opt.grid);
    cv.vline(px, y1 + 1, y1 + 5, opt.axis);
    const std::string s = tick_label(x, xstep, xmax_abs);
    cv.text(px - Canvas::text_width(s, kFontScale) / 2, y1 + 9, s, kFontScale, opt.text);
  }
  cv.hline(x0, x1, y0, opt.axis);
  cv.hline(x0, x1, y1, opt.axis);
  cv.vline(x0, y0, y1, opt.axis);
  cv.vline(x1, y0, y1, opt.axis);
  cv.text(x0, y0 - 8 - Canvas::text_height(kFontScale), title, kFontScale, opt.text);
  return p;
}

void draw_series(Canvas& cv, PlotPanel& p, const Series& s, Rgb color) {
  // Clip one pixel inside the frame so the curve never paints over it.
  const ClipRect clip{p.fx0 + 1, p.fy0 + 1, p.fx1 - 1, p.fy1 - 1};
  bool first = true;
  int lx = 0, ly = 0;
  for (const auto& [step, v] : s) {
    const int x = p.px(static_cast<double>(step)), y = p.py(v);
    if (first) cv.thick_line(x, y, x, y, color, clip);
    else cv.thick_line(lx, ly, x, y, color, clip);
    lx = x, ly = y, first = false;
  }
  p.points = static_cast<int64_t>(s.size());
}

// TensorBoard-style smoothing: EMA with weight w on the past, divided by (1 - w^n) so early values are not
// pulled toward 0.
Series smooth(const Series& s, double w) {
  Series out;
  double acc = 0.0;
  int64_t n = 0;
  for (const auto& [step, v] : s) {
    acc = acc * w + (1.0 - w) * v;
    ++n;
    out[step] = acc / (1.0 - std::pow(w, static_cast<double>(n)));
  }
  return out;
}

// "tokens_per_s" -> "tokens/s", "mfu_pct" -> "mfu %", other underscores -> spaces.
std::string display_name(std::string key) {
  auto replace = [&key](const std::string& from, const std::string& to) {
    for (size_t pos = key.find(from); pos != std::string::npos; pos = key.find(from, pos + to.size()))
      key.replace(pos, from.size(), to);
  };
  replace("_per_s", "/s");
  replace("_pct", " %");
  replace("_", " ");
  return key;
}

std::string panel_title(const std::string& key, const Series& s) {
  if (s.empty()) return display_name(key) + " (no data)";
  const double v = s.rbegin()->second;
  const std::string value = std::fabs(v) >= 1000.0 ? group_thousands(v) : fmt::format("{:.4g}", v);
  return fmt::format("{}   last {} at step {}", display_name(key), value, s.rbegin()->first);
}

void legend_entry(Canvas& cv, int& x, int y, Rgb color, const std::string& label, const PlotOptions& opt) {
  const ClipRect all{0, 0, cv.width() - 1, cv.height() - 1};
  const int mid = y + Canvas::text_height(kFontScale) / 2;
  cv.thick_line(x, mid, x + 22, mid, color, all);
  cv.text(x + 30, y, label, kFontScale, opt.text);
  x += 30 + Canvas::text_width(label, kFontScale) + 22;
}

Status write_png(const Canvas& cv, const std::string& path) {
  png_image img;
  std::memset(&img, 0, sizeof(img));
  img.version = PNG_IMAGE_VERSION;
  img.width = static_cast<png_uint_32>(cv.width());
  img.height = static_cast<png_uint_32>(cv.height());
  img.format = PNG_FORMAT_RGB;
  png_alloc_size_t size = 0;
  if (!png_image_write_to_memory(&img, nullptr, &size, 0, cv.pixels().data(), 0, nullptr)) {
    const std::string msg = img.message;
    png_image_free(&img);
    return VLPAR_STATUS(StatusCode::kInternal, "plot: libpng cannot encode '{}': {}", path, msg);
  }
  std::vector<std::byte> buf(size);
  if (!png_image_write_to_memory(&img, buf.data(), &size, 0, cv.pixels().data(), 0, nullptr)) {
    const std::string msg = img.message;
    png_image_free(&img);
    return VLPAR_STATUS(StatusCode::kInternal, "plot: libpng cannot encode '{}': {}", path, msg);
  }
  png_image_free(&img);
  const std::span<const std::byte> piece(buf.data(), size);
  return io::atomic_write_file(path, std::span<const std::span<const std::byte>>(&piece, 1));
}

}  // namespace

Status plot_metrics_png(const std::string& jsonl, const std::string& png, const PlotOptions& opt, PlotInfo* info) {
  VLPAR_CHECK(opt.width >= 240 && opt.width <= 16384, "plot: width {} is outside [240, 16384]", opt.width);
  VLPAR_CHECK(opt.height >= 240 && opt.height <= 16384, "plot: height {} is outside [240, 16384]", opt.height);
  VLPAR_CHECK(opt.smoothing >= 0.0 && opt.smoothing < 1.0, "plot: smoothing {} is outside [0, 1)", opt.smoothing);
  VLPAR_ASSIGN_OR_RETURN(Data d, read_series(jsonl, opt));

  // Shared x range over both series.
  double xmin = static_cast<double>(d.loss.begin()->first), xmax = static_cast<double>(d.loss.rbegin()->first);
  if (!d.throughput.empty()) {
    xmin = std::min(xmin, static_cast<double>(d.throughput.begin()->first));
    xmax = std::max(xmax, static_cast<double>(d.throughput.rbegin()->first));
  }
  if (!(xmax > xmin)) xmin -= 1.0, xmax += 1.0;

  Canvas cv(opt.width, opt.height, opt.background);
  const std::string title =
      opt.title.empty() ? std::filesystem::path(jsonl).filename().string() : opt.title;
  cv.text((opt.width - Canvas::text_width(title, kTitleScale)) / 2, 12, title, kTitleScale, opt.text);

  const int x0 = kLeftMargin, x1 = opt.width - 1 - kRightMargin;
  const int avail = opt.height - kTopMargin - kBottomMargin - kPanelGap - 2 * kPanelTitle;
  const int panel_h = avail / 2;
  const int ly0 = kTopMargin + kPanelTitle, ly1 = ly0 + panel_h;
  const int ty0 = ly1 + kPanelGap + kPanelTitle, ty1 = ty0 + panel_h;

  const Series smoothed = opt.smoothing > 0.0 ? smooth(d.loss, opt.smoothing) : Series{};
  double lo = 0, hi = 0;
  y_range(d.loss, nullptr, lo, hi);  // the smoothed curve lies within the raw range
  PlotPanel loss = draw_axes(cv, opt, x0, ly0, x1, ly1, xmin, xmax, lo, hi, panel_title(opt.loss_key, d.loss));
  draw_series(cv, loss, d.loss, opt.loss_raw);
  if (!smoothed.empty()) {
    PlotPanel tmp = loss;
    draw_series(cv, tmp, smoothed, opt.loss_smooth);
  }
  {  // legend, top right of the loss panel title line
    int lx = x1 - (smoothed.empty() ? 110 : 290);
    const int lyy = ly0 - 8 - Canvas::text_height(kFontScale);
    legend_entry(cv, lx, lyy, opt.loss_raw, "raw", opt);
    if (!smoothed.empty()) legend_entry(cv, lx, lyy, opt.loss_smooth, fmt::format("ema {:.2f}", opt.smoothing), opt);
  }

  PlotPanel thr;
  if (!d.throughput.empty()) {
    y_range(d.throughput, nullptr, lo, hi);
    thr = draw_axes(cv, opt, x0, ty0, x1, ty1, xmin, xmax, lo, hi, panel_title(opt.throughput_key, d.throughput));
    draw_series(cv, thr, d.throughput, opt.throughput);
  } else {
    thr = draw_axes(cv, opt, x0, ty0, x1, ty1, xmin, xmax, 0.0, 1.0, panel_title(opt.throughput_key, d.throughput));
    thr.points = 0;
  }
  const std::string xlabel = "step";
  cv.text((x0 + x1 - Canvas::text_width(xlabel, kFontScale)) / 2, opt.height - 4 - Canvas::text_height(kFontScale),
          xlabel, kFontScale, opt.text);

  VLPAR_RETURN_IF_ERROR(write_png(cv, png));
  if (info != nullptr) {
    info->loss = loss;
    info->throughput = thr;
  }
  return Status::Ok();
}

}  // namespace vlpar::obs
