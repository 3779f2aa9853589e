// SampleStream: epoch plans (shard permutation, rank split), the shuffle buffer and resumable state.
// See include/vlpar/data/sample_stream.hpp. Test: tests/unit/test_sample_stream.cpp.
#include "vlpar/data/sample_stream.hpp"

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>

#include "vlpar/core/log.hpp"
#include "vlpar/core/philox.hpp"

namespace vlpar::data {
namespace {

// Philox stream words: the shard permutation of an epoch is shared by all ranks; each rank's buffer has its own.
constexpr uint32_t kShardOrderStream = 0x5A000000u;
constexpr uint32_t kBufferStream = 0xB0000000u;  // | rank (rank < 2^24)
constexpr int64_t kMaxRanks = int64_t{1} << 24;
constexpr size_t kMaxOpenReaders = 8;

// Uniform integer in [0, n) from consecutive Philox draws (rejection: no modulo bias; deterministic).
template <class Draw>
uint64_t uniform_below(uint64_t n, Draw&& draw) {
  uint64_t x = draw();
  if (n <= 1) return 0;
  const uint64_t rem = (std::numeric_limits<uint64_t>::max() % n + 1) % n;  // 2^64 mod n
  while (rem != 0 && x > std::numeric_limits<uint64_t>::max() - rem) x = draw();
  return x % n;
}

uint64_t philox_u64(uint64_t seed, int64_t epoch, uint64_t n, uint32_t stream) {
  const Philox4 r = philox_element(seed, static_cast<uint32_t>(epoch), n, stream);
  return uint64_t{r.v[0]} | (uint64_t{r.v[1]} << 32);
}

const char* split_name(RankSplit s) {
  switch (s) {
    case RankSplit::kAuto: return "auto";
    case RankSplit::kByShard: return "shard";
    case RankSplit::kBySample: return "sample";
  }
  return "?";
}

}  // namespace

Result<std::vector<StreamShard>> index_webdataset_shards(const std::vector<std::string>& tar_paths) {
  std::vector<StreamShard> out;
  for (const std::string& p : tar_paths) {
    VLPAR_ASSIGN_OR_RETURN(TarFile tar, TarFile::open(p));
    VLPAR_ASSIGN_OR_RETURN(std::vector<int64_t> offsets, build_sample_offsets(tar));
    out.push_back(StreamShard{p, p, std::make_shared<const std::vector<int64_t>>(std::move(offsets))});
  }
  return out;
}

Status SampleStreamConfig::validate() const {
  VLPAR_CHECK(dp_size >= 1 && dp_size <= kMaxRanks, "SampleStreamConfig: dp_size {} is not in [1, {}]", dp_size,
              kMaxRanks);
  VLPAR_CHECK(dp_rank >= 0 && dp_rank < dp_size, "SampleStreamConfig: dp_rank {} is not in [0, dp_size={})", dp_rank,
              dp_size);
  VLPAR_CHECK(shuffle_buffer >= 0, "SampleStreamConfig: shuffle_buffer {} is negative", shuffle_buffer);
  VLPAR_CHECK(num_epochs >= 0, "SampleStreamConfig: num_epochs {} is negative (0 = endless)", num_epochs);
  return Status::Ok();
}

Result<SampleStream> SampleStream::create(std::vector<StreamShard> shards, std::set<std::string> sample_excludes,
                                          SampleStreamConfig config) {
  VLPAR_RETURN_IF_ERROR(config.validate());
  VLPAR_CHECK(!shards.empty(), "SampleStream: no shards");
  VLPAR_CHECK(shards.size() < static_cast<size_t>(std::numeric_limits<int32_t>::max()),
              "SampleStream: {} shards is too many", shards.size());
  int64_t nonempty = 0, total = 0;
  for (const StreamShard& s : shards) {
    VLPAR_CHECK(s.offsets && !s.offsets->empty(), "SampleStream: shard {} has no sample offsets", s.name);
    nonempty += s.num_samples() > 0;
    total += s.num_samples();
  }
  SampleStream st;
  st.by_shard_ = config.split == RankSplit::kByShard || (config.split == RankSplit::kAuto && nonempty >= config.dp_size);
  if (st.by_shard_)
    VLPAR_CHECK(nonempty >= config.dp_size,
                "SampleStream: splitting by shard needs at least one non-empty shard per rank: {} shards, dp_size {}",
                nonempty, config.dp_size);
  else
    VLPAR_CHECK(total >= config.dp_size,
                "SampleStream: {} samples cannot give each of dp_size={} ranks at least one sample", total,
                config.dp_size);
  st.shards_ = std::move(shards);
  st.excludes_ = std::move(sample_excludes);
  st.config_ = std::move(config);
  return st;
}

Result<SampleStream> SampleStream::create(const EnergonDataset& dataset, SampleStreamConfig config) {
  std::vector<StreamShard> shards;
  for (const EnergonShard& s : dataset.shards) shards.push_back(StreamShard{s.name, s.path, s.offsets});
  return create(std::move(shards), dataset.sample_excludes, std::move(config));
}

std::vector<SampleStream::Segment> SampleStream::plan(int64_t epoch) const {
  std::vector<int32_t> order;
  for (size_t i = 0; i < shards_.size(); ++i)
    if (shards_[i].num_samples() > 0) order.push_back(static_cast<int32_t>(i));
  if (config_.shuffle_shards) {
    uint64_t n = 0;
    auto draw = [&] { return philox_u64(config_.seed, epoch, n++, kShardOrderStream); };
    for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[uniform_below(i, draw)]);
  }
  std::vector<Segment> out;
  const int64_t R = config_.dp_size, r = config_.dp_rank;
  if (by_shard_) {
    std::vector<int64_t> load(static_cast<size_t>(R), 0);
    for (int32_t s : order) {
      const size_t best = static_cast<size_t>(std::min_element(load.begin(), load.end()) - load.begin());
      load[best] += shards_[static_cast<size_t>(s)].num_samples();
      if (static_cast<int64_t>(best) == r) out.push_back(Segment{s, 0, shards_[static_cast<size_t>(s)].num_samples()});
    }
    return out;
  }
  int64_t total = 0;
  for (int32_t s : order) total += shards_[static_cast<size_t>(s)].num_samples();
  const int64_t lo = r * total / R, hi = (r + 1) * total / R;  // total·R < 2^63 for any real dataset
  int64_t base = 0;
  for (int32_t s : order) {
    const int64_t n = shards_[static_cast<size_t>(s)].num_samples();
    const int64_t b = std::max(lo, base), e = std::min(hi, base + n);
    if (b < e) out.push_back(Segment{s, b - base, e - base});
    base += n;
  }
  return out;
}

