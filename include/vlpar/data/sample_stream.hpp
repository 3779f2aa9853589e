#pragma once
// SampleStream: the shuffled, data-parallel-split, resumable sequence of WebDataset samples one rank reads.
//
// Epoch plan (a pure function of the shard list, the config and the epoch number e; SampleStream::epoch_inputs):
//   1. Shard order: a permutation of the shards drawn from Philox(seed, e) by Fisher-Yates (identity when
//      shuffle_shards is off). Shards with 0 samples are dropped.
//   2. Rank split, with S = number of (non-empty) shards and R = dp_size:
//        by shard  (RankSplit::kByShard, or kAuto when S >= R): walk the permuted shards and give each to the rank
//                  with the fewest samples so far (lowest rank on ties); a rank reads whole shards, in that order.
//                  Every rank gets at least one shard; per-rank counts differ by at most the largest shard.
//        by sample (RankSplit::kBySample, or kAuto when S < R): concatenate the permuted shards into one sequence
//                  of N samples and give rank r the contiguous slice [floor(r·N/R), floor((r+1)·N/R)); counts
//                  differ by at most 1. Needs N >= R.
//      Either way the ranks' inputs partition the epoch: union = every sample once, pairwise intersection = ∅.
//   3. Sample order: the rank reads its inputs in plan order into a shuffle buffer of B = shuffle_buffer samples;
//      each next() fills the buffer up to B and hands out the sample in a slot drawn from the rank's own Philox
//      stream (seed, e, rank), moving the last slot into the hole. At the end of the epoch the buffer drains (the
//      buffer never mixes epochs), so each epoch's output is a permutation of the rank's inputs. B <= 1 keeps plan
//      order. Memory: the raw bytes of up to B samples are held.
//   Excluded samples (Energon split `exclude`, "<shard>/<key>") and corrupt samples (webdataset.hpp SampleRead) keep
//   their place in the plan but are not delivered: each is counted in stats(), a corrupt one also logged as a
//   warning with its key, shard and offset. An epoch that delivers nothing on a rank is an error (not a hang).
//   Epochs follow each other endlessly unless num_epochs > 0, after which next() returns std::nullopt.
//
// Resume: save_state() is a small JSON object (format "vlpar.sample_stream", version 1):
//   {epoch, cursor (inputs of the epoch consumed), produced_in_epoch, rng_counter (draws made by the buffer's
//    Philox stream), buffer: [[shard id, sample index], ...] in slot order, stats, plus the config fields and a
//    fingerprint of the shard list (names and counts)}.
// restore(state) on a stream created with the same shards and config re-reads the referenced buffer samples and
// continues with exactly the sample the saved stream would have delivered next. A state from another dataset,
// seed, rank, dp_size, buffer size, split rule or shuffle setting is rejected with a message naming the field.
// Test: tests/unit/test_sample_stream.cpp.
#include <cstdint>
#include <compare>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "vlpar/core/status.hpp"
#include "vlpar/data/energon.hpp"
#include "vlpar/data/webdataset.hpp"

namespace vlpar::data {

/// One shard the stream reads.
struct StreamShard {
  std::string name;                                     // goes into Sample::shard and exclude matching
  std::string path;                                     // tar file
  std::shared_ptr<const std::vector<int64_t>> offsets;  // [n + 1] validated sample offsets (.tar.idx)
  int64_t num_samples() const { return offsets ? static_cast<int64_t>(offsets->size()) - 1 : 0; }
};

/// @brief StreamShards of plain WebDataset tars: indexes each by a header scan (build_sample_offsets); the shard
/// name is the path as given. Errors name the tar.
Result<std::vector<StreamShard>> index_webdataset_shards(const std::vector<std::string>& tar_paths);

/// How an epoch is divided among data-parallel ranks (file comment, step 2).
enum class RankSplit { kAuto, kByShard, kBySample };

struct SampleStreamConfig {
  uint64_t seed = 0;
  bool shuffle_shards = true;
  int64_t shuffle_buffer = 0;  // B: samples held for shuffling; <= 1 = plan order
  int64_t dp_rank = 0;         // this rank, 0 <= dp_rank < dp_size
  int64_t dp_size = 1;         // R
  RankSplit split = RankSplit::kAuto;
  int64_t num_epochs = 0;      // 0 = endless; otherwise next() returns std::nullopt after num_epochs epochs
  ShardReadOptions read;       // extension case, field filter

