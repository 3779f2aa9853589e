#pragma once
// The pipeline engine: runs one rank's list of a lowered schedule (parallel/pipeline_schedule.hpp) over the
// stages it holds (any type satisfying pipeline::Stage, parallel/pipeline_stage.hpp), with point-to-point messages
// over the pipeline group's communicator (MPI on CPU; NCCL on GPU once the stages run there).
//
// One step = every action of this rank's list, in order (spec A1.4 "Runtime"):
//   F(s,j)       takes stage s's inputs (the output of F(s−1,j) when s−1 is on this rank, else the receive posted
//                by RECV_F(s,j), waited here), allocates its outputs from ctx.allocator, runs forward and keeps the
//                stash and the inputs until the stage's last backward of j;
//   B / I(s,j)   takes the output gradients (from B/I(s+1,j) on this rank, else the posted RECV_B(s,j)), allocates
//                the input gradients and runs backward / backward_input; B frees the stash and the inputs, I keeps
//                them for W; the output gradients are freed;
//   W(s,j)       backward_weight; frees the stash and the inputs;
//   (forward-only schedules, Schedule::forward_only: evaluation and generation) F(s,j) frees its stash and its
//                inputs as soon as forward returns, so a rank holds no stash between actions; the stages' parameter
//                gradients are left untouched;
//   SEND_*       posts non-blocking sends of the buffers just produced; each send is waited (and its buffers
//                freed) before the second compute action after it, so a send overlaps one compute; before each
//                compute the engine tests every pending op and, for up to EngineOptions::send_progress, the sends
//                posted since the previous compute (MPI moves a large message only inside MPI calls);
//   RECV_*       allocates the receive buffers from the receiver's port and posts non-blocking receives.
// Posting earlier and waiting later than the lowering's blocking order (which it proves deadlock-free) cannot
// deadlock. Messages are tagged by (direction, receiving stage, micro-batch, tensor) modulo the MPI tag range; the
// validated order of sends and receives per rank pair makes the modulo harmless. At the end of a step every send
// is waited and every stash, boundary buffer and receive must be gone (else a named kInternal error).
//
// Errors name this rank, the action and its position; a receive that times out (the communicator's watchdog, e.g.
// a dead peer) names the pending receive, the peer rank and the peer's stage. A failed step leaves the engine
// usable for a new step only if the group is (see comm/communicator.hpp).
//
// Memory (the memory test's bound): at any time a rank holds the stashes and inputs of its in-flight (stage, mb)
// pairs (the simulator's peak_activations / peak_wgrad), at most one produced-but-unsent output or input gradient
// per compute action in flight, and the posted receives.
// Test: tests/unit/test_pipeline_engine.cpp (one rank, chunks on one rank), tests/mpi/test_pipeline_ranks.cpp.
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <span>
#include <utility>
#include <vector>

#include "vlpar/comm/communicator.hpp"
#include "vlpar/parallel/pipeline_schedule.hpp"
#include "vlpar/parallel/pipeline_stage.hpp"

