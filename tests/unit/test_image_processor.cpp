// Qwen3-VL image/video processor (data/image_processor.hpp):
//   - smart_resize / video smart_resize equal HF's on a table of sizes and limits (errors included);
//   - process_image on every fixture case: grid and token count exact, pixel_values bitwise equal to
//     Qwen2VLImageProcessorFast (the golden), and within the derived tolerance of Qwen2VLImageProcessor (PIL);
//   - process_video equals Qwen3VLVideoProcessor bitwise, with HF's frame indices and timestamp texts;
//   - resize_bicubic equals a plain-loop same-precision reference bit for bit on random sizes, and stays within a
//     derived bound of an fp64 reference; thread counts never change a bit;
//   - the flattening order on a coordinate-encoded image, and every error path.
// Fixtures: tests/fixtures/processor/, made by tools/golden/make_processor_fixture.py.
// Run: ./build/cpu/tests/test_image_processor
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "vlpar/data/image_decode.hpp"
#include "vlpar/data/image_processor.hpp"
#include "vlpar/io/safetensors.hpp"

namespace vlpar::data {
namespace {

const std::string kDir = std::string(VLPAR_FIXTURES_DIR) + "/processor/";
constexpr double kLevel = 1.0 / 127.5;  // one uint8 level after normalisation with mean = std = 0.5

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << "cannot open " << path;
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

std::vector<std::vector<std::string>> lines_of(const std::string& file, const std::string& kind = "") {
  std::ifstream f(kDir + file);
  EXPECT_TRUE(f.good()) << file;
  std::vector<std::vector<std::string>> out;
  for (std::string line; std::getline(f, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ss(line);
    std::vector<std::string> tok;
    for (std::string t; ss >> t;) tok.push_back(t);
    if (!tok.empty() && (kind.empty() || tok[0] == kind)) out.push_back(tok);
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

std::vector<uint8_t> golden_u8(const std::string& name, std::vector<int64_t>* dims = nullptr) {
  const io::TensorInfo* info = golden().find(name);
  EXPECT_NE(info, nullptr) << name;
  if (info == nullptr) return {};
  EXPECT_EQ(info->dtype_name, "U8") << name;
  if (dims != nullptr) *dims = info->dims;
  const auto b = golden().bytes(*info);
  std::vector<uint8_t> out(b.size());
  std::memcpy(out.data(), b.data(), b.size());
  return out;
}

VisionGrid golden_grid(const std::string& name) {
  const io::TensorInfo* info = golden().find(name);
  EXPECT_NE(info, nullptr) << name;
  if (info == nullptr) return {};
  int64_t g[3];
  std::memcpy(g, golden().bytes(*info).data(), sizeof(g));
  return VisionGrid{g[0], g[1], g[2]};
}

// HF's fast output from its levels: float32((v − 127.5) / 127.5), exactly what the fixture script verified.
float fast_value(uint8_t level) { return (static_cast<float>(level) - 127.5f) / 127.5f; }

// |out − ref| per element, with the first mismatches as (patch, channel, t, row, col).
::testing::AssertionResult close(const std::string& what, std::span<const float> out,
                                 std::span<const float> ref, double atol, int64_t Tp = 2, int64_t P = 16) {
  if (out.size() != ref.size())
    return ::testing::AssertionFailure() << what << ": " << out.size() << " values vs golden " << ref.size();
  int64_t bad = 0, worst_at = 0;
  double worst = 0;
  std::ostringstream first;
  const int64_t dim = 3 * Tp * P * P;
  for (size_t i = 0; i < out.size(); ++i) {
    const double e = std::fabs(double(out[i]) - double(ref[i]));
    if (e > worst) { worst = e; worst_at = int64_t(i); }
    if (!(e <= atol)) {
      if (bad < 10) {
        const int64_t q = int64_t(i) / dim, r = int64_t(i) % dim;
        first << "\n  patch " << q << " (c " << r / (Tp * P * P) << ", t " << r / (P * P) % Tp << ", row "
              << r / P % P << ", col " << r % P << "): out " << out[i] << " golden " << ref[i];
      }
      ++bad;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": " << bad << " of " << out.size() << " exceed " << atol
                                       << " (" << atol / kLevel << " levels); worst " << worst << " ("
                                       << worst / kLevel << " levels) at " << worst_at << first.str();
}

double max_abs_diff(std::span<const float> a, std::span<const float> b) {
  double m = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) m = std::max(m, std::fabs(double(a[i]) - double(b[i])));
  return m;
}

// ---- smart_resize ---------------------------------------------------------------------------------------------

TEST(SmartResize, MatchesHfTable) {
  const auto rows = lines_of("smart_resize.txt");
  ASSERT_GE(rows.size(), 400u);
  int64_t errors = 0;
  for (const auto& r : rows) {
    std::string line;
    for (const auto& t : r) line += t + " ";
    SCOPED_TRACE(line);
    Result<ResizedSize> got = ResizedSize{};
    size_t at = 0;
    if (r[0] == "image") {
      got = smart_resize(std::stoll(r[1]), std::stoll(r[2]), std::stoll(r[3]), std::stoll(r[4]), std::stoll(r[5]));
      at = 6;
    } else {
      got = smart_resize_video(std::stoll(r[1]), std::stoll(r[2]), std::stoll(r[3]), std::stoll(r[4]),
                               std::stoll(r[5]), std::stoll(r[6]), std::stoll(r[7]));
      at = 8;
    }
    if (r[at] == "error") {
      ++errors;
      EXPECT_FALSE(got.ok());
      continue;
    }
    ASSERT_TRUE(got.ok()) << got.status().message();
    EXPECT_EQ(got->height, std::stoll(r[at]));
    EXPECT_EQ(got->width, std::stoll(r[at + 1]));
  }
  EXPECT_GT(errors, 10);  // aspect ratio > 200, too few frames, frames below the factor
}

TEST(SmartResize, HandCases) {
  // Banker's rounding: 80/32 = 2.5 -> 2, 48/32 = 1.5 -> 2, 112/32 = 3.5 -> 4 (half-up would give 96, 64, 128).
  auto r = smart_resize(80, 48, 32, 1, 1 << 30);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->height, 64);
  EXPECT_EQ(r->width, 64);
  r = smart_resize(112, 80, 32, 1, 1 << 30);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->height, 128);
  EXPECT_EQ(r->width, 64);
  // 16/32 = 0.5 -> 0: h̄·w̄ = 0 < min_pixels, so both sides come from the min_pixels branch (ceil(...) = 1).
  r = smart_resize(112, 16, 32, 1, 1 << 30);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->height, 32);
  EXPECT_EQ(r->width, 32);
  // min_pixels: 40x30 -> beta = sqrt(4096/1200); max_pixels: 200x130 -> beta = sqrt(26000/6144).
  r = smart_resize(30, 40, 32, 4096, 1 << 24);
  EXPECT_EQ(r->height, 64);
  EXPECT_EQ(r->width, 96);
  r = smart_resize(130, 200, 32, 1024, 6144);
  EXPECT_EQ(r->height, 32);
  EXPECT_EQ(r->width, 96);
  // Aspect ratio: 200 is allowed, 201 is not.
  EXPECT_TRUE(smart_resize(1, 200, 32, 65536, 16777216).ok());
  auto e = smart_resize(201, 1, 32, 65536, 16777216);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("aspect ratio 201"), std::string::npos) << e.status().message();
  EXPECT_FALSE(smart_resize(0, 10, 32, 1, 10).ok());
  EXPECT_FALSE(smart_resize(10, 10, 32, 0, 10).ok());
  // Video: t̄ = round_half_even(5/2)·2 = 4 counts in the budget; T < 2 and frames below 32 are errors.
  auto v = smart_resize_video(5, 40, 36, 2, 32, 4096, 4096);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->height, 32);
  EXPECT_EQ(v->width, 32);
  EXPECT_NE(smart_resize_video(1, 64, 64, 2, 32, 1, 1 << 30).status().message().find("temporal_factor"),
            std::string::npos);
  EXPECT_NE(smart_resize_video(4, 31, 64, 2, 32, 1, 1 << 30).status().message().find("smaller than the factor"),
            std::string::npos);
}

// ---- HF parity ------------------------------------------------------------------------------------------------

Image decoded(const std::string& file) {
  auto r = decode_image(read_bytes(kDir + file), file);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? std::move(r).value() : Image{};
}

ImageProcessorConfig config_with(int64_t min_pixels, int64_t max_pixels) {
  ImageProcessorConfig c;
  c.min_pixels = min_pixels;
  c.max_pixels = max_pixels;
  return c;
}

TEST(ImageProcessor, HubDefaults) {
  const ImageProcessorConfig c;
  EXPECT_EQ(c.patch_size, 16);
  EXPECT_EQ(c.temporal_patch_size, 2);
  EXPECT_EQ(c.merge_size, 2);
  EXPECT_EQ(c.min_pixels, 65536);
  EXPECT_EQ(c.max_pixels, 16777216);
  EXPECT_EQ(c.image_mean[1], 0.5f);
  EXPECT_EQ(c.image_std[2], 0.5f);
  const VideoProcessorConfig v;
  EXPECT_EQ(v.spatial.min_pixels, 4096);
  EXPECT_EQ(v.spatial.max_pixels, 25165824);
  EXPECT_EQ(v.spatial.patch_size, 16);
  EXPECT_EQ(v.sampling.fps, 2.0);
  EXPECT_EQ(v.sampling.min_frames, 4);
  EXPECT_EQ(v.sampling.max_frames, 768);
  // A 448x448 image: grid 1x28x28, 784 patches, 196 tokens (spec §2.1).
  auto p = process_image(Image::zeros(448, 448), c);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->grid.t, 1);
  EXPECT_EQ(p->grid.h, 28);
  EXPECT_EQ(p->grid.w, 28);
  EXPECT_EQ(p->num_tokens, 196);
  EXPECT_EQ(p->patch_dim, 1536);
  EXPECT_EQ(p->pixel_values.size(), size_t(784 * 1536));
}