  /// @brief One sentence per conflict (rank outside [0, dp_size), negative buffer, ...).
  Status validate() const;
};

/// A sample's identity in a stream: (shard id = position in the stream's shard list, sample index in the shard).
struct SampleRef {
  int32_t shard = -1;
  int64_t index = -1;
  auto operator<=>(const SampleRef&) const = default;
};

struct SampleStreamStats {
  int64_t samples = 0;           // delivered
  int64_t bytes = 0;             // Σ field bytes delivered
  int64_t skipped_corrupt = 0;   // corrupt samples skipped (warned)
  int64_t skipped_excluded = 0;  // samples excluded by the split config
  int64_t epochs_completed = 0;
};

class SampleStream {
 public:
  /// @brief A stream over `shards` (ids = positions) with Energon-style sample excludes ("<shard name>/<key>").
  static Result<SampleStream> create(std::vector<StreamShard> shards, std::set<std::string> sample_excludes,
                                     SampleStreamConfig config);
  /// @brief A stream over an opened Energon split part (its shards and sample excludes).
  static Result<SampleStream> create(const EnergonDataset& dataset, SampleStreamConfig config);

  /// @brief The next sample of this rank; std::nullopt once num_epochs epochs are done. Errors (Status) are the
  /// fatal shard errors of ShardReader::read, and an epoch that delivers nothing.
  Result<std::optional<Sample>> next();

  /// @brief The resumable state (file comment).
  std::string save_state() const;
  /// @brief Continues from `state` (file comment). On error the stream is unchanged.
  Status restore(std::string_view state);

  /// @brief This rank's inputs of epoch `epoch` in read order (before the buffer shuffle).
  std::vector<SampleRef> epoch_inputs(int64_t epoch) const;
  /// @brief Whether epochs are split by shard (else by sample slice), as resolved from RankSplit.
  bool splits_by_shard() const { return by_shard_; }

  int64_t epoch() const { return epoch_; }
  /// Inputs of the current epoch consumed so far (read into the buffer or skipped).
  int64_t cursor() const { return cursor_; }
  const SampleStreamStats& stats() const { return stats_; }
  const std::vector<StreamShard>& shards() const { return shards_; }
  const SampleStreamConfig& config() const { return config_; }

 private:
  struct Segment {  // shard `shard`, samples [begin, end)
    int32_t shard;
    int64_t begin, end;
  };
  struct Slot {
    SampleRef ref;
    Sample sample;
  };
  SampleStream() = default;

  std::vector<Segment> plan(int64_t epoch) const;
  void start_epoch(int64_t epoch);
  SampleRef input_at(int64_t cursor) const;
  // Reads one sample; std::nullopt when it is skipped (excluded or corrupt; counted and warned).
  Result<std::optional<Sample>> load(SampleRef ref, bool count_skips);
  Result<const ShardReader*> reader(int32_t shard);
  uint64_t buffer_draw(uint64_t n);  // uniform in [0, n) from the buffer's Philox stream
  std::string fingerprint() const;

  std::vector<StreamShard> shards_;
  std::set<std::string> excludes_;
  SampleStreamConfig config_;
  bool by_shard_ = true;

  int64_t epoch_ = 0;
  bool epoch_started_ = false;
  std::vector<Segment> segments_;  // plan of epoch_
  int64_t epoch_inputs_ = 0;       // Σ segment lengths
  int64_t cursor_ = 0;
  int64_t produced_in_epoch_ = 0;
  uint64_t rng_counter_ = 0;
  std::vector<Slot> buffer_;
  SampleStreamStats stats_;

  // Open shard readers (a few; sequential reading needs one). Keyed by shard id, with a use stamp for eviction.
  std::map<int32_t, std::pair<uint64_t, std::unique_ptr<ShardReader>>> readers_;
  uint64_t reader_clock_ = 0;
};

}  // namespace vlpar::data
