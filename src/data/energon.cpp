// Megatron-Energon dataset metadata: brace expansion, dataset.yaml, split.yaml/split.json, .info.json/.info.yaml,
// per-shard .tar.idx validation. See include/vlpar/data/energon.hpp. Test: tests/unit/test_energon.cpp.
#include "vlpar/data/energon.hpp"

#include <yaml-cpp/yaml.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "vlpar/data/webdataset.hpp"

namespace vlpar::data {
namespace {

namespace fs = std::filesystem;

// Expansion blows up combinatorially; a split file that expands past this is a mistake, not a dataset.
constexpr size_t kMaxBraceItems = size_t{1} << 22;

using Items = std::vector<std::string>;

Result<Items> expand_pattern(std::string_view s);

bool is_digits(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  return true;
}

// "-?\d+"
bool is_int(std::string_view s) { return is_digits(!s.empty() && s[0] == '-' ? s.substr(1) : s); }

bool is_letter(char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'); }

int letter_index(char c) { return c <= 'Z' ? c - 'A' : 26 + (c - 'a'); }  // alphabet = A..Z a..z

char letter_at(int i) { return static_cast<char>(i < 26 ? 'A' + i : 'a' + (i - 26)); }

// Splits "A..B" or "A..B..C" into its parts (Python: int_range_re / char_range_re shapes).
bool split_range(std::string_view e, std::string_view& a, std::string_view& b, std::string_view& step) {
  const size_t d1 = e.find("..");
  if (d1 == std::string_view::npos) return false;
  a = e.substr(0, d1);
  std::string_view rest = e.substr(d1 + 2);
  const size_t d2 = rest.find("..");
  if (d2 == std::string_view::npos) {
    b = rest;
    step = {};
    return true;
  }
  b = rest.substr(0, d2);
  step = rest.substr(d2 + 2);
  if (!step.empty() && step[0] == '-') step = step.substr(1);  // (?:\.\.-?(\d+))? : the sign is dropped
  return is_digits(step);
}

Result<int64_t> parse_i64(std::string_view s) {
  int64_t v = 0;
  const bool neg = s[0] == '-';
  for (char c : neg ? s.substr(1) : s) {
    if (v > (int64_t{1} << 50)) return VLPAR_STATUS(StatusCode::kInvalidArgument, "brace range bound '{}' too large", s);
    v = v * 10 + (c - '0');
  }
  return neg ? -v : v;
}

// Integer or letter range; std::nullopt when `e` is neither (then it may be a sequence).
Result<std::optional<Items>> parse_range(std::string_view e) {
  std::string_view a, b, step_s;
  if (!split_range(e, a, b, step_s)) return std::optional<Items>();
  int64_t step = 1;
  if (!step_s.empty()) {
    VLPAR_ASSIGN_OR_RETURN(step, parse_i64(step_s));
    if (step == 0) step = 1;  // (int(step) or 1)
  }
  if (is_int(a) && is_int(b)) {
    auto padded = [](std::string_view x) {
      return x != "0" && x != "-0" && (x.substr(0, 1) == "0" || x.substr(0, 2) == "-0");
    };
    const int pad = (padded(a) || padded(b)) ? static_cast<int>(std::max(a.size(), b.size())) : 0;
    VLPAR_ASSIGN_OR_RETURN(const int64_t lo, parse_i64(a));
    VLPAR_ASSIGN_OR_RETURN(const int64_t hi, parse_i64(b));
    const int64_t count = (lo < hi ? hi - lo : lo - hi) / step + 1;
    if (static_cast<uint64_t>(count) > kMaxBraceItems)
      return VLPAR_STATUS(StatusCode::kInvalidArgument, "brace range {{{}}} has {} items (limit {})", e, count,
                          kMaxBraceItems);
    Items out;
    char buf[64];
    for (int64_t i = 0; i < count; ++i) {
      const int64_t v = lo < hi ? lo + i * step : lo - i * step;
      std::snprintf(buf, sizeof(buf), "%0*lld", pad, static_cast<long long>(v));  // Python '%0{pad}d'
      out.emplace_back(buf);
    }
    return std::optional<Items>(std::move(out));
  }
  if (a.size() == 1 && b.size() == 1 && is_letter(a[0]) && is_letter(b[0])) {
    const int lo = letter_index(a[0]), hi = letter_index(b[0]);
    Items out;
    if (lo < hi) {
      for (int64_t i = lo; i <= hi; i += step) out.emplace_back(1, letter_at(static_cast<int>(i)));
    } else {
      for (int64_t i = lo; i >= hi; i -= step) out.emplace_back(1, letter_at(static_cast<int>(i)));
    }
    return std::optional<Items>(std::move(out));
  }
  return std::optional<Items>();
}

// Top-level comma list; std::nullopt when there is no top-level comma (or braces do not balance).
Result<std::optional<Items>> parse_sequence(std::string_view seq) {
  std::vector<std::string_view> pieces;
  size_t start = 0;
  int depth = 0;
  for (size_t pos = 0; pos < seq.size(); ++pos) {
    if (seq[pos] == '\\') {
      ++pos;
      continue;
    }
    if (seq[pos] == '{') ++depth;
    else if (seq[pos] == '}') --depth;
    else if (seq[pos] == ',' && depth == 0) {
      pieces.push_back(seq.substr(start, pos - start));
      start = pos + 1;
    }
  }
  if (depth != 0 || pieces.empty()) return std::optional<Items>();
  pieces.push_back(seq.substr(std::min(start, seq.size())));
  Items out;
  for (std::string_view p : pieces) {
    VLPAR_ASSIGN_OR_RETURN(Items sub, expand_pattern(p));
    for (std::string& x : sub) out.push_back(std::move(x));
    if (out.size() > kMaxBraceItems)
      return VLPAR_STATUS(StatusCode::kInvalidArgument, "brace sequence {{{}}} expands past {} items", seq,
                          kMaxBraceItems);
  }
  return std::optional<Items>(std::move(out));
}

// A pattern is a product of literal runs and brace groups.
Result<Items> expand_pattern(std::string_view s) {
  std::vector<Items> parts;
  size_t start = 0, pos = 0;
  int depth = 0;
  for (; pos < s.size(); ++pos) {
    if (s[pos] == '\\') {
      ++pos;
      continue;
    }
    if (s[pos] == '{') {
      if (depth == 0 && pos > start) {
        parts.push_back({std::string(s.substr(start, pos - start))});
        start = pos;
      }
      ++depth;
    } else if (s[pos] == '}') {
      --depth;
      if (depth == 0) {
        const std::string_view expr = s.substr(start + 1, pos - start - 1);
        VLPAR_ASSIGN_OR_RETURN(std::optional<Items> item, parse_range(expr));
        if (!item) {
          VLPAR_ASSIGN_OR_RETURN(item, parse_sequence(expr));
        }
        if (item) {
          parts.push_back(std::move(*item));
        } else {  // neither range nor sequence: literal braces around the expanded inside
          VLPAR_ASSIGN_OR_RETURN(Items inner, expand_pattern(expr));
          parts.push_back({"{"});
          parts.push_back(std::move(inner));
          parts.push_back({"}"});
        }
        start = pos + 1;
      }
    }
  }
  if (depth != 0) return VLPAR_STATUS(StatusCode::kInvalidArgument, "unbalanced braces in '{}'", s);
  if (start < s.size()) parts.push_back({std::string(s.substr(start))});
  Items out{""};
  for (const Items& p : parts) {
    if (out.size() * p.size() > kMaxBraceItems)
      return VLPAR_STATUS(StatusCode::kInvalidArgument, "brace pattern '{}' expands past {} items", s, kMaxBraceItems);
    Items next;
    next.reserve(out.size() * p.size());
    for (const std::string& a : out)
      for (const std::string& b : p) next.push_back(a + b);
    out = std::move(next);
  }
  return out;
}

std::string unescape(const std::string& s) {  // Python: re.sub(r'\\(.)', r'\1', s)
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size() && s[i + 1] != '\n') ++i;
    out.push_back(s[i]);
  }
  return out;
}

Result<YAML::Node> load_yaml_file(const std::string& path) {
  try {
    return YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    return VLPAR_STATUS(StatusCode::kIoError, "cannot read {}", path);
  } catch (const YAML::Exception& e) {
    return VLPAR_STATUS(StatusCode::kInvalidArgument, "{}: YAML syntax error at line {}, column {}: {}", path,
                        e.mark.line + 1, e.mark.column + 1, e.msg);
  }
}

// A YAML list of strings (or a single string) at `node`.
Result<std::vector<std::string>> string_list(const YAML::Node& node, const std::string& file, const std::string& what) {
  std::vector<std::string> out;
  if (!node || node.IsNull()) return out;
  if (node.IsScalar()) return std::vector<std::string>{node.as<std::string>()};
  if (!node.IsSequence())
    return VLPAR_STATUS(StatusCode::kInvalidArgument, "{}: {} must be a list of strings", file, what);
  for (const YAML::Node& x : node) {
    if (!x.IsScalar())
      return VLPAR_STATUS(StatusCode::kInvalidArgument, "{}: {} holds a non-string entry", file, what);
    out.push_back(x.as<std::string>());
  }
  return out;
}

std::map<std::string, std::string> scalar_map(const YAML::Node& node) {
  std::map<std::string, std::string> out;
  if (!node || !node.IsMap()) return out;
  for (const auto& kv : node)
    if (kv.first.IsScalar() && kv.second.IsScalar()) out[kv.first.as<std::string>()] = kv.second.as<std::string>();
  return out;
}

Result<EnergonDatasetYaml> read_dataset_yaml(const fs::path& file) {
  EnergonDatasetYaml d;
  if (!fs::exists(file)) return d;
  VLPAR_ASSIGN_OR_RETURN(YAML::Node y, load_yaml_file(file.string()));
  if (!y.IsMap())
    return VLPAR_STATUS(StatusCode::kInvalidArgument, "{}: expected a mapping at the top level", file.string());
  d.present = true;
  auto text = [&](const YAML::Node& n) { return n && n.IsScalar() ? n.as<std::string>() : std::string(); };
  d.module = text(y["__module__"]);
  d.class_name = text(y["__class__"]);
  if (const YAML::Node st = y["sample_type"]; st && st.IsMap()) {
    d.sample_type_module = text(st["__module__"]);
    d.sample_type_class = text(st["__class__"]);
  }
  d.field_map = scalar_map(y["field_map"]);
  d.subflavors = scalar_map(y["subflavors"]);
  d.sample_loader = text(y["sample_loader"]);
  d.part_filter = text(y["part_filter"]);
  if (d.class_name.empty() && d.sample_type_class.empty() && d.sample_loader.empty())
    return VLPAR_STATUS(StatusCode::kInvalidArgument,
                        "{}: names no dataset class (__class__), sample_type or sample_loader", file.string());
  return d;
}

// .info.json (or legacy .info.yaml): shard name -> sample count, in file order.
Result<std::vector<std::pair<std::string, int64_t>>> read_info(const fs::path& meta, std::string& version) {
  std::vector<std::pair<std::string, int64_t>> counts;
  const fs::path json_path = meta / ".info.json", yaml_path = meta / ".info.yaml";
  if (fs::exists(json_path)) {
    std::ifstream in(json_path);
    nlohmann::ordered_json j;
    try {
      j = nlohmann::ordered_json::parse(in);
    } catch (const nlohmann::json::exception& e) {
      return VLPAR_STATUS(StatusCode::kInvalidArgument, "{}: JSON error: {}", json_path.string(), e.what());
    }
    if (!j.is_object() || !j.contains("shard_counts") || !j["shard_counts"].is_object())
      return VLPAR_STATUS(StatusCode::kInvalidArgument, "{}: no \"shard_counts\" object", json_path.string());
    if (j.contains("energon_version") && j["energon_version"].is_string())
      version = j["energon_version"].get<std::string>();
    for (const auto& [name, n] : j["shard_counts"].items()) {
      if (!n.is_number_integer() || n.get<int64_t>() < 0)
        return VLPAR_STATUS(StatusCode::kInvalidArgument, "{}: shard_counts[\"{}\"] is not a sample count",
                            json_path.string(), name);
      counts.emplace_back(name, n.get<int64_t>());
    }
    return counts;
  }
  if (!fs::exists(yaml_path))
    return VLPAR_STATUS(StatusCode::kIoError, "no dataset info: neither {} nor {} exists (run `energon prepare`)",
                        json_path.string(), yaml_path.string());
  VLPAR_ASSIGN_OR_RETURN(YAML::Node y, load_yaml_file(yaml_path.string()));
  const YAML::Node sc = y["shard_counts"];
  if (!sc || !sc.IsMap())
    return VLPAR_STATUS(StatusCode::kInvalidArgument, "{}: no shard_counts mapping", yaml_path.string());
  if (y["energon_version"] && y["energon_version"].IsScalar()) version = y["energon_version"].as<std::string>();
  for (const auto& kv : sc) {
    int64_t n = -1;
    try {
      n = kv.second.as<int64_t>();
    } catch (const YAML::Exception&) {
    }
    if (n < 0)
      return VLPAR_STATUS(StatusCode::kInvalidArgument, "{}: shard_counts['{}'] is not a sample count",
                          yaml_path.string(), kv.first.as<std::string>());
    counts.emplace_back(kv.first.as<std::string>(), n);
  }
  return counts;
}

}  // namespace

