// vlpar-pipeline: pipeline schedules and layouts before anything runs (parallel/pipeline_schedule.hpp,
// parallel/pipeline_split.hpp).
//   vlpar-pipeline --schedule 1f1b --ranks 4 --microbatches 8            the schedule, its timeline and statistics
//   vlpar-pipeline --schedule interleaved --chunks 2 --lowered           ... with the SEND/RECV actions
//   vlpar-pipeline --file my_schedule.txt                                 validate and simulate a written schedule
//   vlpar-pipeline --schedule forward_only --ranks 4 --microbatches 8     evaluation: F only (also --file with
//                                                                          --forward-only)
//   vlpar-pipeline --layout "V E t*5 | t*9 | t*9 | t*8 L" --layers 31     check a layout
// Costs: --f, --b, --i, --w (defaults 1, 2, 1, 1); the timeline draws one cell per the smallest of them. A schedule file holds one "r<rank>: <actions>" line per rank
// (the text form of pipeline_schedule.hpp); the stage → rank map is read from where each stage's actions are, and a
// file with SEND/RECV actions is validated as lowered. Errors name the rank and the action (exit 1).
// Test: ctest -R test_vlpar_pipeline (tools/CMakeLists.txt; schedules in tools/pipeline/testdata/).
#include <fmt/core.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "vlpar/core/cli.hpp"
#include "vlpar/parallel/pipeline_schedule.hpp"
#include "vlpar/parallel/pipeline_split.hpp"

namespace {

using namespace vlpar;
using namespace vlpar::pipeline;

struct Args {
  std::string schedule, file, layout;
  int ranks = 2, microbatches = 4, chunks = 2, layers = 0;
  bool forward_only = false;  // --file: an evaluation schedule (F only)
  bool lowered = false;
  double f = 1, b = 2, i = 1, w = 1;
};

/// A written schedule: its lists, micro-batch count and stage → rank map from the actions themselves.
Result<Schedule> read_file(const std::string& path) {
  std::ifstream in(path);
  VLPAR_CHECK_CODE(in.good(), StatusCode::kIoError, "--file {}: cannot open", path);
  std::stringstream text;
  text << in.rdbuf();
  Result<std::vector<std::vector<Action>>> lists = parse_ranks(text.str());
  if (!lists.ok()) return Status(lists.status().code(), fmt::format("--file {}: {}", path, lists.status().message()));
  Schedule s;
  s.ranks = std::move(lists).value();
  std::map<int, int> where;
  for (size_t r = 0; r < s.ranks.size(); ++r)
    for (const Action& act : s.ranks[r]) {
      VLPAR_CHECK(act.stage >= 0 && act.mb >= 0, "--file {}: r{}: {} has a negative index", path, r, to_string(act));
      s.num_microbatches = std::max(s.num_microbatches, act.mb + 1);
      if (!is_compute(act.kind)) continue;
      const auto [it, fresh] = where.emplace(act.stage, int(r));
      VLPAR_CHECK(fresh || it->second == int(r), "--file {}: stage {} has compute actions on ranks {} and {} (r{}: {})",
                  path, act.stage, it->second, r, r, to_string(act));
    }
  s.stage_rank.assign(where.empty() ? 0 : size_t(where.rbegin()->first) + 1, -1);
  for (const auto& [stage, rank] : where) s.stage_rank[size_t(stage)] = rank;
  for (size_t st = 0; st < s.stage_rank.size(); ++st)
    VLPAR_CHECK(s.stage_rank[st] >= 0, "--file {}: stage {} has no compute action on any rank", path, st);
  return s;
}

Status show(const Args& a, const Schedule& s, bool lowered) {
  VLPAR_RETURN_IF_ERROR(validate(s, lowered));
  SimCosts costs;
  costs.f = a.f, costs.b = a.b, costs.i = a.i, costs.w = a.w;
  VLPAR_ASSIGN_OR_RETURN(SimResult r, simulate(s, costs));
  const double unit = std::min({a.f, a.b, a.i, a.w});  // one cell per the smallest cost
  fmt::print("{}\n{}\nmakespan {:g}, bubble {:.3f}\n", to_string(s), timeline(s, r, unit), r.makespan, r.bubble);
  for (int rk = 0; rk < s.num_ranks(); ++rk)
    fmt::print("r{}: busy {:g}, peak activation stashes {}, peak weight-gradient stashes {}\n", rk,
               r.busy[size_t(rk)], r.peak_activations[size_t(rk)], r.peak_wgrad[size_t(rk)]);
  return Status::Ok();
}

Status run(const Args& a) {
  if (!a.layout.empty()) {
    VLPAR_ASSIGN_OR_RETURN(Layout l, parse_layout(a.layout, a.layers));
    fmt::print("{} stages:", l.num_stages());
    for (int s = 0; s < l.num_stages(); ++s) fmt::print(" [{}, {})", l.bounds[size_t(s)], l.bounds[size_t(s) + 1]);
    fmt::print("\n{}\n", l.to_string());
    return Status::Ok();
  }
  if (!a.file.empty()) {
    VLPAR_ASSIGN_OR_RETURN(Schedule s, read_file(a.file));
    s.forward_only = a.forward_only;
    bool comm = false;
    for (const auto& list : s.ranks)
      for (const Action& act : list) comm = comm || !is_compute(act.kind);
    return show(a, s, comm);
  }
  VLPAR_CHECK(!a.schedule.empty(), "give --schedule, --file or --layout (--help lists the options)");
  Result<Schedule> gen = generate(a.schedule, a.ranks, a.microbatches, a.chunks);
  if (!gen.ok()) return Status(gen.status().code(), fmt::format("--schedule: {}", gen.status().message()));
  const Schedule& s = gen.value();
  if (!a.lowered) return show(a, s, false);
  VLPAR_ASSIGN_OR_RETURN(Schedule low, lower(s));
  return show(a, low, true);
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  cli::Parser p("vlpar-pipeline", "pipeline schedules and layouts: print, validate, simulate");
  p.add("schedule", &a.schedule, "gpipe, 1f1b, interleaved, zb_h1, zb_v or forward_only");
  p.add("ranks", &a.ranks, "pipeline ranks p");
  p.add("microbatches", &a.microbatches, "micro-batches per step m");
  p.add("chunks", &a.chunks, "stages per rank for interleaved (v)");
  p.add("lowered", &a.lowered, "insert the SEND/RECV actions");
  p.add("file", &a.file, "a written schedule to validate and simulate");
  p.add("forward-only", &a.forward_only, "the --file schedule is forward-only (evaluation: no backward)");
  p.add("layout", &a.layout, "a layout string to check (with --layers)");
  p.add("layers", &a.layers, "decoder layers of the model (for --layout)");
  p.add("f", &a.f, "cost of F");
  p.add("b", &a.b, "cost of B");
  p.add("i", &a.i, "cost of I");
  p.add("w", &a.w, "cost of W");
  return cli::run_main(p, argc, argv, [&] { return run(a); });
}
