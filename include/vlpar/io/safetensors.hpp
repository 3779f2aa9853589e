#pragma once
// safetensors files (huggingface/safetensors format; spec/formats-and-conventions.md §1).
//   SafetensorsFile    : a read-only memory map of one file, validated in full at open(): every defect the
//                        reference reader rejects (and duplicate keys, which it silently tolerates) is a Status
//                        naming the file and the defect. read() copies one tensor into a vlpar view, converting
//                        between float dtypes (F64/F32/BF16/F16) or integer dtypes (I64/I32).
//   write_safetensors  : writes a file the way the reference writer does (byte-identical for the same tensors
//                        and metadata {"format":"pt"}), atomically (tmp file, fsync, rename, fsync dir).
//   atomic_write_file  : the atomic write itself, for any sequence of byte pieces.
// Layout: u64 LE header length N | N bytes of UTF-8 JSON padded with spaces | data buffer; each entry
// {"dtype":"BF16","shape":[d0,...],"data_offsets":[begin,end]} with offsets relative to the buffer.
// Test: tests/unit/test_safetensors.cpp (golden files in tests/fixtures/safetensors/, made by
// tools/golden/make_safetensors_fixtures.py).
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "vlpar/core/dtype.hpp"
#include "vlpar/core/status.hpp"
#include "vlpar/core/tensor.hpp"

namespace vlpar::io {

/// @brief The safetensors spelling of a vlpar dtype ("F32", "BF16", "F16", "I32", "I64", "F64").
std::string_view safetensors_dtype_name(DType dtype);

/// @brief One tensor entry of a safetensors header.
struct TensorInfo {
  std::string name;
  std::string dtype_name;        // safetensors spelling, e.g. "BF16", "U8", "F8_E4M3"
  DType dtype = DType::kF32;     // the vlpar dtype; meaningful only when `supported`
  bool supported = false;        // dtype is one of F64/F32/BF16/F16/I64/I32 and rank <= kMaxDims
  std::vector<int64_t> dims;     // the full shape, any rank ([] for a scalar)
  Shape shape;                   // == dims when dims.size() <= kMaxDims (else ndim 0; see `supported`)
  int64_t numel = 1;             // product of dims (0 when any dim is 0)
  uint64_t begin = 0, end = 0;   // byte offsets relative to the data buffer, end one past
  uint64_t nbytes() const { return end - begin; }
};

/// @brief A validated, memory-mapped (read-only) safetensors file. Movable, not copyable; tensor bytes stay valid
/// while the object lives.
class SafetensorsFile {
 public:
  /// @brief Maps `path` and validates the whole header (see the file comment); errors name the file and defect.
  static Result<SafetensorsFile> open(const std::string& path);

  SafetensorsFile(SafetensorsFile&& other) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&& other) noexcept;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;
  ~SafetensorsFile();

  const std::string& path() const { return path_; }
  /// Entries in data-offset order.
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  /// @brief The entry called `name`, or nullptr.
  const TensorInfo* find(std::string_view name) const;
  /// The "__metadata__" object (string -> string); empty when the file has none.
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  /// 8 + N: file offset where the data buffer starts.
  uint64_t data_start() const { return data_start_; }
  /// @brief Raw little-endian bytes of one entry of this file (no alignment guarantee).
  std::span<const std::byte> bytes(const TensorInfo& info) const;

  /// @brief Copies tensor `name` into `dst` (contiguous, CPU or CUDA, exactly the tensor's shape).
  /// Float files (F64/F32/BF16/F16) convert to any float dst dtype: widening is exact, narrowing rounds to nearest
  /// even once (F64 -> BF16/F16 included: no double rounding). I64/I32 convert to I64/I32, range-checked.
  /// Float <-> integer, dtypes vlpar lacks (U8, BOOL, F8_*, ...) and rank > kMaxDims are errors naming the file
  /// and the tensor.
  Status read(std::string_view name, TensorView dst) const;

 private:
  SafetensorsFile() = default;
  void release();

  std::string path_;
  const std::byte* map_ = nullptr;  // whole file, PROT_READ
  size_t map_size_ = 0;
  uint64_t data_start_ = 0;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> index_;  // name -> position in tensors_
  std::map<std::string, std::string> metadata_;
};

/// @brief A tensor to write: CPU or CUDA view of any vlpar dtype (written with that dtype), any strides.
struct NamedTensor {
  std::string name;
  TensorView view;
};

/// @brief Writes a safetensors file atomically: <path>.tmp.<pid>, fsync, rename over <path>, fsync of the directory.
/// The header is compact JSON padded with spaces to a multiple of 8, "__metadata__" = {"format":"pt"} plus
/// `metadata` (a "format" key in `metadata` replaces "pt"), tensors packed in the reference writer's order
/// (descending dtype alignment I64 > F64 > F32 > I32 > BF16 > F16, then name), so every tensor is naturally aligned.
/// Everything is validated before the file is created: duplicate or "__metadata__" names, invalid UTF-8, null
/// data, negative sizes. On any failure <path> is untouched and no temporary file remains.
Status write_safetensors(const std::string& path, std::span<const NamedTensor> tensors,
                         const std::map<std::string, std::string>& metadata = {});

/// @brief Writes the concatenation of `pieces` to `path` atomically (same protocol as write_safetensors).
Status atomic_write_file(const std::string& path, std::span<const std::span<const std::byte>> pieces);

}  // namespace vlpar::io
