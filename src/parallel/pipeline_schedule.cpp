// Pipeline schedules as data: text form, placements, generators, lowering, validation and simulation
// (include/vlpar/parallel/pipeline_schedule.hpp; ../shared/spec/pipeline-and-experts.md Part A).
// Test: tests/unit/test_pipeline_schedule.cpp
#include "vlpar/parallel/pipeline_schedule.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <map>
#include <set>
#include <tuple>
#include <utility>

namespace vlpar::pipeline {
namespace {

constexpr std::array<std::pair<ActionKind, std::string_view>, 8> kKindNames = {{
    {ActionKind::kSendF, "SEND_F"}, {ActionKind::kRecvF, "RECV_F"}, {ActionKind::kSendB, "SEND_B"},
    {ActionKind::kRecvB, "RECV_B"}, {ActionKind::kF, "F"}, {ActionKind::kB, "B"}, {ActionKind::kI, "I"},
    {ActionKind::kW, "W"},
}};

std::string_view kind_name(ActionKind k) {
  for (const auto& [kind, name] : kKindNames)
    if (kind == k) return name;
  return "?";
}

Action act(int stage, ActionKind kind, int mb) { return Action{stage, kind, mb}; }

/// A schedule shell: ranks, stages, micro-batches and the placement; empty lists.
Schedule shell(int ranks, int microbatches, std::vector<int> stage_rank) {
  Schedule s;
  s.num_microbatches = microbatches;
  s.stage_rank = std::move(stage_rank);
  s.ranks.assign(size_t(ranks), {});
  return s;
}

Status check_sizes(const char* what, int ranks, int microbatches) {
  VLPAR_CHECK(ranks >= 1 && microbatches >= 1, "{}: needs at least one rank and one micro-batch, got {} ranks and "
              "{} micro-batches", what, ranks, microbatches);
  return Status::Ok();
}

/// (stage, kind, mb) as a map key.
using Key = std::tuple<int, int, int>;
Key key(const Action& a) { return {a.stage, int(a.kind), a.mb}; }

}  // namespace

bool is_compute(ActionKind k) {
  return k == ActionKind::kF || k == ActionKind::kB || k == ActionKind::kI || k == ActionKind::kW;
}

std::string to_string(const Action& a) { return fmt::format("{}{}{}", a.stage, kind_name(a.kind), a.mb); }

std::string to_string(const Schedule& s) {
  std::string out;
  for (size_t r = 0; r < s.ranks.size(); ++r) {
    out += fmt::format("r{}:", r);
    for (const Action& a : s.ranks[r]) out += fmt::format(" {}", to_string(a));
    out += "\n";
  }
  return out;
}

Result<Action> parse_action(std::string_view text) {
  size_t i = 0;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9') ++i;
  VLPAR_CHECK(i > 0, "pipeline action '{}': no stage number before the kind", text);
  Action a;
  std::from_chars(text.data(), text.data() + i, a.stage);
  const std::string_view rest = text.substr(i);
  for (const auto& [kind, name] : kKindNames) {
    if (rest.substr(0, name.size()) != name) continue;
    const std::string_view mb = rest.substr(name.size());
    const bool digits = !mb.empty() && std::all_of(mb.begin(), mb.end(), [](char c) { return c >= '0' && c <= '9'; });
    VLPAR_CHECK(digits, "pipeline action '{}': {} needs a micro-batch number after it", text, name);
    std::from_chars(mb.data(), mb.data() + mb.size(), a.mb);
    a.kind = kind;
    return a;
  }
  return VLPAR_STATUS(StatusCode::kInvalidArgument, "pipeline action '{}': unknown kind '{}' (F, B, I, W, SEND_F, "
                      "RECV_F, SEND_B, RECV_B)", text, rest);
}

Result<std::vector<std::vector<Action>>> parse_ranks(std::string_view text) {
  std::vector<std::vector<Action>> ranks;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t end = std::min(text.find('\n', pos), text.size());
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    const std::string prefix = fmt::format("r{}:", ranks.size());
    VLPAR_CHECK(line.substr(0, prefix.size()) == prefix, "pipeline schedule: line {} must start with '{}', got '{}'",
                ranks.size() + 1, prefix, line);
    line.remove_prefix(prefix.size());
    std::vector<Action> actions;
    while (!line.empty()) {
      const size_t start = line.find_first_not_of(' ');
      if (start == std::string_view::npos) break;
      line.remove_prefix(start);
      const size_t len = std::min(line.find(' '), line.size());
      VLPAR_ASSIGN_OR_RETURN(const Action a, parse_action(line.substr(0, len)));
      actions.push_back(a);
      line.remove_prefix(len);
    }
    ranks.push_back(std::move(actions));
  }
  return ranks;
}

