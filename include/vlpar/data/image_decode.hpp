#pragma once
// Image decoding for the data pipeline (issue 5, item 2): JPEG through libjpeg-turbo's libjpeg API, PNG through
// libpng, always to 8-bit RGB (image.hpp), with the EXIF orientation applied as PIL.ImageOps.exif_transpose does.
//
// Conversions (PIL's Image.convert("RGB") unless noted, so the pixels equal what HF's processors see):
//   JPEG  YCbCr / RGB                      -> RGB (libjpeg ISLOW IDCT + fancy upsampling, PIL's defaults)
//         grayscale                        -> R = G = B = Y
//         CMYK / YCCK (4 components)       -> ink values (inverted first when an Adobe APP14 marker is present:
//                                             Adobe writers store 255 − ink), then
//                                             R = (255−K) − MULDIV255(C, 255−K) (PIL's cmyk2rgb), same for G, B.
//                                             PIL always assumes Adobe polarity; for the rare 4-component file
//                                             WITHOUT the marker this decoder reads the data as plain ink (libjpeg's
//                                             convention), so it differs from PIL there on purpose.
//   PNG   palette (tRNS ignored), gray 1/2/4/8 bit, gray+alpha, RGB, RGBA, all interlaced or not
//                                          -> RGB, alpha dropped (not composited: PIL's RGBA -> RGB drops it)
//         16-bit channels                  -> the high byte (PIL does this for RGB/RGBA/LA; for 16-bit GRAY PIL
//                                             clips the value to 255 instead, turning most pixels white: this
//                                             decoder takes the high byte there too, on purpose)
//   EXIF  JPEG: the first APP1 segment that starts with "Exif\0\0"; PNG: the eXIf chunk. Tag 0x0112 of IFD0,
//         both byte orders ("II"/"MM"), types BYTE/SHORT/LONG; values 1..8 are applied, anything else
//         (absent, 0, 9, malformed TIFF) means 1 = as stored.
//
// Errors (never a crash, an abort or a hang; the Status message starts with "decode_image('<key>')", so the
// caller can count the sample and skip it):
//   kInvalidArgument  corrupt or truncated data: libjpeg errors and the data-corruption warnings (premature end
//                     of file, bad Huffman/arithmetic code, unexpected marker, lost sync), libpng errors (bad
//                     CRC of a critical chunk, bad zlib stream, not enough image data, short file), an image
//                     larger than DecodeOptions::max_pixels, a progressive JPEG with more than max_jpeg_scans scans
//   kNotSupported     not JPEG or PNG (GIF, WebP, BMP, ... are named), 12-bit JPEG, 2-component JPEG
// Harmless libjpeg warnings (extraneous bytes before a marker, odd progression, unknown JFIF version or Adobe
// transform, bad ICC chunk) and all libpng warnings are ignored, as PIL does.
// Test: tests/unit/test_image_decode.cpp (PIL-decoded fixtures from tools/golden/make_processor_fixture.py, the
// eight orientations in both byte orders, seeded fuzzing by byte flips and truncations).
#include <cstdint>
#include <span>
#include <string_view>

#include "vlpar/core/status.hpp"
#include "vlpar/data/image.hpp"

namespace vlpar::data {

enum class ImageFormat { kUnknown, kJpeg, kPng };

/// @brief The container format from the leading magic bytes (JPEG: FF D8 FF, PNG: the 8-byte signature).
ImageFormat sniff_image_format(std::span<const uint8_t> bytes);

struct DecodeOptions {
  bool apply_exif_orientation = true;  // false: pixels as stored
  int64_t max_pixels = 178956970;      // W·H limit checked from the header before any allocation
                                       // (PIL's DecompressionBombError threshold, 2 × 89478485)
  int max_jpeg_scans = 1000;           // progressive JPEGs with more scans are rejected (scan-count bombs)
};

/// @brief Decodes a JPEG or PNG file held in memory to 8-bit RGB (see the file comment for conversions).
/// @param bytes   the encoded file
/// @param key     the sample key or file name, used only in error messages
Result<Image> decode_image(std::span<const uint8_t> bytes, std::string_view key, const DecodeOptions& options = {});

/// @brief The EXIF orientation (1..8) from a TIFF-structured EXIF block (the bytes after "Exif\0\0" of a JPEG
/// APP1 segment, or a PNG eXIf chunk): tag 0x0112 of IFD0. Returns 1 when the block is malformed, the tag is
/// absent or its value is outside 1..8. Never reads outside `tiff`.
int exif_orientation_from_tiff(std::span<const uint8_t> tiff);

/// @brief The image as PIL.ImageOps.exif_transpose shows it for EXIF orientation o:
///   1 as is, 2 mirror left-right, 3 rotate 180°, 4 mirror top-bottom, 5 transpose (swap x and y),
///   6 rotate 90° clockwise, 7 transverse (transpose + rotate 180°), 8 rotate 90° counter-clockwise.
/// Orientations 5..8 swap width and height. Any other o returns a copy.
Image apply_exif_orientation(const Image& image, int orientation);

}  // namespace vlpar::data
