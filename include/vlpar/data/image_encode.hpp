#pragma once
// Image encoding (the inverse of image_decode.hpp): 8-bit RGB (image.hpp) to JPEG through libjpeg-turbo's
// compress API and to PNG through libpng, in memory. Used by the demo-data generator and the shard converter
// (`vlpar-data make-demo`, tools/vlpar_data/), and by tests that need encoded files.
//
//   JPEG  baseline (or progressive) YCbCr, ISLOW forward DCT, the IJG quality scaling of the standard tables,
//         chroma 4:2:0 / 4:2:2 / 4:4:4, optimised Huffman tables, a JFIF APP0 marker; no EXIF (orientation 1).
//         Deterministic: the same image and options give the same bytes.
//   PNG   8-bit RGB (colour type 2), not interlaced, zlib level 0..9, adaptive filters: lossless.
//
// Round trip (tests/unit/test_image_encode.cpp): decode_image(encode_png(im)) == im bit for bit;
// decode_image(encode_jpeg(im, {quality 100, 4:4:4})) has RMS error <= 1.0 level (PSNR >= 48.1 dB): with
// quality 100 every quantiser step is 1, so the only losses are coefficient rounding (uniform, RMS 1/sqrt(12)
// = 0.29 per Y/Cb/Cr sample; the DCT is orthonormal so the pixel RMS is the same), the 8-bit YCbCr rounding
// on both sides (RMS 0.29 each) and the inverse colour transform, whose largest row (R = Y + 1.402 Cr) carries
// the Y and Cr errors as sqrt(1 + 1.402²) = 1.72×: RMS <= 1.72·sqrt(0.29² + 0.29²) + 0.29 = 0.99.
// Errors are a Status naming the image and the defect (empty or inconsistent image, quality outside 1..100,
// a library failure), never a crash.
#include <cstdint>
#include <string_view>
#include <vector>

#include "vlpar/core/status.hpp"
#include "vlpar/data/image.hpp"

namespace vlpar::data {

enum class ChromaSubsampling { k420, k422, k444 };

struct JpegEncodeOptions {
  int quality = 90;                                    // 1..100, IJG scaling of the standard tables
  ChromaSubsampling subsampling = ChromaSubsampling::k420;
  bool progressive = false;
  bool optimize_huffman = true;                        // two-pass optimal Huffman tables (smaller files)
};

struct PngEncodeOptions {
  int compression_level = 6;                           // zlib level 0..9
};

/// @brief Encodes an RGB image as a JPEG file.
/// @param image  W×H RGB (validated: non-empty, rgb.size() == W·H·3, W, H <= 65500, the JPEG limit)
/// @param what   names the image in error messages (a sample key or file name)
Result<std::vector<uint8_t>> encode_jpeg(const Image& image, const JpegEncodeOptions& options = {},
                                         std::string_view what = "image");

/// @brief Encodes an RGB image as a PNG file (lossless; W, H < 2^31).
Result<std::vector<uint8_t>> encode_png(const Image& image, const PngEncodeOptions& options = {},
                                        std::string_view what = "image");

}  // namespace vlpar::data
