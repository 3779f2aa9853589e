// Pipeline stage layouts: the layout grammar, uniform and cost-model splits (include/vlpar/parallel/pipeline_split.hpp;
// ../shared/spec/pipeline-and-experts.md A4). Test: tests/unit/test_pipeline_split.cpp
#include "vlpar/parallel/pipeline_split.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <set>

namespace vlpar::pipeline {
namespace {

/// Expands the grammar to a flat symbol string ('|' kept): atoms are t E V L | or a parenthesised group, each
/// optionally followed by *n; commas and spaces are skipped.
class LayoutParser {
 public:
  explicit LayoutParser(std::string_view s) : s_(s) {}

  Result<std::string> parse() {
    VLPAR_ASSIGN_OR_RETURN(std::string out, seq_(false));
    return out;
  }

 private:
  Status err_(std::string_view why) const {
    return VLPAR_STATUS(StatusCode::kInvalidArgument, "pipeline layout '{}': {} at position {}", s_, why, i_);
  }
  void skip_() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == ',')) ++i_;
  }
  Result<std::string> seq_(bool group) {
    std::string out;
    for (skip_(); i_ < s_.size(); skip_()) {
      const char c = s_[i_];
      if (c == ')') {
        if (!group) return err_("')' without '('");
        return out;
      }
      std::string atom;
      if (c == '(') {
        ++i_;
        VLPAR_ASSIGN_OR_RETURN(atom, seq_(true));
        if (i_ >= s_.size()) return err_("'(' not closed");
        ++i_;
      } else if (c == 't' || c == 'E' || c == 'V' || c == 'L' || c == '|') {
        atom = std::string(1, c);
        ++i_;
      } else if (c == 'm') {
        return err_("'m' (an MTP layer) is not supported: Qwen3-VL has none");
      } else {
        return err_(fmt::format("unknown symbol '{}' (expected t, E, V, L, |, (, ), *n or ',')", c));
      }
      VLPAR_ASSIGN_OR_RETURN(int64_t n, repeat_());
      if (int64_t(out.size()) + n * int64_t(atom.size()) > 1'000'000) return err_("layout expands past 10^6 symbols");
      for (int64_t k = 0; k < n; ++k) out += atom;
    }
    if (group) return err_("'(' not closed");
    return out;
  }
  Result<int64_t> repeat_() {
    size_t j = i_;
    while (j < s_.size() && s_[j] == ' ') ++j;
    if (j >= s_.size() || s_[j] != '*') return int64_t{1};
    i_ = j + 1;
    while (i_ < s_.size() && s_[i_] == ' ') ++i_;
    int64_t n = 0;
    const size_t start = i_;
    while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9' && n <= 1'000'000) n = n * 10 + (s_[i_++] - '0');
    if (i_ == start) return err_("'*' needs a repeat count");
    if (n > 1'000'000) return err_("repeat count too large");
    return n;
  }

  std::string_view s_;
  size_t i_ = 0;
};

constexpr double kInf = std::numeric_limits<double>::infinity();

/// The split problem: S stages over L layers with a feasibility rule and a per-stage value; best[s][j] is the
/// smallest achievable max value of stages s … S−1 covering layers [j, L).
struct Problem {
  int S = 0, L = 0;
  std::function<bool(int, int, int)> feasible;  // (stage, first, end)
  std::function<double(int, int, int)> value;

  std::vector<std::vector<double>> solve() const {
    std::vector<std::vector<double>> best(size_t(S), std::vector<double>(size_t(L) + 1, kInf));
    for (int j = 0; j <= L; ++j)
      if (feasible(S - 1, j, L)) best[size_t(S) - 1][size_t(j)] = value(S - 1, j, L);
    for (int s = S - 2; s >= 0; --s)
      for (int j = 0; j <= L; ++j)
        for (int k = j; k <= L; ++k)
          if (feasible(s, j, k) && best[size_t(s) + 1][size_t(k)] < kInf)
            best[size_t(s)][size_t(j)] = std::min(best[size_t(s)][size_t(j)],
                                                  std::max(value(s, j, k), best[size_t(s) + 1][size_t(k)]));
    return best;
  }
};

/// Prefix sums of the per-layer columns and the per-stage cost and memory of a split.
struct Prefix {
  const SplitCosts& c;
  int S;
  std::vector<double> cost;
  std::vector<int64_t> stat, stash;

