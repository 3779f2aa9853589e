// `vlpar-data convert`: ShareGPT/LLaVA JSON + an image folder -> WebDataset shards + Energon metadata.
//
// Input: a JSON array of records, or JSONL (one record per line; chosen by the first non-blank character).
// A record is {"id"?, "image"?: "rel/path.jpg" | [...], "images"?: [...], "conversations": [...], ...}; the image
// paths are relative to --images. Output per record (webdataset_writer.hpp): key = the record's position as 9
// digits, <key>.json = the record without "image"/"images" (an "id" is added when missing), <key>.jpg / <key>.png
// for one image, <key>.0.jpg, <key>.1.png, ... for several, the bytes copied as they are (the format is sniffed,
// not trusted from the name). Records go to "val" with probability --val-fraction (a seeded hash of the position),
// else to "train"; when no usable record lands in val, the usable one with the smallest hash does. A record whose
// image is missing, unreadable, not JPEG/PNG, or (with --verify) undecodable, and a record that is not an object
// with "conversations", is skipped with a warning; the summary counts the skips.
#include <fmt/core.h>

#include <cctype>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <span>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli.hpp"
#include "vlpar/core/log.hpp"
#include "vlpar/data/image_decode.hpp"
#include "vlpar/data/webdataset_writer.hpp"
#include "vlpar/obs/progress_bar.hpp"

