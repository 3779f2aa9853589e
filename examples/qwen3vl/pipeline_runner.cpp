// The trainer's pipeline-parallel step. See pipeline_runner.hpp.
#include "pipeline_runner.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "flops.hpp"
#include "vlpar/parallel/pipeline_split.hpp"
#include "vlpar/parallel/pipeline_tied.hpp"

namespace qwen3vl {
namespace {

namespace pipeline = vlpar::pipeline;

// Forward FLOPs per stage part of a representative micro-batch (see the header): T tokens, half of them image
// tokens of m² patches each (at most the patch budget), images of max_pixels, attention over the whole pack.
pipeline::SplitCosts split_costs(const TrainConfig& cfg, const Config& c) {
  const double T = double(cfg.data.loader.packing.max_tokens);
  const double m2 = double(c.vision.merge) * double(c.vision.merge);
  const double patches = std::min(0.5 * T * m2, double(std::max<int64_t>(cfg.data.loader.packing.max_patches, 0)));
  const double seg = double(cfg.data.max_pixels) / (double(c.vision.patch) * double(c.vision.patch));
  pipeline::SplitCosts costs;
  const double attn = 4.0 * double(c.text.heads) * double(c.text.head_dim) * T;  // per token per layer
  for (int l = 0; l < c.text.layers; ++l)
    costs.layer.push_back(T * (2.0 * double(text_layer_active_params(c, l)) + attn));
  costs.first = patches * vision_fwd_flops_per_patch(c).at(std::min(seg, std::max(patches, 1.0)));
  costs.last = T * 2.0 * double(c.text.hidden) * double(c.text.vocab);
  costs.vision = true;
  costs.min_first_layers = std::min(c.text.layers, int(c.vision.deepstack_indexes.size()));
  return costs;
}

}  // namespace

std::string PipelinePlan::describe(std::string_view schedule) const {
  std::vector<std::string> shares;
  for (double s : stage_share) shares.push_back(fmt::format("{:.0f}%", 100.0 * s));
  return fmt::format("{} over {} ranks, {} stages, layout '{}', cost-model shares {}", schedule, lowered.num_ranks(),
                     layout.num_stages(), layout.to_string(), fmt::join(shares, " | "));
}

Result<PipelinePlan> plan_pipeline(const TrainConfig& cfg, const Config& model, int pp, int pp_rank) {
  const int vpp = cfg.parallel.vpp, S = pp * vpp;
  VLPAR_CHECK(pp_rank >= 0 && pp_rank < pp, "plan_pipeline: pipeline rank {} of {}", pp_rank, pp);
  PipelinePlan plan;
  VLPAR_ASSIGN_OR_RETURN(pipeline::Schedule sched,
                         pipeline::generate(cfg.parallel.schedule, pp, cfg.training.grad_accum, vpp));
  VLPAR_ASSIGN_OR_RETURN(plan.lowered, pipeline::lower(sched));
  VLPAR_CHECK(plan.lowered.num_stages() == S, "parallel.schedule '{}' made {} stages, expected pp · vpp = {}",
              cfg.parallel.schedule, plan.lowered.num_stages(), S);
  const pipeline::SplitCosts costs = split_costs(cfg, model);
  pipeline::SplitPlan split;
  if (!cfg.parallel.pipeline_layout.empty()) {
    Result<pipeline::Layout> l = pipeline::parse_layout(cfg.parallel.pipeline_layout, model.text.layers);
    VLPAR_CHECK(l.ok(), "parallel.pipeline_layout: {}", l.status().message());
    VLPAR_CHECK(l.value().num_stages() == S, "parallel.pipeline_layout '{}' has {} stages, but pp · vpp = {}",
                cfg.parallel.pipeline_layout, l.value().num_stages(), S);
    VLPAR_ASSIGN_OR_RETURN(split, pipeline::evaluate_layout(costs, l.value()));
  } else {
    Result<pipeline::SplitPlan> b = pipeline::balanced_layout(costs, S);
    VLPAR_CHECK(b.ok(), "no pipeline layer split of {} decoder layers over pp · vpp = {} stages: {}",
                model.text.layers, S, b.status().message());
    split = std::move(b).value();
  }
  plan.layout = split.layout;
  double total = 0;
  for (double c : split.stage_cost) total += c;
  for (double c : split.stage_cost) plan.stage_share.push_back(total > 0 ? c / total : 0.0);
  for (int s = 0; s < S; ++s)
    if (plan.lowered.stage_rank[size_t(s)] == pp_rank) plan.stages.push_back(s);
  plan.part = PipelineStage::part_for(plan.layout, plan.stages);
  plan.first_rank = plan.lowered.stage_rank.front();
  // The trainer reads data on pipeline rank 0 only (stage 0 needs the pixels; DataRank::loads).
  VLPAR_CHECK(plan.first_rank == 0, "parallel.schedule '{}' puts stage 0 on pipeline rank {}; the trainer loads data "
              "on rank 0 only", cfg.parallel.schedule, plan.first_rank);
  plan.last_rank = plan.lowered.stage_rank.back();
  return plan;
}

Result<std::unique_ptr<PipelineRunner>> PipelineRunner::create(PipelinePlan plan, const Model& model,
                                                               vlpar::comm::Communicator& pp) {
  auto r = std::unique_ptr<PipelineRunner>(new PipelineRunner(std::move(plan), pp));
  r->stages_.reserve(r->plan_.stages.size());
  std::vector<std::pair<int, PipelineStage*>> args;
  for (int s : r->plan_.stages) {
    VLPAR_ASSIGN_OR_RETURN(PipelineStage st, PipelineStage::create(model, r->plan_.layout, s));
    r->stages_.push_back(std::move(st));
    args.push_back({s, &r->stages_.back()});
  }
  VLPAR_ASSIGN_OR_RETURN(pipeline::Engine<PipelineStage> e,
                         pipeline::Engine<PipelineStage>::create(r->plan_.lowered, args, pp));
  r->engine_.emplace(std::move(e));
  return r;
}

Status PipelineRunner::step(const Context& ctx, std::vector<Batch> micro, std::vector<double> weights) {
  for (PipelineStage& st : stages_) VLPAR_RETURN_IF_ERROR(st.set_step(micro, weights));
  return engine_->step(ctx);
}

Status PipelineRunner::evaluate(const Context& ctx, std::vector<Batch> micro) {
  const int m = int(micro.size());
  VLPAR_CHECK(m >= 1, "pipeline evaluation: no micro-batches");
  if (!eval_engine_ || eval_m_ != m) {
    eval_engine_.reset();
    VLPAR_ASSIGN_OR_RETURN(pipeline::Schedule fwd,
                           pipeline::forward_only(plan_.lowered.num_ranks(), m, plan_.lowered.stage_rank));
    VLPAR_ASSIGN_OR_RETURN(pipeline::Schedule lowered, pipeline::lower(fwd));
    std::vector<std::pair<int, PipelineStage*>> args;
    for (PipelineStage& st : stages_) args.push_back({st.stage(), &st});
    VLPAR_ASSIGN_OR_RETURN(pipeline::Engine<PipelineStage> e,
                           pipeline::Engine<PipelineStage>::create(lowered, args, *pp_));
    eval_engine_.emplace(std::move(e));
    eval_m_ = m;
  }
  const std::vector<double> unused(micro.size(), 0.0);  // loss weights act in backward only
  for (PipelineStage& st : stages_) VLPAR_RETURN_IF_ERROR(st.set_step(micro, unused));
  return eval_engine_->step(ctx);
}

const std::vector<StepLoss>* PipelineRunner::losses() const {
  for (const PipelineStage& st : stages_)
    if (st.stage() == plan_.layout.num_stages() - 1) return &st.losses();
  return nullptr;
}

std::vector<double> PipelineRunner::expert_load() const {
  std::vector<double> sum;
  for (const PipelineStage& st : stages_) {  // the stages hold disjoint layers: zeros elsewhere
    const std::vector<double>& l = st.expert_load();
    sum.resize(l.size(), 0.0);
    for (size_t i = 0; i < l.size(); ++i) sum[i] += l[i];
  }
  return sum;
}

bool PipelineRunner::holds_tied_copy(const Model& model) const {
  return model.config().text.tie_word_embeddings && plan_.first_rank != plan_.last_rank &&
         (pp_->rank() == plan_.first_rank || pp_->rank() == plan_.last_rank);
}

bool PipelineRunner::is_second_tied_copy(const Model& model) const {
  return holds_tied_copy(model) && pp_->rank() == plan_.last_rank;
}

Status PipelineRunner::sum_tied_gradient(const Context& ctx, Model& model) {
  if (!holds_tied_copy(model)) return Status::Ok();
  const vlpar::nn::ParamRegistry& reg = model.registry();
  const size_t i = model.embed_param_index();
  VLPAR_CHECK(i < reg.size(), "pipeline rank {} should hold a copy of the tied embed_tokens", pp_->rank());
  if (reg.entry(i).frozen) return Status::Ok();  // frozen on both ranks alike (one config)
  const int a = std::min(plan_.first_rank, plan_.last_rank), b = std::max(plan_.first_rank, plan_.last_rank);
  return vlpar::pipeline::sum_tied_gradient(ctx, *pp_, reg.grad(i), a, b);
}

PipelineRunner::Times PipelineRunner::times() const {
  Times t;
  for (const pipeline::ActionTiming& a : engine_->timings()) {
    if (pipeline::is_compute(a.action.kind)) t.compute_s += a.end - a.start - a.wait;
    t.wait_s += a.wait;
    t.span_s = std::max(t.span_s, a.end);
  }
  return t;
}

Status PipelineRunner::record_trace(vlpar::obs::TraceRecorder& trace, int64_t step_start_ns) const {
  // Every rank's compute actions as rows (stage, kind, micro-batch, start, end, wait) padded to the longest list.
  constexpr int64_t kCols = 6;
  std::vector<double> mine;
  for (const pipeline::ActionTiming& a : engine_->timings())
    if (pipeline::is_compute(a.action.kind))
      mine.insert(mine.end(), {double(a.action.stage), double(int(a.action.kind)), double(a.action.mb), a.start,
                               a.end, a.wait});
  const int p = pp_->size(), me = pp_->rank();
  std::vector<int64_t> rows(size_t(p), 0);
  int64_t my_rows = int64_t(mine.size()) / kCols;
  if (p > 1) {
    VLPAR_RETURN_IF_ERROR(pp_->all_gather(TensorView(rows.data(), vlpar::DType::kI64, vlpar::Shape{p}),
                                          TensorView(&my_rows, vlpar::DType::kI64, vlpar::Shape{1})));
  }
  rows[size_t(me)] = my_rows;
  const int64_t most = *std::max_element(rows.begin(), rows.end());
  mine.resize(size_t(most * kCols), 0.0);
  std::vector<double> all(size_t(p * most * kCols), 0.0);
  if (p > 1 && most > 0) {
    VLPAR_RETURN_IF_ERROR(pp_->all_gather(TensorView(all.data(), vlpar::DType::kF64, vlpar::Shape{p * most * kCols}),
                                          TensorView(mine.data(), vlpar::DType::kF64, vlpar::Shape{most * kCols})));
  } else {
    all = mine;
  }
  if (!trace.enabled()) return Status::Ok();
  for (int r = 0; r < p; ++r) {
    const std::string track = fmt::format("pipeline rank {}", r);
    // This rank's actions on its own thread's track (with its other spans), the others' on their named tracks.
    auto record = [&](std::string_view name, int64_t start, int64_t dur) {
      if (r == me) trace.record_complete(vlpar::obs::trace_cat::kPipeline, name, start, dur);
      else trace.record_complete_on(track, vlpar::obs::trace_cat::kPipeline, name, start, dur);
    };
    for (int64_t i = 0; i < rows[size_t(r)]; ++i) {
      const double* row = all.data() + (int64_t(r) * most + i) * kCols;
      const pipeline::Action a{int(row[0]), pipeline::ActionKind(int(row[1])), int(row[2])};
      const int64_t start = step_start_ns + int64_t(row[3] * 1e9), dur = int64_t((row[4] - row[3]) * 1e9);
      const int64_t wait = int64_t(row[5] * 1e9);
      record(pipeline::to_string(a), start, dur);
      if (wait > 0) record("wait", start, wait);
    }
  }
  return Status::Ok();
}

}  // namespace qwen3vl
