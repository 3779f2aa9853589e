// The input check of a packed batch. See pack_checks.hpp.
#include "vlpar/data/pack_checks.hpp"

#include <cmath>

#include <fmt/core.h>

namespace vlpar::data {
namespace {

std::string key_of(const PackedBatch& pack, size_t sample) {
  return sample < pack.sample_keys.size() ? fmt::format("sample '{}'", pack.sample_keys[sample]) : "a sample";
}

/// Where the owner of a pixel row cannot be told (several samples, no per-sample image counts).
std::string any_sample(const PackedBatch& pack, bool videos) {
  if (pack.sample_keys.empty()) return "a sample";
  return fmt::format("one of the samples '{}' to '{}' (the pack has no {})", pack.sample_keys.front(),
                     pack.sample_keys.back(), videos ? "videos_per_sample" : "images_per_sample");
}

/// Token ids (labels = false) or labels (true) of the pack against the vocabulary, sample by sample.
Status check_ids(const PackedBatch& pack, int64_t vocab, bool labels) {
  const std::vector<int64_t>& v = labels ? pack.labels : pack.input_ids;
  const char* name = labels ? "labels" : "input_ids";
  const std::vector<int64_t>& cu = pack.cu_seqlens;
  for (size_t s = 0; s + 1 < cu.size(); ++s) {
    for (int64_t row = cu[s]; row < cu[s + 1] && row < int64_t(v.size()); ++row) {
      const int64_t id = v[size_t(row)];
      if (id >= 0 && id < vocab) continue;
      if (labels && id == kIgnoreLabel) continue;
      return VLPAR_STATUS(StatusCode::kInvalidArgument,
                          "{}: {} row {} (position {} of the sample) is {}, outside [0, {}){}",
                          key_of(pack, s), name, row, row - cu[s], id, vocab,
                          labels ? fmt::format(" and not the ignore label {}", kIgnoreLabel) : std::string());
    }
  }
  return Status::Ok();
}

/// The sample whose images (or videos) hold patch row `row` of their pixel tensor; B = 1 needs no per-sample
/// counts; num_samples() when the owner cannot be told.
size_t owner_of_row(const PackedBatch& pack, int64_t row, bool videos) {
  const std::vector<VisionGrid>& grids = videos ? pack.video_grids : pack.image_grids;
  const std::vector<int64_t>& per_sample = videos ? pack.videos_per_sample : pack.images_per_sample;
  if (pack.num_samples() == 1) return 0;
  size_t item = 0;  // the image (video) holding the row
  for (int64_t first = 0; item < grids.size(); ++item) {
    first += grids[item].patches();
    if (row < first) break;
  }
  for (size_t s = 0, seen = 0; s < per_sample.size(); ++s) {
    seen += size_t(per_sample[s]);
    if (item < seen) return s;
  }
  return pack.sample_keys.size();
}

void count_nonfinite(const PackedBatch& pack, bool videos, PackInputReport& report) {
  const std::vector<float>& px = videos ? pack.pixel_values_videos : pack.pixel_values;
  if (pack.patch_dim <= 0) return;
  for (size_t i = 0; i < px.size(); ++i) {
    if (std::isfinite(px[i])) continue;
    if (report.nonfinite_pixels++ > 0) continue;
    const auto row = int64_t(i) / pack.patch_dim;
    const size_t owner = owner_of_row(pack, row, videos);
    const std::string who = owner < pack.sample_keys.size() ? key_of(pack, owner) : any_sample(pack, videos);
    report.first_nonfinite = fmt::format("{}: {} row {}, column {} is {}", who,
                                         videos ? "pixel_values_videos" : "pixel_values", row,
                                         int64_t(i) % pack.patch_dim, px[i]);
  }
}

}  // namespace

Result<PackInputReport> check_pack_inputs(const PackedBatch& pack, int64_t vocab) {
  VLPAR_CHECK(vocab >= 1, "check_pack_inputs: vocab is {}, it must be at least 1", vocab);
  VLPAR_RETURN_IF_ERROR(check_ids(pack, vocab, /*labels=*/false));
  VLPAR_RETURN_IF_ERROR(check_ids(pack, vocab, /*labels=*/true));
  PackInputReport report;
  count_nonfinite(pack, /*videos=*/false, report);
  count_nonfinite(pack, /*videos=*/true, report);
  return report;
}

}  // namespace vlpar::data
