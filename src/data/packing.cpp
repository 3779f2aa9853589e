// Best-fit packing of tokenized samples, packed-batch assembly and data-parallel vision balancing. See
// include/vlpar/data/packing.hpp. Test: tests/unit/test_data_packing.cpp.
#include "vlpar/data/packing.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "vlpar/core/log.hpp"

namespace vlpar::data {

Status PackingConfig::validate() const {
  VLPAR_CHECK(max_tokens >= 1, "PackingConfig: max_tokens is {}, it must be at least 1", max_tokens);
  VLPAR_CHECK(max_patches >= 0, "PackingConfig: max_patches is {}, it must be >= 0 (0 = no limit)", max_patches);
  VLPAR_CHECK(max_samples >= 0, "PackingConfig: max_samples is {}, it must be >= 0 (0 = no limit)", max_samples);
  VLPAR_CHECK(lookahead >= 1, "PackingConfig: lookahead is {}, it must be at least 1", lookahead);
  return Status::Ok();
}

std::vector<size_t> plan_pack(std::span<const PackItem> buffer, const PackingConfig& config) {
  std::vector<size_t> chosen;
  if (buffer.empty()) return chosen;
  std::vector<char> used(buffer.size(), 0);
  chosen.push_back(0);  // rule 1: the oldest sample first
  used[0] = 1;
  int64_t tokens = buffer[0].tokens, patches = buffer[0].patches;
  while (config.max_samples == 0 || static_cast<int64_t>(chosen.size()) < config.max_samples) {
    // Rule 2: the largest sample that fits every budget; strict '>' keeps the older one on ties.
    size_t best = buffer.size();
    for (size_t i = 1; i < buffer.size(); ++i) {
      if (used[i]) continue;
      if (tokens + buffer[i].tokens > config.max_tokens) continue;
      if (config.max_patches > 0 && patches + buffer[i].patches > config.max_patches) continue;
      if (best == buffer.size() || buffer[i].tokens > buffer[best].tokens) best = i;
    }
    if (best == buffer.size()) break;
    used[best] = 1;
    chosen.push_back(best);
    tokens += buffer[best].tokens;
    patches += buffer[best].patches;
  }
  std::sort(chosen.begin(), chosen.end());  // rule 3: stream order inside the pack
  return chosen;
}

Batch PackedBatch::view() const {
  const auto n = int64_t(input_ids.size());
  auto index = [](const std::vector<int64_t>& v, Shape shape) {
    return TensorView(const_cast<int64_t*>(v.data()), DType::kI64, shape);
  };
  auto pixels = [&](const std::vector<float>& v) {
    if (v.empty() || patch_dim == 0) return TensorView{};
    return TensorView(const_cast<float*>(v.data()), DType::kF32, Shape{int64_t(v.size()) / patch_dim, patch_dim});
  };
  Batch b;
  b.input_ids = index(input_ids, Shape{n});
  b.labels = index(labels, Shape{n});
  b.cu_seqlens = index(cu_seqlens, Shape{int64_t(cu_seqlens.size())});
  b.host_cu_seqlens = cu_seqlens;
  b.positions = index(positions, Shape{3, n});
  b.pixel_values = pixels(pixel_values);
  b.image_grids = image_grids;
  b.pixel_values_videos = pixels(pixel_values_videos);
  b.video_grids = video_grids;
  return b;
}

double PackedBatch::efficiency() const {
  return token_budget > 0 ? static_cast<double>(real_tokens) / static_cast<double>(token_budget) : 0.0;
}

namespace {

struct Fnv {
  uint64_t h = 1469598103934665603ull;
  void bytes(const void* p, size_t n) {
    const auto* b = static_cast<const unsigned char*>(p);
    for (size_t i = 0; i < n; ++i) {
      h ^= b[i];
      h *= 1099511628211ull;
    }
  }
  template <class T>
  void vec(const std::vector<T>& v) {
    const uint64_t n = v.size();
    bytes(&n, sizeof(n));
    if (!v.empty()) bytes(v.data(), v.size() * sizeof(T));
  }
  void i64(int64_t v) { bytes(&v, sizeof(v)); }
};

// Pack pixel buffers are large (Σ patches × 1536 floats: ~100 MB for 16k tokens of images) and freshly allocated
// per batch, so malloc maps them anew each time and the first touch of every 4 KiB page faults (measured: the
// faults cost ~3x the copy itself). Asking for transparent huge pages on the untouched, reserved buffer makes the
// faults 512x fewer where the kernel allows it (THP "madvise" or "always"); elsewhere madvise fails harmlessly.
template <class T>
void advise_huge_pages(std::vector<T>& v) {
  constexpr uintptr_t kHuge = uintptr_t{2} << 20;
  const size_t bytes = v.capacity() * sizeof(T);
  if (bytes < 2 * kHuge) return;
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(v.data()) + kHuge - 1) & ~(kHuge - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(v.data()) + bytes) & ~(kHuge - 1);
  if (end > begin) (void)madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
}

int64_t sum_patches(std::span<const VisionGrid> grids) {
  int64_t n = 0;
  for (const VisionGrid& g : grids) n += g.patches();
  return n;
}

}  // namespace

