#pragma once
// The layer interface of nn: what a recompute policy, a memory model and (later) a pipeline stage need from one
// layer of any model, and LayerStack, which runs a range of such layers. A model is
//   pre (embedding, vision tower, ...) → LayerStack over layers [a, b) → post (final norm, head, loss)
// and a pipeline stage or a recompute policy wraps any [a, b) of any model through this interface.
//
// A type L is a Layer when it has (N_loc = this rank's tokens, H = the residual width, both [N_loc, H]):
//   typename L::Seq                                             the packed batch as the layer reads it (PackedSeq
//                                                               for decoder layers, VisionSeq for vision blocks)
//   typename L::Stash                                           what backward needs (default-constructible)
//   Status forward(ctx, out, in, seq, stash) const              out written; `in` must outlive the stash
//   Status backward(ctx, dx, dout, seq, stash, ready) const      dx written (not aliasing dout; an empty dx is
//                                                               passed only to a layer that accepts it: no input
//                                                               gradient wanted); parameter gradients accumulated;
//                                                               ready(i) per final one
//   ParamRange params() const                                    its registry indices [first, first + count)
//   int64_t stash_bytes(int64_t tokens, Recompute mode) const    bytes its stash holds from forward to backward
//   double flops(const Seq& seq) const                           forward FLOPs on this rank for the batch
// A RecomputableLayer also has
//   void drop(stash, mode) const                                 releases what `mode` recomputes
//   Status recompute(ctx, in, seq, stash, mode) const            rebuilds it from the layer input, bitwise as
//                                                               forward did, without forward's once-per-step side
//                                                               effects (e.g. MoE router statistics)
// Recompute policies of LayerStack (the recomputed stash is bitwise the forward's, so gradients are bitwise those
// of kNone):
//   kNone      keep every layer's stash from forward to backward;
//   kSelective drop the part the layer chooses (DecoderLayer: the feed-forward block's stash, its largest
//              per-token tensors) and rebuild it just before the layer's backward (RecomputableLayer only);
//   kFull      keep only each layer's input; re-run the layer just before its backward.
// Test: tests/unit/test_layer_stack.cpp (DecoderLayer: the concept, stash bytes = allocator bytes, kFull = kNone
// bitwise, a sub-range of layers).
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "vlpar/core/context.hpp"
#include "vlpar/core/tensor.hpp"
#include "vlpar/nn/block.hpp"

namespace vlpar::nn {

/// Registry indices [first, first + count) of a layer's parameters.
struct ParamRange {
  size_t first = 0, count = 0;
  friend bool operator==(const ParamRange&, const ParamRange&) = default;
};

/// Activation recompute policy of a LayerStack (see above).
enum class Recompute { kNone, kSelective, kFull };

template <class L>
concept Layer = std::default_initializable<typename L::Stash> &&
                requires(const L& l, const Context& ctx, TensorView t, const typename L::Seq& seq, typename L::Stash& st,
                         const GradReadyFn& ready, int64_t tokens, Recompute mode) {
                  { l.forward(ctx, t, t, seq, st) } -> std::same_as<Status>;
                  { l.backward(ctx, t, t, seq, st, ready) } -> std::same_as<Status>;
                  { l.params() } -> std::same_as<ParamRange>;
                  { l.stash_bytes(tokens, mode) } -> std::same_as<int64_t>;
                  { l.flops(seq) } -> std::same_as<double>;
                };

template <class L>
concept RecomputableLayer =
    Layer<L> && requires(const L& l, const Context& ctx, TensorView t, const typename L::Seq& seq, typename L::Stash& st,
                         Recompute mode) {
      l.drop(st, mode);
      { l.recompute(ctx, t, seq, st, mode) } -> std::same_as<Status>;
    };

/// Layers [0, n) of some model, run in order; activations come from ctx.allocator.
template <Layer L>
class LayerStack {
 public:
  using Seq = typename L::Seq;
  struct Stash {
    std::vector<TensorView> inputs;              // [n + 1]: layer i's input; inputs[n] = the last output
    std::vector<Tensor> owned;                   // the outputs, owned here
    std::vector<typename L::Stash> layer;        // [n] (empty entries under kFull)
  };

  LayerStack() = default;
  explicit LayerStack(std::vector<L> layers, Recompute recompute = Recompute::kNone)
      : layers_(std::move(layers)), recompute_(recompute) {}

  size_t size() const { return layers_.size(); }
  const L& layer(size_t i) const { return layers_.at(i); }
  Recompute recompute() const { return recompute_; }
  void set_recompute(Recompute r) { recompute_ = r; }
  /// @brief Layers [a, b) as a stack of their own (a pipeline stage's share), same policy.
  LayerStack range(size_t a, size_t b) const {
    return LayerStack(std::vector<L>(layers_.begin() + std::ptrdiff_t(a), layers_.begin() + std::ptrdiff_t(b)),
                      recompute_);
  }
  /// @brief Σ of the layers' stash bytes for `tokens` under the stack's policy (the kept inputs not counted).
  int64_t stash_bytes(int64_t tokens) const {
    int64_t b = 0;
    for (const L& l : layers_) b += l.stash_bytes(tokens, recompute_);
    return b;
  }
  double flops(const Seq& seq) const {
    double f = 0;
    for (const L& l : layers_) f += l.flops(seq);
    return f;
  }

