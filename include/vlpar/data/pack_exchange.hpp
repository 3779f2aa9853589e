#pragma once
// Data-parallel vision balancing of packed micro-batches (issue 5, item 6): the packs of one optimizer step are
// re-dealt over the data-parallel ranks so that no rank straggles on image-heavy batches.
//
// Every dp rank builds K packs from its own disjoint share of the data (loader.hpp). exchange_balanced_packs then
//   1. all-gathers the K pack vision costs (packing.hpp vision_cost: patches plus attention pairs per segment) and
//      the K serialised sizes of every rank; global pack g = r·K + i is pack i of rank r;
//   2. assigns the K·dp packs to ranks, K each, by balance_packs (greedy LPT; the same pure function on every
//      rank, so every rank computes the same assignment without further agreement);
//   3. sends each pack that now belongs to another rank (serialize_packed_batch bytes, tag = g) and receives its
//      own; a rank returns its K packs in ascending g.
// The result is a pure function of all ranks' inputs: deterministic, and every pack is trained on exactly once.
// Resume is unaffected: each rank's loader state after its K packs is what checkpoints hold.
// Without a communicator, or with one rank, the packs are returned unchanged.
//
// serialize_packed_batch / deserialize_packed_batch: a versioned little-endian byte image of every PackedBatch
// field; a truncated or inconsistent image is an error naming the defect (never a crash).
// Tests: tests/unit/test_pack_exchange.cpp (byte round trip, corrupt images), tests/mpi/test_pack_exchange_ranks.cpp
// (np 2 and 4: image-heavy packs concentrated on rank 0 are spread; every pack arrives once, byte-identical; shared
// without vision input from any root, a root's error reaches every rank).
#include <cstdint>
#include <span>
#include <vector>

#include "vlpar/comm/communicator.hpp"
#include "vlpar/core/status.hpp"
#include "vlpar/data/packing.hpp"

namespace vlpar::data {

/// @brief Every field of `batch` as bytes (format version 1).
std::vector<uint8_t> serialize_packed_batch(const PackedBatch& batch);
/// @brief The PackedBatch of serialize_packed_batch's bytes. Errors: a wrong magic/version, a truncated image,
/// lengths that disagree (e.g. labels vs ids, pixels vs grids), trailing bytes.
Result<PackedBatch> deserialize_packed_batch(std::span<const uint8_t> bytes);

/// @brief Pipeline data sharing (spec A5.2: pixels only on stage 0): the packs of one step are loaded on `root` of
/// `group` only (the pipeline rank of stage 0) and every other rank receives them without their vision input
/// (pixels, grids and the per-sample image and video counts removed; num_images, num_videos and vision_patches
/// kept): the later stages read the tokens, labels, sample bounds and MRoPE positions, which the packs carry.
/// `root_packs` is the root's load result (ignored elsewhere): an error there is sent to every rank, whose call
/// then fails naming the root (so no rank waits for packs that never come). Collective over `group`; the root gets
/// its packs back unchanged.
Result<std::vector<PackedBatch>> share_packs_without_vision(comm::Communicator& group, int root,
                                                            Result<std::vector<PackedBatch>> root_packs);

/// What one exchange did (for logs and the trainer's summary).
struct PackBalanceReport {
  double max_rank_cost_before = 0.0;  // the most loaded rank's Σ cost with its own packs
  double max_rank_cost_after = 0.0;   // ... after the exchange
  double mean_rank_cost = 0.0;        // Σ all costs / dp (the ideal)
  int64_t packs_sent = 0;             // by this rank
  int64_t packs_received = 0;         // by this rank
};

/// @brief Re-deals `local` (this rank's K packs; every rank must pass the same K >= 1) over the ranks of `dp`
/// (file comment). Collective over `dp`. Errors: K differing between ranks (named), communication errors.
Result<std::vector<PackedBatch>> exchange_balanced_packs(comm::Communicator* dp, std::vector<PackedBatch> local,
                                                         const VisionCostModel& cost_model = {},
                                                         PackBalanceReport* report = nullptr);

}  // namespace vlpar::data
