#pragma once
// ParallelConfig: the typed sizes of every parallel axis and the rank order, plus ModelDims, the few model sizes
// the sizes must divide. validate() explains the first conflict in one sentence ("tp=3 does not divide 16
// attention heads") and never exits; the rank layout itself lives in vlpar/parallel/mesh.hpp.
// Test: tests/unit/test_mesh.cpp (ctest --test-dir build/cpu -R Mesh).
#include <cstdint>
#include <string>

#include "vlpar/core/status.hpp"

namespace vlpar::parallel {

/// Model sizes the parallel layout must agree with. 0 means "absent" (no experts, no vision tower, unknown).
struct ModelDims {
  int num_layers = 0;              // decoder layers; pp may not exceed them
  int num_heads = 0;               // H, attention (query) heads of the language model; split by tp
  int num_kv_heads = 0;            // H_kv; split by tp when tp ≤ H_kv, replicated when tp > H_kv
  int64_t vocab = 0;               // vocab-parallel embedding and loss split it by tp
  int64_t intermediate = 0;        // dense MLP width; column/row-parallel split by tp (0 = no dense MLP)
  int num_experts = 0;             // E, routed experts per MoE layer; split by ep (0 = dense model)
  int64_t expert_intermediate = 0; // width of one expert's MLP; split by etp
  int vision_heads = 0;            // heads of the vision encoder; split by vision tp (0 = no vision tower)
  int64_t vision_intermediate = 0; // vision MLP width; split by vision tp
};

/// Sizes of the parallel axes. world = tp · cp · dp · pp for the attention (dense) layers and
/// world = etp · ep · edp · pp for the MoE layers (MoE parallel folding, see mesh.hpp).
struct ParallelConfig {
  int world = 1;      // number of ranks
  int tp = 1;         // tensor parallel (language model)
  int cp = 1;         // context parallel (sequence split across ranks in attention)
  int ep = 1;         // expert parallel (experts split across ranks in MoE layers)
  int etp = 0;        // expert tensor parallel (each expert's MLP split); 0 = same as tp (Megatron's default)
  int pp = 1;         // pipeline parallel (layers split into stages)
  int dp = 0;         // data parallel; 0 = derived as world / (tp · cp · pp)
  int vision_tp = 0;  // tensor parallel of the vision encoder; 0 = same as tp
  // Sequence parallelism (Megatron's --sequence-parallel): between TP regions each tp rank holds 1/tp of the
  // tokens (nn/tensor_parallel.hpp), so a MoE layer routes each tp rank's own tokens (spec B7.1). Required for
  // expert parallelism with etp < tp (the ep groups then span tp ranks, which without it hold the same tokens).
  bool sequence_parallel = false;
  // Rank order, fastest-varying axis first, as Megatron's RankGenerator: "tp-cp-ep-dp-pp" puts the tp ranks of a
  // group on consecutive ranks (inside one node) and the pp stages farthest apart. Must name each of
  // tp, cp, ep, dp, pp exactly once. In the expert layout etp takes tp's place and edp takes dp's.
  std::string order = "tp-cp-ep-dp-pp";

  // Resolved sizes (meaningful once validate() passed; they never divide by zero).
  int dp_size() const { return dp > 0 ? dp : (tp * cp * pp > 0 ? world / (tp * cp * pp) : 0); }
  int etp_size() const { return etp > 0 ? etp : tp; }
  /// Expert data parallel: the replicas of one expert shard inside a pipeline stage (MoE parallel folding).
  int edp_size() const { return etp_size() * ep * pp > 0 ? world / (etp_size() * ep * pp) : 0; }
  int vision_tp_size() const { return vision_tp > 0 ? vision_tp : tp; }
  /// Vision data parallel: the replicas of one vision-encoder shard inside a pipeline stage.
  int vision_dp_size() const { return vision_tp_size() * pp > 0 ? world / (vision_tp_size() * pp) : 0; }

  /// @brief Checks the sizes against each other and against the model, the order string, and that the attention,
  /// expert and vision layouts have the same pipeline groups; returns the first conflict, in one sentence.
  Status validate(const ModelDims& dims) const;
};

}  // namespace vlpar::parallel
