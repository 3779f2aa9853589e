// `vlpar-data inspect SHARD.tar`: the members of one shard, its samples (grouped as webdataset/Energon group them),
// sizes per extension, and whether its .tar.idx agrees with the headers; the first samples in detail.
#include <fmt/core.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cli.hpp"
#include "vlpar/data/image_decode.hpp"
#include "vlpar/data/tar_reader.hpp"
#include "vlpar/data/webdataset.hpp"

namespace vlpar::tools {

namespace {

constexpr const char* kInspectHelp =
    "usage: vlpar-data inspect SHARD.tar [options]\n"
    "  --samples N   samples listed in detail (default 5; 0: none)\n"
    "  --decode      decode the listed samples' images and show their sizes\n";

struct ExtStats {
  int64_t count = 0;
  int64_t bytes = 0;
  int64_t min = INT64_MAX, max = 0;
};

}  // namespace

int run_inspect(int argc, char** argv) {
  for (int i = 2; i < argc; ++i)
    if (std::strcmp(argv[i], "--help") == 0) {
      std::fputs(kInspectHelp, stdout);
      return 0;
    }
  auto args = Args::parse(argc, argv, 2, {"--samples"}, {"--decode"});
  if (!args.ok()) return fail("inspect", args.status());
  const Args& a = args.value();
  if (a.positional.size() != 1)
    return fail("inspect", VLPAR_STATUS(StatusCode::kInvalidArgument, "give exactly one shard (.tar)"));
  auto detail = a.get_int("--samples", 5);
  if (!detail.ok()) return fail("inspect", detail.status());
  const std::string path = a.positional[0];

  auto tar = data::TarFile::open(path);
  if (!tar.ok()) return fail("inspect", tar.status());
  // Every member, in archive order.
  int64_t members = 0, regular = 0, meta = 0, other = 0, content = 0;
  std::map<std::string, ExtStats> by_ext;
  data::TarPaxGlobals globals = tar.value().leading_globals();
  for (int64_t off = tar.value().first_member_offset();;) {
    auto m = tar.value().member_at(off, globals);
    if (!m.ok()) return fail("inspect", m.status());
    if (!m.value()) break;
    const data::TarMember& mem = *m.value();
    ++members;
    off = mem.next_offset;
    if (!mem.is_regular()) {
      ++other;
      continue;
    }
    ++regular;
    content += mem.size;
    if (data::is_meta_member(mem.name)) {
      ++meta;
      continue;
    }
    const auto name = data::split_member_name(mem.name);
    ExtStats& e = by_ext[name ? name->ext : std::string("(no extension)")];
    ++e.count;
    e.bytes += mem.size;
    e.min = std::min(e.min, mem.size);
    e.max = std::max(e.max, mem.size);
  }
  auto offsets = data::build_sample_offsets(tar.value());
  if (!offsets.ok()) return fail("inspect", offsets.status());
  const int64_t samples = static_cast<int64_t>(offsets.value().size()) - 1;

  std::printf("shard    %s (%s)\n", path.c_str(), human_bytes(double(tar.value().file_size())).c_str());
  std::printf("members  %lld: %lld regular files (%s of content), %lld meta, %lld other (directories, links, ...)\n",
              static_cast<long long>(members), static_cast<long long>(regular), human_bytes(double(content)).c_str(),
              static_cast<long long>(meta), static_cast<long long>(other));
  std::printf("samples  %lld (members grouped by key)\n", static_cast<long long>(samples));
  const std::string idx_path = path + ".idx";
  if (std::filesystem::exists(idx_path)) {
    auto idx = data::read_tar_index(idx_path);
    if (!idx.ok()) {
      std::printf("index    %s: UNREADABLE: %s\n", idx_path.c_str(), idx.status().message().c_str());
    } else if (idx.value() == offsets.value()) {
      std::printf("index    %s: %lld samples, matches the headers\n", idx_path.c_str(),
                  static_cast<long long>(idx.value().size()) - 1);
    } else {
      std::printf("index    %s: %lld entries, DIFFERS from the header scan (%lld samples)\n", idx_path.c_str(),
                  static_cast<long long>(idx.value().size()), static_cast<long long>(samples));
    }
  } else {
    std::printf("index    none (%s missing: Energon needs it; the library can build it)\n", idx_path.c_str());
  }
  std::printf("extensions\n");
  for (const auto& [ext, e] : by_ext)
    std::printf("  %-14s %8lld members  total %10s  min %10s  mean %10s  max %10s\n", ext.c_str(),
                static_cast<long long>(e.count), human_bytes(double(e.bytes)).c_str(),
                human_bytes(double(e.min)).c_str(), human_bytes(double(e.bytes) / double(e.count)).c_str(),
                human_bytes(double(e.max)).c_str());

  const int64_t show = std::min(detail.value(), samples);
  if (show > 0) {
    auto reader = data::ShardReader::open(path, path, std::make_shared<const std::vector<int64_t>>(offsets.value()),
                                          data::ShardReadOptions{.lowercase_ext = false, .only_ext = {}});
    if (!reader.ok()) return fail("inspect", reader.status());
    std::printf("first %lld samples\n", static_cast<long long>(show));
    for (int64_t i = 0; i < show; ++i) {
      auto r = reader.value().read(i);
      if (!r.ok()) return fail("inspect", r.status());
      if (r.value().skipped()) {
        std::printf("  #%lld %s: CORRUPT: %s\n", static_cast<long long>(i), r.value().sample.key.c_str(),
                    r.value().skip_reason.c_str());
        continue;
      }
      const data::Sample& s = r.value().sample;
      std::string line = fmt::format("  #{} {} @{}:", i, s.key, offsets.value()[size_t(i)]);
      for (const data::SampleField& f : s.fields) {
        line += fmt::format(" {} {}", f.ext, human_bytes(double(f.data.size())));
        if (a.has("--decode") && data::sniff_image_format(f.data) != data::ImageFormat::kUnknown) {
          auto im = data::decode_image(f.data, s.key + "." + f.ext);
          line += im.ok() ? fmt::format(" [{}x{}]", im.value().width, im.value().height) : std::string(" [UNDECODABLE]");
        }
        line += ",";
      }
      line.pop_back();
      std::printf("%s\n", line.c_str());
      if (const data::SampleField* j = s.field("json"); j != nullptr) {
        std::string text(j->data.begin(), j->data.end());
        if (text.size() > 300) text = text.substr(0, 297) + "...";
        for (char& c : text)
          if (c == '\n') c = ' ';
        std::printf("      json: %s\n", text.c_str());
      }
    }
  }
  return 0;
}

}  // namespace vlpar::tools