TEST(ImageProcessor, BitwiseEqualToHfFastProcessor) {
  const auto cases = lines_of("cases.txt", "process");
  ASSERT_GE(cases.size(), 10u);
  for (const auto& c : cases) {
    SCOPED_TRACE(c[1] + " <- " + c[2]);
    const Image im = decoded(c[2]);
    auto r = process_image(im, config_with(std::stoll(c[3]), std::stoll(c[4])));
    ASSERT_TRUE(r.ok()) << r.status().message();
    const VisionGrid g = golden_grid(c[1] + ".grid");
    EXPECT_EQ(r->grid.t, g.t);
    EXPECT_EQ(r->grid.h, g.h);
    EXPECT_EQ(r->grid.w, g.w);
    EXPECT_EQ(r->num_tokens, g.patches() / 4);
    EXPECT_EQ(r->resized_height, g.h * 16);
    EXPECT_EQ(r->resized_width, g.w * 16);
    std::vector<int64_t> dims;
    const auto levels = golden_u8(c[1] + ".fast", &dims);
    ASSERT_EQ(dims.size(), 2u);
    EXPECT_EQ(dims[0], g.patches());
    EXPECT_EQ(dims[1], 1536);
    std::vector<float> ref(levels.size());
    for (size_t i = 0; i < levels.size(); ++i) ref[i] = fast_value(levels[i]);
    EXPECT_TRUE(close(c[1] + " vs HF fast", r->pixel_values, ref, 0.0));
  }
}

