// `vlpar-data make-demo`: the demo VQA dataset from photographs. See make_demo.hpp.
#include "make_demo.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <utility>

#include "vlpar/data/image_decode.hpp"
#include "vlpar/data/image_encode.hpp"
#include "vlpar/data/image_processor.hpp"
#include "vlpar/data/webdataset_writer.hpp"
#include "vlpar/io/safetensors.hpp"  // io::atomic_write_file
#include "vlpar/obs/progress_bar.hpp"

namespace vlpar::tools {

namespace {

namespace fs = std::filesystem;
using data::Image;

// SplitMix64: a tiny seeded generator whose stream is the same on every platform (std distributions are not).
struct Rng {
  uint64_t state;
  explicit Rng(uint64_t seed) : state(seed) {}
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0, 1)
  int64_t range(int64_t lo, int64_t hi) {                                      // [lo, hi], hi >= lo
    return lo + static_cast<int64_t>(next() % static_cast<uint64_t>(hi - lo + 1));
  }
};

uint64_t mix(uint64_t a, uint64_t b) { return Rng(a ^ (b * 0xD1B54A32D192ED03ull)).next(); }

// One photograph, reduced to a working copy.
struct Photo {
  std::string name;           // file name (no directory)
  int64_t width = 0;          // original size (after EXIF orientation)
  int64_t height = 0;
  int64_t factor = 1;         // working copy = box average of factor × factor blocks
  Image work;
  std::unique_ptr<IntegralImage> integral;
};

Image box_downscale(const Image& im, int64_t f) {
  if (f == 1) return im;
  Image out = Image::zeros(im.width / f, im.height / f);
  const uint32_t n = static_cast<uint32_t>(f * f);
  for (int64_t y = 0; y < out.height; ++y) {
    for (int64_t x = 0; x < out.width; ++x) {
      uint32_t s[3] = {0, 0, 0};
      for (int64_t dy = 0; dy < f; ++dy) {
        const uint8_t* p = im.row(y * f + dy) + 3 * x * f;
        for (int64_t dx = 0; dx < 3 * f; dx += 3) {
          s[0] += p[dx];
          s[1] += p[dx + 1];
          s[2] += p[dx + 2];
        }
      }
      uint8_t* o = out.row(y) + 3 * x;
      for (int c = 0; c < 3; ++c) o[c] = static_cast<uint8_t>((s[c] + n / 2) / n);
    }
  }
  return out;
}

Result<Photo> load_photo(const std::string& path, int64_t work_long_side) {
  std::ifstream f(path, std::ios::binary);
  VLPAR_CHECK_CODE(f.good(), StatusCode::kIoError, "make-demo: cannot open photograph '{}'", path);
  const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  VLPAR_ASSIGN_OR_RETURN(Image im, data::decode_image(bytes, path));
  Photo p;
  p.name = fs::path(path).filename().string();
  p.width = im.width;
  p.height = im.height;
  p.factor = std::max<int64_t>(1, (std::max(im.width, im.height) + work_long_side - 1) / work_long_side);
  p.work = box_downscale(im, p.factor);
  p.integral = std::make_unique<IntegralImage>(p.work);
  return p;
}

Image crop(const Image& im, Rect r) {
  Image out = Image::zeros(r.w, r.h);
  for (int64_t y = 0; y < r.h; ++y)
    std::copy_n(im.row(r.y + y) + 3 * r.x, 3 * r.w, out.row(y));
  return out;
}

void flip_horizontal(Image& im) {
  for (int64_t y = 0; y < im.height; ++y) {
    uint8_t* row = im.row(y);
    for (int64_t a = 0, b = im.width - 1; a < b; ++a, --b)
      for (int c = 0; c < 3; ++c) std::swap(row[3 * a + c], row[3 * b + c]);
  }
}

void flip_vertical(Image& im) {
  for (int64_t a = 0, b = im.height - 1; a < b; ++a, --b)
    std::swap_ranges(im.row(a), im.row(a) + im.row_bytes(), im.row(b));
}

struct Target {
  QuestionType type;
  int answer;
};

// Exactly balanced (type, answer) pairs, shuffled: type i mod 4, then each type's answers in turn.
std::vector<Target> balanced_targets(int64_t n, Rng rng) {
  std::vector<Target> t(static_cast<size_t>(n));
  std::vector<int64_t> seen(kNumQuestionTypes, 0);
  for (int64_t i = 0; i < n; ++i) {
    const int type = static_cast<int>(i % kNumQuestionTypes);
    const int64_t k = static_cast<int64_t>(question_specs()[static_cast<size_t>(type)].answers.size());
    t[static_cast<size_t>(i)] = Target{static_cast<QuestionType>(type), static_cast<int>(seen[type]++ % k)};
  }
  for (int64_t i = n - 1; i > 0; --i) std::swap(t[static_cast<size_t>(i)], t[static_cast<size_t>(rng.range(0, i))]);
  return t;
}

struct Generated {
  data::WdsSample sample;
  Target target{};
  int64_t width = 0, height = 0;
  int64_t candidates = 0;
};

// Output size (w, h) for one candidate: sides in [lo, hi]; orientation samples get aspect >= 1.5 the right way,
// the others aspect <= 1.6 either way.
std::pair<int64_t, int64_t> draw_size(Rng& rng, const Target& t, int64_t lo, int64_t hi) {
  if (t.type == QuestionType::kOrientation) {
    const int64_t l = rng.range(std::min(hi, (lo * 3 + 1) / 2), hi);
    const int64_t s = rng.range(lo, std::max(lo, l * 2 / 3));
    return t.answer == 0 ? std::pair{l, s} : std::pair{s, l};
  }
  for (;;) {
    const int64_t w = rng.range(lo, hi), h = rng.range(lo, hi);
    if (std::max(w, h) * 5 <= std::min(w, h) * 8) return {w, h};
  }
}

Result<Generated> generate_one(const std::vector<Photo>& photos, const DemoOptions& o, const std::string& split,
                               int64_t index, const Target& target, uint64_t stream) {
  Rng rng(mix(stream, static_cast<uint64_t>(index)));
  const DemoThresholds& th = o.thresholds;
  const QuestionSpec& spec = question_specs()[static_cast<size_t>(target.type)];
  Generated g;
  g.target = target;
  for (int64_t attempt = 0; attempt < o.max_attempts; ++attempt) {
    ++g.candidates;
    const Photo& p = photos[static_cast<size_t>(rng.range(0, static_cast<int64_t>(photos.size()) - 1))];
    const auto [ow, oh] = draw_size(rng, target, o.min_side, o.max_side);
    // Crop scale: 1.25× the output size up to what the working copy allows (log-uniform).
    const double kmax = std::min(double(p.work.width) / double(ow), double(p.work.height) / double(oh));
    if (kmax < 1.0) continue;  // photograph too small for this output size
    const double kmin = std::min(1.25, kmax);
    const double k = kmin * std::pow(kmax / kmin, rng.uniform());
    Rect r;
    r.w = std::clamp<int64_t>(std::llround(double(ow) * k), 1, p.work.width);
    r.h = std::clamp<int64_t>(std::llround(double(oh) * k), 1, p.work.height);
    r.x = rng.range(0, p.work.width - r.w);
    r.y = rng.range(0, p.work.height - r.h);
    const Quadrant quadrant = static_cast<Quadrant>(rng.range(0, 3));

    // Screen on the working copy (O(1) per region), decide the mirroring.
    bool flip_h = false, flip_v = false;
    if (target.type == QuestionType::kBrighterLR || target.type == QuestionType::kBrighterTB) {
      const bool lr = target.type == QuestionType::kBrighterLR;
      const Answer a = brighter_answer(p.integral->means(lr ? left_half(r) : top_half(r)),
                                       p.integral->means(lr ? right_half(r) : bottom_half(r)));
      if (a.margin < th.brightness + th.screen_extra) continue;
      (lr ? flip_h : flip_v) = a.index != target.answer;
    } else if (target.type == QuestionType::kColour) {
      const Answer a = colour_answer(p.integral->means(quarter(r, quadrant)));
      if (a.index != target.answer || a.margin < th.colour + th.screen_extra) continue;
    }

    VLPAR_ASSIGN_OR_RETURN(Image im, data::resize_bicubic(crop(p.work, r), ow, oh));
    if (flip_h) flip_horizontal(im);
    if (flip_v) flip_vertical(im);
    const std::string key = fmt::format("{}-{:06d}", split, index);
    data::JpegEncodeOptions jo;
    jo.quality = o.jpeg_quality;
    VLPAR_ASSIGN_OR_RETURN(std::vector<uint8_t> jpeg, data::encode_jpeg(im, jo, key));
    // The answer is recomputed on exactly the pixels the model will decode.
    VLPAR_ASSIGN_OR_RETURN(Image seen, data::decode_image(jpeg, key));
    VLPAR_ASSIGN_OR_RETURN(Answer a, answer_for(seen, target.type, quadrant, o.orientation));
    const double need = target.type == QuestionType::kOrientation ? th.orientation
                        : target.type == QuestionType::kColour    ? th.colour
                                                                  : th.brightness;
    if (a.index != target.answer || a.margin < need) continue;

    nlohmann::ordered_json rec;
    rec["id"] = key;
    rec["conversations"] = nlohmann::ordered_json::array(
        {{{"from", "human"}, {"value", "<image>\n" + question_text(target.type, quadrant)}},
         {{"from", "gpt"}, {"value", spec.answers[static_cast<size_t>(target.answer)]}}});
    rec["question_type"] = spec.name;
    rec["answer_margin"] = std::round(a.margin * 1e4) / 1e4;
    rec["source"] = {{"photo", p.name},
                     {"crop_xywh", {r.x * p.factor, r.y * p.factor, r.w * p.factor, r.h * p.factor}},
                     {"flip", flip_h ? "left-right" : flip_v ? "top-bottom" : "none"}};
    const std::string json = rec.dump();
    g.sample.key = key;
    g.sample.members.push_back({"json", std::vector<uint8_t>(json.begin(), json.end())});
    g.sample.members.push_back({"jpg", std::move(jpeg)});
    g.width = ow;
    g.height = oh;
    return g;
  }
  return VLPAR_STATUS(StatusCode::kInvalidArgument,
                      "make-demo: sample {}-{:06d}: no crop of the {} photograph(s) gives {} = '{}' with a clear margin "
                      "in {} candidates (thresholds too strict, or photographs without such content)",
                      split, index, photos.size(), spec.name, spec.answers[static_cast<size_t>(target.answer)],
                      o.max_attempts);
}

// Runs fn(i) for i in [0, n) on `threads` threads (interleaved); returns the first error by index.
template <class Fn>
Status parallel_indexed(int64_t n, int threads, Fn&& fn) {
  std::vector<Status> errors(static_cast<size_t>(threads));
  std::vector<int64_t> error_index(static_cast<size_t>(threads), -1);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      for (int64_t i = t; i < n; i += threads) {
        Status s = fn(i);
        if (!s.ok()) {
          errors[static_cast<size_t>(t)] = std::move(s);
          error_index[static_cast<size_t>(t)] = i;
          return;
        }
      }
    });
  }
  for (auto& th : pool) th.join();
  int first = -1;
  for (int t = 0; t < threads; ++t)
    if (error_index[static_cast<size_t>(t)] >= 0 &&
        (first < 0 || error_index[static_cast<size_t>(t)] < error_index[static_cast<size_t>(first)]))
      first = t;
  return first < 0 ? Status::Ok() : errors[static_cast<size_t>(first)];
}

