#pragma once
// The Qwen3-VL image and video processor (spec qwen3vl.md §2.1, §2.2): HF transformers 4.57.1
// Qwen2VLImageProcessorFast (the class the hub preprocessor_config.json names) and Qwen3VLVideoProcessor, on CPU.
//
//   smart_resize   h̄ = round_half_even(H/f)·f, w̄ likewise (f = patch·merge = 32); if h̄·w̄ > max_pixels:
//                  β = sqrt(H·W/max_pixels), h̄ = max(f, floor(H/β/f)·f), w̄ likewise; else if h̄·w̄ < min_pixels:
//                  β = sqrt(min_pixels/(H·W)), h̄ = ceil(H·β/f)·f, w̄ likewise. Error if max(H,W)/min(H,W) > 200.
//                  Video: the budget includes time, t̄·h̄·w̄ with t̄ = round_half_even(T/Tp)·Tp, β uses T·H·W;
//                  errors if T < Tp or H, W < f. All in double, in Python's operation order.
//   resize         torchvision resize of a uint8 tensor, BICUBIC, antialias=True, on CPU: PIL-style separable
//                  filter (Keys cubic a = −0.5, support 2·max(1, in/out), weights normalised per output), int16
//                  fixed-point weights with a per-axis precision, horizontal pass first, each pass rounded
//                  ((acc + 2^(p−1)) >> p) and clamped to uint8. Skipped when the size does not change.
//   normalise      x = (v − 255·mean) / (255·std) in float32 (the fast processor's fused rescale + normalise;
//                  127.5 and 127.5 with the Qwen3-VL mean = std = 0.5).
//   temporal       frames padded to a multiple of Tp by repeating the last (an image is one frame: Tp copies).
//   flatten        [gt, Tp, C, gh/m, m, P, gw/m, m, P] -> [gt, gh/m, gw/m, m, m, C, Tp, P, P]
//                  -> pixel_values [gt·gh·gw, C·Tp·P·P]; grid (gt, gh, gw) = (frames/Tp, h̄/P, w̄/P).
//
// Parity (tests/unit/test_image_processor.cpp, fixtures from tools/golden/make_processor_fixture.py):
//   vs Qwen2VLImageProcessorFast / Qwen3VLVideoProcessor (the golden): bitwise equal. Same integer algorithm,
//     same float32 normalisation; the only float work is the double-precision weight computation, done in
//     torch's operation order without contraction, then rounded to int16.
//   vs Qwen2VLImageProcessor (slow, PIL; 1 level = 1/127.5 = 0.0078 after normalising; +1e-6 for the slow
//     path's float64 rescale). Pillow runs the same a = −0.5 filter with 22-bit weights where torch uses
//     p ≥ 14 bits, so one pass's sums differ by at most K·2^−(p+1)·255 < 0.05 level (K taps):
//     - when Pillow filters horizontally first, as torch does: the rounded intermediates differ by ≤ 1 level,
//       the vertical pass scales that by Σ|w| ≤ 1.27 (the kernel's maximum over all scales and phases), and the
//       final rounding adds < 1: |Δ| ≤ 2 levels = 0.0157 (measured on the fixtures: ≤ 1);
//     - Pillow 13 filters vertically first for some size pairs (e.g. width up while height shrinks). The two
//       orders then round and clip different uint8 intermediates; each is within Σ|w|·(0.55 + 255·N) + 0.55 of
//       the exact unclipped result, N ≤ 0.135 being the kernel's negative weight mass, so |Δ| ≤ 90 levels.
//       That extreme needs saturated edges; measured on the fixtures: max 7 and 14 levels, ~20% of the values
//       differ at all, < 0.4% by more than 2 levels.
// Grids and token counts are exact against both. Threads (the Context overloads) never change a bit.
//
// Speed: SSSE3 (horizontal: pshufb + pmaddwd, two taps of an RGB pixel pair per instruction) and AVX2 (vertical:
// two source rows interleaved, pmaddwd, 32 columns) integer passes, equal bit for bit to the scalar ones;
// outputs are uninitialised, 64-byte aligned and written with streaming stores; big buffers are huge-page
// advised. bench/bench_image.cpp and tools/bench/image_processor_vs_hf.py measure it against HF.
#include <array>
#include <cstdint>
#include <memory>
#include <new>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "vlpar/core/batch.hpp"  // VisionGrid: one row of image_grid_thw / video_grid_thw
#include "vlpar/core/context.hpp"
#include "vlpar/core/status.hpp"
#include "vlpar/data/image.hpp"
#include "vlpar/data/video_sampling.hpp"