std::vector<SampleRef> SampleStream::epoch_inputs(int64_t epoch) const {
  std::vector<SampleRef> out;
  for (const Segment& g : plan(epoch))
    for (int64_t i = g.begin; i < g.end; ++i) out.push_back(SampleRef{g.shard, i});
  return out;
}

void SampleStream::start_epoch(int64_t epoch) {
  epoch_ = epoch;
  segments_ = plan(epoch);
  epoch_inputs_ = 0;
  for (const Segment& g : segments_) epoch_inputs_ += g.end - g.begin;
  cursor_ = 0;
  produced_in_epoch_ = 0;
  rng_counter_ = 0;
  buffer_.clear();
  epoch_started_ = true;
}

SampleRef SampleStream::input_at(int64_t cursor) const {
  for (const Segment& g : segments_) {
    if (cursor < g.end - g.begin) return SampleRef{g.shard, g.begin + cursor};
    cursor -= g.end - g.begin;
  }
  return SampleRef{};
}

uint64_t SampleStream::buffer_draw(uint64_t n) {
  const uint32_t stream = kBufferStream | static_cast<uint32_t>(config_.dp_rank);
  auto draw = [&] { return philox_u64(config_.seed, epoch_, rng_counter_++, stream); };
  return uniform_below(n, draw);
}

Result<const ShardReader*> SampleStream::reader(int32_t shard) {
  ++reader_clock_;
  auto it = readers_.find(shard);
  if (it != readers_.end()) {
    it->second.first = reader_clock_;
    return it->second.second.get();
  }
  if (readers_.size() >= kMaxOpenReaders) {
    auto oldest = std::min_element(readers_.begin(), readers_.end(),
                                   [](const auto& a, const auto& b) { return a.second.first < b.second.first; });
    readers_.erase(oldest);
  }
  const StreamShard& s = shards_[static_cast<size_t>(shard)];
  VLPAR_ASSIGN_OR_RETURN(ShardReader r, ShardReader::open(s.path, s.name, s.offsets, config_.read));
  auto& slot = readers_[shard];
  slot = {reader_clock_, std::make_unique<ShardReader>(std::move(r))};
  return slot.second.get();
}

Result<std::optional<Sample>> SampleStream::load(SampleRef ref, bool count_skips) {
  VLPAR_ASSIGN_OR_RETURN(const ShardReader* rd, reader(ref.shard));
  VLPAR_ASSIGN_OR_RETURN(SampleRead r, rd->read(ref.index));
  if (r.skipped()) {
    if (count_skips) {
      ++stats_.skipped_corrupt;
      log_warn("skipping corrupt sample (rank {}, epoch {}): {}", config_.dp_rank, epoch_, r.skip_reason);
    }
    return std::optional<Sample>();
  }
  if (!excludes_.empty() && excludes_.count(r.sample.shard + "/" + r.sample.key)) {
    if (count_skips) ++stats_.skipped_excluded;
    return std::optional<Sample>();
  }
  return std::optional<Sample>(std::move(r.sample));
}