std::vector<int> loop_placement(int ranks, int chunks) {
  std::vector<int> stage_rank(size_t(ranks) * size_t(chunks));
  for (size_t s = 0; s < stage_rank.size(); ++s) stage_rank[s] = int(s % size_t(ranks));
  return stage_rank;
}

std::vector<int> v_placement(int ranks) {
  std::vector<int> stage_rank(size_t(2 * ranks));
  for (int r = 0; r < ranks; ++r) stage_rank[size_t(r)] = stage_rank[size_t(2 * ranks - 1 - r)] = r;
  return stage_rank;
}

Result<Schedule> gpipe(int ranks, int microbatches) {
  VLPAR_RETURN_IF_ERROR(check_sizes("gpipe", ranks, microbatches));
  Schedule s = shell(ranks, microbatches, loop_placement(ranks, 1));
  for (int r = 0; r < ranks; ++r) {
    for (int j = 0; j < microbatches; ++j) s.ranks[size_t(r)].push_back(act(r, ActionKind::kF, j));
    for (int j = 0; j < microbatches; ++j) s.ranks[size_t(r)].push_back(act(r, ActionKind::kB, j));
  }
  return s;
}

Result<Schedule> one_f_one_b(int ranks, int microbatches) {
  VLPAR_RETURN_IF_ERROR(check_sizes("1f1b", ranks, microbatches));
  Schedule s = shell(ranks, microbatches, loop_placement(ranks, 1));
  for (int r = 0; r < ranks; ++r) {
    auto& out = s.ranks[size_t(r)];
    const int warmup = std::min(ranks - 1 - r, microbatches);  // Megatron's num_warmup, capped at m
    for (int j = 0; j < warmup; ++j) out.push_back(act(r, ActionKind::kF, j));
    for (int k = 0; k < microbatches - warmup; ++k) {
      out.push_back(act(r, ActionKind::kF, warmup + k));
      out.push_back(act(r, ActionKind::kB, k));
    }
    for (int j = microbatches - warmup; j < microbatches; ++j) out.push_back(act(r, ActionKind::kB, j));
  }
  return s;
}

Result<Schedule> interleaved_1f1b(int ranks, int chunks, int microbatches, int group) {
  VLPAR_RETURN_IF_ERROR(check_sizes("interleaved 1f1b", ranks, microbatches));
  const int g = group == 0 ? ranks : group;
  VLPAR_CHECK(chunks >= 2, "interleaved 1f1b: needs at least 2 chunks per rank (1 is plain 1f1b), got {}", chunks);
  VLPAR_CHECK(ranks <= g && g <= microbatches && (microbatches % g == 0 || microbatches % g >= ranks),
              "interleaved 1f1b: micro-batch group {} must satisfy ranks ({}) <= group <= micro-batches ({}) and "
              "micro-batches mod group = 0 or >= ranks (Megatron's rule)", g, ranks, microbatches);
  // Megatron's table: per group of g micro-batches (the last takes the rest), chunk 0..v−1, the group's mbs.
  std::vector<std::pair<int, int>> table;  // (mb, chunk) of forward op k
  for (int g0 = 0; g0 < microbatches; g0 += g) {
    const int g1 = std::min(g0 + g, microbatches);
    for (int c = 0; c < chunks; ++c)
      for (int j = g0; j < g1; ++j) table.emplace_back(j, c);
  }
  Schedule s = shell(ranks, microbatches, loop_placement(ranks, chunks));
  const int ops = microbatches * chunks;
  for (int r = 0; r < ranks; ++r) {
    auto& out = s.ranks[size_t(r)];
    auto fwd = [&](int k) {
      out.push_back(act(table[size_t(k)].second * ranks + r, ActionKind::kF, table[size_t(k)].first));
    };
    auto bwd = [&](int k) {
      out.push_back(act((chunks - 1 - table[size_t(k)].second) * ranks + r, ActionKind::kB, table[size_t(k)].first));
    };
    const int warmup = std::min(2 * (ranks - 1 - r) + (chunks - 1) * g, ops);
    for (int k = 0; k < warmup; ++k) fwd(k);
    for (int k = 0; k < ops - warmup; ++k) {
      fwd(warmup + k);
      bwd(k);
    }
    for (int k = ops - warmup; k < ops; ++k) bwd(k);
  }
  return s;
}

