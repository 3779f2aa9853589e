// Data-parallel vision balancing of packed micro-batches. See pack_exchange.hpp.
#include "vlpar/data/pack_exchange.hpp"

#include <algorithm>
#include <cstring>
#include <string>

namespace vlpar::data {

namespace {

constexpr char kMagic[4] = {'V', 'P', 'K', 'B'};
constexpr uint32_t kVersion = 1;

class Writer {
 public:
  void raw(const void* p, size_t n) {
    if (n == 0) return;
    const auto* b = static_cast<const uint8_t*>(p);
    out_.insert(out_.end(), b, b + n);
  }
  void u64(uint64_t v) { raw(&v, sizeof v); }
  // The field visitors of visit_fields (same signatures as Reader's).
  Status i64(const int64_t& v, const char*) {
    raw(&v, sizeof v);
    return Status::Ok();
  }
  template <class T>
  Status vec(const std::vector<T>& v, const char*) {
    u64(v.size());
    raw(v.data(), v.size() * sizeof(T));
    return Status::Ok();
  }
  Status grids(const std::vector<VisionGrid>& g, const char*) {
    u64(g.size());
    for (const VisionGrid& x : g) {
      raw(&x.t, sizeof x.t);
      raw(&x.h, sizeof x.h);
      raw(&x.w, sizeof x.w);
    }
    return Status::Ok();
  }
  Status strings(const std::vector<std::string>& s, const char*) {
    u64(s.size());
    for (const std::string& x : s) {
      u64(x.size());
      raw(x.data(), x.size());
    }
    return Status::Ok();
  }
  std::vector<uint8_t> take() { return std::move(out_); }

 private:
  std::vector<uint8_t> out_;
};

// Bounds-checked reads; every failure names the field.
class Reader {
 public:
  explicit Reader(std::span<const uint8_t> b) : b_(b) {}
  Status raw(void* p, size_t n, const char* what) {
    VLPAR_CHECK(n <= b_.size() - pos_, "packed batch bytes: truncated in {} (needs {} bytes at offset {}, {} left)",
                what, n, pos_, b_.size() - pos_);
    if (n > 0) std::memcpy(p, b_.data() + pos_, n);  // an empty vector's data() may be null
    pos_ += n;
    return Status::Ok();
  }
  Result<uint64_t> u64(const char* what) {
    uint64_t v = 0;
    VLPAR_RETURN_IF_ERROR(raw(&v, sizeof v, what));
    return v;
  }
  Status i64(int64_t& v, const char* what) { return raw(&v, sizeof v, what); }
  // A count whose elements of `elem` bytes must fit in what is left (so a corrupt count never allocates wildly).
  Result<uint64_t> count(size_t elem, const char* what) {
    VLPAR_ASSIGN_OR_RETURN(uint64_t n, u64(what));
    VLPAR_CHECK(elem == 0 || n <= (b_.size() - pos_) / elem, "packed batch bytes: {} claims {} entries, only {} bytes left",
                what, n, b_.size() - pos_);
    return n;
  }
  template <class T>
  Status vec(std::vector<T>& v, const char* what) {
    VLPAR_ASSIGN_OR_RETURN(uint64_t n, count(sizeof(T), what));
    v.resize(n);
    return raw(v.data(), n * sizeof(T), what);
  }
  Status grids(std::vector<VisionGrid>& g, const char* what) {
    VLPAR_ASSIGN_OR_RETURN(uint64_t n, count(3 * sizeof(int64_t), what));
    g.resize(n);
    for (VisionGrid& x : g) {
      VLPAR_RETURN_IF_ERROR(i64(x.t, what));
      VLPAR_RETURN_IF_ERROR(i64(x.h, what));
      VLPAR_RETURN_IF_ERROR(i64(x.w, what));
    }
    return Status::Ok();
  }
  Status strings(std::vector<std::string>& s, const char* what) {
    VLPAR_ASSIGN_OR_RETURN(uint64_t n, count(sizeof(uint64_t), what));
    s.resize(n);
    for (std::string& x : s) {
      VLPAR_ASSIGN_OR_RETURN(uint64_t len, count(1, what));
      x.resize(len);
      VLPAR_RETURN_IF_ERROR(raw(x.data(), len, what));
    }
    return Status::Ok();
  }
  size_t left() const { return b_.size() - pos_; }

