// Qwen3-VL image/video processor: smart_resize, torchvision-exact uint8 bicubic resize, normalise, flatten.
// See include/vlpar/data/image_processor.hpp for the algorithm and the parity statement.
#include "vlpar/data/image_processor.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
// The SIMD passes are compiled for their instruction sets with target attributes and chosen at run time from the
// CPU path of vlpar::kernels (cpu_isa.hpp): the library itself is built for the baseline x86-64.
#define VLPAR_X86_SIMD 1
#define VLPAR_TARGET(isa) __attribute__((target(isa)))
#endif

#include "vlpar/core/cpu_isa.hpp"
#if defined(__linux__)
#include <sys/mman.h>
#endif

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

namespace detail {

namespace {
constexpr size_t kHugeThreshold = size_t{4} << 20;
constexpr size_t kHugePage = size_t{2} << 20;
}  // namespace

void* allocate_pixel_memory(size_t bytes) {
  if (bytes < kHugeThreshold) return ::operator new(bytes, std::align_val_t{64});
  const size_t rounded = (bytes + kHugePage - 1) / kHugePage * kHugePage;
  void* p = ::operator new(rounded, std::align_val_t{kHugePage});
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  (void)madvise(p, rounded, MADV_HUGEPAGE);  // advice only: without THP the memory works the same
#endif
  return p;
}

void free_pixel_memory(void* p, size_t bytes) noexcept {
  if (bytes < kHugeThreshold) return ::operator delete(p, std::align_val_t{64});
  ::operator delete(p, std::align_val_t{kHugePage});
}

}  // namespace detail

namespace {

constexpr int kChannels = 3;

// A read-only RGB8 frame: an Image's pixels or an internal resized buffer.
struct Frame {
  const uint8_t* rgb = nullptr;  // [height, width, 3]
  int64_t width = 0, height = 0;
  const uint8_t* row(int64_t y) const { return rgb + y * width * kChannels; }
};
Frame frame_of(const Image& im) { return Frame{im.rgb.data(), im.width, im.height}; }

using Bytes = std::vector<uint8_t, UninitializedAllocator<uint8_t>>;

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
  // SIMD layout of the same weights: per output, `pairs` (even) groups of 8 int16 {w_k, w_k+1} x 3 channels + 0, 0
  // for the taps k = 2j, 2j+1 (zero past `count`), so one pmaddwd combines two taps of an interleaved RGB pixel pair.
  int pairs = 0;
  std::vector<int16_t> pair_weights;  // [out, pairs, 8]
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
  ax.pairs = ((ax.taps + 1) / 2 + 1) / 2 * 2;
  ax.pair_weights.assign(static_cast<size_t>(out * ax.pairs * 8), 0);
  for (int64_t i = 0; i < out; ++i) {
    const int n = ax.count[static_cast<size_t>(i)];
    for (int k = 0; k < n; ++k) {
      int16_t* pw = ax.pair_weights.data() + (i * ax.pairs + k / 2) * 8;
      for (int c = 0; c < kChannels; ++c) pw[2 * c + k % 2] = ax.weights[static_cast<size_t>(i * ax.taps + k)];
    }
  }
  return ax;
}

inline uint8_t clamp_u8(int32_t v) { return static_cast<uint8_t>(std::clamp(v, 0, 255)); }

