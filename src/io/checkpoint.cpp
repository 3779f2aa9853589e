// Sharded, reshardable, atomic training checkpoints. See include/vlpar/io/checkpoint.hpp for the format and the
// save protocol. Test: tests/unit/test_checkpoint.cpp, tests/mpi/test_checkpoint_reshard.cpp.
#include "vlpar/io/checkpoint.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <tuple>

#include "dims_string.hpp"
#include "vlpar/core/box_walk.hpp"
#include "vlpar/core/log.hpp"
#include "vlpar/io/safetensors.hpp"

namespace vlpar::io {

using detail::dims_string;

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr int kFormatVersion = 2;  // 2: a second split dim (inner_dim, inner_pieces); reads 1 and 2, writes 1
                                   // when no tensor has one (so that older builds still read those)
constexpr const char* kFormatName = "vlpar-checkpoint";
constexpr const char* kShardingKey = "vlpar.checkpoint";   // rank-file "__metadata__" key: this rank's sharding JSON
constexpr const char* kRankStateKey = "vlpar.rank_state";  // rank-file "__metadata__" key: the rank's own JSON
constexpr const char* kMetaFile = "meta.json";
constexpr const char* kLatestFile = "latest";

std::string step_name(int64_t step) { return fmt::format("step-{}", step); }
std::string join(const std::string& dir, std::string_view name) { return (fs::path(dir) / name).string(); }

/// The step of a directory named exactly "step-<digits><suffix>", else nullopt.
std::optional<int64_t> parse_step_name(std::string_view name, std::string_view suffix) {
  constexpr std::string_view prefix = "step-";
  if (name.size() <= prefix.size() + suffix.size() || name.substr(0, prefix.size()) != prefix ||
      name.substr(name.size() - suffix.size()) != suffix)
    return std::nullopt;
  const std::string_view digits = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  if (digits.empty() || digits.size() > 18) return std::nullopt;
  int64_t v = 0;
  for (const char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
  }
  return v;
}

Status fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return VLPAR_STATUS(StatusCode::kIoError, "cannot open directory '{}' to fsync it: {}", dir, std::strerror(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) return VLPAR_STATUS(StatusCode::kIoError, "fsync of directory '{}' failed: {}", dir, std::strerror(err));
  return Status::Ok();
}

Result<std::string> read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return VLPAR_STATUS(StatusCode::kIoError, "cannot read '{}': {}", path, std::strerror(errno));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Status write_text_file_atomic(const std::string& path, std::string_view text) {
  const std::span<const std::byte> piece(reinterpret_cast<const std::byte*>(text.data()), text.size());
  return atomic_write_file(path, std::span<const std::span<const std::byte>>(&piece, 1));
}

/// Parses caller JSON text (`what` names it in errors).
Result<json> parse_user_json(std::string_view text, std::string_view what) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  VLPAR_CHECK(!j.is_discarded(), "checkpoint {} is not valid JSON: '{}'", what,
              text.size() > 200 ? std::string(text.substr(0, 200)) + "..." : std::string(text));
  return j;
}

std::string dump(const json& j, int indent = -1) { return j.dump(indent, ' ', false, json::error_handler_t::replace); }

