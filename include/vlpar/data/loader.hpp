#pragma once
// The data loader (issue 5, item 7): raw samples → tokenized samples in parallel → packed micro-batches in one
// deterministic stage → a bounded prefetch queue the trainer pops.
//
//   source (SampleSource: the SampleStream, or an in-memory list)
//      │  read in stream order under a lock; sample i gets sequence number i and the source state after it
//      ▼
//   N worker threads: build(sample) = parse, decode, resize/normalise/patchify, tokenise (ConversationBuilder)
//      │  results land in a reorder window keyed by sequence number (at most `reorder_window` in flight)
//      ▼
//   packing thread: consumes results strictly in sequence order → Packer (packing.hpp) → PackedBatch
//      │  bounded queue of `prefetch` batches
//      ▼
//   next(): pops one batch; the time it blocks is the trainer's data wait (stats().wait_s, last_wait_s)
//
// Determinism: workers only compute per-sample results; everything order-dependent (packing, skip counting, the
// resume state) happens in the packing thread in sequence order. So the batches are byte-identical for any
// number of workers (test: 1, 2 and 4 workers).
// Skips: a sample whose build fails (malformed record, undecodable image, ...) is skipped, counted and warned
// with its key and reason; so is a sample over a pack budget alone (the Packer's rule). summary() lists counts
// and the first skipped keys. Fatal errors (the source's I/O errors, and max_skips_in_a_row consecutive skips:
// data that cannot feed training, e.g. an endless source of corrupt files) are returned by next().
//
// Resume (save_state / restore): the state after the last batch next() returned is
//   the source state before the oldest sample still in the packer's buffer (or before the next unread sample),
//   that sample's sequence number `base`, the next sequence number to pack `end`, the buffered sequence numbers
//   in [base, end) (the packer's carry-over as sample references), the counters, and the packing config.
// restore() rewinds the source to that state and re-reads samples base..end−1: the buffered ones are rebuilt and
// re-enter the packer in the same order, the others (already packed or skipped) are dropped unbuilt. The packer
// then holds exactly what it held, so the resumed loader yields exactly the next micro-batch. The re-read is
// bounded: the oldest buffered sample always leaves with the next pack (packing.hpp rule 1), so end − base is at
// most the samples read while the packer's buffer (about max(lookahead, one pack's worth)) turned over once. The state is text (JSON); source states must be UTF-8 text (SampleStream's
// JSON, VectorSampleSource's index). A state made under a different packing config is rejected, naming the field.
// The worker count, prefetch depth and reorder window may change across a resume.
//
// Shutdown: the destructor stops and joins every thread whatever they wait on (a full queue, an empty window).
// Threads: next(), save_state(), restore(), stats() and summary() belong to one consumer thread.
// Memory: tokenized samples hold fp32 pixels (640×480 image: 1200 patches × 1536 floats = 7.4 MB), and up to
// reorder_window + the packer's buffer (>= lookahead) + prefetch packs of them are alive at once; size the
// lookahead and prefetch with that in mind.
// Test: tests/unit/test_loader.cpp.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "vlpar/core/status.hpp"
#include "vlpar/data/conversation.hpp"
#include "vlpar/data/packing.hpp"
#include "vlpar/data/sample_stream.hpp"
#include "vlpar/data/webdataset.hpp"

namespace vlpar::data {

/// Raw samples in a fixed order with a resumable position.
class SampleSource {
 public:
  virtual ~SampleSource() = default;
  /// @brief The next sample; std::nullopt at the end. An error is fatal for the loader.
  virtual Result<std::optional<Sample>> next() = 0;
  /// @brief The position before the sample next() would return (UTF-8 text).
  virtual std::string save_state() const = 0;
  /// @brief Continues from a save_state() result.
  virtual Status restore(std::string_view state) = 0;
};

/// The SampleStream (shuffled, rank-split, resumable) as a SampleSource.
class StreamSampleSource final : public SampleSource {
 public:
  explicit StreamSampleSource(SampleStream stream) : stream_(std::move(stream)) {}
  Result<std::optional<Sample>> next() override { return stream_.next(); }
  std::string save_state() const override { return stream_.save_state(); }
  Status restore(std::string_view state) override { return stream_.restore(state); }
  const SampleStream& stream() const { return stream_; }

