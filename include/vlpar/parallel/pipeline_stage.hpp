#pragma once
// The generic pipeline stage: what the pipeline engine (parallel/pipeline_engine.hpp) needs from one stage — one
// contiguous piece of any model, e.g. `pre → layers[a, b)` on stage 0, `layers[b, c)` in the middle, `layers[c, d)
// → post → loss` on the last stage. Stages of one rank are one C++ type S; the engine never looks inside them.
//
// Boundary tensors (a Port): what crosses the edge between stage s and s+1 for micro-batch j, in both directions:
//   act   forward payload s → s+1 (hidden states, and side tensors such as deepstack features or MoE aux-loss
//         statistics, spec A5.2), one TensorSpec each, in a fixed order;
//   grad  backward payload s+1 → s (the gradients of those of `act` that carry one, plus side values such as the
//         aux-loss f and R), which need not match `act` one for one.
// Stage s's output_port(j) must equal stage s+1's input_port(j): every rank derives the shapes from its own copy of
// the micro-batch's metadata (spec A5.2: no shape handshake inside the step). Stage 0 has an empty input port and
// the last stage an empty output port (it turns its output into a loss it keeps itself).
//
// A type S is a pipeline Stage when it has (j = micro-batch index within the step, 0 ≤ j < m):
//   typename S::Stash                               what its backward needs for one micro-batch (default-constructible)
//   Port input_port(j) const, output_port(j) const  the boundary tensors above
//   Status forward(ctx, out, in, j, stash)          out: output_port(j).act views to write; in: input_port(j).act,
//                                                   alive until the stage's last backward of j ran (the stash may
//                                                   keep views into them)
//   Status backward(ctx, din, dout, j, stash)       full backward (B): din: input_port(j).grad to write; dout:
//                                                   output_port(j).grad (empty on the last stage, which starts from
//                                                   its loss); parameter gradients accumulated; the engine destroys
//                                                   the stash afterwards
//   int64_t stash_bytes(j) const                    bytes the stash holds from forward to backward (memory model)
// A SplitStage (for ZB-H1 and ZB-V, spec A3.2) also has
//   Status backward_input(ctx, din, dout, j, stash) I: input gradients only; the stash shrinks to what W needs
//   Status backward_weight(ctx, j, stash)           W: parameter gradients from what I left; stash destroyed after
//   int64_t weight_stash_bytes(j) const             bytes the stash still holds between I and W
// and must give, per micro-batch, I then W bitwise equal to B.
// Test: tests/unit/test_pipeline_engine.cpp, tests/mpi/test_pipeline_ranks.cpp (toy model: tests/pipeline_toy.hpp).
#include <concepts>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "vlpar/core/context.hpp"
#include "vlpar/core/tensor.hpp"

namespace vlpar::pipeline {

/// Shape and dtype of one boundary tensor of one micro-batch.
struct TensorSpec {
  Shape shape;
  DType dtype = DType::kF32;
  friend bool operator==(const TensorSpec&, const TensorSpec&) = default;
};

/// The boundary tensors of one stage edge for one micro-batch: forward payload and backward payload.
struct Port {
  std::vector<TensorSpec> act;   // s → s+1
  std::vector<TensorSpec> grad;  // s+1 → s
  friend bool operator==(const Port&, const Port&) = default;
};

/// At most this many tensors per direction of a port (they share one message tag range, pipeline_engine.hpp).
inline constexpr int kMaxPortTensors = 8;

/// "[f32[4, 8], f32[2]]"
std::string to_string(std::span<const TensorSpec> specs);

template <class S>
concept Stage = std::default_initializable<typename S::Stash> &&
                requires(S& s, const S& cs, const Context& ctx, std::span<const TensorView> views, int mb,
                         typename S::Stash& st) {
                  { cs.input_port(mb) } -> std::same_as<Port>;
                  { cs.output_port(mb) } -> std::same_as<Port>;
                  { s.forward(ctx, views, views, mb, st) } -> std::same_as<Status>;
                  { s.backward(ctx, views, views, mb, st) } -> std::same_as<Status>;
                  { cs.stash_bytes(mb) } -> std::same_as<int64_t>;
                };

template <class S>
concept SplitStage = Stage<S> && requires(S& s, const S& cs, const Context& ctx, std::span<const TensorView> views,
                                          int mb, typename S::Stash& st) {
  { s.backward_input(ctx, views, views, mb, st) } -> std::same_as<Status>;
  { s.backward_weight(ctx, mb, st) } -> std::same_as<Status>;
  { cs.weight_stash_bytes(mb) } -> std::same_as<int64_t>;
};

}  // namespace vlpar::pipeline
