#pragma once
// What every nn block shares: the packed-sequence metadata attention reads, and the hook the backward calls
// when a parameter's gradient is final (data-parallel bucketing starts its all-reduce there).
// Blocks take their scratch and stash tensors from ctx.allocator (which must be set).
#include <cstddef>
#include <functional>

#include "vlpar/core/status.hpp"
#include "vlpar/core/tensor.hpp"

namespace vlpar::nn {

/// The packed batch as attention sees it (DESIGN §4). Every tp rank holds the whole of it, also under SP.
struct PackedSeq {
  TensorView cu_seqlens;  // i32 [B + 1], cu[0] = 0, cu[B] = N_tok
  TensorView positions;   // i32 or i64 [N_tok], 1D rotary position of each token within its sample
  int64_t num_tokens() const { return positions.numel(); }
};

/// Called by backward with a parameter's model-wide index once its gradient is complete for this step.
using GradReadyFn = std::function<Status(size_t param_index)>;

}  // namespace vlpar::nn
