#pragma once
// An 8-bit RGB image in memory: what the decoders (image_decode.hpp) produce and the Qwen image processor
// (image_processor.hpp) consumes. Rows top to bottom, pixels left to right, channels R, G, B interleaved.
// Test: tests/unit/test_image_decode.cpp, tests/unit/test_image_processor.cpp.
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "vlpar/core/status.hpp"

namespace vlpar::data {

struct Image {
  int64_t width = 0;          // W (pixels)
  int64_t height = 0;         // H (pixels)
  std::vector<uint8_t> rgb;   // [H, W, 3] row-major, R G B interleaved

  /// @brief A black W×H image.
  static Image zeros(int64_t width, int64_t height) {
    Image im;
    im.width = width;
    im.height = height;
    im.rgb.assign(static_cast<size_t>(width * height * 3), 0);
    return im;
  }
  int64_t row_bytes() const { return width * 3; }
  uint8_t* row(int64_t y) { return rgb.data() + y * row_bytes(); }
  const uint8_t* row(int64_t y) const { return rgb.data() + y * row_bytes(); }
  /// Channel c (0 = R) of pixel (x, y).
  uint8_t at(int64_t x, int64_t y, int c) const { return rgb[static_cast<size_t>((y * width + x) * 3 + c)]; }

  /// @brief Checks width, height >= 1 and rgb.size() == W·H·3; the message names the image (`what`).
  Status validate(std::string_view what) const {
    VLPAR_CHECK(width >= 1 && height >= 1, "{}: image size {}x{} (WxH) is empty", what, width, height);
    VLPAR_CHECK(rgb.size() == static_cast<size_t>(width * height * 3),
                "{}: image {}x{} needs {} RGB bytes, has {}", what, width, height, width * height * 3, rgb.size());
    return Status::Ok();
  }
};

}  // namespace vlpar::data