Result<std::vector<std::string>> brace_expand(std::string_view pattern) {
  VLPAR_ASSIGN_OR_RETURN(Items items, expand_pattern(pattern));
  for (std::string& s : items) s = unescape(s);
  return items;
}

int64_t EnergonDataset::num_samples() const {
  int64_t n = 0;
  for (const EnergonShard& s : shards) n += s.num_samples;
  return n;
}

bool EnergonDataset::is_excluded(std::string_view shard, std::string_view key) const {
  if (sample_excludes.empty()) return false;
  std::string k;
  k.reserve(shard.size() + 1 + key.size());
  k.append(shard).append("/").append(key);
  return sample_excludes.count(k) != 0;
}

Result<EnergonDataset> open_energon_dataset(const std::string& root, const EnergonOpenOptions& options) {
  const fs::path meta = fs::path(root) / ".nv-meta";
  if (!fs::is_directory(meta))
    return VLPAR_STATUS(StatusCode::kIoError, "{} is not an Energon dataset: no .nv-meta directory", root);
  EnergonDataset ds;
  ds.root = root;
  ds.split_part = options.split_part;
  VLPAR_ASSIGN_OR_RETURN(ds.dataset_yaml, read_dataset_yaml(meta / "dataset.yaml"));
  VLPAR_ASSIGN_OR_RETURN(auto counts, read_info(meta, ds.energon_version));
  std::map<std::string, int64_t> count_of(counts.begin(), counts.end());

  fs::path split_path = meta / options.split_config;
  if (!fs::exists(split_path) && options.split_config == "split.yaml") split_path = meta / "split.json";
  if (!fs::exists(split_path))
    return VLPAR_STATUS(StatusCode::kIoError, "split config {} does not exist", (meta / options.split_config).string());
  const std::string split_file = split_path.string();
  VLPAR_ASSIGN_OR_RETURN(YAML::Node split, load_yaml_file(split_file));
  if (!split.IsMap()) return VLPAR_STATUS(StatusCode::kInvalidArgument, "{}: expected a mapping", split_file);
  for (const auto& kv : split) {
    const std::string k = kv.first.as<std::string>();
    if (k != "split_parts" && k != "exclude")
      return VLPAR_STATUS(StatusCode::kInvalidArgument,
                          "{}: unknown key '{}' (a split config has split_parts and exclude)", split_file, k);
  }
  const YAML::Node parts = split["split_parts"];
  if (!parts || !parts.IsMap())
    return VLPAR_STATUS(StatusCode::kInvalidArgument, "{}: no split_parts mapping", split_file);
  const YAML::Node part = parts[options.split_part];
  if (!part) {
    std::string known;
    for (const auto& kv : parts) known += (known.empty() ? "" : ", ") + kv.first.as<std::string>();
    return VLPAR_STATUS(StatusCode::kInvalidArgument, "{}: no split part '{}' (it has: {})", split_file,
                        options.split_part, known);
  }
  VLPAR_ASSIGN_OR_RETURN(std::vector<std::string> patterns, string_list(part, split_file, "split_parts." + options.split_part));
  VLPAR_ASSIGN_OR_RETURN(std::vector<std::string> exclude_patterns, string_list(split["exclude"], split_file, "exclude"));
  std::set<std::string> excludes;
  for (const std::string& p : exclude_patterns) {
    Result<std::vector<std::string>> e = brace_expand(p);
    if (!e.ok()) return VLPAR_STATUS(StatusCode::kInvalidArgument, "{}: exclude entry: {}", split_file, e.status().message());
    excludes.insert(e->begin(), e->end());
  }
  for (const std::string& e : excludes)
    if (e.find('/') != std::string::npos) ds.sample_excludes.insert(e);

  for (const std::string& p : patterns) {
    Result<std::vector<std::string>> names = brace_expand(p);
    if (!names.ok())
      return VLPAR_STATUS(StatusCode::kInvalidArgument, "{}: split part '{}': {}", split_file, options.split_part,
                          names.status().message());
    for (const std::string& name : names.value()) {
      if (excludes.count(name)) continue;
      const auto it = count_of.find(name);
      if (it == count_of.end())
        return VLPAR_STATUS(StatusCode::kInvalidArgument,
                            "{}: split part '{}' lists shard '{}', which the dataset info (.nv-meta/.info.json) does "
                            "not know", split_file, options.split_part, name);
      EnergonShard s;
      s.name = name;
      s.path = (fs::path(root) / name).string();
      s.num_samples = it->second;
      std::error_code ec;
      const auto tar_size = fs::file_size(s.path, ec);
      if (ec)
        return VLPAR_STATUS(StatusCode::kIoError, "shard {} of split part '{}': cannot stat: {}", s.path,
                            options.split_part, ec.message());
      const std::string idx_path = s.path + ".idx";
      Result<std::vector<int64_t>> offsets = read_tar_index(idx_path);
      if (!offsets.ok()) return offsets.status();
      VLPAR_RETURN_IF_ERROR(validate_sample_offsets(offsets.value(), static_cast<int64_t>(tar_size), s.num_samples,
                                                    fmt::format("tar index {}", idx_path)));
      s.offsets = std::make_shared<const std::vector<int64_t>>(std::move(offsets).value());
      ds.shards.push_back(std::move(s));
    }
  }
  if (ds.shards.empty())
    return VLPAR_STATUS(StatusCode::kInvalidArgument, "{}: split part '{}' has no shards (after excludes)", split_file,
                        options.split_part);
  return ds;
}

}  // namespace vlpar::data
