#pragma once
// Sharded, reshardable, atomic training checkpoints (spec/formats-and-conventions.md §1 DCP note, §5).
//
// On disk, one committed checkpoint is a directory
//   <root>/step-<N>/rank-<r:05d>.safetensors   one per rank r of the saving world: the tensor shards rank r wrote,
//                                              under their checkpoint names, each with its LOCAL shape; the
//                                              "__metadata__" key "vlpar.checkpoint" holds this rank's sharding
//                                              JSON (below) and "vlpar.rank_state" the rank's free-form JSON.
//   <root>/step-<N>/meta.json                  written last by rank 0: the commit marker and the global index.
//   <root>/latest                              "step-<N>\n", replaced atomically after each commit.
// Sharding JSON of one tensor (DCP style, enough to rebuild the full tensor without knowing the old layout):
//   {"dtype":"BF16", "shape":[full dims], "shard_dim":d (-1 replicated),
//    "pieces":[[local_begin, full_begin, length], ...]}      along dim d; [] when replicated
//   A tensor split along a second dim (ParamShard::inner_dim: expert weights under expert tensor parallelism, the
//   experts along dim 0 and each expert's width along d2 > d) adds "inner_dim":d2 and "inner_pieces":[[l, f, n], ...];
//   the rank holds every (piece, inner piece) box.
// meta.json: {"format":"vlpar-checkpoint", "version":2, "step":N, "world_size":W, "layout":{caller's JSON},
//   "user":{caller's JSON}, "files":[{"rank":r, "name":"rank-0000r.safetensors", "bytes":size}, ...],
//   "tensors":{name: {"dtype", "shape", "shard_dim", ["inner_dim",] "chunks":[{"rank":r, "pieces":[[l, f, n], ...]
//   [, "inner_pieces":[...]]}, ...]}}}
// Version 2 added the inner dim: a checkpoint with one is written as version 2, any other as version 1 (what older
// builds read); both load.
//
// Save protocol (save_checkpoint; the three phases are public so one process can play every rank in tests):
//   prepare (rank 0)   : delete leftovers of crashed saves (step-*.tmp, step-*.deleting, latest.tmp.*), create a
//                        fresh <root>/step-<N>.tmp/                                            — all ranks wait
//   write_shard (each) : rank-<r>.safetensors into step-<N>.tmp/ (tmp file, fsync, rename, fsync dir)
//                                                                 — all ranks wait; any rank's error aborts all
//   commit (rank 0)    : open every rank file's header and check the union (names, dtypes, full shapes agree;
//                        each tensor's pieces tile its full shape; replicas = identical pieces), write meta.json
//                        (fsync file + dir), rename step-<N>.tmp → step-<N> (an existing step-<N> is swapped out
//                        atomically with renameat2(RENAME_EXCHANGE) and then deleted), fsync root, replace `latest`,
//                        then keep_last: older committed checkpoints are renamed to step-<M>.deleting and removed.
// A process killed anywhere in this sequence leaves the previous checkpoint loadable: readers only ever consider
// directories named exactly step-<N> that hold meta.json, and `latest` only names committed ones.
//
// Load (load_checkpoint): for each destination tensor in the NEW layout, the saved pieces that intersect its pieces
// are copied straight from the memory-mapped rank files (only those bytes are read; the full tensor is never
// materialised), so a checkpoint saved at TP=2×DP=2 loads at TP=1 or TP=4 bit for bit. Validation: meta.json present
// and consistent, every rank file present with the size meta.json recorded, each loaded tensor's pieces tile its full
// shape exactly once (identical pieces on several ranks are replicas: one copy is read, optionally compared; boxes
// of a two-dim split must be pairwise disjoint and cover the full area),
// full shape equal to the destination's, and its dtype too, except that a float tensor loads into another float dtype
// (converted: an f32 master into a bf16 value, a bf16 value into an f32 one). Every error names the checkpoint
// directory, and the file and tensor.
//
// Test: tests/unit/test_checkpoint.cpp (round trips, resharding with simulated ranks, corrupt checkpoints, crash
// points, SIGKILL during saves), tests/mpi/test_checkpoint_reshard.cpp (mpirun -np 4: TP2×DP2 → TP1 / TP4).
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "vlpar/comm/communicator.hpp"
#include "vlpar/core/status.hpp"
#include "vlpar/core/tensor.hpp"
#include "vlpar/core/shard.hpp"

