#pragma once
// A non-Qwen toy model for the pipeline engine's tests and benchmark: L residual layers
//   y = x + gelu_tanh(x·Wᵀ + b)          x, y [N_j, H] f32, W [H, H], b [H]
// with a side value carried across stages like the MoE aux-loss statistics of spec A5.4: aux = (Σ over layers of
// Σ x², Σ rows) travels forward with the hidden states, and the loss of micro-batch j is
//   loss_j = ½ Σ (y − target)² / R + c · aux₀ / R        (R = rows of the whole step)
// so the backward payload (dhidden [N_j, H], daux₀ [1]) differs from the forward one ([N_j, H], [2]). Micro-batches
// have different row counts. A ToyStage holds layers [first, last) of one ToyModel; stage 0 reads the micro-batch's
// input, the last stage computes the loss. Every op goes through vlpar's kernels (linear, gelu, add_) on the
// context's allocator, so stash bytes are real allocator bytes.
#include <cmath>
#include <algorithm>
#include <climits>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <tuple>
#include <span>
#include <vector>

#include "vlpar/core/allocator.hpp"
#include "vlpar/core/philox.hpp"
#include "vlpar/core/tensor.hpp"
#include "vlpar/kernels/activation.hpp"
#include "vlpar/kernels/elementwise.hpp"
#include "vlpar/kernels/gemm.hpp"
#include "vlpar/parallel/pipeline_engine.hpp"
#include "vlpar/parallel/pipeline_schedule.hpp"
#include "vlpar/parallel/pipeline_stage.hpp"

namespace vlpar::test {

/// Parameters, gradients and one step's micro-batches; every rank builds the same one from the seed.
struct ToyModel {
  int64_t hidden = 0;
  float aux_coef = 0.05f;
  int64_t total_rows = 0;
  std::vector<Tensor> w, b, dw, db;  // [L] each
  std::vector<Tensor> x, target;     // [m] micro-batch inputs and targets, [N_j, H]

  int layers() const { return int(w.size()); }
  int microbatches() const { return int(x.size()); }
  int64_t rows(int mb) const { return x[size_t(mb)].shape()[0]; }

  static ToyModel make(Allocator& alloc, int64_t hidden, int layers, std::span<const int64_t> rows, uint64_t seed) {
    ToyModel m;
    m.hidden = hidden;
    uint64_t counter = 0;
    auto fill = [&](Shape shape, float scale) {
      Tensor t = Tensor::empty(alloc, shape, DType::kF32).value();
      for (int64_t i = 0; i < t.numel(); ++i) t.ptr<float>()[i] = scale * philox_uniform(seed, 7, counter++, -0.5f, 0.5f);
      return t;
    };
    for (int l = 0; l < layers; ++l) {
      m.w.push_back(fill({hidden, hidden}, 2.0f / std::sqrt(float(hidden))));
      m.b.push_back(fill({hidden}, 0.2f));
      m.dw.push_back(Tensor::zeros(alloc, {hidden, hidden}, DType::kF32).value());
      m.db.push_back(Tensor::zeros(alloc, {hidden}, DType::kF32).value());
    }
    for (int64_t n : rows) {
      m.x.push_back(fill({n, hidden}, 2.0f));
      m.target.push_back(fill({n, hidden}, 2.0f));
      m.total_rows += n;
    }
    return m;
  }
  void zero_grads() {
    for (auto* g : {&dw, &db})
      for (Tensor& t : *g) (void)zero_(t.view());
  }
};

/// Layers [first, last) of a ToyModel as pipeline stage `stage` of `num_stages` (a pipeline::SplitStage).
class ToyStage {
 public:
  struct Layer {
    TensorView x;  // the layer's input (stage input, micro-batch data, or the previous layer's y below)
    Tensor h;      // pre-activation, until I
    Tensor y;      // output when the next layer of this stage reads it (until W: its dW needs it)
    Tensor dh;     // I → W
  };
  struct Stash {
    std::vector<Layer> layers;
    Tensor dy;  // last stage: ∂loss/∂y, from forward to I
  };

