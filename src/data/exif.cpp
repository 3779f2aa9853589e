// EXIF orientation: a bounds-checked reader of tag 0x0112 in IFD0 of a TIFF-structured EXIF block, and the eight
// PIL.ImageOps.exif_transpose transforms. See include/vlpar/data/image_decode.hpp.
#include <cstring>

#include "vlpar/data/image_decode.hpp"

namespace vlpar::data {

namespace {

// TIFF header: "II" (little-endian) or "MM" (big-endian), the magic 42, the u32 offset of IFD0 (from the TIFF start).
// IFD: u16 entry count, then 12-byte entries {u16 tag, u16 type, u32 count, 4-byte value or offset}.
struct TiffReader {
  std::span<const uint8_t> b;
  bool little = true;
  bool has(size_t off, size_t n) const { return off <= b.size() && n <= b.size() - off; }
  uint32_t u16(size_t off) const {
    return little ? uint32_t(b[off]) | uint32_t(b[off + 1]) << 8 : uint32_t(b[off]) << 8 | uint32_t(b[off + 1]);
  }
  uint32_t u32(size_t off) const {
    return little ? u16(off) | u16(off + 2) << 16 : u16(off) << 16 | u16(off + 2);
  }
};

constexpr uint32_t kTagOrientation = 0x0112;
constexpr uint32_t kTypeByte = 1, kTypeShort = 3, kTypeLong = 4, kTypeSShort = 8, kTypeSLong = 9;

}  // namespace

int exif_orientation_from_tiff(std::span<const uint8_t> tiff) {
  TiffReader r{tiff};
  if (!r.has(0, 8)) return 1;
  if (tiff[0] == 'I' && tiff[1] == 'I') {
    r.little = true;
  } else if (tiff[0] == 'M' && tiff[1] == 'M') {
    r.little = false;
  } else {
    return 1;
  }
  if (r.u16(2) != 42) return 1;
  const size_t ifd = r.u32(4);
  if (!r.has(ifd, 2)) return 1;
  const size_t count = r.u16(ifd);
  for (size_t i = 0; i < count; ++i) {
    const size_t e = ifd + 2 + 12 * i;
    if (!r.has(e, 12)) return 1;  // the IFD runs past the block: malformed
    if (r.u16(e) != kTagOrientation) continue;
    const uint32_t type = r.u16(e + 2);
    const uint32_t n = r.u32(e + 4);
    if (n != 1) return 1;  // PIL reads a tuple here and ignores it
    uint32_t v = 0;
    switch (type) {
      case kTypeByte: v = tiff[e + 8]; break;
      case kTypeShort:
      case kTypeSShort: v = r.u16(e + 8); break;
      case kTypeLong:
      case kTypeSLong: v = r.u32(e + 8); break;
      default: return 1;
    }
    return v >= 1 && v <= 8 ? static_cast<int>(v) : 1;
  }
  return 1;
}

Image apply_exif_orientation(const Image& image, int orientation) {
  if (orientation < 2 || orientation > 8) return image;
  const int64_t W = image.width, H = image.height;
  const bool swap = orientation >= 5;
  Image out = Image::zeros(swap ? H : W, swap ? W : H);
  // For each output pixel (x', y') the source pixel (sx, sy), as PIL's Image.transpose methods define them.
  for (int64_t yo = 0; yo < out.height; ++yo) {
    uint8_t* dst = out.row(yo);
    for (int64_t xo = 0; xo < out.width; ++xo) {
      int64_t sx = 0, sy = 0;
      switch (orientation) {
        case 2: sx = W - 1 - xo; sy = yo; break;           // FLIP_LEFT_RIGHT
        case 3: sx = W - 1 - xo; sy = H - 1 - yo; break;   // ROTATE_180
        case 4: sx = xo; sy = H - 1 - yo; break;           // FLIP_TOP_BOTTOM
        case 5: sx = yo; sy = xo; break;                   // TRANSPOSE
        case 6: sx = yo; sy = H - 1 - xo; break;           // ROTATE_270 (90° clockwise)
        case 7: sx = W - 1 - yo; sy = H - 1 - xo; break;   // TRANSVERSE
        default: sx = W - 1 - yo; sy = xo; break;          // 8: ROTATE_90 (90° counter-clockwise)
      }
      std::memcpy(dst + xo * 3, image.row(sy) + sx * 3, 3);
    }
  }
  return out;
}

}  // namespace vlpar::data
