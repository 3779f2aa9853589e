// The Qwen3-VL trainer. See trainer.hpp.
#include "trainer.hpp"

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>
#include <span>
#include <utility>

#include "batch_io.hpp"
#include "checkpoint_model.hpp"
#include "flops.hpp"
#include "hf_weights.hpp"
#include "vlpar/comm/single_communicator.hpp"
#include "vlpar/core/log.hpp"
#include "vlpar/data/pack_exchange.hpp"
#include "vlpar/io/checkpoint.hpp"
#include "vlpar/kernels/gemm.hpp"
#include "vlpar/kernels/router.hpp"
#include "vlpar/obs/data_wait_meter.hpp"
#include "vlpar/obs/jsonl_writer.hpp"
#include "vlpar/obs/metrics_line.hpp"
#include "vlpar/obs/plot.hpp"
#include "vlpar/obs/stopwatch.hpp"
#include "vlpar/obs/tensorboard_writer.hpp"
#include "vlpar/obs/trace_recorder.hpp"
#include "vlpar/parallel/mesh.hpp"

namespace qwen3vl {

using vlpar::DType;
using vlpar::Shape;
namespace io = vlpar::io;
namespace nn = vlpar::nn;
namespace obs = vlpar::obs;
namespace fs = std::filesystem;

// ---- FileBatchSource -----------------------------------------------------------------------------------------

Result<std::unique_ptr<FileBatchSource>> FileBatchSource::create(std::vector<std::string> files,
                                                                 const vlpar::data::MropeDesc& desc, int dp_rank,
                                                                 int dp_size) {
  VLPAR_CHECK(dp_size >= 1 && dp_rank >= 0 && dp_rank < dp_size, "FileBatchSource: dp rank {} of {}", dp_rank, dp_size);
  auto s = std::unique_ptr<FileBatchSource>(new FileBatchSource());
  for (size_t i = size_t(dp_rank); i < files.size(); i += size_t(dp_size)) s->files_.push_back(files[i]);
  s->desc_ = desc;
  VLPAR_CHECK(!s->files_.empty(), "FileBatchSource: {} batch files leave none for data-parallel rank {} of {}",
              files.size(), dp_rank, dp_size);
  return s;
}

Result<MicroBatch> FileBatchSource::next() {
  const std::string& path = files_[size_t(position_ % int64_t(files_.size()))];
  MicroBatch mb;
  VLPAR_ASSIGN_OR_RETURN(mb.pack, load_batch(path, desc_));
  mb.real_tokens = mb.pack.real_tokens;
  mb.images = mb.pack.num_images + mb.pack.num_videos;
  ++position_;
  return mb;
}

Result<std::string> FileBatchSource::state() const {
  return nlohmann::json{{"position", position_}, {"files", files_}}.dump();
}

Status FileBatchSource::restore(std::string_view state) {
  const nlohmann::json j = nlohmann::json::parse(state, nullptr, /*allow_exceptions=*/false);
  VLPAR_CHECK(j.is_object() && j.contains("position") && j["position"].is_number_integer(),
              "FileBatchSource: bad state '{}'", state);
  // The position counts this rank's share of the files: a state saved for another share would silently skip or
  // repeat data.
  if (j.contains("files")) {
    VLPAR_CHECK(j["files"].is_array() && j["files"].get<std::vector<std::string>>() == files_,
                "FileBatchSource: the state was saved for the files {} but this rank reads {}", j["files"].dump(),
                nlohmann::json(files_).dump());
  }
  position_ = j["position"].get<int64_t>();
  return Status::Ok();
}

std::string FileBatchSource::describe() const { return fmt::format("{} pre-packed batch files", files_.size()); }

Result<DataRank> data_rank_of(const TrainConfig& cfg, int world_rank, int world_size) {
  vlpar::parallel::ParallelConfig pc = cfg.parallel;
  pc.world = world_size;
  pc.etp = 1;
  pc.vision_tp = 1;
  VLPAR_ASSIGN_OR_RETURN(const vlpar::parallel::Mesh mesh, vlpar::parallel::Mesh::create(pc));
  const vlpar::parallel::AttentionCoord c = mesh.attention_coord(world_rank);
  return DataRank{c.dp, mesh.size(vlpar::parallel::Axis::kDp), cfg.parallel.pp == 1 || c.pp == 0};
}

// ---- logs ----------------------------------------------------------------------------------------------------

namespace {
obs::TraceRecorder::Options disabled_trace() {
  obs::TraceRecorder::Options o;
  o.enabled = false;
  return o;
}
}  // namespace

struct Trainer::Logs {
  obs::JsonlWriter jsonl;
  obs::TensorBoardWriter tb;
  obs::TraceRecorder trace{disabled_trace()};
  obs::DataWaitMeter wait;
  double peak_gflops = 0;
};

Trainer::~Trainer() = default;

// ---- setup ---------------------------------------------------------------------------------------------------

Status Trainer::setup_groups() {
  if (world_ == nullptr) {
    own_world_ = std::make_unique<vlpar::comm::SingleCommunicator>(vlpar::comm::CommOptions{"world"});
    world_ = own_world_.get();
  }
  const int world = world_->size(), tp = cfg_.parallel.tp, pp = cfg_.parallel.pp;
  VLPAR_CHECK(world % (tp * pp) == 0, "parallel.tp · parallel.pp = {} · {} does not divide the {} ranks of the job", tp,
              pp, world);
  VLPAR_ASSIGN_OR_RETURN(Config mc, model_config_of(cfg_.model));
  vlpar::parallel::ParallelConfig pc = cfg_.parallel;
  pc.world = world;
  // Default etp 1: each expert whole on the rank holding it (split over ep ranks); under sequence parallelism the
  // ep and etp groups may span the tp ranks.
  pc.etp = cfg_.parallel.etp > 0 ? cfg_.parallel.etp : 1;
  pc.vision_tp = cfg_.parallel.vision_tp > 0 ? cfg_.parallel.vision_tp : 1;  // default: the tower whole on each rank
  vlpar::parallel::ModelDims dims;
  dims.num_layers = mc.text.layers;
  dims.num_heads = mc.text.heads;
  dims.num_kv_heads = mc.text.kv_heads;
  dims.vocab = mc.text.vocab;
  dims.num_experts = mc.text.num_experts;
  dims.expert_intermediate = mc.text.moe_intermediate;
  VLPAR_ASSIGN_OR_RETURN(vlpar::parallel::ProcessGroups g, vlpar::parallel::ProcessGroups::create(*world_, pc, dims));
  groups_ = std::make_unique<vlpar::parallel::ProcessGroups>(std::move(g));
  tp_rank_ = groups_->tp().rank();
  dp_rank_ = groups_->dp().rank();
  dp_size_ = groups_->dp().size();
  pp_size_ = groups_->pp().size();
  return Status::Ok();
}

Status Trainer::build_model() {
  const ModelSection& m = cfg_.model;
  VLPAR_ASSIGN_OR_RETURN(Config mc, model_config_of(m));
  // The [moe] keys (vlpar's load balancing) set the model config's router terms; each needs MoE layers.
  using Key = std::pair<const char*, double>;
  for (const auto& [key, value] : {Key{"moe.expert_bias_rate", cfg_.moe.expert_bias_rate},
                                   Key{"moe.z_loss_coef", cfg_.moe.z_loss_coef},
                                   Key{"moe.seq_aux_coef", cfg_.moe.seq_aux_coef},
                                   Key{"moe.capacity_factor", cfg_.moe.capacity_factor}})
    VLPAR_CHECK(value == 0 || mc.text.num_moe_layers() > 0, "{} is {} but the model has no MoE layer", key, value);
  if (cfg_.moe.expert_bias_rate > 0) mc.text.router_expert_bias = true;
  if (cfg_.moe.z_loss_coef > 0) mc.text.router_z_loss_coef = cfg_.moe.z_loss_coef;
  if (cfg_.moe.seq_aux_coef > 0) mc.text.router_seq_aux_loss_coef = cfg_.moe.seq_aux_coef;
  if (cfg_.moe.capacity_factor > 0) mc.text.moe_capacity_factor = cfg_.moe.capacity_factor;
  mc.dtype = cfg_.training.dtype == "bf16" ? DType::kBF16 : DType::kF32;
  const Freeze freeze{m.freeze_vision, m.freeze_merger, m.freeze_language_model};
  const nn::TensorParallel tp{cfg_.parallel.tp > 1 ? &groups_->tp() : nullptr, cfg_.parallel.sequence_parallel};
  // With a pipeline, this rank builds its stages' part only (the whole model's names and init keys).
  std::optional<PipelinePlan> plan;
  if (pp_size_ > 1 || cfg_.parallel.vpp > 1) {
    VLPAR_ASSIGN_OR_RETURN(plan, plan_pipeline(cfg_, mc, pp_size_, groups_->pp().rank()));
  }
  const PipelinePart part = plan ? plan->part : PipelinePart{};
  const vlpar::nn::ExpertParallel ep{cfg_.parallel.ep > 1 ? &groups_->get(vlpar::parallel::Axis::kEp) : nullptr,
                                     cfg_.parallel.etp > 1 ? &groups_->get(vlpar::parallel::Axis::kEtp) : nullptr};
  const nn::TensorParallel vision_tp{groups_->vision_tp().size() > 1 ? &groups_->vision_tp() : nullptr, false};
  // A vision tp group wider than tp holds several data-parallel batches, whose images the model exchanges.
  const bool wide_vision = groups_->vision_tp().size() > cfg_.parallel.tp;
  VLPAR_ASSIGN_OR_RETURN(Model model,
                         Model::create(ctx_, mc, freeze, m.seed, alloc_, tp, part, ep, vision_tp, wide_vision));
  model_ = std::make_unique<Model>(std::move(model));
  if (plan) {
    VLPAR_ASSIGN_OR_RETURN(pipe_, PipelineRunner::create(std::move(*plan), *model_, groups_->pp()));
  }
  if (!m.hf_dir.empty()) VLPAR_RETURN_IF_ERROR(load_hf_weights(*model_, m.hf_dir));
  const std::string& r = cfg_.training.recompute;
  model_->set_recompute(r == "full" ? Recompute::kFull : r == "selective" ? Recompute::kSelective : Recompute::kNone);
  // The library's data-parallel optimizer over the registry, parameters in the order the backward finishes them.
  vlpar::parallel::OptimizerConfig oc = cfg_.optimizer;
  oc.average_grads = false;  // each micro-batch's backward is scaled by its share of the global label count
  const nn::ParamRegistry& reg = model_->registry();
  const std::vector<size_t> order = model_->backward_order();
  // Dense weights reduce over dp (×cp), experts over expert-dp, the vision tower over vision-dp (ReplicaGroup).
  const auto og = vlpar::parallel::OptimizerGroups::from(*groups_);
  VLPAR_ASSIGN_OR_RETURN(std::vector<vlpar::parallel::OptimParam> params,
                         vlpar::parallel::optim_params_from_registry(reg, order, og));
  optim_slot_ = vlpar::parallel::optim_slots(params, reg.size());
  // A tied embedding on two pipeline ranks: both copies hold the summed gradient, each counts half in the norm.
  if (pipe_ && pipe_->holds_tied_copy(*model_))
    for (vlpar::parallel::OptimParam& p : params)
      if (p.registry_index == model_->embed_param_index()) p.norm_weight *= 0.5;
  VLPAR_ASSIGN_OR_RETURN(vlpar::parallel::DistributedOptimizer o,
                         vlpar::parallel::DistributedOptimizer::create(ctx_, og, std::move(params), oc, alloc_));
  optim_ = std::make_unique<vlpar::parallel::DistributedOptimizer>(std::move(o));
  return Status::Ok();
}

Result<std::unique_ptr<Trainer>> Trainer::create(const TrainConfig& cfg, vlpar::comm::Communicator* world,
                                                 std::unique_ptr<BatchSource> source,
                                                 std::unique_ptr<BatchSource> held_out) {
  VLPAR_RETURN_IF_ERROR(cfg.validate());
  auto t = std::unique_ptr<Trainer>(new Trainer());
  t->cfg_ = cfg;
  t->cfg_.derive();
  t->world_ = world;
  t->ctx_ = Context::cpu_default();
  if (cfg.training.threads > 0) t->ctx_.num_threads = cfg.training.threads;
  t->ctx_.allocator = &t->alloc_;
  VLPAR_RETURN_IF_ERROR(t->setup_groups());
  VLPAR_RETURN_IF_ERROR(t->build_model());
  VLPAR_CHECK(source != nullptr || !t->loads_data(), "Trainer: no batch source (give pre-packed batch files or a "
              "dataset)");
  if (t->loads_data()) t->source_ = std::move(source);  // elsewhere the micro-batches come from pipeline rank 0
  // Vision cost per pack: patches (linear layers, ~24·Hv² FLOPs each per block) plus attention pairs (~4·Hv).
  vlpar::data::VisionCostModel cost;
  cost.per_attention_pair = 1.0 / (6.0 * double(t->model_->config().vision.hidden));
  if (t->source_) VLPAR_RETURN_IF_ERROR(t->source_->set_data_parallel(t->dp_comm(), cfg.training.grad_accum, cost));
  VLPAR_CHECK(cfg.training.eval_interval == 0 || held_out != nullptr || !t->loads_data(), "training.eval_interval = "
              "{} needs held-out data (data.eval, or --eval-batches files)", cfg.training.eval_interval);
  if (held_out && t->loads_data()) {
    t->held_out_ = std::move(held_out);
    VLPAR_ASSIGN_OR_RETURN(t->held_out_start_, t->held_out_->state());
  }
  t->logs_ = std::make_unique<Logs>();
  return t;
}

// ---- checkpoints ---------------------------------------------------------------------------------------------

std::vector<io::CheckpointTensor> Trainer::checkpoint_tensors(const vlpar::parallel::OptimizerState& optim) {
  // A tied embedding's copy on the last pipeline stage is a replica of stage 0's (which writes it).
  const bool second_copy = pipe_ && pipe_->is_second_tied_copy(*model_);
  const nn::ParamRegistry& reg = model_->registry();
  auto replica_of = [&](size_t i) {
    const vlpar::ParamShard& p = reg.entry(i).shard;
    // An expert shard's copies are the ranks of its expert-dp group (the same experts, other data).
    if (p.replica == vlpar::ReplicaGroup::kExpert) return groups_->get(vlpar::parallel::Axis::kEdp).rank();
    if (p.replica == vlpar::ReplicaGroup::kVision)  // pieces over vision tp, copies over vision dp
      return io::replica_index(p, groups_->vision_tp().size(), groups_->vision_tp().rank(),
                               groups_->vision_dp().rank());
    const int r = io::replica_index(p, cfg_.parallel.tp, tp_rank_, dp_rank_);
    return second_copy && i == model_->embed_param_index() ? r + 1 : r;
  };
  // A parameter is saved as its fp32 master where the optimizer keeps one (bf16 values): checkpoints hold the
  // masters, load into any training dtype, and resume bit for bit (the optimizer rounds them into the values).
  std::vector<io::CheckpointTensor> out;
  for (size_t i = 0; i < reg.size(); ++i) {
    const vlpar::ParamShard& p = reg.entry(i).shard;
    const bool has_master = optim_slot_[i] != SIZE_MAX && !optim.master[optim_slot_[i]].empty();
    out.push_back(io::sharded_tensor(p.name, has_master ? optim.master[optim_slot_[i]] : reg.value(i), p,
                                     replica_of(i)));
  }
  // AdamW m and v per trainable parameter, in registry order (the optimizer's own order is the backward's).
  for (size_t i = 0; i < reg.size(); ++i) {
    if (optim_slot_[i] == SIZE_MAX) continue;
    const vlpar::ParamShard& p = reg.entry(i).shard;
    out.push_back(io::sharded_tensor("optim.m." + p.name, optim.m[optim_slot_[i]], p, replica_of(i)));
    out.push_back(io::sharded_tensor("optim.v." + p.name, optim.v[optim_slot_[i]], p, replica_of(i)));
  }
  return out;
}

Status Trainer::save(int64_t step) {
  vlpar::obs::Span span = logs_->trace.span(obs::trace_cat::kCheckpoint, "save");
  io::CheckpointWriteSpec spec;
  spec.root = cfg_.checkpoint.dir;
  spec.step = step;
  // Collective over dp with ZeRO-1 (the optimizer gathers its shards): every rank saves.
  VLPAR_ASSIGN_OR_RETURN(const vlpar::parallel::OptimizerState optim, optim_->state(/*gathered=*/true));
  spec.tensors = checkpoint_tensors(optim);
  spec.layout_json = nlohmann::json{{"tp", cfg_.parallel.tp}, {"dp", dp_size_}, {"pp", pp_size_}}.dump();
  spec.user_json = nlohmann::json{{"step", step}, {"optimizer_steps", optim_->steps_taken()},
                                  {"config", cfg_.to_toml()}}.dump();
  VLPAR_ASSIGN_OR_RETURN(std::string data_state, source_ ? source_->state() : Result<std::string>("{}"));
  spec.rank_json = nlohmann::json{{"data", nlohmann::json::parse(data_state)}}.dump();
  spec.keep_last = cfg_.checkpoint.keep_last;
  VLPAR_RETURN_IF_ERROR(io::save_checkpoint(spec, world_ && world_->size() > 1 ? world_ : nullptr));
  last_checkpoint_ = fmt::format("{}/step-{}", cfg_.checkpoint.dir, step);
  return Status::Ok();
}

Status Trainer::resume() {
  if (!cfg_.checkpoint.resume) return Status::Ok();
  VLPAR_ASSIGN_OR_RETURN(std::optional<io::CheckpointInfo> latest, io::latest_checkpoint(cfg_.checkpoint.dir));
  if (!latest) return Status::Ok();
  const nlohmann::json layout = nlohmann::json::parse(latest->layout_json);
  const int saved_tp = layout.value("tp", 1), saved_dp = layout.value("dp", 1), saved_pp = layout.value("pp", 1);
  const bool same_dp = saved_dp == dp_size_;
  VLPAR_CHECK(same_dp || cfg_.checkpoint.allow_layout_change,
              "{}: saved with {} data-parallel ranks but this run has {}; the data position is per dp rank, so resume "
              "with the same dp size, or set checkpoint.allow_layout_change=true to reshard the model and optimizer "
              "and restart the data stream",
              latest->dir, saved_dp, dp_size_);
  // Parameters and AdamW state are loaded piece by piece into this run's shards, whatever the saved tp and pp (any
  // layout loads any other: io/checkpoint.hpp; a pipeline rank loads the names of its stages).
  VLPAR_ASSIGN_OR_RETURN(const vlpar::parallel::OptimizerState optim, optim_->state(/*gathered=*/false));
  std::vector<io::CheckpointTensor> tensors = checkpoint_tensors(optim);
  std::string user;
  VLPAR_RETURN_IF_ERROR(io::load_checkpoint(latest->dir, tensors, &user));
  VLPAR_RETURN_IF_ERROR(optim_->load_state(optim));
  const nlohmann::json u = nlohmann::json::parse(user);
  step_ = first_step_ = u.at("step").get<int64_t>();
  optim_->set_steps_taken(u.at("optimizer_steps").get<int64_t>());
  const bool lead = !world_ || world_->rank() == 0;
  if (same_dp) {
    // dp rank d's data position was saved by its first tp rank of pipeline stage 0: world rank d · saved_tp (only
    // pipeline rank 0 of a dp rank reads data, so a pp change keeps it; the other pipeline ranks have no source).
    if (source_) {
      VLPAR_ASSIGN_OR_RETURN(std::string rank_json, io::read_checkpoint_rank_json(latest->dir, dp_rank_ * saved_tp));
      VLPAR_RETURN_IF_ERROR(source_->restore(nlohmann::json::parse(rank_json).at("data").dump()));
    }
  } else if (lead) {
    vlpar::log_warn("{}: layout tp {} x dp {} x pp {} -> tp {} x dp {} x pp {}: model and optimizer resharded; the "
                    "data position is per dp rank, so the data stream restarts from its beginning",
                    latest->dir, saved_tp, saved_dp, saved_pp, cfg_.parallel.tp, dp_size_, pp_size_);
  }
  last_checkpoint_ = latest->dir;
  if (lead)
    vlpar::log_info("resumed from {} at step {} (saved at tp {} x dp {} x pp {}, now tp {} x dp {} x pp {})",
                    latest->dir, step_, saved_tp, saved_dp, saved_pp, cfg_.parallel.tp, dp_size_, pp_size_);
  return Status::Ok();
}

Result<double> Trainer::measure_peak_gflops() {
  if (cfg_.metrics.peak_gflops > 0) return cfg_.metrics.peak_gflops;
  // This CPU's dense fp32 GEMM rate with the run's threads: the best of a few 768³ products.
  const int64_t n = 768;
  VLPAR_ASSIGN_OR_RETURN(Tensor a, Tensor::zeros(alloc_, Shape{n, n}, DType::kF32));
  VLPAR_ASSIGN_OR_RETURN(Tensor c, Tensor::zeros(alloc_, Shape{n, n}, DType::kF32));
  double best = 0;
  for (int i = 0; i < 4; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    VLPAR_RETURN_IF_ERROR(vlpar::linear_forward(ctx_, c, a, a, TensorView{}));
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, 2.0 * double(n) * n * n / s * 1e-9);
  }
  return best;
}

