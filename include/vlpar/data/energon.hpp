#pragma once
// Megatron-Energon prepared WebDatasets, read without Python (formats-and-conventions.md §3; Energon 7.4.1
// flavors/webdataset/{metadata,structs,prepare}.py, verified against `energon prepare` output in
// tests/fixtures/energon/, made by tools/golden/make_energon_fixture.py).
//
// On disk: <root>/<shard>.tar (any sub-path) + <root>/<shard>.tar.idx (webdataset.hpp) + <root>/.nv-meta/:
//   dataset.yaml  optional here (energon prepare --skip-dataset-yaml omits it): `__module__`/`__class__` (e.g.
//                 megatron.energon / CrudeWebdataset) or `sample_type: {__module__, __class__}` with `field_map`,
//                 or `sample_loader` / `part_filter`; `subflavors`. Read and exposed, not interpreted.
//   split.yaml    `split_parts: {<part>: [<shard pattern>...]}` and `exclude: [<pattern>...]` (or split.json when
//                 split.yaml is absent; any other name through EnergonOpenOptions::split_config). Semantics, as
//                 WebdatasetMeta.from_config implements them:
//                   - every split_parts entry and every exclude entry is brace-expanded (braceexpand 0.1.7 rules,
//                     brace_expand below); the part's shards are its expanded entries in order;
//                   - an exclude entry equal to a shard name drops that shard from every part;
//                   - exclude entries containing '/' also form the sample-exclude set, matched against
//                     "<shard name>/<sample key>" (the key, not the sample index, whatever structs.py's comment
//                     says: itar_reader.py calls sample_filter(f"{shard_name}/{base_name}")); an excluded sample
//                     keeps its index, it is just not delivered;
//                   - a part that is missing, or left with no shard, is an error (Energon: assertion /
//                     EmptyDatasetError).
//   .info.json    {"energon_version": "...", "shard_counts": {"<shard name>": <samples>, ...}} (legacy .info.yaml
//                 when .info.json is absent). Every shard of the part must be listed (Energon: KeyError).
// open_energon_dataset also reads and validates every shard's .tar.idx against .info.json and the tar size, so a
// missing shard or idx file, a count mismatch or a truncated tar fails at open time with a message naming the file.
// index.sqlite / index.uuid (Energon >= 7) are not needed for sequential and idx-based reading and are ignored.
// Test: tests/unit/test_energon.cpp.
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "vlpar/core/status.hpp"

namespace vlpar::data {

/// @brief Bash-style brace expansion with python braceexpand 0.1.7's rules: {a,b} sequences (nested), integer
/// ranges {07..10} (zero padding when a bound has a leading 0) with optional step {1..10..3}, letter ranges {a..e}
/// over A-Za-z, backslash escapes; a brace group that is neither a range nor a sequence stays literal ("{x}").
/// kInvalidArgument on unbalanced braces.
Result<std::vector<std::string>> brace_expand(std::string_view pattern);

/// What .nv-meta/dataset.yaml says (kept as text; the C++ pipeline does not interpret Energon sample types).
struct EnergonDatasetYaml {
  bool present = false;
  std::string module;                           // __module__ (e.g. "megatron.energon")
  std::string class_name;                       // __class__ (e.g. "CrudeWebdataset")
  std::string sample_type_module;               // sample_type.__module__
  std::string sample_type_class;                // sample_type.__class__ (e.g. "CaptioningSample")
  std::map<std::string, std::string> field_map; // field_map: sample field -> tar extension (scalar values only)
  std::map<std::string, std::string> subflavors;// subflavors (scalar values only)
  std::string sample_loader;                    // sample_loader ("file.py:fn")
  std::string part_filter;                      // part_filter ("file.py:fn")
};

/// One shard of a split part, with its validated sample offsets.
struct EnergonShard {
  std::string name;  // relative path as in split.yaml / .info.json ("parts/shard-000.tar")
  std::string path;  // <root>/<name>
  int64_t num_samples = 0;
  std::shared_ptr<const std::vector<int64_t>> offsets;  // [num_samples + 1] from <path>.idx
};

/// A split part of an Energon-prepared dataset.
struct EnergonDataset {
  std::string root;
  std::string split_part;
  std::string energon_version;           // from .info.json ("" when absent)
  EnergonDatasetYaml dataset_yaml;
  std::vector<EnergonShard> shards;      // the part's shards in split-file order, excluded shards removed
  std::set<std::string> sample_excludes; // "<shard name>/<sample key>" (every expanded exclude entry with a '/')

  int64_t num_samples() const;           // Σ shard sample counts (excluded samples included)
  bool is_excluded(std::string_view shard, std::string_view key) const;
};

struct EnergonOpenOptions {
  std::string split_part = "train";
  std::string split_config = "split.yaml";  // file under .nv-meta/; "split.yaml" falls back to "split.json"
};

/// @brief Opens split part `options.split_part` of the Energon dataset at `root` (see the file comment).
/// Errors name the file and the defect: missing .nv-meta files, YAML/JSON syntax, an unknown part, a shard not in
/// .info.json, a missing shard or .tar.idx, an idx whose count disagrees with .info.json or that points past the
/// end of its tar.
Result<EnergonDataset> open_energon_dataset(const std::string& root, const EnergonOpenOptions& options = {});

}  // namespace vlpar::data