namespace {

// The grids (and their pixel rows) of sample s: the per-sample counts of the samples before it are skipped.
Status take_vision(const char* what, const std::vector<int64_t>& per_sample, const std::vector<VisionGrid>& grids,
                   const std::vector<float>& pixels, int64_t patch_dim, int64_t sample, int64_t samples,
                   std::vector<VisionGrid>& out_grids, std::vector<float>& out_pixels) {
  if (grids.empty()) return Status::Ok();
  int64_t first = 0, count = int64_t(grids.size());
  if (samples > 1 || !per_sample.empty()) {
    VLPAR_CHECK(int64_t(per_sample.size()) == samples,
                "sample_of_pack: the pack has {} samples and {} {} but {}_per_sample has {} entries (needed to split "
                "the {} by sample)", samples, grids.size(), what, what, per_sample.size(), what);
    for (int64_t k = 0; k < sample; ++k) first += per_sample[size_t(k)];
    count = per_sample[size_t(sample)];
    VLPAR_CHECK(count >= 0 && first + count <= int64_t(grids.size()),
                "sample_of_pack: {}_per_sample asks for {} {} from index {} but the pack has {}", what, count, what,
                first, grids.size());
  }
  const int64_t row = sum_patches({grids.data(), size_t(first)});
  const int64_t rows = sum_patches({grids.data() + first, size_t(count)});
  VLPAR_CHECK((row + rows) * patch_dim <= int64_t(pixels.size()),
              "sample_of_pack: the {} grids need {} patch rows of {} values but the pack has {} values", what,
              row + rows, patch_dim, pixels.size());
  out_grids.assign(grids.begin() + first, grids.begin() + first + count);
  out_pixels.assign(pixels.begin() + row * patch_dim, pixels.begin() + (row + rows) * patch_dim);
  return Status::Ok();
}

}  // namespace

Result<PackedBatch> sample_of_pack(const PackedBatch& pack, int64_t sample, int64_t prefix_tokens) {
  const int64_t B = int64_t(pack.cu_seqlens.size()) - 1, N = int64_t(pack.input_ids.size());
  VLPAR_CHECK(sample >= 0 && sample < B, "sample_of_pack: sample {} is outside the pack's {} samples", sample, B);
  VLPAR_CHECK(int64_t(pack.positions.size()) == 3 * N && int64_t(pack.labels.size()) == N,
              "sample_of_pack: the pack has {} ids, {} labels and {} position values (want N, N, 3·N)", N,
              pack.labels.size(), pack.positions.size());
  const int64_t begin = pack.cu_seqlens[size_t(sample)], len = pack.cu_seqlens[size_t(sample) + 1] - begin;
  VLPAR_CHECK(prefix_tokens >= 0 && prefix_tokens <= len,
              "sample_of_pack: prefix_tokens {} is outside [0, {}] (sample {} has {} tokens; 0 = all)", prefix_tokens,
              len, sample, len);
  const int64_t n = prefix_tokens > 0 ? prefix_tokens : len;
  PackedBatch out;
  out.input_ids.assign(pack.input_ids.begin() + begin, pack.input_ids.begin() + begin + n);
  out.labels.assign(pack.labels.begin() + begin, pack.labels.begin() + begin + n);
  out.cu_seqlens = {0, n};
  out.positions.resize(size_t(3 * n));
  int64_t max_pos = 0;
  for (int64_t a = 0; a < 3; ++a)
    for (int64_t i = 0; i < n; ++i) {
      const int64_t p = pack.positions[size_t(a * N + begin + i)];
      out.positions[size_t(a * n + i)] = p;
      max_pos = std::max(max_pos, p);
    }
  out.rope_deltas = {max_pos + 1 - n};
  out.patch_dim = pack.patch_dim;
  VLPAR_RETURN_IF_ERROR(take_vision("images", pack.images_per_sample, pack.image_grids, pack.pixel_values,
                                    pack.patch_dim, sample, B, out.image_grids, out.pixel_values));
  VLPAR_RETURN_IF_ERROR(take_vision("videos", pack.videos_per_sample, pack.video_grids, pack.pixel_values_videos,
                                    pack.patch_dim, sample, B, out.video_grids, out.pixel_values_videos));
  out.images_per_sample = {int64_t(out.image_grids.size())};
  out.videos_per_sample = {int64_t(out.video_grids.size())};
  out.sample_keys = {sample < int64_t(pack.sample_keys.size()) ? pack.sample_keys[size_t(sample)]
                                                               : fmt::format("sample {}", sample)};
  out.token_budget = n;
  out.recount();
  return out;
}