// ---- one step's forward and backward --------------------------------------------------------------------------

bool Trainer::MicroResult::add(const StepLoss& l, double w, const TextConfig& t, size_t i, size_t n) {
  if (!std::isfinite(l.loss)) {
    bad = fmt::format("loss is {} (micro-batch {} of {})", l.loss, i + 1, n);
    loss_sum[2] = 1;
    return false;
  }
  loss_sum[0] += w * l.loss;
  loss_sum[1] += w * l.aux_loss * t.router_aux_loss_coef;
  loss_sum[3] += w * l.z_loss * t.router_z_loss_coef;
  loss_sum[4] += w * l.seq_aux_loss * t.router_seq_aux_loss_coef;
  return true;
}

Result<Trainer::MicroResult> Trainer::forward_backward(const std::vector<MicroBatch>& micro,
                                                       const std::vector<double>& weights) {
  MicroResult r;
  for (size_t i = 0; i < micro.size(); ++i) {
    const Batch batch = micro[i].pack.view();
    Stash stash;  // holds views into the pack, which outlives it
    Result<StepLoss> fwd = model_->forward(ctx_, batch, stash);
    if (!fwd.ok() && fwd.status().code() == vlpar::StatusCode::kNonFinite) {  // non-finite router logits: skip the step
      if (r.bad.empty()) r.bad = fmt::format("{} (micro-batch {} of {})", fwd.status().message(), i + 1, micro.size());
      r.loss_sum[2] = 1;  // (every rank sharing a collective with the router got the same error: none waits)
      if (!model_->vision_spans_batches()) break;
      // A wide vision group's peers hold other batches and go on: this rank owes them the vision exchanges of
      // this micro-batch's backward and of the rest of the step.
      VLPAR_RETURN_IF_ERROR(model_->release_vision(ctx_, stash));
      continue;
    }
    VLPAR_ASSIGN_OR_RETURN(StepLoss l, std::move(fwd));
    r.expert_load.resize(stash.expert_load.size(), 0.0);
    for (size_t k = 0; k < stash.expert_load.size(); ++k) r.expert_load[k] += stash.expert_load[k];
    // A non-finite loss ends this rank's step early, unless its MoE layers exchange tokens with other ranks (expert
    // parallelism) or its vision tower images (a wide vision tp group): they would wait for this one, so it runs
    // the step to the end (the step is skipped anyway).
    if (!r.add(l, weights[i], model_->config().text, i, micro.size()) && !model_->expert_parallel().active() &&
        !model_->vision_spans_batches())
      break;
    // The last micro-batch's backward reports each finished gradient, starting the dp reduction of full buckets.
    nn::GradReadyFn ready;
    if (i + 1 == micro.size()) {
      ready = [this](size_t k) -> Status {
        VLPAR_CHECK(k < optim_slot_.size() && optim_slot_[k] != SIZE_MAX,
                    "the backward reported parameter {} ready, which the optimizer does not train (frozen?)", k);
        return optim_->grad_ready(optim_slot_[k]);
      };
    }
    VLPAR_RETURN_IF_ERROR(model_->backward(ctx_, batch, stash, float(weights[i]), ready));
  }
  return r;
}

