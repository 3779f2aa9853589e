// libFuzzer target: decode_image (JPEG through libjpeg-turbo, PNG through libpng, EXIF orientation, palette,
// 16-bit, alpha, grey) over arbitrary bytes, with a pixel limit small enough for fast runs. A decoded image must
// have the size it claims.
#include <cstdint>
#include <span>

#include "fuzz_util.hpp"
#include "vlpar/data/image_decode.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  vlpar::data::DecodeOptions options;
  options.max_pixels = int64_t{1} << 22;
  options.max_jpeg_scans = 100;
  auto image = vlpar::data::decode_image(std::span<const uint8_t>(data, size), "fuzz", options);
  if (!image.ok()) return 0;
  const vlpar::data::Image& im = image.value();
  if (im.width <= 0 || im.height <= 0 || im.width * im.height > options.max_pixels ||
      static_cast<int64_t>(im.rgb.size()) != im.width * im.height * 3)
    vlpar::fuzz::violated();
  return 0;
}