namespace vlpar::pipeline {

/// One executed action of the last step; seconds since the step began. `wait` is the part of [start, end) spent
/// waiting for receives and sends.
struct ActionTiming {
  Action action;
  double start = 0, end = 0, wait = 0;
};

struct EngineOptions {
  /// How long a compute keeps testing the sends posted just before it, so that a peer already waiting gets the
  /// data before this rank computes (MPI moves a large message only while the sender is inside MPI; bench_pipeline
  /// measures the effect). Negative: 50 µs on the MPI backend, 0 on the others (NCCL progresses on the device).
  std::chrono::microseconds send_progress{-1};
};

namespace detail {
/// Tag of boundary tensor `tensor` of the message to `recv_stage` for `mb`; backward = gradient direction.
int message_tag(bool backward, int recv_stage, int mb, int tensor, int num_stages);
/// The schedule is lowered and valid, `pp` has its rank count, the local stages are exactly this rank's.
Status check_engine_setup(const Schedule& s, const comm::Communicator& pp, std::span<const int> local_stages,
                          bool split_backward);
/// Buffers handed to a stage match its port: count, shapes, dtypes. `what` names them ("inputs", ...).
Status check_buffers(const char* what, const Action& a, std::span<const Tensor> got, std::span<const TensorSpec> want);
/// `s` with "pipeline rank r, action a (#pos of n): " in front.
Status at_action(const Status& s, int rank, const Action& a, size_t pos, size_t n);
std::vector<TensorView> views(std::span<const Tensor> ts);
}  // namespace detail

template <Stage S>
class Engine {
 public:
  /// `stages`: this rank's stages as (stage index, object); the objects must outlive the engine.
  static Result<Engine> create(Schedule lowered, std::vector<std::pair<int, S*>> stages, comm::Communicator& pp,
                               EngineOptions options = {}) {
    std::vector<int> ids;
    for (const auto& [id, st] : stages) {
      VLPAR_CHECK(st != nullptr, "pipeline engine: stage {} is null", id);
      ids.push_back(id);
    }
    VLPAR_RETURN_IF_ERROR(detail::check_engine_setup(lowered, pp, ids, SplitStage<S>));
    Engine e;
    e.local_.assign(size_t(lowered.num_stages()), nullptr);
    for (const auto& [id, st] : stages) e.local_[size_t(id)] = st;
    e.sched_ = std::move(lowered);
    e.pp_ = &pp;
    e.opt_ = options;
    if (e.opt_.send_progress.count() < 0)
      e.opt_.send_progress = std::chrono::microseconds(pp.backend() == comm::Backend::kMPI ? 50 : 0);
    return e;
  }

  const Schedule& schedule() const { return sched_; }
  /// The actions of the last step with their times (for traces and the bubble benchmark).
  const std::vector<ActionTiming>& timings() const { return timings_; }

  /// @brief Runs this rank's list once: one optimizer step's forward and backward over every micro-batch, or,
  /// for a forward-only schedule, their forward (an evaluation).
  Status step(const Context& ctx) {
    VLPAR_CHECK(ctx.allocator != nullptr, "pipeline engine: ctx.allocator must be set");
    st_ = State{};
    timings_.clear();
    t0_ = Clock::now();
    const std::vector<Action>& list = sched_.ranks[size_t(pp_->rank())];
    for (size_t pos = 0; pos < list.size(); ++pos) {
      const Action& a = list[pos];
      ActionTiming t{a, seconds_(), 0, 0};
      waited_ = 0;
      Status s = run_(ctx, a);
      if (!s.ok()) return detail::at_action(s, pp_->rank(), a, pos, list.size());
      t.end = seconds_();
      t.wait = waited_;
      timings_.push_back(t);
    }
    VLPAR_RETURN_IF_ERROR(drain_sends_(st_.computes + 1));
    return check_drained_();
  }

 private:
  using Clock = std::chrono::steady_clock;
  using Key = std::pair<int, int>;  // (stage, micro-batch)
  struct InFlight {
    Action action;
    std::vector<Tensor> bufs;
    std::vector<comm::WorkHandle> work;
    int64_t after = 0;  // compute actions run before it was posted
  };
  struct State {
    std::map<Key, typename S::Stash> stash;
    std::map<Key, std::vector<Tensor>> in;    // a stage's inputs, until its last backward of the micro-batch
    std::map<Key, std::vector<Tensor>> out;   // F outputs, until SEND_F or the same-rank next stage's F
    std::map<Key, std::vector<Tensor>> din;   // B/I input gradients, until SEND_B or the previous stage's B/I
    std::map<Key, InFlight> recv_f, recv_b;   // posted receives, by receiving stage
    std::deque<InFlight> sends;
    int64_t computes = 0;
  };

  Engine() = default;
  double seconds_() const { return std::chrono::duration<double>(Clock::now() - t0_).count(); }
  int num_stages_() const { return sched_.num_stages(); }
  S& stage_(int s) { return *local_[size_t(s)]; }
  bool is_local_(int s) const { return s >= 0 && s < num_stages_() && local_[size_t(s)] != nullptr; }