// Horizontal pass, one row: dst[x][c] = clamp((2^(p−1) + Σ_k w[x][k]·src[start[x]+k][c]) >> p).
void resample_row_scalar(const uint8_t* s, uint8_t* d, const Axis& ax) {
  const int32_t half = 1 << (ax.precision - 1);
  const int p = ax.precision;
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

#if defined(VLPAR_X86_SIMD)
// The same with SSSE3 (run on the avx2 and avx512 paths): one 16-byte load holds 4 taps (12 bytes) of an output pixel; two pshufb spread taps
// (k, k+1) and (k+2, k+3) into int16 pairs {r_k, r_k+1, g_k, g_k+1, b_k, b_k+1, 0, 0} and pmaddwd with the pair
// weights adds them into int32 {r, g, b, 0}. Integer sums in any order are exact, so this equals the scalar pass.
// Reads 12·ceil(count/4) + 4 <= 3·count + 13 bytes from the pixel's first tap: at most 13 bytes past the row.
VLPAR_TARGET("ssse3") void resample_row_simd(const uint8_t* s, uint8_t* d, const Axis& ax) {
  const __m128i lo = _mm_setr_epi8(0, -1, 3, -1, 1, -1, 4, -1, 2, -1, 5, -1, -1, -1, -1, -1);
  const __m128i hi = _mm_setr_epi8(6, -1, 9, -1, 7, -1, 10, -1, 8, -1, 11, -1, -1, -1, -1, -1);
  const __m128i half = _mm_set1_epi32(1 << (ax.precision - 1));
  const int p = ax.precision;
  for (int64_t x = 0; x < ax.out; ++x) {
    const uint8_t* px = s + static_cast<int64_t>(ax.start[static_cast<size_t>(x)]) * kChannels;
    const int16_t* pw = ax.pair_weights.data() + x * ax.pairs * 8;
    const int quads = (ax.count[static_cast<size_t>(x)] + 3) / 4;
    __m128i acc = half;
    for (int q = 0; q < quads; ++q) {
      const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(px + 12 * q));
      const __m128i w0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(pw + 16 * q));
      const __m128i w1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(pw + 16 * q + 8));
      acc = _mm_add_epi32(acc, _mm_madd_epi16(_mm_shuffle_epi8(v, lo), w0));
      acc = _mm_add_epi32(acc, _mm_madd_epi16(_mm_shuffle_epi8(v, hi), w1));
    }
    const __m128i packed = _mm_packus_epi16(_mm_packs_epi32(_mm_srai_epi32(acc, p), acc), acc);
    const uint32_t rgb = static_cast<uint32_t>(_mm_cvtsi128_si32(packed));
    std::memcpy(d + 3 * x, &rgb, 3);  // little-endian: R, G, B are the low three bytes
  }
}
#endif

// Horizontal pass over rows [r0, r1) of an image with `rows` rows.
void resample_rows(const uint8_t* src, int64_t src_stride, uint8_t* dst, int64_t dst_stride, int64_t r0, int64_t r1,
                   int64_t rows, const Axis& ax) {
#if defined(VLPAR_X86_SIMD)
  // A SIMD row reads up to 13 bytes past its end (see resample_row_simd), which land in the following rows;
  // the last rows, with fewer than 16 bytes after them, run scalar.
  const bool simd = cpu_isa_active() >= CpuIsa::kAvx2;
  for (int64_t r = r0; r < r1; ++r) {
    if (!simd) {
      resample_row_scalar(src + r * src_stride, dst + r * dst_stride, ax);
      continue;
    }
    if ((rows - 1 - r) * src_stride >= 16) {
      resample_row_simd(src + r * src_stride, dst + r * dst_stride, ax);
    } else {
      resample_row_scalar(src + r * src_stride, dst + r * dst_stride, ax);
    }
  }
#else
  (void)rows;
  for (int64_t r = r0; r < r1; ++r) resample_row_scalar(src + r * src_stride, dst + r * dst_stride, ax);
#endif
}

// Vertical pass for output rows [y0, y1): dst[y][i] = clamp((2^(p−1) + Σ_k w[y][k]·src[start[y]+k][i]) >> p),
// i over the row's bytes (the same filter for every channel), in column blocks that stay in registers/L1.
// Columns [i0, row_bytes) of output row y, scalar.
void resample_col_tail(const uint8_t* src, uint8_t* d, int64_t row_bytes, int64_t i0, int64_t y, const Axis& ax) {
  const int16_t* w = ax.weights.data() + y * ax.taps;
  const int64_t s0 = ax.start[static_cast<size_t>(y)];
  const int n = ax.count[static_cast<size_t>(y)];
  for (int64_t i = i0; i < row_bytes; ++i) {
    int32_t acc = 1 << (ax.precision - 1);
    for (int k = 0; k < n; ++k) acc += src[(s0 + k) * row_bytes + i] * int32_t(w[k]);
    d[i] = clamp_u8(acc >> ax.precision);
  }
}