void PackedBatch::recount() {
  real_tokens = static_cast<int64_t>(input_ids.size());
  num_images = static_cast<int64_t>(image_grids.size());
  num_videos = static_cast<int64_t>(video_grids.size());
  vision_patches = sum_patches(image_grids) + sum_patches(video_grids);
  num_label_tokens = static_cast<int64_t>(
      std::count_if(labels.begin(), labels.end(), [](int64_t l) { return l != kIgnoreLabel; }));
}

uint64_t PackedBatch::fingerprint() const {
  Fnv f;
  f.vec(input_ids);
  f.vec(labels);
  f.vec(cu_seqlens);
  f.vec(positions);
  f.vec(rope_deltas);
  f.vec(pixel_values);
  f.vec(pixel_values_videos);
  for (const auto* grids : {&image_grids, &video_grids}) {
    f.i64(static_cast<int64_t>(grids->size()));
    for (const VisionGrid& g : *grids) {
      f.i64(g.t);
      f.i64(g.h);
      f.i64(g.w);
    }
  }
  f.vec(images_per_sample);
  f.vec(videos_per_sample);
  for (const std::string& k : sample_keys) {
    f.i64(static_cast<int64_t>(k.size()));
    f.bytes(k.data(), k.size());
  }
  for (int64_t v : {patch_dim, real_tokens, token_budget, num_images, num_videos, vision_patches, num_label_tokens})
    f.i64(v);
  return f.h;
}

Status validate_tokenized_sample(const TokenizedSample& s) {
  VLPAR_CHECK(!s.input_ids.empty(), "sample '{}': no tokens", s.key);
  VLPAR_CHECK(s.labels.size() == s.input_ids.size(), "sample '{}': {} labels for {} tokens", s.key, s.labels.size(),
              s.input_ids.size());
  VLPAR_CHECK(s.patch_dim >= 0, "sample '{}': patch_dim {} is negative", s.key, s.patch_dim);
  const int64_t ip = s.image_patches(), vp = s.video_patches();
  VLPAR_CHECK(static_cast<int64_t>(s.pixel_values.size()) == ip * s.patch_dim,
              "sample '{}': {} image pixel values, expected {} patches x patch_dim {}", s.key, s.pixel_values.size(),
              ip, s.patch_dim);
  VLPAR_CHECK(static_cast<int64_t>(s.pixel_values_videos.size()) == vp * s.patch_dim,
              "sample '{}': {} video pixel values, expected {} patches x patch_dim {}", s.key,
              s.pixel_values_videos.size(), vp, s.patch_dim);
  VLPAR_CHECK(ip + vp == 0 || s.patch_dim > 0, "sample '{}': vision input with patch_dim 0", s.key);
  return Status::Ok();
}

