// Image encoding (data/image_encode.hpp), checked through the library's decoder (image_decode.hpp):
// PNG round trips bit for bit at every zlib level and odd sizes; JPEG at quality 100 / 4:4:4 stays within the RMS
// bound derived in the header (on a synthetic image and on a real photograph from the processor fixtures);
// lossless JPEG options (progressive scans, Huffman optimisation) decode to the identical pixels; quality orders
// PSNR and size; encoding is deterministic; bad inputs give a Status naming the image and the defect.
// Run: ./build/cpu/tests/test_image_encode
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "vlpar/data/image_decode.hpp"
#include "vlpar/data/image_encode.hpp"

namespace vlpar::data {
namespace {

// A deterministic photo-like image: smooth colour gradients, a few hard edges and mild hash noise.
Image synthetic(int64_t w, int64_t h, uint32_t seed) {
  Image im = Image::zeros(w, h);
  for (int64_t y = 0; y < h; ++y) {
    for (int64_t x = 0; x < w; ++x) {
      uint32_t n = static_cast<uint32_t>(x * 73856093u) ^ static_cast<uint32_t>(y * 19349663u) ^ (seed * 83492791u);
      n = (n ^ (n >> 13)) * 0x5bd1e995u;
      const int noise = static_cast<int>((n >> 24) % 9) - 4;
      const bool box = x > w / 3 && x < 2 * w / 3 && y > h / 4 && y < h / 2;
      const double fx = w > 1 ? double(x) / double(w - 1) : 0.0;
      const double fy = h > 1 ? double(y) / double(h - 1) : 0.0;
      const int r = static_cast<int>(40 + 170 * fx) + (box ? 40 : 0) + noise;
      const int g = static_cast<int>(60 + 120 * fy) - (box ? 30 : 0) + noise;
      const int b = static_cast<int>(200 - 150 * fx * fy) + noise;
      uint8_t* p = im.row(y) + 3 * x;
      p[0] = static_cast<uint8_t>(std::clamp(r, 0, 255));
      p[1] = static_cast<uint8_t>(std::clamp(g, 0, 255));
      p[2] = static_cast<uint8_t>(std::clamp(b, 0, 255));
    }
  }
  return im;
}

Image decode_ok(const std::vector<uint8_t>& bytes, const std::string& what) {
  auto r = decode_image(bytes, what);
  EXPECT_TRUE(r.ok()) << what << ": " << r.status().message();
  return r.ok() ? std::move(r).value() : Image{};
}

double rms_error(const Image& a, const Image& b) {
  EXPECT_EQ(a.width, b.width);
  EXPECT_EQ(a.height, b.height);
  if (a.rgb.size() != b.rgb.size() || a.rgb.empty()) return 1e9;
  double s = 0;
  for (size_t i = 0; i < a.rgb.size(); ++i) {
    const double d = double(a.rgb[i]) - double(b.rgb[i]);
    s += d * d;
  }
  return std::sqrt(s / double(a.rgb.size()));
}

double psnr(double rms) { return 20.0 * std::log10(255.0 / rms); }

Image fixture_photo() {
  // A real photograph (PIL-written JPEG of the processor fixtures), decoded: the encoder sees natural texture.
  const std::string path = std::string(VLPAR_FIXTURES_DIR) + "/processor/rgb_down.jpg";
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << "cannot open " << path;
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  return decode_ok(bytes, path);
}

TEST(ImageEncode, PngRoundTripIsExact) {
  for (const auto& [w, h] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {17, 9}, {64, 48}, {131, 7}}) {
    const Image im = synthetic(w, h, 3);
    for (int level : {0, 6, 9}) {
      PngEncodeOptions opt;
      opt.compression_level = level;
      auto enc = encode_png(im, opt, "png");
      ASSERT_TRUE(enc.ok()) << enc.status().message();
      EXPECT_EQ(sniff_image_format(enc.value()), ImageFormat::kPng);
      const Image back = decode_ok(enc.value(), "png");
      EXPECT_EQ(back.width, w);
      EXPECT_EQ(back.height, h);
      EXPECT_TRUE(back.rgb == im.rgb) << w << "x" << h << " level " << level;
    }
  }
}

TEST(ImageEncode, JpegQuality100Within444RmsBound) {
  // Bound derived in image_encode.hpp: RMS <= 1.0 level at quality 100 with 4:4:4 chroma.
  constexpr double kRmsBound = 1.0;
  JpegEncodeOptions opt;
  opt.quality = 100;
  opt.subsampling = ChromaSubsampling::k444;
  std::vector<Image> images = {synthetic(64, 48, 1), synthetic(33, 17, 2), fixture_photo()};
  for (const Image& im : images) {
    ASSERT_GT(im.width, 0);
    auto enc = encode_jpeg(im, opt, "q100");
    ASSERT_TRUE(enc.ok()) << enc.status().message();
    EXPECT_EQ(sniff_image_format(enc.value()), ImageFormat::kJpeg);
    const Image back = decode_ok(enc.value(), "q100");
    const double rms = rms_error(im, back);
    EXPECT_LE(rms, kRmsBound) << im.width << "x" << im.height << " PSNR " << psnr(rms) << " dB";
    std::printf("quality 100, 4:4:4, %lldx%lld: RMS %.3f levels (bound %.1f), PSNR %.1f dB\n",
                static_cast<long long>(im.width), static_cast<long long>(im.height), rms, kRmsBound, psnr(rms));
    EXPECT_GT(rms, 0.0) << "a lossy codec that reproduces every pixel is suspicious (vacuous check)";
  }
}

TEST(ImageEncode, JpegQualityOrdersPsnrAndSize) {
  const Image im = fixture_photo();
  ASSERT_GT(im.width, 0);
  double last_rms = 0.0;
  size_t last_size = SIZE_MAX;
  for (int q : {95, 75, 30}) {  // default 4:2:0
    JpegEncodeOptions opt;
    opt.quality = q;
    auto enc = encode_jpeg(im, opt, "q");
    ASSERT_TRUE(enc.ok()) << enc.status().message();
    const double rms = rms_error(im, decode_ok(enc.value(), "q"));
    EXPECT_GT(rms, last_rms) << "quality " << q;
    EXPECT_LT(enc.value().size(), last_size) << "quality " << q;
    last_rms = rms;
    last_size = enc.value().size();
  }
}

TEST(ImageEncode, JpegLosslessOptionsGiveIdenticalPixels) {
  // Progressive scans and optimised Huffman tables change only the entropy coding: same quantised coefficients,
  // so the decoder must produce the same pixels bit for bit.
  const Image im = synthetic(80, 56, 7);
  JpegEncodeOptions base;
  base.optimize_huffman = false;
  auto a = encode_jpeg(im, base, "base");
  ASSERT_TRUE(a.ok());
  for (int variant = 0; variant < 2; ++variant) {
    JpegEncodeOptions o = base;
    if (variant == 0) o.progressive = true;
    if (variant == 1) o.optimize_huffman = true;
    auto b = encode_jpeg(im, o, "variant");
    ASSERT_TRUE(b.ok());
    EXPECT_NE(a.value(), b.value()) << "variant " << variant << " should change the bytes";
    EXPECT_TRUE(decode_ok(a.value(), "a").rgb == decode_ok(b.value(), "b").rgb) << "variant " << variant;
  }
}

TEST(ImageEncode, SubsamplingModesAndDeterminism) {
  const Image im = synthetic(45, 31, 9);
  for (ChromaSubsampling s : {ChromaSubsampling::k420, ChromaSubsampling::k422, ChromaSubsampling::k444}) {
    JpegEncodeOptions o;
    o.subsampling = s;
    auto a = encode_jpeg(im, o, "det");
    auto b = encode_jpeg(im, o, "det");
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(a.value(), b.value()) << "encoding must be deterministic";
    const Image back = decode_ok(a.value(), "det");
    EXPECT_EQ(back.width, 45);
    EXPECT_EQ(back.height, 31);
    EXPECT_GE(psnr(rms_error(im, back)), 30.0) << "smooth synthetic image at quality 90";
  }
}

TEST(ImageEncode, BadInputsNameTheImageAndTheDefect) {
  Image empty;
  auto r1 = encode_jpeg(empty, {}, "k0");
  ASSERT_FALSE(r1.ok());
  EXPECT_NE(r1.status().message().find("k0"), std::string::npos) << r1.status().message();
  EXPECT_NE(r1.status().message().find("empty"), std::string::npos) << r1.status().message();

  Image bad = Image::zeros(4, 4);
  bad.rgb.pop_back();
  auto r2 = encode_png(bad, {}, "k1");
  ASSERT_FALSE(r2.ok());
  EXPECT_NE(r2.status().message().find("k1"), std::string::npos);
  EXPECT_NE(r2.status().message().find("RGB bytes"), std::string::npos) << r2.status().message();

  const Image ok = Image::zeros(8, 8);
  for (int q : {0, 101}) {
    JpegEncodeOptions o;
    o.quality = q;
    auto r = encode_jpeg(ok, o, "k2");
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("quality"), std::string::npos) << r.status().message();
  }
  PngEncodeOptions p;
  p.compression_level = 10;
  auto r3 = encode_png(ok, p, "k3");
  ASSERT_FALSE(r3.ok());
  EXPECT_NE(r3.status().message().find("compression_level"), std::string::npos);

  const Image huge_row = Image::zeros(70000, 1);
  auto r4 = encode_jpeg(huge_row, {}, "k4");
  ASSERT_FALSE(r4.ok());
  EXPECT_NE(r4.status().message().find("JPEG limit"), std::string::npos) << r4.status().message();
}

}  // namespace
}  // namespace vlpar::data