 private:
  std::span<const uint8_t> b_;
  size_t pos_ = 0;
};

// Every field of a PackedBatch in byte-image order, for the Writer (const batch) and the Reader (mutable batch).
template <class Visitor, class Batch>
Status visit_fields(Visitor& v, Batch& b) {
  VLPAR_RETURN_IF_ERROR(v.vec(b.input_ids, "input_ids"));
  VLPAR_RETURN_IF_ERROR(v.vec(b.labels, "labels"));
  VLPAR_RETURN_IF_ERROR(v.vec(b.cu_seqlens, "cu_seqlens"));
  VLPAR_RETURN_IF_ERROR(v.vec(b.positions, "positions"));
  VLPAR_RETURN_IF_ERROR(v.vec(b.rope_deltas, "rope_deltas"));
  VLPAR_RETURN_IF_ERROR(v.vec(b.pixel_values, "pixel_values"));
  VLPAR_RETURN_IF_ERROR(v.vec(b.pixel_values_videos, "pixel_values_videos"));
  VLPAR_RETURN_IF_ERROR(v.grids(b.image_grids, "image_grids"));
  VLPAR_RETURN_IF_ERROR(v.grids(b.video_grids, "video_grids"));
  VLPAR_RETURN_IF_ERROR(v.vec(b.images_per_sample, "images_per_sample"));
  VLPAR_RETURN_IF_ERROR(v.vec(b.videos_per_sample, "videos_per_sample"));
  VLPAR_RETURN_IF_ERROR(v.strings(b.sample_keys, "sample_keys"));
  for (auto* x : {&b.patch_dim, &b.real_tokens, &b.token_budget, &b.num_images, &b.num_videos, &b.vision_patches,
                  &b.num_label_tokens}) {
    VLPAR_RETURN_IF_ERROR(v.i64(*x, "counters"));
  }
  return Status::Ok();
}

// Σ t·h·w with every dimension in [1, 2^20] (no overflow below 2^60 per grid); an error names the bad grid.
Result<int64_t> patches_of(const std::vector<VisionGrid>& grids, const char* what) {
  int64_t n = 0;
  constexpr int64_t kMax = int64_t(1) << 20;
  for (size_t i = 0; i < grids.size(); ++i) {
    const VisionGrid& g = grids[i];
    VLPAR_CHECK(g.t >= 1 && g.h >= 1 && g.w >= 1 && g.t <= kMax && g.h <= kMax && g.w <= kMax,
                "packed batch bytes: {} grid {} is ({}, {}, {}), each side must be in [1, 2^20]", what, i, g.t, g.h,
                g.w);
    n += g.t * g.h * g.w;
  }
  return n;
}

int64_t sum_of(const std::vector<int64_t>& v) {
  int64_t s = 0;
  for (int64_t x : v) s += x;
  return s;
}

Status check_consistent(const PackedBatch& b) {
  const int64_t n = int64_t(b.input_ids.size());
  VLPAR_CHECK(int64_t(b.labels.size()) == n && int64_t(b.positions.size()) == 3 * n,
              "packed batch bytes: {} ids but {} labels and {} positions (need {} and {})", n, b.labels.size(),
              b.positions.size(), n, 3 * n);
  VLPAR_CHECK(b.cu_seqlens.size() >= 2 && b.cu_seqlens.front() == 0 && b.cu_seqlens.back() == n,
              "packed batch bytes: cu_seqlens must run from 0 to {} ({} entries)", n, b.cu_seqlens.size());
  for (size_t i = 1; i < b.cu_seqlens.size(); ++i)
    VLPAR_CHECK(b.cu_seqlens[i] > b.cu_seqlens[i - 1], "packed batch bytes: cu_seqlens does not increase at entry {}",
                i);
  const size_t samples = b.cu_seqlens.size() - 1;
  // The per-sample vision counts are optional (a batch file may not have them): none, or one per sample.
  const auto per_sample = [samples](const std::vector<int64_t>& v) { return v.empty() || v.size() == samples; };
  VLPAR_CHECK(b.sample_keys.size() == samples && per_sample(b.images_per_sample) &&
                  per_sample(b.videos_per_sample) && b.rope_deltas.size() == samples,
              "packed batch bytes: {} samples but {} keys, {} image counts, {} video counts, {} rope deltas", samples,
              b.sample_keys.size(), b.images_per_sample.size(), b.videos_per_sample.size(), b.rope_deltas.size());
  VLPAR_CHECK((b.images_per_sample.empty() || sum_of(b.images_per_sample) == int64_t(b.image_grids.size())) &&
                  (b.videos_per_sample.empty() || sum_of(b.videos_per_sample) == int64_t(b.video_grids.size())),
              "packed batch bytes: per-sample counts give {} images and {} videos, the grids {} and {}",
              sum_of(b.images_per_sample), sum_of(b.videos_per_sample), b.image_grids.size(), b.video_grids.size());
  VLPAR_ASSIGN_OR_RETURN(const int64_t image_patches, patches_of(b.image_grids, "image"));
  VLPAR_ASSIGN_OR_RETURN(const int64_t video_patches, patches_of(b.video_grids, "video"));
  VLPAR_CHECK(b.patch_dim >= 0 && b.patch_dim <= (int64_t(1) << 20) &&
                  int64_t(b.pixel_values.size()) == image_patches * b.patch_dim &&
                  int64_t(b.pixel_values_videos.size()) == video_patches * b.patch_dim,
              "packed batch bytes: pixel values ({} image, {} video floats) disagree with the grids and patch_dim {}",
              b.pixel_values.size(), b.pixel_values_videos.size(), b.patch_dim);
  return Status::Ok();
}

}  // namespace

std::vector<uint8_t> serialize_packed_batch(const PackedBatch& b) {
  Writer w;
  w.raw(kMagic, sizeof kMagic);
  w.raw(&kVersion, sizeof kVersion);
  (void)visit_fields(w, b);  // the writer cannot fail
  return w.take();
}

Result<PackedBatch> deserialize_packed_batch(std::span<const uint8_t> bytes) {
  Reader r(bytes);
  char magic[4] = {};
  uint32_t version = 0;
  VLPAR_RETURN_IF_ERROR(r.raw(magic, sizeof magic, "magic"));
  VLPAR_CHECK(std::memcmp(magic, kMagic, sizeof kMagic) == 0, "packed batch bytes: bad magic (not a serialised pack)");
  VLPAR_RETURN_IF_ERROR(r.raw(&version, sizeof version, "version"));
  VLPAR_CHECK(version == kVersion, "packed batch bytes: format version {}, this build reads {}", version, kVersion);
  PackedBatch b;
  VLPAR_RETURN_IF_ERROR(visit_fields(r, b));
  VLPAR_CHECK(r.left() == 0, "packed batch bytes: {} trailing bytes after the last field", r.left());
  VLPAR_RETURN_IF_ERROR(check_consistent(b));
  return b;
}

Result<std::vector<PackedBatch>> exchange_balanced_packs(comm::Communicator* dp, std::vector<PackedBatch> local,
                                                         const VisionCostModel& cost_model, PackBalanceReport* report) {
  const int64_t k = int64_t(local.size());
  VLPAR_CHECK(k >= 1, "exchange_balanced_packs: no packs to balance");
  std::vector<double> mine(static_cast<size_t>(k));
  for (int64_t i = 0; i < k; ++i) mine[size_t(i)] = vision_cost(local[size_t(i)], cost_model);
  const int ranks = dp ? dp->size() : 1;
  if (ranks == 1) {
    if (report) {
      double sum = 0;
      for (double c : mine) sum += c;
      *report = PackBalanceReport{sum, sum, sum, 0, 0};
    }
    return local;
  }
  const int me = dp->rank();
  // 1. K of every rank (must agree), then costs and byte sizes.
  int64_t my_k = k;
  std::vector<int64_t> ks(static_cast<size_t>(ranks));
  VLPAR_RETURN_IF_ERROR(dp->all_gather(TensorView(ks.data(), DType::kI64, Shape{ranks}),
                                       TensorView(&my_k, DType::kI64, Shape{1})));
  for (int r = 0; r < ranks; ++r)
    VLPAR_CHECK(ks[size_t(r)] == k, "exchange_balanced_packs on group '{}': rank {} has {} packs, rank {} has {}",
                dp->options().name, me, k, r, ks[size_t(r)]);
  std::vector<double> costs(static_cast<size_t>(k * ranks));
  VLPAR_RETURN_IF_ERROR(dp->all_gather(TensorView(costs.data(), DType::kF64, Shape{k * ranks}),
                                       TensorView(mine.data(), DType::kF64, Shape{k})));
  // 2. The same assignment on every rank; only the packs that move are serialised (their sizes all-gathered, 0
  // for those that stay).
  VLPAR_ASSIGN_OR_RETURN(std::vector<std::vector<int64_t>> assign, balance_packs(costs, ranks));
  std::vector<int> dest(costs.size());
  for (int r = 0; r < ranks; ++r)
    for (int64_t g : assign[size_t(r)]) dest[size_t(g)] = r;
  std::vector<std::vector<uint8_t>> bytes(static_cast<size_t>(k));
  std::vector<int64_t> my_sizes(static_cast<size_t>(k), 0);
  for (int64_t i = 0; i < k; ++i) {
    if (dest[size_t(int64_t(me) * k + i)] == me) continue;
    bytes[size_t(i)] = serialize_packed_batch(local[size_t(i)]);
    my_sizes[size_t(i)] = int64_t(bytes[size_t(i)].size());
  }
  std::vector<int64_t> sizes(static_cast<size_t>(k * ranks));
  VLPAR_RETURN_IF_ERROR(dp->all_gather(TensorView(sizes.data(), DType::kI64, Shape{k * ranks}),
                                       TensorView(my_sizes.data(), DType::kI64, Shape{k})));
  // 3. Sends of my packs that move, receives of the packs that come to me (tag = global pack index). Bytes travel
  // as i64 words: buffers are padded to a multiple of 8, the exact length is in `sizes`. Every operation that was
  // started is waited for before returning, errors included, so no buffer is freed under a pending request.
  auto words = [](int64_t n) { return (n + 7) / 8; };
  std::vector<comm::WorkHandle> work;
  std::vector<std::vector<uint8_t>> incoming(costs.size());
  int64_t sent = 0, received = 0;
  Status first_error = Status::Ok();
  auto started = [&](Result<comm::WorkHandle> w) {
    if (w.ok()) work.push_back(std::move(w).value());
    else if (first_error.ok()) first_error = w.status();
    return w.ok();
  };
  for (int64_t i = 0; i < k && first_error.ok(); ++i) {
    const int64_t g = int64_t(me) * k + i;
    if (dest[size_t(g)] == me) continue;
    std::vector<uint8_t>& b = bytes[size_t(i)];
    b.resize(size_t(8 * words(int64_t(b.size()))), 0);
    sent += started(dp->isend(TensorView(b.data(), DType::kI64, Shape{words(my_sizes[size_t(i)])}), dest[size_t(g)],
                              int(g)));
  }
  for (int64_t g : assign[size_t(me)]) {
    const int owner = int(g / k);
    if (owner == me || !first_error.ok()) continue;
    std::vector<uint8_t>& b = incoming[size_t(g)];
    b.resize(size_t(8 * words(sizes[size_t(g)])));
    received += started(dp->irecv(TensorView(b.data(), DType::kI64, Shape{words(sizes[size_t(g)])}), owner, int(g)));
  }
  for (comm::WorkHandle& w : work)
    if (Status s = w->wait(); !s.ok() && first_error.ok()) first_error = s;
  if (!first_error.ok()) {
    // A request that timed out may still be pending inside MPI (a send cannot be cancelled): its buffer must
    // outlive it, so the buffers are deliberately leaked on this error path (the job is failing anyway).
    new std::vector<std::vector<uint8_t>>(std::move(bytes));
    new std::vector<std::vector<uint8_t>>(std::move(incoming));
    return first_error;
  }
  std::vector<PackedBatch> out;
  for (int64_t g : assign[size_t(me)]) {
    if (g / k == me) {
      out.push_back(std::move(local[size_t(g % k)]));
    } else {
      const std::vector<uint8_t>& b = incoming[size_t(g)];
      VLPAR_ASSIGN_OR_RETURN(PackedBatch p,
                             deserialize_packed_batch(std::span<const uint8_t>(b.data(), size_t(sizes[size_t(g)]))));
      out.push_back(std::move(p));
    }
  }
  if (report) {
    std::vector<double> before(static_cast<size_t>(ranks), 0.0), after(static_cast<size_t>(ranks), 0.0);
    double total = 0;
    for (size_t g = 0; g < costs.size(); ++g) {
      before[g / size_t(k)] += costs[g];
      after[size_t(dest[g])] += costs[g];
      total += costs[g];
    }
    *report = PackBalanceReport{*std::max_element(before.begin(), before.end()),
                                *std::max_element(after.begin(), after.end()), total / ranks, sent, received};
  }
  return out;
}

namespace {

// The pack as the later pipeline stages need it: no pixels, grids or per-sample vision counts (the counts of
// images, videos and patches stay for throughput metrics).
PackedBatch without_vision(const PackedBatch& p) {
  PackedBatch q = p;
  q.pixel_values.clear();
  q.pixel_values_videos.clear();
  q.image_grids.clear();
  q.video_grids.clear();
  std::fill(q.images_per_sample.begin(), q.images_per_sample.end(), 0);
  std::fill(q.videos_per_sample.begin(), q.videos_per_sample.end(), 0);
  return q;
}

}  // namespace

Result<std::vector<PackedBatch>> share_packs_without_vision(comm::Communicator& group, int root,
                                                            Result<std::vector<PackedBatch>> root_packs) {
  const int me = group.rank();
  VLPAR_CHECK(root >= 0 && root < group.size(), "share_packs_without_vision: root {} outside group '{}' of {} ranks",
              root, group.options().name, group.size());
  // 1. The header: the pack count (−1: the root failed) and each pack's byte size.
  std::vector<std::vector<uint8_t>> bytes;
  int64_t count = 0;
  if (me == root) {
    count = root_packs.ok() ? int64_t(root_packs.value().size()) : -1;
    if (root_packs.ok())
      for (const PackedBatch& p : root_packs.value()) bytes.push_back(serialize_packed_batch(without_vision(p)));
  }
  VLPAR_RETURN_IF_ERROR(group.broadcast(TensorView(&count, DType::kI64, Shape{1}), root));
  if (count < 0) {
    if (me == root) return root_packs.status();
    return Status(StatusCode::kCommError, fmt::format("share_packs_without_vision on group '{}': the loading rank {} "
                                                     "failed to produce this step's packs (its error is in its log)",
                                                     group.options().name, root));
  }
  std::vector<int64_t> sizes(static_cast<size_t>(count), 0);
  for (size_t i = 0; i < bytes.size(); ++i) sizes[i] = int64_t(bytes[i].size());
  if (count > 0) VLPAR_RETURN_IF_ERROR(group.broadcast(TensorView(sizes.data(), DType::kI64, Shape{count}), root));
  // 2. Each pack's bytes as i64 words (padded to a multiple of 8; the exact length is in `sizes`), all of them
  // received before any is decoded, so a bad image cannot leave the ranks' broadcasts out of step.
  bytes.resize(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    std::vector<uint8_t>& buf = bytes[size_t(i)];
    const int64_t words = (sizes[size_t(i)] + 7) / 8;
    buf.resize(size_t(8 * words), 0);
    VLPAR_RETURN_IF_ERROR(group.broadcast(TensorView(buf.data(), DType::kI64, Shape{words}), root));
  }
  if (me == root) return std::move(root_packs).value();
  std::vector<PackedBatch> out;
  for (int64_t i = 0; i < count; ++i) {
    VLPAR_ASSIGN_OR_RETURN(PackedBatch p, deserialize_packed_batch(std::span<const uint8_t>(
                                              bytes[size_t(i)].data(), size_t(sizes[size_t(i)]))));
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace vlpar::data