uint64_t fnv1a(std::string_view s) {
  uint64_t h = 1469598103934665603ull;
  for (const unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// ---- shard descriptions -----------------------------------------------------------------------------------------

/// Checks the pieces of one split dim: local ranges tile [0, Σ length) in some order, full ranges fit and are
/// disjoint.
Status check_pieces(const std::vector<ShardPiece>& pieces, int dim, int64_t full, std::string_view ctx,
                    const std::string& name) {
  std::vector<ShardPiece> by_local = pieces, by_full = pieces;
  for (const ShardPiece& p : pieces)
    VLPAR_CHECK(p.length >= 0 && p.local_begin >= 0 && p.full_begin >= 0 && p.full_begin + p.length <= full,
                "{}: tensor '{}' piece (local {}, full {}, length {}) does not fit dim {} of size {}", ctx, name,
                p.local_begin, p.full_begin, p.length, dim, full);
  std::sort(by_local.begin(), by_local.end(), [](auto& a, auto& b) { return a.local_begin < b.local_begin; });
  int64_t at = 0;
  for (const ShardPiece& p : by_local) {
    VLPAR_CHECK(p.local_begin == at, "{}: tensor '{}' pieces do not tile its local dim {}: a piece starts at local {} "
                "where {} was expected", ctx, name, dim, p.local_begin, at);
    at += p.length;
  }
  std::sort(by_full.begin(), by_full.end(), [](auto& a, auto& b) { return a.full_begin < b.full_begin; });
  int64_t end = 0;
  for (const ShardPiece& p : by_full) {
    if (p.length == 0) continue;
    VLPAR_CHECK(p.full_begin >= end, "{}: tensor '{}' pieces overlap in the full tensor at dim {} index {}", ctx,
                name, dim, p.full_begin);
    end = p.full_begin + p.length;
  }
  return Status::Ok();
}

/// Checks one tensor's shard description and its local view; `ctx` prefixes errors ("saving checkpoint '<dir>'").
Status check_tensor(const CheckpointTensor& t, std::string_view ctx, bool loading) {
  const ParamShard& s = t.shard;
  VLPAR_CHECK(!t.name.empty(), "{}: a tensor has an empty name", ctx);
  const int nd = s.full_shape.ndim;
  VLPAR_CHECK(nd >= 0 && nd <= kMaxDims, "{}: tensor '{}' has rank {}", ctx, t.name, nd);
  for (int d = 0; d < nd; ++d)
    VLPAR_CHECK(s.full_shape[d] >= 0, "{}: tensor '{}' has full shape {} with a negative size", ctx, t.name,
                s.full_shape.to_string());
  VLPAR_CHECK(s.shard_dim >= -1 && s.shard_dim < nd, "{}: tensor '{}' has shard_dim {} but its full shape {} has {} dims",
              ctx, t.name, s.shard_dim, s.full_shape.to_string(), nd);
  if (s.shard_dim < 0) {
    VLPAR_CHECK(s.pieces.empty() && s.inner_dim < 0, "{}: tensor '{}' is replicated (shard_dim -1) but lists {} pieces "
                "or an inner dim {}", ctx, t.name, s.pieces.size(), s.inner_dim);
  } else {
    VLPAR_RETURN_IF_ERROR(check_pieces(s.pieces, s.shard_dim, s.full_shape[s.shard_dim], ctx, t.name));
  }
  if (s.inner_dim >= 0 || !s.inner_pieces.empty()) {
    VLPAR_CHECK(s.inner_dim > s.shard_dim && s.inner_dim < nd && s.shard_dim >= 0, "{}: tensor '{}' has inner_dim {} "
                "with shard_dim {} (it must come after the shard dim, inside the {} dims)", ctx, t.name, s.inner_dim,
                s.shard_dim, nd);
    VLPAR_RETURN_IF_ERROR(check_pieces(s.inner_pieces, s.inner_dim, s.full_shape[s.inner_dim], ctx, t.name));
  }
  VLPAR_CHECK(t.local.shape == s.local_shape(), "{}: tensor '{}' is {} but its shard is {}", ctx, t.name,
              t.local.to_string(), s.local_shape().to_string());
  VLPAR_CHECK(t.local.data != nullptr || t.local.numel() == 0, "{}: tensor '{}' ({}) has null data", ctx, t.name,
              t.local.to_string());
  if (loading)
    VLPAR_CHECK(t.local.is_contiguous(), "{}: destination tensor '{}' ({}) is not contiguous", ctx, t.name,
                t.local.to_string());
  else
    VLPAR_CHECK(t.replica >= 0, "{}: tensor '{}' has replica {} < 0", ctx, t.name, t.replica);
  return Status::Ok();
}

json dims_json(const Shape& s) {
  json a = json::array();
  for (int d = 0; d < s.ndim; ++d) a.push_back(s[d]);
  return a;
}

json pieces_json(const std::vector<ShardPiece>& pieces) {
  json a = json::array();
  for (const ShardPiece& p : pieces) a.push_back(json::array({p.local_begin, p.full_begin, p.length}));
  return a;
}

// ---- the global index (meta.json "tensors") ---------------------------------------------------------------------

struct Chunk {                          // what one rank holds of one tensor
  int rank = 0;
  std::vector<ShardPiece> pieces;   // along the tensor's shard dim; empty when replicated
  int64_t local_dim = 0;                // Σ lengths: the size of the shard dim in the rank file
  std::vector<ShardPiece> inner;        // along the inner dim (empty without one): the rank holds pieces × inner
  int64_t inner_local_dim = 0;
};

struct IndexEntry {
  std::string dtype;                    // safetensors spelling
  std::vector<int64_t> shape;           // full
  int shard_dim = -1;
  int inner_dim = -1;                   // a second split dim (after shard_dim), or −1
  std::vector<Chunk> chunks;            // ascending rank
};

/// One piece of the saved tensor as some rank holds it (replicated tensors: one "piece" = the whole tensor).
struct SavedPiece {
  int64_t full_begin = 0, length = 0;   // along shard_dim (whole dim 0 range when replicated, unused)
  int64_t local_begin = 0;
  size_t chunk = 0;                     // index into IndexEntry::chunks
  int64_t inner_full_begin = 0, inner_length = 0, inner_local_begin = 0;  // along inner_dim (unused without one)
};

/// Parses a sharding description (rank metadata entry or meta.json index entry) without its chunks.
Status parse_entry_head(const json& j, IndexEntry& e, std::string_view ctx, std::string_view name) {
  VLPAR_CHECK(j.is_object() && j.contains("dtype") && j["dtype"].is_string() && j.contains("shape") &&
                  j["shape"].is_array() && j.contains("shard_dim") && j["shard_dim"].is_number_integer(),
              "{}: the description of tensor '{}' lacks dtype/shape/shard_dim", ctx, name);
  e.dtype = j["dtype"].get<std::string>();
  e.shape.clear();
  for (const json& d : j["shape"]) {
    VLPAR_CHECK(d.is_number_integer() && d.get<int64_t>() >= 0, "{}: tensor '{}' has a bad full shape {}", ctx, name,
                dump(j["shape"]));
    e.shape.push_back(d.get<int64_t>());
  }
  VLPAR_CHECK(e.shape.size() <= size_t(kMaxDims), "{}: tensor '{}' has rank {} > {}", ctx, name, e.shape.size(), kMaxDims);
  e.shard_dim = j["shard_dim"].get<int>();
  VLPAR_CHECK(e.shard_dim >= -1 && e.shard_dim < int(e.shape.size()), "{}: tensor '{}' has shard_dim {} for shape {}",
              ctx, name, e.shard_dim, dump(j["shape"]));
  if (j.contains("inner_dim")) {
    VLPAR_CHECK(j["inner_dim"].is_number_integer(), "{}: tensor '{}' has a non-integer inner_dim", ctx, name);
    e.inner_dim = j["inner_dim"].get<int>();
    VLPAR_CHECK(e.shard_dim >= 0 && e.inner_dim > e.shard_dim && e.inner_dim < int(e.shape.size()), "{}: tensor '{}' "
                "has inner_dim {} with shard_dim {} for shape {}", ctx, name, e.inner_dim, e.shard_dim,
                dump(j["shape"]));
  }
  return Status::Ok();
}

/// Parses one piece list ([[local_begin, full_begin, length], ...]) and checks that it tiles [0, Σ length) and
/// fits the full dim; returns Σ length.
Result<int64_t> parse_pieces(const json& pieces, int64_t full, std::vector<ShardPiece>& out, int rank,
                             std::string_view ctx, std::string_view name) {
  VLPAR_CHECK(pieces.is_array(), "{}: tensor '{}' on rank {} has no piece list", ctx, name, rank);
  for (const json& p : pieces) {
    VLPAR_CHECK(p.is_array() && p.size() == 3 && p[0].is_number_integer() && p[1].is_number_integer() &&
                    p[2].is_number_integer(),
                "{}: tensor '{}' on rank {} has a malformed piece {} (expected [local_begin, full_begin, length])", ctx,
                name, rank, dump(p));
    out.push_back({p[0].get<int64_t>(), p[1].get<int64_t>(), p[2].get<int64_t>()});
  }
  std::vector<ShardPiece> by_local = out;
  std::sort(by_local.begin(), by_local.end(), [](auto& a, auto& b) { return a.local_begin < b.local_begin; });
  int64_t local = 0;
  for (const ShardPiece& p : by_local) {
    VLPAR_CHECK(p.local_begin == local && p.length >= 0 && p.full_begin >= 0 && p.full_begin + p.length <= full,
                "{}: tensor '{}' on rank {}: piece [local {}, full {}, length {}] is inconsistent (local dim so far {}, "
                "full dim {})", ctx, name, rank, p.local_begin, p.full_begin, p.length, local, full);
    local += p.length;
  }
  return local;
}

/// One rank's chunk from the object holding its "pieces" (and "inner_pieces" when the tensor has an inner dim).
Result<Chunk> parse_chunk(const json& holder, int rank, const IndexEntry& e, std::string_view ctx,
                          std::string_view name) {
  Chunk c;
  c.rank = rank;
  const json pieces = holder.is_object() ? holder.value("pieces", json()) : json();
  VLPAR_CHECK(pieces.is_array(), "{}: tensor '{}' on rank {} has no piece list", ctx, name, rank);
  if (e.shard_dim < 0) {
    VLPAR_CHECK(pieces.empty(), "{}: tensor '{}' is replicated but rank {} lists pieces", ctx, name, rank);
    return c;
  }
  VLPAR_ASSIGN_OR_RETURN(c.local_dim, parse_pieces(pieces, e.shape[size_t(e.shard_dim)], c.pieces, rank, ctx, name));
  if (e.inner_dim >= 0) {
    VLPAR_ASSIGN_OR_RETURN(c.inner_local_dim, parse_pieces(holder.value("inner_pieces", json()),
                                                           e.shape[size_t(e.inner_dim)], c.inner, rank, ctx, name));
  }
  return c;
}

/// The shape rank `c.rank` stored for this tensor.
std::vector<int64_t> local_dims(const IndexEntry& e, const Chunk& c) {
  std::vector<int64_t> s = e.shape;
  if (e.shard_dim >= 0) s[size_t(e.shard_dim)] = c.local_dim;
  if (e.inner_dim >= 0) s[size_t(e.inner_dim)] = c.inner_local_dim;
  return s;
}


/// The pieces to read, one per distinct full range (the lowest rank's copy), after checking that the saved pieces
/// tile the full tensor exactly once; `replicas` receives every other copy of a read piece, paired with it.
Result<std::vector<SavedPiece>> plan_box_reads(const IndexEntry& e, std::string_view ctx, std::string_view name,
                                               std::vector<std::pair<SavedPiece, SavedPiece>>* replicas);

Result<std::vector<SavedPiece>> plan_reads(const IndexEntry& e, std::string_view ctx, std::string_view name,
                                           std::vector<std::pair<SavedPiece, SavedPiece>>* replicas) {
  if (e.inner_dim >= 0) return plan_box_reads(e, ctx, name, replicas);
  std::vector<SavedPiece> out;
  if (e.shard_dim < 0) {
    VLPAR_CHECK(!e.chunks.empty(), "{}: no rank holds tensor '{}'", ctx, name);
    out.push_back({0, 0, 0, 0});
    if (replicas)
      for (size_t c = 1; c < e.chunks.size(); ++c) replicas->push_back({out[0], SavedPiece{0, 0, 0, c}});
    return out;
  }
  std::vector<SavedPiece> all;
  for (size_t c = 0; c < e.chunks.size(); ++c)
    for (const ShardPiece& p : e.chunks[c].pieces)
      if (p.length > 0) all.push_back({p.full_begin, p.length, p.local_begin, c});
  std::sort(all.begin(), all.end(), [&](const SavedPiece& a, const SavedPiece& b) {
    if (a.full_begin != b.full_begin) return a.full_begin < b.full_begin;
    if (a.length != b.length) return a.length < b.length;
    return e.chunks[a.chunk].rank < e.chunks[b.chunk].rank;
  });
  const int64_t full = e.shape[size_t(e.shard_dim)];
  const int d = e.shard_dim;
  int64_t covered = 0;
  for (const SavedPiece& p : all) {
    if (!out.empty() && p.full_begin == out.back().full_begin && p.length == out.back().length) {
      if (replicas) replicas->push_back({out.back(), p});
      continue;
    }
    if (p.full_begin < covered) {
      const SavedPiece& q = out.back();
      return VLPAR_STATUS(StatusCode::kInvalidArgument,
                          "{}: tensor '{}' pieces overlap along dim {}: [{}, {}) in {} and [{}, {}) in {} (only identical "
                          "pieces may repeat)", ctx, name, d, q.full_begin, q.full_begin + q.length,
                          checkpoint_rank_file_name(e.chunks[q.chunk].rank), p.full_begin, p.full_begin + p.length,
                          checkpoint_rank_file_name(e.chunks[p.chunk].rank));
    }
    VLPAR_CHECK(p.full_begin == covered, "{}: tensor '{}' has a hole: indices [{}, {}) along dim {} (of {}) are held by "
                "no rank file", ctx, name, covered, p.full_begin, d, full);
    out.push_back(p);
    covered = p.full_begin + p.length;
  }
  VLPAR_CHECK(covered == full, "{}: tensor '{}' has a hole: indices [{}, {}) along dim {} (of {}) are held by no rank "
              "file", ctx, name, covered, full, d, full);
  return out;
}

/// plan_reads for a tensor split along two dims: each rank holds boxes (piece × inner piece). Identical boxes are
/// replicas; the distinct ones must be pairwise disjoint and their areas add up to the full (dim × inner dim) area,
/// which together mean they tile it exactly once.
Result<std::vector<SavedPiece>> plan_box_reads(const IndexEntry& e, std::string_view ctx, std::string_view name,
                                               std::vector<std::pair<SavedPiece, SavedPiece>>* replicas) {
  std::vector<SavedPiece> all, out;
  for (size_t c = 0; c < e.chunks.size(); ++c)
    for (const ShardPiece& p : e.chunks[c].pieces)
      for (const ShardPiece& q : e.chunks[c].inner)
        if (p.length > 0 && q.length > 0)
          all.push_back({p.full_begin, p.length, p.local_begin, c, q.full_begin, q.length, q.local_begin});
  const auto key = [](const SavedPiece& a) {
    return std::tuple(a.full_begin, a.inner_full_begin, a.length, a.inner_length);
  };
  std::sort(all.begin(), all.end(), [&](const SavedPiece& a, const SavedPiece& b) {
    if (key(a) != key(b)) return key(a) < key(b);
    return e.chunks[a.chunk].rank < e.chunks[b.chunk].rank;
  });
  const auto box = [&](const SavedPiece& p) {
    return fmt::format("[{}, {}) × [{}, {}) in {}", p.full_begin, p.full_begin + p.length, p.inner_full_begin,
                       p.inner_full_begin + p.inner_length, checkpoint_rank_file_name(e.chunks[p.chunk].rank));
  };
  const auto overlap = [](int64_t a, int64_t n, int64_t b, int64_t m) { return a < b + m && b < a + n; };
  int64_t area = 0;
  for (const SavedPiece& p : all) {
    if (!out.empty() && key(p) == key(out.back())) {
      if (replicas) replicas->push_back({out.back(), p});
      continue;
    }
    for (const SavedPiece& q : out)
      VLPAR_CHECK(!overlap(p.full_begin, p.length, q.full_begin, q.length) ||
                      !overlap(p.inner_full_begin, p.inner_length, q.inner_full_begin, q.inner_length),
                  "{}: tensor '{}' pieces overlap along dims {} × {}: {} and {} (only identical pieces may repeat)",
                  ctx, name, e.shard_dim, e.inner_dim, box(q), box(p));
    out.push_back(p);
    area += p.length * p.inner_length;
  }
  const int64_t full = e.shape[size_t(e.shard_dim)] * e.shape[size_t(e.inner_dim)];
  VLPAR_CHECK(area == full, "{}: tensor '{}' has a hole: the rank files hold {} of the {} × {} index pairs along dims "
              "{} × {}", ctx, name, area, e.shape[size_t(e.shard_dim)], e.shape[size_t(e.inner_dim)], e.shard_dim,
              e.inner_dim);
  return out;
}

// ---- box copies between local layouts ----------------------------------------------------------------------------

/// A region of the full tensor held contiguously by one layout: along `dim` the full range [full_begin, +length)
/// sits at local index local_begin; every other dim is whole. dim = −1: the whole tensor.
struct Cut {
  int dim = -1;
  int64_t full_begin = 0, length = 0, local_begin = 0;
};
struct Region {
  Cut cut[2];  // dim −1: unused; a tensor split along two dims (ParamShard::inner_dim) uses both
};

/// Intersection of two regions as a box of full coordinates; false when empty.
bool intersect(const std::vector<int64_t>& full, const Region& a, const Region& b, int64_t* lo, int64_t* size) {
  const int nd = int(full.size());
  for (int j = 0; j < nd; ++j) {
    int64_t l = 0, h = full[size_t(j)];
    for (const Region* r : {&a, &b})
      for (const Cut& c : r->cut)
        if (c.dim == j) {
          l = std::max(l, c.full_begin);
          h = std::min(h, c.full_begin + c.length);
        }
    if (h <= l) return false;
    lo[j] = l;
    size[j] = h - l;
  }
  return true;
}

/// The regions a destination shard holds: one per box (ParamShard::boxes), cut along its split dims.
std::vector<Region> regions_of(const ParamShard& s) {
  std::vector<Region> out;
  for (const ShardBox& b : s.boxes()) {
    Region r;
    for (int k = 0; k < 2; ++k) {
      const int d = k == 0 ? s.shard_dim : s.inner_dim;
      if (d >= 0) r.cut[k] = {d, b.full_begin[d], b.length[d], b.local_begin[d]};
    }
    out.push_back(r);
  }
  return out;
}

/// The region of the full tensor one saved piece (or box) covers, in its rank file's layout.
Region saved_region(const IndexEntry& e, const SavedPiece& p) {
  Region r;
  if (e.shard_dim >= 0) r.cut[0] = {e.shard_dim, p.full_begin, p.length, p.local_begin};
  if (e.inner_dim >= 0) r.cut[1] = {e.inner_dim, p.inner_full_begin, p.inner_length, p.inner_local_begin};
  return r;
}

/// Local coordinates (in the layout of region r) of the full-coordinate point lo.
void to_local(const Region& r, int nd, const int64_t* lo, int64_t* out) {
  for (int j = 0; j < nd; ++j) out[j] = lo[j];
  for (const Cut& c : r.cut)
    if (c.dim >= 0) out[c.dim] = lo[c.dim] - c.full_begin + c.local_begin;
}

// ---- meta.json ----------------------------------------------------------------------------------------------------

struct FileRecord {
  int rank = 0;
  std::string name;
  uint64_t bytes = 0;
};

struct ParsedMeta {
  CheckpointInfo info;
  std::vector<FileRecord> files;                 // index = rank
  std::map<std::string, IndexEntry, std::less<>> tensors;
};

Result<ParsedMeta> read_meta(const std::string& dir, bool with_index) {
  const std::string path = join(dir, kMetaFile);
  std::error_code ec;
  if (!fs::exists(path, ec))
    return VLPAR_STATUS(StatusCode::kIoError, "checkpoint '{}' is incomplete: it has no {} (the commit marker; a save "
                        "was interrupted, or this is not a vlpar checkpoint)", dir, kMetaFile);
  VLPAR_ASSIGN_OR_RETURN(std::string text, read_text_file(path));
  const std::string ctx = fmt::format("checkpoint '{}' ({})", dir, kMetaFile);
  ParsedMeta m;
  try {
    const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
    VLPAR_CHECK(!j.is_discarded() && j.is_object(), "{}: not a JSON object", ctx);
    VLPAR_CHECK(j.value("format", std::string()) == kFormatName, "{}: \"format\" is not \"{}\"", ctx, kFormatName);
    VLPAR_CHECK(j.contains("version") && j["version"].is_number_integer() && j["version"].get<int>() >= 1 &&
                    j["version"].get<int>() <= kFormatVersion,
                "{}: unsupported \"version\" (this build reads versions 1 to {})", ctx, kFormatVersion);
    VLPAR_CHECK(j.contains("step") && j["step"].is_number_integer() && j.contains("world_size") &&
                    j["world_size"].is_number_integer() && j["world_size"].get<int64_t>() >= 1 &&
                    j.contains("files") && j["files"].is_array() && j.contains("tensors") && j["tensors"].is_object(),
                "{}: missing or bad step/world_size/files/tensors", ctx);
    m.info.dir = dir;
    m.info.step = j["step"].get<int64_t>();
    m.info.world_size = j["world_size"].get<int>();
    m.info.layout_json = dump(j.value("layout", json::object()));
    m.info.user_json = dump(j.value("user", json::object()));
    VLPAR_CHECK(j["files"].size() == size_t(m.info.world_size), "{}: {} files listed for world_size {}", ctx,
                j["files"].size(), m.info.world_size);
    for (size_t r = 0; r < j["files"].size(); ++r) {
      const json& f = j["files"][r];
      VLPAR_CHECK(f.is_object() && f.value("rank", -1) == int(r) && f.contains("name") && f["name"].is_string() &&
                      f.contains("bytes") && f["bytes"].is_number_unsigned(),
                  "{}: files[{}] is malformed: {}", ctx, r, dump(f));
      const std::string name = f["name"].get<std::string>();
      VLPAR_CHECK(name == checkpoint_rank_file_name(int(r)), "{}: files[{}] is named '{}'", ctx, r, name);
      m.files.push_back({int(r), name, f["bytes"].get<uint64_t>()});
    }
    if (!with_index) return m;
    for (const auto& [name, tj] : j["tensors"].items()) {
      IndexEntry e;
      VLPAR_RETURN_IF_ERROR(parse_entry_head(tj, e, ctx, name));
      VLPAR_CHECK(tj.contains("chunks") && tj["chunks"].is_array(), "{}: tensor '{}' has no chunk list", ctx, name);
      for (const json& cj : tj["chunks"]) {
        VLPAR_CHECK(cj.is_object() && cj.contains("rank") && cj["rank"].is_number_integer() &&
                        cj["rank"].get<int64_t>() >= 0 && cj["rank"].get<int64_t>() < m.info.world_size &&
                        cj.contains("pieces"),
                    "{}: tensor '{}' has a malformed chunk {}", ctx, name, dump(cj));
        VLPAR_ASSIGN_OR_RETURN(Chunk c, parse_chunk(cj, cj["rank"].get<int>(), e, ctx, name));
        e.chunks.push_back(std::move(c));
      }
      m.tensors.emplace(name, std::move(e));
    }
  } catch (const json::exception& ex) {
    return VLPAR_STATUS(StatusCode::kInvalidArgument, "{}: {}", ctx, ex.what());
  }
  return m;
}

// ---- pruning ------------------------------------------------------------------------------------------------------

/// Committed step directories under root (name step-<N> holding meta.json), unordered.
std::vector<std::pair<int64_t, std::string>> committed_dirs(const std::string& root) {
  std::vector<std::pair<int64_t, std::string>> out;
  std::error_code ec;
  for (const fs::directory_entry& de : fs::directory_iterator(root, ec)) {
    const std::string name = de.path().filename().string();
    const auto step = parse_step_name(name, "");
    std::error_code ec2;
    if (step && de.is_directory(ec2) && fs::exists(de.path() / kMetaFile, ec2)) out.emplace_back(*step, de.path().string());
  }
  return out;
}

/// Renames then deletes a directory, so that it stops being a committed checkpoint atomically.
Status delete_checkpoint_dir(const std::string& root, int64_t step) {
  const std::string dir = join(root, step_name(step));
  const std::string doomed = join(root, step_name(step) + ".deleting");
  std::error_code ec;
  fs::remove_all(doomed, ec);
  if (::rename(dir.c_str(), doomed.c_str()) != 0)
    return VLPAR_STATUS(StatusCode::kIoError, "cannot rename '{}' to '{}' for deletion: {}", dir, doomed, std::strerror(errno));
  fs::remove_all(doomed, ec);
  if (ec) return VLPAR_STATUS(StatusCode::kIoError, "cannot delete '{}': {}", doomed, ec.message());
  return Status::Ok();
}

void phase(const CheckpointWriteSpec& spec, std::string_view name) {
  if (spec.on_phase) spec.on_phase(name);
}

Status check_common(const CheckpointWriteSpec& spec, std::string_view what) {
  VLPAR_CHECK(!spec.root.empty(), "{}: the checkpoint root directory is empty", what);
  VLPAR_CHECK(spec.step >= 0, "{}: step {} < 0", what, spec.step);
  VLPAR_CHECK(spec.keep_last >= 0, "{}: keep_last {} < 0", what, spec.keep_last);
  return Status::Ok();
}

Status check_explicit_rank(const CheckpointWriteSpec& spec, std::string_view what) {
  VLPAR_CHECK(spec.world_size >= 1 && spec.rank >= 0 && spec.rank < spec.world_size,
              "{}: rank {} / world_size {} must be explicit with 0 <= rank < world_size", what, spec.rank,
              spec.world_size);
  return Status::Ok();
}

/// Every rank learns whether any rank failed in `phase_name`; returns this rank's own error first.
Status agree(comm::Communicator* world, const Status& mine, std::string_view phase_name, const std::string& where) {
  if (world == nullptr) return mine;
  int32_t failed = mine.ok() ? 0 : world->rank() + 1;  // max → the highest failing rank + 1
  VLPAR_RETURN_IF_ERROR(world->all_reduce(TensorView(&failed, DType::kI32, {1}), comm::ReduceOp::kMax));
  if (!mine.ok()) return mine;
  if (failed != 0)
    return VLPAR_STATUS(StatusCode::kIoError, "saving checkpoint '{}': rank {} failed in the {} phase (see its error)",
                        where, failed - 1, phase_name);
  return Status::Ok();
}

}  // namespace

// ---- public helpers --------------------------------------------------------------------------------------------------

std::string checkpoint_rank_file_name(int rank) { return fmt::format("rank-{:05d}.safetensors", rank); }

CheckpointTensor replicated_tensor(std::string name, TensorView local, int replica) {
  CheckpointTensor t;
  t.name = std::move(name);
  t.local = local;
  t.shard.full_shape = local.shape;
  t.shard.shard_dim = -1;
  t.replica = replica;
  return t;
}

CheckpointTensor sharded_tensor(std::string name, TensorView local, const ParamShard& shard, int replica) {
  CheckpointTensor t;
  t.name = std::move(name);
  t.local = local;
  t.shard = shard;
  t.replica = replica;
  return t;
}

int replica_index(const ParamShard& shard, int tp, int tp_rank, int dp_rank) {
  const int64_t copies = shard.local_shape().numel() * tp / std::max<int64_t>(1, shard.full_shape.numel());
  return int(dp_rank * copies + tp_rank % std::max<int64_t>(1, copies));
}

// ---- save ----------------------------------------------------------------------------------------------------------

Status prepare_checkpoint(const CheckpointWriteSpec& spec) {
  const std::string what = fmt::format("preparing checkpoint step {} in '{}'", spec.step, spec.root);
  VLPAR_RETURN_IF_ERROR(check_common(spec, what));
  std::error_code ec;
  fs::create_directories(spec.root, ec);
  VLPAR_CHECK_CODE(!ec, StatusCode::kIoError, "{}: cannot create the root directory: {}", what, ec.message());
  // Leftovers of crashed saves and prunes: never committed, or already on their way out.
  std::vector<fs::path> stale;
  for (const fs::directory_entry& de : fs::directory_iterator(spec.root, ec)) {
    const std::string name = de.path().filename().string();
    if (parse_step_name(name, ".tmp") || parse_step_name(name, ".deleting") ||
        name.rfind(std::string(kLatestFile) + ".tmp.", 0) == 0)
      stale.push_back(de.path());
  }
  VLPAR_CHECK_CODE(!ec, StatusCode::kIoError, "{}: cannot list the root directory: {}", what, ec.message());
  for (const fs::path& p : stale) {
    fs::remove_all(p, ec);
    VLPAR_CHECK_CODE(!ec, StatusCode::kIoError, "{}: cannot delete the leftover '{}': {}", what, p.string(), ec.message());
  }
  const std::string tmp = join(spec.root, step_name(spec.step) + ".tmp");
  VLPAR_CHECK_CODE(fs::create_directory(tmp, ec) && !ec, StatusCode::kIoError, "{}: cannot create '{}': {}", what, tmp,
                   ec ? ec.message() : "it exists");
  VLPAR_RETURN_IF_ERROR(fsync_dir(spec.root));
  phase(spec, "prepared");
  return Status::Ok();
}

Status write_checkpoint_shard(const CheckpointWriteSpec& spec) {
  const std::string tmp = join(spec.root, step_name(spec.step) + ".tmp");
  const std::string what = fmt::format("saving checkpoint '{}' (rank {})", tmp, spec.rank);
  VLPAR_RETURN_IF_ERROR(check_common(spec, what));
  VLPAR_RETURN_IF_ERROR(check_explicit_rank(spec, what));
  std::error_code ec;
  VLPAR_CHECK_CODE(fs::is_directory(tmp, ec), StatusCode::kIoError,
                   "{}: the directory does not exist (prepare_checkpoint runs first, on rank 0)", what);
  VLPAR_ASSIGN_OR_RETURN(const json rank_state, parse_user_json(spec.rank_json, "rank_json"));
  std::set<std::string_view> names;
  std::vector<NamedTensor> named;
  json sharding = json::object();
  for (const CheckpointTensor& t : spec.tensors) {
    VLPAR_RETURN_IF_ERROR(check_tensor(t, what, /*loading=*/false));
    VLPAR_CHECK(names.insert(t.name).second, "{}: tensor name '{}' appears twice", what, t.name);
    if (t.replica != 0) continue;  // another rank writes the identical copy
    named.push_back({t.name, t.local});
    sharding[t.name] = {{"dtype", std::string(safetensors_dtype_name(t.local.dtype))},
                        {"shape", dims_json(t.shard.full_shape)},
                        {"shard_dim", t.shard.shard_dim},
                        {"pieces", pieces_json(t.shard.pieces)}};
    if (t.shard.inner_dim >= 0) {
      sharding[t.name]["inner_dim"] = t.shard.inner_dim;
      sharding[t.name]["inner_pieces"] = pieces_json(t.shard.inner_pieces);
    }
  }
  bool two_dim = false;
  for (const CheckpointTensor& t : spec.tensors) two_dim = two_dim || t.shard.inner_dim >= 0;
  const json meta = {{"version", two_dim ? kFormatVersion : 1}, {"step", spec.step}, {"rank", spec.rank},
                     {"world_size", spec.world_size}, {"tensors", sharding}};
  const std::map<std::string, std::string> metadata = {{kShardingKey, dump(meta)}, {kRankStateKey, dump(rank_state)}};
  VLPAR_RETURN_IF_ERROR(write_safetensors(join(tmp, checkpoint_rank_file_name(spec.rank)), named, metadata));
  phase(spec, "shard_written");
  return Status::Ok();
}

Status commit_checkpoint(const CheckpointWriteSpec& spec) {
  const std::string tmp = join(spec.root, step_name(spec.step) + ".tmp");
  const std::string final_dir = join(spec.root, step_name(spec.step));
  const std::string what = fmt::format("committing checkpoint '{}'", tmp);
  VLPAR_RETURN_IF_ERROR(check_common(spec, what));
  VLPAR_CHECK(spec.world_size >= 1, "{}: world_size {} must be explicit (>= 1)", what, spec.world_size);
  VLPAR_ASSIGN_OR_RETURN(const json layout, parse_user_json(spec.layout_json, "layout_json"));
  VLPAR_ASSIGN_OR_RETURN(const json user, parse_user_json(spec.user_json, "user_json"));
  std::error_code ec;
  VLPAR_CHECK_CODE(fs::is_directory(tmp, ec), StatusCode::kIoError, "{}: the directory does not exist", what);

  // Every rank's file: present, valid, and its own description consistent with its tensors and with the others.
  json files = json::array();
  std::map<std::string, IndexEntry, std::less<>> index;
  for (int r = 0; r < spec.world_size; ++r) {
    const std::string path = join(tmp, checkpoint_rank_file_name(r));
    VLPAR_CHECK_CODE(fs::exists(path, ec), StatusCode::kIoError, "{}: rank {}'s file '{}' is missing", what, r, path);
    VLPAR_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::open(path));
    const std::string ctx = fmt::format("{}: '{}'", what, path);
    const auto it = f.metadata().find(kShardingKey);
    VLPAR_CHECK(it != f.metadata().end(), "{}: no \"{}\" metadata", ctx, kShardingKey);
    try {
      const json j = json::parse(it->second, nullptr, false);
      VLPAR_CHECK(!j.is_discarded() && j.is_object() && j.value("rank", -1) == r &&
                      j.value("world_size", -1) == spec.world_size && j.value("step", int64_t(-1)) == spec.step &&
                      j.contains("tensors") && j["tensors"].is_object(),
                  "{}: its metadata does not describe rank {} of {} at step {}", ctx, r, spec.world_size, spec.step);
      VLPAR_CHECK(f.tensors().size() == j["tensors"].size(), "{}: holds {} tensors but describes {}", ctx,
                  f.tensors().size(), j["tensors"].size());
      for (const auto& [name, tj] : j["tensors"].items()) {
        IndexEntry e;
        VLPAR_RETURN_IF_ERROR(parse_entry_head(tj, e, ctx, name));
        VLPAR_ASSIGN_OR_RETURN(Chunk c, parse_chunk(tj, r, e, ctx, name));
        const TensorInfo* info = f.find(name);
        VLPAR_CHECK(info != nullptr && info->dtype_name == e.dtype && info->dims == local_dims(e, c),
                    "{}: tensor '{}' is stored as {} {} but described as {} {}", ctx, name,
                    info ? info->dtype_name : "(absent)", info ? dims_string(info->dims) : "", e.dtype,
                    dims_string(local_dims(e, c)));
        auto [slot, fresh] = index.try_emplace(name, e);
        IndexEntry& g = slot->second;
        VLPAR_CHECK(fresh || (g.dtype == e.dtype && g.shape == e.shape && g.shard_dim == e.shard_dim &&
                              g.inner_dim == e.inner_dim),
                    "{}: tensor '{}' is {} {} shard_dim {} inner_dim {} here but {} {} shard_dim {} inner_dim {} on "
                    "rank {}", ctx, name, e.dtype, dims_string(e.shape), e.shard_dim, e.inner_dim, g.dtype,
                    dims_string(g.shape), g.shard_dim, g.inner_dim, g.chunks[0].rank);
        g.chunks.push_back(std::move(c));
      }
    } catch (const json::exception& ex) {
      return VLPAR_STATUS(StatusCode::kInvalidArgument, "{}: bad metadata: {}", ctx, ex.what());
    }
    const uintmax_t bytes = fs::file_size(path, ec);
    VLPAR_CHECK_CODE(!ec, StatusCode::kIoError, "{}: cannot stat '{}': {}", what, path, ec.message());
    files.push_back({{"rank", r}, {"name", checkpoint_rank_file_name(r)}, {"bytes", uint64_t(bytes)}});
  }
  json tensors = json::object();
  for (const auto& [name, e] : index) {
    VLPAR_RETURN_IF_ERROR(plan_reads(e, what, name, nullptr).status());  // a save that could not be loaded fails now
    json chunks = json::array();
    for (const Chunk& c : e.chunks) {
      chunks.push_back({{"rank", c.rank}, {"pieces", pieces_json(c.pieces)}});
      if (e.inner_dim >= 0) chunks.back()["inner_pieces"] = pieces_json(c.inner);
    }
    tensors[name] = {{"dtype", e.dtype}, {"shape", e.shape}, {"shard_dim", e.shard_dim}, {"chunks", chunks}};
    if (e.inner_dim >= 0) tensors[name]["inner_dim"] = e.inner_dim;
  }
  phase(spec, "verified");

  // The commit marker, written last into the still-temporary directory (file and directory fsync'd).
  bool two_dim = false;
  for (const auto& [name, e] : index) two_dim = two_dim || e.inner_dim >= 0;
  const json meta = {{"format", kFormatName}, {"version", two_dim ? kFormatVersion : 1}, {"step", spec.step},
                     {"world_size", spec.world_size}, {"layout", layout}, {"user", user}, {"files", files},
                     {"tensors", tensors}};
  VLPAR_RETURN_IF_ERROR(write_text_file_atomic(join(tmp, kMetaFile), dump(meta, 1) + "\n"));
  phase(spec, "meta_written");

  // Publish: rename into place. A committed step-<N> already there (a re-run of that step) is swapped out
  // atomically, so there is no moment without a committed step-<N>; the old copy is deleted afterwards.
  if (fs::exists(final_dir, ec)) {
    if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, final_dir.c_str(), RENAME_EXCHANGE) != 0)
      return VLPAR_STATUS(StatusCode::kIoError, "{}: cannot swap it with the existing '{}': {}", what, final_dir,
                          std::strerror(errno));
    VLPAR_RETURN_IF_ERROR(fsync_dir(spec.root));
    fs::remove_all(tmp, ec);  // now the old step-<N>; a failure leaves a step-*.tmp the next save removes
  } else if (::rename(tmp.c_str(), final_dir.c_str()) != 0) {
    return VLPAR_STATUS(StatusCode::kIoError, "{}: rename to '{}' failed: {}", what, final_dir, std::strerror(errno));
  }
  VLPAR_RETURN_IF_ERROR(fsync_dir(spec.root));
  phase(spec, "renamed");

  VLPAR_RETURN_IF_ERROR(write_text_file_atomic(join(spec.root, kLatestFile), step_name(spec.step) + "\n"));
  phase(spec, "latest_written");

  if (spec.keep_last > 0) {
    std::vector<std::pair<int64_t, std::string>> dirs = committed_dirs(spec.root);
    std::sort(dirs.begin(), dirs.end(), std::greater<>());
    int kept = 0;
    for (const auto& [step, dir] : dirs) {
      if (step > spec.step) continue;  // a later step of an abandoned run: not ours to judge
      if (kept < spec.keep_last) {
        ++kept;
        continue;
      }
      const Status s = delete_checkpoint_dir(spec.root, step);
      if (!s.ok()) log_warn("keep_last: {}", s.message());  // the new checkpoint is committed either way
    }
    const Status s = fsync_dir(spec.root);
    if (!s.ok()) log_warn("keep_last: {}", s.message());
  }
  phase(spec, "pruned");
  return Status::Ok();
}