  ToyStage(ToyModel& m, int stage, int num_stages, int first, int last)
      : m_(&m), stage_(stage), num_stages_(num_stages), first_(first), last_(last) {
    losses_.assign(size_t(m.microbatches()), 0.0);
  }

  pipeline::Port input_port(int mb) const { return stage_ == 0 ? pipeline::Port{} : boundary(mb); }
  pipeline::Port output_port(int mb) const { return is_last() ? pipeline::Port{} : boundary(mb); }
  const std::vector<double>& losses() const { return losses_; }

  int64_t stash_bytes(int mb) const {
    const int64_t nh = m_->rows(mb) * m_->hidden * 4, n = last_ - first_;
    return n * nh + (n - 1) * nh + (is_last() ? nh : 0);  // h per layer, y between layers, dy
  }
  int64_t weight_stash_bytes(int mb) const {
    const int64_t nh = m_->rows(mb) * m_->hidden * 4, n = last_ - first_;
    return n * nh + (n - 1) * nh;  // dh per layer, y between layers
  }

  Status forward(const Context& ctx, std::span<const TensorView> out, std::span<const TensorView> in, int mb,
                 Stash& st) {
    const int64_t rows = m_->rows(mb), hid = m_->hidden;
    TensorView x = stage_ == 0 ? m_->x[size_t(mb)].view() : in[0];
    float aux[2] = {0, 0};
    if (stage_ > 0) aux[0] = in[1].ptr<float>()[0], aux[1] = in[1].ptr<float>()[1];
    st.layers.assign(size_t(last_ - first_), Layer{});
    Tensor y_last;
    for (int l = first_; l < last_; ++l) {
      Layer& L = st.layers[size_t(l - first_)];
      L.x = x;
      VLPAR_ASSIGN_OR_RETURN(L.h, Tensor::empty(*ctx.allocator, {rows, hid}, DType::kF32));
      VLPAR_RETURN_IF_ERROR(linear_forward(ctx, L.h, x, m_->w[size_t(l)], m_->b[size_t(l)]));
      VLPAR_ASSIGN_OR_RETURN(Tensor g, Tensor::empty(*ctx.allocator, {rows, hid}, DType::kF32));
      VLPAR_RETURN_IF_ERROR(gelu_forward(ctx, g, L.h, GeluKind::kTanh));
      double sq = 0;
      for (int64_t i = 0; i < rows * hid; ++i) sq += double(x.ptr<float>()[i]) * x.ptr<float>()[i];
      aux[0] += float(sq);
      aux[1] += float(rows);
      TensorView y;
      if (l + 1 == last_ && !is_last()) {
        y = out[0];
      } else {
        VLPAR_ASSIGN_OR_RETURN(y_last, Tensor::empty(*ctx.allocator, {rows, hid}, DType::kF32));
        y = y_last.view();
        if (l + 1 < last_) L.y = y_last;
      }
      VLPAR_RETURN_IF_ERROR(copy_(y, x));
      VLPAR_RETURN_IF_ERROR(add_(ctx, y, g));
      x = y;
    }
    if (!is_last()) {
      out[1].ptr<float>()[0] = aux[0];
      out[1].ptr<float>()[1] = aux[1];
      return Status::Ok();
    }
    return loss_(ctx, x, aux[0], mb, st);
  }