// Tolerance against the slow (PIL) processor, derived in image_processor.hpp:
//   same pass order (horizontal first, "H" in cases.txt): 2 levels. PIL's 22-bit weights vs torch's p-bit ones
//     (p >= 14) move a pass's sum by at most K·2^-(p+1)·255 < 0.05 level, so the rounded intermediate differs by
//     <= 1 level; the vertical pass scales that by Σ|w| <= 1.27 (max over all scales and phases of the a = -0.5
//     kernel), and the final rounding adds < 1: |Δ| <= 2 levels.
//   Pillow filters vertically first ("V"): the two orders round and clip different intermediates. Against the
//     exact unclipped result each is off by <= Σ|w_2nd|·(0.5 + 0.05 + 255·N_1st) + 0.55 with N = the negative
//     weight mass <= 0.135, so |Δ| <= 1 + 2·1.27·(0.55 + 34.4) < 90 levels (reached only at saturated edges).
// Plus 1e-6 for the slow processor's float64 rescale, as reconstructed by the fixture script.
TEST(ImageProcessor, WithinDerivedToleranceOfHfSlowProcessor) {
  for (const auto& c : lines_of("cases.txt", "process")) {
    SCOPED_TRACE(c[1]);
    auto r = process_image(decoded(c[2]), config_with(std::stoll(c[3]), std::stoll(c[4])));
    ASSERT_TRUE(r.ok()) << r.status().message();
    const auto levels = golden_u8(c[1] + ".slow");
    std::vector<float> ref(levels.size());
    for (size_t i = 0; i < levels.size(); ++i) ref[i] = fast_value(levels[i]);
    const double tol = (c[5] == "H" ? 2.0 : 90.0) * kLevel + 1e-6;
    EXPECT_TRUE(close(c[1] + " vs HF slow (Pillow order " + c[5] + ")", r->pixel_values, ref, tol));
    std::printf("%-13s vs HF slow: max %.0f levels (Pillow pass order %s)\n", c[1].c_str(),
                max_abs_diff(r->pixel_values, ref) / kLevel, c[5].c_str());
  }
}