  Prefix(const SplitCosts& costs, int stages) : c(costs), S(stages) {
    const size_t L = costs.layer.size();
    cost.assign(L + 1, 0), stat.assign(L + 1, 0), stash.assign(L + 1, 0);
    for (size_t i = 0; i < L; ++i) {
      cost[i + 1] = cost[i] + costs.layer[i];
      stat[i + 1] = stat[i] + (costs.layer_static.empty() ? 0 : costs.layer_static[i]);
      stash[i + 1] = stash[i] + (costs.layer_stash.empty() ? 0 : costs.layer_stash[i]);
    }
  }
  double stage_cost(int s, int j, int k) const {
    return (cost[size_t(k)] - cost[size_t(j)]) + (s == 0 ? c.first : 0) + (s == S - 1 ? c.last : 0);
  }
  int64_t stage_memory(int s, int j, int k) const {
    const int64_t kf = c.in_flight.empty() ? 1 : c.in_flight[size_t(s)];
    const int64_t st = stat[size_t(k)] - stat[size_t(j)] + (s == 0 ? c.first_static : 0) +
                       (s == S - 1 ? c.last_static : 0);
    const int64_t sh = stash[size_t(k)] - stash[size_t(j)] + (s == 0 ? c.first_stash : 0) +
                       (s == S - 1 ? c.last_stash : 0);
    return st + kf * sh;
  }
  /// Decoder layers stage s must hold: stage 0 its min_first_layers, and one unless it has work of its own.
  int min_layers(int s) const {
    int m = 1;
    if (s == 0 && (c.first > 0 || c.vision)) m = 0;
    if (s == S - 1 && c.last > 0) m = 0;
    if (S == 1) m = 0;
    return s == 0 ? std::max(m, c.min_first_layers) : m;
  }
};

Status check_costs(const SplitCosts& c, int stages) {
  const size_t L = c.layer.size();
  VLPAR_CHECK(stages >= 1, "pipeline split: needs at least one stage, got {}", stages);
  VLPAR_CHECK(c.layer_static.empty() || c.layer_static.size() == L, "pipeline split: layer_static has {} entries for "
              "{} layers", c.layer_static.size(), L);
  VLPAR_CHECK(c.layer_stash.empty() || c.layer_stash.size() == L, "pipeline split: layer_stash has {} entries for {} "
              "layers", c.layer_stash.size(), L);
  VLPAR_CHECK(c.in_flight.empty() || c.in_flight.size() == size_t(stages), "pipeline split: in_flight has {} entries "
              "for {} stages", c.in_flight.size(), stages);
  for (size_t i = 0; i < L; ++i)
    VLPAR_CHECK(std::isfinite(c.layer[i]) && c.layer[i] >= 0, "pipeline split: layer {} has cost {} (needs a finite "
                "cost >= 0)", i, c.layer[i]);
  VLPAR_CHECK(c.first >= 0 && c.last >= 0 && c.budget >= 0 && c.min_first_layers >= 0,
              "pipeline split: negative first/last cost, budget or min_first_layers");
  return Status::Ok();
}

}  // namespace

std::string Layout::to_string() const {
  std::string out;
  for (int s = 0; s < num_stages(); ++s) {
    std::vector<std::string> parts;
    if (s == 0 && vision) parts.push_back("V");
    if (s == 0) parts.push_back("E");
    const int n = layers_of(s);
    if (n == 1) parts.push_back("t");
    if (n > 1) parts.push_back(fmt::format("t*{}", n));
    if (s == num_stages() - 1) parts.push_back("L");
    out += fmt::format("{}{}", s ? " | " : "", fmt::join(parts, " "));
  }
  return out;
}

Result<Layout> parse_layout(std::string_view text, int layers) {
  VLPAR_ASSIGN_OR_RETURN(std::string flat, LayoutParser(text).parse());
  std::vector<std::string> stages(1);
  for (char c : flat) {
    if (c == '|') stages.emplace_back();
    else stages.back() += c;
  }
  Layout out;
  out.bounds.push_back(0);
  const size_t S = stages.size();
  for (size_t s = 0; s < S; ++s) {
    const std::string& st = stages[s];
    const auto count = [&](char c) { return int(std::count(st.begin(), st.end(), c)); };
    VLPAR_CHECK(!st.empty(), "pipeline layout '{}': stage {} holds nothing (remove a '|' or give it layers)", text, s);
    VLPAR_CHECK(count('E') == (s == 0 ? 1 : 0) && count('V') <= (s == 0 ? 1 : 0),
                "pipeline layout '{}': stage {}: E (embedding) and V (vision tower) go on stage 0, once each; E is "
                "required", text, s);
    VLPAR_CHECK(count('L') == (s + 1 == S ? 1 : 0), "pipeline layout '{}': stage {}: L (loss and head) goes on the "
                "last stage, once", text, s);
    if (s == 0) out.vision = count('V') == 1;
    out.bounds.push_back(out.bounds.back() + count('t'));
  }
  VLPAR_CHECK(out.num_layers() == layers, "pipeline layout '{}' holds {} decoder layers, the model has {}", text,
              out.num_layers(), layers);
  return out;
}

Result<Layout> uniform_layout(int layers, int stages, bool vision) {
  VLPAR_CHECK(stages >= 1 && layers >= stages, "pipeline split: {} decoder layers cannot fill {} stages (pp·vpp): "
              "every stage needs a layer; use at most {} stages", layers, stages, layers);
  if (layers % stages != 0) {
    Layout even{{0}, vision};
    for (int s = 0; s < stages; ++s) even.bounds.push_back(even.bounds.back() + layers / stages +
                                                           (s >= stages - layers % stages ? 1 : 0));
    return VLPAR_STATUS(StatusCode::kInvalidArgument, "pipeline split: {} decoder layers do not divide into {} "
                        "stages (pp·vpp); give a layout, e.g. '{}', or use the cost-model split", layers, stages,
                        even.to_string());
  }
  Layout out{{0}, vision};
  for (int s = 0; s < stages; ++s) out.bounds.push_back(out.bounds.back() + layers / stages);
  return out;
}