Result<Schedule> zb_h1(int ranks, int microbatches) {
  VLPAR_RETURN_IF_ERROR(check_sizes("zb-h1", ranks, microbatches));
  Schedule s = shell(ranks, microbatches, loop_placement(ranks, 1));
  for (int r = 0; r < ranks; ++r) {
    auto& out = s.ranks[size_t(r)];
    const int warmup = std::min(ranks - 1 - r, microbatches);
    for (int j = 0; j < warmup; ++j) out.push_back(act(r, ActionKind::kF, j));
    int next_w = 0;
    for (int k = 0; k < microbatches; ++k) {  // F (while any left), I, and from op r on the oldest pending W
      if (warmup + k < microbatches) out.push_back(act(r, ActionKind::kF, warmup + k));
      out.push_back(act(r, ActionKind::kI, k));
      if (k >= r) out.push_back(act(r, ActionKind::kW, next_w++));
    }
    while (next_w < microbatches) out.push_back(act(r, ActionKind::kW, next_w++));
  }
  return s;
}

Result<Schedule> zb_v(int ranks, int microbatches) {
  VLPAR_RETURN_IF_ERROR(check_sizes("zb-v", ranks, microbatches));
  const int p = ranks, n = std::max(2 * p - 1, microbatches);
  Schedule s = shell(ranks, microbatches, v_placement(ranks));
  for (int r = 0; r < p; ++r) {
    const std::array<int, 2> stage = {r, 2 * p - 1 - r};
    std::array<int, 2> f = {0, 0}, i = {0, 0}, w = {0, 0};
    std::vector<Action> out;
    auto F = [&](int c) { out.push_back(act(stage[size_t(c)], ActionKind::kF, f[size_t(c)]++)); };
    auto I = [&](int c) { out.push_back(act(stage[size_t(c)], ActionKind::kI, i[size_t(c)]++)); };
    auto W = [&](int c) { out.push_back(act(stage[size_t(c)], ActionKind::kW, w[size_t(c)]++)); };
    for (int k = 0; k < 2 * (p - r) - 1; ++k) F(0);                      // 1. warm-up of chunk 0
    for (int k = 0; k < r; ++k) F(1), F(0);                              // 2.
    for (int k = 0; k < p - r; ++k) F(1), I(1), W(1);                    // 3.
    while (f[1] < f[0] || f[0] < n) {                                    // 4. steady state
      if (f[0] < n) F(0);
      I(0), W(0), F(1), I(1), W(1);
    }
    for (int k = 0; k < r; ++k) I(0), I(1);                              // 5. cooldown
    for (int k = 0; k < p - r; ++k) I(0), W(0);
    while (w[1] < i[1]) W(1);                                            // 6. the remaining weight steps
    while (w[0] < i[0]) W(0);
    for (const Action& a : out)  // micro-batches past m were placeholders of the closed form
      if (a.mb < microbatches) s.ranks[size_t(r)].push_back(a);
  }
  return s;
}

