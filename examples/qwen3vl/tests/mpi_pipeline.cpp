// Qwen3-VL on the pipeline engine (pipeline_stage.hpp) under mpirun -np 2 and 4: the dense and the MoE fixture
// configurations with 9 decoder layers (random weights from one seed; each rank builds only its stages' part), the fixture pack's
// samples as micro-batches of unequal size, weighted by their share of the step's label tokens as the trainer
// weighs them, vision tower and deepstack layers on stage 0 (layouts from the cost-model split), schedules 1F1B,
// GPipe, interleaved 1F1B (v = 2, one micro-batch group; at np 4 the 3 micro-batches are too few for it) and the
// zero-bubble ZB-H1 and ZB-V (the stages' split backward: PipelineStage::backward_input / backward_weight). Each
// micro-batch's loss (and aux loss) and every gradient equal the
// single-process run's (Model::forward / backward per micro-batch) bitwise: each stage runs the same kernels on
// the same rows in the same order, and every stage's backwards run in micro-batch order as the single process's.
// Tied embeddings (the 2B/4B checkpoints) with the lookup on stage 0 and the head on the last stage. After each
// step, a forward-only (evaluation) schedule on the same placement and stage objects gives the same losses and
// changes no gradient. Greedy generation through two stages gives transformers' ids (generate.json). Also: a
// layout that cuts the deepstack layers is refused with the fix named.
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "model_test_util.hpp"
#include "mpi/mpi_test_util.hpp"
#include "hf_weights.hpp"
#include "pipeline_generate.hpp"
#include "pipeline_stage.hpp"
#include "vlpar/parallel/pipeline_engine.hpp"

