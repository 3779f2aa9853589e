// JPEG (libjpeg-turbo, libjpeg API) and PNG (libpng) decoding to 8-bit RGB. See include/vlpar/data/image_decode.hpp.
//
// Both libraries report fatal errors through a callback that must not return; we longjmp back to a setjmp in
// the decoding function. To keep that well-defined in C++, the functions that call setjmp create no object
// with a destructor after the setjmp and keep every C++ object they write to (the output image, the row
// pointers) in caller-owned storage, reached through pointers.
#include "vlpar/data/image_decode.hpp"

#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <new>
#include <vector>

// clang-format off
#include <jpeglib.h>   // needs <cstdio> first
#include <jerror.h>
#include <png.h>
// clang-format on

namespace vlpar::data {

namespace {

enum class Outcome { kOk, kCorrupt, kUnsupported, kTooLarge, kOutOfMemory };

// ---- JPEG ---------------------------------------------------------------------------------------------------

struct JpegError {
  jpeg_error_mgr pub;  // first member: libjpeg hands us a jpeg_error_mgr*
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX + 64];
  Outcome outcome;
};

struct JpegProgress {
  jpeg_progress_mgr pub;  // first member
  int max_scans;
};

[[noreturn]] void jpeg_fail(j_common_ptr cinfo, Outcome outcome) {
  auto* e = reinterpret_cast<JpegError*>(cinfo->err);
  e->outcome = outcome;
  std::longjmp(e->jump, 1);
}

void jpeg_on_error(j_common_ptr cinfo) {
  auto* e = reinterpret_cast<JpegError*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, e->message);
  const int code = cinfo->err->msg_code;
  const bool unsupported = code == JERR_BAD_PRECISION || code == JERR_CONVERSION_NOTIMPL ||
                           code == JERR_NOT_COMPILED || code == JERR_BAD_J_COLORSPACE;
  jpeg_fail(cinfo, unsupported ? Outcome::kUnsupported : Outcome::kCorrupt);
}

// Warnings (msg_level -1) that mean the pixel data is damaged become errors; the rest are ignored like PIL does.
void jpeg_on_message(j_common_ptr cinfo, int msg_level) {
  if (msg_level >= 0) return;  // trace messages
  switch (cinfo->err->msg_code) {
    case JWRN_JPEG_EOF:         // premature end of data: truncated file
    case JWRN_HIT_MARKER:       // corrupt data: premature end of data segment
    case JWRN_HUFF_BAD_CODE:    // corrupt data: bad Huffman code
    case JWRN_ARITH_BAD_CODE:   // corrupt data: bad arithmetic code
    case JWRN_MUST_RESYNC:      // corrupt data: restart marker lost
    case JWRN_NOT_SEQUENTIAL: {  // scan data out of order
      auto* e = reinterpret_cast<JpegError*>(cinfo->err);
      (*cinfo->err->format_message)(cinfo, e->message);
      jpeg_fail(cinfo, Outcome::kCorrupt);
    }
    default: return;  // extraneous bytes, odd progression, JFIF version, Adobe transform, ICC
  }
}

void jpeg_on_progress(j_common_ptr cinfo) {
  if (!cinfo->is_decompressor) return;
  const auto* d = reinterpret_cast<j_decompress_ptr>(cinfo);
  const auto* p = reinterpret_cast<const JpegProgress*>(cinfo->progress);
  if (d->input_scan_number > p->max_scans) {
    auto* e = reinterpret_cast<JpegError*>(cinfo->err);
    std::snprintf(e->message, sizeof(e->message), "progressive JPEG with more than %d scans", p->max_scans);
    jpeg_fail(cinfo, Outcome::kCorrupt);
  }
}

struct JpegResult {
  Image* image;            // written
  int orientation = 1;     // EXIF orientation found in APP1
  int components = 0;      // for messages
  int color_space = 0;     // J_COLOR_SPACE of the file
  int64_t width = 0, height = 0;
};

// PIL's MULDIV255(a, b): a·b/255 rounded, exact for 8-bit a, b.
inline uint8_t muldiv255(uint32_t a, uint32_t b) {
  const uint32_t t = a * b + 128;
  return static_cast<uint8_t>(((t >> 8) + t) >> 8);
}

// Ink values (0 = no ink) -> RGB as PIL's cmyk2rgb: R = (255−K) − MULDIV255(C, 255−K).
void cmyk_row_to_rgb(const uint8_t* cmyk, uint8_t* rgb, int64_t width, bool inverted) {
  const uint8_t flip = inverted ? 255 : 0;
  for (int64_t x = 0; x < width; ++x) {
    const uint32_t nk = 255u - uint32_t(cmyk[4 * x + 3] ^ flip);
    for (int c = 0; c < 3; ++c) rgb[3 * x + c] = static_cast<uint8_t>(nk - muldiv255(cmyk[4 * x + c] ^ flip, nk));
  }
}

