#pragma once
// Pipeline schedules as data (../shared/spec/pipeline-and-experts.md Part A): a schedule is one list of actions per
// rank, generated, lowered (communication inserted), validated and simulated without running a model.
//
//   action      (stage, kind, micro-batch); kinds F (forward, pushes a stash), B (full backward, pops it), I
//               (backward w.r.t. inputs: keeps what W needs), W (backward w.r.t. weights: pops the rest), and the
//               communication SEND_F / RECV_F (activation s → s+1) and SEND_B / RECV_B (input gradient s → s−1);
//               SEND_* carry the sender's stage, RECV_* the receiver's (2SEND_F5 pairs with 3RECV_F5).
//   text form   <stage><KIND><mb>, e.g. 3F12, 0I4, 2SEND_F7; a schedule is one line per rank, "r<rank>: " and the
//               actions separated by single spaces (PyTorch's _Action token syntax, so dumps can be diffed).
//   placement   stage → rank: loop (stage s on rank s mod p; chunk c of rank r is stage c·p + r) or V (v = 2: rank
//               r holds stages r and 2p−1−r).
//   generators  gpipe, one_f_one_b (PipeDream-flush), interleaved_1f1b (v chunks per rank, Megatron's
//               micro-batch groups), zb_h1 (backward split into I and W, one stage per rank), zb_v (two chunks per
//               rank in V placement): compute-only lists; forward_only (evaluation, generation: F only, on any
//               placement, e.g. the training schedule's, so the same stage objects serve both).
//   lower       inserts SEND/RECV after the compute that produces each tensor, receives appended on the peer at
//               placement time (so blocking p2p cannot deadlock); same-rank neighbours exchange in process.
//   validate    the invariants of spec A1.5 (counts, F before I/B before W, sends matched by receives in order),
//               reporting the first violation with rank and position.
//   simulate    per-action costs, dependency-driven start times: makespan, per-rank busy time, bubble fraction,
//               peak in-flight activation stashes and weight-gradient stashes per rank; a deadlock is a named
//               error listing every rank's head action and what it waits for.
// Test: tests/unit/test_pipeline_schedule.cpp (the spec's worked examples and simulator table).
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "vlpar/core/status.hpp"

namespace vlpar::pipeline {

enum class ActionKind : uint8_t { kF, kB, kI, kW, kSendF, kRecvF, kSendB, kRecvB };

struct Action {
  int stage = 0;
  ActionKind kind = ActionKind::kF;
  int mb = 0;
  friend bool operator==(const Action&, const Action&) = default;
};

bool is_compute(ActionKind k);

/// Per-rank action lists plus the stage → rank map they were generated for.
struct Schedule {
  int num_microbatches = 0;
  std::vector<int> stage_rank;              // [stages]
  std::vector<std::vector<Action>> ranks;   // [ranks]
  /// Evaluation / generation: one F per (stage, micro-batch) and no backward at all (validate rejects a B, I or
  /// W, and a training schedule without them); the engine keeps no stash past its F.
  bool forward_only = false;

  int num_ranks() const { return int(ranks.size()); }
  int num_stages() const { return int(stage_rank.size()); }
};

/// "3F12", "2SEND_F7".
std::string to_string(const Action& a);
/// One line per rank: "r0: 0F0 0F1 …".
std::string to_string(const Schedule& s);
/// One action of the text form; an unknown kind or a missing stage or micro-batch is a named error.
Result<Action> parse_action(std::string_view text);
/// The per-rank lists of the text form ("r<rank>: …" lines, ranks in order from 0).
Result<std::vector<std::vector<Action>>> parse_ranks(std::string_view text);

/// Stage → rank for v chunks per rank: loop (s mod p) or V (v = 2 only).
std::vector<int> loop_placement(int ranks, int chunks);
std::vector<int> v_placement(int ranks);

Result<Schedule> gpipe(int ranks, int microbatches);
Result<Schedule> one_f_one_b(int ranks, int microbatches);
/// group: Megatron's microbatch_group_size_per_vp_stage (0: ranks); needs ranks ≤ group ≤ microbatches and
/// microbatches mod group = 0 or ≥ ranks.
Result<Schedule> interleaved_1f1b(int ranks, int chunks, int microbatches, int group = 0);
Result<Schedule> zb_h1(int ranks, int microbatches);
Result<Schedule> zb_v(int ranks, int microbatches);
/// Forward only, on `stage_rank` (empty: one stage per rank): F(s, j) of each rank's stages in the order
/// (⌊j / ranks⌋, s, j) — micro-batches in groups of `ranks`, a group through each stage before the next stage — the
/// same order on every rank, and every F depends only on an earlier F in it, so any placement lowers and runs
/// without deadlock. Bubble with equal costs and one stage per rank: (p − 1) / (m + p − 1).
Result<Schedule> forward_only(int ranks, int microbatches, std::vector<int> stage_rank = {});

/// The generator named `name`: "gpipe", "1f1b", "interleaved" (`chunks` per rank), "zb_h1", "zb_v" or
/// "forward_only" (one stage per rank); another name is an error listing these.
Result<Schedule> generate(std::string_view name, int ranks, int microbatches, int chunks = 2);

/// Compute-only → compute + SEND/RECV (spec A1.4); a schedule that cannot make progress is a named error.
Result<Schedule> lower(const Schedule& compute_only);

/// The invariants of spec A1.5; `lowered` adds the communication checks.
Status validate(const Schedule& s, bool lowered);

struct SimCosts {
  double f = 1, b = 2, i = 1, w = 1;  // per action (per chunk for multi-chunk schedules); communication free
  std::function<double(const Action&)> action;  // when set, every compute action's own cost (e.g. measured)
  double message = 0;  // from a compute's end until its output (or input gradient) is usable on another rank;
                       // same-rank hand-offs are free
};

struct SimResult {
  double makespan = 0;
  std::vector<double> busy;          // [ranks] compute time
  double bubble = 0;                 // 1 − Σ busy / (ranks · makespan)
  std::vector<int> peak_activations; // [ranks] max in-flight (stage, mb) between F and I/B (0 forward-only)
  std::vector<int> peak_wgrad;       // [ranks] max in-flight (stage, mb) between F and W/B
  std::vector<std::vector<double>> start, end;  // [ranks][position in the list] when each action runs
};

/// Runs every rank's list against the dependencies (F(s,j) ← F(s−1,j); I/B(s,j) ← F(s,j), I/B(s+1,j);
/// W(s,j) ← I(s,j); a dependency on another rank's compute adds costs.message); SEND/RECV are non-blocking
/// (posted, as the runtime posts them; the consuming compute waits), so a lowered schedule simulates like its
/// compute-only form. A schedule where no rank can start its next
/// action is a deadlock error naming every rank's head and what it waits for.
Result<SimResult> simulate(const Schedule& s, const SimCosts& costs = {});

/// A text Gantt chart of a simulated schedule: one row per rank, one cell per `unit` of time, each cell the compute
/// action running then ("F3", "B0", "I2", "W1"; with the stage in front when a rank holds several stages: "2F3")
/// or "." when idle. Made for costs that are multiples of `unit` (the defaults: F 1, B 2, I 1, W 1).
///   r0: F0 F1 .  .  B0 B0 .  B1 B1        (1F1B, 2 ranks, 2 micro-batches)
///   r1: .  F0 B0 B0 F1 B1 B1 .  .
std::string timeline(const Schedule& s, const SimResult& r, double unit = 1.0);

}  // namespace vlpar::pipeline