Status remove_previous(const DemoOptions& o) {
  std::error_code ec;
  if (!fs::exists(o.out, ec)) return Status::Ok();
  VLPAR_CHECK(fs::is_directory(o.out, ec), "make-demo: --out '{}' exists and is not a directory", o.out);
  std::vector<fs::path> ours;
  for (const auto& e : fs::directory_iterator(o.out, ec)) {
    const std::string n = e.path().filename().string();
    const bool shard = (n.starts_with("train-") || n.starts_with("val-")) &&
                       (n.ends_with(".tar") || n.ends_with(".tar.idx") || n.find(".tar.") != std::string::npos);
    if (shard || n == ".nv-meta" || n == "demo_meta.json") ours.push_back(e.path());
  }
  if (ours.empty()) return Status::Ok();
  VLPAR_CHECK(o.overwrite, "make-demo: '{}' already holds a dataset ({} and {} more); pass --overwrite to replace it",
              o.out, ours.front().string(), ours.size() - 1);
  for (const fs::path& p : ours) {
    fs::remove_all(p, ec);
    VLPAR_CHECK_CODE(!ec, StatusCode::kIoError, "make-demo: removing '{}': {}", p.string(), ec.message());
  }
  return Status::Ok();
}

Status write_text(const std::string& path, const std::string& text) {
  const std::span<const std::byte> piece(reinterpret_cast<const std::byte*>(text.data()), text.size());
  return io::atomic_write_file(path, std::span<const std::span<const std::byte>>(&piece, 1));
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

Status validate(const DemoOptions& o) {
  VLPAR_CHECK(!o.photos.empty(), "make-demo: no photographs given");
  VLPAR_CHECK(!o.out.empty(), "make-demo: --out is empty");
  VLPAR_CHECK(o.train_samples >= 1 && o.val_samples >= 1, "make-demo: needs >= 1 train and val sample (got {}, {})",
              o.train_samples, o.val_samples);
  VLPAR_CHECK(o.threads >= 1 && o.threads <= 256, "make-demo: threads {} outside 1..256", o.threads);
  VLPAR_CHECK(o.shard_size >= 1, "make-demo: shard size {} < 1", o.shard_size);
  VLPAR_CHECK(o.min_side >= 16 && o.max_side >= o.min_side && o.max_side <= 4096,
              "make-demo: image sides [{}, {}] must satisfy 16 <= min <= max <= 4096", o.min_side, o.max_side);
  VLPAR_CHECK(o.work_long_side >= o.max_side * 2, "make-demo: work_long_side {} < 2 × max_side {}",
              o.work_long_side, o.max_side);
  VLPAR_CHECK(o.jpeg_quality >= 1 && o.jpeg_quality <= 100, "make-demo: JPEG quality {} outside 1..100",
              o.jpeg_quality);
  VLPAR_CHECK(o.max_attempts >= 1, "make-demo: max_attempts {} < 1", o.max_attempts);
  const DemoThresholds& t = o.thresholds;
  VLPAR_CHECK(t.brightness >= 0 && t.brightness < 1 && t.colour >= 0 && t.colour < 1 && t.orientation >= 0 &&
                  t.screen_extra >= 0,
              "make-demo: thresholds must be >= 0 (brightness and colour < 1)");
  return Status::Ok();
}

Result<DemoReport> make_demo(const DemoOptions& o) {
  VLPAR_RETURN_IF_ERROR(validate(o));
  const auto t0 = std::chrono::steady_clock::now();
  VLPAR_RETURN_IF_ERROR(remove_previous(o));

  // 1. Photographs in file-name order (the output does not depend on the order they were listed in), decoded in
  // parallel (each one independently: the result does not depend on threads).
  std::vector<std::string> paths = o.photos;
  std::sort(paths.begin(), paths.end(), [](const std::string& a, const std::string& b) {
    const std::string na = fs::path(a).filename().string(), nb = fs::path(b).filename().string();
    return na != nb ? na < nb : a < b;
  });
  std::vector<Photo> photos(paths.size());
  {
    std::unique_ptr<obs::ProgressBar> bar;
    if (o.progress) bar = std::make_unique<obs::ProgressBar>("make-demo: decode", int64_t(o.photos.size()));
    VLPAR_RETURN_IF_ERROR(parallel_indexed(int64_t(o.photos.size()), o.threads, [&](int64_t i) -> Status {
      VLPAR_ASSIGN_OR_RETURN(photos[size_t(i)], load_photo(paths[size_t(i)], o.work_long_side));
      if (bar) bar->add();
      return Status::Ok();
    }));
  }
  DemoReport report;
  report.photos = static_cast<int64_t>(photos.size());
  report.decode_seconds = seconds_since(t0);

  // 2-4. Samples per split, written in index order.
  std::vector<data::ShardInfo> all_shards;
  std::vector<data::EnergonSplitPart> parts;
  const auto t1 = std::chrono::steady_clock::now();
  for (const std::string split : {"train", "val"}) {
    const bool train = split == "train";
    const int64_t n = train ? o.train_samples : o.val_samples;
    const uint64_t stream = mix(o.seed, train ? 1 : 2);
    const std::vector<Target> targets = balanced_targets(n, Rng(mix(stream, 0xB41A5CEull)));
    std::vector<Generated> out(static_cast<size_t>(n));
    {
      std::unique_ptr<obs::ProgressBar> bar;
      if (o.progress) bar = std::make_unique<obs::ProgressBar>("make-demo: " + split, n);
      VLPAR_RETURN_IF_ERROR(parallel_indexed(n, o.threads, [&](int64_t i) -> Status {
        VLPAR_ASSIGN_OR_RETURN(out[size_t(i)], generate_one(photos, o, split, i, targets[size_t(i)], stream));
        if (bar) bar->add();
        return Status::Ok();
      }));
    }
    data::ShardWriterOptions so;
    so.pattern = split + "-%06d.tar";
    so.max_count = o.shard_size;
    VLPAR_ASSIGN_OR_RETURN(data::ShardWriter writer, data::ShardWriter::open(o.out, so));
    DemoSplitReport& rep = train ? report.train : report.val;
    rep.answer_counts.assign(kNumQuestionTypes, {});
    for (int t = 0; t < kNumQuestionTypes; ++t)
      rep.answer_counts[size_t(t)].assign(question_specs()[size_t(t)].answers.size(), 0);
    rep.min_width = rep.min_height = INT64_MAX;
    for (const Generated& g : out) {
      VLPAR_RETURN_IF_ERROR(writer.write(g.sample));
      ++rep.answer_counts[size_t(g.target.type)][size_t(g.target.answer)];
      rep.candidates += g.candidates;
      rep.min_width = std::min(rep.min_width, g.width);
      rep.max_width = std::max(rep.max_width, g.width);
      rep.min_height = std::min(rep.min_height, g.height);
      rep.max_height = std::max(rep.max_height, g.height);
    }
    VLPAR_RETURN_IF_ERROR(writer.finish());
    rep.samples = writer.samples_written();
    rep.shards = static_cast<int64_t>(writer.shards().size());
    data::EnergonSplitPart part{split, {}};
    for (const data::ShardInfo& s : writer.shards()) {
      rep.bytes += s.bytes;
      part.shards.push_back(s.name);
      all_shards.push_back(s);
    }
    parts.push_back(std::move(part));
  }
  report.generate_seconds = seconds_since(t1);

  // Chance: each val question's 1/|answers|, averaged.
  double chance_sum = 0.0;
  for (int t = 0; t < kNumQuestionTypes; ++t) {
    int64_t n = 0;
    for (int64_t c : report.val.answer_counts[size_t(t)]) n += c;
    chance_sum += double(n) * question_specs()[size_t(t)].chance();
  }
  report.chance_overall = chance_sum / double(report.val.samples);

  nlohmann::ordered_json meta;
  meta["format"] = "vlpar.demo_vqa";
  meta["version"] = 1;
  meta["seed"] = o.seed;
  meta["source"] = {{"description", o.source}, {"photos", nlohmann::ordered_json::array()}};
  for (const Photo& p : photos)
    meta["source"]["photos"].push_back({{"name", p.name}, {"width", p.width}, {"height", p.height}});
  meta["sample_format"] = "<key>.json = ShareGPT record {id, conversations, question_type, answer_margin, source}; "
                          "<key>.jpg = the image (webdataset_writer.hpp)";
  meta["question_types"] = nlohmann::ordered_json::array();
  for (int t = 0; t < kNumQuestionTypes; ++t) {
    const QuestionSpec& s = question_specs()[size_t(t)];
    nlohmann::ordered_json q;
    q["type"] = s.name;
    q["question"] = question_text(s.type, Quadrant::kTopLeft);
    q["answers"] = s.answers;
    q["chance"] = s.chance();
    q["threshold"] = s.type == QuestionType::kOrientation ? o.thresholds.orientation
                     : s.type == QuestionType::kColour    ? o.thresholds.colour
                                                          : o.thresholds.brightness;
    for (const auto& [name, rep] : {std::pair<const char*, const DemoSplitReport*>{"train", &report.train},
                                    std::pair<const char*, const DemoSplitReport*>{"val", &report.val}}) {
      nlohmann::ordered_json counts;
      for (size_t a = 0; a < s.answers.size(); ++a) counts[s.answers[a]] = rep->answer_counts[size_t(t)][a];
      q["answer_counts"][name] = counts;
    }
    meta["question_types"].push_back(q);
  }
  meta["chance_overall_val"] = report.chance_overall;
  for (const auto& [name, rep] : {std::pair<const char*, const DemoSplitReport*>{"train", &report.train},
                                  std::pair<const char*, const DemoSplitReport*>{"val", &report.val}}) {
    meta["splits"][name] = {{"samples", rep->samples},
                            {"shards", rep->shards},
                            {"bytes", rep->bytes},
                            {"candidates_drawn", rep->candidates},
                            {"width_range", {rep->min_width, rep->max_width}},
                            {"height_range", {rep->min_height, rep->max_height}}};
  }
  meta["processor"] = {{"patch_size", 16},
                       {"merge_size", 2},
                       {"factor", o.orientation.factor},
                       {"min_pixels", o.orientation.min_pixels},
                       {"max_pixels", o.orientation.max_pixels},
                       {"note", "orientation answers assume this grid: train and evaluate with these settings"}};
  meta["generation"] = {{"photos", report.photos},
                        {"threads", o.threads},
                        {"image_sides", {o.min_side, o.max_side}},
                        {"work_long_side", o.work_long_side},
                        {"jpeg_quality", o.jpeg_quality},
                        {"decode_seconds", std::round(report.decode_seconds * 100) / 100},
                        {"generate_seconds", std::round(report.generate_seconds * 100) / 100}};
  VLPAR_RETURN_IF_ERROR(write_text(o.out + "/demo_meta.json", meta.dump(2) + "\n"));

  data::EnergonMetadata em;
  em.shards = all_shards;
  em.parts = parts;
  VLPAR_RETURN_IF_ERROR(data::write_energon_metadata(o.out, em));  // .info.json last: the dataset is complete
  report.total_seconds = seconds_since(t0);
  return report;
}

}  // namespace vlpar::tools
