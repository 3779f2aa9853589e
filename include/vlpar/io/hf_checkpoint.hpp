#pragma once
// Hugging Face model directories of safetensors weights (spec/formats-and-conventions.md §1, "Sharded checkpoints").
//   HfTensorSource        : every tensor of a directory, read from model.safetensors.index.json (weight_map) when it
//                           exists, else from model.safetensors; each shard validated at open().
//   write_hf_safetensors  : the layout transformers' save_pretrained writes: model.safetensors, or
//                           model-0000i-of-0000N.safetensors + model.safetensors.index.json when the tensors do not fit
//                           one shard of max_shard_bytes (huggingface_hub's greedy split, in the given order).
//   plan_hf_shards        : that split on its own.
// Test: tests/unit/test_hf_checkpoint.cpp (golden directory tests/fixtures/safetensors/sharded/).
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "vlpar/core/status.hpp"
#include "vlpar/core/tensor.hpp"
#include "vlpar/io/safetensors.hpp"

namespace vlpar::io {

/// @brief The tensors of an HF model directory. Movable, not copyable.
class HfTensorSource {
 public:
  /// @brief Opens `dir`: the index if present (errors: unreadable JSON, no weight_map, a shard file missing or
  /// invalid, a listed tensor absent from its shard), else model.safetensors. Tensors a shard holds but the index
  /// does not list are ignored, as transformers does.
  static Result<HfTensorSource> open(const std::string& dir);

  const std::string& dir() const { return dir_; }
  /// True when the directory has an index (even one with a single shard).
  bool sharded() const { return sharded_; }
  /// The opened files, in shard-name order.
  const std::vector<SafetensorsFile>& files() const { return files_; }
  /// All tensor names, sorted.
  std::vector<std::string> names() const;
  /// @brief The entry of `name`, or nullptr.
  const TensorInfo* find(std::string_view name) const;
  /// @brief Path of the file holding `name`, or nullptr.
  const std::string* file_of(std::string_view name) const;
  /// @brief SafetensorsFile::read from the shard holding `name` (its errors name that shard file).
  Status read(std::string_view name, TensorView dst) const;

 private:
  struct Entry {
    size_t file = 0;                  // index into files_
    const TensorInfo* info = nullptr; // owned by files_[file] (stable: its vector lives on the heap)
  };
  std::string dir_;
  bool sharded_ = false;
  std::vector<SafetensorsFile> files_;
  std::map<std::string, Entry, std::less<>> entries_;
};

/// @brief huggingface_hub's split of tensors (byte sizes, in state-dict order) into shards of at most
/// `max_shard_bytes`: greedy in order; a tensor larger than the limit gets a shard of its own, placed before the shard
/// being filled. Returns the tensor indices of each shard.
std::vector<std::vector<size_t>> plan_hf_shards(std::span<const uint64_t> sizes, uint64_t max_shard_bytes);

/// @brief Writes `tensors` into `dir` (created if missing) as model.safetensors, or, when plan_hf_shards gives more
/// than one shard, as model-{i:05d}-of-{n:05d}.safetensors (1-based) plus model.safetensors.index.json =
/// {"metadata": {"total_size": <tensor bytes>}, "weight_map": {name: file}} (indent 2, sorted keys, trailing
/// newline, as transformers writes it). Each file carries {"format":"pt"} and is written atomically; afterwards
/// files of an earlier save that the new layout does not use (model.safetensors, the index, other shard counts) are
/// removed. Overwriting a directory is not atomic as a whole: publish checkpoints by directory rename or a commit
/// marker. `on_written` (optional) is called with the tensor bytes of each file once it is written (progress bars).
Status write_hf_safetensors(const std::string& dir, std::span<const NamedTensor> tensors,
                            uint64_t max_shard_bytes = 5'000'000'000ull,
                            const std::function<void(uint64_t bytes)>& on_written = {});

}  // namespace vlpar::io
