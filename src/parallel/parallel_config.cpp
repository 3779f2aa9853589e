// ParallelConfig::validate: one-sentence explanations of conflicting parallel sizes. See
// include/vlpar/parallel/parallel_config.hpp. Test: tests/unit/test_mesh.cpp (ParallelConfigValidate.*).
#include "vlpar/parallel/parallel_config.hpp"

#include "vlpar/parallel/mesh.hpp"

namespace vlpar::parallel {

Status ParallelConfig::validate(const ModelDims& d) const {
  // 1. Each size on its own.
  VLPAR_CHECK(world >= 1, "world size {} must be at least 1", world);
  VLPAR_CHECK(tp >= 1, "tp={} must be at least 1", tp);
  VLPAR_CHECK(cp >= 1, "cp={} must be at least 1", cp);
  VLPAR_CHECK(ep >= 1, "ep={} must be at least 1", ep);
  VLPAR_CHECK(pp >= 1, "pp={} must be at least 1", pp);
  VLPAR_CHECK(dp >= 0, "dp={} must be at least 1 (or 0 to derive it from the world size)", dp);
  VLPAR_CHECK(etp >= 0, "etp={} must be at least 1 (or 0 for the same as tp)", etp);
  VLPAR_CHECK(vision_tp >= 0, "vision tp={} must be at least 1 (or 0 for the same as tp)", vision_tp);
  VLPAR_ASSIGN_OR_RETURN(const auto slots, parse_order(order));

  // 2. The attention layout covers the world exactly.
  if (dp > 0) {
    VLPAR_CHECK(int64_t(tp) * cp * pp * dp == world, "tp*cp*pp*dp = {} does not equal world size {}",
                int64_t(tp) * cp * pp * dp, world);
  } else {
    VLPAR_CHECK(world % (int64_t(tp) * cp * pp) == 0, "tp*cp*pp = {} does not divide world size {}",
                int64_t(tp) * cp * pp, world);
  }
  const int stage = world / pp;  // ranks of one pipeline stage = tp·cp·dp

  // 3. The language model's shapes split evenly.
  if (d.num_heads > 0) VLPAR_CHECK(d.num_heads % tp == 0, "tp={} does not divide {} attention heads", tp, d.num_heads);
  if (d.num_kv_heads > 0)
    VLPAR_CHECK(d.num_kv_heads % tp == 0 || tp % d.num_kv_heads == 0,
                "tp={} neither divides {} kv heads nor is a multiple of them (kv heads are split or replicated)", tp,
                d.num_kv_heads);
  if (d.vocab > 0)
    VLPAR_CHECK(d.vocab % tp == 0, "tp={} does not divide vocab size {} (pad the vocabulary to a multiple of tp)",
                tp, d.vocab);
  if (d.intermediate > 0)
    VLPAR_CHECK(d.intermediate % tp == 0, "tp={} does not divide MLP intermediate size {}", tp, d.intermediate);
  if (d.num_layers > 0) VLPAR_CHECK(pp <= d.num_layers, "pp={} exceeds the {} decoder layers", pp, d.num_layers);

  // 4. MoE layers: experts split by ep, each expert by etp, and etp·ep folds into a pipeline stage.
  if (d.num_experts > 0) VLPAR_CHECK(d.num_experts % ep == 0, "ep={} does not divide {} experts", ep, d.num_experts);
  if (d.expert_intermediate > 0)
    VLPAR_CHECK(d.expert_intermediate % etp_size() == 0, "etp={} does not divide expert intermediate size {}",
                etp_size(), d.expert_intermediate);
  // With etp < tp an ep group spans tp ranks (MoE folding), which hold the same tokens unless SP split them.
  VLPAR_CHECK(d.num_experts == 0 || ep == 1 || etp_size() >= tp || sequence_parallel,
              "ep={} with etp={} < tp={} needs sequence parallelism: the ep groups span tp ranks, which without it "
              "hold the same tokens, and each would route and send them to the experts again", ep, etp_size(), tp);
  // Under SP a MoE layer's failure (non-finite router logits) is agreed over tp, then ep: that reaches every rank
  // that meets the failing one in a collective only when the ep groups and the tp groups nest.
  VLPAR_CHECK(d.num_experts == 0 || !sequence_parallel || ep == 1 || tp == 1 || ep % tp == 0 || tp % ep == 0,
              "ep={} and tp={} under sequence parallelism: one must divide the other (the expert groups must nest "
              "with the tp groups)", ep, tp);
  VLPAR_CHECK(stage % (int64_t(etp_size()) * ep) == 0,
              "etp*ep = {} does not divide the {} ranks of a pipeline stage (tp*cp*dp), so the MoE layers cannot "
              "fold onto them",
              int64_t(etp_size()) * ep, stage);

  // 5. Vision encoder: its own tp over the same stage.
  if (d.vision_heads > 0)
    VLPAR_CHECK(d.vision_heads % vision_tp_size() == 0, "vision tp={} does not divide {} vision heads",
                vision_tp_size(), d.vision_heads);
  if (d.vision_intermediate > 0)
    VLPAR_CHECK(d.vision_intermediate % vision_tp_size() == 0, "vision tp={} does not divide vision MLP size {}",
                vision_tp_size(), d.vision_intermediate);
  VLPAR_CHECK(stage % vision_tp_size() == 0, "vision tp={} does not divide the {} ranks of a pipeline stage",
              vision_tp_size(), stage);

  // 6. All layouts agree on the pipeline groups (depends on the order string).
  return detail::check_layouts_agree(*this, slots);
}

}  // namespace vlpar::parallel