  Status run_(const Context& ctx, const Action& a) {
    switch (a.kind) {
      case ActionKind::kF: return compute_([&] { return forward_(ctx, a); });
      case ActionKind::kB:
      case ActionKind::kI: return compute_([&] { return backward_(ctx, a); });
      case ActionKind::kW: return compute_([&] { return weight_(ctx, a); });
      case ActionKind::kSendF: return send_(a, st_.out, a.stage + 1, false);
      case ActionKind::kSendB: return send_(a, st_.din, a.stage - 1, true);
      case ActionKind::kRecvF: return recv_(ctx, a, false);
      case ActionKind::kRecvB: return recv_(ctx, a, true);
    }
    return VLPAR_STATUS(StatusCode::kInternal, "pipeline engine: unknown action kind");
  }

  template <class Fn>
  Status compute_(Fn&& fn) {
    VLPAR_RETURN_IF_ERROR(drain_sends_(st_.computes));
    progress_();
    VLPAR_RETURN_IF_ERROR(fn());
    ++st_.computes;
    return Status::Ok();
  }

  Status forward_(const Context& ctx, const Action& a) {
    S& stage = stage_(a.stage);
    const Key k{a.stage, a.mb};
    std::vector<Tensor> in;
    if (a.stage > 0) {
      VLPAR_ASSIGN_OR_RETURN(in, take_(a, st_.out, a.stage - 1, st_.recv_f, false));
    }
    VLPAR_RETURN_IF_ERROR(detail::check_buffers("inputs", a, in, stage.input_port(a.mb).act));
    std::vector<Tensor> out;
    if (a.stage + 1 < num_stages_()) {
      VLPAR_ASSIGN_OR_RETURN(out, alloc_(ctx, stage.output_port(a.mb).act));
    }
    typename S::Stash& stash = st_.stash[k];
    const std::vector<TensorView> iv = detail::views(in), ov = detail::views(out);
    VLPAR_RETURN_IF_ERROR(stage.forward(ctx, ov, iv, a.mb, stash));
    if (sched_.forward_only) {
      st_.stash.erase(k);  // no backward will need it (before the inputs: the stash may view them)
    } else {
      st_.in[k] = std::move(in);
    }
    if (!out.empty()) st_.out[k] = std::move(out);
    return Status::Ok();
  }

  Status backward_(const Context& ctx, const Action& a) {
    S& stage = stage_(a.stage);
    const Key k{a.stage, a.mb};
    auto stash = st_.stash.find(k);
    VLPAR_CHECK_CODE(stash != st_.stash.end(), StatusCode::kInternal, "no stash: F{} did not run here", a.mb);
    std::vector<Tensor> dout;
    if (a.stage + 1 < num_stages_()) {
      VLPAR_ASSIGN_OR_RETURN(dout, take_(a, st_.din, a.stage + 1, st_.recv_b, true));
    }
    VLPAR_RETURN_IF_ERROR(detail::check_buffers("output gradients", a, dout, stage.output_port(a.mb).grad));
    std::vector<Tensor> din;
    if (a.stage > 0) {
      VLPAR_ASSIGN_OR_RETURN(din, alloc_(ctx, stage.input_port(a.mb).grad));
    }
    const std::vector<TensorView> dv = detail::views(din), gv = detail::views(dout);
    if (a.kind == ActionKind::kB) {
      VLPAR_RETURN_IF_ERROR(stage.backward(ctx, dv, gv, a.mb, stash->second));
      st_.stash.erase(stash);
      st_.in.erase(k);
    } else if constexpr (SplitStage<S>) {
      VLPAR_RETURN_IF_ERROR(stage.backward_input(ctx, dv, gv, a.mb, stash->second));
    }
    if (!din.empty()) st_.din[k] = std::move(din);
    return Status::Ok();
  }