  /// @brief Runs every layer; `in` [N_loc, H] must stay alive until backward. @return the last output.
  Result<TensorView> forward(const Context& ctx, TensorView in, const Seq& seq, Stash& st) const {
    VLPAR_CHECK(ctx.allocator != nullptr, "LayerStack::forward: ctx.allocator must be set");
    VLPAR_CHECK_CODE(recompute_ != Recompute::kSelective || RecomputableLayer<L>, StatusCode::kNotSupported,
                     "LayerStack: selective recompute needs layers with drop()/recompute() (nn/layer.hpp)");
    const size_t n = layers_.size();
    st.inputs.assign(1, in);
    st.owned.clear();
    st.owned.reserve(n);
    st.layer.assign(n, typename L::Stash{});
    for (size_t i = 0; i < n; ++i) {
      VLPAR_ASSIGN_OR_RETURN(Tensor out, Tensor::empty(*ctx.allocator, in.shape, in.dtype, in.device));
      st.owned.push_back(std::move(out));
      st.inputs.push_back(st.owned.back().view());
      VLPAR_RETURN_IF_ERROR(layers_[i].forward(ctx, st.inputs[i + 1], st.inputs[i], seq, st.layer[i]));
      drop_(i, st.layer[i]);
    }
    return st.inputs.back();
  }

  /// @brief Backward through layers [stop, n): dx [N_loc, H] written = ∂/∂(input of layer `stop`), or not
  /// computed when dx is empty (layer `stop` must accept an empty dx); dout = ∂/∂(last output). The layers below
  /// `stop` are skipped (nothing under them needs a gradient: a frozen bottom). Consumes the stash.
  Status backward(const Context& ctx, TensorView dx, TensorView dout, const Seq& seq, Stash& st,
                  const GradReadyFn& ready, size_t stop = 0) const {
    const size_t n = layers_.size();
    VLPAR_CHECK(st.layer.size() == n && st.inputs.size() == n + 1,
                "LayerStack::backward: the stash holds {} layers, the stack {} (run forward first)", st.layer.size(), n);
    VLPAR_CHECK(stop <= n, "LayerStack::backward: stop {} beyond the {} layers", stop, n);
    if (stop == n) {
      st = Stash{};
      return dx.empty() ? Status::Ok() : copy_(dx, dout);
    }
    // The residual gradient alternates between two buffers so that no layer reads the buffer it writes: layer i
    // writes `a` when (i − stop) is even, so layer `stop` ends in dx (a = dx, or a scratch when dx is empty and
    // layer `stop` is given the empty dx instead).
    Tensor scratch_a, scratch_b;
    if (n - stop > 1) {
      VLPAR_ASSIGN_OR_RETURN(scratch_b, Tensor::empty(*ctx.allocator, dout.shape, dout.dtype, dout.device));
      if (dx.empty()) {
        VLPAR_ASSIGN_OR_RETURN(scratch_a, Tensor::empty(*ctx.allocator, dout.shape, dout.dtype, dout.device));
      }
    }
    const TensorView a = dx.empty() ? scratch_a.view() : dx;
    TensorView cur = dout;
    for (size_t i = n; i-- > stop;) {
      VLPAR_RETURN_IF_ERROR(recompute_layer_(ctx, i, seq, st));
      const TensorView next = i == stop ? dx : ((i - stop) % 2 == 0 ? a : scratch_b.view());
      VLPAR_RETURN_IF_ERROR(layers_[i].backward(ctx, next, cur, seq, st.layer[i], ready));
      st.layer[i] = typename L::Stash{};  // consumed: free its activations and its output now
      st.owned[i] = Tensor{};
      cur = next;
    }
    st = Stash{};  // the layers below `stop` (if any) are not run: their activations go too
    return Status::Ok();
  }

 private:
  void drop_(size_t i, typename L::Stash& st) const {
    if constexpr (RecomputableLayer<L>) {
      if (recompute_ != Recompute::kNone) layers_[i].drop(st, recompute_);
    } else if (recompute_ == Recompute::kFull) {
      st = typename L::Stash{};  // only the inputs stay
    }
  }
  // Rebuilds layer i's stash as drop_() left it: the layer's own hook, or (kFull, plain Layer) its forward again
  // with the output to scratch.
  Status recompute_layer_(const Context& ctx, size_t i, const Seq& seq, Stash& st) const {
    if (recompute_ == Recompute::kNone) return Status::Ok();
    if constexpr (RecomputableLayer<L>) {
      return layers_[i].recompute(ctx, st.inputs[i], seq, st.layer[i], recompute_);
    } else {
      const TensorView in = st.inputs[i];
      VLPAR_ASSIGN_OR_RETURN(Tensor scratch, Tensor::empty(*ctx.allocator, in.shape, in.dtype, in.device));
      return layers_[i].forward(ctx, scratch, in, seq, st.layer[i]);
    }
  }

  std::vector<L> layers_;
  Recompute recompute_ = Recompute::kNone;
};

}  // namespace vlpar::nn