#if defined(VLPAR_X86_SIMD)
VLPAR_TARGET("avx2")
void resample_cols_avx2(const uint8_t* src, uint8_t* dst, int64_t row_bytes, int64_t y0, int64_t y1, const Axis& ax) {
  // 32 columns at a time: the bytes of source rows k and k+1 are interleaved and widened to int16 pairs
  // {a_i, b_i}, and pmaddwd with the broadcast pair {w_k, w_k+1} adds both taps into int32 per column.
  const __m256i zero = _mm256_setzero_si256();
  const __m256i half = _mm256_set1_epi32(1 << (ax.precision - 1));
  const int p = ax.precision;
  const int64_t simd_end = row_bytes / 32 * 32;
  for (int64_t y = y0; y < y1; ++y) {
    const int16_t* w = ax.weights.data() + y * ax.taps;
    const int64_t s0 = ax.start[static_cast<size_t>(y)];
    const int n = ax.count[static_cast<size_t>(y)];
    uint8_t* d = dst + y * row_bytes;
    for (int64_t i = 0; i < simd_end; i += 32) {
      __m256i a0 = half, a1 = half, a2 = half, a3 = half;
      for (int k = 0; k < n; k += 2) {
        const uint32_t pair = uint32_t(uint16_t(w[k])) | (k + 1 < n ? uint32_t(uint16_t(w[k + 1])) << 16 : 0u);
        const __m256i wv = _mm256_set1_epi32(static_cast<int>(pair));
        const __m256i ra = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + (s0 + k) * row_bytes + i));
        const __m256i rb = k + 1 < n
                               ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + (s0 + k + 1) * row_bytes + i))
                               : zero;
        const __m256i lo = _mm256_unpacklo_epi8(ra, rb), hi = _mm256_unpackhi_epi8(ra, rb);
        a0 = _mm256_add_epi32(a0, _mm256_madd_epi16(_mm256_unpacklo_epi8(lo, zero), wv));
        a1 = _mm256_add_epi32(a1, _mm256_madd_epi16(_mm256_unpackhi_epi8(lo, zero), wv));
        a2 = _mm256_add_epi32(a2, _mm256_madd_epi16(_mm256_unpacklo_epi8(hi, zero), wv));
        a3 = _mm256_add_epi32(a3, _mm256_madd_epi16(_mm256_unpackhi_epi8(hi, zero), wv));
      }
      const __m256i v01 = _mm256_packs_epi32(_mm256_srai_epi32(a0, p), _mm256_srai_epi32(a1, p));
      const __m256i v23 = _mm256_packs_epi32(_mm256_srai_epi32(a2, p), _mm256_srai_epi32(a3, p));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i), _mm256_packus_epi16(v01, v23));
    }
    resample_col_tail(src, d, row_bytes, simd_end, y, ax);
  }
}
#endif

