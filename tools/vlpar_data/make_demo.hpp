#pragma once
// `vlpar-data make-demo`: a small VQA dataset from real photographs (issue 5 item 9), written as WebDataset shards
// with Energon metadata (webdataset_writer.hpp) that the trainer's data pipeline reads.
//
// Generation, per split (train and val use different random streams, so their crops differ):
//   1. Each photograph is decoded (JPEG/PNG, EXIF orientation applied) and box-averaged by an integer factor to a
//      working copy whose long side is <= work_long_side, with summed-area tables for O(1) region means.
//   2. The split's n samples get (question type, target answer) pairs that are exactly balanced: type i mod 4,
//      then the type's answers in turn; the list is shuffled (seeded).
//   3. For each sample, candidates are drawn until one has the target answer with a clear margin: a photograph,
//      an output size (sides in [min_side, max_side]; orientation samples have aspect >= 1.5 the right way), a
//      crop of that aspect at a random scale (1.25× .. the photo's limit) and place. Brightness candidates are
//      screened on the crop's halves and mirrored (left-right or top-bottom) when their natural answer is the other
//      one, so answers stay balanced without biasing the content; colour candidates are screened on the asked
//      quarter. The crop is resized (antialiased bicubic, image_processor.hpp), encoded as JPEG, decoded again,
//      and the answer is recomputed on those pixels (demo_tasks.hpp) and must still match with margin >= the
//      type's threshold.
//   4. Each sample is "<split>-<index>" with <key>.json (the ShareGPT record, plus "question_type",
//      "answer_margin" and "source") and <key>.jpg. Shards "train-%06d.tar" / "val-%06d.tar" of shard_size
//      samples, .tar.idx files, .nv-meta (split parts train and val), and demo_meta.json (question types, answer
//      sets, chance per type and overall, counts, size ranges, processor settings, sources, timing).
// Deterministic: the same photographs (in any listing order: they are sorted by file name), options and seed give
// the same bytes, for any number of threads.
#include <cstdint>
#include <string>
#include <vector>

#include "demo_tasks.hpp"
#include "vlpar/core/status.hpp"

namespace vlpar::tools {

struct DemoThresholds {
  double brightness = 0.08;   // |Δ mean luma| / 255 between the halves
  double colour = 0.08;       // (largest − second channel mean) / 255 in the quarter
  double orientation = 0.4;   // max/min − 1 of the processor's grid (1.4:1 at least)
  double screen_extra = 0.02; // candidates are screened on the source crop with threshold + this
};

struct DemoOptions {
  std::vector<std::string> photos;  // JPEG/PNG files
  std::string source;               // where the photographs come from (recorded in demo_meta.json)
  std::string out;                  // dataset root
  bool overwrite = false;           // remove a previous demo dataset in `out` first (only the files it writes)
  int64_t train_samples = 2000;
  int64_t val_samples = 200;
  uint64_t seed = 0;
  int threads = 2;
  int64_t shard_size = 250;         // samples per shard
  int64_t min_side = 64;            // output image sides, pixels
  int64_t max_side = 160;
  int64_t work_long_side = 800;     // long side of the working copy of each photograph
  int jpeg_quality = 90;
  int64_t max_attempts = 4000;      // candidates per sample before giving up with an error
  DemoThresholds thresholds;
  OrientationConfig orientation;    // processor grid for the orientation answers (recorded in demo_meta.json)
  bool progress = true;             // progress bars on stderr
};

struct DemoSplitReport {
  int64_t samples = 0;
  int64_t shards = 0;
  uint64_t bytes = 0;
  int64_t candidates = 0;                           // candidates drawn (>= samples)
  std::vector<std::vector<int64_t>> answer_counts;  // [type][answer]
  int64_t min_width = 0, max_width = 0, min_height = 0, max_height = 0;
};

struct DemoReport {
  DemoSplitReport train, val;
  int64_t photos = 0;
  double decode_seconds = 0.0;
  double generate_seconds = 0.0;
  double total_seconds = 0.0;
  double chance_overall = 0.0;  // mean over the val questions of 1/|answers|
};

/// @brief Validates the options.
Status validate(const DemoOptions& options);

/// @brief Builds the dataset (see the file comment). Errors name the photograph, the sample or the file.
Result<DemoReport> make_demo(const DemoOptions& options);

}  // namespace vlpar::tools
