#pragma once
// A vision tower wider than the language model's tensor parallelism (parallel.vision_tp = m · tp): the vision tp
// group then spans m data-parallel batches ("slots": the group's ranks s·tp … s·tp + tp − 1 hold slot s's batch,
// as the mesh lays vision tp groups over whole language tp groups). The tower runs once on every slot's images,
// split over the whole group, and each rank keeps its own slot's visual tokens:
//
//   forward   share_images: the slots' pixel rows and grids, broadcast from each slot's first rank in slot order
//             ([Σ_s P_s, patch_dim], grids of slot 0 then 1 …), with every slot's merged-token count → the tower on
//             all of them → each rank slices its slot's rows [tokens[s], tokens[s + 1]) of the merged and
//             deepstack outputs.
//   backward  share_rows: every slot's gradient of its rows (the tp ranks of a slot hold the same), broadcast the
//             same way into [Σ_s n_s, D] → the tower's backward on all of them; its weight gradients sum over the
//             m batches, which the optimizer's average over vision-dp accounts for (ReplicaComms::batches).
//
// Every rank of the group takes part in every exchange, also with no images of its own (an empty slot). The
// exchanges are collectives over the vision tp group, in the same micro-batch order on every rank.
// Tests: examples/qwen3vl/tests/mpi_trainer_reshard.cpp (vision tp 2 over tp 1: the losses of the tower whole on
// each rank; a non-finite micro-batch on one rank), examples/qwen3vl/tests/mpi_trainer_pipeline.cpp (with stages).
#include <cstdint>
#include <vector>

#include "vlpar/comm/communicator.hpp"
#include "vlpar/core/batch.hpp"
#include "vlpar/core/context.hpp"
#include "vlpar/core/status.hpp"
#include "vlpar/core/tensor.hpp"

namespace qwen3vl {

/// Which slot of a wide vision tp group this rank serves (inactive: the group nests in the language tp group).
struct VisionSlots {
  vlpar::comm::Communicator* group = nullptr;  // the vision tp group
  int tp = 1;                                  // the language model's tp size (a divisor of the group's size)

  bool active() const { return group != nullptr && group->size() > tp; }
  int slots() const { return active() ? group->size() / tp : 1; }
  int slot() const { return active() ? group->rank() / tp : 0; }
};

/// Every slot's images of one modality, in slot order.
struct SharedImages {
  vlpar::Tensor pixels;                    // [Σ_s P_s, patch_dim]
  std::vector<vlpar::VisionGrid> grids;    // slot 0's grids, then slot 1's, …
  std::vector<int64_t> tokens;             // [m + 1] prefix sums of the slots' merged tokens
};

/// @brief The images of every slot (collective over the group). `pixels` [P, patch_dim] (may be empty) and
/// `grids` are this rank's; `merge` is the spatial merge size (merged tokens of a grid = t·h·w / merge²).
vlpar::Result<SharedImages> share_images(const vlpar::Context& ctx, const VisionSlots& s, vlpar::TensorView pixels,
                                         const std::vector<vlpar::VisionGrid>& grids, int64_t patch_dim,
                                         int64_t merge);

/// @brief all [tokens.back(), D] = every slot's rows, slot s's at [tokens[s], tokens[s + 1]) from its first rank's
/// `mine` [n_s, D] (collective over the group; this rank's own rows are copied, the others broadcast).
vlpar::Status share_rows(const VisionSlots& s, const std::vector<int64_t>& tokens, vlpar::TensorView all,
                         vlpar::TensorView mine);

}  // namespace qwen3vl
