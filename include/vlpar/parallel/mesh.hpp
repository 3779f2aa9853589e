#pragma once
// The device mesh: which world rank holds which coordinate on each parallel axis, and the rank list of every
// group. Pure functions of a validated ParallelConfig (no MPI, no globals), so every layout is unit-tested without
// devices; ProcessGroups (process_groups.hpp) turns the groups into communicators.
//
// Layout (Megatron-Core's RankGenerator): the order string lists axes fastest first; axis i has stride
// Π_{j<i} size_j and rank = Σ coord_i · stride_i. With the default "tp-cp-ep-dp-pp", world 16, tp=2, pp=4 (dp=2):
//   tp groups {0,1} {2,3} ... {14,15}   dp groups {0,2} {1,3} {4,6} ...   pp groups {0,4,8,12} {1,5,9,13} ...
// Three layouts share the world and the order string:
//   attention : tp, cp, dp, pp            (ep slot has size 1)   tp·cp·dp·pp   = world
//   expert    : etp, ep, edp, pp          (cp slot has size 1)   etp·ep·edp·pp = world
//   vision    : vision tp, vision dp, pp  (cp, ep slots size 1)  vtp·vdp·pp    = world
// MoE parallel folding (Megatron-Core "MoE Parallel Folding", Liu et al. 2025, arXiv:2504.14960): attention and
// MoE layers decouple their parallelism. Inside one pipeline stage the same tp·cp·dp ranks are re-read by the
// MoE layers as etp·ep·edp: an expert group may span what the attention layers use as dp, cp and even tp ranks.
// With etp = tp (the default) the ep groups fold over dp×cp only. pp is the one axis both layouts must agree on
// (the pipeline sends activations between stages), which is why pp should stay last in the order.
// The vision encoder (Qwen3-VL's ViT) may use its own TP size, built the same way as the expert layout: vision tp
// takes the tp slot, so with tp first its groups are consecutive rank blocks that nest inside the language
// model's tp groups (vtp | tp) or contain whole ones (tp | vtp): vision all-reduces stay on the fastest links.
// The vision encoder has no context parallelism (images are encoded whole); the rest of a pipeline stage's ranks
// are vision data replicas, over which vision-weight gradients are averaged.
// Test: tests/unit/test_mesh.cpp (ctest --test-dir build/cpu -R Mesh).
#include <array>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "vlpar/core/status.hpp"
#include "vlpar/parallel/parallel_config.hpp"

namespace vlpar::parallel {

/// Where a rank sits in an axis: its group is groups(axis)[group], and it is groups(axis)[group][index].
/// (group, index) are the (color, key) of Communicator::split.
struct GroupSlot {
  int group = 0;
  int index = 0;
  int size = 1;
};

/// @brief A rank grid in Megatron RankGenerator order: sizes[0] varies fastest. Pure, no communication.
class RankGrid {
 public:
  RankGrid() = default;
  /// @param sizes axis sizes, fastest first; each ≥ 1
  explicit RankGrid(std::vector<int> sizes);
  int world() const { return world_; }
  int num_axes() const { return int(sizes_.size()); }
  const std::vector<int>& sizes() const { return sizes_; }
  /// @brief [num_axes] coordinates of `rank` (0 ≤ rank < world), fastest axis first.
  std::vector<int> coords(int rank) const;
  /// @brief Σ coords[i] · stride[i]; -1 if a coordinate is out of range or the count is wrong.
  int rank_of(std::span<const int> coords) const;
  /// @brief The groups varying exactly the masked axes ([num_axes] mask). Groups are listed by their unmasked
  /// coordinates (first unmasked axis fastest); inside a group ranks are ordered by their masked coordinates
  /// (first masked axis fastest), exactly as Megatron's generate_masked_orthogonal_rank_groups.
  std::vector<std::vector<int>> groups(std::span<const bool> mask) const;
  /// @brief Index of `rank`'s group in groups(mask) (the color) and its position in that group (the key).
  GroupSlot slot(std::span<const bool> mask, int rank) const;

