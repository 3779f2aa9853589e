// `vlpar-data stats DATASET`: per split part of an Energon dataset (or for one .tar): samples, images per sample,
// image resolution histogram, the demo's question/answer balance when records carry "question_type", and with
// --tokenizer the tokens per sample exactly as the training pipeline builds them (ConversationBuilder: chat
// template, vision pads after smart_resize with the given pixel limits).
#include <fmt/core.h>
#include <yaml-cpp/yaml.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli.hpp"
#include "vlpar/data/conversation.hpp"
#include "vlpar/data/energon.hpp"
#include "vlpar/data/image_decode.hpp"
#include "vlpar/data/sample_stream.hpp"  // StreamShard, index_webdataset_shards
#include "vlpar/data/tokenizer.hpp"
#include "vlpar/data/webdataset.hpp"

namespace vlpar::tools {

namespace {

namespace fs = std::filesystem;

constexpr const char* kStatsHelp =
    "usage: vlpar-data stats DATASET|SHARD.tar [options]\n"
    "  --split P          only this split part (default: every part of .nv-meta/split.yaml)\n"
    "  --limit N          at most N samples per part (default: all)\n"
    "  --tokenizer FILE   HF tokenizer.json: also count tokens per sample (chat template + vision pads)\n"
    "  --min-pixels N, --max-pixels N   the image processor's pixel limits for the token counts (default: the\n"
    "                     dataset's demo_meta.json \"processor\" when present, else Qwen3-VL's 65536 / 16777216)\n";

struct Part {
  std::string name;
  std::vector<data::StreamShard> shards;
  std::set<std::string> excludes;  // "<shard>/<key>"
};

Result<std::vector<Part>> open_parts(const std::string& target, const std::string& only) {
  std::vector<Part> parts;
  if (fs::is_regular_file(target)) {
    VLPAR_ASSIGN_OR_RETURN(std::vector<data::StreamShard> shards, data::index_webdataset_shards({target}));
    parts.push_back(Part{fs::path(target).filename().string(), std::move(shards), {}});
    return parts;
  }
  const std::string split_yaml = target + "/.nv-meta/split.yaml";
  VLPAR_CHECK(fs::exists(split_yaml), "'{}' is neither a .tar nor an Energon dataset ({} missing)", target, split_yaml);
  std::vector<std::string> names;
  try {
    const YAML::Node root = YAML::LoadFile(split_yaml);
    for (const auto& kv : root["split_parts"]) names.push_back(kv.first.as<std::string>());
  } catch (const YAML::Exception& e) {
    return VLPAR_STATUS(StatusCode::kInvalidArgument, "{}: {}", split_yaml, e.what());
  }
  for (const std::string& n : names) {
    if (!only.empty() && n != only) continue;
    VLPAR_ASSIGN_OR_RETURN(data::EnergonDataset ds, data::open_energon_dataset(target, {.split_part = n}));
    Part p{n, {}, ds.sample_excludes};
    for (const data::EnergonShard& s : ds.shards) p.shards.push_back(data::StreamShard{s.name, s.path, s.offsets});
    parts.push_back(std::move(p));
  }
  VLPAR_CHECK(!parts.empty(), "{}: no split part '{}'", split_yaml, only);
  return parts;
}

bool is_image_ext(const std::string& ext) {
  const size_t dot = ext.rfind('.');
  const std::string last = dot == std::string::npos ? ext : ext.substr(dot + 1);
  return last == "jpg" || last == "jpeg" || last == "png";
}

Histogram side_histogram() {
  Histogram h;
  h.bounds = {64, 128, 256, 512, 1024, 2048};
  h.labels = {"long side < 64", "64..127", "128..255", "256..511", "512..1023", "1024..2047", ">= 2048"};
  return h;
}

Histogram count_histogram() {
  Histogram h;
  h.bounds = {1, 2, 3, 4};
  h.labels = {"0 images", "1", "2", "3", ">= 4"};
  return h;
}

Histogram token_histogram() {
  Histogram h;
  h.bounds = {32, 64, 128, 256, 512, 1024, 2048, 4096, 8192};
  h.labels = {"< 32 tokens", "32..63", "64..127", "128..255", "256..511", "512..1023", "1024..2047", "2048..4095",
              "4096..8191", ">= 8192"};
  return h;
}

}  // namespace

int run_stats(int argc, char** argv) {
  for (int i = 2; i < argc; ++i)
    if (std::strcmp(argv[i], "--help") == 0) {
      std::fputs(kStatsHelp, stdout);
      return 0;
    }
  auto args = Args::parse(argc, argv, 2, {"--split", "--limit", "--tokenizer", "--min-pixels", "--max-pixels"}, {});
  if (!args.ok()) return fail("stats", args.status());
  const Args& a = args.value();
  if (a.positional.size() != 1)
    return fail("stats", VLPAR_STATUS(StatusCode::kInvalidArgument, "give exactly one dataset directory or .tar"));
  const std::string target = a.positional[0];
  auto limit = a.get_int("--limit", INT64_MAX);
  if (!limit.ok()) return fail("stats", limit.status());

  // Processor limits: the demo's own settings when the dataset says so.
  data::ImageProcessorConfig image_cfg;
  if (const std::string meta = target + "/demo_meta.json"; fs::exists(meta)) {
    try {
      std::ifstream f(meta);
      const nlohmann::json j = nlohmann::json::parse(f);
      image_cfg.min_pixels = j.at("processor").at("min_pixels").get<int64_t>();
      image_cfg.max_pixels = j.at("processor").at("max_pixels").get<int64_t>();
    } catch (const nlohmann::json::exception& e) {
      return fail("stats", VLPAR_STATUS(StatusCode::kInvalidArgument, "{}: {}", meta, e.what()));
    }
  }
  auto min_px = a.get_int("--min-pixels", image_cfg.min_pixels);
  auto max_px = a.get_int("--max-pixels", image_cfg.max_pixels);
  if (!min_px.ok()) return fail("stats", min_px.status());
  if (!max_px.ok()) return fail("stats", max_px.status());
  image_cfg.min_pixels = min_px.value();
  image_cfg.max_pixels = max_px.value();

  std::unique_ptr<data::ConversationBuilder> builder;
  if (const auto tok_path = a.get("--tokenizer")) {
    auto tok = data::Tokenizer::from_file(*tok_path);
    if (!tok.ok()) return fail("stats", tok.status());
    data::ConversationOptions co;
    co.image = image_cfg;
    auto b = data::ConversationBuilder::create(std::make_shared<const data::Tokenizer>(std::move(tok).value()), co);
    if (!b.ok()) return fail("stats", b.status());
    builder = std::make_unique<data::ConversationBuilder>(std::move(b).value());
  }

  auto parts = open_parts(target, a.get("--split").value_or(""));
  if (!parts.ok()) return fail("stats", parts.status());
  for (const Part& part : parts.value()) {
    int64_t samples = 0, excluded = 0, corrupt = 0, undecodable = 0, token_errors = 0;
    std::vector<double> widths, heights, megapixels, tokens, labels, patches;
    Histogram sides = side_histogram(), per_sample = count_histogram(), token_hist = token_histogram();
    std::map<std::string, std::map<std::string, int64_t>> questions;  // type -> answer -> count
    std::string first_token_error;
    for (const data::StreamShard& shard : part.shards) {
      if (samples >= limit.value()) break;
      auto reader = data::ShardReader::open(shard.path, shard.name, shard.offsets);
      if (!reader.ok()) return fail("stats", reader.status());
      for (int64_t i = 0; i < reader.value().num_samples() && samples < limit.value(); ++i) {
        auto r = reader.value().read(i);
        if (!r.ok()) return fail("stats", r.status());
        if (r.value().skipped()) {
          ++corrupt;
          continue;
        }
        const data::Sample& s = r.value().sample;
        if (part.excludes.contains(shard.name + "/" + s.key)) {
          ++excluded;
          continue;
        }
        ++samples;
        int64_t images = 0;
        for (const data::SampleField& f : s.fields) {
          if (!is_image_ext(f.ext)) continue;
          ++images;
          auto im = data::decode_image(f.data, s.key + "." + f.ext);
          if (!im.ok()) {
            ++undecodable;
            continue;
          }
          widths.push_back(double(im.value().width));
          heights.push_back(double(im.value().height));
          megapixels.push_back(double(im.value().width * im.value().height) / 1e6);
          sides.add(double(std::max(im.value().width, im.value().height)));
        }
        per_sample.add(double(images));
        if (const data::SampleField* j = s.field("json"); j != nullptr) {
          const nlohmann::json rec = nlohmann::json::parse(j->data.begin(), j->data.end(), nullptr, false);
          if (rec.is_object() && rec.contains("question_type") && rec["question_type"].is_string() &&
              rec.contains("conversations") && rec["conversations"].is_array() && !rec["conversations"].empty()) {
            const auto& last = rec["conversations"].back();
            const std::string answer = last.contains("value") && last["value"].is_string()
                                           ? last["value"].get<std::string>()
                                           : std::string("?");
            ++questions[rec["question_type"].get<std::string>()][answer];
          }
        }
        if (builder) {
          auto t = builder->build(s);
          if (!t.ok()) {
            if (token_errors++ == 0) first_token_error = t.status().message();
            continue;
          }
          tokens.push_back(double(t.value().num_tokens()));
          labels.push_back(double(t.value().num_label_tokens()));
          patches.push_back(double(t.value().vision_patches()));
          token_hist.add(double(t.value().num_tokens()));
        }
      }
    }
    std::printf("== %s: %lld samples in %zu shards", part.name.c_str(), static_cast<long long>(samples),
                part.shards.size());
    if (excluded + corrupt > 0)
      std::printf(" (+ %lld excluded, %lld corrupt)", static_cast<long long>(excluded), static_cast<long long>(corrupt));
    std::printf("%s\n", samples >= limit.value() ? " [--limit reached]" : "");
    std::printf("  images per sample\n%s", per_sample.render().c_str());
    std::printf("  image width   %s\n  image height  %s\n  megapixels    %s\n", summarize(widths, " px").c_str(),
                summarize(heights, " px").c_str(),
                megapixels.empty() ? "n/a"
                                   : fmt::format("{:.4f} .. {:.4f}", *std::min_element(megapixels.begin(), megapixels.end()),
                                                 *std::max_element(megapixels.begin(), megapixels.end()))
                                         .c_str());
    if (undecodable > 0) std::printf("  undecodable images: %lld\n", static_cast<long long>(undecodable));
    std::printf("  resolution (long side)\n%s", sides.render().c_str());
    if (!questions.empty()) {
      std::printf("  questions (record \"question_type\" -> answers)\n");
      for (const auto& [type, answers] : questions) {
        std::string line;
        int64_t n = 0;
        for (const auto& [ans, c] : answers) {
          line += fmt::format(" {}={}", ans, c);
          n += c;
        }
        std::printf("    %-12s %6lld:%s\n", type.c_str(), static_cast<long long>(n), line.c_str());
      }
    }
    if (builder) {
      std::printf("  tokens per sample (min_pixels %lld, max_pixels %lld)\n    %s\n", static_cast<long long>(image_cfg.min_pixels),
                  static_cast<long long>(image_cfg.max_pixels), summarize(tokens).c_str());
      std::printf("  supervised tokens  %s\n  vision patches     %s\n%s", summarize(labels).c_str(),
                  summarize(patches).c_str(), token_hist.render().c_str());
      if (token_errors > 0)
        std::printf("  %lld samples could not be tokenized; first: %s\n", static_cast<long long>(token_errors),
                    first_token_error.c_str());
    }
  }
  return 0;
}

}  // namespace vlpar::tools