  Status backward_input(const Context& ctx, std::span<const TensorView> din, std::span<const TensorView> dout, int mb,
                        Stash& st) {
    const int64_t rows = m_->rows(mb), hid = m_->hidden;
    const float daux = is_last() ? m_->aux_coef / float(m_->total_rows) : dout[1].ptr<float>()[0];
    Tensor dy_owned = is_last() ? st.dy : Tensor{};
    TensorView dy = is_last() ? st.dy.view() : dout[0];
    for (int l = last_ - 1; l >= first_; --l) {
      Layer& L = st.layers[size_t(l - first_)];
      VLPAR_ASSIGN_OR_RETURN(L.dh, Tensor::empty(*ctx.allocator, {rows, hid}, DType::kF32));
      VLPAR_RETURN_IF_ERROR(gelu_backward(ctx, L.dh, dy, L.h, GeluKind::kTanh));
      L.h = Tensor{};
      if (l == first_ && stage_ == 0) break;  // no gradient for the micro-batch's data
      Tensor dx_owned;
      TensorView dx;
      if (l == first_) {
        dx = din[0];
      } else {
        VLPAR_ASSIGN_OR_RETURN(dx_owned, Tensor::empty(*ctx.allocator, {rows, hid}, DType::kF32));
        dx = dx_owned.view();
      }
      VLPAR_RETURN_IF_ERROR(linear_backward(ctx, dx, {}, {}, L.dh, L.x, m_->w[size_t(l)]));
      VLPAR_RETURN_IF_ERROR(add_(ctx, dx, dy));
      for (int64_t i = 0; i < rows * hid; ++i) dx.ptr<float>()[i] += 2 * daux * L.x.ptr<float>()[i];
      dy_owned = std::move(dx_owned);
      dy = dx;
    }
    st.dy = Tensor{};
    if (stage_ > 0) din[1].ptr<float>()[0] = daux;
    return Status::Ok();
  }

  Status backward_weight(const Context& ctx, int, Stash& st) {
    for (int l = first_; l < last_; ++l) {
      Layer& L = st.layers[size_t(l - first_)];
      VLPAR_RETURN_IF_ERROR(linear_backward(ctx, {}, m_->dw[size_t(l)], m_->db[size_t(l)], L.dh, L.x,
                                            m_->w[size_t(l)]));
    }
    st.layers.clear();
    return Status::Ok();
  }

  Status backward(const Context& ctx, std::span<const TensorView> din, std::span<const TensorView> dout, int mb,
                  Stash& st) {
    VLPAR_RETURN_IF_ERROR(backward_input(ctx, din, dout, mb, st));
    return backward_weight(ctx, mb, st);
  }

 private:
  bool is_last() const { return stage_ + 1 == num_stages_; }
  pipeline::Port boundary(int mb) const {
    const Shape nh{m_->rows(mb), m_->hidden};
    return pipeline::Port{{{nh, DType::kF32}, {{2}, DType::kF32}}, {{nh, DType::kF32}, {{1}, DType::kF32}}};
  }
  Status loss_(const Context& ctx, TensorView y, float aux0, int mb, Stash& st) {
    const TensorView t = m_->target[size_t(mb)].view();
    const double r = double(m_->total_rows);
    VLPAR_ASSIGN_OR_RETURN(st.dy, Tensor::empty(*ctx.allocator, y.shape, DType::kF32));
    double sq = 0;
    for (int64_t i = 0; i < y.numel(); ++i) {
      const float d = y.ptr<float>()[i] - t.ptr<float>()[i];
      sq += double(d) * d;
      st.dy.ptr<float>()[i] = d / float(r);
    }
    losses_[size_t(mb)] = 0.5 * sq / r + double(m_->aux_coef) * double(aux0) / r;
    return Status::Ok();
  }