 private:
  std::vector<int> sizes_;    // [num_axes]
  std::vector<int> strides_;  // [num_axes], strides_[i] = Π_{j<i} sizes_[j]
  int world_ = 1;
};

/// The five slots of the order string. Layouts put their sizes into these slots.
enum class OrderSlot : uint8_t { kTp, kCp, kEp, kDp, kPp };
/// @brief Parses "tp-cp-ep-dp-pp"-style orders: result[i] is the slot at position i (fastest first). Errors name
/// an unknown axis, a duplicated one or a missing one.
Result<std::array<OrderSlot, 5>> parse_order(std::string_view order);

namespace detail {
/// Megatron's assertion between its decoder and expert rank generators: every layout has the same pp groups.
/// Called by ParallelConfig::validate once the sizes are consistent.
Status check_layouts_agree(const ParallelConfig& cfg, const std::array<OrderSlot, 5>& order);
}  // namespace detail

/// Process groups a rank belongs to. Combined axes group the ranks varying on several coordinates at once.
enum class Axis : uint8_t {
  kTp,        // attention tensor parallel
  kCp,        // context parallel
  kDp,        // data parallel (gradients of dense weights are reduced over dp_cp when cp > 1)
  kPp,        // pipeline stages (the same in all three layouts)
  kDpCp,      // dp × cp: ranks holding the same dense weight shard (gradient reduction, ZeRO-1 sharding)
  kTpCp,      // tp × cp: ranks sharing one dp replica's data within a stage
  kEp,        // expert parallel (MoE token all-to-all)
  kEtp,       // expert tensor parallel
  kEdp,       // expert data parallel: ranks holding the same expert shard (expert gradient reduction)
  kVisionTp,  // vision encoder tensor parallel
  kVisionDp,  // vision encoder data replicas (vision gradient reduction)
};
inline constexpr std::array<Axis, 11> kAllAxes = {Axis::kTp,  Axis::kCp, Axis::kDp,  Axis::kPp,
                                                  Axis::kDpCp, Axis::kTpCp, Axis::kEp, Axis::kEtp,
                                                  Axis::kEdp, Axis::kVisionTp, Axis::kVisionDp};
/// "tp", "cp", "dp", "pp", "dp_cp", "tp_cp", "ep", "etp", "edp", "vision_tp", "vision_dp"
const char* axis_name(Axis axis);

struct AttentionCoord {
  int tp = 0, cp = 0, dp = 0, pp = 0;
  bool operator==(const AttentionCoord&) const = default;
};
struct ExpertCoord {
  int etp = 0, ep = 0, edp = 0, pp = 0;
  bool operator==(const ExpertCoord&) const = default;
};
struct VisionCoord {
  int tp = 0, dp = 0, pp = 0;
  bool operator==(const VisionCoord&) const = default;
};

/// @brief The rank layout of a validated ParallelConfig. Immutable value; copy freely.
class Mesh {
 public:
  /// @brief Validates `cfg` against `dims` (ModelDims{} skips the model checks) and builds the three layouts.
  static Result<Mesh> create(const ParallelConfig& cfg, const ModelDims& dims = {});

  /// The config with dp, etp and vision_tp resolved (never 0).
  const ParallelConfig& config() const { return cfg_; }
  int world() const { return cfg_.world; }
  /// Number of ranks in each group of `axis`.
  int size(Axis axis) const;

  AttentionCoord attention_coord(int rank) const;
  ExpertCoord expert_coord(int rank) const;
  VisionCoord vision_coord(int rank) const;
  /// Inverse of the *_coord functions; -1 when a coordinate is out of range.
  int rank_of(const AttentionCoord& c) const;
  int rank_of(const ExpertCoord& c) const;
  int rank_of(const VisionCoord& c) const;

  /// @brief All groups of `axis` (each rank in exactly one), in Megatron's enumeration order.
  std::vector<std::vector<int>> groups(Axis axis) const;
  /// @brief The group of `rank` on `axis` and its position in it.
  GroupSlot slot(Axis axis, int rank) const;

 private:
  const RankGrid& grid(Axis axis) const;
  std::array<bool, 5> mask(Axis axis) const;  // [5] in order positions

  ParallelConfig cfg_;
  std::array<int, 5> position_{};  // position_[slot] = index of the slot in the order string
  RankGrid attention_, expert_, vision_;
};

}  // namespace vlpar::parallel