 private:
  SampleStream stream_;
};

/// An in-memory list of samples, repeated `epochs` times (0 = endlessly). State: the position as decimal text.
class VectorSampleSource final : public SampleSource {
 public:
  explicit VectorSampleSource(std::vector<Sample> samples, int64_t epochs = 1)
      : samples_(std::make_shared<const std::vector<Sample>>(std::move(samples))), epochs_(epochs) {}
  VectorSampleSource(std::shared_ptr<const std::vector<Sample>> samples, int64_t epochs = 1)
      : samples_(std::move(samples)), epochs_(epochs) {}
  Result<std::optional<Sample>> next() override;
  std::string save_state() const override { return std::to_string(position_); }
  Status restore(std::string_view state) override;

 private:
  std::shared_ptr<const std::vector<Sample>> samples_;
  int64_t epochs_ = 1;
  int64_t position_ = 0;  // samples handed out so far (across epochs)
};

/// Turns one raw sample into a tokenized sample; called from worker threads concurrently (must be thread-safe
/// and deterministic). An error skips the sample.
using SampleBuildFn = std::function<Result<TokenizedSample>(const Sample&)>;

struct LoaderConfig {
  int64_t num_workers = 2;        // build threads (>= 1)
  int64_t prefetch = 4;           // packed batches ready ahead of the consumer (>= 1)
  int64_t reorder_window = 0;     // samples read but not yet packed (>= num_workers); 0 = 4·num_workers + 8
  int64_t max_logged_skips = 64;  // skipped "key: reason" lines kept for summary()
  int64_t max_skips_in_a_row = 100000;  // this many consecutive skipped samples are a fatal error for next() (data
                                        // that cannot feed training must not spin forever); 0 = no limit
  PackingConfig packing;
  /// @brief One sentence per conflict.
  Status validate() const;
};

struct LoaderStats {
  int64_t samples_read = 0;       // consumed from the source by the packing stage (in order)
  int64_t samples_packed = 0;     // in batches handed out or queued
  int64_t skipped_invalid = 0;    // build failed (malformed record, undecodable image, ...)
  int64_t skipped_oversize = 0;   // over a pack budget alone
  int64_t batches = 0;            // returned by next()
  int64_t real_tokens = 0;        // Σ tokens of the returned batches
  int64_t budget_tokens = 0;      // batches × max_tokens
  double wait_s = 0.0;            // total time next() blocked waiting for a batch
  double last_wait_s = 0.0;       // the last next() call's wait
  std::vector<std::string> skipped; // the first max_logged_skips "key: reason"
  /// real_tokens / budget_tokens of the returned batches.
  double efficiency() const;
};

class Loader {
 public:
  /// @brief A loader over `source` with a sample builder and the ids MRoPE needs. Threads start at the first
  /// next() (so restore() may be called first without wasted work).
  static Result<std::unique_ptr<Loader>> create(std::unique_ptr<SampleSource> source, SampleBuildFn build,
                                                MropeDesc desc, LoaderConfig config);
  /// @brief The same with a ConversationBuilder (the usual case).
  static Result<std::unique_ptr<Loader>> create(std::unique_ptr<SampleSource> source,
                                                std::shared_ptr<const ConversationBuilder> builder,
                                                LoaderConfig config);
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;
  /// Stops and joins every thread, never hangs (a full queue or a blocked worker is woken).
  ~Loader();

  /// @brief The next packed batch; std::nullopt at the end of the source. Errors are fatal (the source failed);
  /// the same error is returned again by later calls.
  Result<std::optional<PackedBatch>> next();

  /// @brief The resumable state after the last batch next() returned (file comment).
  std::string save_state() const;
  /// @brief Continues from a save_state() result: stops the pipeline, rewinds the source, rebuilds the packer's
  /// carry-over; the next next() returns the batch the saved loader would have returned. On error the loader is
  /// unchanged (apart from a stopped pipeline, which restarts on the next next()).
  Status restore(std::string_view state);

  /// Counters as of the last batch returned (wait times are live).
  LoaderStats stats() const;
  /// @brief Counts, efficiency, wait time and the first skipped keys, one line each.
  std::string summary() const;

 private:
  struct Impl;
  explicit Loader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace vlpar::data
