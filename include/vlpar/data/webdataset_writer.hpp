#pragma once
// Writing WebDataset shards and the Megatron-Energon metadata that makes them a prepared dataset
// (spec formats-and-conventions.md §3). The readers are tar_reader.hpp / webdataset.hpp / energon.hpp; the
// Python `webdataset` and `megatron-energon` packages read the same files.
//
// Tar dialect (what GNU tar, Python's tarfile, webdataset and Energon all accept):
//   * POSIX ustar headers (magic "ustar\0", version "00"), one regular file (typeflag '0') per member, no
//     directory entries; mode 0444, uid/gid 0, uname/gname "bigdata", mtime 0 (all in TarWriterOptions): the same
//     samples give the same bytes on every run.
//   * A name longer than 100 bytes gets a pax extended header ('x', name "././@PaxHeader", record "path=<name>")
//     before its ustar header, which then holds the name's first 100 bytes.
//   * Sizes below 8 GiB in 11 octal digits, larger ones in GNU base-256 (high bit of the field set).
//   * Data padded with zeros to 512 bytes; the archive ends with two zero blocks (no padding to a 10 KiB record).
//   * Files are written to "<path>.tmp.<pid>", flushed, fsync'd and renamed to <path> by finish() (the directory is
//     then fsync'd): a reader never sees a half-written shard. A writer destroyed before finish() removes its
//     temporary. The .tar.idx goes through webdataset.hpp's write_tar_index (also atomic), after the tar.
//
// Sample format of vlpar's vision-language datasets (read by the data pipeline's conversation loader,
// conversation.hpp; written by `vlpar-data convert` and `vlpar-data make-demo`):
//   <key>.json        the ShareGPT/LLaVA record, UTF-8 JSON object:
//                       {"id": "<key>", "conversations": [{"from": "human", "value": "<image>\nQuestion?"},
//                                                         {"from": "gpt", "value": "answer"}, ...], ...}
//                     "from" is "system", "human" or "gpt"; every "<image>" placeholder in the values, in reading
//                     order, takes the next image member. Other fields are kept (the demo adds "question_type");
//                     the source file's "image"/"images" paths are dropped (the pixels are in the sample).
//   <key>.jpg         the image, when the record has exactly one ("<key>.png" for PNG files);
//   <key>.0.jpg, <key>.1.png, ...   the images of a record with several, numbered in placeholder order (the
//                     index is decimal, so "10.jpg" sorts before "2.jpg" inside the tar: order by the number).
//   Text-only records have only <key>.json.
//
// Names are split as webdataset and Energon split them: key = the path up to the first '.' of the basename,
// extension = the rest. So a key's basename must be non-empty and dot-free (directories may hold dots), an
// extension is non-empty and has no '/', and the members of a sample are written consecutively, sorted by
// extension (byte order, as webdataset's writer sorts them). Names that the readers skip as metadata
// ("__…__" at the start) are rejected, as are absolute paths, empty, "." and ".." path components and NUL bytes.
// webdataset lower-cases extensions and Energon does not, so two extensions of a sample that differ only in case
// are rejected; a key repeated within one shard is rejected (it would merge two samples when read back).
//
// Energon layout written by write_energon_metadata (Energon 7.x reads it without `energon prepare`; the
// optional index.sqlite is only needed for key-based random access, which vlpar does not use):
//   <root>/<shard>.tar            the shards (any relative path)
//   <root>/<shard>.tar.idx        u64 little-endian byte offsets of each sample's first header (its pax header
//                                 if any), plus one final entry = the offset after the last member (before the
//                                 end blocks): n_samples = file size / 8 − 1
//   <root>/.nv-meta/dataset.yaml  __module__: megatron.energon / __class__: CrudeWebdataset
//   <root>/.nv-meta/split.yaml    split_parts: {<part>: [<shard>, ...]}, exclude: [...]
//   <root>/.nv-meta/.info.json    {"energon_version": ..., "shard_counts": {<shard>: n_samples, ...}}
//                                 (written last: its presence marks a complete dataset)
// Test: tests/unit/test_webdataset_writer.cpp (byte layout, GNU tar and Python tarfile listings, .tar.idx
// against the headers, the library reader's round trip, rejected names, atomicity).
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "vlpar/core/status.hpp"

namespace vlpar::data {

/// One file of a sample: "<key>.<ext>" in the tar.
struct WdsMember {
  std::string ext;             // "json", "jpg", "0.jpg": non-empty, no '/'
  std::vector<uint8_t> data;   // the file's bytes
};

/// A sample: its members are written consecutively under one key, sorted by extension.
struct WdsSample {
  std::string key;                  // "000123" or "dir/000123": basename non-empty without '.'
  std::vector<WdsMember> members;   // at least one; extensions unique (case-insensitively)
};

/// @brief Checks a sample's key and extensions against the naming rules of the file comment; the message names
/// the key, the extension and the defect.
Status validate_sample(const WdsSample& sample);

struct TarWriterOptions {
  int64_t mtime = 0;               // seconds since the epoch, every member
  uint32_t mode = 0444;            // permission bits, every member
  std::string uname = "bigdata";   // <= 31 bytes
  std::string gname = "bigdata";   // <= 31 bytes
  bool fsync = true;               // fsync the tar before the rename and the directory after it (the .tar.idx
                                   // and metadata files are always fsync'd)
};

/// A tar archive written member by member to "<path>.tmp.<pid>", renamed to <path> by finish().
class TarWriter {
 public:
  /// @brief Creates "<path>.tmp.<pid>" (the parent directory must exist). Errors name the path and errno's text.
  static Result<TarWriter> open(const std::string& path, const TarWriterOptions& options = {});
  TarWriter(TarWriter&&) noexcept;
  TarWriter& operator=(TarWriter&&) noexcept;
  ~TarWriter();  // without finish(): closes and removes the temporary

