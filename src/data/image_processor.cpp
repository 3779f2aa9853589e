// Qwen3-VL image/video processor: smart_resize, torchvision-exact uint8 bicubic resize, normalise, flatten.
// See include/vlpar/data/image_processor.hpp for the algorithm and the parity statement.
#include "vlpar/data/image_processor.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

// The double-precision weight computation must round like torch's (compiled without contraction of the few
// multiply-adds that matter); keep the compiler from fusing them into FMAs.
#if defined(__clang__)
#define VLPAR_NO_FP_CONTRACT
#define VLPAR_NO_FP_CONTRACT_BODY _Pragma("clang fp contract(off)")
#elif defined(__GNUC__)
#define VLPAR_NO_FP_CONTRACT __attribute__((optimize("fp-contract=off")))
#define VLPAR_NO_FP_CONTRACT_BODY
#else
#define VLPAR_NO_FP_CONTRACT
#define VLPAR_NO_FP_CONTRACT_BODY
#endif

namespace vlpar::data {

namespace {

constexpr int kChannels = 3;

// ---- resampling weights ---------------------------------------------------------------------------------------
// torch ATen/native/cpu/UpSampleKernel.cpp, HelperInterpCubic::compute_index_ranges_int16_weights with
// antialias=true and align_corners=false, in the same operation order.

struct Axis {
  int64_t in = 0, out = 0;
  int taps = 0;                   // row stride of `weights` (torch's max_interp_size)
  int precision = 0;              // weights are w·2^precision
  std::vector<int32_t> start;     // [out] first source index
  std::vector<int32_t> count;     // [out] taps used (<= taps)
  std::vector<int16_t> weights;   // [out, taps]
};

// Keys cubic convolution with a = −0.5 (PIL's BICUBIC; torch uses it when antialias=True).
VLPAR_NO_FP_CONTRACT double keys_cubic(double x) {
  VLPAR_NO_FP_CONTRACT_BODY
  constexpr double a = -0.5;
  x = std::abs(x);
  if (x < 1.0) return ((a + 2) * x - (a + 3)) * x * x + 1;
  if (x < 2.0) return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a;
  return 0.0;
}

VLPAR_NO_FP_CONTRACT Axis make_axis(int64_t in, int64_t out) {
  VLPAR_NO_FP_CONTRACT_BODY
  Axis ax;
  ax.in = in;
  ax.out = out;
  const double scale = static_cast<double>(in) / static_cast<double>(out);
  const double support = scale >= 1.0 ? (4 * 0.5) * scale : 4 * 0.5;  // interp_size 4
  ax.taps = static_cast<int>(std::ceil(support)) * 2 + 1;
  const double invscale = scale >= 1.0 ? 1.0 / scale : 1.0;
  ax.start.resize(static_cast<size_t>(out));
  ax.count.resize(static_cast<size_t>(out));
  std::vector<double> w(static_cast<size_t>(out * ax.taps), 0.0);
  double wt_max = 0.0;
  for (int64_t i = 0; i < out; ++i) {
    const double center = scale * (static_cast<double>(i) + 0.5);
    const int64_t xmin = std::max(static_cast<int64_t>(center - support + 0.5), int64_t{0});
    int64_t xsize = std::min(static_cast<int64_t>(center + support + 0.5), in) - xmin;
    xsize = std::clamp(xsize, int64_t{0}, static_cast<int64_t>(ax.taps));
    double* wi = w.data() + i * ax.taps;
    double total = 0.0;
    for (int64_t j = 0; j < xsize; ++j) {
      wi[j] = keys_cubic((static_cast<double>(j + xmin) - center + 0.5) * invscale);
      total += wi[j];
    }
    if (total != 0.0) {
      for (int64_t j = 0; j < xsize; ++j) {
        wi[j] /= total;
        wt_max = std::max(wt_max, wi[j]);
      }
    }
    ax.start[static_cast<size_t>(i)] = static_cast<int32_t>(xmin);
    ax.count[static_cast<size_t>(i)] = static_cast<int32_t>(xsize);
  }
  // The largest precision (< 22) whose doubled value would still fit wt_max into int16.
  int p = 0;
  for (p = 0; p < 22; ++p) {
    const int next = static_cast<int>(0.5 + wt_max * (1 << (p + 1)));
    if (next >= (1 << 15)) break;
  }
  ax.precision = p;
  ax.weights.resize(w.size());
  for (size_t k = 0; k < w.size(); ++k) {
    const double v = w[k] * (1 << p);
    ax.weights[k] = static_cast<int16_t>(v < 0 ? static_cast<int>(-0.5 + v) : static_cast<int>(0.5 + v));
  }
  return ax;
}

inline uint8_t clamp_u8(int32_t v) { return static_cast<uint8_t>(std::clamp(v, 0, 255)); }

// Horizontal pass over rows [r0, r1): dst[r][x][c] = clamp((2^(p−1) + Σ_k w[x][k]·src[r][start[x]+k][c]) >> p).
void resample_rows(const uint8_t* src, int64_t src_stride, uint8_t* dst, int64_t dst_stride, int64_t r0, int64_t r1,
                   const Axis& ax) {
  const int32_t half = 1 << (ax.precision - 1);
  const int p = ax.precision;
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* s = src + r * src_stride;
    uint8_t* d = dst + r * dst_stride;
    for (int64_t x = 0; x < ax.out; ++x) {
      const int16_t* w = ax.weights.data() + x * ax.taps;
      const uint8_t* px = s + static_cast<int64_t>(ax.start[static_cast<size_t>(x)]) * kChannels;
      const int n = ax.count[static_cast<size_t>(x)];
      int32_t a0 = half, a1 = half, a2 = half;
      for (int k = 0; k < n; ++k) {
        const int32_t wk = w[k];
        a0 += px[3 * k + 0] * wk;
        a1 += px[3 * k + 1] * wk;
        a2 += px[3 * k + 2] * wk;
      }
      d[3 * x + 0] = clamp_u8(a0 >> p);
      d[3 * x + 1] = clamp_u8(a1 >> p);
      d[3 * x + 2] = clamp_u8(a2 >> p);
    }
  }
}

// Vertical pass for output rows [y0, y1): dst[y][i] = clamp((2^(p−1) + Σ_k w[y][k]·src[start[y]+k][i]) >> p),
// i over the row's bytes (the same filter for every channel), in column blocks that stay in registers/L1.
void resample_cols(const uint8_t* src, uint8_t* dst, int64_t row_bytes, int64_t y0, int64_t y1, const Axis& ax) {
  constexpr int64_t kBlock = 256;
  const int32_t half = 1 << (ax.precision - 1);
  const int p = ax.precision;
  alignas(64) int32_t acc[kBlock];
  for (int64_t y = y0; y < y1; ++y) {
    const int16_t* w = ax.weights.data() + y * ax.taps;
    const int64_t s0 = ax.start[static_cast<size_t>(y)];
    const int n = ax.count[static_cast<size_t>(y)];
    uint8_t* d = dst + y * row_bytes;
    for (int64_t b = 0; b < row_bytes; b += kBlock) {
      const int64_t len = std::min(kBlock, row_bytes - b);
      for (int64_t i = 0; i < len; ++i) acc[i] = half;
      for (int k = 0; k < n; ++k) {
        const uint8_t* s = src + (s0 + k) * row_bytes + b;
        const int32_t wk = w[k];
        for (int64_t i = 0; i < len; ++i) acc[i] += s[i] * wk;
      }
      for (int64_t i = 0; i < len; ++i) d[b + i] = clamp_u8(acc[i] >> p);
    }
  }
}

// ---- normalise + flatten ------------------------------------------------------------------------------------

// lut[c][v] = (v − mean'_c) / std'_c in float32, with mean' = mean·(1/rescale) and std' likewise computed as
// torch does for float32 tensors (the scalar 1/(1/255) = 255.00000000000003 is cast to float first).
struct NormLut {
  float v[kChannels][256];
};

NormLut make_lut(const ImageProcessorConfig& cfg) {
  NormLut lut;
  const float inv_rescale = static_cast<float>(1.0 / (1.0 / 255.0));
  for (int c = 0; c < kChannels; ++c) {
    const float mean = cfg.image_mean[static_cast<size_t>(c)] * inv_rescale;
    const float std = cfg.image_std[static_cast<size_t>(c)] * inv_rescale;
    for (int v = 0; v < 256; ++v) lut.v[c][v] = (static_cast<float>(v) - mean) / std;
  }
  return lut;
}

// Writes pixel_values [gt·gh·gw, C·Tp·P·P] from gt·Tp frames (each gh·P × gw·P, frames[g·Tp + t]).
// Work item u = (g, gy): one row of patches of one temporal group. For each frame of the group, its P image rows
// are normalised and split into planes once ([C][P][W] floats, L2-sized); each patch then copies P runs of P
// floats per (c, t) from them. Every output element is written exactly once, so any split is deterministic.
void flatten_patches(const Context& ctx, std::span<const Image* const> frames, int64_t Tp, int64_t P, int64_t m,
                     const NormLut& lut, float* out) {
  const int64_t gt = static_cast<int64_t>(frames.size()) / Tp;
  const int64_t W = frames[0]->width;
  const int64_t gh = frames[0]->height / P, gw = W / P;
  const int64_t patch_dim = kChannels * Tp * P * P;
  const int64_t frame_plane = kChannels * P * W;  // floats of one frame's planes
  parallel_for(ctx, gt * gh, [&](int64_t u0, int64_t u1) {
    std::vector<float> planes(static_cast<size_t>(Tp * frame_plane));
    for (int64_t u = u0; u < u1; ++u) {
      const int64_t g = u / gh, gy = u % gh;
      for (int64_t t = 0; t < Tp; ++t) {
        const Image* f = frames[static_cast<size_t>(g * Tp + t)];
        float* pl = planes.data() + t * frame_plane;
        if (t > 0 && f == frames[static_cast<size_t>(g * Tp + t - 1)]) {  // repeated frame: same values
          std::memcpy(pl, pl - frame_plane, static_cast<size_t>(frame_plane) * sizeof(float));
          continue;
        }
        for (int64_t py = 0; py < P; ++py) {
          const uint8_t* row = f->row(gy * P + py);
          float* p0 = pl + (0 * P + py) * W;
          float* p1 = pl + (1 * P + py) * W;
          float* p2 = pl + (2 * P + py) * W;
          for (int64_t x = 0; x < W; ++x) {
            p0[x] = lut.v[0][row[3 * x + 0]];
            p1[x] = lut.v[1][row[3 * x + 1]];
            p2[x] = lut.v[2][row[3 * x + 2]];
          }
        }
      }
      const int64_t br = gy / m, i = gy % m;
      for (int64_t gx = 0; gx < gw; ++gx) {
        const int64_t bc = gx / m, j = gx % m;
        const int64_t q = g * gh * gw + ((br * (gw / m) + bc) * m + i) * m + j;
        float* dst = out + q * patch_dim;
        for (int64_t c = 0; c < kChannels; ++c)
          for (int64_t t = 0; t < Tp; ++t)
            for (int64_t py = 0; py < P; ++py) {
              const float* src = planes.data() + t * frame_plane + (c * P + py) * W + gx * P;
              std::memcpy(dst + ((c * Tp + t) * P + py) * P, src, static_cast<size_t>(P) * sizeof(float));
            }
      }
    }
  });
}

Status check_spatial(const ImageProcessorConfig& c, const char* what) {
  VLPAR_CHECK(c.patch_size >= 1 && c.temporal_patch_size >= 1 && c.merge_size >= 1,
              "{}: patch_size ({}), temporal_patch_size ({}) and merge_size ({}) must be at least 1", what,
              c.patch_size, c.temporal_patch_size, c.merge_size);
  VLPAR_CHECK(c.patch_size <= 1024 && c.merge_size <= 64 && c.temporal_patch_size <= 64,
              "{}: patch_size {} / merge_size {} / temporal_patch_size {} are implausibly large", what, c.patch_size,
              c.merge_size, c.temporal_patch_size);
  VLPAR_CHECK(c.min_pixels >= 1 && c.max_pixels >= 1,
              "{}: min_pixels ({}) and max_pixels ({}) must be at least 1", what, c.min_pixels, c.max_pixels);
  for (int ch = 0; ch < kChannels; ++ch) {
    const float mean = c.image_mean[static_cast<size_t>(ch)], std = c.image_std[static_cast<size_t>(ch)];
    VLPAR_CHECK(std::isfinite(mean) && std::isfinite(std) && std > 0,
                "{}: image_mean[{}] = {} must be finite and image_std[{}] = {} positive", what, ch, mean, ch, std);
  }
  return Status::Ok();
}

// Python round() of a double: half to even (nearbyint in the default rounding mode).
int64_t round_half_even(double x) { return static_cast<int64_t>(std::nearbyint(x)); }

}  // namespace

