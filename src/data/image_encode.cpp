// JPEG (libjpeg-turbo, libjpeg compress API) and PNG (libpng) encoding of 8-bit RGB. See
// include/vlpar/data/image_encode.hpp.
//
// Both libraries report fatal errors through a callback that must not return; we longjmp back to a setjmp in the
// encoding function. As in image_decode.cpp, the functions that call setjmp create no object with a destructor
// after the setjmp: the output bytes live in caller-owned storage reached through a pointer (PNG) or in a
// malloc'd buffer that libjpeg-turbo's memory destination owns until we copy it out (JPEG).
#include "vlpar/data/image_encode.hpp"

#include <csetjmp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

// clang-format off
#include <jpeglib.h>   // needs <cstdio> first
#include <png.h>
// clang-format on

namespace vlpar::data {

namespace {

// ---- JPEG ---------------------------------------------------------------------------------------------------

struct JpegWriteError {
  jpeg_error_mgr pub;  // first member: libjpeg hands us a jpeg_error_mgr*
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX + 64];
};

void jpeg_write_on_error(j_common_ptr cinfo) {
  auto* e = reinterpret_cast<JpegWriteError*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, e->message);
  std::longjmp(e->jump, 1);
}

void jpeg_write_on_message(j_common_ptr, int) {}  // the compressor's warnings and traces: nothing to report

struct JpegOutput {
  unsigned char* buffer = nullptr;  // malloc'd by jpeg_mem_dest; the caller frees it
  unsigned long size = 0;
};

// Returns true on success; on failure err->message says why. out->buffer must be freed by the caller either way.
bool encode_jpeg_impl(const Image* im, const JpegEncodeOptions* opt, JpegOutput* out, JpegWriteError* err) {
  jpeg_compress_struct cinfo;
  cinfo.err = jpeg_std_error(&err->pub);
  err->pub.error_exit = jpeg_write_on_error;
  err->pub.emit_message = jpeg_write_on_message;
  err->message[0] = '\0';
  if (setjmp(err->jump)) {
    jpeg_destroy_compress(&cinfo);
    return false;
  }
  jpeg_create_compress(&cinfo);
  jpeg_mem_dest(&cinfo, &out->buffer, &out->size);
  cinfo.image_width = static_cast<JDIMENSION>(im->width);
  cinfo.image_height = static_cast<JDIMENSION>(im->height);
  cinfo.input_components = 3;
  cinfo.in_color_space = JCS_RGB;
  jpeg_set_defaults(&cinfo);  // YCbCr, 4:2:0, ISLOW DCT, JFIF marker
  jpeg_set_quality(&cinfo, opt->quality, TRUE);
  cinfo.dct_method = JDCT_ISLOW;
  cinfo.optimize_coding = opt->optimize_huffman ? TRUE : FALSE;
  // Luma sampling factors (chroma components stay at 1x1): 2x2 = 4:2:0, 2x1 = 4:2:2, 1x1 = 4:4:4.
  const int h = opt->subsampling == ChromaSubsampling::k444 ? 1 : 2;
  const int v = opt->subsampling == ChromaSubsampling::k420 ? 2 : 1;
  cinfo.comp_info[0].h_samp_factor = h;
  cinfo.comp_info[0].v_samp_factor = v;
  for (int c = 1; c < 3; ++c) {
    cinfo.comp_info[c].h_samp_factor = 1;
    cinfo.comp_info[c].v_samp_factor = 1;
  }
  if (opt->progressive) jpeg_simple_progression(&cinfo);
  jpeg_start_compress(&cinfo, TRUE);
  while (cinfo.next_scanline < cinfo.image_height) {
    // libjpeg takes non-const row pointers but only reads them.
    JSAMPROW row = const_cast<JSAMPROW>(im->row(cinfo.next_scanline));
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  return true;
}

// ---- PNG ----------------------------------------------------------------------------------------------------

struct PngWriteError {
  char message[256];
  bool out_of_memory;
};

void png_write_callback(png_structp png, png_bytep data, size_t n) {
  auto* out = static_cast<std::vector<uint8_t>*>(png_get_io_ptr(png));
  bool grown = true;
  try {
    out->insert(out->end(), data, data + n);
  } catch (const std::bad_alloc&) {
    grown = false;
  }
  if (!grown) {  // longjmp only outside the handler, so the exception object is destroyed first
    static_cast<PngWriteError*>(png_get_error_ptr(png))->out_of_memory = true;
    png_error(png, "out of memory while growing the output buffer");
  }
}

void png_flush_callback(png_structp) {}

void png_write_on_error(png_structp png, png_const_charp msg) {
  auto* e = static_cast<PngWriteError*>(png_get_error_ptr(png));
  if (e->message[0] == '\0')
    std::snprintf(e->message, sizeof(e->message), "%s", msg != nullptr ? msg : "unknown libpng error");
  png_longjmp(png, 1);
}

void png_write_on_warning(png_structp, png_const_charp) {}

bool encode_png_impl(const Image* im, const PngEncodeOptions* opt, std::vector<uint8_t>* out, PngWriteError* err) {
  err->message[0] = '\0';
  err->out_of_memory = false;
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, err, png_write_on_error, png_write_on_warning);
  if (png == nullptr) {
    std::snprintf(err->message, sizeof(err->message), "png_create_write_struct failed");
    return false;
  }
  png_infop info = png_create_info_struct(png);
  if (info == nullptr) {
    png_destroy_write_struct(&png, nullptr);
    std::snprintf(err->message, sizeof(err->message), "png_create_info_struct failed");
    return false;
  }
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    return false;
  }
  png_set_write_fn(png, out, png_write_callback, png_flush_callback);
  png_set_compression_level(png, opt->compression_level);
  png_set_IHDR(png, info, static_cast<png_uint_32>(im->width), static_cast<png_uint_32>(im->height), 8,
               PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  for (int64_t y = 0; y < im->height; ++y) png_write_row(png, im->row(y));
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return true;
}

}  // namespace

