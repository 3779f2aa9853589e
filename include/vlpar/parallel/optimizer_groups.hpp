#pragma once
// The communicators the data-parallel optimizer reduces over, per replica group of parameters (ReplicaGroup,
// read from each parameter's ParamShard in the registry):
//   replicas : the ranks holding copies of the group's parameters — gradients are summed over it (÷ its size when
//              averaging), and ZeRO-1 shards the group's optimizer state over it;
//   norm     : the groups of ranks holding the other pieces — the group's Σg² is summed over each in turn, so the
//              global norm counts every element of the model once (with OptimParam::norm_weight for copies
//              inside them, e.g. replicated norms under TP).
// From a mesh (from()): dense = dp_cp / {tp}, expert = edp / {etp, ep}, vision = vision_dp / {vision_tp}; with
// the default layout (ep 1, etp = tp, vision tp = tp) all three reduce over the same ranks as the dense group.
// A group's collectives run on a rank only when it holds parameters of that group, so every rank of the group's
// communicators must hold some (true of a model: every rank of a pipeline stage builds the same layers).
// Pipeline stages hold different layers (and only stage 0 the vision tower), so they are no norm group of any one
// replica group: `stages` (the pp group) sums the total over every group once, after the groups' sums are added;
// every rank of it takes part whatever groups it holds.
// Tests: tests/mpi/test_distributed_optimizer.cpp (ReplicaGroups.*: two groups over different communicators).
#include <array>
#include <vector>

#include "vlpar/comm/communicator.hpp"
#include "vlpar/core/shard.hpp"
#include "vlpar/parallel/placement.hpp"
#include "vlpar/parallel/process_groups.hpp"

namespace vlpar::parallel {

struct ReplicaComms {
  comm::Communicator* replicas = nullptr;  // null: one replica (nothing to reduce; ZeRO-1 is then an error)
  std::vector<comm::Communicator*> norm;   // summed over in order; null entries and size-1 groups are skipped
  int duplicates = 1;  // replicas that computed the same gradient from the same data: the sum is ÷ duplicates
  int parts = 1;       // replicas whose gradients are parts of one (SP experts): an average is ÷ (size / parts)
  int batches = 1;     // data-parallel batches each replica's gradient sums (a vision tp wider than tp): an average
                       // is ÷ (size · batches)

  /// @brief Ranks over which the group's pieces are spread: the product of the norm groups' sizes (1 without).
  int norm_ranks() const {
    int n = 1;
    for (const comm::Communicator* c : norm)
      if (c != nullptr) n *= c->size();
    return n;
  }
};

struct OptimizerGroups {
  std::array<ReplicaComms, kNumReplicaGroups> by_group{};
  comm::Communicator* stages = nullptr;  // pipeline stages: Σg² summed over it last (null or size 1: none)

  ReplicaComms& operator[](ReplicaGroup g) { return by_group[size_t(g)]; }
  const ReplicaComms& operator[](ReplicaGroup g) const { return by_group[size_t(g)]; }

  /// @brief Each group over its replica_axis() with its piece_axes() as norm groups (placement.hpp): dense =
  /// dp_cp / {tp}, expert = edp / {etp, ep}, vision = vision_dp / {vision_tp}; stages = pp. A vision tower
  /// narrower than the language model's tp runs the same images on tp / vision_tp ranks of its vision_dp group,
  /// and so do experts narrower than tp without expert parallelism (ep 1: every rank runs every token): those
  /// are duplicates, not data replicas. A vision tower wider than tp runs vision_tp / tp batches at once: each
  /// replica's gradient sums that many (ReplicaComms::batches; the mesh has no cp inside a vision tp group: its
  /// ranks are whole tp groups of different dp coordinates). Under sequence parallelism the tp ranks route
  /// different tokens, so their expert gradients are parts of one sum, not duplicates.
  static OptimizerGroups from(const ProcessGroups& pg) {
    OptimizerGroups g;
    g.stages = &pg.pp();
    for (size_t k = 0; k < kNumReplicaGroups; ++k) {
      const auto group = ReplicaGroup(k);
      g[group].replicas = &pg.get(replica_axis(group));
      for (Axis a : piece_axes(group)) g[group].norm.push_back(&pg.get(a));
    }
    const int tp = pg.get(Axis::kTp).size();
    const auto narrower = [tp](int n) { return n < tp && tp % n == 0 ? tp / n : 1; };
    const int vtp = pg.get(Axis::kVisionTp).size();
    g[ReplicaGroup::kVision].duplicates = narrower(vtp);
    // A vision tp group wider than tp spans vtp / tp data-parallel batches, whose images its tower runs together.
    if (vtp > tp && vtp % tp == 0) g[ReplicaGroup::kVision].batches = vtp / tp;
    const int ep = pg.get(Axis::kEp).size(), etp = pg.get(Axis::kEtp).size();
    if (ep == 1 && !pg.mesh().config().sequence_parallel) g[ReplicaGroup::kExpert].duplicates = narrower(etp);
    // Under SP the tp ranks of one micro-batch that hold the same expert shard (tp / (etp·ep) of them, when the
    // expert groups nest inside the tp groups) each computed part of its gradient.
    if (pg.mesh().config().sequence_parallel && tp % (etp * ep) == 0)
      g[ReplicaGroup::kExpert].parts = tp / (etp * ep);
    return g;
  }
  /// @brief Every group over the same replicas and norm group (null: none): a layout without expert or vision
  /// axes of its own, or a single process (both null).
  static OptimizerGroups uniform(comm::Communicator* replicas, comm::Communicator* norm) {
    OptimizerGroups g;
    for (ReplicaComms& r : g.by_group) r = {replicas, {norm}};
    return g;
  }
};

}  // namespace vlpar::parallel