  Status weight_(const Context& ctx, const Action& a) {
    if constexpr (SplitStage<S>) {
      const Key k{a.stage, a.mb};
      auto stash = st_.stash.find(k);
      VLPAR_CHECK_CODE(stash != st_.stash.end(), StatusCode::kInternal, "no stash: F{} did not run here", a.mb);
      VLPAR_RETURN_IF_ERROR(stage_(a.stage).backward_weight(ctx, a.mb, stash->second));
      st_.stash.erase(stash);
      st_.in.erase(k);
      return Status::Ok();
    } else {
      (void)ctx;
      return VLPAR_STATUS(StatusCode::kInternal, "W on a stage without backward_weight (create() checks this)");
    }
  }

  /// A stage's incoming buffers: produced on this rank by stage `src` (moved out of `produced`), or the posted
  /// receive for this action's (stage, mb), waited here.
  Result<std::vector<Tensor>> take_(const Action& a, std::map<Key, std::vector<Tensor>>& produced, int src,
                                    std::map<Key, InFlight>& posted, bool backward) {
    if (is_local_(src)) {
      auto it = produced.find({src, a.mb});
      VLPAR_CHECK_CODE(it != produced.end(), StatusCode::kInternal, "stage {} on this rank has not produced the {} "
                       "of micro-batch {} yet", src, backward ? "gradients" : "activations", a.mb);
      std::vector<Tensor> bufs = std::move(it->second);
      produced.erase(it);
      return bufs;
    }
    auto it = posted.find({a.stage, a.mb});
    VLPAR_CHECK_CODE(it != posted.end(), StatusCode::kInternal, "no {} posted for stage {} micro-batch {}",
                     backward ? "RECV_B" : "RECV_F", a.stage, a.mb);
    VLPAR_RETURN_IF_ERROR(wait_(it->second));
    std::vector<Tensor> bufs = std::move(it->second.bufs);
    posted.erase(it);
    return bufs;
  }
  Result<std::vector<Tensor>> alloc_(const Context& ctx, std::span<const TensorSpec> specs) {
    std::vector<Tensor> bufs;
    bufs.reserve(specs.size());
    for (const TensorSpec& sp : specs) {
      VLPAR_ASSIGN_OR_RETURN(Tensor t, Tensor::empty(*ctx.allocator, sp.shape, sp.dtype, ctx.device));
      bufs.push_back(std::move(t));
    }
    return bufs;
  }

  /// SEND_F(s,j) / SEND_B(s,j): non-blocking sends of what the action's compute produced to the stage `dst`.
  Status send_(const Action& a, std::map<Key, std::vector<Tensor>>& produced, int dst, bool backward) {
    auto it = produced.find({a.stage, a.mb});
    VLPAR_CHECK_CODE(it != produced.end(), StatusCode::kInternal, "nothing produced to send");
    InFlight f{a, std::move(it->second), {}, st_.computes};
    produced.erase(it);
    const int peer = sched_.stage_rank[size_t(dst)];
    for (size_t i = 0; i < f.bufs.size(); ++i) {
      const int tag = detail::message_tag(backward, dst, a.mb, int(i), num_stages_());
      VLPAR_ASSIGN_OR_RETURN(comm::WorkHandle w, pp_->isend(f.bufs[i].view(), peer, tag));
      f.work.push_back(std::move(w));
    }
    st_.sends.push_back(std::move(f));
    return Status::Ok();
  }

  /// RECV_F(s,j) / RECV_B(s,j): buffers from stage s's port, non-blocking receives from the neighbour's rank.
  Status recv_(const Context& ctx, const Action& a, bool backward) {
    S& stage = stage_(a.stage);
    const int src = backward ? a.stage + 1 : a.stage - 1;
    const std::vector<TensorSpec> specs = backward ? stage.output_port(a.mb).grad : stage.input_port(a.mb).act;
    InFlight f{a, {}, {}, st_.computes};
    VLPAR_ASSIGN_OR_RETURN(f.bufs, alloc_(ctx, specs));
    const int peer = sched_.stage_rank[size_t(src)];
    for (size_t i = 0; i < f.bufs.size(); ++i) {
      const int tag = detail::message_tag(backward, a.stage, a.mb, int(i), num_stages_());
      VLPAR_ASSIGN_OR_RETURN(comm::WorkHandle w, pp_->irecv(f.bufs[i].view(), peer, tag));
      f.work.push_back(std::move(w));
    }
    (backward ? st_.recv_b : st_.recv_f)[{a.stage, a.mb}] = std::move(f);
    return Status::Ok();
  }