Status ImageProcessorConfig::validate() const { return check_spatial(*this, "ImageProcessorConfig"); }

Status VideoProcessorConfig::validate() const {
  VLPAR_RETURN_IF_ERROR(check_spatial(spatial, "VideoProcessorConfig"));
  return sampling.validate();
}

Result<ResizedSize> smart_resize(int64_t height, int64_t width, int64_t factor, int64_t min_pixels,
                                 int64_t max_pixels) {
  VLPAR_CHECK(height >= 1 && width >= 1 && factor >= 1, "smart_resize: height {}, width {}, factor {} must be >= 1",
              height, width, factor);
  VLPAR_CHECK(min_pixels >= 1 && max_pixels >= 1, "smart_resize: min_pixels {} and max_pixels {} must be >= 1",
              min_pixels, max_pixels);
  const double H = static_cast<double>(height), W = static_cast<double>(width), f = static_cast<double>(factor);
  const double ratio = static_cast<double>(std::max(height, width)) / static_cast<double>(std::min(height, width));
  VLPAR_CHECK(!(ratio > 200), "smart_resize: {}x{} (HxW) has aspect ratio {} above the limit 200", height, width,
              ratio);
  int64_t h = round_half_even(H / f) * factor;
  int64_t w = round_half_even(W / f) * factor;
  if (h * w > max_pixels) {
    const double beta = std::sqrt(H * W / static_cast<double>(max_pixels));
    h = std::max(factor, static_cast<int64_t>(std::floor(H / beta / f)) * factor);
    w = std::max(factor, static_cast<int64_t>(std::floor(W / beta / f)) * factor);
  } else if (h * w < min_pixels) {
    const double beta = std::sqrt(static_cast<double>(min_pixels) / (H * W));
    h = static_cast<int64_t>(std::ceil(H * beta / f)) * factor;
    w = static_cast<int64_t>(std::ceil(W * beta / f)) * factor;
  }
  return ResizedSize{h, w};
}