Result<PackedBatch> make_packed_batch(std::span<const TokenizedSample* const> samples, const MropeDesc& desc,
                                      int64_t token_budget) {
  VLPAR_CHECK(!samples.empty(), "make_packed_batch: no samples");
  PackedBatch b;
  b.token_budget = token_budget;
  int64_t n = 0, img_values = 0, vid_values = 0;
  for (const TokenizedSample* s : samples) {
    VLPAR_RETURN_IF_ERROR(validate_tokenized_sample(*s));
    if (s->patch_dim > 0) {
      VLPAR_CHECK(b.patch_dim == 0 || b.patch_dim == s->patch_dim,
                  "make_packed_batch: sample '{}' has patch_dim {}, the pack's other samples {}", s->key, s->patch_dim,
                  b.patch_dim);
      b.patch_dim = s->patch_dim;
    }
    n += s->num_tokens();
    img_values += static_cast<int64_t>(s->pixel_values.size());
    vid_values += static_cast<int64_t>(s->pixel_values_videos.size());
  }
  b.input_ids.reserve(static_cast<size_t>(n));
  b.labels.reserve(static_cast<size_t>(n));
  b.pixel_values.reserve(static_cast<size_t>(img_values));
  b.pixel_values_videos.reserve(static_cast<size_t>(vid_values));
  advise_huge_pages(b.pixel_values);
  advise_huge_pages(b.pixel_values_videos);
  b.cu_seqlens.push_back(0);
  for (const TokenizedSample* s : samples) {
    b.input_ids.insert(b.input_ids.end(), s->input_ids.begin(), s->input_ids.end());
    b.labels.insert(b.labels.end(), s->labels.begin(), s->labels.end());
    b.cu_seqlens.push_back(static_cast<int64_t>(b.input_ids.size()));
    b.pixel_values.insert(b.pixel_values.end(), s->pixel_values.begin(), s->pixel_values.end());
    b.pixel_values_videos.insert(b.pixel_values_videos.end(), s->pixel_values_videos.begin(),
                                 s->pixel_values_videos.end());
    b.image_grids.insert(b.image_grids.end(), s->image_grids.begin(), s->image_grids.end());
    b.video_grids.insert(b.video_grids.end(), s->video_grids.begin(), s->video_grids.end());
    b.images_per_sample.push_back(s->num_images());
    b.videos_per_sample.push_back(s->num_videos());
    b.sample_keys.push_back(s->key);
  }
  b.recount();
  b.positions.resize(static_cast<size_t>(3 * n));
  b.rope_deltas.resize(samples.size());
  const Status st = compute_mrope_positions(b.positions, b.rope_deltas, b.input_ids, b.cu_seqlens, b.image_grids,
                                            b.video_grids, desc);
  if (!st.ok()) {
    std::string keys;
    for (const std::string& k : b.sample_keys) keys += (keys.empty() ? "" : ", ") + k;
    return VLPAR_STATUS(st.code(), "make_packed_batch: pack of samples [{}]: {}", keys, st.message());
  }
  return b;
}

double PackerStats::efficiency() const {
  return budget_tokens > 0 ? static_cast<double>(real_tokens) / static_cast<double>(budget_tokens) : 0.0;
}

Result<Packer> Packer::create(PackingConfig config, MropeDesc desc) {
  VLPAR_RETURN_IF_ERROR(config.validate());
  return Packer(config, desc);
}

Result<Packer::Admit> Packer::push(TokenizedSample sample, uint64_t tag) {
  VLPAR_RETURN_IF_ERROR(validate_tokenized_sample(sample));
  {
    // The sample's own MRoPE positions: a vision span that disagrees with its grids is rejected here, alone and
    // named, instead of failing the whole pack later.
    const std::vector<int64_t> ids(sample.input_ids.begin(), sample.input_ids.end());
    const std::vector<int64_t> cu = {0, sample.num_tokens()};
    std::vector<int64_t> pos(static_cast<size_t>(3 * sample.num_tokens()));
    std::vector<int64_t> delta(1);
    const Status st =
        compute_mrope_positions(pos, delta, ids, cu, sample.image_grids, sample.video_grids, desc_);
    if (!st.ok()) return VLPAR_STATUS(st.code(), "sample '{}': {}", sample.key, st.message());
  }
  ++stats_.samples_in;
  if (sample.num_tokens() > config_.max_tokens) {
    ++stats_.skipped_too_long;
    log_warn("packing: skipping sample '{}': {} tokens alone exceed the pack budget of {} tokens", sample.key,
             sample.num_tokens(), config_.max_tokens);
    return Admit::kSkippedTooLong;
  }
  if (config_.max_patches > 0 && sample.vision_patches() > config_.max_patches) {
    ++stats_.skipped_too_many_patches;
    log_warn("packing: skipping sample '{}': {} vision patches alone exceed the pack budget of {} patches",
             sample.key, sample.vision_patches(), config_.max_patches);
    return Admit::kSkippedTooManyPatches;
  }
  buffered_tokens_ += sample.num_tokens();
  buffer_.push_back(Entry{tag, std::move(sample)});
  return Admit::kBuffered;
}