namespace qwen3vl {
namespace {

namespace pipeline = vlpar::pipeline;
using vlpar::DType;

constexpr int kLayers = 9;

struct Built {
  Allocator alloc;
  Context ctx = Context::cpu_default();
  std::optional<Model> model;
};

void build(Built& s, const std::string& fixture, bool tied = false, PipelinePart part = {}) {
  s.ctx.allocator = &s.alloc;
  Result<Config> cfg = load_hf_config(test::fixture(fixture));
  ASSERT_TRUE(cfg.ok()) << cfg.status().message();
  cfg.value().text.layers = kLayers;
  cfg.value().text.tie_word_embeddings = tied;
  cfg.value().tie_word_embeddings = tied;
  Result<Model> m = Model::create(s.ctx, cfg.value(), Freeze{}, uint64_t(42), s.alloc, {}, std::move(part));
  ASSERT_TRUE(m.ok()) << m.status().message();
  s.model.emplace(std::move(m).value());
}

/// Label tokens of a pack after the per-sample shift (what the trainer counts).
int64_t label_tokens(const vlpar::data::PackedBatch& p) {
  int64_t n = 0;
  for (size_t s = 0; s + 1 < p.cu_seqlens.size(); ++s)
    for (int64_t i = p.cu_seqlens[s] + 1; i < p.cu_seqlens[s + 1]; ++i) n += p.labels[size_t(i)] != -100;
  return n;
}

/// Each rank holds its stages' parameters only: together the ranks hold every parameter once (a tied embedding
/// twice when the first and the last stage are on two ranks, once under ZB-V, whose rank 0 holds both), each
/// gradient bitwise the single-process one. The tied
/// embedding's gradient is the sum of its two copies (spec A5.3's embedding group), added in another order than
/// one process adds them micro-batch by micro-batch: the same 2m fp32 terms reassociated, within 2m·eps of their
/// absolute sum, bounded here by 1e-6 relative.
void check_gradients(vlpar::comm::Communicator& world, Model& mine, const Model& ref, bool tied, bool ends_apart) {
  const nn::ParamRegistry& reg = mine.registry();
  const nn::ParamRegistry& want = ref.registry();
  const std::string embed = "model.language_model.embed_tokens.weight";
  const bool has_embed = reg.find(embed).has_value();
  std::vector<double> held = {double(reg.size()), has_embed ? 1.0 : 0.0};  // parameters, embed_tokens copies
  ASSERT_TRUE(world.all_reduce(TensorView(held.data(), DType::kF64, vlpar::Shape{2}), vlpar::comm::ReduceOp::kSum)
                  .ok());
  EXPECT_EQ(held[0], double(want.size()) + held[1] - 1) << "parameters held over all ranks";
  EXPECT_EQ(held[1], tied && ends_apart ? 2 : 1) << "ranks holding embed_tokens";
  auto group = world.split(has_embed ? 0 : 1, world.rank(), vlpar::test::test_options("embedding"));
  ASSERT_TRUE(group.ok()) << group.status().message();
  for (size_t i = 0; i < reg.size(); ++i) {
    const auto w = want.find(reg.name(i));
    ASSERT_TRUE(w.has_value()) << reg.name(i);
    const TensorView g = reg.grad(i), r = want.grad(*w);
    if (tied && reg.name(i) == embed) {
      ASSERT_TRUE(group.value()->all_reduce(g, vlpar::comm::ReduceOp::kSum).ok());
      EXPECT_LE(test::rel_diff(g, r), 1e-6) << reg.name(i);
      continue;
    }
    int64_t diff = 0;
    for (int64_t k = 0; k < g.numel(); ++k) diff += g.ptr<float>()[k] != r.ptr<float>()[k];
    EXPECT_EQ(diff, 0) << reg.name(i) << ": " << diff << " of " << g.numel() << " elements differ";
  }
}

struct Case {
  std::string name;
  int chunks;
  std::function<Result<pipeline::Schedule>(int p, int m)> make;
};

void check_pipeline(const std::string& fixture, bool tied = false) {
  auto world = vlpar::test::world_comm("pp");
  ASSERT_TRUE(world);
  const int p = world->size(), rank = world->rank();
  test::Loaded data;
  test::load(data, fixture);  // the fixture's pack (its model is not used)
  std::vector<vlpar::data::PackedBatch> packs;
  for (int64_t s = 0; s < data.batch->num_samples(); ++s) packs.push_back(test::sample_of(*data.batch, s));
  ASSERT_GE(packs.size(), 2u);
  std::vector<Batch> micro;
  std::vector<double> weights;
  double total = 0;
  for (const auto& pk : packs) total += double(label_tokens(pk));
  for (const auto& pk : packs) {
    micro.push_back(pk.view());
    weights.push_back(double(label_tokens(pk)) / total);
  }
  const int m = int(micro.size());

  // The single-process reference, once per rank.
  Built ref;
  build(ref, fixture, tied);
  std::vector<StepLoss> want;
  for (int j = 0; j < m; ++j) {
    Stash st;
    Result<StepLoss> l = ref.model->forward(ref.ctx, micro[size_t(j)], st);
    ASSERT_TRUE(l.ok()) << l.status().message();
    want.push_back(l.value());
    ASSERT_TRUE(ref.model->backward(ref.ctx, micro[size_t(j)], st, float(weights[size_t(j)])).ok());
  }

  const Case cases[] = {{"1f1b", 1, [](int r, int n) { return pipeline::one_f_one_b(r, n); }},
                        {"gpipe", 1, [](int r, int n) { return pipeline::gpipe(r, n); }},
                        {"interleaved_v2", 2, [](int r, int n) { return pipeline::interleaved_1f1b(r, 2, n, n); }},
                        {"zb_h1", 1, [](int r, int n) { return pipeline::zb_h1(r, n); }},
                        {"zb_v", 2, [](int r, int n) { return pipeline::zb_v(r, n); }}};
  for (const Case& c : cases) {
    SCOPED_TRACE(fixture + " " + c.name);
    auto sched = c.make(p, m);
    if (!sched.ok()) {  // interleaving needs m >= p (Megatron's rule; the group is all m micro-batches)
      ASSERT_LT(m, p) << sched.status().message();
      continue;
    }
    auto lowered = pipeline::lower(sched.value());
    ASSERT_TRUE(lowered.ok()) << lowered.status().message();
    const int S = lowered.value().num_stages();
    pipeline::SplitCosts costs;
    costs.layer.assign(kLayers, 1.0);
    costs.first = 2;  // the vision tower and embedding
    costs.vision = true;
    costs.min_first_layers = int(ref.model->config().vision.deepstack_indexes.size());
    auto plan = pipeline::balanced_layout(costs, S);
    ASSERT_TRUE(plan.ok()) << plan.status().message();

    std::vector<int> ids;
    for (int st = 0; st < S; ++st)
      if (lowered.value().stage_rank[size_t(st)] == rank) ids.push_back(st);
    Built mine;  // this rank's part of the model only
    build(mine, fixture, tied, PipelineStage::part_for(plan.value().layout, ids));
    std::vector<PipelineStage> stages;
    std::vector<std::pair<int, PipelineStage*>> args;
    stages.reserve(ids.size());
    for (int st : ids) {
      auto ps = PipelineStage::create(*mine.model, plan.value().layout, st);
      ASSERT_TRUE(ps.ok()) << ps.status().message();
      stages.push_back(std::move(ps).value());
      ASSERT_TRUE(stages.back().set_step(micro, weights).ok());
      args.push_back({st, &stages.back()});
    }
    auto engine = pipeline::Engine<PipelineStage>::create(lowered.value(), args, *world);
    ASSERT_TRUE(engine.ok()) << engine.status().message();
    const Status step = engine.value().step(mine.ctx);
    ASSERT_TRUE(step.ok()) << step.message();

    auto expect_losses = [&](const char* what) {
      for (const PipelineStage& st : stages) {
        if (st.stage() != S - 1) continue;
        for (int j = 0; j < m; ++j) {
          EXPECT_EQ(st.losses()[size_t(j)].loss, want[size_t(j)].loss) << what << " micro-batch " << j;
          EXPECT_EQ(st.losses()[size_t(j)].aux_loss, want[size_t(j)].aux_loss) << what << " micro-batch " << j;
          EXPECT_EQ(st.losses()[size_t(j)].num_label_tokens, want[size_t(j)].num_label_tokens) << what;
        }
      }
    };
    expect_losses("step");
    // Evaluation on the same stage objects: the forward-only schedule on the training placement gives the same
    // losses and leaves every gradient as the step left it (checked below against the reference).
    auto eval = pipeline::lower(pipeline::forward_only(p, m, lowered.value().stage_rank).value());
    ASSERT_TRUE(eval.ok()) << eval.status().message();
    auto eval_engine = pipeline::Engine<PipelineStage>::create(eval.value(), args, *world);
    ASSERT_TRUE(eval_engine.ok()) << eval_engine.status().message();
    for (PipelineStage& st : stages) ASSERT_TRUE(st.set_step(micro, weights).ok());
    const Status evaluated = eval_engine.value().step(mine.ctx);
    ASSERT_TRUE(evaluated.ok()) << evaluated.message();
    expect_losses("forward-only");
    const std::vector<int>& ranks = lowered.value().stage_rank;
    check_gradients(*world, *mine.model, *ref.model, tied, ranks.front() != ranks.back());
  }
}

TEST(Qwen3VlPipeline, DenseMatchesSingleProcessBitwise) { check_pipeline("dense"); }
TEST(Qwen3VlPipeline, MoeMatchesSingleProcessBitwise) { check_pipeline("moe"); }
TEST(Qwen3VlPipeline, TiedEmbeddingsSumTheirTwoStages) { check_pipeline("dense", true); }

// Greedy generation through two pipeline stages (generate_pipelined: the forward-only schedule once per token;
// layout 'V E t*2 | t L' of the fixtures' 3 layers, each rank building and loading only its stage's part of the HF
// weights) gives transformers' generate ids for every case of tests/fixtures/qwen3vl/generate.json (dense and MoE;
// no near-ties, test_generate.cpp checks the gaps); at np 4 two pipelines of 2 ranks run side by side.
TEST(Qwen3VlPipeline, GreedyGenerationGivesTransformersIds) {
  auto world = vlpar::test::world_comm("world");
  ASSERT_TRUE(world);
  ASSERT_EQ(world->size() % 2, 0);
  auto pp = world->split(world->rank() / 2, world->rank(), vlpar::test::test_options("pp"));
  ASSERT_TRUE(pp.ok()) << pp.status().message();
  const int stage = pp.value()->rank();
  std::ifstream f(test::fixture("generate.json"));
  ASSERT_TRUE(f.good());
  const nlohmann::json doc = nlohmann::json::parse(f);
  auto lowered = pipeline::lower(pipeline::forward_only(2, 1).value());
  ASSERT_TRUE(lowered.ok()) << lowered.status().message();
  int checked = 0;
  for (const std::string name : {"dense", "moe"}) {
    test::Loaded data;  // the fixture's pack (its one-process model is not used)
    test::load(data, name);
    Result<Config> cfg = load_hf_config(test::fixture(name));
    ASSERT_TRUE(cfg.ok()) << cfg.status().message();
    auto layout = pipeline::parse_layout("V E t*2 | t L", cfg.value().text.layers);
    ASSERT_TRUE(layout.ok()) << layout.status().message();
    Built mine;
    mine.ctx.allocator = &mine.alloc;
    const std::vector<int> ids = {stage};
    Result<Model> m = Model::create(mine.ctx, cfg.value(), Freeze{}, uint64_t(42), mine.alloc, {},
                                    PipelineStage::part_for(layout.value(), ids));
    ASSERT_TRUE(m.ok()) << m.status().message();
    mine.model.emplace(std::move(m).value());
    ASSERT_TRUE(load_hf_weights(*mine.model, test::fixture(name)).ok());
    auto st = PipelineStage::create(*mine.model, layout.value(), stage);
    ASSERT_TRUE(st.ok()) << st.status().message();
    PipelineStage* stages[] = {&st.value()};
    auto engine = pipeline::Engine<PipelineStage>::create(lowered.value(), {{stage, stages[0]}}, *pp.value());
    ASSERT_TRUE(engine.ok()) << engine.status().message();
    const PipelineForward pipe{stages, &engine.value(), pp.value().get(), 1};
    for (const auto& c : doc.at("cases")) {
      if (c.at("model").get<std::string>() != name) continue;
      const auto want = c.at("generated").get<std::vector<int64_t>>();
      auto prompt = vlpar::data::sample_of_pack(*data.batch, c.at("sample").get<int64_t>(),
                                                c.at("prompt_len").get<int64_t>());
      ASSERT_TRUE(prompt.ok()) << prompt.status().message();
      GenerateOptions o;
      o.max_new_tokens = int64_t(want.size());
      Result<GenerateResult> r = generate_pipelined(mine.ctx, pipe, prompt.value(), o, 64);
      ASSERT_TRUE(r.ok()) << r.status().message();
      EXPECT_EQ(r.value().tokens, want) << name << " sample " << c.at("sample");
      EXPECT_EQ(r.value().stop, StopReason::kMaxNewTokens);
      EXPECT_EQ(r.value().decode_steps, int64_t(want.size()) - 1);
      ++checked;
    }
  }
  EXPECT_EQ(checked, 4);
}

TEST(Qwen3VlPipeline, LayoutThatCutsTheDeepstackLayersIsRefused) {
  Built s;
  build(s, "dense");
  auto l = pipeline::parse_layout("V E t | t*8 L", kLayers);
  ASSERT_TRUE(l.ok());
  const Status st = PipelineStage::create(*s.model, l.value(), 1).status();
  EXPECT_NE(st.message().find("stage 0 holds 1 decoder layers but the deepstack features are added after layers "
                              "0 … 1 (the vision tower's output, on stage 0): give stage 0 at least 2 layers"),
            std::string::npos)
      << st.message();
}

}  // namespace
}  // namespace qwen3vl