// The pipeline runs every micro-batch to the end (the last stage's losses are known only there); a non-finite loss
// is flagged for the step to be skipped. The dp reduction starts after the step (grad_ready_remaining).
Result<Trainer::MicroResult> Trainer::forward_backward_pipelined(const std::vector<MicroBatch>& micro,
                                                                 const std::vector<double>& weights) {
  std::vector<Batch> batches;
  for (const MicroBatch& mb : micro) batches.push_back(mb.pack.view());
  const int64_t t0 = logs_->trace.enabled() ? logs_->trace.now_ns() : 0;
  VLPAR_RETURN_IF_ERROR(pipe_->step(ctx_, batches, weights));
  if (cfg_.metrics.trace) VLPAR_RETURN_IF_ERROR(pipe_->record_trace(logs_->trace, t0));  // collective over pp
  VLPAR_RETURN_IF_ERROR(pipe_->sum_tied_gradient(ctx_, *model_));
  MicroResult r;
  r.expert_load = pipe_->expert_load();
  if (const std::vector<StepLoss>* losses = pipe_->losses()) {
    for (size_t i = 0; i < losses->size(); ++i)
      if (!r.add((*losses)[i], weights[i], model_->config().text, i, losses->size())) break;
  }
  return r;
}

// pp_bubble_pct: 100 · (1 − Σ_r compute_r / (pp · max_r span_r)) over the pipeline ranks of this step (the share of
// rank-time not spent computing: waits and idle gaps); pp_wait_max_pct: the most any rank spent blocked in
// receives and sends, in % of its span. Collective over the pp group.
Status Trainer::pipeline_metrics(std::vector<obs::NamedScalar>& extra) {
  const PipelineRunner::Times t = pipe_->times();
  const int p = pp_size_;
  double mine[3] = {t.compute_s, t.wait_s, t.span_s};
  std::vector<double> all(size_t(3 * p));  // [compute, wait, span] per pipeline rank
  VLPAR_RETURN_IF_ERROR(groups_->pp().all_gather(TensorView(all.data(), DType::kF64, Shape{3 * p}),
                                                 TensorView(mine, DType::kF64, Shape{3})));
  double compute = 0, span = 0, wait_pct = 0;
  for (int k = 0; k < p; ++k) {
    const double* rank = &all[size_t(3 * k)];
    compute += rank[0];
    span = std::max(span, rank[2]);
    if (rank[2] > 0) wait_pct = std::max(wait_pct, 100.0 * rank[1] / rank[2]);
  }
  extra.push_back({"pp_bubble_pct", span > 0 ? 100.0 * (1.0 - compute / (double(p) * span)) : 0.0});
  extra.push_back({"pp_wait_max_pct", wait_pct});
  return Status::Ok();
}