Result<ResizedSize> smart_resize_video(int64_t num_frames, int64_t height, int64_t width, int64_t temporal_factor,
                                       int64_t factor, int64_t min_pixels, int64_t max_pixels) {
  VLPAR_CHECK(temporal_factor >= 1 && factor >= 1, "smart_resize_video: temporal_factor {} and factor {} must be >= 1",
              temporal_factor, factor);
  VLPAR_CHECK(num_frames >= temporal_factor, "smart_resize_video: {} frames, need at least temporal_factor = {}",
              num_frames, temporal_factor);
  VLPAR_CHECK(height >= factor && width >= factor,
              "smart_resize_video: frames of {}x{} (HxW) are smaller than the factor {}", height, width, factor);
  VLPAR_CHECK(min_pixels >= 1 && max_pixels >= 1, "smart_resize_video: min_pixels {} and max_pixels {} must be >= 1",
              min_pixels, max_pixels);
  const double T = static_cast<double>(num_frames), H = static_cast<double>(height), W = static_cast<double>(width);
  const double f = static_cast<double>(factor);
  const double ratio = static_cast<double>(std::max(height, width)) / static_cast<double>(std::min(height, width));
  VLPAR_CHECK(!(ratio > 200), "smart_resize_video: {}x{} (HxW) has aspect ratio {} above the limit 200", height,
              width, ratio);
  int64_t h = round_half_even(H / f) * factor;
  int64_t w = round_half_even(W / f) * factor;
  const int64_t t = round_half_even(T / static_cast<double>(temporal_factor)) * temporal_factor;
  // Python: (num_frames * height * width) is an exact integer product, then true division.
  const double thw = static_cast<double>(num_frames * height * width);
  if (t * h * w > max_pixels) {
    const double beta = std::sqrt(thw / static_cast<double>(max_pixels));
    h = std::max(factor, static_cast<int64_t>(std::floor(H / beta / f)) * factor);
    w = std::max(factor, static_cast<int64_t>(std::floor(W / beta / f)) * factor);
  } else if (t * h * w < min_pixels) {
    const double beta = std::sqrt(static_cast<double>(min_pixels) / thw);
    h = static_cast<int64_t>(std::ceil(H * beta / f)) * factor;
    w = static_cast<int64_t>(std::ceil(W * beta / f)) * factor;
  }
  return ResizedSize{h, w};
}