Result<Schedule> forward_only(int ranks, int microbatches, std::vector<int> stage_rank) {
  VLPAR_RETURN_IF_ERROR(check_sizes("forward_only", ranks, microbatches));
  if (stage_rank.empty()) stage_rank = loop_placement(ranks, 1);
  for (size_t st = 0; st < stage_rank.size(); ++st)
    VLPAR_CHECK(stage_rank[st] >= 0 && stage_rank[st] < ranks, "forward_only: stage {} is placed on rank {}, "
                "outside [0, {})", st, stage_rank[st], ranks);
  Schedule s = shell(ranks, microbatches, std::move(stage_rank));
  s.forward_only = true;
  for (int g = 0; g * ranks < microbatches; ++g)  // groups of `ranks` micro-batches, stage by stage
    for (int st = 0; st < s.num_stages(); ++st)
      for (int j = g * ranks; j < std::min(microbatches, (g + 1) * ranks); ++j)
        s.ranks[size_t(s.stage_rank[size_t(st)])].push_back(act(st, ActionKind::kF, j));
  return s;
}

Result<Schedule> generate(std::string_view name, int ranks, int microbatches, int chunks) {
  if (name == "gpipe") return gpipe(ranks, microbatches);
  if (name == "1f1b") return one_f_one_b(ranks, microbatches);
  if (name == "interleaved") return interleaved_1f1b(ranks, chunks, microbatches);
  if (name == "zb_h1") return zb_h1(ranks, microbatches);
  if (name == "zb_v") return zb_v(ranks, microbatches);
  if (name == "forward_only") return forward_only(ranks, microbatches);
  return VLPAR_STATUS(StatusCode::kInvalidArgument, "pipeline schedule '{}': expected gpipe, 1f1b, interleaved, "
                      "zb_h1, zb_v or forward_only", name);
}

namespace {

/// Whether compute action a on rank r can be placed by lower(): its input has arrived (spec A1.4 rule 2).
bool lower_ready(const Schedule& s, int r, const Action& a, const std::set<Key>& placed,
                 const std::set<Key>& received) {
  const int last = s.num_stages() - 1;
  if (a.kind == ActionKind::kF) {
    if (a.stage == 0) return true;
    return s.stage_rank[size_t(a.stage - 1)] == r ? placed.count({a.stage - 1, int(ActionKind::kF), a.mb}) > 0
                                                 : received.count({a.stage, int(ActionKind::kRecvF), a.mb}) > 0;
  }
  if (a.kind == ActionKind::kI || a.kind == ActionKind::kB) {
    if (a.stage == last) return true;
    if (s.stage_rank[size_t(a.stage + 1)] != r) return received.count({a.stage, int(ActionKind::kRecvB), a.mb}) > 0;
    return placed.count({a.stage + 1, int(ActionKind::kI), a.mb}) > 0 ||
           placed.count({a.stage + 1, int(ActionKind::kB), a.mb}) > 0;
  }
  return true;  // W
}

}  // namespace

Result<Schedule> lower(const Schedule& in) {
  VLPAR_RETURN_IF_ERROR(validate(in, /*lowered=*/false));
  Schedule out = shell(in.num_ranks(), in.num_microbatches, in.stage_rank);
  out.forward_only = in.forward_only;
  std::vector<size_t> head(size_t(in.num_ranks()), 0);
  std::set<Key> placed, received;
  size_t remaining = 0;
  for (const auto& list : in.ranks) remaining += list.size();
  while (remaining > 0) {
    bool progress = false;
    for (int r = 0; r < in.num_ranks(); ++r) {  // one action per rank and sweep, ranks ascending (PyTorch's order)
      const auto& list = in.ranks[size_t(r)];
      if (head[size_t(r)] == list.size()) continue;
      const Action a = list[head[size_t(r)]];
      if (!lower_ready(in, r, a, placed, received)) continue;
      out.ranks[size_t(r)].push_back(a);
      placed.insert(key(a));
      const bool fwd = a.kind == ActionKind::kF, bwd = a.kind == ActionKind::kI || a.kind == ActionKind::kB;
      const int peer_stage = fwd ? a.stage + 1 : a.stage - 1;
      if ((fwd || bwd) && peer_stage >= 0 && peer_stage < in.num_stages() &&
          in.stage_rank[size_t(peer_stage)] != r) {
        out.ranks[size_t(r)].push_back(act(a.stage, fwd ? ActionKind::kSendF : ActionKind::kSendB, a.mb));
        const Action recv = act(peer_stage, fwd ? ActionKind::kRecvF : ActionKind::kRecvB, a.mb);
        out.ranks[size_t(in.stage_rank[size_t(peer_stage)])].push_back(recv);
        received.insert(key(recv));
      }
      ++head[size_t(r)];
      --remaining;
      progress = true;
    }
    if (!progress) {
      std::string heads;
      for (int r = 0; r < in.num_ranks(); ++r)
        heads += head[size_t(r)] < in.ranks[size_t(r)].size()
                     ? fmt::format(" r{}: {}", r, to_string(in.ranks[size_t(r)][head[size_t(r)]]))
                     : fmt::format(" r{}: done", r);
      return VLPAR_STATUS(StatusCode::kInvalidArgument, "pipeline lower: malformed schedule, no rank can place its "
                          "next action (heads:{})", heads);
    }
  }
  return out;
}