namespace {

// Per MoE layer of the global loads [L · (E + 1)] (expert_load_width; the dropped count last): CV, max/mean and
// min/mean of the assignments per expert; the worst layer's into the console line (m.extra), every layer's into
// JSONL and TensorBoard (m.detail); with a capacity factor the step's share of dropped assignments. Nothing for a
// dense model.
void expert_load_metrics(const TextConfig& t, const std::vector<double>& load, obs::MetricsLine& m) {
  if (t.num_moe_layers() == 0) return;
  const auto E = size_t(t.num_experts), W = expert_load_width(t);
  double worst_cv = 0, worst_max = 0, worst_min = 1, routed = 0, dropped = 0;
  for (int l = 0; l < t.layers; ++l) {
    if (!t.is_moe_layer(l)) continue;
    const std::span<const double> layer(load.data() + size_t(l) * W, E);
    for (const double c : layer) routed += c;
    dropped += load[size_t(l) * W + E];
    double mean = 0, var = 0;
    for (const double c : layer) mean += c;
    mean /= double(E);
    if (mean == 0) continue;  // no token reached this layer (an empty step)
    for (const double c : layer) var += (c - mean) * (c - mean);
    const double cv = std::sqrt(var / double(E)) / mean;
    const double mx = *std::max_element(layer.begin(), layer.end()) / mean;
    const double mn = *std::min_element(layer.begin(), layer.end()) / mean;
    worst_cv = std::max(worst_cv, cv), worst_max = std::max(worst_max, mx), worst_min = std::min(worst_min, mn);
    m.detail.push_back({fmt::format("moe_load/layer{}_cv", l), cv});
    m.detail.push_back({fmt::format("moe_load/layer{}_max_over_mean", l), mx});
    m.detail.push_back({fmt::format("moe_load/layer{}_min_over_mean", l), mn});
  }
  m.extra.push_back({"moe_load_cv", worst_cv});  // the most unbalanced layer's coefficient of variation
  m.extra.push_back({"moe_load_max", worst_max});  // the busiest expert of any layer, in multiples of the mean
  m.extra.push_back({"moe_load_min", worst_min});  // the idlest expert of any layer, in multiples of the mean
  // With a capacity factor: the share of all (token, expert) assignments of the step that were dropped.
  if (t.moe_capacity_factor > 0) m.extra.push_back({"moe_dropped", routed > 0 ? dropped / routed : 0.0});
}

}  // namespace