Result<Image> resize_bicubic(const Context& ctx, const Image& image, int64_t width, int64_t height) {
  VLPAR_RETURN_IF_ERROR(image.validate("resize_bicubic"));
  VLPAR_CHECK(width >= 1 && height >= 1 && width <= (int64_t{1} << 24) && height <= (int64_t{1} << 24),
              "resize_bicubic: target size {}x{} (WxH) must be within 1..2^24", width, height);
  if (width == image.width && height == image.height) return image;
  const bool horizontal = width != image.width, vertical = height != image.height;
  // Horizontal pass (when the width changes) into `tmp` [H, width, 3], then vertical into `out`.
  Image tmp;
  const Image* src = &image;
  if (horizontal) {
    const Axis ax = make_axis(image.width, width);
    tmp = Image::zeros(width, image.height);
    parallel_for(ctx, image.height, [&](int64_t r0, int64_t r1) {
      resample_rows(image.rgb.data(), image.row_bytes(), tmp.rgb.data(), tmp.row_bytes(), r0, r1, ax);
    });
    if (!vertical) return tmp;
    src = &tmp;
  }
  const Axis ay = make_axis(src->height, height);
  Image out = Image::zeros(width, height);
  parallel_for(ctx, height, [&](int64_t y0, int64_t y1) {
    resample_cols(src->rgb.data(), out.rgb.data(), out.row_bytes(), y0, y1, ay);
  });
  return out;
}