namespace {

/// Invariant 1: sizes, ranges and every action on the rank its stage is placed on.
Status validate_ranges(const Schedule& s) {
  VLPAR_CHECK(s.num_ranks() >= 1 && s.num_stages() >= 1 && s.num_microbatches >= 1,
              "pipeline schedule: needs at least one rank, stage and micro-batch, got {} rank lists, {} stage "
              "placements and {} micro-batches", s.num_ranks(), s.num_stages(), s.num_microbatches);
  for (int st = 0; st < s.num_stages(); ++st)
    VLPAR_CHECK(s.stage_rank[size_t(st)] >= 0 && s.stage_rank[size_t(st)] < s.num_ranks(),
                "pipeline schedule: stage {} is placed on rank {}, outside [0, {})", st, s.stage_rank[size_t(st)],
                s.num_ranks());
  for (int r = 0; r < s.num_ranks(); ++r)
    for (size_t i = 0; i < s.ranks[size_t(r)].size(); ++i) {
      const Action& a = s.ranks[size_t(r)][i];
      VLPAR_CHECK(a.stage >= 0 && a.stage < s.num_stages() && a.mb >= 0 && a.mb < s.num_microbatches,
                  "pipeline schedule: r{} position {}: {} is outside {} stages and {} micro-batches", r, i,
                  to_string(a), s.num_stages(), s.num_microbatches);
      VLPAR_CHECK(s.stage_rank[size_t(a.stage)] == r, "pipeline schedule: r{} position {}: {} belongs to stage {} "
                  "on rank {}", r, i, to_string(a), a.stage, s.stage_rank[size_t(a.stage)]);
    }
  return Status::Ok();
}

bool is_backward(ActionKind k) {
  return k == ActionKind::kB || k == ActionKind::kI || k == ActionKind::kW || k == ActionKind::kSendB ||
         k == ActionKind::kRecvB;
}

/// Invariants 2 and 3: per (stage, mb) one F and either one B or one I and one W, F before I/B before W; in a
/// forward-only schedule one F and nothing of the backward.
Status validate_compute(const Schedule& s, bool lowered) {
  std::map<Key, size_t> pos;  // (stage, kind, mb) → position on its rank
  for (int r = 0; r < s.num_ranks(); ++r)
    for (size_t i = 0; i < s.ranks[size_t(r)].size(); ++i) {
      const Action& a = s.ranks[size_t(r)][i];
      VLPAR_CHECK(lowered || is_compute(a.kind), "pipeline schedule: r{} position {}: {} in a compute-only schedule",
                  r, i, to_string(a));
      VLPAR_CHECK(!s.forward_only || !is_backward(a.kind), "pipeline schedule: r{} position {}: {} in a "
                  "forward-only schedule (evaluation runs no backward)", r, i, to_string(a));
      VLPAR_CHECK(pos.emplace(key(a), i).second, "pipeline schedule: r{} position {}: {} appears twice", r, i,
                  to_string(a));
    }
  auto at = [&](int st, ActionKind k, int mb) {
    const auto it = pos.find({st, int(k), mb});
    return it == pos.end() ? -1 : int64_t(it->second);
  };
  for (int st = 0; st < s.num_stages(); ++st)
    for (int j = 0; j < s.num_microbatches; ++j) {
      const int64_t f = at(st, ActionKind::kF, j), b = at(st, ActionKind::kB, j);
      const int64_t in = at(st, ActionKind::kI, j), w = at(st, ActionKind::kW, j);
      const int r = s.stage_rank[size_t(st)];
      VLPAR_CHECK(f >= 0, "pipeline schedule: r{}: stage {} micro-batch {} has no F", r, st, j);
      if (s.forward_only) continue;
      VLPAR_CHECK((b >= 0) != (in >= 0 || w >= 0) && (in >= 0) == (w >= 0), "pipeline schedule: r{}: stage {} "
                  "micro-batch {} needs one B or one I and one W", r, st, j);
      VLPAR_CHECK(f < std::max(b, in), "pipeline schedule: r{} position {}: {}{}{} runs before its F", r,
                  std::max(b, in), st, b >= 0 ? "B" : "I", j);
      VLPAR_CHECK(w < 0 || in < w, "pipeline schedule: r{} position {}: {}W{} runs before its I", r, w, st, j);
    }
  return Status::Ok();
}

/// Invariants 4 and 5 of a lowered schedule: each cross-rank boundary has its SEND after the producer and one RECV
/// before the consumer; same-rank boundaries none; sends and receives of every rank pair in the same order.
Status validate_comm(const Schedule& s) {
  std::map<Key, std::pair<int, size_t>> where;  // every action → (rank, position)
  for (int r = 0; r < s.num_ranks(); ++r)
    for (size_t i = 0; i < s.ranks[size_t(r)].size(); ++i) where[key(s.ranks[size_t(r)][i])] = {r, i};
  auto find = [&](int st, ActionKind k, int mb) {
    const auto it = where.find({st, int(k), mb});
    return it == where.end() ? std::pair<int, int64_t>{-1, -1} : std::pair<int, int64_t>{it->second.first,
                                                                                         int64_t(it->second.second)};
  };
  for (int st = 0; st + 1 < s.num_stages(); ++st)
    for (int j = 0; j < s.num_microbatches; ++j) {
      const bool cross = s.stage_rank[size_t(st)] != s.stage_rank[size_t(st + 1)];
      const auto send_f = find(st, ActionKind::kSendF, j), recv_f = find(st + 1, ActionKind::kRecvF, j);
      const auto send_b = find(st + 1, ActionKind::kSendB, j), recv_b = find(st, ActionKind::kRecvB, j);
      if (!cross) {
        VLPAR_CHECK(send_f.first < 0 && recv_f.first < 0 && send_b.first < 0 && recv_b.first < 0,
                    "pipeline schedule: stages {} and {} share rank {} but exchange micro-batch {} by message", st,
                    st + 1, s.stage_rank[size_t(st)], j);
        continue;
      }
      const auto f = find(st, ActionKind::kF, j), f_next = find(st + 1, ActionKind::kF, j);
      VLPAR_CHECK(send_f.first >= 0 && send_f.second > f.second && recv_f.first >= 0 &&
                      recv_f.second < f_next.second,
                  "pipeline schedule: micro-batch {} from stage {} to {}: needs {}SEND_F{} after {}F{} and one "
                  "{}RECV_F{} before {}F{}", j, st, st + 1, st, j, st, j, st + 1, j, st + 1, j);
      if (s.forward_only) continue;
      auto bwd = find(st + 1, ActionKind::kB, j);
      if (bwd.first < 0) bwd = find(st + 1, ActionKind::kI, j);
      auto bwd_prev = find(st, ActionKind::kB, j);
      if (bwd_prev.first < 0) bwd_prev = find(st, ActionKind::kI, j);
      VLPAR_CHECK(send_b.first >= 0 && send_b.second > bwd.second && recv_b.first >= 0 &&
                      recv_b.second < bwd_prev.second,
                  "pipeline schedule: the gradient of micro-batch {} from stage {} to {}: needs {}SEND_B{} after the "
                  "backward of stage {} and one {}RECV_B{} before that of stage {}", j, st + 1, st, st + 1, j,
                  st + 1, st, j, st);
    }
  // Invariant 5: per ordered rank pair, sends and receives in the same order.
  std::map<std::pair<int, int>, std::vector<Key>> sends, recvs;
  for (int r = 0; r < s.num_ranks(); ++r)
    for (const Action& a : s.ranks[size_t(r)]) {
      if (a.kind == ActionKind::kSendF) sends[{r, s.stage_rank[size_t(a.stage + 1)]}].push_back({a.stage + 1, 0, a.mb});
      if (a.kind == ActionKind::kSendB) sends[{r, s.stage_rank[size_t(a.stage - 1)]}].push_back({a.stage - 1, 1, a.mb});
      if (a.kind == ActionKind::kRecvF) recvs[{s.stage_rank[size_t(a.stage - 1)], r}].push_back({a.stage, 0, a.mb});
      if (a.kind == ActionKind::kRecvB) recvs[{s.stage_rank[size_t(a.stage + 1)], r}].push_back({a.stage, 1, a.mb});
    }
  for (const auto& [pair, list] : sends)
    VLPAR_CHECK(recvs[pair] == list, "pipeline schedule: rank {} sends to rank {} in an order its receives do not "
                "follow (untagged blocking p2p would deadlock or mismatch)", pair.first, pair.second);
  return Status::Ok();
}

}  // namespace

