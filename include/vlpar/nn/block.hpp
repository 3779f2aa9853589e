#pragma once
// What every nn block shares: the packed-sequence metadata attention reads, and the hook the backward calls
// when a parameter's gradient is final (data-parallel bucketing starts its all-reduce there).
// Blocks take their scratch and stash tensors from ctx.allocator (which must be set).
//
// Frozen parameters: a block given an empty gradient view (TensorView{}, empty() true) for a parameter treats it
// as frozen: no gradient is computed for it, its weight-gradient GEMM (or norm-weight reduction, and any tp
// all-reduce of that gradient) is skipped, and GradReadyFn is NOT called for its index. Input gradients still
// flow through it. Data-parallel bucketing must therefore be built over the trainable parameters only.
#include <cstddef>
#include <functional>

#include "vlpar/core/batch.hpp"
#include "vlpar/core/context.hpp"
#include "vlpar/core/status.hpp"
#include "vlpar/core/tensor.hpp"

namespace vlpar::nn {

/// The packed batch as attention sees it (DESIGN §4). Every tp rank holds the whole of it, also under SP.
struct PackedSeq {
  TensorView cu_seqlens;  // i32 [B + 1], cu[0] = 0, cu[B] = N_tok
  /// i32 or i64 rotary positions, contiguous along tokens:
  ///   [N_tok]    1D rotary: the position of each token within its sample (also accepted under MRoPE: pure text,
  ///              the three rows T, H, W equal; identical bits to [3, N_tok] with three copies)
  ///   [3, N_tok] MRoPE (TransformerConfig::rope = kMRoPE): rows T, H, W (get_rope_index, spec §4.5)
  TensorView positions;
  int64_t num_tokens() const { return positions.ndim() > 0 ? positions.size(-1) : 0; }
};

/// The packed batch's causal-LM targets as every model builds them from a vlpar::Batch (validated by the caller):
/// cu_seqlens as i32 from the batch's host copy (the attention kernels' type) and the labels shifted within each
/// sample (ignore_index at each sample's last token). Both from ctx.allocator.
struct CausalTargets {
  Tensor cu_seqlens;  // i32 [B + 1]
  Tensor labels;      // i64 [N]
};
Result<CausalTargets> causal_targets(const Context& ctx, const Batch& batch, int64_t ignore_index);

/// Called by backward with a parameter's model-wide index once its gradient is complete for this step
/// (never for a frozen parameter).
using GradReadyFn = std::function<Status(size_t param_index)>;

}  // namespace vlpar::nn