// The step's expert loads (assignments per decoder layer and expert) summed over every rank that saw distinct
// tokens: the dp replicas (expert-parallel ranks included) and the pipeline stages (disjoint layers); tp ranks hold
// the same tokens, so only tp rank 0 contributes, unless sequence parallelism gave each its own. Counts are
// integers: the sum is exact, the same on every rank.
// Then (moe.expert_bias_rate > 0) each MoE router's expert bias this rank holds moves towards the mean load.
// Returns the global loads [L · (E + 1)], each layer's dropped count last (empty for a dense model). Collective over
// the world.
Result<std::vector<double>> Trainer::balance_experts(std::vector<double> load) {
  const TextConfig& t = model_->config().text;
  if (t.num_moe_layers() == 0) return std::vector<double>{};
  const auto E = size_t(t.num_experts), W = expert_load_width(t);
  load.resize(size_t(t.layers) * W, 0.0);
  if (tp_rank_ != 0 && !cfg_.parallel.sequence_parallel) std::fill(load.begin(), load.end(), 0.0);
  if (world_ && world_->size() > 1)
    VLPAR_RETURN_IF_ERROR(world_->all_reduce(TensorView(load.data(), DType::kF64, Shape{int64_t(load.size())}),
                                             vlpar::comm::ReduceOp::kSum));
  for (int l = 0; l < t.layers && cfg_.moe.expert_bias_rate > 0; ++l)
    if (const TensorView bias = model_->expert_bias(l); !bias.empty())
      VLPAR_RETURN_IF_ERROR(vlpar::router_bias_update(bias, std::span<const double>(load.data() + size_t(l) * W, E),
                                                      float(cfg_.moe.expert_bias_rate)));
  return load;
}

