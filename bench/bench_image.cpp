// Benchmark: the image half of a data-loader worker, one thread: decode (libjpeg-turbo / libpng) + Qwen3-VL
// processing (smart_resize, torchvision-exact bicubic, normalise, flatten to [N, 1536]). The loader runs one such
// worker per core, so images/s here is images/s per core.
// Images: every *.jpg / *.png in $VLPAR_BENCH_IMAGES (default tests/fixtures/processor, i.e. run from the repo
// root). Processor limits: the hub defaults, or $VLPAR_BENCH_MIN_PIXELS / $VLPAR_BENCH_MAX_PIXELS.
// tools/bench/image_processor_vs_hf.py writes real-size JPEGs, runs this next to HF's fast and slow processors
// on the same files and prints the ratios.
// Benchmarks (each iteration = the whole image set once):
//   image_decode           decode only
//   image_process          processing of already decoded images
//   image_decode_process   both, what one loader worker does per image (process_image: a new output vector
//                          per image, as HF allocates its tensors)
//   image_decode_process_into  the same into one reused output buffer (process_image_into, as a loader writing
//                          into its batch buffer does)
// Counters: items_per_second = images/s, MPix_per_s = input megapixels/s, patches_per_s = output patches/s.
// Run: VLPAR_BENCH_IMAGES=/tmp/imgs ./build/cpu/bench/bench_image [--benchmark_format=json]
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "vlpar/data/image_decode.hpp"
#include "vlpar/data/image_processor.hpp"

namespace {
using namespace vlpar;
using namespace vlpar::data;

struct ImageSet {
  std::vector<std::string> names;
  std::vector<std::vector<uint8_t>> files;
  std::vector<Image> decoded;
  ImageProcessorConfig config;
  double megapixels = 0;     // Σ W·H of the decoded images / 1e6
  int64_t patches = 0;       // Σ output patches
  std::string error;         // non-empty: every benchmark is skipped with it
};

int64_t env_int(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::stoll(v) : fallback;
}

const ImageSet& images() {
  static const ImageSet set = [] {
    ImageSet s;
    const char* dir_env = std::getenv("VLPAR_BENCH_IMAGES");
    const std::string dir = dir_env != nullptr ? dir_env : "tests/fixtures/processor";
    s.config.min_pixels = env_int("VLPAR_BENCH_MIN_PIXELS", s.config.min_pixels);
    s.config.max_pixels = env_int("VLPAR_BENCH_MAX_PIXELS", s.config.max_pixels);
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
      const std::string ext = e.path().extension().string();
      if (ext == ".jpg" || ext == ".jpeg" || ext == ".png") s.names.push_back(e.path().string());
    }
    std::sort(s.names.begin(), s.names.end());
    if (s.names.empty()) {
      s.error = "no .jpg/.png images in '" + dir + "' (set VLPAR_BENCH_IMAGES)";
      return s;
    }
    // Correctness once, before timing: every file decodes and processes.
    for (const auto& n : s.names) {
      std::ifstream f(n, std::ios::binary);
      s.files.emplace_back((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
      auto im = decode_image(s.files.back(), n);
      if (!im.ok()) {
        s.error = im.status().to_string();
        return s;
      }
      auto p = process_image(im.value(), s.config);
      if (!p.ok()) {
        s.error = p.status().to_string();
        return s;
      }
      s.megapixels += double(im->width * im->height) / 1e6;
      s.patches += p->num_patches();
      s.decoded.push_back(std::move(im).value());
    }
    std::fprintf(stderr, "bench_image: %zu images from %s, %.2f MPix, %lld patches, min_pixels %lld, max_pixels %lld\n",
                s.names.size(), dir.c_str(), s.megapixels, static_cast<long long>(s.patches),
                static_cast<long long>(s.config.min_pixels), static_cast<long long>(s.config.max_pixels));
    return s;
  }();
  return set;
}

void set_counters(benchmark::State& state, const ImageSet& s) {
  const double n = double(state.iterations());
  state.SetItemsProcessed(int64_t(n * double(s.names.size())));
  state.counters["MPix_per_s"] = benchmark::Counter(n * s.megapixels, benchmark::Counter::kIsRate);
  state.counters["patches_per_s"] = benchmark::Counter(n * double(s.patches), benchmark::Counter::kIsRate);
}

void image_decode(benchmark::State& state) {
  const ImageSet& s = images();
  if (!s.error.empty()) return state.SkipWithError(s.error.c_str());
  for (auto _ : state) {
    for (size_t i = 0; i < s.files.size(); ++i) {
      auto im = decode_image(s.files[i], s.names[i]);
      benchmark::DoNotOptimize(im.value().rgb.data());
    }
  }
  set_counters(state, s);
}

void image_process(benchmark::State& state) {
  const ImageSet& s = images();
  if (!s.error.empty()) return state.SkipWithError(s.error.c_str());
  for (auto _ : state) {
    for (const Image& im : s.decoded) {
      auto p = process_image(im, s.config);
      benchmark::DoNotOptimize(p.value().pixel_values.data());
    }
  }
  set_counters(state, s);
}

void image_decode_process(benchmark::State& state) {
  const ImageSet& s = images();
  if (!s.error.empty()) return state.SkipWithError(s.error.c_str());
  for (auto _ : state) {
    for (size_t i = 0; i < s.files.size(); ++i) {
      auto im = decode_image(s.files[i], s.names[i]);
      auto p = process_image(im.value(), s.config);
      benchmark::DoNotOptimize(p.value().pixel_values.data());
    }
  }
  set_counters(state, s);
}

void image_decode_process_into(benchmark::State& state) {
  const ImageSet& s = images();
  if (!s.error.empty()) return state.SkipWithError(s.error.c_str());
  PixelValues buffer;
  const Context ctx;
  for (auto _ : state) {
    for (size_t i = 0; i < s.files.size(); ++i) {
      auto im = decode_image(s.files[i], s.names[i]);
      const ImagePlan plan = plan_image(im->height, im->width, s.config).value();
      if (buffer.size() < size_t(plan.num_values())) buffer.resize(size_t(plan.num_values()));
      const Status st = process_image_into(ctx, im.value(), s.config, std::span<float>(buffer.data(), size_t(plan.num_values())));
      if (!st.ok()) return state.SkipWithError(st.to_string().c_str());
      benchmark::DoNotOptimize(buffer.data());
    }
  }
  set_counters(state, s);
}

BENCHMARK(image_decode)->Unit(benchmark::kMillisecond)->MinTime(1.0);
BENCHMARK(image_process)->Unit(benchmark::kMillisecond)->MinTime(1.0);
BENCHMARK(image_decode_process)->Unit(benchmark::kMillisecond)->MinTime(1.0);
BENCHMARK(image_decode_process_into)->Unit(benchmark::kMillisecond)->MinTime(1.0);

}  // namespace

BENCHMARK_MAIN();
