// Reading the example's packed batch file. See batch_io.hpp.
#include "batch_io.hpp"

#include <algorithm>
#include <array>

#include <fmt/ranges.h>

#include "vlpar/core/log.hpp"
#include "vlpar/data/pack_checks.hpp"
#include "vlpar/io/safetensors.hpp"

namespace qwen3vl {

using vlpar::DType;
using vlpar::Result;
using vlpar::Shape;
using vlpar::Status;
using vlpar::TensorView;
namespace io = vlpar::io;
namespace data = vlpar::data;

namespace {

constexpr std::array<std::string_view, 9> kNames = {
    "input_ids",           "cu_seqlens",     "labels",           "pixel_values",     "image_grid_thw",
    "pixel_values_videos", "video_grid_thw", "images_per_sample", "videos_per_sample"};

// Reads `name` into `out` as T (floats widen, ints convert with range checks); `shape` receives its shape.
// Absent = nothing read, false.
template <class T>
Result<bool> read_into(const io::SafetensorsFile& f, std::string_view name, std::vector<T>& out, Shape& shape) {
  const io::TensorInfo* info = f.find(name);
  if (info == nullptr) return false;
  VLPAR_CHECK(info->supported, "{}: tensor {} has dtype {}, which this program cannot read", f.path(), name,
              info->dtype_name);
  shape = info->shape;
  out.resize(size_t(shape.numel()));
  const DType dtype = std::is_same_v<T, float> ? DType::kF32 : DType::kI64;
  VLPAR_RETURN_IF_ERROR(f.read(name, TensorView(out.data(), dtype, shape)));
  return true;
}

Result<std::vector<vlpar::VisionGrid>> read_grids(const io::SafetensorsFile& f, std::string_view name) {
  std::vector<int64_t> v;
  Shape shape;
  VLPAR_ASSIGN_OR_RETURN(const bool present, read_into(f, name, v, shape));
  std::vector<vlpar::VisionGrid> grids;
  if (!present || v.empty()) return grids;
  VLPAR_CHECK(shape.ndim == 2 && shape[1] == 3, "{}: {} must be [n, 3], got {}", f.path(), name, shape.to_string());
  for (size_t i = 0; i < v.size(); i += 3) grids.push_back(vlpar::VisionGrid{v[i], v[i + 1], v[i + 2]});
  return grids;
}

// Pixel rows [rows, patch_dim]: the patch width of the pack (all modalities share it).
Result<int64_t> read_pixels(const io::SafetensorsFile& f, std::string_view name, std::vector<float>& out) {
  Shape shape;
  VLPAR_ASSIGN_OR_RETURN(const bool present, read_into(f, name, out, shape));
  if (!present || out.empty()) return int64_t{0};
  VLPAR_CHECK(shape.ndim == 2, "{}: {} must be [patches, patch_dim], got {}", f.path(), name, shape.to_string());
  return shape[1];
}

}  // namespace

Result<data::PackedBatch> load_batch(const std::string& path, const data::MropeDesc& desc) {
  VLPAR_ASSIGN_OR_RETURN(io::SafetensorsFile f, io::SafetensorsFile::open(path));
  for (const io::TensorInfo& t : f.tensors())
    VLPAR_CHECK(std::find(kNames.begin(), kNames.end(), t.name) != kNames.end(),
                "{}: unknown tensor {} (expected some of {})", path, t.name, fmt::join(kNames, ", "));
  data::PackedBatch p;
  Shape shape;
  VLPAR_ASSIGN_OR_RETURN(const bool has_ids, read_into(f, "input_ids", p.input_ids, shape));
  VLPAR_CHECK(has_ids && !p.input_ids.empty() && shape.ndim == 1,
              "{}: input_ids must be present, non-empty and one-dimensional [N]", path);
  const auto n = int64_t(p.input_ids.size());
  VLPAR_ASSIGN_OR_RETURN(const bool has_labels, read_into(f, "labels", p.labels, shape));
  if (!has_labels) p.labels.assign(size_t(n), data::kIgnoreLabel);
  VLPAR_CHECK(int64_t(p.labels.size()) == n && shape.ndim == 1, "{}: labels {} must have the shape of input_ids [{}]",
              path, shape.to_string(), n);
  VLPAR_ASSIGN_OR_RETURN(const bool has_cu, read_into(f, "cu_seqlens", p.cu_seqlens, shape));
  if (!has_cu) p.cu_seqlens = {0, n};
  const auto B = int64_t(p.cu_seqlens.size()) - 1;
  VLPAR_CHECK(B >= 1 && p.cu_seqlens.front() == 0 && p.cu_seqlens.back() == n,
              "{}: cu_seqlens must hold B + 1 >= 2 boundaries from 0 to N = {}", path, n);
  VLPAR_ASSIGN_OR_RETURN(const int64_t img_dim, read_pixels(f, "pixel_values", p.pixel_values));
  VLPAR_ASSIGN_OR_RETURN(const int64_t vid_dim, read_pixels(f, "pixel_values_videos", p.pixel_values_videos));
  VLPAR_CHECK(img_dim == 0 || vid_dim == 0 || img_dim == vid_dim,
              "{}: pixel_values has {} values a patch but pixel_values_videos {}", path, img_dim, vid_dim);
  p.patch_dim = std::max(img_dim, vid_dim);
  VLPAR_ASSIGN_OR_RETURN(p.image_grids, read_grids(f, "image_grid_thw"));
  VLPAR_ASSIGN_OR_RETURN(p.video_grids, read_grids(f, "video_grid_thw"));
  for (auto [name, out] : {std::pair{"images_per_sample", &p.images_per_sample},
                           std::pair{"videos_per_sample", &p.videos_per_sample}}) {
    VLPAR_ASSIGN_OR_RETURN(const bool present, read_into(f, name, *out, shape));
    if (!present) continue;
    VLPAR_CHECK(shape.ndim == 1, "{}: {} must be [B], got {}", path, name, shape.to_string());
    VLPAR_CHECK(out->empty() || int64_t(out->size()) == B, "{}: {} has {} entries but the batch has {} samples", path,
                name, out->size(), B);
  }
  // Positions, once, for the whole pack (they restart per sample).
  p.positions.resize(size_t(3 * n));
  p.rope_deltas.resize(size_t(B));
  if (Status s = data::compute_mrope_positions(p.positions, p.rope_deltas, p.input_ids, p.cu_seqlens, p.image_grids,
                                               p.video_grids, desc);
      !s.ok())
    return Status(s.code(), fmt::format("{}: {}", path, s.message()));
  for (int64_t i = 0; i < B; ++i) p.sample_keys.push_back(fmt::format("{}#{}", path, i));
  p.token_budget = n;
  p.recount();
  if (Status s = p.view().validate(); !s.ok()) return Status(s.code(), fmt::format("{}: {}", path, s.message()));
  return p;
}

Status check_model_inputs(const data::PackedBatch& pack, int64_t vocab, std::string_view where) {
  VLPAR_ASSIGN_OR_RETURN(const data::PackInputReport r, data::check_pack_inputs(pack, vocab));
  if (r.nonfinite_pixels > 0)
    vlpar::log_warn("{}: {} non-finite pixel values (NaN/Inf) in the batch, the first at {}; a non-finite loss "
                    "skips the step (training.max_nonfinite_in_a_row)",
                    where, r.nonfinite_pixels, r.first_nonfinite);
  return Status::Ok();
}

int64_t pad_for_sequence_parallel(vlpar::data::PackedBatch& pack, int64_t multiple, int64_t pad_id) {
  const auto N = int64_t(pack.input_ids.size());
  const int64_t r = multiple > 1 ? (multiple - N % multiple) % multiple : 0;
  if (r == 0) return 0;
  const int64_t B = pack.num_samples();
  pack.input_ids.insert(pack.input_ids.end(), size_t(r), pad_id);
  pack.labels.insert(pack.labels.end(), size_t(r), vlpar::data::kIgnoreLabel);
  if (pack.cu_seqlens.empty()) pack.cu_seqlens = {0, N};
  pack.cu_seqlens.push_back(N + r);
  std::vector<int64_t> pos(size_t(3 * (N + r)));  // [3, N + r]: each row's N values, then 0 … r − 1
  for (size_t row = 0; row < 3; ++row) {
    const auto src = pack.positions.begin() + int64_t(row) * N;
    std::copy(src, src + N, pos.begin() + int64_t(row) * (N + r));
    for (int64_t k = 0; k < r; ++k) pos[size_t(int64_t(row) * (N + r) + N + k)] = k;
  }
  pack.positions = std::move(pos);
  if (int64_t(pack.rope_deltas.size()) == B) pack.rope_deltas.push_back(0);
  if (int64_t(pack.images_per_sample.size()) == B) pack.images_per_sample.push_back(0);
  if (int64_t(pack.videos_per_sample.size()) == B) pack.videos_per_sample.push_back(0);
  pack.sample_keys.push_back("<padding>");
  pack.recount();
  return r;
}

}  // namespace qwen3vl