namespace vlpar::io {

/// One tensor of a checkpoint as this rank holds it (to save) or wants it (to load).
struct CheckpointTensor {
  std::string name;     // unique key in the checkpoint ("model.layers.0.mlp.down_proj.weight", "optim.m.<param>", ...)
  TensorView local;     // this rank's shard, shaped shard.local_shape(); save: CPU or CUDA, any strides;
                        // load: contiguous, CPU or CUDA (filled through a host staging buffer)
  ParamShard shard; // full_shape, shard_dim (−1 = replicated) and pieces; name/param_id/init are not used
  int replica = 0;      // save: ranks holding an identical copy of this shard (e.g. the dp replicas of a tp shard)
                        // number themselves 0..R−1 and only replica 0 writes it. Ignored by load.
};

/// @brief A tensor every rank holds whole (norm weights, scalars such as the optimizer step, RNG words).
CheckpointTensor replicated_tensor(std::string name, TensorView local, int replica = 0);
/// @brief A tensor laid out as `shard` describes (its full_shape, shard_dim and pieces).
CheckpointTensor sharded_tensor(std::string name, TensorView local, const ParamShard& shard, int replica = 0);

/// @brief The replica number of this rank's copy of a tp shard in a tp × dp layout: the ranks holding the same
/// pieces are the dp replicas times the tp ranks with identical pieces (all tp ranks for a replicated tensor,
/// tp / H_kv for a replicated kv head), numbered dp_rank · copies + tp_rank mod copies; replica 0 writes.
int replica_index(const ParamShard& shard, int tp, int tp_rank, int dp_rank);

/// What one rank saves.
struct CheckpointWriteSpec {
  std::string root;                            // checkpoints live in <root>/step-<step>/ (created as needed)
  int64_t step = 0;                            // >= 0
  int rank = -1;                               // −1: from the communicator (0 without one); else must match it
  int world_size = -1;                         // −1: from the communicator (1 without one); else must match it
  std::vector<CheckpointTensor> tensors;       // this rank's shards (names unique within the rank)
  std::string layout_json = "{}";              // rank 0: the parallel layout, e.g. {"tp":2,"dp":2} (meta.json)
  std::string user_json = "{}";                // rank 0: LR schedule, RNG, data-iterator state, config (meta.json)
  std::string rank_json = "{}";                // this rank's own state (its data position, RNG), in its rank file
  int keep_last = 0;                           // > 0: after the commit keep the newest K committed checkpoints
                                               // at or below this step; higher steps (an abandoned run) are kept
  /// Called after each phase with its name: "prepared", "shard_written", "verified", "meta_written", "renamed",
  /// "latest_written", "pruned". For fault-injection tests (they kill the process there); null = none.
  std::function<void(std::string_view phase)> on_phase;
};

/// @brief Saves one checkpoint: collective over `world` (every rank calls it with its own tensors and the same
/// root/step), or single-process when `world` is null. `world` must accept CPU tensors (MPI or single backend).
/// On success every rank returns Ok after the commit. If any rank fails before the rename, every rank returns an
/// error (the failing rank's own, the others one naming that rank) and nothing is committed: the previous checkpoint
/// stays the latest. A failure after the rename (replacing `latest`) is reported too, the checkpoint then exists;
/// failures of keep_last deletions are only logged (the new checkpoint is committed either way).
Status save_checkpoint(const CheckpointWriteSpec& spec, comm::Communicator* world);

// The phases of save_checkpoint, for callers (tests) that play every rank in one process. The spec's rank and
// world_size must be explicit (>= 0). Order: prepare_checkpoint (once) → write_checkpoint_shard (every rank) →
// commit_checkpoint (once, with rank 0's spec fields layout_json/user_json/keep_last).
Status prepare_checkpoint(const CheckpointWriteSpec& spec);
Status write_checkpoint_shard(const CheckpointWriteSpec& spec);
Status commit_checkpoint(const CheckpointWriteSpec& spec);

/// A committed checkpoint, as meta.json describes it.
struct CheckpointInfo {
  std::string dir;          // <root>/step-<N>
  int64_t step = 0;
  int world_size = 0;       // ranks that saved it
  std::string layout_json;  // as stored (canonical JSON dump: keys sorted, no spaces)
  std::string user_json;    // as stored (canonical JSON dump)
};

/// @brief Reads <dir>/meta.json (error when absent: the checkpoint is incomplete).
Result<CheckpointInfo> read_checkpoint_info(const std::string& dir);
/// @brief Every committed checkpoint under `root` (directories step-<N> holding a valid meta.json), ascending step;
/// empty when `root` does not exist. A step-<N> directory whose meta.json is corrupt is an error naming it.
Result<std::vector<CheckpointInfo>> list_checkpoints(const std::string& root);
/// @brief The checkpoint to resume from: the one `<root>/latest` names when it is committed, else the committed one
/// with the highest step; nullopt when there is none (fresh start). Leftover step-*.tmp directories are ignored.
Result<std::optional<CheckpointInfo>> latest_checkpoint(const std::string& root);

struct CheckpointLoadOptions {
  bool verify_replicas = false;  // compare every replica of a piece with the copy that is read (reads them all)
};

/// @brief Fills each destination tensor (this rank's shard in the new layout) from checkpoint directory `dir`, and
/// `user_json` (when not null) with meta.json's user state. Tensors of the checkpoint that are not asked for are
/// ignored; a tensor asked for that it lacks is an error. Collective-free: every rank reads what it needs.
Status load_checkpoint(const std::string& dir, std::span<const CheckpointTensor> tensors, std::string* user_json,
                       const CheckpointLoadOptions& options = {});

/// @brief The rank_json that rank `rank` of the saving world stored (canonical JSON dump).
Result<std::string> read_checkpoint_rank_json(const std::string& dir, int rank);

/// @brief "rank-00003.safetensors".
std::string checkpoint_rank_file_name(int rank);

}  // namespace vlpar::io