namespace vlpar::tools {

namespace {

constexpr const char* kConvertHelp =
    "usage: vlpar-data convert --json FILE --images DIR --out DATASET [options]\n"
    "  --json FILE          ShareGPT/LLaVA records: a JSON array or JSONL\n"
    "  --images DIR         folder the records' image paths are relative to\n"
    "  --out DIR            dataset root (shards train-%06d.tar / val-%06d.tar, .tar.idx, .nv-meta/)\n"
    "  --shard-size N       samples per shard (default 1000)\n"
    "  --max-shard-bytes B  bytes per shard (default 3000000000)\n"
    "  --val-fraction F     share of records put into the val split (default 0: train only)\n"
    "  --seed S             seed of the train/val assignment (default 0)\n"
    "  --verify             decode every image and skip records whose images do not decode\n"
    "  --no-progress        no progress bar\n";

uint64_t split_hash(uint64_t seed, uint64_t i) {
  uint64_t z = seed * 0x9E3779B97F4A7C15ull + i + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

Result<std::vector<uint8_t>> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  VLPAR_CHECK_CODE(f.good(), StatusCode::kIoError, "cannot open '{}'", path);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

struct Skips {
  int64_t bad_record = 0, missing_image = 0, unsupported = 0, undecodable = 0;
  int64_t total() const { return bad_record + missing_image + unsupported + undecodable; }
};

}  // namespace

int run_convert(int argc, char** argv) {
  for (int i = 2; i < argc; ++i)
    if (std::strcmp(argv[i], "--help") == 0) {
      std::fputs(kConvertHelp, stdout);
      return 0;
    }
  auto args = Args::parse(argc, argv, 2,
                          {"--json", "--images", "--out", "--shard-size", "--max-shard-bytes", "--val-fraction",
                           "--seed"},
                          {"--verify", "--no-progress"});
  if (!args.ok()) return fail("convert", args.status());
  const Args& a = args.value();
  const std::string json_path = a.get("--json").value_or("");
  const std::string images = a.get("--images").value_or("");
  const std::string out = a.get("--out").value_or("");
  if (json_path.empty() || images.empty() || out.empty())
    return fail("convert", VLPAR_STATUS(StatusCode::kInvalidArgument, "--json, --images and --out are required"));
  auto shard_size = a.get_int("--shard-size", 1000);
  auto max_bytes = a.get_int("--max-shard-bytes", 3000000000);
  auto seed = a.get_int("--seed", 0);
  auto val_fraction = a.get_double("--val-fraction", 0.0);
  for (const Status* s : {&shard_size.status(), &max_bytes.status(), &seed.status(), &val_fraction.status()})
    if (!s->ok()) return fail("convert", *s);
  if (val_fraction.value() < 0.0 || val_fraction.value() >= 1.0)
    return fail("convert", VLPAR_STATUS(StatusCode::kInvalidArgument, "--val-fraction {} is outside [0, 1)",
                                        val_fraction.value()));

  // Records: a JSON array, or JSONL.
  auto text = read_file(json_path);
  if (!text.ok()) return fail("convert", text.status());
  std::vector<nlohmann::json> records;
  try {
    const std::string_view s(reinterpret_cast<const char*>(text.value().data()), text.value().size());
    const size_t first = s.find_first_not_of(" \t\r\n");
    if (first != std::string_view::npos && s[first] == '[') {
      nlohmann::json all = nlohmann::json::parse(s);
      for (auto& r : all) records.push_back(std::move(r));
    } else {
      size_t line_no = 0, pos = 0;
      while (pos < s.size()) {
        size_t end = s.find('\n', pos);
        if (end == std::string_view::npos) end = s.size();
        ++line_no;
        const std::string_view line = s.substr(pos, end - pos);
        pos = end + 1;
        if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
        try {
          records.push_back(nlohmann::json::parse(line));
        } catch (const nlohmann::json::exception& e) {
          return fail("convert", VLPAR_STATUS(StatusCode::kInvalidArgument, "{}:{}: {}", json_path, line_no, e.what()));
        }
      }
    }
  } catch (const nlohmann::json::exception& e) {
    return fail("convert", VLPAR_STATUS(StatusCode::kInvalidArgument, "{}: {}", json_path, e.what()));
  }

  // Pass 1 (cheap): the record's structure, its image paths, and each image's first bytes (exists, JPEG/PNG).
  enum class Skip { kNone, kBadRecord, kMissing, kUnsupported };
  struct Prepared {
    Skip skip = Skip::kNone;
    std::vector<std::string> paths;
  };
  std::vector<Prepared> prep(records.size());
  for (size_t i = 0; i < records.size(); ++i) {
    nlohmann::json& rec = records[i];
    Prepared& p = prep[i];
    if (!rec.is_object() || !rec.contains("conversations") || !rec["conversations"].is_array()) {
      log_warn("convert: record {} of {} is not an object with a \"conversations\" list: skipped", i, json_path);
      p.skip = Skip::kBadRecord;
      continue;
    }
    for (const char* field : {"image", "images"}) {
      if (!rec.contains(field)) continue;
      const nlohmann::json& v = rec[field];
      if (v.is_string()) {
        p.paths.push_back((std::filesystem::path(images) / v.get<std::string>()).string());
      } else if (v.is_array()) {
        for (const auto& n : v) {
          if (n.is_string()) p.paths.push_back((std::filesystem::path(images) / n.get<std::string>()).string());
          else p.skip = Skip::kBadRecord;
        }
      } else if (!v.is_null()) {
        p.skip = Skip::kBadRecord;
      }
      rec.erase(field);
    }
    if (p.skip == Skip::kBadRecord) {
      log_warn("convert: record {}: \"image\"/\"images\" must be a path or a list of paths: skipped", i);
      continue;
    }
    for (const std::string& path : p.paths) {
      std::ifstream f(path, std::ios::binary);
      uint8_t head[8] = {};
      if (!f.good() || !f.read(reinterpret_cast<char*>(head), 3)) {
        log_warn("convert: record {}: image '{}' cannot be read: skipped", i, path);
        p.skip = Skip::kMissing;
        break;
      }
      f.read(reinterpret_cast<char*>(head) + 3, 5);
      if (data::sniff_image_format(std::span<const uint8_t>(head, 3 + static_cast<size_t>(f.gcount()))) ==
          data::ImageFormat::kUnknown) {
        log_warn("convert: record {}: image '{}' is neither JPEG nor PNG: skipped", i, path);
        p.skip = Skip::kUnsupported;
        break;
      }
    }
  }

  // Split: a record goes to val when a seeded hash of its position falls below the fraction; when no usable
  // record does, the usable one with the smallest hash does, so Energon sees two non-empty parts.
  const bool with_val = val_fraction.value() > 0.0;
  const auto threshold = static_cast<uint64_t>(val_fraction.value() * 18446744073709551615.0);
  std::vector<bool> to_val(records.size(), false);
  if (with_val) {
    size_t usable = 0, best = records.size(), in_val = 0;
    for (size_t i = 0; i < records.size(); ++i) {
      if (prep[i].skip != Skip::kNone) continue;
      ++usable;
      const uint64_t h = split_hash(static_cast<uint64_t>(seed.value()), i);
      to_val[i] = h < threshold;
      in_val += to_val[i] ? 1 : 0;
      if (best == records.size() || h < split_hash(static_cast<uint64_t>(seed.value()), best)) best = i;
    }
    if (in_val == 0 && usable >= 2) to_val[best] = true;
  }
  std::unique_ptr<data::ShardWriter> writers[2];
  for (int w = 0; w < (with_val ? 2 : 1); ++w) {
    data::ShardWriterOptions so;
    so.pattern = w == 0 ? "train-%06d.tar" : "val-%06d.tar";
    so.max_count = shard_size.value();
    so.max_size = static_cast<uint64_t>(std::max<int64_t>(max_bytes.value(), 0));
    auto sw = data::ShardWriter::open(out, so);
    if (!sw.ok()) return fail("convert", sw.status());
    writers[w] = std::make_unique<data::ShardWriter>(std::move(sw).value());
  }

  // Pass 2: read the images and write the samples in record order.
  Skips skips;
  std::unique_ptr<obs::ProgressBar> bar;
  if (!a.has("--no-progress")) {
    obs::ProgressBar::Options po;
    po.unit = "records";
    bar = std::make_unique<obs::ProgressBar>("convert", static_cast<int64_t>(records.size()), po);
  }
  for (size_t i = 0; i < records.size(); ++i) {
    if (bar) bar->add();
    const Prepared& p = prep[i];
    if (p.skip != Skip::kNone) {
      ++(p.skip == Skip::kBadRecord ? skips.bad_record : p.skip == Skip::kMissing ? skips.missing_image
                                                                                 : skips.unsupported);
      continue;
    }
    nlohmann::json& rec = records[i];
    const std::string key = fmt::format("{:09d}", i);
    if (!rec.contains("id")) rec["id"] = key;
    data::WdsSample sample;
    sample.key = key;
    bool ok = true;
    for (size_t k = 0; k < p.paths.size() && ok; ++k) {
      auto bytes = read_file(p.paths[k]);
      if (!bytes.ok()) {
        log_warn("convert: record {} (key {}): image '{}' cannot be read: skipped", i, key, p.paths[k]);
        ++skips.missing_image;
        ok = false;
        break;
      }
      const data::ImageFormat format = data::sniff_image_format(bytes.value());
      if (a.has("--verify")) {
        auto im = data::decode_image(bytes.value(), p.paths[k]);
        if (!im.ok()) {
          log_warn("convert: record {} (key {}): {}: skipped", i, key, im.status().message());
          ++skips.undecodable;
          ok = false;
          break;
        }
      }
      const std::string ext = format == data::ImageFormat::kPng ? "png" : "jpg";
      sample.members.push_back({p.paths.size() == 1 ? ext : fmt::format("{}.{}", k, ext), std::move(bytes).value()});
    }
    if (!ok) continue;
    const std::string json = rec.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    sample.members.push_back({"json", std::vector<uint8_t>(json.begin(), json.end())});
    const Status st = writers[to_val[i] ? 1 : 0]->write(sample);
    if (!st.ok()) return fail("convert", st);
  }
  if (bar) bar->finish();

  data::EnergonMetadata meta;
  for (int w = 0; w < (with_val ? 2 : 1); ++w) {
    const Status st = writers[w]->finish();
    if (!st.ok()) return fail("convert", st);
    data::EnergonSplitPart part{w == 0 ? "train" : "val", {}};
    for (const data::ShardInfo& s : writers[w]->shards()) {
      part.shards.push_back(s.name);
      meta.shards.push_back(s);
    }
    if (!part.shards.empty()) meta.parts.push_back(std::move(part));
  }
  if (meta.shards.empty())
    return fail("convert", VLPAR_STATUS(StatusCode::kInvalidArgument, "no record of {} could be converted ({} skipped)",
                                        json_path, skips.total()));
  const Status st = data::write_energon_metadata(out, meta);
  if (!st.ok()) return fail("convert", st);
  std::printf("convert: %zu records -> %lld train + %lld val samples in %zu shards under %s\n", records.size(),
              static_cast<long long>(writers[0]->samples_written()),
              static_cast<long long>(with_val ? writers[1]->samples_written() : 0), meta.shards.size(), out.c_str());
  std::printf("  skipped %lld: %lld bad records, %lld missing images, %lld not JPEG/PNG, %lld undecodable\n",
              static_cast<long long>(skips.total()), static_cast<long long>(skips.bad_record),
              static_cast<long long>(skips.missing_image), static_cast<long long>(skips.unsupported),
              static_cast<long long>(skips.undecodable));
  return 0;
}

}  // namespace vlpar::tools