TEST(VideoProcessor, BitwiseEqualToHf) {
  const auto v = lines_of("cases.txt", "video");
  ASSERT_EQ(v.size(), 1u);
  std::vector<int64_t> dims;
  const auto raw = golden_u8("video.frames", &dims);
  ASSERT_EQ(dims.size(), 4u);
  std::vector<Image> frames;
  for (int64_t t = 0; t < dims[0]; ++t) {
    Image f = Image::zeros(dims[2], dims[1]);
    std::memcpy(f.rgb.data(), raw.data() + t * dims[1] * dims[2] * 3, f.rgb.size());
    frames.push_back(std::move(f));
  }
  VideoProcessorConfig cfg;
  cfg.spatial.min_pixels = std::stoll(v[0][2]);
  cfg.spatial.max_pixels = std::stoll(v[0][3]);
  for (int threads : {1, 3}) {
    Context ctx;
    ctx.num_threads = threads;
    auto r = process_video(ctx, frames, std::stod(v[0][1]), cfg);
    ASSERT_TRUE(r.ok()) << r.status().message();
    const VisionGrid g = golden_grid("video.grid");
    EXPECT_EQ(r->grid.t, g.t);
    EXPECT_EQ(r->grid.h, g.h);
    EXPECT_EQ(r->grid.w, g.w);
    EXPECT_EQ(r->num_tokens, g.patches() / 4);
    EXPECT_EQ(r->tokens_per_temporal_patch, g.h * g.w / 4);
    std::string idx, ts;
    for (int64_t i : r->frame_indices) {
      if (!idx.empty()) idx += ",";
      idx += std::to_string(i);
    }
    for (const auto& s : r->timestamp_texts) {
      std::string u = s;
      std::replace(u.begin(), u.end(), ' ', '_');
      if (!ts.empty()) ts += ",";
      ts += u;
    }
    EXPECT_EQ(idx, v[0][4]);
    EXPECT_EQ(ts, v[0][5]);
    const auto levels = golden_u8("video.fast");
    std::vector<float> ref(levels.size());
    for (size_t i = 0; i < levels.size(); ++i) ref[i] = fast_value(levels[i]);
    EXPECT_TRUE(close("video vs HF", r->pixel_values, ref, 0.0));
  }
}

// ---- resize against references --------------------------------------------------------------------------------

double keys_cubic(double x) {
  const double a = -0.5;
  x = std::fabs(x);
  if (x < 1.0) return ((a + 2) * x - (a + 3)) * x * x + 1;
  if (x < 2.0) return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a;
  return 0.0;
}

// Normalised fp64 weights of output i of an in -> out axis (torch's antialiased bicubic), first tap in *first.
std::vector<double> ref_weights(int64_t in, int64_t out, int64_t i, int64_t* first) {
  const double scale = double(in) / double(out);
  const double support = scale >= 1.0 ? 2.0 * scale : 2.0;
  const double center = scale * (double(i) + 0.5);
  const double inv = scale >= 1.0 ? 1.0 / scale : 1.0;
  const int64_t lo = std::max<int64_t>(int64_t(center - support + 0.5), 0);
  const int64_t n = std::min<int64_t>(std::min<int64_t>(int64_t(center + support + 0.5), in) - lo,
                                      int64_t(std::ceil(support)) * 2 + 1);
  std::vector<double> w;
  double total = 0;
  for (int64_t j = 0; j < n; ++j) {
    w.push_back(keys_cubic((double(j + lo) - center + 0.5) * inv));
    total += w.back();
  }
  for (double& v : w) v /= total;
  *first = lo;
  return w;
}

