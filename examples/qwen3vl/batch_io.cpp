// Reading the example's packed batch file. See batch_io.hpp.
#include "batch_io.hpp"

#include <algorithm>
#include <array>

#include <fmt/ranges.h>

#include "vlpar/io/safetensors.hpp"

namespace qwen3vl {

using vlpar::DType;
using vlpar::Shape;
namespace io = vlpar::io;

namespace {

constexpr std::array<std::string_view, 9> kNames = {
    "input_ids",           "cu_seqlens",     "labels",           "pixel_values",     "image_grid_thw",
    "pixel_values_videos", "video_grid_thw", "images_per_sample", "videos_per_sample"};

// Reads `name` as `dtype` with its own shape (floats widen, ints convert with range checks); absent = empty.
Result<Tensor> read_as(const io::SafetensorsFile& f, std::string_view name, DType dtype, Allocator& alloc) {
  const io::TensorInfo* info = f.find(name);
  if (info == nullptr) return Tensor{};
  VLPAR_CHECK(info->supported, "{}: tensor {} has dtype {}, which this program cannot read", f.path(), name,
              info->dtype_name);
  VLPAR_ASSIGN_OR_RETURN(Tensor t, Tensor::empty(alloc, info->shape, dtype));
  VLPAR_RETURN_IF_ERROR(f.read(name, t));
  return t;
}

Result<std::vector<vlpar::VisionGrid>> read_grids(const io::SafetensorsFile& f, std::string_view name,
                                                  Allocator& alloc) {
  VLPAR_ASSIGN_OR_RETURN(Tensor t, read_as(f, name, DType::kI64, alloc));
  std::vector<vlpar::VisionGrid> grids;
  if (t.view().empty()) return grids;
  VLPAR_CHECK(t.view().ndim() == 2 && t.view().size(1) == 3, "{}: {} must be [n, 3], got {}", f.path(), name,
              t.view().shape.to_string());
  for (int64_t i = 0; i < t.view().size(0); ++i) {
    const int64_t* r = t.ptr<int64_t>() + 3 * i;
    grids.push_back(vlpar::VisionGrid{r[0], r[1], r[2]});
  }
  return grids;
}

// Points the Batch views at the tensors the LoadedBatch owns (grids are set by the caller).
void view_tensors(LoadedBatch& lb) {
  lb.batch.input_ids = lb.input_ids;
  lb.batch.labels = lb.labels;
  lb.batch.cu_seqlens = lb.cu_seqlens;
  lb.batch.pixel_values = lb.pixel_values;
  lb.batch.pixel_values_videos = lb.pixel_values_videos;
}

}  // namespace

Result<LoadedBatch> load_batch(const std::string& path, Allocator& alloc) {
  VLPAR_ASSIGN_OR_RETURN(io::SafetensorsFile f, io::SafetensorsFile::open(path));
  for (const io::TensorInfo& t : f.tensors())
    VLPAR_CHECK(std::find(kNames.begin(), kNames.end(), t.name) != kNames.end(),
                "{}: unknown tensor {} (expected some of {})",
                path, t.name, fmt::join(kNames, ", "));
  LoadedBatch lb;
  VLPAR_ASSIGN_OR_RETURN(lb.input_ids, read_as(f, "input_ids", DType::kI64, alloc));
  VLPAR_CHECK(!lb.input_ids.view().empty() && lb.input_ids.view().ndim() == 1,
              "{}: input_ids must be present and one-dimensional [N]", path);
  const int64_t n = lb.input_ids.numel();
  VLPAR_ASSIGN_OR_RETURN(lb.labels, read_as(f, "labels", DType::kI64, alloc));
  if (f.find("labels") == nullptr) {
    VLPAR_ASSIGN_OR_RETURN(lb.labels, Tensor::empty(alloc, Shape{n}, DType::kI64));
    for (int64_t i = 0; i < n; ++i) lb.labels.ptr<int64_t>()[i] = -100;
  }
  VLPAR_CHECK(lb.labels.view().shape == lb.input_ids.view().shape, "{}: labels {} must have the shape of input_ids {}",
              path, lb.labels.view().shape.to_string(), lb.input_ids.view().shape.to_string());
  VLPAR_ASSIGN_OR_RETURN(lb.cu_seqlens, read_as(f, "cu_seqlens", DType::kI64, alloc));
  if (f.find("cu_seqlens") == nullptr) {
    VLPAR_ASSIGN_OR_RETURN(lb.cu_seqlens, Tensor::empty(alloc, Shape{2}, DType::kI64));
    lb.cu_seqlens.ptr<int64_t>()[0] = 0;
    lb.cu_seqlens.ptr<int64_t>()[1] = n;
  }
  VLPAR_ASSIGN_OR_RETURN(lb.pixel_values, read_as(f, "pixel_values", DType::kF32, alloc));
  VLPAR_ASSIGN_OR_RETURN(lb.pixel_values_videos, read_as(f, "pixel_values_videos", DType::kF32, alloc));
  view_tensors(lb);
  VLPAR_ASSIGN_OR_RETURN(lb.batch.image_grids, read_grids(f, "image_grid_thw", alloc));
  VLPAR_ASSIGN_OR_RETURN(lb.batch.video_grids, read_grids(f, "video_grid_thw", alloc));
  for (auto [name, out] : {std::pair{"images_per_sample", &lb.images_per_sample},
                           std::pair{"videos_per_sample", &lb.videos_per_sample}}) {
    if (f.find(name) == nullptr) continue;
    VLPAR_ASSIGN_OR_RETURN(Tensor t, read_as(f, name, DType::kI64, alloc));
    VLPAR_CHECK(t.view().ndim() == 1, "{}: {} must be [B], got {}", path, name, t.view().shape.to_string());
    out->assign(t.ptr<int64_t>(), t.ptr<int64_t>() + t.numel());
    VLPAR_CHECK(out->empty() || int64_t(out->size()) + 1 == lb.cu_seqlens.numel(),
                "{}: {} has {} entries but the batch has {} samples", path, name, out->size(), lb.cu_seqlens.numel() - 1);
  }
  return lb;
}

namespace {

Result<Tensor> i64_tensor(const std::vector<int64_t>& v, Allocator& alloc) {
  VLPAR_ASSIGN_OR_RETURN(Tensor t, Tensor::empty(alloc, Shape{int64_t(v.size())}, DType::kI64));
  std::copy(v.begin(), v.end(), t.ptr<int64_t>());
  return t;
}

// [rows, patch_dim] f32 from a pack's pixel vector; rows must equal Σ grid patches. No pixels → an empty tensor.
Result<Tensor> pixel_tensor(const std::vector<float>& px, const std::vector<vlpar::VisionGrid>& grids,
                            int64_t patch_dim, const char* what, Allocator& alloc) {
  int64_t rows = 0;
  for (const vlpar::VisionGrid& g : grids) rows += g.patches();
  if (rows == 0 && px.empty()) return Tensor{};
  VLPAR_CHECK(patch_dim > 0 && int64_t(px.size()) == rows * patch_dim,
              "packed batch: {} has {} floats but its grids hold {} patches of {} values", what, px.size(), rows,
              patch_dim);
  VLPAR_ASSIGN_OR_RETURN(Tensor t, Tensor::empty(alloc, Shape{rows, patch_dim}, DType::kF32));
  std::copy(px.begin(), px.end(), t.ptr<float>());
  return t;
}

}  // namespace

Result<LoadedBatch> batch_from_packed(const vlpar::data::PackedBatch& pack, Allocator& alloc) {
  VLPAR_CHECK(!pack.input_ids.empty() && pack.labels.size() == pack.input_ids.size() && pack.cu_seqlens.size() >= 2,
              "packed batch: {} ids, {} labels, {} cu_seqlens entries (need ids = labels > 0 and >= 2 boundaries)",
              pack.input_ids.size(), pack.labels.size(), pack.cu_seqlens.size());
  LoadedBatch lb;
  VLPAR_ASSIGN_OR_RETURN(lb.input_ids, i64_tensor(pack.input_ids, alloc));
  VLPAR_ASSIGN_OR_RETURN(lb.labels, i64_tensor(pack.labels, alloc));
  VLPAR_ASSIGN_OR_RETURN(lb.cu_seqlens, i64_tensor(pack.cu_seqlens, alloc));
  VLPAR_ASSIGN_OR_RETURN(lb.pixel_values,
                         pixel_tensor(pack.pixel_values, pack.image_grids, pack.patch_dim, "pixel_values", alloc));
  VLPAR_ASSIGN_OR_RETURN(lb.pixel_values_videos, pixel_tensor(pack.pixel_values_videos, pack.video_grids,
                                                              pack.patch_dim, "pixel_values_videos", alloc));
  lb.images_per_sample = pack.images_per_sample;
  lb.videos_per_sample = pack.videos_per_sample;
  view_tensors(lb);
  lb.batch.image_grids = pack.image_grids;
  lb.batch.video_grids = pack.video_grids;
  return lb;
}

}  // namespace qwen3vl