Status validate(const Schedule& s, bool lowered) {
  VLPAR_RETURN_IF_ERROR(validate_ranges(s));
  VLPAR_RETURN_IF_ERROR(validate_compute(s, lowered));
  return lowered ? validate_comm(s) : Status::Ok();
}

namespace {

/// The actions `a` waits for besides its rank's previous action (spec A1.6); each inner list is satisfied by any
/// one of its actions. Communication is free and posted (the runtime waits for a receive only at the compute that
/// consumes it), so a consumer's wait is its producer's compute.
std::vector<std::vector<Key>> sim_deps(const Schedule& s, const Action& a) {
  const int st = a.stage, j = a.mb;
  switch (a.kind) {
    case ActionKind::kF:
      if (st == 0) return {};
      return {{{st - 1, int(ActionKind::kF), j}}};
    case ActionKind::kI:
    case ActionKind::kB: {
      std::vector<std::vector<Key>> d = {{{st, int(ActionKind::kF), j}}};
      if (st + 1 < s.num_stages()) d.push_back({{st + 1, int(ActionKind::kI), j}, {st + 1, int(ActionKind::kB), j}});
      return d;
    }
    case ActionKind::kW: return {{{st, int(ActionKind::kI), j}}};
    default: return {};  // SEND/RECV: free and non-blocking (a receive is posted; its consumer waits for the data)
  }
}

double sim_cost(const SimCosts& c, const Action& a) {
  if (c.action && is_compute(a.kind)) return c.action(a);
  switch (a.kind) {
    case ActionKind::kF: return c.f;
    case ActionKind::kB: return c.b;
    case ActionKind::kI: return c.i;
    case ActionKind::kW: return c.w;
    default: return 0;  // communication is free in this model
  }
}

}  // namespace

