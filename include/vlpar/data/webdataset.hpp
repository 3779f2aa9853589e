#pragma once
// WebDataset samples over tar shards (formats-and-conventions.md §3; webdataset tariterators.py, Megatron-Energon
// flavors/webdataset/{config,prepare,itar,itar_reader}.py).
//
//   Sample              one sample: key, shard, index in the shard, and the raw bytes of each member (field)
//   split_member_name   the WebDataset/Energon name rule ^((?:.*/|)[^.]+)[.]([^/]*)$ : key = path up to the first
//                       '.' of the basename (directories kept), extension = the rest ("seg.mask.png")
//   is_meta_member      Energon's skip rule: names matching ^__[^/]*__($|/) are not sample members
//   .tar.idx            read_tar_index / write_tar_index / build_sample_offsets / validate_sample_offsets
//   ShardReader         one shard + its sample offsets: read(i) parses only the bytes of sample i
//
// Grouping (as energon prepare and webdataset do): walk the members in archive order; skip non-regular members,
// meta members and names without an extension; a sample is a maximal run of consecutive sample members with the
// same key. Skipped members between two members of one key do not split it.
//
// .tar.idx (Energon itar.py TarIndexWriter/TarIndexReader, prepare.py _preprocess_tar; verified against files that
// `energon prepare` 7.4.1 wrote, tests/fixtures/energon): a headerless array of uint64 in native byte order
// (struct "Q"; little-endian on every platform Energon runs on, so vlpar reads and writes little-endian explicitly).
// Entry i (0 <= i < n) = TarInfo.offset of the first member of sample i, i.e. the offset of its first header
// including its GNU 'L' / pax 'x' headers but not a preceding pax 'g' header (so a tar that starts with a global
// header has idx[0] = 1024, not 0); one extra last entry = the offset after the last member (where the
// end-of-archive blocks start). n = file bytes / 8 - 1; sample i spans [idx[i], idx[i+1]). The span of a sample
// also holds any skipped members (directories, meta, names without '.') that precede the next sample.
//
// Field extensions are lower-cased (ASCII) by default, as webdataset does (Energon keeps the case: set
// ShardReadOptions::lowercase_ext = false for that).
//
// Corrupt data (see SampleRead): inside a sample span, a header that is not a valid header (bad checksum, bad
// number, bad pax record) or an extension that occurs twice in one sample makes the sample a counted skip with
// its key (when readable) and the reason; the shard stays readable because the next sample's offset is known.
// Errors (Status) instead, naming the shard file and the offset: the idx disagrees with the tar (the block at
// idx[i] is not a header at all: bad checksum and no "ustar" magic; a span without a sample member; a second key
// inside one span; a member crossing the span end; the end of the archive inside a span), truncation (a header or
// content past the end of the file), I/O failures. (A block at idx[i] with the magic but a bad checksum is a
// corrupt header: a skip.)
// Test: tests/unit/test_webdataset.cpp (goldens from Energon's own reader in tests/fixtures/energon/).
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "vlpar/core/status.hpp"
#include "vlpar/data/tar_reader.hpp"

namespace vlpar::data {

/// One member of a sample: what the decoders consume ("jpg"/"png" → image decode, "json"/"txt" → text).
struct SampleField {
  std::string ext;            // extension after the key's '.', lower-cased by default: "jpg", "json", "seg.mask.png"
  std::vector<uint8_t> data;  // [size] the member's raw content, read once from the shard (one copy per member)
};

/// One WebDataset sample.
struct Sample {
  std::string key;                  // "dir/name": member path up to the first '.' of its basename
  std::string shard;                // shard name (relative path as in .info.json, or the path the reader was given)
  int64_t index_in_shard = -1;      // 0-based sample index within the shard (its row in .tar.idx)
  std::vector<SampleField> fields;  // in archive order; extensions unique within the sample