Result<Image> resize_bicubic(const Image& image, int64_t width, int64_t height) {
  return resize_bicubic(Context{}, image, width, height);
}

Result<ProcessedImage> process_image(const Context& ctx, const Image& image, const ImageProcessorConfig& config) {
  VLPAR_RETURN_IF_ERROR(config.validate());
  VLPAR_RETURN_IF_ERROR(image.validate("process_image"));
  VLPAR_ASSIGN_OR_RETURN(const ResizedSize rs, smart_resize(image.height, image.width, config.factor(),
                                                            config.min_pixels, config.max_pixels));
  Image resized;
  const Image* src = &image;
  if (rs.height != image.height || rs.width != image.width) {
    VLPAR_ASSIGN_OR_RETURN(resized, resize_bicubic(ctx, image, rs.width, rs.height));
    src = &resized;
  }
  const int64_t P = config.patch_size, Tp = config.temporal_patch_size, m = config.merge_size;
  ProcessedImage out;
  out.grid = VisionGrid{1, rs.height / P, rs.width / P};
  out.resized_height = rs.height;
  out.resized_width = rs.width;
  out.patch_dim = kChannels * Tp * P * P;
  out.num_tokens = out.grid.patches() / (m * m);
  out.pixel_values.resize(static_cast<size_t>(out.grid.patches() * out.patch_dim));
  // One image is one frame, repeated Tp times.
  const std::vector<const Image*> frames(static_cast<size_t>(Tp), src);
  flatten_patches(ctx, frames, Tp, P, m, make_lut(config), out.pixel_values.data());
  return out;
}

Result<ProcessedImage> process_image(const Image& image, const ImageProcessorConfig& config) {
  return process_image(Context{}, image, config);
}