Result<std::vector<uint8_t>> encode_jpeg(const Image& image, const JpegEncodeOptions& options, std::string_view what) {
  VLPAR_RETURN_IF_ERROR(image.validate(fmt::format("encode_jpeg('{}')", what)));
  VLPAR_CHECK(image.width <= JPEG_MAX_DIMENSION && image.height <= JPEG_MAX_DIMENSION,
              "encode_jpeg('{}'): image {}x{} exceeds the JPEG limit of {} pixels per side", what, image.width,
              image.height, JPEG_MAX_DIMENSION);
  VLPAR_CHECK(options.quality >= 1 && options.quality <= 100, "encode_jpeg('{}'): quality {} is outside 1..100",
              what, options.quality);
  JpegOutput out;
  JpegWriteError err;
  const bool ok = encode_jpeg_impl(&image, &options, &out, &err);
  std::vector<uint8_t> bytes;
  if (ok) {
    try {
      bytes.assign(out.buffer, out.buffer + out.size);
    } catch (const std::bad_alloc&) {
      std::free(out.buffer);
      return VLPAR_STATUS(StatusCode::kOutOfMemory, "encode_jpeg('{}'): {} output bytes", what, out.size);
    }
  }
  std::free(out.buffer);  // jpeg_mem_dest's buffer (malloc'd, also after a failure)
  if (!ok) return VLPAR_STATUS(StatusCode::kInternal, "encode_jpeg('{}'): libjpeg: {}", what, err.message);
  return bytes;
}

Result<std::vector<uint8_t>> encode_png(const Image& image, const PngEncodeOptions& options, std::string_view what) {
  VLPAR_RETURN_IF_ERROR(image.validate(fmt::format("encode_png('{}')", what)));
  VLPAR_CHECK(image.width < (int64_t{1} << 31) && image.height < (int64_t{1} << 31),
              "encode_png('{}'): image {}x{} exceeds the PNG limit of 2^31-1 pixels per side", what, image.width,
              image.height);
  VLPAR_CHECK(options.compression_level >= 0 && options.compression_level <= 9,
              "encode_png('{}'): compression_level {} is outside 0..9", what, options.compression_level);
  std::vector<uint8_t> bytes;
  PngWriteError err;
  if (!encode_png_impl(&image, &options, &bytes, &err)) {
    return VLPAR_STATUS(err.out_of_memory ? StatusCode::kOutOfMemory : StatusCode::kInternal,
                        "encode_png('{}'): libpng: {}", what, err.message);
  }
  return bytes;
}

}  // namespace vlpar::data