  /// @brief The field with extension `ext` (compared exactly), or nullptr.
  const SampleField* field(std::string_view ext) const;
  /// @brief Sum of the content bytes of all fields.
  int64_t num_bytes() const;
};

/// A member name split into sample key and extension.
struct MemberName {
  std::string key;  // "a/b/c" for "a/b/c.d.e"
  std::string ext;  // "d.e" (case kept)
};

/// @brief The WebDataset/Energon split rule (regex in the file comment, evaluated exactly, backtracking included);
/// std::nullopt when the name has no extension (no match).
std::optional<MemberName> split_member_name(std::string_view name);

/// @brief Energon's meta rule: true when `name` matches ^__[^/]*__($|/) (e.g. "__meta__", "__x__/y.json").
bool is_meta_member(std::string_view name);

/// @brief Reads a .tar.idx file (the raw u64 array; no validation beyond the file size being a non-zero multiple
/// of 8 and every entry fitting int64). Errors name the file.
Result<std::vector<int64_t>> read_tar_index(const std::string& idx_path);

/// @brief Writes `offsets` as a .tar.idx (u64 little-endian), atomically (tmp file, rename), as Energon does.
Status write_tar_index(const std::string& idx_path, std::span<const int64_t> offsets);

/// @brief The sample offsets `energon prepare` writes for `tar` ([n+1], see the file comment). Scans headers
/// only (content is skipped with seeks). Errors: any header defect (the shard cannot be indexed), with offset.
Result<std::vector<int64_t>> build_sample_offsets(const TarFile& tar);

/// @brief Checks offsets against a tar of `tar_size` bytes: at least one entry, every entry a multiple of 512,
/// strictly increasing, the last one <= tar_size; when expected_samples >= 0, exactly expected_samples + 1 entries.
/// Errors (kInvalidArgument) name `what` (e.g. the idx file), the entry and its byte offset in the idx.
Status validate_sample_offsets(std::span<const int64_t> offsets, int64_t tar_size, int64_t expected_samples,
                               std::string_view what);

/// Reading options of a shard.
struct ShardReadOptions {
  bool lowercase_ext = true;         // webdataset lower-cases extensions; Energon does not
  std::vector<std::string> only_ext; // when non-empty, read only these extensions (after lower-casing); the others
                                     // are skipped without reading their content (Energon's part_filter)
};

/// Outcome of reading one sample through the index.
struct SampleRead {
  Sample sample;            // the sample; when skipped(), holds the key (if a header was readable) and no fields
  std::string skip_reason;  // non-empty: the sample is corrupt and is to be skipped (message names shard, offset)
  bool skipped() const { return !skip_reason.empty(); }
};

/// @brief One shard with its sample offsets; read(i) touches only the bytes of sample i (pread). Movable; const
/// reads are thread-safe.
class ShardReader {
 public:
  /// @brief Opens `path` and takes `offsets` (a validated .tar.idx, shared between readers of the same shard);
  /// with offsets == nullptr they are built by a header scan (build_sample_offsets). `shard_name` goes into each
  /// Sample and every message.
  static Result<ShardReader> open(const std::string& path, std::string shard_name,
                                  std::shared_ptr<const std::vector<int64_t>> offsets = nullptr,
                                  ShardReadOptions options = {});

  const std::string& name() const { return name_; }
  const TarFile& tar() const { return tar_; }
  int64_t num_samples() const { return static_cast<int64_t>(offsets_->size()) - 1; }
  const std::shared_ptr<const std::vector<int64_t>>& offsets() const { return offsets_; }

  /// @brief Reads sample `index` (0 <= index < num_samples()); see SampleRead and the file comment for what is a
  /// skip and what is an error.
  Result<SampleRead> read(int64_t index) const;

 private:
  ShardReader(TarFile tar, std::string name, std::shared_ptr<const std::vector<int64_t>> offsets,
              ShardReadOptions options)
      : tar_(std::move(tar)), name_(std::move(name)), offsets_(std::move(offsets)), options_(std::move(options)) {}

  TarFile tar_;
  std::string name_;
  std::shared_ptr<const std::vector<int64_t>> offsets_;
  ShardReadOptions options_;
};

}  // namespace vlpar::data
