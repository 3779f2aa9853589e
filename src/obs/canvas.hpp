#pragma once
// Private to src/obs: a minimal RGB raster (8-bit, row-major, 3 bytes per pixel) with clipped pixels, 2-px lines
// and text in a built-in 5x7 bitmap font, used by plot.cpp. Not installed, not public API.
#include <cstdint>
#include <string_view>
#include <vector>

#include "vlpar/obs/plot.hpp"  // Rgb

namespace vlpar::obs::detail {

struct ClipRect {
  int x0, y0, x1, y1;  // inclusive
};

class Canvas {
 public:
  Canvas(int width, int height, Rgb background);
  int width() const { return w_; }
  int height() const { return h_; }
  const std::vector<uint8_t>& pixels() const { return px_; }  // [height][width][3]

  void set(int x, int y, Rgb c);                        // ignored outside the canvas
  void set_clipped(int x, int y, Rgb c, const ClipRect& clip);
  void fill_rect(int x0, int y0, int x1, int y1, Rgb c);  // inclusive corners
  void hline(int x0, int x1, int y, Rgb c);
  void vline(int x, int y0, int y1, Rgb c);
  /// A line 2 px wide from (x0, y0) to (x1, y1) (Bresenham; each point stamps a 2x2 block whose top-left is the
  /// point, so the exact end points are always coloured), clipped to `clip`.
  void thick_line(int x0, int y0, int x1, int y1, Rgb c, const ClipRect& clip);
  /// Text with its top-left corner at (x, y); each font pixel becomes a scale x scale block. Lower-case letters
  /// are drawn as upper case; characters without a glyph as '?'.
  void text(int x, int y, std::string_view s, int scale, Rgb c);
  static int text_width(std::string_view s, int scale);   // advance 6 font pixels per character, minus the gap
  static int text_height(int scale) { return 7 * scale; }

 private:
  int w_, h_;
  std::vector<uint8_t> px_;
};

}  // namespace vlpar::obs::detail