// Same-precision reference: torch's integer algorithm written as direct loops, everything recomputed per pixel.
int ref_precision(int64_t in, int64_t out) {
  double wmax = 0;
  for (int64_t i = 0; i < out; ++i) {
    int64_t lo = 0;
    for (double v : ref_weights(in, out, i, &lo)) wmax = std::max(wmax, v);
  }
  int p = 0;
  while (p < 22 && int(0.5 + wmax * (1 << (p + 1))) < (1 << 15)) ++p;
  return p;
}

int64_t ref_pass(int64_t in, int64_t out, int64_t i, int p, const std::function<int(int64_t)>& at) {
  int64_t lo = 0;
  const auto w = ref_weights(in, out, i, &lo);
  int64_t acc = int64_t(1) << (p - 1);
  for (size_t j = 0; j < w.size(); ++j) {
    const double v = w[j] * (1 << p);
    acc += at(lo + int64_t(j)) * int64_t(v < 0 ? int(-0.5 + v) : int(0.5 + v));
  }
  return std::clamp<int64_t>(acc >> p, 0, 255);
}

Image ref_resize_int(const Image& im, int64_t W, int64_t H) {
  Image tmp = im;
  if (W != im.width) {
    tmp = Image::zeros(W, im.height);
    const int p = ref_precision(im.width, W);
    for (int64_t y = 0; y < im.height; ++y)
      for (int64_t x = 0; x < W; ++x)
        for (int c = 0; c < 3; ++c)
          tmp.row(y)[3 * x + c] = uint8_t(ref_pass(im.width, W, x, p, [&](int64_t k) { return im.at(k, y, c); }));
  }
  if (H == tmp.height) return tmp;
  Image out = Image::zeros(W, H);
  const int p = ref_precision(tmp.height, H);
  for (int64_t y = 0; y < H; ++y)
    for (int64_t x = 0; x < W; ++x)
      for (int c = 0; c < 3; ++c)
        out.row(y)[3 * x + c] = uint8_t(ref_pass(tmp.height, H, y, p, [&](int64_t k) { return tmp.at(x, k, c); }));
  return out;
}

// fp64 reference: exact weights, no rounding, the horizontal result clipped to [0, 255] like any uint8 pipeline;
// also returns Σ|w| of the vertical axis (for the bound).
std::vector<double> ref_resize_f64(const Image& im, int64_t W, int64_t H, double* vertical_abs_sum) {
  std::vector<double> tmp(size_t(im.height * W * 3));
  for (int64_t y = 0; y < im.height; ++y)
    for (int64_t x = 0; x < W; ++x)
      for (int c = 0; c < 3; ++c) {
        double s = 0;
        if (W == im.width) {
          s = im.at(x, y, c);
        } else {
          int64_t lo = 0;
          const auto w = ref_weights(im.width, W, x, &lo);
          for (size_t j = 0; j < w.size(); ++j) s += w[j] * im.at(lo + int64_t(j), y, c);
        }
        tmp[size_t((y * W + x) * 3 + c)] = std::clamp(s, 0.0, 255.0);
      }
  std::vector<double> out(size_t(H * W * 3));
  *vertical_abs_sum = 1.0;
  for (int64_t y = 0; y < H; ++y) {
    int64_t lo = 0;
    std::vector<double> w{1.0};
    if (H != im.height) w = ref_weights(im.height, H, y, &lo);
    else lo = y;
    double abs_sum = 0;
    for (double v : w) abs_sum += std::fabs(v);
    *vertical_abs_sum = std::max(*vertical_abs_sum, abs_sum);
    for (int64_t x = 0; x < W; ++x)
      for (int c = 0; c < 3; ++c) {
        double s = 0;
        for (size_t j = 0; j < w.size(); ++j) s += w[j] * tmp[size_t(((lo + int64_t(j)) * W + x) * 3 + c)];
        out[size_t((y * W + x) * 3 + c)] = std::clamp(s, 0.0, 255.0);
      }
  }
  return out;
}

