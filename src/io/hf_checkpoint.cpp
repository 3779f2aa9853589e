// HF model directories: index.json + shards, or a single model.safetensors. See include/vlpar/io/hf_checkpoint.hpp.
// Test: tests/unit/test_hf_checkpoint.cpp.
#include "vlpar/io/hf_checkpoint.hpp"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

namespace vlpar::io {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";

std::string shard_name(size_t i, size_t n) { return fmt::format("model-{:05d}-of-{:05d}.safetensors", i + 1, n); }

// model-ddddd-of-ddddd.safetensors
bool is_shard_name(const std::string& f) {
  constexpr std::string_view pre = "model-", mid = "-of-", post = ".safetensors";
  if (f.size() != pre.size() + 5 + mid.size() + 5 + post.size()) return false;
  auto digits = [&](size_t at) {
    for (size_t i = at; i < at + 5; ++i)
      if (f[i] < '0' || f[i] > '9') return false;
    return true;
  };
  return f.starts_with(pre) && digits(pre.size()) && f.compare(pre.size() + 5, mid.size(), mid) == 0 &&
         digits(pre.size() + 5 + mid.size()) && f.ends_with(post);
}

}  // namespace

// ---- reading -------------------------------------------------------------------------------------------------------

Result<HfTensorSource> HfTensorSource::open(const std::string& dir) {
  HfTensorSource src;
  src.dir_ = dir;
  std::error_code ec;
  VLPAR_CHECK_CODE(fs::is_directory(dir, ec), StatusCode::kIoError, "HF checkpoint '{}' is not a directory", dir);
  const fs::path index_path = fs::path(dir) / kIndexFile;

  if (!fs::exists(index_path, ec)) {
    const fs::path single = fs::path(dir) / kSingleFile;
    VLPAR_CHECK_CODE(fs::exists(single, ec), StatusCode::kIoError, "HF checkpoint '{}' has neither {} nor {}", dir,
                     kIndexFile, kSingleFile);
    VLPAR_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::open(single.string()));
    src.files_.push_back(std::move(f));
    for (const TensorInfo& t : src.files_[0].tensors()) src.entries_.emplace(t.name, Entry{0, &t});
    return src;
  }

  src.sharded_ = true;
  const std::string ip = index_path.string();
  json index;
  {
    std::ifstream in(index_path, std::ios::binary);
    VLPAR_CHECK_CODE(in.good(), StatusCode::kIoError, "cannot read HF index '{}'", ip);
    std::stringstream ss;
    ss << in.rdbuf();
    try {
      index = json::parse(ss.str());
    } catch (const json::exception& e) {
      return VLPAR_STATUS(StatusCode::kInvalidArgument, "HF index '{}' is not valid JSON: {}", ip, e.what());
    }
  }
  VLPAR_CHECK(index.is_object(), "HF index '{}' is a {}, not an object", ip, index.type_name());
  const auto wm = index.find("weight_map");
  VLPAR_CHECK(wm != index.end(), "HF index '{}' has no weight_map", ip);
  VLPAR_CHECK(wm->is_object(), "HF index '{}': weight_map is a {}, not an object", ip, wm->type_name());

  std::map<std::string, std::string> weight_map;  // tensor -> shard file name
  std::set<std::string> shard_files;
  for (const auto& [name, file] : wm->items()) {
    VLPAR_CHECK(file.is_string(), "HF index '{}': weight_map['{}'] is a {}, not a file name", ip, name, file.type_name());
    std::string f = file.get<std::string>();
    const fs::path fp(f);
    bool escapes = f.empty() || fp.is_absolute();
    for (const auto& part : fp) escapes = escapes || part == "..";
    VLPAR_CHECK(!escapes, "HF index '{}': weight_map['{}'] = '{}' is not a file inside the directory", ip, name, f);
    shard_files.insert(f);
    weight_map.emplace(name, std::move(f));
  }
  std::map<std::string, size_t> file_index;
  for (const std::string& f : shard_files) {
    const fs::path p = fs::path(dir) / f;
    VLPAR_CHECK_CODE(fs::exists(p, ec), StatusCode::kIoError, "HF index '{}' lists shard '{}', which is missing ({})",
                     ip, f, p.string());
    VLPAR_ASSIGN_OR_RETURN(SafetensorsFile sf, SafetensorsFile::open(p.string()));
    file_index.emplace(f, src.files_.size());
    src.files_.push_back(std::move(sf));
  }
  for (const auto& [name, f] : weight_map) {
    const size_t fi = file_index.at(f);
    const TensorInfo* info = src.files_[fi].find(name);
    VLPAR_CHECK(info != nullptr, "HF index '{}' maps tensor '{}' to '{}', but that shard has no such tensor", ip, name,
                src.files_[fi].path());
    src.entries_.emplace(name, Entry{fi, info});
  }
  return src;
}

std::vector<std::string> HfTensorSource::names() const {
  std::vector<std::string> out;
  out.reserve(entries_.size());
  for (const auto& [name, e] : entries_) out.push_back(name);
  return out;
}

