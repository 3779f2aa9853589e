// Qwen3-VL HF weight import/export. See hf_weights.hpp.
#include "hf_weights.hpp"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "vlpar/core/log.hpp"
#include "vlpar/io/hf_checkpoint.hpp"
#include "vlpar/io/safetensors.hpp"

namespace qwen3vl {

using vlpar::DType;
using vlpar::Shape;
namespace nn = vlpar::nn;
namespace io = vlpar::io;

namespace {

// The parameter's full tensor seen as [rows, rest] so HF parts are row blocks of it.
int64_t row_width(const Shape& s) { return s.ndim == 0 ? 1 : s.numel() / s[0]; }

// Rows [row, row + shape.numel()/width) of `full` (contiguous, viewed as [rows, width]) seen with `shape`.
Result<TensorView> part_view(TensorView full, int64_t row, const Shape& shape) {
  const int64_t width = row_width(full.shape);
  VLPAR_ASSIGN_OR_RETURN(TensorView as_rows, full.reshape(Shape{full.shape[0], width}));
  return as_rows.slice(0, row, row + shape.numel() / width).reshape(shape);
}

}  // namespace

std::vector<HfPart> hf_parts(const Model& model, size_t index) {
  const vlpar::ParamShard& p = model.registry().entry(index).shard;
  const std::string& name = p.name;
  const std::string fused = "mlp.gate_up_proj.weight";
  if (name.ends_with(fused)) {
    const std::string stem = name.substr(0, name.size() - fused.size());
    const int64_t I = p.full_shape[0] / 2, H = p.full_shape[1];
    return {{stem + "mlp.gate_proj.weight", Shape{I, H}}, {stem + "mlp.up_proj.weight", Shape{I, H}}};
  }
  if (name == "model.visual.patch_embed.proj.weight") {
    const VisionConfig& v = model.config().vision;
    return {{name, Shape{v.hidden, v.in_channels, v.temporal_patch, v.patch, v.patch}}};
  }
  return {{name, p.full_shape}};
}

// A pipeline rank's part reads only its stages' tensors; the others belong to other ranks' parts.
static bool held_by_another_part(const PipelinePart& part, const std::string& name) {
  if (part.whole) return false;
  const std::string layers = "model.language_model.layers.";
  if (name.starts_with(layers)) {
    const std::string rest = name.substr(layers.size());
    const size_t dot = rest.find('.');
    if (dot == std::string::npos || dot == 0 || rest.find_first_not_of("0123456789") != dot) return false;
    const std::string digits = rest.substr(0, dot);
    return digits.size() <= 6 && !part.holds(std::stoi(digits));
  }
  if (name.starts_with("model.visual.") || name == "model.language_model.embed_tokens.weight")
    return !part.vision_and_embedding;
  if (name == "model.language_model.norm.weight" || name == "lm_head.weight") return !part.head;
  return false;
}

Status load_hf_weights(Model& model, const std::string& dir, vlpar::obs::ProgressBar* progress) {
  VLPAR_ASSIGN_OR_RETURN(io::HfTensorSource src, io::HfTensorSource::open(dir));
  nn::ParamRegistry& reg = model.registry();
  vlpar::Allocator scratch;
  std::set<std::string> used;
  for (size_t i = 0; i < reg.size(); ++i) {
    const vlpar::ParamShard& p = reg.entry(i).shard;
    // vlpar's expert bias (text.router_expert_bias) is in vlpar's own exports only: from an HF checkpoint it starts
    // at zero, i.e. routing as HF does.
    if (p.name.ends_with(".mlp.gate.e_score_correction_bias") && src.find(p.name) == nullptr) continue;
    VLPAR_ASSIGN_OR_RETURN(Tensor full, Tensor::empty(scratch, p.full_shape, reg.entry(i).dtype));
    const int64_t width = row_width(p.full_shape);
    int64_t row = 0;
    for (const HfPart& part : hf_parts(model, i)) {
      const io::TensorInfo* info = src.find(part.name);
      VLPAR_CHECK(info != nullptr, "{}: tensor {} is missing (the model needs it for {})", dir, part.name, p.name);
      VLPAR_CHECK(info->supported && info->shape == part.shape, "{}: tensor {} has shape [{}] but the config gives {}",
                  *src.file_of(part.name), part.name, fmt::join(info->dims, ", "), part.shape.to_string());
      VLPAR_ASSIGN_OR_RETURN(TensorView dst, part_view(full, row, part.shape));
      VLPAR_RETURN_IF_ERROR(src.read(part.name, dst));
      row += part.shape.numel() / width;
      used.insert(part.name);
    }
    VLPAR_RETURN_IF_ERROR(vlpar::gather_shard_from_full(reg.value(i), full, p));
    if (progress) progress->add(int64_t(full.view().nbytes()));
  }
  for (const std::string& name : src.names()) {
    if (used.contains(name) || held_by_another_part(model.part(), name)) continue;
    if (name == "lm_head.weight" && model.config().text.tie_word_embeddings) continue;  // tied: HF ignores it
    return VLPAR_STATUS(vlpar::StatusCode::kInvalidArgument,
                        "{}: tensor {} (in {}) is not a parameter of this {} model", dir, name, *src.file_of(name),
                        model.config().moe ? "Qwen3-VL-MoE" : "Qwen3-VL");
  }
  return Status::Ok();
}

Result<Model> load_hf_model(const Context& ctx, const std::string& dir, const Freeze& freeze, Allocator& alloc,
                            vlpar::DType dtype) {
  VLPAR_ASSIGN_OR_RETURN(Config cfg, load_hf_config(dir));
  cfg.dtype = dtype;
  VLPAR_ASSIGN_OR_RETURN(Model model, Model::create(ctx, cfg, freeze, std::nullopt, alloc));
  VLPAR_RETURN_IF_ERROR(load_hf_weights(model, dir));
  return model;
}

Result<std::vector<io::NamedTensor>> hf_tensors(const Model& model, HfWhich which, const std::string& prefix,
                                                const std::vector<TensorView>* whole) {
  const nn::ParamRegistry& reg = model.registry();
  std::vector<io::NamedTensor> out;
  for (size_t i = 0; i < reg.size(); ++i) {
    const vlpar::ParamShard& p = reg.entry(i).shard;
    const bool given = whole != nullptr && i < whole->size() && !(*whole)[i].empty() && which == HfWhich::kValues;
    VLPAR_CHECK(given || p.local_shape() == p.full_shape, "{} is sharded over tensor or expert parallelism; gather "
                "it first (gather_experts for experts)", p.name);
    const TensorView full = given ? (*whole)[i] : which == HfWhich::kValues ? reg.value(i) : reg.grad(i);
    VLPAR_CHECK(full.empty() || full.shape == p.full_shape, "{}: the whole view given is {}, the parameter {}",
                p.name, full.to_string(), p.full_shape.to_string());
    if (full.empty()) continue;  // a frozen parameter has no gradient
    int64_t row = 0;
    for (const HfPart& part : hf_parts(model, i)) {
      VLPAR_ASSIGN_OR_RETURN(TensorView view, part_view(full, row, part.shape));
      out.push_back({prefix + part.name, view});
      row += part.shape.numel() / row_width(p.full_shape);
    }
  }
  return out;
}

namespace {

/// One expert parameter's E_l experts with every etp rank's width side by side ([E_l, ...] of the full shape):
/// the etp ranks' values and inner pieces are all-gathered and each placed where its pieces say.
Result<Tensor> gather_expert_width(const vlpar::ParamShard& p, TensorView mine, vlpar::comm::Communicator* etp,
                                   Allocator& alloc) {
  const int n = etp->size();
  const int64_t np = int64_t(p.inner_pieces.size());
  VLPAR_ASSIGN_OR_RETURN(Tensor desc, Tensor::empty(alloc, Shape{3 * np}, DType::kI64));
  for (int64_t k = 0; k < np; ++k) {
    const vlpar::ShardPiece& q = p.inner_pieces[size_t(k)];
    desc.ptr<int64_t>()[3 * k] = q.local_begin;
    desc.ptr<int64_t>()[3 * k + 1] = q.full_begin;
    desc.ptr<int64_t>()[3 * k + 2] = q.length;
  }
  VLPAR_ASSIGN_OR_RETURN(Tensor all_desc, Tensor::empty(alloc, Shape{n * 3 * np}, DType::kI64));
  VLPAR_RETURN_IF_ERROR(etp->all_gather(all_desc, desc));
  VLPAR_ASSIGN_OR_RETURN(Tensor parts, Tensor::empty(alloc, Shape{n * mine.numel()}, mine.dtype));
  VLPAR_RETURN_IF_ERROR(etp->all_gather(parts, mine));
  vlpar::ParamShard wide = p;  // the rank's experts as the whole tensor, split along the width only
  wide.full_shape[0] = mine.shape[0];
  wide.shard_dim = p.inner_dim;
  wide.inner_dim = -1;
  wide.inner_pieces.clear();
  VLPAR_ASSIGN_OR_RETURN(Tensor out, Tensor::empty(alloc, wide.full_shape, mine.dtype));
  int64_t covered = 0;
  for (int r = 0; r < n; ++r) {
    wide.pieces.clear();
    for (int64_t k = 0; k < np; ++k) {
      const int64_t* d = all_desc.ptr<int64_t>() + (r * np + k) * 3;
      wide.pieces.push_back({d[0], d[1], d[2]});
      covered += d[2];
    }
    const TensorView part(static_cast<char*>(parts.view().data) + size_t(r * mine.numel()) * dtype_size(mine.dtype),
                          mine.dtype, mine.shape);
    VLPAR_RETURN_IF_ERROR(vlpar::scatter_shard_into_full(out, part, wide));
  }
  VLPAR_CHECK(covered == p.full_shape[p.inner_dim], "gather_experts: the {} etp ranks hold {} of the {} columns of "
              "{} along dim {}", n, covered, p.full_shape[p.inner_dim], p.name, p.inner_dim);
  return out;
}

}  // namespace

Result<std::vector<TensorView>> gather_experts(const Model& model, const nn::ExpertParallel& ep, Allocator& alloc,
                                               std::vector<Tensor>& storage) {
  const nn::ParamRegistry& reg = model.registry();
  std::vector<TensorView> whole(reg.size());
  if (!ep.active() && ep.etp_size() == 1) return whole;
  for (size_t i = 0; i < reg.size(); ++i) {  // registry order: the same sequence of all-gathers on every rank
    const vlpar::ParamShard& p = reg.entry(i).shard;
    if (p.replica != vlpar::ReplicaGroup::kExpert) continue;
    VLPAR_CHECK(p.shard_dim == 0 && p.local_shape()[0] * ep.size() == p.full_shape[0] &&
                    (ep.etp_size() == 1) == (p.inner_dim < 0),
                "gather_experts: {} is {} of {} on each of {} ep × {} etp ranks, not an even split of its experts "
                "(and, with etp, of their width)", p.name, p.local_shape().to_string(), p.full_shape.to_string(),
                ep.size(), ep.etp_size());
    Tensor wide;
    if (ep.etp_size() > 1) {
      VLPAR_ASSIGN_OR_RETURN(wide, gather_expert_width(p, reg.value(i), ep.etp, alloc));
    }
    const TensorView experts = ep.etp_size() > 1 ? wide.view() : reg.value(i);
    if (!ep.active()) {
      whole[i] = experts;
      storage.push_back(std::move(wide));
      continue;
    }
    VLPAR_ASSIGN_OR_RETURN(Tensor t, Tensor::empty(alloc, p.full_shape, experts.dtype));
    VLPAR_RETURN_IF_ERROR(ep.comm->all_gather(t, experts));
    whole[i] = t.view();
    storage.push_back(std::move(t));
  }
  return whole;
}

Status export_hf(const Model& model, const std::string& dir, DType dtype, uint64_t max_shard_bytes,
                 vlpar::obs::ProgressBar* progress, const std::vector<TensorView>* whole) {
  VLPAR_CHECK(dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kF16,
              "export_hf: storage dtype {} is not F32, BF16 or F16", vlpar::dtype_name(dtype));
  VLPAR_ASSIGN_OR_RETURN(std::vector<io::NamedTensor> out, hf_tensors(model, HfWhich::kValues, "", whole));
  if (model.config().text.router_expert_bias)
    vlpar::log_warn("export_hf: the routers' expert biases are written as layers.<l>.mlp.gate.e_score_correction_bias "
                    "(read back by vlpar); HF Qwen3-VL-MoE has no such tensor, so transformers ignores them and "
                    "selects experts by the probabilities alone");
  vlpar::Allocator scratch;
  std::vector<Tensor> converted;  // keeps converted copies alive until written
  for (io::NamedTensor& t : out) {
    if (t.view.dtype == dtype) continue;
    VLPAR_ASSIGN_OR_RETURN(Tensor c, Tensor::empty(scratch, t.view.shape, dtype));
    VLPAR_RETURN_IF_ERROR(vlpar::convert_(c, t.view));
    t.view = c.view();
    converted.push_back(std::move(c));
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  VLPAR_CHECK_CODE(!ec, vlpar::StatusCode::kIoError, "export_hf: cannot create {}: {}", dir, ec.message());
  VLPAR_RETURN_IF_ERROR(io::write_hf_safetensors(dir, out, max_shard_bytes, [progress](uint64_t bytes) {
    if (progress) progress->add(int64_t(bytes));
  }));
  const std::string json = to_hf_config_json(model.config());
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(json.data()), json.size());
  const std::span<const std::byte> pieces[] = {bytes};
  return io::atomic_write_file(dir + "/config.json", pieces);
}

}  // namespace qwen3vl