// ---- the loop ------------------------------------------------------------------------------------------------

Result<std::vector<MicroBatch>> Trainer::fetch(BatchSource* src, int count, const std::string& what,
                                               const std::string* restart) {
  // Every error of the loading rank goes through the share below, so the other pipeline ranks never wait for it.
  auto load = [&]() -> Result<std::vector<vlpar::data::PackedBatch>> {
    std::vector<vlpar::data::PackedBatch> packs;
    if (!loads_data()) return packs;
    VLPAR_CHECK(src != nullptr, "Trainer: no source for the {}s", what);
    if (restart) VLPAR_RETURN_IF_ERROR(src->restore(*restart));
    for (int i = 0; i < count; ++i) {
      VLPAR_ASSIGN_OR_RETURN(MicroBatch mb, src->next());
      VLPAR_RETURN_IF_ERROR(check_model_inputs(mb.pack, model_->config().text.vocab, fmt::format("{} {}", what, i)));
      packs.push_back(std::move(mb.pack));
    }
    return packs;
  };
  Result<std::vector<vlpar::data::PackedBatch>> packs = load();
  if (shares_data()) packs = vlpar::data::share_packs_without_vision(groups_->pp(), 0, std::move(packs));
  VLPAR_RETURN_IF_ERROR(packs.status());
  std::vector<MicroBatch> micro;
  const TextConfig& t = model_->config().text;
  for (vlpar::data::PackedBatch& p : packs.value()) {
    MicroBatch mb;
    mb.real_tokens = p.real_tokens;
    if (cfg_.parallel.sequence_parallel)  // every tp rank the same N / tp tokens
      pad_for_sequence_parallel(p, cfg_.parallel.tp, t.pad_token_id >= 0 ? t.pad_token_id : 0);
    mb.images = p.num_images + p.num_videos;
    mb.pack = std::move(p);
    micro.push_back(std::move(mb));
  }
  return micro;
}

Result<double> Trainer::evaluate() {
  VLPAR_ASSIGN_OR_RETURN(std::vector<MicroBatch> micro, fetch(held_out_.get(), cfg_.training.eval_batches,
                                                              "held-out micro-batch", &held_out_start_));
  double sums[2] = {0, 0};  // Σ n_j · ce_j, Σ n_j (n_j: micro-batch j's label tokens)
  auto add = [&](const StepLoss& l) {
    sums[0] += double(l.num_label_tokens) * l.ce_loss;
    sums[1] += double(l.num_label_tokens);
  };
  if (pipelined()) {
    std::vector<Batch> batches;
    for (const MicroBatch& mb : micro) batches.push_back(mb.pack.view());
    VLPAR_RETURN_IF_ERROR(pipe_->evaluate(ctx_, batches));
    if (const std::vector<StepLoss>* losses = pipe_->losses())
      for (const StepLoss& l : *losses) add(l);
    if (pp_size_ > 1) {  // the losses are on the last stage's ranks
      VLPAR_RETURN_IF_ERROR(groups_->pp().all_reduce(TensorView(sums, DType::kF64, Shape{2}),
                                                     vlpar::comm::ReduceOp::kSum));
    }
  } else {
    for (const MicroBatch& mb : micro) {
      Stash stash;
      Result<StepLoss> l = model_->forward(ctx_, mb.pack.view(), stash);
      if (!l.ok() && l.status().code() == vlpar::StatusCode::kNonFinite) {  // non-finite router logits
        sums[0] = std::numeric_limits<double>::quiet_NaN();
        continue;
      }
      VLPAR_RETURN_IF_ERROR(l.status());
      add(l.value());
    }
  }
  if (vlpar::comm::Communicator* dp = dp_comm()) {
    VLPAR_RETURN_IF_ERROR(dp->all_reduce(TensorView(sums, DType::kF64, Shape{2}), vlpar::comm::ReduceOp::kSum));
  }
  VLPAR_CHECK(sums[1] > 0, "the {} held-out micro-batches per rank have no label tokens", cfg_.training.eval_batches);
  return sums[0] / sums[1];
}