  /// @brief Appends one regular file (a pax header first when name is longer than 100 bytes).
  /// Errors: empty name, a NUL byte in it, a write failure, a writer already finished.
  Status add(std::string_view name, std::span<const uint8_t> data);
  /// @brief Writes the two zero blocks, flushes, fsyncs and renames the .tmp to the final path.
  Status finish();

  /// Bytes written so far = the offset where the next member's first header goes.
  uint64_t offset() const;
  /// The final path (not the .tmp).
  const std::string& path() const;

 private:
  struct Impl;
  explicit TarWriter(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

/// @brief The 512-byte ustar header of a regular file, as TarWriter writes it (exposed for tests).
/// Errors: name longer than 100 bytes (the caller adds a pax header), uname/gname longer than 31 bytes.
Result<std::vector<uint8_t>> make_ustar_header(std::string_view name, uint64_t size, char typeflag,
                                               const TarWriterOptions& options);

/// @brief One pax "path" record: "<len> path=<name>\n" where <len> counts the whole record in bytes.
std::string pax_path_record(std::string_view name);

/// One finished shard.
struct ShardInfo {
  std::string name;      // path relative to the dataset root, e.g. "train-000000.tar"
  int64_t samples = 0;   // samples in the shard
  uint64_t bytes = 0;    // size of the .tar file
};

struct ShardWriterOptions {
  std::string pattern = "shard-%06d.tar";  // relative to root; one integer conversion %d / %Nd / %0Nd ('%%' is
                                           // a literal %); may contain directories (created as needed)
  int64_t first_index = 0;                 // number of the first shard
  int64_t max_count = 100000;              // samples per shard
  uint64_t max_size = 3000000000;          // tar bytes per shard: a shard is closed before a sample that would
                                           // take it past max_size (a single larger sample gets a shard of its own)
  bool write_index = true;                 // write <shard>.tar.idx next to each shard
  TarWriterOptions tar;
};

/// @brief The shard name for index i: the pattern with its integer conversion formatted like printf.
/// Errors: no conversion, more than one, or anything other than %d with an optional '0' flag and width.
Result<std::string> format_shard_name(std::string_view pattern, int64_t index);

/// Writes samples into shards named by a printf pattern, rolling to a new shard at max_count samples or
/// max_size bytes; every shard is written atomically with its .tar.idx.
class ShardWriter {
 public:
  /// @brief Checks the options (pattern, max_count >= 1, max_size >= 1024) and that root is a directory
  /// (created if missing). No file is created before the first sample.
  static Result<ShardWriter> open(const std::string& root, const ShardWriterOptions& options = {});
  ShardWriter(ShardWriter&&) noexcept;
  ShardWriter& operator=(ShardWriter&&) noexcept;
  ~ShardWriter();  // without finish(): the open shard's .tmp files are removed (finished shards stay)

  /// @brief Validates the sample (validate_sample, key not yet used in the current shard) and appends it.
  Status write(const WdsSample& sample);
  /// @brief Closes the open shard (tar, then .tar.idx). Idempotent.
  Status finish();

  /// The finished shards, in order.
  const std::vector<ShardInfo>& shards() const;
  int64_t samples_written() const;

 private:
  struct Impl;
  explicit ShardWriter(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

/// One split part of split.yaml, e.g. {"train", {"train-000000.tar", "train-000001.tar"}}.
struct EnergonSplitPart {
  std::string name;                  // "train", "val", "test"
  std::vector<std::string> shards;   // shard names relative to the root (brace patterns allowed)
};

struct EnergonMetadata {
  std::vector<ShardInfo> shards;          // .info.json shard_counts, in this order (Energon's tar_file_id)
  std::vector<EnergonSplitPart> parts;    // split.yaml split_parts, in this order
  std::vector<std::string> exclude;       // split.yaml exclude: "<shard>" or "<shard>/<key>"
  std::string energon_version = "vlpar-0.1.0";  // .info.json energon_version (informational)
};

/// @brief Writes <root>/.nv-meta/{dataset.yaml, split.yaml, .info.json}, each atomically (io::atomic_write_file:
/// tmp, fsync, rename, directory fsync), .info.json last.
/// Checks: at least one shard; shard names unique, relative, not containing ".."; every split part non-empty,
/// with a unique name, and every plain (brace-free) entry naming a shard of `shards`.
Status write_energon_metadata(const std::string& root, const EnergonMetadata& metadata);

}  // namespace vlpar::data