Status save_checkpoint(const CheckpointWriteSpec& spec, comm::Communicator* world) {
  CheckpointWriteSpec s = spec;
  const std::string where = join(spec.root, step_name(spec.step));
  if (world != nullptr) {
    VLPAR_CHECK(world->backend() != comm::Backend::kNCCL,
                "saving checkpoint '{}': the communicator must take CPU tensors (MPI or single), not NCCL", where);
    VLPAR_CHECK((spec.rank < 0 || spec.rank == world->rank()) && (spec.world_size < 0 || spec.world_size == world->size()),
                "saving checkpoint '{}': spec says rank {} of {} but the communicator is rank {} of {}", where, spec.rank,
                spec.world_size, world->rank(), world->size());
    s.rank = world->rank();
    s.world_size = world->size();
    // Every rank must save the same step into the same root.
    const auto h = int64_t(fnv1a(spec.root) >> 1);
    int64_t v[4] = {spec.step, -spec.step, h, -h};
    VLPAR_RETURN_IF_ERROR(world->all_reduce(TensorView(v, DType::kI64, {4}), comm::ReduceOp::kMax));
    VLPAR_CHECK(v[0] == -v[1] && v[2] == -v[3], "saving checkpoint '{}': the ranks disagree on the step ({} .. {}) or "
                "the root directory", where, -v[1], v[0]);
  } else {
    s.rank = spec.rank < 0 ? 0 : spec.rank;
    s.world_size = spec.world_size < 0 ? 1 : spec.world_size;
    VLPAR_CHECK(s.rank == 0 && s.world_size == 1, "saving checkpoint '{}': rank {} of {} without a communicator; use "
                "prepare/write_checkpoint_shard/commit_checkpoint to play several ranks in one process", where, s.rank,
                s.world_size);
  }
  const bool leader = s.rank == 0;
  VLPAR_RETURN_IF_ERROR(agree(world, leader ? prepare_checkpoint(s) : Status::Ok(), "prepare", where));
  VLPAR_RETURN_IF_ERROR(agree(world, write_checkpoint_shard(s), "write", where));
  return agree(world, leader ? commit_checkpoint(s) : Status::Ok(), "commit", where);
}

