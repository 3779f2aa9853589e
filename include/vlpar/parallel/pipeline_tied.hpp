#pragma once
// Parameters tied across pipeline stages (Megatron's embedding group, spec pipeline-and-experts A5.3): a tied LM
// head on the last stage reads the embedding table that stage 0 looks tokens up in, so the two ranks holding those
// stages each hold a copy and each accumulates only its own stage's part of the gradient. After the step's
// backwards, sum_tied_gradient leaves the sum in both copies, bitwise equal on both ranks: each adds the other's
// copy to its own (IEEE addition is commutative, so both get the same bits), and the two copies' AdamW updates then
// keep the values identical. The gradient norm must count the element
// once: the optimizer gives each copy norm_weight ½ (the trainer does, examples/qwen3vl/trainer.cpp).
// Test: tests/mpi/test_pipeline_ranks.cpp (PipelineTied.*).
#include "vlpar/comm/communicator.hpp"
#include "vlpar/core/context.hpp"
#include "vlpar/core/status.hpp"
#include "vlpar/core/tensor.hpp"

namespace vlpar::pipeline {

/// @brief Sums the copies of a tied parameter's gradient held by pipeline ranks `first` and `second` (ranks of
/// `pp`, first < second; this rank must be one of them). `grad`: contiguous f32, the same shape on both. Both end
/// with first + second. Blocking; every pipeline message of the step must have completed (Engine::step returned),
/// as the exchange uses `tag` on the same communicator.
Status sum_tied_gradient(const Context& ctx, comm::Communicator& pp, TensorView grad, int first, int second,
                         int tag = 0);

}  // namespace vlpar::pipeline