Image random_image(std::mt19937_64& rng, int64_t W, int64_t H, bool noise) {
  Image im = Image::zeros(W, H);
  const double fx = 0.05 + double(rng() % 100) / 300, fy = 0.05 + double(rng() % 100) / 300;
  for (int64_t y = 0; y < H; ++y)
    for (int64_t x = 0; x < W; ++x)
      for (int c = 0; c < 3; ++c)
        im.row(y)[3 * x + c] = noise ? uint8_t(rng()) : uint8_t(127.5 + 127.5 * std::sin(fx * double(x) + fy * double(y) + c));
  return im;
}

TEST(ResizeBicubic, EqualsSamePrecisionReferenceBitwise) {
  std::mt19937_64 rng(7);
  int64_t resized = 0;
  for (int trial = 0; trial < 40; ++trial) {
    const int64_t W = 1 + int64_t(rng() % 70), H = 1 + int64_t(rng() % 50);
    int64_t w = 1 + int64_t(rng() % 90), h = 1 + int64_t(rng() % 70);
    if (trial % 5 == 0) w = W;  // one axis unchanged
    if (trial % 7 == 0) h = H;
    const Image im = random_image(rng, W, H, trial % 2 == 0);
    SCOPED_TRACE(std::to_string(W) + "x" + std::to_string(H) + " -> " + std::to_string(w) + "x" + std::to_string(h));
    Context ctx;
    ctx.num_threads = 1 + trial % 3;
    auto r = resize_bicubic(ctx, im, w, h);
    ASSERT_TRUE(r.ok()) << r.status().message();
    const Image ref = ref_resize_int(im, w, h);
    ASSERT_EQ(r->width, w);
    ASSERT_EQ(r->height, h);
    EXPECT_EQ(r->rgb, ref.rgb);
    resized += (w != W || h != H);
  }
  EXPECT_GT(resized, 30);
}

// Bound (levels) = 0.5 (final rounding) + Σ|w_v|·(0.5 + q) + q, q = 0.05 >= K·2^-(p+1)·255 for p >= 14.
TEST(ResizeBicubic, WithinDerivedBoundOfFp64Reference) {
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 30; ++trial) {
    const int64_t W = 2 + int64_t(rng() % 60), H = 2 + int64_t(rng() % 40);
    const int64_t w = 1 + int64_t(rng() % 80), h = 1 + int64_t(rng() % 60);
    const Image im = random_image(rng, W, H, trial % 3 == 0);
    auto r = resize_bicubic(im, w, h);
    ASSERT_TRUE(r.ok());
    double s_v = 0;
    const auto ref = ref_resize_f64(im, w, h, &s_v);
    const double q = 0.05, bound = 0.5 + s_v * (0.5 + q) + q;
    double worst = 0, sum = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      const double e = std::fabs(double(r->rgb[i]) - ref[i]);
      worst = std::max(worst, e);
      sum += e;
    }
    EXPECT_LE(worst, bound) << W << "x" << H << " -> " << w << "x" << h << " (Σ|w_v| " << s_v << ")";
    EXPECT_GT(sum, 0.0);  // not vacuous: rounding leaves some error
  }
}

TEST(ResizeBicubic, SameSizeIsACopyAndErrorsAreNamed) {
  std::mt19937_64 rng(3);
  const Image im = random_image(rng, 20, 10, true);
  auto r = resize_bicubic(im, 20, 10);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->rgb, im.rgb);
  EXPECT_NE(resize_bicubic(im, 0, 10).status().message().find("target size"), std::string::npos);
  Image broken = im;
  broken.rgb.pop_back();
  EXPECT_NE(resize_bicubic(broken, 5, 5).status().message().find("needs 600 RGB bytes"), std::string::npos);
}

// ---- flattening, threads, errors --------------------------------------------------------------------------------

