// The causal-LM targets of a packed batch. See include/vlpar/nn/block.hpp.
#include "vlpar/nn/block.hpp"

#include <vector>

#include "nn_util.hpp"
#include "vlpar/kernels/cross_entropy.hpp"

namespace vlpar::nn {

Result<CausalTargets> causal_targets(const Context& ctx, const Batch& batch, int64_t ignore_index) {
  const int64_t B = batch.num_samples();
  CausalTargets t;
  std::vector<int32_t> cu(batch.host_cu_seqlens.begin(), batch.host_cu_seqlens.end());  // validated by the batch
  VLPAR_ASSIGN_OR_RETURN(t.cu_seqlens, detail::scratch(ctx, {B + 1}, DType::kI32));
  VLPAR_RETURN_IF_ERROR(copy_(t.cu_seqlens, TensorView(cu.data(), DType::kI32, {B + 1})));
  VLPAR_ASSIGN_OR_RETURN(t.labels, detail::scratch(ctx, {batch.num_tokens()}, DType::kI64));
  VLPAR_RETURN_IF_ERROR(shift_labels_for_causal_lm(t.labels, batch.labels, t.cu_seqlens, ignore_index));
  return t;
}

}  // namespace vlpar::nn