// ---- discovery -----------------------------------------------------------------------------------------------------

Result<CheckpointInfo> read_checkpoint_info(const std::string& dir) {
  VLPAR_ASSIGN_OR_RETURN(ParsedMeta m, read_meta(dir, /*with_index=*/false));
  return m.info;
}

Result<std::vector<CheckpointInfo>> list_checkpoints(const std::string& root) {
  std::vector<CheckpointInfo> out;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return out;
  std::vector<std::pair<int64_t, std::string>> dirs = committed_dirs(root);
  std::sort(dirs.begin(), dirs.end());
  for (const auto& [step, dir] : dirs) {
    VLPAR_ASSIGN_OR_RETURN(CheckpointInfo info, read_checkpoint_info(dir));
    VLPAR_CHECK(info.step == step, "checkpoint '{}': the directory says step {} but {} says {}", dir, step, kMetaFile,
                info.step);
    out.push_back(std::move(info));
  }
  return out;
}

Result<std::optional<CheckpointInfo>> latest_checkpoint(const std::string& root) {
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return std::optional<CheckpointInfo>();
  const std::string latest = join(root, kLatestFile);
  if (fs::exists(latest, ec)) {
    auto text = read_text_file(latest);
    std::string name = text.ok() ? text.value() : std::string();
    while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
    const auto step = parse_step_name(name, "");
    if (step) {
      auto info = read_checkpoint_info(join(root, name));
      if (info.ok() && info->step == *step) return std::optional<CheckpointInfo>(std::move(info).value());
    }
    log_warn("checkpoint root '{}': '{}' does not name a committed checkpoint ('{}'); using the highest committed step",
             root, latest, name);
  }
  VLPAR_ASSIGN_OR_RETURN(std::vector<CheckpointInfo> all, list_checkpoints(root));
  if (all.empty()) return std::optional<CheckpointInfo>();
  return std::optional<CheckpointInfo>(std::move(all.back()));
}