TEST(ImageProcessor, FlatteningOrderOnCoordinateImage) {
  // 128x64 (no resize with min 1024): R = x, G = y, B = x + y (mod 256). Grid (1, 4, 8), m = 2.
  Image im = Image::zeros(128, 64);
  for (int64_t y = 0; y < 64; ++y)
    for (int64_t x = 0; x < 128; ++x) {
      im.row(y)[3 * x] = uint8_t(x);
      im.row(y)[3 * x + 1] = uint8_t(y);
      im.row(y)[3 * x + 2] = uint8_t(x + y);
    }
  auto r = process_image(im, config_with(1024, 1 << 24));
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->grid.h, 4);
  ASSERT_EQ(r->grid.w, 8);
  const int64_t P = 16, m = 2, gw = 8;
  int64_t checked = 0;
  for (int64_t q = 0; q < r->num_patches(); ++q) {
    // q = ((block_row·(gw/m) + block_col)·m + in_row)·m + in_col
    const int64_t in_col = q % m, in_row = q / m % m, block = q / (m * m);
    const int64_t row0 = (block / (gw / m) * m + in_row) * P, col0 = (block % (gw / m) * m + in_col) * P;
    for (int64_t c = 0; c < 3; ++c)
      for (int64_t t = 0; t < 2; ++t)
        for (int64_t py = 0; py < P; ++py)
          for (int64_t px = 0; px < P; ++px) {
            const int64_t x = col0 + px, y = row0 + py;
            const uint8_t v = c == 0 ? uint8_t(x) : c == 1 ? uint8_t(y) : uint8_t(x + y);
            const float got = r->pixel_values[size_t(q * 1536 + ((c * 2 + t) * P + py) * P + px)];
            if (got != fast_value(v)) {
              ADD_FAILURE() << "patch " << q << " c " << c << " t " << t << " (" << py << ", " << px << "): " << got
                            << " expected level " << int(v);
              return;
            }
            ++checked;
          }
  }
  EXPECT_EQ(checked, 32 * 1536);
}

TEST(ImageProcessor, ThreadsNeverChangeABit) {
  std::mt19937_64 rng(5);
  const Image im = random_image(rng, 333, 197, true);
  const auto cfg = config_with(4096, 1 << 16);  // downscale
  auto one = process_image(im, cfg);
  ASSERT_TRUE(one.ok());
  for (int threads : {2, 3, 5}) {
    Context ctx;
    ctx.num_threads = threads;
    auto many = process_image(ctx, im, cfg);
    ASSERT_TRUE(many.ok());
    EXPECT_EQ(0, std::memcmp(one->pixel_values.data(), many->pixel_values.data(),
                             one->pixel_values.size() * sizeof(float)))
        << threads << " threads";
  }
}

TEST(ImageProcessor, IntoCallerMemoryAndPlan) {
  std::mt19937_64 rng(9);
  const Image im = random_image(rng, 150, 90, true);
  const auto cfg = config_with(1024, 1 << 24);
  auto full = process_image(im, cfg);
  ASSERT_TRUE(full.ok());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(full->pixel_values.data()) % 64, 0u);  // the streaming-store path
  auto plan = plan_image(im.height, im.width, cfg);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->grid.h, full->grid.h);
  EXPECT_EQ(plan->grid.w, full->grid.w);
  EXPECT_EQ(plan->num_tokens, full->num_tokens);
  ASSERT_EQ(plan->num_values(), int64_t(full->pixel_values.size()));
  // Into a buffer at an odd offset (not 64-byte aligned: plain stores), between two guard values.
  std::vector<float> buf(size_t(plan->num_values() + 2), -7.f);
  ASSERT_TRUE(process_image_into(Context{}, im, cfg, std::span<float>(buf.data() + 1, size_t(plan->num_values()))).ok());
  EXPECT_EQ(buf.front(), -7.f);
  EXPECT_EQ(buf.back(), -7.f);
  EXPECT_EQ(0, std::memcmp(buf.data() + 1, full->pixel_values.data(), full->pixel_values.size() * sizeof(float)));
  auto wrong = process_image_into(Context{}, im, cfg, std::span<float>(buf.data(), buf.size()));
  EXPECT_NE(wrong.message().find("needs " + std::to_string(plan->num_values())), std::string::npos) << wrong.message();
  EXPECT_FALSE(plan_image(1, 300, cfg).ok());
}

TEST(ImageProcessor, ConfigurableMeanAndStd) {
  // x = (v − 255·mean) / (255·std) in float32, per channel.
  ImageProcessorConfig cfg = config_with(1024, 1 << 24);
  cfg.image_mean = {0.48145466f, 0.4578275f, 0.40821073f};
  cfg.image_std = {0.26862954f, 0.26130258f, 0.27577711f};
  Image im = Image::zeros(32, 32);
  for (size_t i = 0; i < im.rgb.size(); ++i) im.rgb[i] = uint8_t(i * 7);
  auto r = process_image(im, cfg);
  ASSERT_TRUE(r.ok());
  const float k = static_cast<float>(1.0 / (1.0 / 255.0));
  for (int64_t c = 0; c < 3; ++c) {
    const uint8_t v = im.at(5, 3, int(c));  // patch q = 0 (in_row 0, in_col 0), row 3, col 5
    const float want = (float(v) - cfg.image_mean[size_t(c)] * k) / (cfg.image_std[size_t(c)] * k);
    EXPECT_EQ(r->pixel_values[size_t((c * 2 + 1) * 256 + 3 * 16 + 5)], want) << c;
  }
}