Result<std::optional<Sample>> SampleStream::next() {
  const size_t capacity = static_cast<size_t>(std::max<int64_t>(1, config_.shuffle_buffer));
  for (;;) {
    if (config_.num_epochs > 0 && epoch_ >= config_.num_epochs) return std::optional<Sample>();
    if (!epoch_started_) start_epoch(epoch_);
    while (buffer_.size() < capacity && cursor_ < epoch_inputs_) {
      const SampleRef ref = input_at(cursor_);
      VLPAR_ASSIGN_OR_RETURN(std::optional<Sample> s, load(ref, true));
      ++cursor_;
      if (s) buffer_.push_back(Slot{ref, std::move(*s)});
    }
    if (buffer_.empty()) {
      if (produced_in_epoch_ == 0)
        return VLPAR_STATUS(StatusCode::kInvalidArgument,
                            "SampleStream: epoch {} delivered no sample on rank {} of {}: all {} of its inputs were "
                            "excluded or corrupt", epoch_, config_.dp_rank, config_.dp_size, epoch_inputs_);
      ++stats_.epochs_completed;
      epoch_started_ = false;
      ++epoch_;
      continue;
    }
    const size_t j = buffer_.size() == 1 ? 0 : static_cast<size_t>(buffer_draw(buffer_.size()));
    Sample out = std::move(buffer_[j].sample);
    if (j + 1 != buffer_.size()) buffer_[j] = std::move(buffer_.back());
    buffer_.pop_back();
    ++produced_in_epoch_;
    ++stats_.samples;
    stats_.bytes += out.num_bytes();
    return std::optional<Sample>(std::move(out));
  }
}

std::string SampleStream::fingerprint() const {
  uint64_t h = 0xCBF29CE484222325ull;  // FNV-1a over "name\0count\0" of every shard
  auto mix = [&](std::string_view s) {
    for (unsigned char c : s) h = (h ^ c) * 0x100000001B3ull;
    h = (h ^ 0u) * 0x100000001B3ull;
  };
  for (const StreamShard& s : shards_) {
    mix(s.name);
    mix(std::to_string(s.num_samples()));
  }
  return fmt::format("{:016x}", h);
}

std::string SampleStream::save_state() const {
  nlohmann::ordered_json j;
  j["format"] = "vlpar.sample_stream";
  j["version"] = 1;
  j["dataset"] = fingerprint();
  j["num_shards"] = shards_.size();
  j["seed"] = config_.seed;
  j["dp_rank"] = config_.dp_rank;
  j["dp_size"] = config_.dp_size;
  j["shuffle_buffer"] = config_.shuffle_buffer;
  j["shuffle_shards"] = config_.shuffle_shards;
  j["split"] = split_name(config_.split);
  j["epoch"] = epoch_;
  // A stream between epochs (or never started) is at the start of epoch_: cursor 0, empty buffer, no draws.
  j["cursor"] = epoch_started_ ? cursor_ : 0;
  j["produced_in_epoch"] = epoch_started_ ? produced_in_epoch_ : 0;
  j["rng_counter"] = epoch_started_ ? rng_counter_ : 0;
  nlohmann::ordered_json buf = nlohmann::ordered_json::array();
  if (epoch_started_)
    for (const Slot& s : buffer_) buf.push_back({s.ref.shard, s.ref.index});
  j["buffer"] = std::move(buf);
  j["stats"] = {{"samples", stats_.samples},
                {"bytes", stats_.bytes},
                {"skipped_corrupt", stats_.skipped_corrupt},
                {"skipped_excluded", stats_.skipped_excluded},
                {"epochs_completed", stats_.epochs_completed}};
  return j.dump();
}