// The rest of a metrics line (losses, memory, throughput from `work`), printed and appended to JSONL/TensorBoard.
Status Trainer::write_metrics(obs::MetricsLine& m, const double* loss_sum, obs::StepWork work) {
  const TextConfig& t = model_->config().text;
  m.loss = loss_sum[0];
  if (t.num_experts > 0) m.aux_loss = loss_sum[1];
  if (t.router_z_loss_coef > 0) m.extra.push_back({"z_loss", loss_sum[3]});  // × coef
  if (t.router_seq_aux_loss_coef > 0) m.extra.push_back({"seq_aux_loss", loss_sum[4]});
  const vlpar::MemoryStats mem = alloc_.stats(vlpar::Device::cpu());
  m.mem_current_mib = double(mem.current_bytes) / (1 << 20);
  m.mem_peak_mib = double(mem.peak_bytes) / (1 << 20);
  alloc_.reset_peak(vlpar::Device::cpu());
  work.peak_tflops = logs_->peak_gflops * 1e-3;
  work.devices = cfg_.parallel.tp * pp_size_;  // this data replica's micro-batches ran on tp · pp ranks
  obs::fill_throughput(m, work);
  m.wall_time = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  fmt::print("{}\n", obs::format_metrics_line(m, obs::stdout_color_allowed()));
  std::fflush(stdout);
  VLPAR_RETURN_IF_ERROR(logs_->jsonl.append(m));
  if (logs_->tb.is_open()) VLPAR_RETURN_IF_ERROR(logs_->tb.add_metrics(m));
  return Status::Ok();
}