namespace vlpar::data {

/// Hub preprocessor_config.json of Qwen3-VL (Qwen2VLImageProcessorFast).
struct ImageProcessorConfig {
  int64_t patch_size = 16;                     // P
  int64_t temporal_patch_size = 2;             // Tp
  int64_t merge_size = 2;                      // m
  int64_t min_pixels = 65536;                  // size.shortest_edge (256²)
  int64_t max_pixels = 16777216;               // size.longest_edge (4096²)
  std::array<float, 3> image_mean{0.5f, 0.5f, 0.5f};
  std::array<float, 3> image_std{0.5f, 0.5f, 0.5f};
  int64_t factor() const { return patch_size * merge_size; }
  /// @brief Sizes >= 1, min_pixels, max_pixels >= 1, std > 0, all finite.
  Status validate() const;
};

/// Hub video_preprocessor_config.json of Qwen3-VL (Qwen3VLVideoProcessor): the image settings with the video
/// pixel budget (which counts t̄·h̄·w̄) and the frame sampling.
struct VideoProcessorConfig {
  ImageProcessorConfig spatial{.min_pixels = 4096, .max_pixels = 25165824};
  FrameSamplingConfig sampling;
  Status validate() const;
};

struct ResizedSize {
  int64_t height = 0;
  int64_t width = 0;
};

/// @brief HF qwen2_vl smart_resize (see the file comment). Errors name the size and the limit.
Result<ResizedSize> smart_resize(int64_t height, int64_t width, int64_t factor, int64_t min_pixels,
                                 int64_t max_pixels);

/// @brief HF qwen3_vl video smart_resize for `num_frames` sampled frames of height×width.
Result<ResizedSize> smart_resize_video(int64_t num_frames, int64_t height, int64_t width, int64_t temporal_factor,
                                       int64_t factor, int64_t min_pixels, int64_t max_pixels);

/// @brief torchvision's uint8 bicubic antialiased resize to width×height (see the file comment).
Result<Image> resize_bicubic(const Image& image, int64_t width, int64_t height);
Result<Image> resize_bicubic(const Context& ctx, const Image& image, int64_t width, int64_t height);

namespace detail {
/// 64-byte aligned memory; blocks of 4 MiB and more are 2 MiB aligned and advised for transparent huge pages
/// (Linux), which turns thousands of first-touch page faults per output into a handful.
void* allocate_pixel_memory(size_t bytes);
void free_pixel_memory(void* p, size_t bytes) noexcept;
}  // namespace detail

/// An allocator whose resize() leaves new elements uninitialised (the processor writes every value, and zeroing
/// tens of megabytes first would cost as much as writing them) and whose memory is 64-byte aligned (so the
/// processor can write whole cache lines with streaming stores).
template <class T>
struct UninitializedAllocator {
  using value_type = T;
  template <class U>
  struct rebind {
    using other = UninitializedAllocator<U>;
  };
  UninitializedAllocator() = default;
  template <class U>
  UninitializedAllocator(const UninitializedAllocator<U>&) noexcept {}  // NOLINT: converting, like std::allocator
  T* allocate(size_t n) { return static_cast<T*>(detail::allocate_pixel_memory(n * sizeof(T))); }
  void deallocate(T* p, size_t n) noexcept { detail::free_pixel_memory(p, n * sizeof(T)); }
  template <class U>
  bool operator==(const UninitializedAllocator<U>&) const noexcept {
    return true;
  }
  template <class U>
  void construct(U* p) noexcept(std::is_nothrow_default_constructible_v<U>) {
    ::new (static_cast<void*>(p)) U;  // default-initialisation: no zeroing for float
  }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};
using PixelValues = std::vector<float, UninitializedAllocator<float>>;

/// What processing an image of a given size produces, without doing it (smart_resize only).
struct ImagePlan {
  VisionGrid grid;                  // (gt, gh, gw), one row of image_grid_thw
  int64_t num_tokens = 0;           // gt·gh·gw / m²: <|image_pad|> tokens in the prompt
  int64_t resized_height = 0;       // h̄ = gh·P
  int64_t resized_width = 0;        // w̄ = gw·P
  int64_t patch_dim = 0;            // C·Tp·P·P (1536 for Qwen3-VL)
  int64_t num_patches() const { return grid.patches(); }
  int64_t num_values() const { return grid.patches() * patch_dim; }
};

/// @brief The grid, token count and resized size of a height×width image (errors as smart_resize's).
Result<ImagePlan> plan_image(int64_t height, int64_t width, const ImageProcessorConfig& config);

struct ProcessedImage : ImagePlan {
  PixelValues pixel_values;         // [num_patches, patch_dim] row-major
};

/// @brief One image -> pixel_values, grid and token count, exactly as HF's fast processor (file comment).
Result<ProcessedImage> process_image(const Image& image, const ImageProcessorConfig& config);
/// @brief The same, with the resize and flatten split over ctx.num_threads (bitwise identical results).
Result<ProcessedImage> process_image(const Context& ctx, const Image& image, const ImageProcessorConfig& config);
/// @brief Writes the pixel values into caller memory, e.g. an image's rows of a packed batch's patch buffer
/// (no allocation of the output; 64-byte aligned memory is written with streaming stores).
/// @param pixel_values [plan.num_values()] = [gt·gh·gw, C·Tp·P·P], plan = plan_image(image size, config)
Status process_image_into(const Context& ctx, const Image& image, const ImageProcessorConfig& config,
                          std::span<float> pixel_values);

struct ProcessedVideo {
  PixelValues pixel_values;                   // [gt·gh·gw, C·Tp·P·P]
  VisionGrid grid;                            // (gt, gh, gw), one row of video_grid_thw
  int64_t num_tokens = 0;                     // gt·gh·gw / m² <|video_pad|> tokens over all temporal patches
  int64_t tokens_per_temporal_patch = 0;      // gh·gw / m²: pads inside each <|vision_start|>…<|vision_end|>
  int64_t resized_height = 0;
  int64_t resized_width = 0;
  int64_t patch_dim = 0;
  std::vector<int64_t> frame_indices;         // sampled input frames (before padding to a multiple of Tp)
  std::vector<double> timestamps;             // [gt] seconds of each temporal patch
  std::vector<std::string> timestamp_texts;   // [gt] "<1.2 seconds>", placed before each temporal patch's span
};

/// @brief A decoded video (all frames the same size) at native `video_fps` -> Qwen3-VL frame sampling,
/// video smart_resize, resize, normalise, flatten, grid and timestamps (spec §2.2).
Result<ProcessedVideo> process_video(std::span<const Image> frames, double video_fps,
                                     const VideoProcessorConfig& config);
Result<ProcessedVideo> process_video(const Context& ctx, std::span<const Image> frames, double video_fps,
                                     const VideoProcessorConfig& config);

}  // namespace vlpar::data