Result<SimResult> simulate(const Schedule& s, const SimCosts& costs) {
  VLPAR_RETURN_IF_ERROR(validate_ranges(s));
  SimResult res;
  res.busy.assign(size_t(s.num_ranks()), 0.0);
  res.peak_activations.assign(size_t(s.num_ranks()), 0);
  res.peak_wgrad.assign(size_t(s.num_ranks()), 0);
  res.start.resize(size_t(s.num_ranks()));
  res.end.resize(size_t(s.num_ranks()));
  for (int r = 0; r < s.num_ranks(); ++r) {
    res.start[size_t(r)].assign(s.ranks[size_t(r)].size(), 0.0);
    res.end[size_t(r)].assign(s.ranks[size_t(r)].size(), 0.0);
  }
  std::vector<size_t> head(size_t(s.num_ranks()), 0);
  std::vector<double> free_at(size_t(s.num_ranks()), 0.0);
  std::vector<int> act_stash(size_t(s.num_ranks()), 0), w_stash(size_t(s.num_ranks()), 0);
  std::map<Key, double> finish;
  for (;;) {
    bool progress = false, done = true;
    for (int r = 0; r < s.num_ranks(); ++r) {
      const auto& list = s.ranks[size_t(r)];
      for (; head[size_t(r)] < list.size(); ++head[size_t(r)]) {
        const Action& a = list[head[size_t(r)]];
        double start = free_at[size_t(r)];
        bool ready = true;
        for (const auto& any_of : sim_deps(s, a)) {
          double t = -1;
          for (const Key& k : any_of)
            if (const auto it = finish.find(k); it != finish.end())
              t = it->second + (s.stage_rank[size_t(std::get<0>(k))] != r ? costs.message : 0.0);
          ready = ready && t >= 0;
          start = std::max(start, t);
        }
        if (!ready) break;
        const double cost = sim_cost(costs, a);
        res.start[size_t(r)][head[size_t(r)]] = start;
        res.end[size_t(r)][head[size_t(r)]] = start + cost;
        finish[key(a)] = free_at[size_t(r)] = start + cost;
        res.busy[size_t(r)] += cost;
        const bool f = a.kind == ActionKind::kF, b = a.kind == ActionKind::kB;
        const int push = f && !s.forward_only ? 1 : 0;  // forward-only: nothing outlives its F
        act_stash[size_t(r)] += push - (b || a.kind == ActionKind::kI ? 1 : 0);
        w_stash[size_t(r)] += push - (b || a.kind == ActionKind::kW ? 1 : 0);
        res.peak_activations[size_t(r)] = std::max(res.peak_activations[size_t(r)], act_stash[size_t(r)]);
        res.peak_wgrad[size_t(r)] = std::max(res.peak_wgrad[size_t(r)], w_stash[size_t(r)]);
        progress = true;
      }
      done = done && head[size_t(r)] == list.size();
    }
    if (done) break;
    if (!progress) {
      std::string heads;
      for (int r = 0; r < s.num_ranks(); ++r) {
        if (head[size_t(r)] == s.ranks[size_t(r)].size()) continue;
        const Action& a = s.ranks[size_t(r)][head[size_t(r)]];
        std::string waits;
        for (const auto& any_of : sim_deps(s, a)) {
          bool met = false;
          for (const Key& k : any_of) met = met || finish.count(k) > 0;
          if (!met)
            waits += fmt::format(" {}", to_string(act(std::get<0>(any_of[0]), ActionKind(std::get<1>(any_of[0])),
                                                      std::get<2>(any_of[0]))));
        }
        heads += fmt::format(" r{}: {} waits for{};", r, to_string(a), waits);
      }
      return VLPAR_STATUS(StatusCode::kInvalidArgument, "pipeline schedule deadlocks:{}", heads);
    }
  }
  for (const double t : free_at) res.makespan = std::max(res.makespan, t);
  double busy = 0;
  for (const double b : res.busy) busy += b;
  res.bubble = res.makespan > 0 ? 1.0 - busy / (double(s.num_ranks()) * res.makespan) : 0.0;
  return res;
}