  Status wait_(InFlight& f) {
    const double t = seconds_();
    for (comm::WorkHandle& w : f.work) {
      Status s = w->wait();
      if (!s.ok()) {
        const bool is_recv = f.action.kind == ActionKind::kRecvF || f.action.kind == ActionKind::kRecvB;
        const int peer_stage = f.action.kind == ActionKind::kRecvF || f.action.kind == ActionKind::kSendB
                                   ? f.action.stage - 1 : f.action.stage + 1;
        waited_ += seconds_() - t;
        return VLPAR_STATUS(s.code(), "waiting for {} {} rank {} (stage {}): {}", to_string(f.action),
                            is_recv ? "from" : "to", sched_.stage_rank[size_t(peer_stage)], peer_stage, s.message());
      }
    }
    f.work.clear();
    waited_ += seconds_() - t;
    return Status::Ok();
  }

  /// Before a compute: test() every pending send and posted receive (on MPI that is what moves a large message
  /// whose peer is ready: MPI progresses only inside MPI calls) and, for up to options.send_progress, keep testing
  /// the sends posted since the previous compute until they complete, so a peer that already waits gets its data
  /// now instead of after this compute. Deadlock-free: it never waits longer than the window.
  void progress_() {
    const double t = seconds_();
    for (auto* posted : {&st_.recv_f, &st_.recv_b})
      for (auto& [key, f] : *posted)
        for (comm::WorkHandle& w : f.work) (void)w->test();
    const auto until = Clock::now() + opt_.send_progress;
    for (bool pending = true; pending;) {
      pending = false;
      for (InFlight& f : st_.sends)
        for (comm::WorkHandle& w : f.work) pending = !w->test() && f.after == st_.computes ? true : pending;
      if (Clock::now() >= until) break;
    }
    waited_ += seconds_() - t;
  }

  /// Waits (and frees) every send posted before compute action number `before`.
  Status drain_sends_(int64_t before) {
    while (!st_.sends.empty() && st_.sends.front().after < before) {
      VLPAR_RETURN_IF_ERROR(wait_(st_.sends.front()));
      st_.sends.pop_front();
    }
    return Status::Ok();
  }

  Status check_drained_() const {
    auto first = [](const auto& m) { return fmt::format("(stage {}, mb {})", m.begin()->first.first,
                                                        m.begin()->first.second); };
    const std::pair<const char*, const std::map<Key, std::vector<Tensor>>*> bufs[] = {
        {"stage inputs", &st_.in}, {"unsent outputs", &st_.out}, {"unsent input gradients", &st_.din}};
    VLPAR_CHECK_CODE(st_.stash.empty(), StatusCode::kInternal, "pipeline rank {}: {} stashes left after the step, "
                     "first {}", pp_->rank(), st_.stash.size(), first(st_.stash));
    for (const auto& [what, m] : bufs)
      VLPAR_CHECK_CODE(m->empty(), StatusCode::kInternal, "pipeline rank {}: {} {} left after the step, first {}",
                       pp_->rank(), m->size(), what, first(*m));
    VLPAR_CHECK_CODE(st_.recv_f.empty() && st_.recv_b.empty(), StatusCode::kInternal,
                     "pipeline rank {}: {} receives never consumed", pp_->rank(), st_.recv_f.size() + st_.recv_b.size());
    return Status::Ok();
  }

  Schedule sched_;
  std::vector<S*> local_;  // [stages]; null where the stage lives on another rank
  comm::Communicator* pp_ = nullptr;
  EngineOptions opt_;
  State st_;
  std::vector<ActionTiming> timings_;
  Clock::time_point t0_;
  double waited_ = 0;  // wait time of the running action
};

}  // namespace vlpar::pipeline
