// Image decoding (data/image_decode.hpp): every fixture file decodes to exactly what PIL shows (Image.open ->
// ImageOps.exif_transpose -> convert("RGB"); fixtures from tools/golden/make_processor_fixture.py) or to the
// documented expectation where vlpar deliberately differs (plain CMYK, 16-bit gray); the EXIF parser on hand-built
// TIFF blocks; the eight orientation transforms by definition; errors for unknown formats, truncation, corruption,
// size and scan limits, each naming the key; and seeded fuzzing (byte flips, truncations, both) that must never
// crash, hang or return an inconsistent image.
// Run: ./build/cpu/tests/test_image_decode
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "vlpar/data/image_decode.hpp"
#include "vlpar/io/safetensors.hpp"

namespace vlpar::data {
namespace {

const std::string kDir = std::string(VLPAR_FIXTURES_DIR) + "/processor/";

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << "cannot open " << path;
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

std::vector<std::vector<std::string>> case_lines(const std::string& kind) {
  std::ifstream f(kDir + "cases.txt");
  EXPECT_TRUE(f.good());
  std::vector<std::vector<std::string>> out;
  for (std::string line; std::getline(f, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ss(line);
    std::vector<std::string> tok;
    for (std::string t; ss >> t;) tok.push_back(t);
    if (!tok.empty() && tok[0] == kind) out.push_back(tok);
  }
  return out;
}

const io::SafetensorsFile& golden() {
  static const io::SafetensorsFile file = [] {
    auto r = io::SafetensorsFile::open(kDir + "golden.safetensors");
    EXPECT_TRUE(r.ok()) << r.status().message();
    return std::move(r).value();
  }();
  return file;
}

Image decode_ok(const std::string& name, const DecodeOptions& opt = {}) {
  auto r = decode_image(read_bytes(kDir + name), name, opt);
  EXPECT_TRUE(r.ok()) << name << ": " << r.status().message();
  return r.ok() ? std::move(r).value() : Image{};
}

// Exact equality with a U8 [H, W, 3] golden tensor; on failure: count, worst difference and its coordinates.
::testing::AssertionResult equals_golden(const Image& im, const std::string& tensor) {
  const io::TensorInfo* info = golden().find(tensor);
  if (info == nullptr) return ::testing::AssertionFailure() << "golden has no " << tensor;
  if (info->dims.size() != 3 || info->dims[2] != 3 || info->dims[0] != im.height || info->dims[1] != im.width)
    return ::testing::AssertionFailure() << tensor << ": decoded " << im.width << "x" << im.height
                                         << " (WxH), golden dims [" << info->dims[0] << ", " << info->dims[1] << ", "
                                         << info->dims[2] << "]";
  const auto bytes = golden().bytes(*info);
  int64_t bad = 0, worst = 0, at = 0;
  for (size_t i = 0; i < im.rgb.size(); ++i) {
    const int d = std::abs(int(im.rgb[i]) - int(std::to_integer<uint8_t>(bytes[i])));
    if (d > 0) ++bad;
    if (d > worst) { worst = d; at = int64_t(i); }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << tensor << ": " << bad << " of " << im.rgb.size()
                                       << " bytes differ, worst " << worst << " at (y " << at / 3 / im.width
                                       << ", x " << at / 3 % im.width << ", c " << at % 3 << ")";
}

TEST(ImageDecode, EveryFixtureMatchesPilOrTheDocumentedDifference) {
  const auto cases = case_lines("decode");
  ASSERT_GE(cases.size(), 30u);
  int64_t exif_rotated = 0;
  for (const auto& c : cases) {
    SCOPED_TRACE(c[1] + " (" + c[2] + ")");
    const Image im = decode_ok(c[1]);
    EXPECT_TRUE(equals_golden(im, c[1] + ".rgb"));
    if (c[1].rfind("exif_", 0) == 0 && c[1].find("_1.") == std::string::npos) ++exif_rotated;
  }
  EXPECT_EQ(exif_rotated, 16);  // 7 JPEG orientations x 2 byte orders + the LONG tag + the PNG eXIf chunk
}

TEST(ImageDecode, ExifCanBeIgnored) {
  DecodeOptions raw;
  raw.apply_exif_orientation = false;
  const Image stored = decode_ok("exif_MM_6.jpg", raw);
  EXPECT_EQ(stored.width, 24);
  EXPECT_EQ(stored.height, 16);
  EXPECT_TRUE(equals_golden(stored, "exif_II_1.jpg.rgb"));  // same JPEG data, orientation 1
  EXPECT_TRUE(equals_golden(apply_exif_orientation(stored, 6), "exif_MM_6.jpg.rgb"));
}

// ---- EXIF parser ----------------------------------------------------------------------------------------------

// A TIFF block with IFD0 = {0x0110 ASCII "abc", `tag` of `type` with `count` and value `v`}.
std::vector<uint8_t> tiff(bool big_endian, uint32_t v, uint16_t type = 3, uint32_t count = 1, uint16_t tag = 0x0112) {
  std::vector<uint8_t> b;
  auto put16 = [&](uint32_t x) {
    if (big_endian) { b.push_back(uint8_t(x >> 8)); b.push_back(uint8_t(x)); }
    else { b.push_back(uint8_t(x)); b.push_back(uint8_t(x >> 8)); }
  };
  auto put32 = [&](uint32_t x) {
    if (big_endian) { put16(x >> 16); put16(x & 0xFFFF); }
    else { put16(x & 0xFFFF); put16(x >> 16); }
  };
  b.push_back(big_endian ? 'M' : 'I');
  b.push_back(big_endian ? 'M' : 'I');
  put16(42);
  put32(8);
  put16(2);
  put16(0x0110); put16(2); put32(4); b.insert(b.end(), {'a', 'b', 'c', 0});
  put16(tag); put16(type); put32(count);
  if (type == 3) { put16(v); put16(0); } else if (type == 1) { b.insert(b.end(), {uint8_t(v), 0, 0, 0}); }
  else { put32(v); }
  put32(0);
  return b;
}

TEST(ExifOrientation, BothByteOrdersAndTypes) {
  for (bool be : {false, true}) {
    for (uint32_t o = 1; o <= 8; ++o) {
      EXPECT_EQ(exif_orientation_from_tiff(tiff(be, o)), int(o)) << "SHORT, big-endian " << be;
      EXPECT_EQ(exif_orientation_from_tiff(tiff(be, o, 4)), int(o)) << "LONG, big-endian " << be;
      EXPECT_EQ(exif_orientation_from_tiff(tiff(be, o, 1)), int(o)) << "BYTE, big-endian " << be;
    }
  }
  // A big-endian SHORT 6 read little-endian would be 0x0600: the byte order matters.
  std::vector<uint8_t> be6 = tiff(true, 6);
  be6[0] = be6[1] = 'I';
  EXPECT_EQ(exif_orientation_from_tiff(be6), 1);
}

TEST(ExifOrientation, MalformedOrOutOfRangeMeansOne) {
  EXPECT_EQ(exif_orientation_from_tiff(tiff(false, 0)), 1);
  EXPECT_EQ(exif_orientation_from_tiff(tiff(false, 9)), 1);
  EXPECT_EQ(exif_orientation_from_tiff(tiff(true, 0x10006, 4)), 1);
  EXPECT_EQ(exif_orientation_from_tiff(tiff(false, 6, 3, 2)), 1);            // count 2: a tuple, ignored
  EXPECT_EQ(exif_orientation_from_tiff(tiff(false, 6, 2)), 1);               // ASCII type
  EXPECT_EQ(exif_orientation_from_tiff(tiff(false, 6, 3, 1, 0x0113)), 1);    // another tag
  EXPECT_EQ(exif_orientation_from_tiff({}), 1);
  std::vector<uint8_t> t = tiff(false, 6);
  for (size_t n = 0; n < t.size(); ++n) {  // every truncation: no read past the end, 6 only when complete
    const int o = exif_orientation_from_tiff(std::span<const uint8_t>(t.data(), n));
    EXPECT_EQ(o, n >= 8 + 2 + 24 ? 6 : 1) << "truncated to " << n;
  }
  std::vector<uint8_t> bad_magic = tiff(false, 6);
  bad_magic[2] = 43;
  EXPECT_EQ(exif_orientation_from_tiff(bad_magic), 1);
  std::vector<uint8_t> far_ifd = tiff(false, 6);
  far_ifd[4] = 0xF0; far_ifd[5] = 0xFF; far_ifd[6] = 0xFF; far_ifd[7] = 0xFF;  // IFD0 offset past the end
  EXPECT_EQ(exif_orientation_from_tiff(far_ifd), 1);
  std::vector<uint8_t> many = tiff(false, 6);
  many[8] = 0xFF; many[9] = 0xFF;  // 65535 entries claimed, two present
  EXPECT_EQ(exif_orientation_from_tiff(many), 6);  // found before running out
  std::vector<uint8_t> many_missing = tiff(false, 6, 3, 1, 0x0113);
  many_missing[8] = 0xFF; many_missing[9] = 0xFF;
  EXPECT_EQ(exif_orientation_from_tiff(many_missing), 1);
}

// A 3x2 image whose pixel (x, y) is (10x + y, 100 + 10x + y, 7).
Image coord_image() {
  Image im = Image::zeros(3, 2);
  for (int64_t y = 0; y < 2; ++y)
    for (int64_t x = 0; x < 3; ++x) {
      im.row(y)[3 * x] = uint8_t(10 * x + y);
      im.row(y)[3 * x + 1] = uint8_t(100 + 10 * x + y);
      im.row(y)[3 * x + 2] = 7;
    }
  return im;
}

// The source (x, y) of every output pixel, read back from the R channel.
std::vector<std::pair<int, int>> sources(const Image& im) {
  std::vector<std::pair<int, int>> s;
  for (int64_t y = 0; y < im.height; ++y)
    for (int64_t x = 0; x < im.width; ++x) s.emplace_back(im.at(x, y, 0) / 10, im.at(x, y, 0) % 10);
  return s;
}

TEST(ExifOrientation, TransformsByDefinition) {
  const Image im = coord_image();  // source pixels (x, y), x in 0..2, y in 0..1, shown as rows:
  using P = std::vector<std::pair<int, int>>;
  //   (0,0) (1,0) (2,0)
  //   (0,1) (1,1) (2,1)
  const std::vector<P> expected = {
      {},
      {{0, 0}, {1, 0}, {2, 0}, {0, 1}, {1, 1}, {2, 1}},  // 1: as is
      {{2, 0}, {1, 0}, {0, 0}, {2, 1}, {1, 1}, {0, 1}},  // 2: mirror left-right
      {{2, 1}, {1, 1}, {0, 1}, {2, 0}, {1, 0}, {0, 0}},  // 3: rotate 180
      {{0, 1}, {1, 1}, {2, 1}, {0, 0}, {1, 0}, {2, 0}},  // 4: mirror top-bottom
      {{0, 0}, {0, 1}, {1, 0}, {1, 1}, {2, 0}, {2, 1}},  // 5: transpose (2 wide, 3 tall)
      {{0, 1}, {0, 0}, {1, 1}, {1, 0}, {2, 1}, {2, 0}},  // 6: rotate 90 clockwise
      {{2, 1}, {2, 0}, {1, 1}, {1, 0}, {0, 1}, {0, 0}},  // 7: transverse
      {{2, 0}, {2, 1}, {1, 0}, {1, 1}, {0, 0}, {0, 1}},  // 8: rotate 90 counter-clockwise
  };
  for (int o = 1; o <= 8; ++o) {
    const Image t = apply_exif_orientation(im, o);
    EXPECT_EQ(t.width, o >= 5 ? 2 : 3) << o;
    EXPECT_EQ(t.height, o >= 5 ? 3 : 2) << o;
    EXPECT_EQ(sources(t), expected[size_t(o)]) << "orientation " << o;
    for (int64_t y = 0; y < t.height; ++y)
      for (int64_t x = 0; x < t.width; ++x) {
        EXPECT_EQ(t.at(x, y, 1), t.at(x, y, 0) + 100);
        EXPECT_EQ(t.at(x, y, 2), 7);
      }
  }
  EXPECT_EQ(sources(apply_exif_orientation(im, 0)), expected[1]);
  EXPECT_EQ(sources(apply_exif_orientation(im, 9)), expected[1]);
  // 6 and 8 undo each other; 3 twice is the identity.
  EXPECT_EQ(sources(apply_exif_orientation(apply_exif_orientation(im, 6), 8)), expected[1]);
  EXPECT_EQ(sources(apply_exif_orientation(apply_exif_orientation(im, 3), 3)), expected[1]);
}

// ---- errors ---------------------------------------------------------------------------------------------------

void expect_error(std::span<const uint8_t> bytes, const std::string& key, StatusCode code, const std::string& part,
                  const DecodeOptions& opt = {}) {
  auto r = decode_image(bytes, key, opt);
  ASSERT_FALSE(r.ok()) << key << " decoded unexpectedly";
  EXPECT_EQ(r.status().code(), code) << r.status().message();
  EXPECT_NE(r.status().message().find("decode_image('" + key + "')"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find(part), std::string::npos) << r.status().message();
}

TEST(ImageDecode, UnknownFormatsAreNamed) {
  auto bytes = [](std::string_view s) { return std::vector<uint8_t>(s.begin(), s.end()); };
  using namespace std::string_view_literals;
  expect_error(bytes("GIF89a......"), "a.gif", StatusCode::kNotSupported, "GIF");
  expect_error(bytes("RIFF\x10\0\0\0WEBPVP8 "sv), "b.webp", StatusCode::kNotSupported, "WebP");
  expect_error(bytes("BM........"), "c.bmp", StatusCode::kNotSupported, "BMP");
  expect_error(bytes("hello world"), "d.txt", StatusCode::kInvalidArgument, "not a JPEG or PNG");
  expect_error({}, "e.jpg", StatusCode::kInvalidArgument, "empty");
  EXPECT_EQ(sniff_image_format(read_bytes(kDir + "gray.jpg")), ImageFormat::kJpeg);
  EXPECT_EQ(sniff_image_format(read_bytes(kDir + "rgba.png")), ImageFormat::kPng);
  EXPECT_EQ(sniff_image_format(bytes("\xff\xd8")), ImageFormat::kUnknown);
}

TEST(ImageDecode, TruncatedFilesAreErrors) {
  for (const std::string name : {"rgb_down.jpg", "progressive.jpg", "cmyk_adobe.jpg", "gray.jpg", "rgba.png",
                                 "rgb16_interlaced.png", "palette4_trns.png"}) {
    SCOPED_TRACE(name);
    const auto full = read_bytes(kDir + name);
    for (double frac : {0.05, 0.3, 0.6, 0.9}) {
      const size_t n = std::max<size_t>(16, size_t(double(full.size()) * frac));
      expect_error(std::span<const uint8_t>(full.data(), n), name + "@" + std::to_string(n),
                   StatusCode::kInvalidArgument, "corrupt or truncated");
    }
  }
  // A JPEG cut just before its EOI marker fails too (libjpeg reads ahead; PIL: "image file is truncated"),
  // but a PNG without its IEND chunk decodes (nothing after the image data is read; PIL accepts it as well).
  const auto jpg = read_bytes(kDir + "rgb_down.jpg");
  ASSERT_EQ(jpg[jpg.size() - 2], 0xFF);
  ASSERT_EQ(jpg[jpg.size() - 1], 0xD9);
  expect_error(std::span<const uint8_t>(jpg.data(), jpg.size() - 2), "no_eoi.jpg", StatusCode::kInvalidArgument,
               "Premature end of JPEG file");
  const auto png = read_bytes(kDir + "rgba.png");
  auto p = decode_image(std::span<const uint8_t>(png.data(), png.size() - 12), "no_iend.png");
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_TRUE(equals_golden(p.value(), "rgba.png.rgb"));
}

TEST(ImageDecode, CorruptDataIsAnError) {
  // PNG: a flipped byte in the IDAT zlib stream; a flipped IHDR byte breaks that critical chunk's CRC.
  const auto png = read_bytes(kDir + "rgba.png");
  auto idat = std::search(png.begin(), png.end(), std::begin("IDAT"), std::begin("IDAT") + 4);
  ASSERT_NE(idat, png.end());
  auto bad = png;
  bad[size_t(idat - png.begin()) + 20] ^= 0x5A;
  expect_error(bad, "idat.png", StatusCode::kInvalidArgument, "corrupt or truncated PNG: IDAT");
  bad = png;
  bad[18] ^= 0x01;  // IHDR width
  expect_error(bad, "ihdr_crc.png", StatusCode::kInvalidArgument, "CRC");
  // JPEG: the entropy-coded data replaced by a marker-laden pattern (bad Huffman codes / unexpected markers).
  auto jpg = read_bytes(kDir + "rgb_down.jpg");
  size_t sos = 0;
  for (size_t i = 2; i + 1 < jpg.size(); ++i)
    if (jpg[i] == 0xFF && jpg[i + 1] == 0xDA) { sos = i; break; }
  ASSERT_GT(sos, 0u);
  for (size_t i = sos + 40; i + 2 < jpg.size(); i += 7) { jpg[i] = 0xFF; jpg[i + 1] = 0xD0 + (i % 8); }
  expect_error(jpg, "scrambled.jpg", StatusCode::kInvalidArgument, "corrupt or truncated JPEG");
  // A SOF that claims zero width.
  auto zero = read_bytes(kDir + "gray.jpg");
  for (size_t i = 2; i + 8 < zero.size(); ++i)
    if (zero[i] == 0xFF && zero[i + 1] == 0xC0) { zero[i + 7] = 0; zero[i + 8] = 0; break; }
  expect_error(zero, "zero_width.jpg", StatusCode::kInvalidArgument, "corrupt or truncated JPEG");
}

TEST(ImageDecode, SizeAndScanLimits) {
  DecodeOptions small;
  small.max_pixels = 200 * 130 - 1;
  expect_error(read_bytes(kDir + "rgb_down.jpg"), "big.jpg", StatusCode::kInvalidArgument, "200x130", small);
  small.max_pixels = 48 * 33 - 1;
  expect_error(read_bytes(kDir + "rgba.png"), "big.png", StatusCode::kInvalidArgument, "48x33", small);
  small.max_pixels = 48 * 33;
  EXPECT_TRUE(decode_image(read_bytes(kDir + "rgba.png"), "ok.png", small).ok());
  DecodeOptions scans;
  scans.max_jpeg_scans = 2;  // the progressive fixture has more
  expect_error(read_bytes(kDir + "progressive.jpg"), "many_scans.jpg", StatusCode::kInvalidArgument,
               "more than 2 scans", scans);
  EXPECT_TRUE(decode_image(read_bytes(kDir + "rgb_down.jpg"), "baseline.jpg", scans).ok());  // one scan
  DecodeOptions invalid;
  invalid.max_pixels = 0;
  expect_error(read_bytes(kDir + "gray.jpg"), "opts.jpg", StatusCode::kInvalidArgument, "max_pixels", invalid);
}

// ---- fuzzing --------------------------------------------------------------------------------------------------

// Seeded mutations of every fixture image: flip 1..8 bytes, truncate, or both; 4000+ decodes in all. Each must
// return (no crash, abort or hang: each decode is timed), and a success must be a consistent image.
TEST(ImageDecode, FuzzedInputsNeverCrashOrHang) {
  std::vector<std::string> seeds;
  for (const auto& e : std::filesystem::directory_iterator(kDir)) {
    const std::string n = e.path().filename().string();
    if (n.ends_with(".jpg") || n.ends_with(".png")) seeds.push_back(n);
  }
  std::sort(seeds.begin(), seeds.end());
  ASSERT_GE(seeds.size(), 30u);
  std::mt19937_64 rng(20250917);
  DecodeOptions opt;
  opt.max_pixels = 1 << 22;  // corrupted headers may claim huge sizes; keep the test's allocations small
  int64_t ok = 0, invalid = 0, unsupported = 0, total = 0;
  double worst_ms = 0;
  for (const auto& name : seeds) {
    const auto orig = read_bytes(kDir + name);
    for (int it = 0; it < 130; ++it) {
      auto b = orig;
      const int mode = int(rng() % 3);  // 0 flips, 1 truncation, 2 both
      if (mode != 1) {
        const int flips = 1 + int(rng() % 8);
        for (int f = 0; f < flips; ++f) b[rng() % b.size()] ^= uint8_t(1 + rng() % 255);
      }
      if (mode != 0) b.resize(rng() % b.size());
      const std::string key = name + "#" + std::to_string(it);
      const auto t0 = std::chrono::steady_clock::now();
      auto r = decode_image(b, key, opt);
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      worst_ms = std::max(worst_ms, ms);
      ++total;
      if (r.ok()) {
        ++ok;
        const Image& im = r.value();
        EXPECT_TRUE(im.validate(key).ok());
        EXPECT_LE(im.width * im.height, opt.max_pixels) << key;
      } else {
        const StatusCode c = r.status().code();
        EXPECT_TRUE(c == StatusCode::kInvalidArgument || c == StatusCode::kNotSupported) << r.status().to_string();
        (c == StatusCode::kInvalidArgument ? invalid : unsupported) += 1;
        EXPECT_NE(r.status().message().find("decode_image('" + key + "')"), std::string::npos)
            << r.status().message();
      }
    }
  }
  EXPECT_GE(total, 4000);
  EXPECT_LT(worst_ms, 2000.0) << "a decode took " << worst_ms << " ms";
  // Both outcomes must occur, or the mutations are not reaching the decoders.
  EXPECT_GT(ok, 100);
  EXPECT_GT(invalid, 1000);
  std::printf("fuzz: %lld decodes: %lld ok, %lld invalid, %lld unsupported; slowest %.2f ms\n", (long long)total,
              (long long)ok, (long long)invalid, (long long)unsupported, worst_ms);
}

}  // namespace
}  // namespace vlpar::data