Outcome decode_jpeg_impl(const uint8_t* data, size_t size, const DecodeOptions* opt, JpegResult* res,
                         JpegError* err) {
  jpeg_decompress_struct cinfo;
  JpegProgress progress;
  cinfo.err = jpeg_std_error(&err->pub);
  err->pub.error_exit = jpeg_on_error;
  err->pub.emit_message = jpeg_on_message;
  err->message[0] = '\0';
  err->outcome = Outcome::kCorrupt;
  if (setjmp(err->jump)) {
    jpeg_destroy_decompress(&cinfo);
    return err->outcome;
  }
  jpeg_create_decompress(&cinfo);
  progress.pub.progress_monitor = jpeg_on_progress;
  progress.max_scans = opt->max_jpeg_scans;
  cinfo.progress = &progress.pub;
  jpeg_mem_src(&cinfo, data, static_cast<unsigned long>(size));
  jpeg_save_markers(&cinfo, JPEG_APP0 + 1, 0xFFFF);
  jpeg_read_header(&cinfo, TRUE);

  res->components = cinfo.num_components;
  res->color_space = cinfo.jpeg_color_space;
  res->width = cinfo.image_width;
  res->height = cinfo.image_height;
  for (jpeg_saved_marker_ptr m = cinfo.marker_list; m != nullptr; m = m->next) {
    if (m->marker == JPEG_APP0 + 1 && m->data_length >= 6 && std::memcmp(m->data, "Exif\0\0", 6) == 0) {
      res->orientation = exif_orientation_from_tiff(std::span<const uint8_t>(m->data + 6, m->data_length - 6));
      break;  // PIL uses the first Exif segment
    }
  }
  if (res->width * res->height > opt->max_pixels) {
    jpeg_destroy_decompress(&cinfo);
    return Outcome::kTooLarge;
  }

  bool cmyk = false;
  switch (cinfo.jpeg_color_space) {
    case JCS_GRAYSCALE:
    case JCS_YCbCr:
    case JCS_RGB: cinfo.out_color_space = JCS_RGB; break;
    case JCS_CMYK:
    case JCS_YCCK: cinfo.out_color_space = JCS_CMYK; cmyk = true; break;
    default: jpeg_destroy_decompress(&cinfo); return Outcome::kUnsupported;
  }
  jpeg_start_decompress(&cinfo);
  const int64_t W = cinfo.output_width, H = cinfo.output_height;
  Image* im = res->image;
  try {
    im->width = W;
    im->height = H;
    im->rgb.resize(static_cast<size_t>(W * H * 3));
  } catch (const std::bad_alloc&) {
    jpeg_destroy_decompress(&cinfo);
    return Outcome::kOutOfMemory;
  }
  if (cmyk) {
    // One CMYK row at a time, from libjpeg's image pool (freed by jpeg_destroy_decompress, also after a longjmp).
    JSAMPARRAY tmp = (*cinfo.mem->alloc_sarray)(reinterpret_cast<j_common_ptr>(&cinfo), JPOOL_IMAGE,
                                                static_cast<JDIMENSION>(W * 4), 1);
    const bool inverted = cinfo.saw_Adobe_marker;  // Adobe writers store 255 − ink
    while (cinfo.output_scanline < cinfo.output_height) {
      const int64_t y = cinfo.output_scanline;
      if (jpeg_read_scanlines(&cinfo, tmp, 1) != 1) break;
      cmyk_row_to_rgb(tmp[0], im->row(y), W, inverted);
    }
  } else {
    constexpr int kRows = 8;
    JSAMPROW rows[kRows];
    while (cinfo.output_scanline < cinfo.output_height) {
      const int64_t y = cinfo.output_scanline;
      const int n = static_cast<int>(std::min<int64_t>(kRows, H - y));
      for (int i = 0; i < n; ++i) rows[i] = im->row(y + i);
      if (jpeg_read_scanlines(&cinfo, rows, static_cast<JDIMENSION>(n)) == 0) break;
    }
  }
  const bool complete = cinfo.output_scanline == cinfo.output_height;
  // No jpeg_finish_decompress: every scanline is in. (A file cut anywhere, even just before its EOI marker, has
  // already failed: the entropy decoder reads ahead and reports the premature end. PIL rejects it too.)
  jpeg_destroy_decompress(&cinfo);
  if (!complete) {
    std::snprintf(err->message, sizeof(err->message), "decoder stopped before the last scanline");
    return Outcome::kCorrupt;
  }
  return Outcome::kOk;
}