Status SampleStream::restore(std::string_view state) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(state);
  } catch (const nlohmann::json::exception& e) {
    return VLPAR_STATUS(StatusCode::kInvalidArgument, "SampleStream::restore: state is not JSON: {}", e.what());
  }
  auto field = [&](const char* k) -> const nlohmann::json* {
    auto it = j.find(k);
    return it == j.end() ? nullptr : &*it;
  };
  VLPAR_CHECK(j.is_object() && field("format") && *field("format") == "vlpar.sample_stream",
              "SampleStream::restore: not a sample stream state (format != \"vlpar.sample_stream\")");
  VLPAR_CHECK(field("version") && *field("version") == 1, "SampleStream::restore: unsupported state version {}",
              field("version") ? field("version")->dump() : std::string("(missing)"));
  try {
    auto expect = [&](const char* k, const nlohmann::json& mine) -> Status {
      const nlohmann::json* v = field(k);
      VLPAR_CHECK(v != nullptr, "SampleStream::restore: state has no '{}'", k);
      VLPAR_CHECK(*v == mine, "SampleStream::restore: the state was saved with {} = {}, this stream has {}", k,
                  v->dump(), mine.dump());
      return Status::Ok();
    };
    VLPAR_RETURN_IF_ERROR(expect("dataset", fingerprint()));
    VLPAR_RETURN_IF_ERROR(expect("num_shards", shards_.size()));
    VLPAR_RETURN_IF_ERROR(expect("seed", config_.seed));
    VLPAR_RETURN_IF_ERROR(expect("dp_rank", config_.dp_rank));
    VLPAR_RETURN_IF_ERROR(expect("dp_size", config_.dp_size));
    VLPAR_RETURN_IF_ERROR(expect("shuffle_buffer", config_.shuffle_buffer));
    VLPAR_RETURN_IF_ERROR(expect("shuffle_shards", config_.shuffle_shards));
    VLPAR_RETURN_IF_ERROR(expect("split", split_name(config_.split)));
    const int64_t epoch = j.at("epoch").get<int64_t>();
    const int64_t cursor = j.at("cursor").get<int64_t>();
    const int64_t produced = j.at("produced_in_epoch").get<int64_t>();
    const uint64_t rng = j.at("rng_counter").get<uint64_t>();
    const nlohmann::json& buf = j.at("buffer");
    VLPAR_CHECK(epoch >= 0 && produced >= 0 && buf.is_array(), "SampleStream::restore: malformed epoch/buffer");
    const size_t capacity = static_cast<size_t>(std::max<int64_t>(1, config_.shuffle_buffer));
    VLPAR_CHECK(buf.size() <= capacity, "SampleStream::restore: buffer holds {} samples, capacity is {}", buf.size(),
                capacity);

    // Build the new position on a copy, so that a failure leaves *this unchanged.
    SampleStream next_state;
    next_state.shards_ = shards_;
    next_state.excludes_ = excludes_;
    next_state.config_ = config_;
    next_state.by_shard_ = by_shard_;
    next_state.start_epoch(epoch);
    VLPAR_CHECK(cursor >= 0 && cursor <= next_state.epoch_inputs_,
                "SampleStream::restore: cursor {} outside epoch {} of {} inputs on this rank", cursor, epoch,
                next_state.epoch_inputs_);
    next_state.cursor_ = cursor;
    next_state.produced_in_epoch_ = produced;
    next_state.rng_counter_ = rng;
    for (const nlohmann::json& e : buf) {
      VLPAR_CHECK(e.is_array() && e.size() == 2, "SampleStream::restore: buffer entry {} is not [shard, index]",
                  e.dump());
      const SampleRef ref{e[0].get<int32_t>(), e[1].get<int64_t>()};
      VLPAR_CHECK(ref.shard >= 0 && static_cast<size_t>(ref.shard) < shards_.size() && ref.index >= 0 &&
                      ref.index < shards_[static_cast<size_t>(ref.shard)].num_samples(),
                  "SampleStream::restore: buffer entry [{}, {}] names no sample of this dataset", ref.shard, ref.index);
      VLPAR_ASSIGN_OR_RETURN(std::optional<Sample> s, next_state.load(ref, false));
      VLPAR_CHECK(s.has_value(), "SampleStream::restore: buffered sample [{}, {}] of shard {} is now excluded or corrupt",
                  ref.shard, ref.index, shards_[static_cast<size_t>(ref.shard)].name);
      next_state.buffer_.push_back(Slot{ref, std::move(*s)});
    }
    const nlohmann::json& st = j.at("stats");
    next_state.stats_.samples = st.at("samples").get<int64_t>();
    next_state.stats_.bytes = st.at("bytes").get<int64_t>();
    next_state.stats_.skipped_corrupt = st.at("skipped_corrupt").get<int64_t>();
    next_state.stats_.skipped_excluded = st.at("skipped_excluded").get<int64_t>();
    next_state.stats_.epochs_completed = st.at("epochs_completed").get<int64_t>();
    *this = std::move(next_state);
  } catch (const nlohmann::json::exception& e) {
    return VLPAR_STATUS(StatusCode::kInvalidArgument, "SampleStream::restore: malformed state: {}", e.what());
  }
  return Status::Ok();
}

}  // namespace vlpar::data