Result<PackedBatch> Packer::pop(std::vector<uint64_t>* taken_tags) {
  VLPAR_CHECK(!buffer_.empty(), "Packer::pop: the buffer is empty");
  std::vector<PackItem> items;
  items.reserve(buffer_.size());
  for (const Entry& e : buffer_) items.push_back({e.sample.num_tokens(), e.sample.vision_patches()});
  const std::vector<size_t> chosen = plan_pack(items, config_);
  std::vector<const TokenizedSample*> ptrs;
  ptrs.reserve(chosen.size());
  for (size_t i : chosen) ptrs.push_back(&buffer_[i].sample);
  VLPAR_ASSIGN_OR_RETURN(PackedBatch batch, make_packed_batch(ptrs, desc_, config_.max_tokens));
  if (taken_tags != nullptr) {
    taken_tags->clear();
    for (size_t i : chosen) taken_tags->push_back(buffer_[i].tag);
  }
  // Remove the chosen entries (ascending indices) keeping the others' order.
  std::deque<Entry> rest;
  size_t c = 0;
  for (size_t i = 0; i < buffer_.size(); ++i) {
    if (c < chosen.size() && chosen[c] == i) {
      ++c;
      buffered_tokens_ -= buffer_[i].sample.num_tokens();
      continue;
    }
    rest.push_back(std::move(buffer_[i]));
  }
  buffer_ = std::move(rest);
  ++stats_.packs;
  stats_.samples_packed += static_cast<int64_t>(chosen.size());
  stats_.real_tokens += batch.real_tokens;
  stats_.budget_tokens += config_.max_tokens;
  return batch;
}

double vision_cost(std::span<const VisionGrid> image_grids, std::span<const VisionGrid> video_grids,
                   const VisionCostModel& model) {
  double patches = 0, pairs = 0;
  for (const auto grids : {image_grids, video_grids}) {
    for (const VisionGrid& g : grids) {
      const double hw = static_cast<double>(g.h * g.w);
      patches += static_cast<double>(g.t) * hw;
      pairs += static_cast<double>(g.t) * hw * hw;  // one attention segment per frame
    }
  }
  return model.per_patch * patches + model.per_attention_pair * pairs;
}

double vision_cost(const PackedBatch& batch, const VisionCostModel& model) {
  return vision_cost(batch.image_grids, batch.video_grids, model);
}

Result<std::vector<std::vector<int64_t>>> balance_packs(std::span<const double> costs, int64_t dp_size) {
  VLPAR_CHECK(dp_size >= 1, "balance_packs: dp_size is {}, it must be at least 1", dp_size);
  const int64_t n = static_cast<int64_t>(costs.size());
  VLPAR_CHECK(n % dp_size == 0, "balance_packs: {} packs cannot be split evenly over {} ranks", n, dp_size);
  for (int64_t i = 0; i < n; ++i)
    VLPAR_CHECK(std::isfinite(costs[static_cast<size_t>(i)]) && costs[static_cast<size_t>(i)] >= 0,
                "balance_packs: cost of pack {} is {}, it must be finite and >= 0", i, costs[static_cast<size_t>(i)]);
  const int64_t per_rank = n / dp_size;
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return costs[static_cast<size_t>(a)] > costs[static_cast<size_t>(b)];
  });
  std::vector<std::vector<int64_t>> ranks(static_cast<size_t>(dp_size));
  std::vector<double> load(static_cast<size_t>(dp_size), 0.0);
  for (int64_t p : order) {
    int64_t best = -1;
    for (int64_t r = 0; r < dp_size; ++r) {
      if (static_cast<int64_t>(ranks[static_cast<size_t>(r)].size()) >= per_rank) continue;
      if (best < 0 || load[static_cast<size_t>(r)] < load[static_cast<size_t>(best)]) best = r;
    }
    ranks[static_cast<size_t>(best)].push_back(p);
    load[static_cast<size_t>(best)] += costs[static_cast<size_t>(p)];
  }
  for (auto& r : ranks) std::sort(r.begin(), r.end());
  return ranks;
}

}  // namespace vlpar::data