// ---- PNG ----------------------------------------------------------------------------------------------------

struct PngInput {
  const uint8_t* data;
  size_t size;
  size_t pos;
};

struct PngError {
  char message[256];
};

struct PngResult {
  Image* image;                       // written
  std::vector<png_bytep>* rows;       // scratch: one pointer per output row
  int orientation = 1;
  int64_t width = 0, height = 0;
};

void png_read_callback(png_structp png, png_bytep dst, size_t n) {
  auto* in = static_cast<PngInput*>(png_get_io_ptr(png));
  if (n > in->size - in->pos) png_error(png, "file is truncated");
  std::memcpy(dst, in->data + in->pos, n);
  in->pos += n;
}

void png_on_error(png_structp png, png_const_charp msg) {
  auto* e = static_cast<PngError*>(png_get_error_ptr(png));
  std::snprintf(e->message, sizeof(e->message), "%s", msg != nullptr ? msg : "unknown libpng error");
  png_longjmp(png, 1);
}

void png_on_warning(png_structp, png_const_charp) {}  // ancillary-chunk CRCs, iCCP profiles, ...: ignored

Outcome decode_png_impl(const uint8_t* data, size_t size, const DecodeOptions* opt, PngResult* res, PngError* err) {
  PngInput input{data, size, 0};
  err->message[0] = '\0';
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, err, png_on_error, png_on_warning);
  if (png == nullptr) return Outcome::kOutOfMemory;
  png_infop info = png_create_info_struct(png);
  if (info == nullptr) {
    png_destroy_read_struct(&png, nullptr, nullptr);
    return Outcome::kOutOfMemory;
  }
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, &info, nullptr);
    return Outcome::kCorrupt;
  }
  png_set_read_fn(png, &input, png_read_callback);
  png_read_info(png, info);

  png_uint_32 w = 0, h = 0;
  int bit_depth = 0, color_type = 0, interlace = 0;
  png_get_IHDR(png, info, &w, &h, &bit_depth, &color_type, &interlace, nullptr, nullptr);
  res->width = w;
  res->height = h;
#ifdef PNG_eXIf_SUPPORTED
  png_uint_32 exif_len = 0;
  png_bytep exif = nullptr;
  if (png_get_eXIf_1(png, info, &exif_len, &exif) != 0 && exif != nullptr)
    res->orientation = exif_orientation_from_tiff(std::span<const uint8_t>(exif, exif_len));
