#pragma once
// Renders the loss and throughput curves of a metrics.jsonl (jsonl_writer.hpp) into a PNG, with no plotting
// library: a small RGB canvas, 2-px lines, and a built-in 5x7 bitmap font (upper-case letters, digits and the
// punctuation tick labels need) for titles and tick labels.
// Layout (top to bottom): title line; panel 1 = loss (raw, light) with an optional smoothed overlay (dark; trailing
// exponential moving average, debiased like TensorBoard's smoothing); panel 2 = throughput (`throughput_key`,
// default tokens_per_s). Both share the x axis (step). Ticks at 1/2/5 x 10^k ("nice numbers"); the y range is the
// data range padded by 5% (a flat series gets +-1 or +-5% around its value).
// Entries whose value is null/non-finite/absent are skipped; a step that appears twice keeps its last entry; lines
// that are not JSON objects with an integer "step" are skipped. A file with no loss points is an error.
// Test: tests/unit/test_obs_plot.cpp (decodes the PNG with libpng and checks curve pixels for a linear series).
#include <cstdint>
#include <string>

#include "vlpar/core/status.hpp"

namespace vlpar::obs {

struct Rgb {
  uint8_t r = 0, g = 0, b = 0;
  bool operator==(const Rgb&) const = default;
};

struct PlotOptions {
  int width = 960;                      // pixels, >= 240
  int height = 720;                     // pixels, >= 240
  std::string title;                    // default: the file name of the jsonl
  std::string loss_key = "loss";
  std::string throughput_key = "tokens_per_s";
  double smoothing = 0.6;               // EMA weight of the past in [0, 1); 0 = no smoothed overlay
  Rgb background{255, 255, 255};
  Rgb axis{60, 60, 60};
  Rgb grid{228, 228, 228};
  Rgb text{30, 30, 30};
  Rgb loss_raw{158, 196, 230};          // light blue
  Rgb loss_smooth{31, 100, 180};        // dark blue
  Rgb throughput{214, 110, 30};         // orange
};

/// Where a panel was drawn, so tests (and callers overlaying marks) can map data to pixels.
struct PlotPanel {
  int x0 = 0, y0 = 0, x1 = 0, y1 = 0;   // data area in pixels, inclusive; y0 is the top row
  int fx0 = 0, fy0 = 0, fx1 = 0, fy1 = 0;  // the frame drawn around it (kInset px outside the data area)
  double xmin = 0, xmax = 1;            // data range mapped to [x0, x1]
  double ymin = 0, ymax = 1;            // data range mapped to [y1, y0]
  int64_t points = 0;                   // data points drawn
  /// Pixel column/row of a data coordinate (rounded to nearest).
  int px(double x) const;
  int py(double y) const;
};

/// Gap between a panel's frame and its data area, so points at the ends of the range are not hidden by the frame.
constexpr int kPlotInset = 6;

struct PlotInfo {
  PlotPanel loss;
  PlotPanel throughput;                 // points == 0 when the file has no throughput values
};

/// @brief Reads `jsonl`, renders the figure and writes `png` atomically. Errors name the file and the defect.
Status plot_metrics_png(const std::string& jsonl, const std::string& png, const PlotOptions& options,
                        PlotInfo* info = nullptr);

}  // namespace vlpar::obs