void resample_cols(const uint8_t* src, uint8_t* dst, int64_t row_bytes, int64_t y0, int64_t y1, const Axis& ax) {
#if defined(VLPAR_X86_SIMD)
  if (cpu_isa_active() >= CpuIsa::kAvx2) return resample_cols_avx2(src, dst, row_bytes, y0, y1, ax);
#endif
  for (int64_t y = y0; y < y1; ++y) resample_col_tail(src, dst + y * row_bytes, row_bytes, 0, y, ax);
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

// Copies the P runs of P floats of one patch plane (source rows W floats apart) into the output, contiguous.
// With P = 16, a 64-byte aligned destination and the avx2 or avx512 path, each run is one cache line written with
// non-temporal stores (no read for ownership of output far larger than the caches).
using StreamPatch = void (*)(float* dst, const float* src, int64_t W);
#if defined(VLPAR_X86_SIMD)
VLPAR_TARGET("avx512f") void stream_patch16_avx512(float* dst, const float* src, int64_t W) {
  for (int64_t py = 0; py < 16; ++py) _mm512_stream_ps(dst + py * 16, _mm512_loadu_ps(src + py * W));
}
VLPAR_TARGET("avx") void stream_patch16_avx(float* dst, const float* src, int64_t W) {
  for (int64_t py = 0; py < 16; ++py) {
    _mm256_stream_ps(dst + py * 16, _mm256_loadu_ps(src + py * W));
    _mm256_stream_ps(dst + py * 16 + 8, _mm256_loadu_ps(src + py * W + 8));
  }
}
#endif

StreamPatch stream_patch16() {
#if defined(VLPAR_X86_SIMD)
  switch (cpu_isa_active()) {
    case CpuIsa::kAvx512: return stream_patch16_avx512;
    case CpuIsa::kAvx2: return stream_patch16_avx;
    case CpuIsa::kBase: break;
  }
#endif
  return nullptr;
}

inline void put_patch(float* dst, const float* src, int64_t P, int64_t W, StreamPatch stream) {
  if (stream != nullptr) return stream(dst, src, W);
  for (int64_t py = 0; py < P; ++py) std::memcpy(dst + py * P, src + py * W, static_cast<size_t>(P) * sizeof(float));
}

inline void stream_fence() {
#if defined(VLPAR_X86_SIMD)
  _mm_sfence();  // streaming stores are weakly ordered: complete them before another thread reads the output
#endif
}

// Writes pixel_values [gt·gh·gw, C·Tp·P·P] from gt·Tp frames (each gh·P × gw·P, frames[g·Tp + t]).
// Work item u = (g, gy): one row of patches of one temporal group. Each distinct frame of the group has its P
// image rows normalised and split into planes once ([C][P][W] floats, L2-sized; a repeated frame reuses its
// predecessor's planes); each patch then copies P runs of P floats per (c, t) from them. Every output element is
// written exactly once, so any split over threads gives the same bits.
void flatten_patches(const Context& ctx, std::span<const Frame> frames, int64_t Tp, int64_t P, int64_t m,
                     const NormLut& lut, float* out) {
  const int64_t gt = static_cast<int64_t>(frames.size()) / Tp;
  const int64_t W = frames[0].width;
  const int64_t gh = frames[0].height / P, gw = W / P;
  const int64_t patch_dim = kChannels * Tp * P * P;
  const int64_t frame_plane = kChannels * P * W;  // floats of one frame's planes
  const StreamPatch stream = P == 16 && reinterpret_cast<uintptr_t>(out) % 64 == 0 ? stream_patch16() : nullptr;
  parallel_for(ctx, gt * gh, [&](int64_t u0, int64_t u1) {
    std::vector<float> planes(static_cast<size_t>(Tp * frame_plane));
    std::vector<const float*> plane_of(static_cast<size_t>(Tp));
    for (int64_t u = u0; u < u1; ++u) {
      const int64_t g = u / gh, gy = u % gh;
      for (int64_t t = 0; t < Tp; ++t) {
        const Frame& f = frames[static_cast<size_t>(g * Tp + t)];
        if (t > 0 && f.rgb == frames[static_cast<size_t>(g * Tp + t - 1)].rgb) {  // repeated frame: same values
          plane_of[static_cast<size_t>(t)] = plane_of[static_cast<size_t>(t - 1)];
          continue;
        }
        float* pl = planes.data() + t * frame_plane;
        plane_of[static_cast<size_t>(t)] = pl;
        for (int64_t py = 0; py < P; ++py) {
          const uint8_t* row = f.row(gy * P + py);
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
          for (int64_t t = 0; t < Tp; ++t) {
            const float* src = plane_of[static_cast<size_t>(t)] + c * P * W + gx * P;
            put_patch(dst + (c * Tp + t) * P * P, src, P, W, stream);
          }
      }
    }
    if (stream != nullptr) stream_fence();
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

namespace {

// Resizes `src` into dst [height, width, 3] (see resize_bicubic); the sizes differ. Horizontal pass (when the
// width changes) into an uninitialised scratch [src.height, width, 3], then the vertical pass.
void resize_into(const Context& ctx, Frame src, uint8_t* dst, int64_t width, int64_t height) {
  const bool horizontal = width != src.width, vertical = height != src.height;
  Bytes tmp;
  if (horizontal) {
    const Axis ax = make_axis(src.width, width);
    uint8_t* h_out = dst;
    if (vertical) {
      tmp.resize(static_cast<size_t>(src.height * width * kChannels));
      h_out = tmp.data();
    }
    parallel_for(ctx, src.height, [&](int64_t r0, int64_t r1) {
      resample_rows(src.rgb, src.width * kChannels, h_out, width * kChannels, r0, r1, src.height, ax);
    });
    if (!vertical) return;
    src = Frame{tmp.data(), width, src.height};
  }
  const Axis ay = make_axis(src.height, height);
  parallel_for(ctx, height, [&](int64_t y0, int64_t y1) {
    resample_cols(src.rgb, dst, width * kChannels, y0, y1, ay);
  });
}

}  // namespace

Result<Image> resize_bicubic(const Context& ctx, const Image& image, int64_t width, int64_t height) {
  VLPAR_RETURN_IF_ERROR(image.validate("resize_bicubic"));
  VLPAR_CHECK(width >= 1 && height >= 1 && width <= (int64_t{1} << 24) && height <= (int64_t{1} << 24),
              "resize_bicubic: target size {}x{} (WxH) must be within 1..2^24", width, height);
  if (width == image.width && height == image.height) return image;
  Image out = Image::zeros(width, height);
  resize_into(ctx, frame_of(image), out.rgb.data(), width, height);
  return out;
}

Result<Image> resize_bicubic(const Image& image, int64_t width, int64_t height) {
  return resize_bicubic(Context{}, image, width, height);
}

Result<ImagePlan> plan_image(int64_t height, int64_t width, const ImageProcessorConfig& config) {
  VLPAR_RETURN_IF_ERROR(config.validate());
  VLPAR_ASSIGN_OR_RETURN(const ResizedSize rs,
                         smart_resize(height, width, config.factor(), config.min_pixels, config.max_pixels));
  const int64_t P = config.patch_size, m = config.merge_size;
  ImagePlan plan;
  plan.grid = VisionGrid{1, rs.height / P, rs.width / P};  // one image is one frame, repeated Tp times
  plan.resized_height = rs.height;
  plan.resized_width = rs.width;
  plan.patch_dim = kChannels * config.temporal_patch_size * P * P;
  plan.num_tokens = plan.grid.patches() / (m * m);
  return plan;
}

Status process_image_into(const Context& ctx, const Image& image, const ImageProcessorConfig& config,
                          std::span<float> pixel_values) {
  VLPAR_RETURN_IF_ERROR(image.validate("process_image"));
  VLPAR_ASSIGN_OR_RETURN(const ImagePlan plan, plan_image(image.height, image.width, config));
  VLPAR_CHECK(static_cast<int64_t>(pixel_values.size()) == plan.num_values(),
              "process_image_into: pixel_values holds {} floats, a {}x{} (WxH) image needs {} = {} patches x {}",
              pixel_values.size(), image.width, image.height, plan.num_values(), plan.num_patches(), plan.patch_dim);
  Bytes resized;
  Frame src = frame_of(image);
  if (plan.resized_height != image.height || plan.resized_width != image.width) {
    resized.resize(static_cast<size_t>(plan.resized_height * plan.resized_width * kChannels));
    resize_into(ctx, src, resized.data(), plan.resized_width, plan.resized_height);
    src = Frame{resized.data(), plan.resized_width, plan.resized_height};
  }
  const std::vector<Frame> frames(static_cast<size_t>(config.temporal_patch_size), src);  // one frame, Tp times
  flatten_patches(ctx, frames, config.temporal_patch_size, config.patch_size, config.merge_size, make_lut(config),
                  pixel_values.data());
  return Status::Ok();
}

Result<ProcessedImage> process_image(const Context& ctx, const Image& image, const ImageProcessorConfig& config) {
  VLPAR_RETURN_IF_ERROR(image.validate("process_image"));
  VLPAR_ASSIGN_OR_RETURN(const ImagePlan plan, plan_image(image.height, image.width, config));
  ProcessedImage out;
  static_cast<ImagePlan&>(out) = plan;
  out.pixel_values.resize(static_cast<size_t>(plan.num_values()));
  VLPAR_RETURN_IF_ERROR(process_image_into(ctx, image, config, out.pixel_values));
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
  std::vector<Bytes> resized(static_cast<size_t>(T));
  std::vector<Frame> group(static_cast<size_t>((T + Tp - 1) / Tp * Tp));
  const bool same_size = rs.height == frames[0].height && rs.width == frames[0].width;
  for (int64_t i = 0; i < T; ++i) {
    const Image& f = frames[static_cast<size_t>(out.frame_indices[static_cast<size_t>(i)])];
    if (same_size) {
      group[static_cast<size_t>(i)] = frame_of(f);
    } else if (i > 0 && out.frame_indices[static_cast<size_t>(i)] == out.frame_indices[static_cast<size_t>(i - 1)]) {
      group[static_cast<size_t>(i)] = group[static_cast<size_t>(i - 1)];
    } else {
      Bytes& r = resized[static_cast<size_t>(i)];
      r.resize(static_cast<size_t>(rs.height * rs.width * kChannels));
      resize_into(ctx, frame_of(f), r.data(), rs.width, rs.height);
      group[static_cast<size_t>(i)] = Frame{r.data(), rs.width, rs.height};
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
