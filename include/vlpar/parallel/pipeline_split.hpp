#pragma once
// Which decoder layers each pipeline stage holds (spec A4): a Layout, from Megatron's layout grammar, a uniform
// split, or the cost-model split that minimises the slowest stage under a memory budget.
//
//   layout string   Megatron's `pipeline_model_parallel_layout` grammar plus `V` for a vision tower: `|` separates
//                   stages, `t` is one decoder layer, `E` the embedding (stage 0), `V` the vision tower (stage 0),
//                   `L` the loss and head (last stage), `x*n` repeats a symbol or a parenthesised group, commas and
//                   spaces are cosmetic. "V E t*5 | t*9 | t*9 | t*8 L" holds 5, 9, 9 and 8 layers. Unlike Megatron
//                   an empty stage is an error (a stage with nothing to run only adds a hop), as is `m` (MTP: not
//                   in Qwen3-VL). to_string() writes this form, so a chosen split can be pasted back as an override.
//   cost-model      per-layer cost c_i and memory (static bytes q_i: parameters + gradients + optimizer state;
//                   stash bytes a_i per micro-batch in flight), extra cost and memory on the first stage (vision
//                   tower + embedding) and the last (final norm + head + loss), and the number of micro-batches
//                   in flight per stage under the chosen schedule (stage_in_flight below: p − s for 1F1B, so
//                   stage 0 holds p micro-batches of vision + layer activations). Minimises max_s C_s subject to
//                   Σ q + k_s·Σ a ≤ budget per stage, exactly (dynamic programme over (stage, first layer),
//                   O(S·L²)); among the splits with that bottleneck the most even (least Σ C_s²), then the one
//                   with fewer layers on stage 0 (its in-flight multiplier is largest). Stage 0 may hold no
//                   decoder layer only when it has a vision tower or embedding cost of its own (the vision tower
//                   as its own stage), the last stage only when it has a head cost; min_first_layers keeps layers 0 … n−1 on stage 0 (Qwen3-VL's deepstack layers,
//                   spec A5.2).
// Bad layouts (more stages than layers, a budget no split fits, layers that do not divide evenly for a uniform
// split) are named errors with the reason and a working suggestion.
// Test: tests/unit/test_pipeline_split.cpp
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "vlpar/core/status.hpp"
#include "vlpar/parallel/pipeline_schedule.hpp"

namespace vlpar::pipeline {

struct Layout {
  std::vector<int> bounds;  // [stages + 1]: stage s holds decoder layers [bounds[s], bounds[s + 1])
  bool vision = false;      // stage 0 runs a vision tower (`V`)

  int num_stages() const { return int(bounds.size()) - 1; }
  int num_layers() const { return bounds.empty() ? 0 : bounds.back(); }
  int layers_of(int stage) const { return bounds[size_t(stage) + 1] - bounds[size_t(stage)]; }
  /// "V E t*5 | t*9 | t*8 L"
  std::string to_string() const;
  friend bool operator==(const Layout&, const Layout&) = default;
};

/// The layout grammar above; `layers` is the model's decoder-layer count (the string must hold exactly that many).
Result<Layout> parse_layout(std::string_view text, int layers);
/// Every stage the same number of layers; `layers` must divide by `stages`.
Result<Layout> uniform_layout(int layers, int stages, bool vision = false);

/// Per stage, the most micro-batches between its F and its last backward at any point of its rank's list (the
/// k_s of the memory constraint). 1F1B: p − s; GPipe: m.
std::vector<int> stage_in_flight(const Schedule& s);

struct SplitCosts {
  std::vector<double> layer;         // [L] cost of each decoder layer (forward + backward, any unit)
  double first = 0, last = 0;        // extra cost of stage 0 (vision tower, embedding) and of the last stage (head)
  std::vector<int64_t> layer_static; // [L] parameter + gradient + optimizer bytes; empty: no memory constraint
  std::vector<int64_t> layer_stash;  // [L] activation bytes per micro-batch in flight; empty: none
  int64_t first_static = 0, first_stash = 0, last_static = 0, last_stash = 0;
  std::vector<int> in_flight;        // [stages] micro-batches in flight per stage; empty: 1 each
  int64_t budget = 0;                // bytes per stage; 0: unlimited
  int min_first_layers = 0;          // decoder layers stage 0 must hold
  bool vision = false;               // stage 0 has a vision tower (the layout string's `V`)
};

struct SplitPlan {
  Layout layout;
  std::vector<double> stage_cost;     // [stages]
  std::vector<int64_t> stage_memory;  // [stages] Σ static + in_flight · Σ stash
  double bottleneck = 0;              // max stage cost
};

/// The cost-model split above over `stages` stages (p·v).
Result<SplitPlan> balanced_layout(const SplitCosts& costs, int stages);
/// Costs and memory of a given layout (for a manual override, or to compare with the balanced one).
Result<SplitPlan> evaluate_layout(const SplitCosts& costs, const Layout& layout);

}  // namespace vlpar::pipeline