TEST(ImageProcessor, ErrorsNameTheProblem) {
  auto msg = [](const Status& s) { return s.message(); };
  ImageProcessorConfig bad;
  bad.patch_size = 0;
  EXPECT_NE(msg(process_image(Image::zeros(64, 64), bad).status()).find("patch_size (0)"), std::string::npos);
  bad = ImageProcessorConfig{};
  bad.image_std[1] = 0.f;
  EXPECT_NE(msg(process_image(Image::zeros(64, 64), bad).status()).find("image_std[1]"), std::string::npos);
  bad = ImageProcessorConfig{};
  bad.min_pixels = 0;
  EXPECT_NE(msg(process_image(Image::zeros(64, 64), bad).status()).find("min_pixels"), std::string::npos);
  EXPECT_NE(msg(process_image(Image::zeros(1, 300), ImageProcessorConfig{}).status()).find("aspect ratio 300"),
            std::string::npos);
  EXPECT_NE(msg(process_image(Image{}, ImageProcessorConfig{}).status()).find("empty"), std::string::npos);

  VideoProcessorConfig vcfg;
  std::vector<Image> frames(6, Image::zeros(64, 64));
  EXPECT_NE(msg(process_video(frames, 0.0, vcfg).status()).find("video_fps"), std::string::npos);
  EXPECT_NE(msg(process_video(std::span<const Image>(), 30.0, vcfg).status()).find("no frames"), std::string::npos);
  frames[3] = Image::zeros(64, 32);
  EXPECT_NE(msg(process_video(frames, 30.0, vcfg).status()).find("frame 3 is 64x32"), std::string::npos);
  std::vector<Image> one(1, Image::zeros(64, 64));  // samples 1 frame < temporal_patch_size
  EXPECT_NE(msg(process_video(one, 30.0, vcfg).status()).find("temporal_factor"), std::string::npos);
  std::vector<Image> tiny(8, Image::zeros(20, 64));
  EXPECT_NE(msg(process_video(tiny, 30.0, vcfg).status()).find("smaller than the factor"), std::string::npos);
  vcfg.spatial.merge_size = 1;
  EXPECT_NE(msg(process_video(std::vector<Image>(8, Image::zeros(64, 64)), 30.0, vcfg).status()).find("merge_size"),
            std::string::npos);
}

TEST(VideoProcessor, OddFrameCountRepeatsTheLastFrame) {
  // 5 distinct constant frames at 2 fps with fps 2 sampling: all 5 kept, padded with frame 4 -> gt = 3.
  std::vector<Image> frames;
  for (int i = 0; i < 5; ++i) {
    Image f = Image::zeros(64, 64);
    std::fill(f.rgb.begin(), f.rgb.end(), uint8_t(40 * i));
    frames.push_back(std::move(f));
  }
  VideoProcessorConfig cfg;
  auto r = process_video(frames, 2.0, cfg);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->frame_indices, (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(r->grid.t, 3);
  ASSERT_EQ(r->timestamp_texts.size(), 3u);
  EXPECT_EQ(r->timestamp_texts[0], "<0.2 seconds>");  // (0 + 0.5) / 2 = 0.25 -> half to even
  EXPECT_EQ(r->timestamp_texts[2], "<2.0 seconds>");  // indices 4, 4 (padded)
  const int64_t per_group = r->grid.h * r->grid.w;
  for (int64_t g = 0; g < 3; ++g)
    for (int64_t t = 0; t < 2; ++t) {
      const int64_t frame = std::min<int64_t>(2 * g + t, 4);
      const float v = r->pixel_values[size_t(g * per_group * 1536 + t * 256)];  // c 0, (row 0, col 0)
      EXPECT_EQ(v, fast_value(uint8_t(40 * frame))) << "group " << g << " t " << t;
    }
}

}  // namespace
}  // namespace vlpar::data
