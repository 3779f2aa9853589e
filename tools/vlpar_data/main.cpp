// vlpar-data: dataset tools for vlpar's multimodal data pipeline (issue 5, items 8 and 9).
//
//   vlpar-data convert   --json sharegpt.json --images DIR --out DATASET [--shard-size N] [--val-fraction F] ...
//   vlpar-data inspect   SHARD.tar [--samples N] [--decode]
//   vlpar-data stats     DATASET|SHARD.tar [--split P] [--tokenizer tokenizer.json] [--limit N] ...
//   vlpar-data make-demo --out DATASET [--images N] [--val-images M] [--seed S] [--photos DIR|--photo-list FILE]
// `vlpar-data <command> --help` prints each command's options. Exit status 0 on success, 1 on any error (the
// message names the file, sample or option), 2 for a usage error.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "cli.hpp"
#include "make_demo.hpp"

namespace vlpar::tools {

namespace {

constexpr const char* kUsage =
    "usage: vlpar-data <command> [options]\n"
    "  convert    ShareGPT/LLaVA JSON (or JSONL) + an image folder -> WebDataset shards + Energon metadata\n"
    "  inspect    members, samples and sizes of one shard\n"
    "  stats      resolution histogram, images and tokens per sample of a dataset\n"
    "  make-demo  the demo VQA dataset from photographs (answers computed from the pixels)\n"
    "run `vlpar-data <command> --help` for the options of a command\n";

constexpr const char* kMakeDemoHelp =
    "usage: vlpar-data make-demo --out DATASET [options]\n"
    "  --out DIR            dataset root (created; an existing demo dataset there needs --overwrite)\n"
    "  --images N           train samples (default 2000)\n"
    "  --val-images M       held-out val samples (default N/10, at least 4)\n"
    "  --seed S             random seed (default 0)\n"
    "  --photos DIR         photographs: the *.jpg/*.jpeg/*.png files of DIR (default /usr/share/backgrounds)\n"
    "  --photo-list FILE    photographs: one path per line (instead of --photos)\n"
    "  --source TEXT        where the photographs come from (recorded in demo_meta.json)\n"
    "  --threads T          worker threads (default: the hardware threads); the output does not depend on T\n"
    "  --shard-size N       samples per shard (default 250)\n"
    "  --min-side P, --max-side P   output image sides in pixels (default 64, 160)\n"
    "  --quality Q          JPEG quality (default 90)\n"
    "  --overwrite          replace a previous demo dataset in --out\n"
    "  --no-progress        no progress bars\n";

std::vector<std::string> photos_in(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    if (!e.is_regular_file()) continue;
    std::string ext = e.path().extension().string();
    for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (ext == ".jpg" || ext == ".jpeg" || ext == ".png") out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

int run_make_demo(int argc, char** argv) {
  for (int i = 2; i < argc; ++i)
    if (std::strcmp(argv[i], "--help") == 0) {
      std::fputs(kMakeDemoHelp, stdout);
      return 0;
    }
  auto args = Args::parse(argc, argv, 2,
                          {"--out", "--images", "--val-images", "--seed", "--photos", "--photo-list", "--source",
                           "--threads", "--shard-size", "--min-side", "--max-side", "--quality"},
                          {"--overwrite", "--no-progress"});
  if (!args.ok()) return fail("make-demo", args.status());
  const Args& a = args.value();
  if (!a.positional.empty())
    return fail("make-demo", VLPAR_STATUS(StatusCode::kInvalidArgument, "unexpected argument '{}'", a.positional[0]));
  DemoOptions o;
  o.out = a.get("--out").value_or("");
  if (o.out.empty()) return fail("make-demo", VLPAR_STATUS(StatusCode::kInvalidArgument, "--out is required"));
  auto train = a.get_int("--images", 2000);
  if (!train.ok()) return fail("make-demo", train.status());
  o.train_samples = train.value();
  auto val = a.get_int("--val-images", std::max<int64_t>(4, o.train_samples / 10));
  auto seed = a.get_int("--seed", 0);
  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  auto threads = a.get_int("--threads", hw);
  auto shard = a.get_int("--shard-size", o.shard_size);
  auto lo = a.get_int("--min-side", o.min_side);
  auto hi = a.get_int("--max-side", o.max_side);
  auto q = a.get_int("--quality", o.jpeg_quality);
  for (const auto* r : {&val, &seed, &threads, &shard, &lo, &hi, &q})
    if (!r->ok()) return fail("make-demo", r->status());
  o.val_samples = val.value();
  o.seed = static_cast<uint64_t>(seed.value());
  o.threads = static_cast<int>(threads.value());
  o.shard_size = shard.value();
  o.min_side = lo.value();
  o.max_side = hi.value();
  o.jpeg_quality = static_cast<int>(q.value());
  o.overwrite = a.has("--overwrite");
  o.progress = !a.has("--no-progress");
  if (const auto list = a.get("--photo-list")) {
    std::ifstream f(*list);
    if (!f.good())
      return fail("make-demo", VLPAR_STATUS(StatusCode::kIoError, "cannot open --photo-list '{}'", *list));
    for (std::string line; std::getline(f, line);)
      if (!line.empty() && line[0] != '#') o.photos.push_back(line);
    o.source = a.get("--source").value_or(*list);
  } else {
    const std::string dir = a.get("--photos").value_or("/usr/share/backgrounds");
    o.photos = photos_in(dir);
    o.source = a.get("--source").value_or(dir);
    if (o.photos.empty())
      return fail("make-demo", VLPAR_STATUS(StatusCode::kInvalidArgument,
                                            "no *.jpg/*.jpeg/*.png photographs in '{}' (scripts/make_demo_data.sh "
                                            "installs a Debian wallpaper package with some)", dir));
  }
  auto rep = make_demo(o);
  if (!rep.ok()) return fail("make-demo", rep.status());
  const DemoReport& r = rep.value();
  std::printf("make-demo: %lld photographs decoded in %.2f s; samples generated and written in %.2f s (total %.2f s, "
              "%d threads)\n",
              static_cast<long long>(r.photos), r.decode_seconds, r.generate_seconds, r.total_seconds, o.threads);
  for (const auto& [name, s] : {std::pair<const char*, const DemoSplitReport*>{"train", &r.train},
                                std::pair<const char*, const DemoSplitReport*>{"val", &r.val}}) {
    std::printf("  %-5s %6lld samples in %lld shards (%s), sizes %lld..%lld x %lld..%lld px, %.1f candidates/sample\n",
                name, static_cast<long long>(s->samples), static_cast<long long>(s->shards),
                human_bytes(double(s->bytes)).c_str(), static_cast<long long>(s->min_width),
                static_cast<long long>(s->max_width), static_cast<long long>(s->min_height),
                static_cast<long long>(s->max_height), double(s->candidates) / double(std::max<int64_t>(1, s->samples)));
    for (int t = 0; t < kNumQuestionTypes; ++t) {
      const QuestionSpec& spec = question_specs()[size_t(t)];
      std::string line;
      for (size_t k = 0; k < spec.answers.size(); ++k)
        line += fmt::format(" {}={}", spec.answers[k], s->answer_counts[size_t(t)][k]);
      std::printf("        %-12s%s (chance %.3f)\n", spec.name.c_str(), line.c_str(), spec.chance());
    }
  }
  std::printf("  chance over the val questions: %.4f\n  dataset: %s (metadata: %s/demo_meta.json)\n", r.chance_overall,
              o.out.c_str(), o.out.c_str());
  return 0;
}

}  // namespace vlpar::tools

int main(int argc, char** argv) {
  using namespace vlpar::tools;
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0) {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::string cmd = argv[1];
  if (cmd == "convert") return run_convert(argc, argv);
  if (cmd == "inspect") return run_inspect(argc, argv);
  if (cmd == "stats") return run_stats(argc, argv);
  if (cmd == "make-demo") return run_make_demo(argc, argv);
  std::fprintf(stderr, "vlpar-data: unknown command '%s'\n%s", cmd.c_str(), kUsage);
  return 2;
}