Result<std::string> read_checkpoint_rank_json(const std::string& dir, int rank) {
  const std::string path = join(dir, checkpoint_rank_file_name(rank));
  VLPAR_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::open(path));
  const auto it = f.metadata().find(kRankStateKey);
  VLPAR_CHECK(it != f.metadata().end(), "checkpoint file '{}' has no \"{}\" metadata", path, kRankStateKey);
  return it->second;
}

// ---- load ----------------------------------------------------------------------------------------------------------

Status load_checkpoint(const std::string& dir, std::span<const CheckpointTensor> tensors, std::string* user_json,
                       const CheckpointLoadOptions& options) {
  VLPAR_ASSIGN_OR_RETURN(ParsedMeta m, read_meta(dir, /*with_index=*/true));
  const std::string ctx = fmt::format("loading checkpoint '{}'", dir);
  // Every rank's file must be there, with the size recorded at the commit (a truncated copy is caught here).
  for (const FileRecord& f : m.files) {
    const std::string path = join(dir, f.name);
    std::error_code ec;
    const uintmax_t size = fs::file_size(path, ec);
    VLPAR_CHECK_CODE(!ec, StatusCode::kIoError, "{}: rank {}'s file '{}' is missing or unreadable: {}", ctx, f.rank,
                     path, ec.message());
    VLPAR_CHECK_CODE(size == f.bytes, StatusCode::kIoError, "{}: '{}' is {} bytes but {} recorded {} (truncated or "
                     "overwritten)", ctx, path, size, kMetaFile, f.bytes);
  }
  std::vector<std::optional<SafetensorsFile>> files(m.files.size());
  auto file_of = [&](int rank) -> Result<const SafetensorsFile*> {
    std::optional<SafetensorsFile>& f = files[size_t(rank)];
    if (!f) {
      VLPAR_ASSIGN_OR_RETURN(SafetensorsFile opened, SafetensorsFile::open(join(dir, m.files[size_t(rank)].name)));
      f.emplace(std::move(opened));
    }
    return &*f;
  };
  // The bytes of tensor `name` in rank `c.rank`'s file, after checking its dtype and local shape.
  auto saved_bytes = [&](const std::string& name, const IndexEntry& e, const Chunk& c) -> Result<const std::byte*> {
    VLPAR_ASSIGN_OR_RETURN(const SafetensorsFile* f, file_of(c.rank));
    const TensorInfo* info = f->find(name);
    VLPAR_CHECK(info != nullptr, "{}: '{}' lacks tensor '{}' that {} places there", ctx, f->path(), name, kMetaFile);
    VLPAR_CHECK(info->dtype_name == e.dtype && info->dims == local_dims(e, c), "{}: tensor '{}' in '{}' is {} {} but "
                "{} says {} {}", ctx, name, f->path(), info->dtype_name, dims_string(info->dims), kMetaFile, e.dtype,
                dims_string(local_dims(e, c)));
    return f->bytes(*info).data();
  };

  for (const CheckpointTensor& t : tensors) {
    VLPAR_RETURN_IF_ERROR(check_tensor(t, ctx, /*loading=*/true));
    const auto it = m.tensors.find(t.name);
    VLPAR_CHECK(it != m.tensors.end(), "{}: it has no tensor '{}' ({} tensors saved)", ctx, t.name, m.tensors.size());
    const IndexEntry& e = it->second;
    // A float tensor loads into another float dtype (an f32 master into a bf16 run's values and back): read in the
    // saved dtype, then converted (widening exact, narrowing rounded to nearest even).
    std::optional<DType> saved_dt;
    for (DType d : {DType::kF32, DType::kBF16, DType::kF16, DType::kF64, DType::kI32, DType::kI64})
      if (e.dtype == safetensors_dtype_name(d)) saved_dt = d;
    const bool convert = saved_dt && *saved_dt != t.local.dtype && is_floating(*saved_dt) &&
                         is_floating(t.local.dtype);
    VLPAR_CHECK(e.dtype == safetensors_dtype_name(t.local.dtype) || convert, "{}: tensor '{}' was saved as {} but "
                "the destination is {}", ctx, t.name, e.dtype, dtype_name(t.local.dtype));
    const DType read_dt = convert ? *saved_dt : t.local.dtype;
    std::vector<int64_t> want(t.shard.full_shape.dims, t.shard.full_shape.dims + t.shard.full_shape.ndim);
    VLPAR_CHECK(e.shape == want, "{}: tensor '{}' has full shape {} but the destination's is {}", ctx, t.name,
                dims_string(e.shape), t.shard.full_shape.to_string());
    std::vector<std::pair<SavedPiece, SavedPiece>> replicas;
    VLPAR_ASSIGN_OR_RETURN(std::vector<SavedPiece> reads,
                           plan_reads(e, ctx, t.name, options.verify_replicas ? &replicas : nullptr));

    // Destination: the view itself on the host, else (device, or another dtype) a host staging buffer in the saved
    // dtype, converted and copied over at the end.
    std::vector<std::byte> staging;
    auto* dst = static_cast<std::byte*>(t.local.data);
    if (!t.local.device.is_cpu() || convert) {
      staging.resize(size_t(t.local.numel()) * dtype_size(read_dt));
      dst = staging.data();
    }
    const int nd = int(e.shape.size());
    const size_t es = dtype_size(read_dt);
    const std::vector<Region> dst_regions = regions_of(t.shard);
    const Shape dshape = t.local.shape;
    auto region_of = [&](const SavedPiece& p) { return saved_region(e, p); };
    for (const SavedPiece& p : reads) {
      const Chunk& c = e.chunks[p.chunk];
      const Region src = region_of(p);
      const std::vector<int64_t> sshape = local_dims(e, c);
      const std::byte* sbytes = nullptr;  // mapped lazily: pieces no destination region needs are never touched
      for (const Region& d : dst_regions) {
        int64_t lo[kMaxDims] = {}, size[kMaxDims] = {}, so[kMaxDims] = {}, dof[kMaxDims] = {};
        if (!intersect(e.shape, src, d, lo, size)) continue;
        if (sbytes == nullptr) {
          VLPAR_ASSIGN_OR_RETURN(sbytes, saved_bytes(t.name, e, c));
        }
        to_local(src, nd, lo, so);
        to_local(d, nd, lo, dof);
        walk_box(nd, size, sshape.data(), so, dshape.dims, dof, [&](int64_t doff, int64_t soff, int64_t n) {
          std::memcpy(dst + size_t(doff) * es, sbytes + size_t(soff) * es, size_t(n) * es);
        });
      }
    }
    // Replicas: each other copy of a piece that was read must equal it byte for byte.
    for (const auto& [a, b] : replicas) {
      const Chunk &ca = e.chunks[a.chunk], &cb = e.chunks[b.chunk];
      VLPAR_ASSIGN_OR_RETURN(const std::byte* pa, saved_bytes(t.name, e, ca));
      VLPAR_ASSIGN_OR_RETURN(const std::byte* pb, saved_bytes(t.name, e, cb));
      const Region ra = region_of(a), rb = region_of(b);
      int64_t lo[kMaxDims] = {}, size[kMaxDims] = {}, oa[kMaxDims] = {}, ob[kMaxDims] = {};
      if (!intersect(e.shape, ra, rb, lo, size)) continue;
      to_local(ra, nd, lo, oa);
      to_local(rb, nd, lo, ob);
      const std::vector<int64_t> sa = local_dims(e, ca), sb = local_dims(e, cb);
      bool same = true;
      walk_box(nd, size, sa.data(), oa, sb.data(), ob, [&](int64_t boff, int64_t aoff, int64_t n) {
        same = same && std::memcmp(pa + size_t(aoff) * es, pb + size_t(boff) * es, size_t(n) * es) == 0;
      });
      const std::string what =
          e.shard_dim < 0   ? std::string("the whole tensor")
          : e.inner_dim < 0 ? fmt::format("[{}, {}) along dim {}", a.full_begin, a.full_begin + a.length, e.shard_dim)
                            : fmt::format("[{}, {}) × [{}, {}) along dims {} × {}", a.full_begin,
                                          a.full_begin + a.length, a.inner_full_begin,
                                          a.inner_full_begin + a.inner_length, e.shard_dim, e.inner_dim);
      VLPAR_CHECK(same, "{}: tensor '{}': the copies of {} in {} and {} differ (replicas must be identical)", ctx,
                  t.name, what, checkpoint_rank_file_name(ca.rank), checkpoint_rank_file_name(cb.rank));
    }
    if (convert && t.local.device.is_cpu()) {
      VLPAR_RETURN_IF_ERROR(convert_(t.local, TensorView(staging.data(), read_dt, t.local.shape)));
    } else if (convert) {
      std::vector<std::byte> host(t.local.nbytes());
      const TensorView hv(host.data(), t.local.dtype, t.local.shape);
      VLPAR_RETURN_IF_ERROR(convert_(hv, TensorView(staging.data(), read_dt, t.local.shape)));
      VLPAR_RETURN_IF_ERROR(copy_(t.local, hv));
    } else if (!t.local.device.is_cpu()) {
      TensorView host(staging.data(), t.local.dtype, t.local.shape);
      VLPAR_RETURN_IF_ERROR(copy_(t.local, host));
    }
  }
  if (user_json != nullptr) *user_json = m.info.user_json;
  return Status::Ok();
}

}  // namespace vlpar::io