Result<ProcessedVideo> process_video(const Context& ctx, std::span<const Image> frames, double video_fps,
                                     const VideoProcessorConfig& config) {
  VLPAR_RETURN_IF_ERROR(config.validate());
  const ImageProcessorConfig& sp = config.spatial;
  VLPAR_CHECK(!frames.empty(), "process_video: the video has no frames");
  VLPAR_CHECK(std::isfinite(video_fps) && video_fps > 0, "process_video: video_fps must be positive, got {}",
              video_fps);
  VLPAR_CHECK(sp.merge_size == sp.temporal_patch_size,
              "process_video: HF groups timestamps by merge_size ({}) but frames by temporal_patch_size ({}); "
              "they must be equal",
              sp.merge_size, sp.temporal_patch_size);
  for (size_t i = 0; i < frames.size(); ++i) {
    VLPAR_RETURN_IF_ERROR(frames[i].validate(fmt::format("process_video frame {}", i)));
    VLPAR_CHECK(frames[i].width == frames[0].width && frames[i].height == frames[0].height,
                "process_video: frame {} is {}x{} (WxH) but frame 0 is {}x{}", i, frames[i].width, frames[i].height,
                frames[0].width, frames[0].height);
  }
  ProcessedVideo out;
  VLPAR_ASSIGN_OR_RETURN(out.frame_indices,
                         sample_frame_indices(static_cast<int64_t>(frames.size()), video_fps, config.sampling));
  const int64_t T = static_cast<int64_t>(out.frame_indices.size());
  const int64_t P = sp.patch_size, Tp = sp.temporal_patch_size, m = sp.merge_size;
  VLPAR_ASSIGN_OR_RETURN(const ResizedSize rs,
                         smart_resize_video(T, frames[0].height, frames[0].width, Tp, sp.factor(), sp.min_pixels,
                                            sp.max_pixels));
  // Resize the sampled frames (a frame sampled twice is resized once).
  std::vector<Image> resized(static_cast<size_t>(T));
  std::vector<const Image*> group(static_cast<size_t>((T + Tp - 1) / Tp * Tp));
  const bool same_size = rs.height == frames[0].height && rs.width == frames[0].width;
  for (int64_t i = 0; i < T; ++i) {
    const Image& f = frames[static_cast<size_t>(out.frame_indices[static_cast<size_t>(i)])];
    if (same_size) {
      group[static_cast<size_t>(i)] = &f;
    } else if (i > 0 && out.frame_indices[static_cast<size_t>(i)] == out.frame_indices[static_cast<size_t>(i - 1)]) {
      group[static_cast<size_t>(i)] = group[static_cast<size_t>(i - 1)];
    } else {
      VLPAR_ASSIGN_OR_RETURN(resized[static_cast<size_t>(i)], resize_bicubic(ctx, f, rs.width, rs.height));
      group[static_cast<size_t>(i)] = &resized[static_cast<size_t>(i)];
    }
  }
  for (size_t i = static_cast<size_t>(T); i < group.size(); ++i) group[i] = group[static_cast<size_t>(T - 1)];

  const int64_t gt = static_cast<int64_t>(group.size()) / Tp;
  out.grid = VisionGrid{gt, rs.height / P, rs.width / P};
  out.resized_height = rs.height;
  out.resized_width = rs.width;
  out.patch_dim = kChannels * Tp * P * P;
  out.num_tokens = out.grid.patches() / (m * m);
  out.tokens_per_temporal_patch = out.grid.frame_patches() / (m * m);
  out.pixel_values.resize(static_cast<size_t>(out.grid.patches() * out.patch_dim));
  flatten_patches(ctx, group, Tp, P, m, make_lut(sp), out.pixel_values.data());

  VLPAR_ASSIGN_OR_RETURN(out.timestamps, temporal_patch_timestamps(out.frame_indices, video_fps, m));
  VLPAR_CHECK(static_cast<int64_t>(out.timestamps.size()) == gt, "process_video: {} timestamps for {} temporal patches",
              out.timestamps.size(), gt);
  for (double s : out.timestamps) out.timestamp_texts.push_back(timestamp_text(s));
  return out;
}

Result<ProcessedVideo> process_video(std::span<const Image> frames, double video_fps,
                                     const VideoProcessorConfig& config) {
  return process_video(Context{}, frames, video_fps, config);
}

}  // namespace vlpar::data