const TensorInfo* HfTensorSource::find(std::string_view name) const {
  const auto it = entries_.find(name);
  return it == entries_.end() ? nullptr : it->second.info;
}

const std::string* HfTensorSource::file_of(std::string_view name) const {
  const auto it = entries_.find(name);
  return it == entries_.end() ? nullptr : &files_[it->second.file].path();
}

Status HfTensorSource::read(std::string_view name, TensorView dst) const {
  const auto it = entries_.find(name);
  VLPAR_CHECK(it != entries_.end(), "HF checkpoint '{}' has no tensor '{}'", dir_, name);
  return files_[it->second.file].read(name, dst);
}

// ---- writing -------------------------------------------------------------------------------------------------------

std::vector<std::vector<size_t>> plan_hf_shards(std::span<const uint64_t> sizes, uint64_t max_shard_bytes) {
  std::vector<std::vector<size_t>> shards;
  std::vector<size_t> current;
  uint64_t current_bytes = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] > max_shard_bytes) {  // its own shard, ahead of the one being filled
      shards.push_back({i});
      continue;
    }
    if (current_bytes + sizes[i] > max_shard_bytes) {
      shards.push_back(std::move(current));
      current.clear();
      current_bytes = 0;
    }
    current.push_back(i);
    current_bytes += sizes[i];
  }
  if (!current.empty()) shards.push_back(std::move(current));
  return shards;
}

Status write_hf_safetensors(const std::string& dir, std::span<const NamedTensor> tensors, uint64_t max_shard_bytes,
                            const std::function<void(uint64_t bytes)>& on_written) {
  std::set<std::string_view> names;
  for (const NamedTensor& t : tensors)
    VLPAR_CHECK(names.insert(t.name).second, "writing HF checkpoint '{}': duplicate tensor name '{}'", dir, t.name);
  std::error_code ec;
  fs::create_directories(dir, ec);
  VLPAR_CHECK_CODE(!ec && fs::is_directory(dir), StatusCode::kIoError, "cannot create directory '{}': {}", dir,
                   ec.message());

  std::vector<uint64_t> sizes;
  uint64_t total = 0;
  for (const NamedTensor& t : tensors) {
    sizes.push_back(t.view.nbytes());
    total += t.view.nbytes();
  }
  const auto plan = plan_hf_shards(sizes, max_shard_bytes);
  std::set<std::string> keep;
  if (plan.size() <= 1) {
    VLPAR_RETURN_IF_ERROR(write_safetensors((fs::path(dir) / kSingleFile).string(), tensors));
    if (on_written) on_written(total);
    keep.insert(kSingleFile);
  } else {
    json weight_map = json::object();
    for (size_t s = 0; s < plan.size(); ++s) {
      const std::string file = shard_name(s, plan.size());
      std::vector<NamedTensor> shard;
      uint64_t shard_bytes = 0;
      for (const size_t i : plan[s]) {
        shard.push_back(tensors[i]);
        weight_map[tensors[i].name] = file;
        shard_bytes += sizes[i];
      }
      VLPAR_RETURN_IF_ERROR(write_safetensors((fs::path(dir) / file).string(), shard));
      if (on_written) on_written(shard_bytes);
      keep.insert(file);
    }
    json index = {{"metadata", {{"total_size", total}}}, {"weight_map", std::move(weight_map)}};
    std::string text;
    try {
      text = index.dump(2, ' ', /*ensure_ascii=*/true) + "\n";  // json.dumps(indent=2, sort_keys=True) + "\n"
    } catch (const json::exception& e) {
      return VLPAR_STATUS(StatusCode::kInvalidArgument, "writing HF index in '{}': {}", dir, e.what());
    }
    const std::span<const std::byte> piece(reinterpret_cast<const std::byte*>(text.data()), text.size());
    VLPAR_RETURN_IF_ERROR(atomic_write_file((fs::path(dir) / kIndexFile).string(), std::span(&piece, 1)));
    keep.insert(kIndexFile);
  }

  // Remove what an earlier save left and the new layout does not use. The single-file case drops the index first so a
  // reader never pairs the new model.safetensors with stale shards.
  std::vector<fs::path> stale;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string f = e.path().filename().string();
    if ((f == kSingleFile || f == kIndexFile || is_shard_name(f)) && !keep.contains(f)) stale.push_back(e.path());
  }
  VLPAR_CHECK_CODE(!ec, StatusCode::kIoError, "cannot list '{}': {}", dir, ec.message());
  std::sort(stale.begin(), stale.end(), [](const fs::path& a, const fs::path& b) {
    const bool ai = a.filename() == kIndexFile, bi = b.filename() == kIndexFile;
    return ai != bi ? ai : a < b;
  });
  for (const fs::path& p : stale) {
    fs::remove(p, ec);
    VLPAR_CHECK_CODE(!ec, StatusCode::kIoError, "cannot remove stale '{}': {}", p.string(), ec.message());
  }
  return Status::Ok();
}

}  // namespace vlpar::io