std::vector<int> stage_in_flight(const Schedule& s) {
  std::vector<int> peak(size_t(s.num_stages()), 0);
  std::map<int, std::set<int>> live;  // stage → micro-batches between F and the last backward
  for (const auto& list : s.ranks)
    for (const Action& a : list) {
      if (a.stage < 0 || a.stage >= s.num_stages()) continue;
      std::set<int>& l = live[a.stage];
      if (a.kind == ActionKind::kF) l.insert(a.mb);
      if (a.kind == ActionKind::kB || a.kind == ActionKind::kW) l.erase(a.mb);
      peak[size_t(a.stage)] = std::max(peak[size_t(a.stage)], int(l.size()));
    }
  return peak;
}

Result<SplitPlan> evaluate_layout(const SplitCosts& costs, const Layout& layout) {
  const int S = layout.num_stages();
  VLPAR_RETURN_IF_ERROR(check_costs(costs, S));
  VLPAR_CHECK(layout.num_layers() == int(costs.layer.size()), "pipeline split: the layout '{}' holds {} layers, the "
              "costs describe {}", layout.to_string(), layout.num_layers(), costs.layer.size());
  const Prefix p(costs, S);
  SplitPlan plan{layout, {}, {}, 0};
  for (int s = 0; s < S; ++s) {
    const int j = layout.bounds[size_t(s)], k = layout.bounds[size_t(s) + 1];
    plan.stage_cost.push_back(p.stage_cost(s, j, k));
    plan.stage_memory.push_back(p.stage_memory(s, j, k));
    plan.bottleneck = std::max(plan.bottleneck, plan.stage_cost.back());
  }
  return plan;
}

Result<SplitPlan> balanced_layout(const SplitCosts& costs, int stages) {
  VLPAR_RETURN_IF_ERROR(check_costs(costs, stages));
  const int S = stages, L = int(costs.layer.size());
  const Prefix p(costs, S);
  int needed = 0;
  for (int s = 0; s < S; ++s) needed += p.min_layers(s);
  VLPAR_CHECK(needed <= L, "pipeline split: {} decoder layers cannot fill {} stages (pp·vpp): {} of them need a "
              "layer{}; use at most {} stages", L, S, needed,
              costs.min_first_layers > 1 ? fmt::format(" and stage 0 needs {}", costs.min_first_layers) : "",
              S - (needed - L));
  auto shape_ok = [&](int s, int j, int k) { return k - j >= p.min_layers(s); };
  auto fits = [&](int s, int j, int k) {
    return shape_ok(s, j, k) && (costs.budget == 0 || p.stage_memory(s, j, k) <= costs.budget);
  };
  const Problem prob{S, L, fits, [&](int s, int j, int k) { return p.stage_cost(s, j, k); }};
  const auto best = prob.solve();
  const double x = best[0][0];
  if (x == kInf) {
    const Problem mem{S, L, shape_ok, [&](int s, int j, int k) { return double(p.stage_memory(s, j, k)); }};
    return VLPAR_STATUS(StatusCode::kInvalidArgument, "pipeline split: no split of {} decoder layers over {} stages "
                        "fits the budget of {} bytes per stage: the least any split needs on its fullest stage is {} "
                        "bytes; add stages (pp or vpp), recompute activations (smaller stashes) or raise the budget",
                        L, S, costs.budget, int64_t(mem.solve()[0][0]));
  }
  // Among the splits with that bottleneck, the most even one (least Σ C_s²), ties to fewer layers on stage 0.
  std::vector<std::vector<double>> sq(size_t(S) + 1, std::vector<double>(size_t(L) + 1, kInf));
  std::vector<std::vector<int>> pick(size_t(S), std::vector<int>(size_t(L) + 1, -1));
  sq[size_t(S)][size_t(L)] = 0;
  for (int s = S - 1; s >= 0; --s)
    for (int jj = 0; jj <= L; ++jj)
      for (int k = jj; k <= L; ++k) {
        const double c = p.stage_cost(s, jj, k), rest = sq[size_t(s) + 1][size_t(k)];
        if (!fits(s, jj, k) || c > x || rest == kInf) continue;
        if (c * c + rest < sq[size_t(s)][size_t(jj)]) {
          sq[size_t(s)][size_t(jj)] = c * c + rest;
          pick[size_t(s)][size_t(jj)] = k;
        }
      }
  Layout out{{0}, costs.vision};
  for (int s = 0; s < S; ++s) out.bounds.push_back(pick[size_t(s)][size_t(out.bounds.back())]);
  return evaluate_layout(costs, out);
}

}  // namespace vlpar::pipeline
