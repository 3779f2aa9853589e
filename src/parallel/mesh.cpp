// The device mesh: Megatron-style rank grids for the attention, expert and vision layouts. See
// include/vlpar/parallel/mesh.hpp. Test: tests/unit/test_mesh.cpp.
#include "vlpar/parallel/mesh.hpp"

#include <fmt/core.h>

namespace vlpar::parallel {

RankGrid::RankGrid(std::vector<int> sizes) : sizes_(std::move(sizes)), strides_(sizes_.size()) {
  world_ = 1;
  for (size_t i = 0; i < sizes_.size(); ++i) {
    strides_[i] = world_;
    world_ *= sizes_[i];
  }
}

std::vector<int> RankGrid::coords(int rank) const {
  std::vector<int> c(sizes_.size());
  for (size_t i = 0; i < sizes_.size(); ++i) c[i] = (rank / strides_[i]) % sizes_[i];
  return c;
}

int RankGrid::rank_of(std::span<const int> coords) const {
  if (coords.size() != sizes_.size()) return -1;
  int rank = 0;
  for (size_t i = 0; i < sizes_.size(); ++i) {
    if (coords[i] < 0 || coords[i] >= sizes_[i]) return -1;
    rank += coords[i] * strides_[i];
  }
  return rank;
}

std::vector<std::vector<int>> RankGrid::groups(std::span<const bool> mask) const {
  // Split the axes into the ones a group varies (masked) and the ones that tell groups apart (unmasked); both
  // lists keep the order-string order, so the first axis of each varies fastest.
  std::vector<int> in_sizes, in_strides, out_sizes, out_strides;
  for (size_t i = 0; i < sizes_.size(); ++i) {
    (mask[i] ? in_sizes : out_sizes).push_back(sizes_[i]);
    (mask[i] ? in_strides : out_strides).push_back(strides_[i]);
  }
  auto offset = [](int index, const std::vector<int>& sizes, const std::vector<int>& strides) {
    int off = 0;
    for (size_t k = 0; k < sizes.size(); ++k) {
      off += (index % sizes[k]) * strides[k];
      index /= sizes[k];
    }
    return off;
  };
  int group_size = 1;
  for (int s : in_sizes) group_size *= s;
  const int num_groups = world_ / group_size;
  std::vector<std::vector<int>> out(static_cast<size_t>(num_groups), std::vector<int>(static_cast<size_t>(group_size)));
  for (int g = 0; g < num_groups; ++g) {
    const int base = offset(g, out_sizes, out_strides);
    for (int i = 0; i < group_size; ++i) out[size_t(g)][size_t(i)] = base + offset(i, in_sizes, in_strides);
  }
  return out;
}

GroupSlot RankGrid::slot(std::span<const bool> mask, int rank) const {
  GroupSlot s{0, 0, 1};
  int group_scale = 1, index_scale = 1;
  for (size_t i = 0; i < sizes_.size(); ++i) {
    const int c = (rank / strides_[i]) % sizes_[i];
    if (mask[i]) {
      s.index += c * index_scale;
      index_scale *= sizes_[i];
    } else {
      s.group += c * group_scale;
      group_scale *= sizes_[i];
    }
  }
  s.size = index_scale;
  return s;
}

Result<std::array<OrderSlot, 5>> parse_order(std::string_view order) {
  static constexpr std::array<std::string_view, 5> kNames = {"tp", "cp", "ep", "dp", "pp"};
  std::array<OrderSlot, 5> out{};
  std::array<bool, 5> seen{};
  size_t count = 0, begin = 0;
  while (begin <= order.size()) {
    size_t end = order.find('-', begin);
    if (end == std::string_view::npos) end = order.size();
    const std::string_view token = order.substr(begin, end - begin);
    size_t slot = 0;
    while (slot < kNames.size() && kNames[slot] != token) ++slot;
    VLPAR_CHECK(slot < kNames.size(), "order '{}' names unknown axis '{}' (known axes: tp, cp, ep, dp, pp)", order,
                token);
    VLPAR_CHECK(!seen[slot], "order '{}' names axis {} twice", order, token);
    seen[slot] = true;  // no duplicates, so at most five tokens get here
    out[count++] = OrderSlot(slot);
    begin = end + 1;
  }
  for (size_t slot = 0; slot < kNames.size(); ++slot)
    VLPAR_CHECK(seen[slot], "order '{}' does not name axis {} (it must name each of tp, cp, ep, dp, pp once)", order,
                kNames[slot]);
  return out;
}

const char* axis_name(Axis axis) {
  switch (axis) {
    case Axis::kTp: return "tp";
    case Axis::kCp: return "cp";
    case Axis::kDp: return "dp";
    case Axis::kPp: return "pp";
    case Axis::kDpCp: return "dp_cp";
    case Axis::kTpCp: return "tp_cp";
    case Axis::kEp: return "ep";
    case Axis::kEtp: return "etp";
    case Axis::kEdp: return "edp";
    case Axis::kVisionTp: return "vision_tp";
    case Axis::kVisionDp: return "vision_dp";
  }
  return "?";
}

namespace {
// Sizes of the five order slots (tp, cp, ep, dp, pp) in each layout; a layout leaves the slots it lacks at 1.
std::array<int, 5> attention_slots(const ParallelConfig& c) { return {c.tp, c.cp, 1, c.dp_size(), c.pp}; }
std::array<int, 5> expert_slots(const ParallelConfig& c) { return {c.etp_size(), 1, c.ep, c.edp_size(), c.pp}; }
std::array<int, 5> vision_slots(const ParallelConfig& c) { return {c.vision_tp_size(), 1, 1, c.vision_dp_size(), c.pp}; }

RankGrid make_grid(const std::array<OrderSlot, 5>& order, const std::array<int, 5>& slot_sizes) {
  std::vector<int> sizes(5);
  for (size_t i = 0; i < 5; ++i) sizes[i] = slot_sizes[size_t(order[i])];
  return RankGrid(std::move(sizes));
}
}  // namespace

// Layout checks that need the grids (validate() calls this after the size checks): the pipeline groups must be
// the same in all layouts, as Megatron asserts for its decoder and expert rank generators.
namespace detail {
Status check_layouts_agree(const ParallelConfig& cfg, const std::array<OrderSlot, 5>& order) {
  std::array<bool, 5> pp_mask{};
  for (size_t i = 0; i < 5; ++i) pp_mask[i] = order[i] == OrderSlot::kPp;
  const auto pp_groups = make_grid(order, attention_slots(cfg)).groups(pp_mask);
  VLPAR_CHECK(make_grid(order, expert_slots(cfg)).groups(pp_mask) == pp_groups,
              "order '{}' gives the MoE layers (etp={}, ep={}) other pipeline groups than the attention layers; "
              "put pp last in the order",
              cfg.order, cfg.etp_size(), cfg.ep);
  VLPAR_CHECK(make_grid(order, vision_slots(cfg)).groups(pp_mask) == pp_groups,
              "order '{}' gives the vision encoder (vision tp={}) other pipeline groups than the language model; "
              "put pp last in the order",
              cfg.order, cfg.vision_tp_size());
  return Status::Ok();
}
}  // namespace detail

Result<Mesh> Mesh::create(const ParallelConfig& cfg, const ModelDims& dims) {
  VLPAR_RETURN_IF_ERROR(cfg.validate(dims));
  VLPAR_ASSIGN_OR_RETURN(const auto order, parse_order(cfg.order));
  Mesh m;
  m.cfg_ = cfg;
  m.cfg_.dp = cfg.dp_size();
  m.cfg_.etp = cfg.etp_size();
  m.cfg_.vision_tp = cfg.vision_tp_size();
  for (size_t i = 0; i < 5; ++i) m.position_[size_t(order[i])] = int(i);
  m.attention_ = make_grid(order, attention_slots(m.cfg_));
  m.expert_ = make_grid(order, expert_slots(m.cfg_));
  m.vision_ = make_grid(order, vision_slots(m.cfg_));
  return m;
}

const RankGrid& Mesh::grid(Axis axis) const {
  switch (axis) {
    case Axis::kEp:
    case Axis::kEtp:
    case Axis::kEdp: return expert_;
    case Axis::kVisionTp:
    case Axis::kVisionDp: return vision_;
    default: return attention_;
  }
}

std::array<bool, 5> Mesh::mask(Axis axis) const {
  std::array<bool, 5> m{};
  auto set = [&](OrderSlot s) { m[size_t(position_[size_t(s)])] = true; };
  switch (axis) {
    case Axis::kTp: set(OrderSlot::kTp); break;
    case Axis::kCp: set(OrderSlot::kCp); break;
    case Axis::kDp: set(OrderSlot::kDp); break;
    case Axis::kPp: set(OrderSlot::kPp); break;
    case Axis::kDpCp:
      set(OrderSlot::kDp);
      set(OrderSlot::kCp);
      break;
    case Axis::kTpCp:
      set(OrderSlot::kTp);
      set(OrderSlot::kCp);
      break;
    case Axis::kEp: set(OrderSlot::kEp); break;
    case Axis::kEtp: set(OrderSlot::kTp); break;   // the expert layout puts etp in the tp slot
    case Axis::kEdp: set(OrderSlot::kDp); break;   // ... and edp in the dp slot
    case Axis::kVisionTp: set(OrderSlot::kTp); break;
    case Axis::kVisionDp: set(OrderSlot::kDp); break;
  }
  return m;
}

int Mesh::size(Axis axis) const { return slot(axis, 0).size; }

AttentionCoord Mesh::attention_coord(int rank) const {
  const auto c = attention_.coords(rank);
  auto at = [&](OrderSlot s) { return c[size_t(position_[size_t(s)])]; };
  return {at(OrderSlot::kTp), at(OrderSlot::kCp), at(OrderSlot::kDp), at(OrderSlot::kPp)};
}
ExpertCoord Mesh::expert_coord(int rank) const {
  const auto c = expert_.coords(rank);
  auto at = [&](OrderSlot s) { return c[size_t(position_[size_t(s)])]; };
  return {at(OrderSlot::kTp), at(OrderSlot::kEp), at(OrderSlot::kDp), at(OrderSlot::kPp)};
}
VisionCoord Mesh::vision_coord(int rank) const {
  const auto c = vision_.coords(rank);
  auto at = [&](OrderSlot s) { return c[size_t(position_[size_t(s)])]; };
  return {at(OrderSlot::kTp), at(OrderSlot::kDp), at(OrderSlot::kPp)};
}

namespace {
// Places per-slot coordinates (tp, cp, ep, dp, pp) at their order positions.
std::array<int, 5> place(const std::array<int, 5>& position, const std::array<int, 5>& by_slot) {
  std::array<int, 5> c{};
  for (size_t s = 0; s < 5; ++s) c[size_t(position[s])] = by_slot[s];
  return c;
}
}  // namespace

int Mesh::rank_of(const AttentionCoord& c) const {
  return attention_.rank_of(place(position_, {c.tp, c.cp, 0, c.dp, c.pp}));
}
int Mesh::rank_of(const ExpertCoord& c) const {
  return expert_.rank_of(place(position_, {c.etp, 0, c.ep, c.edp, c.pp}));
}
int Mesh::rank_of(const VisionCoord& c) const {
  return vision_.rank_of(place(position_, {c.tp, 0, 0, c.dp, c.pp}));
}

std::vector<std::vector<int>> Mesh::groups(Axis axis) const { return grid(axis).groups(mask(axis)); }
GroupSlot Mesh::slot(Axis axis, int rank) const { return grid(axis).slot(mask(axis), rank); }

}  // namespace vlpar::parallel