#endif
  if (static_cast<int64_t>(w) * static_cast<int64_t>(h) > opt->max_pixels) {
    png_destroy_read_struct(&png, &info, nullptr);
    return Outcome::kTooLarge;
  }
  // Transformations to 8-bit RGB (see the header): tRNS is never expanded, so palette and gray images
  // ignore transparency exactly like PIL's convert("RGB").
  if (color_type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (color_type == PNG_COLOR_TYPE_GRAY && bit_depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  if (bit_depth == 16) png_set_strip_16(png);  // high byte
  // Palette expansion also turns tRNS into an alpha channel; dropping every alpha channel keeps PIL's result.
  if ((color_type & PNG_COLOR_MASK_ALPHA) != 0 || png_get_valid(png, info, PNG_INFO_tRNS) != 0)
    png_set_strip_alpha(png);
  if (color_type == PNG_COLOR_TYPE_GRAY || color_type == PNG_COLOR_TYPE_GRAY_ALPHA) png_set_gray_to_rgb(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  if (png_get_channels(png, info) != 3 || png_get_bit_depth(png, info) != 8 ||
      png_get_rowbytes(png, info) != static_cast<size_t>(w) * 3) {
    std::snprintf(err->message, sizeof(err->message), "unexpected PNG layout after conversion (color type %d, %d bit)",
                  color_type, bit_depth);
    png_destroy_read_struct(&png, &info, nullptr);
    return Outcome::kUnsupported;
  }
  Image* im = res->image;
  try {
    im->width = w;
    im->height = h;
    im->rgb.resize(static_cast<size_t>(w) * h * 3);
    res->rows->resize(h);
  } catch (const std::bad_alloc&) {
    png_destroy_read_struct(&png, &info, nullptr);
    return Outcome::kOutOfMemory;
  }
  for (png_uint_32 y = 0; y < h; ++y) (*res->rows)[y] = im->row(y);
  png_read_image(png, res->rows->data());
  // No png_read_end: chunks after the image data (and their truncation, a missing IEND) do not change the
  // pixels; PIL tolerates them too.
  png_destroy_read_struct(&png, &info, nullptr);
  return Outcome::kOk;
}

const char* jpeg_color_space_name(int cs) {
  switch (cs) {
    case JCS_UNKNOWN: return "unknown";
    case JCS_GRAYSCALE: return "grayscale";
    case JCS_RGB: return "RGB";
    case JCS_YCbCr: return "YCbCr";
    case JCS_CMYK: return "CMYK";
    case JCS_YCCK: return "YCCK";
    default: return "other";
  }
}

const char* named_other_format(std::span<const uint8_t> b) {
  auto starts = [&](const char* magic, size_t n, size_t at = 0) {
    return b.size() >= at + n && std::memcmp(b.data() + at, magic, n) == 0;
  };
  if (starts("GIF8", 4)) return "GIF";
  if (starts("RIFF", 4) && starts("WEBP", 4, 8)) return "WebP";
  if (starts("BM", 2)) return "BMP";
  if (starts("II*\0", 4) || starts("MM\0*", 4)) return "TIFF";
  if (starts("ftyp", 4, 4)) return "HEIF/AVIF (ISO-BMFF)";
  return nullptr;
}

}  // namespace

ImageFormat sniff_image_format(std::span<const uint8_t> b) {
  static constexpr uint8_t kPng[8] = {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A};
  if (b.size() >= 3 && b[0] == 0xFF && b[1] == 0xD8 && b[2] == 0xFF) return ImageFormat::kJpeg;
  if (b.size() >= 8 && std::memcmp(b.data(), kPng, 8) == 0) return ImageFormat::kPng;
  return ImageFormat::kUnknown;
}

Result<Image> decode_image(std::span<const uint8_t> bytes, std::string_view key, const DecodeOptions& options) {
  VLPAR_CHECK(options.max_pixels >= 1 && options.max_jpeg_scans >= 1,
              "decode_image('{}'): DecodeOptions max_pixels ({}) and max_jpeg_scans ({}) must be at least 1", key,
              options.max_pixels, options.max_jpeg_scans);
  const ImageFormat format = sniff_image_format(bytes);
  if (format == ImageFormat::kUnknown) {
    if (bytes.empty()) return VLPAR_STATUS(StatusCode::kInvalidArgument, "decode_image('{}'): empty input", key);
    const char* other = named_other_format(bytes);
    if (other != nullptr)
      return VLPAR_STATUS(StatusCode::kNotSupported, "decode_image('{}'): {} images are not supported (JPEG, PNG)",
                          key, other);
    return VLPAR_STATUS(StatusCode::kInvalidArgument,
                        "decode_image('{}'): not a JPEG or PNG file ({} bytes, first byte 0x{:02x})", key,
                        bytes.size(), bytes[0]);
  }

  Image image;
  Outcome outcome = Outcome::kOk;
  std::string detail;
  int orientation = 1;
  int64_t width = 0, height = 0;
  const char* fmt_name = format == ImageFormat::kJpeg ? "JPEG" : "PNG";
  if (format == ImageFormat::kJpeg) {
    JpegError err;
    JpegResult res{&image};
    outcome = decode_jpeg_impl(bytes.data(), bytes.size(), &options, &res, &err);
    detail = err.message;
    orientation = res.orientation;
    width = res.width;
    height = res.height;
    if (outcome == Outcome::kUnsupported && detail.empty())
      detail = fmt::format("{} components in colour space {}", res.components, jpeg_color_space_name(res.color_space));
  } else {
    PngError err;
    std::vector<png_bytep> rows;
    PngResult res{&image, &rows};
    outcome = decode_png_impl(bytes.data(), bytes.size(), &options, &res, &err);
    detail = err.message;
    orientation = res.orientation;
    width = res.width;
    height = res.height;
  }
  switch (outcome) {
    case Outcome::kOk: break;
    case Outcome::kCorrupt:
      return VLPAR_STATUS(StatusCode::kInvalidArgument, "decode_image('{}'): corrupt or truncated {}: {}", key,
                          fmt_name, detail);
    case Outcome::kUnsupported:
      return VLPAR_STATUS(StatusCode::kNotSupported, "decode_image('{}'): unsupported {}: {}", key, fmt_name, detail);
    case Outcome::kTooLarge:
      return VLPAR_STATUS(StatusCode::kInvalidArgument,
                          "decode_image('{}'): {} of {}x{} pixels exceeds DecodeOptions::max_pixels = {}", key,
                          fmt_name, width, height, options.max_pixels);
    case Outcome::kOutOfMemory:
      return VLPAR_STATUS(StatusCode::kOutOfMemory, "decode_image('{}'): out of memory for a {}x{} {}", key, width,
                          height, fmt_name);
  }
  if (options.apply_exif_orientation && orientation != 1) return apply_exif_orientation(image, orientation);
  return image;
}

}  // namespace vlpar::data