Result<TrainSummary> Trainer::run() {
  const bool lead = !world_ || world_->rank() == 0;
  const int64_t total = cfg_.training.steps;
  VLPAR_RETURN_IF_ERROR(resume());
  if (lead) {
    fs::create_directories(cfg_.metrics.dir);
    const std::optional<int64_t> resumed = first_step_ > 0 ? std::optional<int64_t>(first_step_) : std::nullopt;
    VLPAR_ASSIGN_OR_RETURN(logs_->jsonl, obs::JsonlWriter::open(cfg_.metrics.dir + "/metrics.jsonl", resumed));
    if (cfg_.metrics.tensorboard) {
      obs::TensorBoardWriter::Options o;
      o.resume_step = resumed;
      VLPAR_ASSIGN_OR_RETURN(logs_->tb, obs::TensorBoardWriter::create(cfg_.metrics.dir + "/tb", o));
    }
    obs::TraceRecorder::Options to;
    to.enabled = cfg_.metrics.trace;
    to.process_name = "rank 0";
    logs_->trace = obs::TraceRecorder(to);
    model_->set_trace(&logs_->trace);
    vlpar::log_info("resolved config:\n{}", cfg_.to_toml());
    const nn::ParamCounts pc = model_->registry().counts();
    vlpar::log_info("model: {:.2f} M parameters ({:.2f} M trainable on this rank); data: {}; tp {} x dp {} x pp {}",
                    double(pc.full_params) * 1e-6, double(pc.trainable) * 1e-6,
                    source_ ? source_->describe() : "from pipeline rank 0", cfg_.parallel.tp,
                    dp_size_, pp_size_);
    if (pipe_) vlpar::log_info("pipeline: {}", pipe_->plan().describe(cfg_.parallel.schedule));
  }
  VLPAR_ASSIGN_OR_RETURN(logs_->peak_gflops, measure_peak_gflops());

  TrainSummary sum;
  sum.first_step = first_step_;
  const obs::Stopwatch run_watch;
  int nonfinite_in_a_row = 0;
  while (step_ < total) {
    logs_->wait.start_step();
    const obs::Stopwatch step_watch;
    // 1. Micro-batches of this step, and the global count of supervised tokens.
    std::vector<MicroBatch> micro;
    {
      vlpar::obs::Span span = logs_->trace.span(obs::trace_cat::kData, "next_batches");
      const obs::Stopwatch w;
      VLPAR_ASSIGN_OR_RETURN(micro, fetch(source_.get(), cfg_.training.grad_accum,
                                          fmt::format("step {} micro-batch", step_ + 1)));
      logs_->wait.add_wait_s(w.elapsed_s());
    }
    VLPAR_RETURN_IF_ERROR(model_->registry().zero_grads());
    // Forward passes first (each micro-batch's own stash) would hold every stash at once; instead each micro-batch
    // runs forward + backward before the next, which needs the global label count up front: count labels.
    std::vector<int64_t> counts;
    double global_count = 0;  // Σ valid labels, then over every dp rank
    for (const MicroBatch& mb : micro) {
      int64_t n = 0;
      const std::vector<int64_t>& lab = mb.pack.labels;
      const std::vector<int64_t>& cu = mb.pack.cu_seqlens;
      for (size_t s = 0; s + 1 < cu.size(); ++s)
        for (int64_t i = cu[s] + 1; i < cu[s + 1]; ++i) n += lab[i] != -100;  // shifted: label i predicts from i−1
      counts.push_back(n);
      global_count += double(n);
    }
    if (vlpar::comm::Communicator* dp = dp_comm()) {
      VLPAR_RETURN_IF_ERROR(dp->all_reduce(TensorView(&global_count, DType::kF64, Shape{1}),
                                                 vlpar::comm::ReduceOp::kSum));
    }
    std::vector<double> weights;  // each micro-batch's share of the global supervised tokens
    for (int64_t n : counts) weights.push_back(global_count > 0 ? double(n) / global_count : 0.0);
    // 2. Forward + backward of every micro-batch, each scaled by its weight.
    VLPAR_ASSIGN_OR_RETURN(MicroResult fb, pipelined() ? forward_backward_pipelined(micro, weights)
                                                       : forward_backward(micro, weights));
    double* loss_sum = fb.loss_sum;
    std::string bad = std::move(fb.bad);
    // Every gradient not reported by the backward (all of them when this rank stopped at a non-finite loss, or
    // ran a pipeline) is reported now, so every rank has started all its bucket reductions, in bucket order, before
    // the loss all-reduce below on the same dp group.
    VLPAR_RETURN_IF_ERROR(optim_->grad_ready_remaining());
    if (vlpar::comm::Communicator* dp = dp_comm()) {
      VLPAR_RETURN_IF_ERROR(dp->all_reduce(TensorView(loss_sum, DType::kF64, Shape{5}),
                                                 vlpar::comm::ReduceOp::kSum));
    }
    if (pipelined() && pp_size_ > 1) {  // the losses are on the last stage's ranks (zeros elsewhere)
      VLPAR_RETURN_IF_ERROR(groups_->pp().all_reduce(TensorView(loss_sum, DType::kF64, Shape{5}),
                                                     vlpar::comm::ReduceOp::kSum));
    }
    int64_t tokens = 0, images = 0;
    double flops = 0;
    for (const MicroBatch& mb : micro) {
      tokens += mb.real_tokens;
      images += mb.images;
      std::vector<int64_t> lengths;
      const std::vector<int64_t>& cu = mb.pack.cu_seqlens;
      for (size_t s = 0; s + 1 < cu.size(); ++s) lengths.push_back(cu[s + 1] - cu[s]);
      std::vector<vlpar::VisionGrid> grids = mb.pack.image_grids;
      grids.insert(grids.end(), mb.pack.video_grids.begin(), mb.pack.video_grids.end());
      flops += count_flops(model_->config(), lengths, grids).train();
    }
    // 3. Optimizer step (skipped on a non-finite loss or gradient norm).
    const double lr = cfg_.schedule.at(cfg_.optimizer.adamw.lr, step_);
    vlpar::parallel::StepReport rep;
    if (loss_sum[2] == 0) {
      vlpar::obs::Span span = logs_->trace.span(obs::trace_cat::kOptimizer, "adamw");
      VLPAR_ASSIGN_OR_RETURN(rep, optim_->step(ctx_, lr));
      if (!rep.applied) bad = fmt::format("gradient norm is {}", rep.grad_norm);
    } else {
      VLPAR_RETURN_IF_ERROR(optim_->skip_step());
      if (bad.empty()) bad = "loss is not finite on another rank";
    }
    const double seconds = step_watch.elapsed_s();
    const obs::DataWaitMeter::Report wait = logs_->wait.end_step(seconds);
    ++sum.steps_done;
    if (!bad.empty()) {
      ++sum.skipped_steps;
      ++nonfinite_in_a_row;
      sum.losses.push_back(NAN);
      sum.grad_norms.push_back(rep.grad_norm);
      if (lead) vlpar::log_warn("step {}: {}; step skipped ({} in a row)", step_ + 1, bad, nonfinite_in_a_row);
      VLPAR_CHECK(nonfinite_in_a_row < cfg_.training.max_nonfinite_in_a_row,
                  "aborting at step {}: {} consecutive steps were skipped because of non-finite values (last: {}); "
                  "training.max_nonfinite_in_a_row = {}",
                  step_ + 1, nonfinite_in_a_row, bad, cfg_.training.max_nonfinite_in_a_row);
      continue;  // the step counter does not advance: the same step is retried with the next micro-batches
    }
    nonfinite_in_a_row = 0;
    ++step_;
    sum.losses.push_back(loss_sum[0]);
    sum.grad_norms.push_back(rep.grad_norm);
    // 4. Held-out loss (its step is always logged) and metrics.
    const int eval_every = cfg_.training.eval_interval;
    const bool eval_step = eval_every > 0 && (step_ % eval_every == 0 || step_ == total);
    obs::MetricsLine m;
    if (eval_step) {
      vlpar::obs::Span span = logs_->trace.span(obs::trace_cat::kLoss, "evaluate");
      VLPAR_ASSIGN_OR_RETURN(const double eval_loss, evaluate());
      sum.eval_losses.push_back({step_, eval_loss});
      m.extra.push_back({"eval_loss", eval_loss});
    }
    const bool log_step = step_ % cfg_.metrics.log_interval == 0 || step_ == total || eval_step;
    if (log_step && pipelined()) VLPAR_RETURN_IF_ERROR(pipeline_metrics(m.extra));  // collective over pp
    VLPAR_ASSIGN_OR_RETURN(const std::vector<double> loads, balance_experts(std::move(fb.expert_load)));  // world
    if (lead && log_step) {
      expert_load_metrics(model_->config().text, loads, m);
      m.step = step_;
      m.total_steps = total;
      m.grad_norm = rep.grad_norm;
      m.lr = lr;
      m.data_wait_pct = wait.pct;
      obs::StepWork work;
      work.real_tokens = tokens;
      work.images = images;
      work.flops = flops;
      work.seconds = seconds;
      VLPAR_RETURN_IF_ERROR(write_metrics(m, loss_sum, work));
    }
    // 5. Checkpoint.
    if (cfg_.checkpoint.interval > 0 && step_ % cfg_.checkpoint.interval == 0 && step_ < total) {
      VLPAR_RETURN_IF_ERROR(save(step_));
    }
  }
  if (sum.steps_done > 0 || last_checkpoint_.empty()) VLPAR_RETURN_IF_ERROR(save(step_));
  sum.last_checkpoint = last_checkpoint_;
  sum.seconds = run_watch.elapsed_s();
  if (lead) {
    if (const std::string data_summary = source_ ? source_->summary() : ""; !data_summary.empty())
      vlpar::log_info("data (rank 0):\n{}", data_summary);
    VLPAR_RETURN_IF_ERROR(logs_->jsonl.close());
    if (logs_->tb.is_open()) VLPAR_RETURN_IF_ERROR(logs_->tb.close());
    if (cfg_.metrics.trace) VLPAR_RETURN_IF_ERROR(logs_->trace.write_json(cfg_.metrics.dir + "/trace.json"));
    model_->set_trace(nullptr);
    if (step_ > first_step_) {  // a run resumed at its last step trains nothing: the earlier plot stands
      obs::PlotOptions po;
      po.title = "qwen3vl-train";
      VLPAR_RETURN_IF_ERROR(obs::plot_metrics_png(cfg_.metrics.dir + "/metrics.jsonl", cfg_.metrics.dir + "/plot.png", po));
    }
  }
  if (!cfg_.checkpoint.export_hf.empty()) {  // tp = pp = 1 (TrainConfig::validate); experts gathered over ep, etp
    std::vector<Tensor> storage;
    VLPAR_ASSIGN_OR_RETURN(const std::vector<TensorView> whole,
                           gather_experts(*model_, model_->expert_parallel(), alloc_, storage));
    const DType dt = cfg_.checkpoint.export_dtype == "bf16" ? DType::kBF16 : DType::kF32;
    if (lead) VLPAR_RETURN_IF_ERROR(export_hf(*model_, cfg_.checkpoint.export_hf, dt, 5'000'000'000ull, nullptr,
                                              &whole));
  }
  return sum;
}

}  // namespace qwen3vl