std::string timeline(const Schedule& s, const SimResult& r, double unit) {
  const bool chunks = s.num_stages() > s.num_ranks();
  const auto cells = size_t(std::max<int64_t>(0, std::llround(r.makespan / unit)));
  std::vector<std::vector<std::string>> grid(size_t(s.num_ranks()), std::vector<std::string>(cells, "."));
  size_t width = 1;
  for (size_t rk = 0; rk < s.ranks.size() && rk < r.start.size(); ++rk)
    for (size_t i = 0; i < s.ranks[rk].size(); ++i) {
      const Action& a = s.ranks[rk][i];
      if (!is_compute(a.kind)) continue;
      std::string label = to_string(a);
      if (!chunks) label.erase(0, fmt::format("{}", a.stage).size());
      width = std::max(width, label.size());
      const auto c0 = size_t(std::llround(r.start[rk][i] / unit)), c1 = size_t(std::llround(r.end[rk][i] / unit));
      for (size_t c = c0; c < c1 && c < cells; ++c) grid[rk][c] = label;
    }
  std::string out;
  for (size_t rk = 0; rk < grid.size(); ++rk) {
    std::string row = fmt::format("r{}:", rk);
    for (const std::string& cell : grid[rk]) row += fmt::format(" {:<{}}", cell, width);
    while (!row.empty() && row.back() == ' ') row.pop_back();
    out += row + "\n";
  }
  return out;
}

}  // namespace vlpar::pipeline