  ToyModel* m_;
  int stage_, num_stages_, first_, last_;
  std::vector<double> losses_;  // [m], last stage only
};

static_assert(pipeline::SplitStage<ToyStage>);

/// Layers of stage s of S: [s·L/S, (s+1)·L/S).
inline std::pair<int, int> toy_layers(int layers, int stage, int stages) {
  return {stage * layers / stages, (stage + 1) * layers / stages};
}

/// The ToyStages schedule `s` places on `rank` (layers split evenly over its stages), and the (stage, object) list
/// the engine takes. Move it, do not copy it: the list points into `stages`.
struct ToyRank {
  std::vector<ToyStage> stages;
  std::vector<int> ids;  // stage index of each of `stages`
  std::vector<std::pair<int, ToyStage*>> args() {
    std::vector<std::pair<int, ToyStage*>> a;
    for (size_t i = 0; i < stages.size(); ++i) a.push_back({ids[i], &stages[i]});
    return a;
  }
};
inline ToyRank toy_rank(ToyModel& m, const pipeline::Schedule& s, int rank) {
  ToyRank r;
  for (int st = 0; st < s.num_stages(); ++st)
    if (s.stage_rank[size_t(st)] == rank) {
      const auto [a, b] = toy_layers(m.layers(), st, s.num_stages());
      r.stages.emplace_back(m, st, s.num_stages(), a, b);
      r.ids.push_back(st);
    }
  return r;
}

/// The single-process reference: one stage of every layer, F of every micro-batch then B of every micro-batch in
/// order (the order every generated schedule runs one stage's backwards in). @return the losses.
inline Result<std::vector<double>> toy_reference(const Context& ctx, ToyModel& m) {
  ToyStage all(m, 0, 1, 0, m.layers());
  std::vector<ToyStage::Stash> st(size_t(m.microbatches()));
  for (int j = 0; j < m.microbatches(); ++j) VLPAR_RETURN_IF_ERROR(all.forward(ctx, {}, {}, j, st[size_t(j)]));
  for (int j = 0; j < m.microbatches(); ++j) VLPAR_RETURN_IF_ERROR(all.backward(ctx, {}, {}, j, st[size_t(j)]));
  return all.losses();
}

/// Bytes of a port direction's tensors.
inline int64_t port_bytes(std::span<const pipeline::TensorSpec> specs) {
  int64_t b = 0;
  for (const auto& sp : specs) b += sp.shape.numel() * int64_t(dtype_size(sp.dtype));
  return b;
}

/// The most boundary bytes one rank holds at once under the engine's documented lifetimes
/// (parallel/pipeline_engine.hpp), walked over its list: a receive from posting to its consuming compute; an
/// output or input gradient for a same-rank neighbour from its compute to the neighbour's; one for another rank
/// from its compute until the second compute after its SEND (the engine waits a send before the
/// second compute after it). Stage inputs kept in the stash are not counted here.
inline int64_t toy_boundary_bytes_max(const pipeline::Schedule& s, int rank, const ToyStage& any) {
  using pipeline::ActionKind;
  const int last = s.num_stages() - 1;
  std::map<std::tuple<int, int, int>, int64_t> live;  // (stage, kind, mb) of the producer/receiver → bytes
  std::vector<std::pair<int64_t, std::tuple<int, int, int>>> sent;  // (computes before its SEND, key)
  int64_t now = 0, peak = 0, computes = 0;
  auto add = [&](std::tuple<int, int, int> k, int64_t b) { live[k] = b, now += b, peak = std::max(peak, now); };
  auto drop = [&](std::tuple<int, int, int> k) {
    auto it = live.find(k);
    if (it != live.end()) now -= it->second, live.erase(it);
  };
  for (const pipeline::Action& a : s.ranks[size_t(rank)]) {
    const int j = a.mb, st = a.stage;
    const int64_t act = port_bytes(any.input_port(j).act.empty() ? any.output_port(j).act : any.input_port(j).act);
    const int64_t grad = port_bytes(any.input_port(j).grad.empty() ? any.output_port(j).grad
                                                                    : any.input_port(j).grad);
    if (!pipeline::is_compute(a.kind)) {
      if (a.kind == ActionKind::kRecvF) add({st, 0, j}, act);
      if (a.kind == ActionKind::kRecvB) add({st, 1, j}, grad);
      if (a.kind == ActionKind::kSendF) sent.push_back({computes, {st + 1, 0, j}});
      if (a.kind == ActionKind::kSendB) sent.push_back({computes, {st - 1, 1, j}});
      continue;
    }
    for (auto& [at, k] : sent)
      if (at < computes) drop(k), at = INT64_MAX;
    if (a.kind == ActionKind::kF) drop({st, 0, j});
    if (a.kind == ActionKind::kB || a.kind == ActionKind::kI) drop({st, 1, j});
    if (a.kind == ActionKind::kF && st < last) add({st + 1, 0, j}, act);
    if ((a.kind == ActionKind::kB || a.kind == ActionKind::kI) && st > 0) add({st - 1, 1, j}, grad);
    ++computes;
  }
  return peak;
}

/// The engine tests' bound on the allocator's peak during one step on `rank`: every in-flight (stage, mb) — the
/// simulator's peak_wgrad — holds its stash (≥ its W-stash) and its inputs; the boundary buffers the engine's
/// documented lifetimes allow (toy_boundary_bytes_max over an inner edge's ports, the same on every edge); one
/// compute's temporaries (the toy's g / y / dx: three [N, H]).
inline int64_t toy_memory_bound(ToyModel& m, const ToyRank& r, const pipeline::Schedule& s, int rank,
                                int peak_wgrad) {
  int64_t per_mb = 0, nh = 0;
  for (const ToyStage& st : r.stages)
    for (int j = 0; j < m.microbatches(); ++j) {
      per_mb = std::max(per_mb, st.stash_bytes(j) + port_bytes(st.input_port(j).act));
      nh = std::max(nh, m.rows(j) * m.hidden * 4);
    }
  const ToyStage inner(m, 1, 2, 0, 1);
  return peak_wgrad * per_mb + toy_boundary_bytes_max(s, rank, inner) + 3 * nh;
}

/// One step of the reference on `ref` and one engine step, measured on `acts` (the engine's allocator).
struct ToyStepResult {
  Status status;              // the reference's or the step's error
  std::vector<double> want;   // the reference's losses
  int64_t left = 0, peak = 0; // bytes still allocated after the step, and the step's peak, above its start
};
template <class Engine>
ToyStepResult toy_step(Engine& engine, const Context& ctx, ToyModel& ref, Allocator& acts) {
  ToyStepResult out;
  Result<std::vector<double>> r = toy_reference(ctx, ref);
  if (!r.ok()) return {r.status(), {}, 0, 0};
  out.want = std::move(r).value();
  acts.reset_peak(Device::cpu());
  const int64_t base = acts.stats(Device::cpu()).current_bytes;
  out.status = engine.step(ctx);
  out.left = acts.stats(Device::cpu()).current_bytes - base;
  out.peak = acts.stats(Device::cpu()).peak_bytes - base;
  return out;
}

/// One rank's engine run in the tests (tests/unit/test_pipeline_engine.cpp, tests/mpi/test_pipeline_ranks.cpp): the
/// reference and the engine's model built from one seed, this rank's stages of `s` and the engine over `pp`; the
/// activations on their own allocator, where step() measures the step's peak and what it leaves. On the heap: the
/// stages point into `model`, the engine into `mine`.
struct ToyRun {
  Allocator params, acts;
  Context ctx;
  ToyModel ref, model;
  ToyRank mine;
  std::optional<pipeline::Engine<ToyStage>> engine;

  static Result<std::unique_ptr<ToyRun>> make(const pipeline::Schedule& s, comm::Communicator& pp, int64_t hidden,
                                             int layers, std::span<const int64_t> rows, uint64_t seed) {
    auto r = std::make_unique<ToyRun>();
    r->ctx.allocator = &r->acts;
    r->ref = ToyModel::make(r->params, hidden, layers, rows, seed);
    r->model = ToyModel::make(r->params, hidden, layers, rows, seed);
    r->mine = toy_rank(r->model, s, pp.rank());
    VLPAR_ASSIGN_OR_RETURN(pipeline::Engine<ToyStage> e, pipeline::Engine<ToyStage>::create(s, r->mine.args(), pp));
    r->engine.emplace(std::move(e));
    return r;
  }
  /// One reference step and one engine step (toy_step).
  ToyStepResult step() { return toy_step(*engine, ctx, ref, acts); }
};

}  // namespace vlpar::test
