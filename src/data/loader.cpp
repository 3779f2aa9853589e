// The data loader: parallel per-sample builds, in-order packing, bounded prefetch, resumable state. See
// include/vlpar/data/loader.hpp. Test: tests/unit/test_loader.cpp.
#include "vlpar/data/loader.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <thread>

#include "vlpar/core/log.hpp"

namespace vlpar::data {

// ---- VectorSampleSource ---------------------------------------------------------------------------------------

Result<std::optional<Sample>> VectorSampleSource::next() {
  const int64_t n = static_cast<int64_t>(samples_->size());
  if (n == 0 || (epochs_ > 0 && position_ >= epochs_ * n)) return std::optional<Sample>();
  Sample s = (*samples_)[static_cast<size_t>(position_ % n)];
  ++position_;
  return std::optional<Sample>(std::move(s));
}

Status VectorSampleSource::restore(std::string_view state) {
  int64_t pos = -1;
  const auto [ptr, ec] = std::from_chars(state.data(), state.data() + state.size(), pos);
  VLPAR_CHECK(ec == std::errc() && ptr == state.data() + state.size() && pos >= 0,
              "VectorSampleSource::restore: state '{}' is not a sample position", state);
  const int64_t n = static_cast<int64_t>(samples_->size());
  VLPAR_CHECK(epochs_ == 0 || pos <= epochs_ * n, "VectorSampleSource::restore: position {} is past the end ({})", pos,
              epochs_ * n);
  position_ = pos;
  return Status::Ok();
}

// ---- config and stats -------------------------------------------------------------------------------------------

Status LoaderConfig::validate() const {
  VLPAR_CHECK(num_workers >= 1, "LoaderConfig: num_workers is {}, it must be at least 1", num_workers);
  VLPAR_CHECK(prefetch >= 1, "LoaderConfig: prefetch is {}, it must be at least 1", prefetch);
  VLPAR_CHECK(reorder_window == 0 || reorder_window >= num_workers,
              "LoaderConfig: reorder_window {} is below num_workers {} (workers would idle); 0 picks 4·workers + 8",
              reorder_window, num_workers);
  VLPAR_CHECK(max_logged_skips >= 0, "LoaderConfig: max_logged_skips is {}, it must be >= 0", max_logged_skips);
  VLPAR_CHECK(max_skips_in_a_row >= 0, "LoaderConfig: max_skips_in_a_row is {}, it must be >= 0 (0 = no limit)",
              max_skips_in_a_row);
  return packing.validate();
}

double LoaderStats::efficiency() const {
  return budget_tokens > 0 ? static_cast<double>(real_tokens) / static_cast<double>(budget_tokens) : 0.0;
}

// ---- the pipeline ---------------------------------------------------------------------------------------------

namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

// What a worker hands the packing stage for one sequence number.
struct Work {
  enum Kind { kSample, kSkip, kDrop, kEnd, kFatal } kind = kDrop;
  TokenizedSample sample;
  std::string key, reason;  // kSkip
  std::string place;        // where the record lies, for skip messages: sample_place()
  std::string state_after;  // the source state after this read
  Status status;            // kFatal
};

// Counters that belong to a position in the stream (saved with the state).
struct Counters {
  int64_t samples_read = 0, samples_packed = 0, skipped_invalid = 0, skipped_oversize = 0, batches = 0;
  int64_t real_tokens = 0, budget_tokens = 0;
  std::vector<std::string> skipped;
};

// Where a sample's record lies, so that a skipped one can be found: "shard 'train-003.tar', record 12" (the
// sample's 0-based index in the shard, its row in the .tar.idx), or "" for a sample of no shard.
std::string sample_place(const Sample& s) {
  if (s.shard.empty()) return {};
  if (s.index_in_shard < 0) return fmt::format("shard '{}'", s.shard);
  return fmt::format("shard '{}', record {}", s.shard, s.index_in_shard);
}

// A skip reason without a leading "sample '<key>': " (the parsers name the sample; the loader's line does).
std::string without_key(const std::string& reason, const std::string& key) {
  const std::string prefix = "sample '" + key + "': ";
  return reason.rfind(prefix, 0) == 0 ? reason.substr(prefix.size()) : reason;
}

struct OutItem {
  enum Kind { kBatch, kEnd, kError } kind = kBatch;
  PackedBatch batch;
  Status status;
  std::string state;  // the loader state after this batch
  Counters counters;  // the counters after this batch (batches / tokens include it)
};

// The parsed resume state.
struct SavedState {
  std::string source;
  uint64_t base = 0, end = 0;
  std::vector<uint64_t> keep;
  Counters counters;
};

json packing_json(const PackingConfig& p) {
  return json{{"max_tokens", p.max_tokens}, {"max_patches", p.max_patches}, {"max_samples", p.max_samples},
              {"lookahead", p.lookahead}};
}

std::string encode_state(const SavedState& s, const PackingConfig& p) {
  const Counters& c = s.counters;
  json j{{"format", "vlpar.loader"},
         {"version", 1},
         {"source", s.source},
         {"base", s.base},
         {"end", s.end},
         {"keep", s.keep},
         {"packing", packing_json(p)},
         {"counters",
          {{"samples_read", c.samples_read},
           {"samples_packed", c.samples_packed},
           {"skipped_invalid", c.skipped_invalid},
           {"skipped_oversize", c.skipped_oversize},
           {"batches", c.batches},
           {"real_tokens", c.real_tokens},
           {"budget_tokens", c.budget_tokens}}},
         {"skipped", c.skipped}};
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

Result<SavedState> decode_state(std::string_view text, const PackingConfig& p) {
  const json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  VLPAR_CHECK(!j.is_discarded() && j.is_object(), "Loader::restore: the state is not a JSON object");
  VLPAR_CHECK(j.value("format", "") == "vlpar.loader" && j.value("version", 0) == 1,
              "Loader::restore: not a vlpar.loader version 1 state");
  try {
    const json& pk = j.at("packing");
    const json want = packing_json(p);
    for (const auto& [k, v] : want.items())
      VLPAR_CHECK(pk.at(k) == v, "Loader::restore: the state was saved with packing.{} = {}, this loader has {}", k,
                  pk.at(k).dump(), v.dump());
    SavedState s;
    s.source = j.at("source").get<std::string>();
    s.base = j.at("base").get<uint64_t>();
    s.end = j.at("end").get<uint64_t>();
    s.keep = j.at("keep").get<std::vector<uint64_t>>();
    const json& c = j.at("counters");
    s.counters.samples_read = c.at("samples_read").get<int64_t>();
    s.counters.samples_packed = c.at("samples_packed").get<int64_t>();
    s.counters.skipped_invalid = c.at("skipped_invalid").get<int64_t>();
    s.counters.skipped_oversize = c.at("skipped_oversize").get<int64_t>();
    s.counters.batches = c.at("batches").get<int64_t>();
    s.counters.real_tokens = c.at("real_tokens").get<int64_t>();
    s.counters.budget_tokens = c.at("budget_tokens").get<int64_t>();
    s.counters.skipped = j.at("skipped").get<std::vector<std::string>>();
    VLPAR_CHECK(s.base <= s.end, "Loader::restore: base {} is past end {}", s.base, s.end);
    for (size_t i = 0; i < s.keep.size(); ++i)
      VLPAR_CHECK(s.keep[i] >= s.base && s.keep[i] < s.end && (i == 0 || s.keep[i] > s.keep[i - 1]),
                  "Loader::restore: keep[{}] = {} is not ascending inside [base {}, end {})", i, s.keep[i], s.base,
                  s.end);
    VLPAR_CHECK(s.keep.empty() || s.keep.front() == s.base,
                "Loader::restore: the oldest kept sample {} is not base {}", s.keep.empty() ? 0 : s.keep.front(),
                s.base);
    return s;
  } catch (const json::exception& e) {
    return VLPAR_STATUS(StatusCode::kInvalidArgument, "Loader::restore: malformed state: {}", e.what());
  }
}

}  // namespace

struct Loader::Impl {
  std::unique_ptr<SampleSource> source;
  SampleBuildFn build;
  MropeDesc desc;
  LoaderConfig config;
  int64_t window = 0;

  // ---- reading (read_mu): the source and the sequence numbers handed out
  std::mutex read_mu;
  uint64_t next_read_seq = 0;
  bool source_done = false;       // the source returned its end or an error
  uint64_t replay_end = 0;        // sequence numbers below this are replayed after a restore...
  std::vector<uint64_t> replay_keep;  // ...and only these are rebuilt (ascending)

  // ---- everything else (mu)
  std::mutex mu;
  std::condition_variable cv_window, cv_result, cv_out, cv_space;
  std::atomic<bool> stop{false};
  bool started = false;
  std::map<uint64_t, Work> results;  // reorder window
  uint64_t next_pack_seq = 0;        // the packing stage's next sequence number
  std::deque<OutItem> out;           // prefetch queue
  std::optional<OutItem> final_item; // the end or error, returned again by later next() calls

  // ---- packing stage state (packing thread only while running; restore/create otherwise)
  std::optional<Packer> packer;
  std::map<uint64_t, std::string> state_before;  // buffered sequence number → source state before it
  std::string last_state_after;                   // source state after the last consumed sequence number
  Counters counters;                              // as of the packing stage's progress
  int64_t skips_in_a_row = 0;                     // consecutive skipped samples (LoaderConfig::max_skips_in_a_row)

  // ---- consumer side (the next() caller)
  std::string current_state;  // after the last returned batch
  Counters current;           // counters after the last returned batch
  double wait_s = 0.0, last_wait_s = 0.0;

  std::vector<std::thread> threads;

  ~Impl() { stop_pipeline(); }

  void start_pipeline() {
    stop = false;
    for (int64_t w = 0; w < config.num_workers; ++w) threads.emplace_back([this] { worker_loop(); });
    threads.emplace_back([this] { packing_loop(); });
    started = true;
  }

  void stop_pipeline() {
    {
      std::lock_guard<std::mutex> l(mu);
      stop = true;
    }
    cv_window.notify_all();
    cv_result.notify_all();
    cv_out.notify_all();
    cv_space.notify_all();
    for (std::thread& t : threads) t.join();
    threads.clear();
    started = false;
    stop = false;
  }

  bool replay_drop(uint64_t seq) const {
    return seq < replay_end && !std::binary_search(replay_keep.begin(), replay_keep.end(), seq);
  }

  void worker_loop() {
    while (true) {
      uint64_t seq = 0;
      std::optional<Sample> raw;
      Work w;
      {
        std::lock_guard<std::mutex> rl(read_mu);
        if (stop || source_done) return;
        {
          std::unique_lock<std::mutex> l(mu);
          cv_window.wait(l, [&] { return stop.load() || next_read_seq < next_pack_seq + static_cast<uint64_t>(window); });
          if (stop) return;
        }
        Result<std::optional<Sample>> r = source->next();
        seq = next_read_seq++;
        if (!r.ok()) {
          w.kind = Work::kFatal;
          w.status = r.status();
          source_done = true;
        } else if (!r.value().has_value()) {
          w.kind = Work::kEnd;
          source_done = true;
        } else if (replay_drop(seq)) {
          w.kind = Work::kDrop;
        } else {
          w.kind = Work::kSample;
          raw = std::move(r.value());
        }
        w.state_after = source->save_state();
      }
      if (raw.has_value()) {
        w.key = raw->key;
        w.place = sample_place(*raw);
        try {
          Result<TokenizedSample> t = build(*raw);
          if (t.ok()) {
            w.sample = std::move(t).value();
          } else {
            w.kind = Work::kSkip;
            w.reason = t.status().message();
          }
        } catch (const std::exception& e) {
          w.kind = Work::kSkip;
          w.reason = std::string("exception: ") + e.what();
        }
        raw.reset();
      }
      const bool last = w.kind == Work::kEnd || w.kind == Work::kFatal;
      {
        std::lock_guard<std::mutex> l(mu);
        results.emplace(seq, std::move(w));
      }
      cv_result.notify_all();
      if (last) return;
    }
  }

  // Pushes an item to the prefetch queue; waits for space unless stopping (then the queue may exceed prefetch:
  // stopping never loses an item, so a restart continues exactly).
  void push_out(OutItem item) {
    std::unique_lock<std::mutex> l(mu);
    cv_space.wait(l, [&] { return stop.load() || static_cast<int64_t>(out.size()) < config.prefetch; });
    out.push_back(std::move(item));
    l.unlock();
    cv_out.notify_all();
  }

  // Warns and lists one skipped sample: its key, where its record lies, and why (reason without the key again).
  void note_skip(const std::string& key, const std::string& place, const std::string& reason) {
    const std::string why = without_key(reason, key);
    const std::string at = place.empty() ? std::string() : " [" + place + "]";
    log_warn("loader: skipping sample '{}'{}: {}", key, at, why);
    if (static_cast<int64_t>(counters.skipped.size()) < config.max_logged_skips)
      counters.skipped.push_back(key + ": " + why + at);
  }

  SavedState snapshot() const {
    SavedState s;
    s.end = next_pack_seq;
    if (packer->empty()) {
      s.base = next_pack_seq;
      s.source = last_state_after;
    } else {
      s.base = packer->buffer().front().tag;
      s.source = state_before.at(s.base);
      for (const Packer::Entry& e : packer->buffer()) s.keep.push_back(e.tag);
    }
    s.counters = counters;
    return s;
  }

  // Pops one pack and queues it with the state after it. Returns false after a fatal packing error.
  bool emit() {
    std::vector<uint64_t> tags;
    Result<PackedBatch> b = packer->pop(&tags);
    if (!b.ok()) {
      OutItem e;
      e.kind = OutItem::kError;
      e.status = b.status();
      push_out(std::move(e));
      return false;
    }
    for (uint64_t t : tags) state_before.erase(t);
    counters.samples_packed += static_cast<int64_t>(tags.size());
    counters.batches += 1;
    counters.real_tokens += b.value().real_tokens;
    counters.budget_tokens += b.value().token_budget;
    OutItem item;
    item.kind = OutItem::kBatch;
    item.batch = std::move(b).value();
    item.counters = counters;
    item.state = encode_state(snapshot(), config.packing);
    push_out(std::move(item));
    return true;
  }

  // Counts a skipped sample; past config.max_skips_in_a_row consecutive skips the loader fails (false: stop).
  bool count_skip_in_a_row(const std::string& key, const std::string& reason) {
    ++skips_in_a_row;
    if (config.max_skips_in_a_row <= 0 || skips_in_a_row < config.max_skips_in_a_row) return true;
    OutItem e;
    e.kind = OutItem::kError;
    e.status = VLPAR_STATUS(StatusCode::kInvalidArgument,
                            "loader: {} samples in a row were skipped (the last: {}: {}); this data cannot feed "
                            "training (see the skip warnings)", skips_in_a_row, key, reason);
    push_out(std::move(e));
    return false;
  }

  void packing_loop() {
    while (true) {
      Work w;
      uint64_t seq = 0;
      {
        std::unique_lock<std::mutex> l(mu);
        cv_result.wait(l, [&] { return stop.load() || results.count(next_pack_seq) > 0; });
        if (stop) return;
        auto it = results.find(next_pack_seq);
        w = std::move(it->second);
        results.erase(it);
        seq = next_pack_seq++;
      }
      cv_window.notify_all();
      const std::string before = std::move(last_state_after);
      last_state_after = std::move(w.state_after);
      switch (w.kind) {
        case Work::kDrop:
          break;
        case Work::kSkip:
          ++counters.samples_read;
          ++counters.skipped_invalid;
          note_skip(w.key, w.place, w.reason);
          if (!count_skip_in_a_row(w.key, w.reason)) return;
          break;
        case Work::kSample: {
          if (seq >= replay_end) ++counters.samples_read;  // a replayed sample was counted before the save
          const std::string key = w.sample.key;
          Result<Packer::Admit> a = packer->push(std::move(w.sample), seq);
          if (!a.ok()) {
            ++counters.skipped_invalid;
            note_skip(key, w.place, a.status().message());
            if (!count_skip_in_a_row(key, a.status().message())) return;
          } else if (a.value() != Packer::Admit::kBuffered) {
            ++counters.skipped_oversize;  // the packer warned
            if (static_cast<int64_t>(counters.skipped.size()) < config.max_logged_skips)
              counters.skipped.push_back(key + ": over a pack budget alone");
            if (!count_skip_in_a_row(key, "over a pack budget alone")) return;
          } else {
            state_before.emplace(seq, before);
            skips_in_a_row = 0;
          }
          while (packer->ready())
            if (!emit()) return;
          break;
        }
        case Work::kEnd: {
          while (!packer->empty())
            if (!emit()) return;
          OutItem e;
          e.kind = OutItem::kEnd;
          e.counters = counters;
          e.state = encode_state(snapshot(), config.packing);
          push_out(std::move(e));
          return;
        }
        case Work::kFatal: {
          OutItem e;
          e.kind = OutItem::kError;
          e.status = w.status;
          push_out(std::move(e));
          return;
        }
      }
    }
  }

  // Resets every stage to `s` (pipeline stopped).
  Status reset_to(const SavedState& s, std::string state_text) {
    VLPAR_RETURN_IF_ERROR(source->restore(s.source));
    VLPAR_ASSIGN_OR_RETURN(Packer p, Packer::create(config.packing, desc));
    packer.emplace(std::move(p));
    next_read_seq = s.base;
    next_pack_seq = s.base;
    source_done = false;
    replay_end = s.end;
    replay_keep = s.keep;
    results.clear();
    out.clear();
    final_item.reset();
    state_before.clear();
    last_state_after = s.source;
    counters = s.counters;
    current = s.counters;
    current_state = std::move(state_text);
    return Status::Ok();
  }
};

Loader::Loader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Loader::~Loader() = default;

Result<std::unique_ptr<Loader>> Loader::create(std::unique_ptr<SampleSource> source, SampleBuildFn build,
                                               MropeDesc desc, LoaderConfig config) {
  VLPAR_CHECK(source != nullptr, "Loader: no sample source");
  VLPAR_CHECK(static_cast<bool>(build), "Loader: no sample build function");
  VLPAR_RETURN_IF_ERROR(config.validate());
  auto impl = std::make_unique<Impl>();
  impl->source = std::move(source);
  impl->build = std::move(build);
  impl->desc = desc;
  impl->config = config;
  impl->window = config.reorder_window > 0 ? config.reorder_window : 4 * config.num_workers + 8;
  SavedState s;
  s.source = impl->source->save_state();
  std::string text = encode_state(s, config.packing);
  VLPAR_RETURN_IF_ERROR(impl->reset_to(s, std::move(text)));
  return std::unique_ptr<Loader>(new Loader(std::move(impl)));
}

Result<std::unique_ptr<Loader>> Loader::create(std::unique_ptr<SampleSource> source,
                                               std::shared_ptr<const ConversationBuilder> builder,
                                               LoaderConfig config) {
  VLPAR_CHECK(builder != nullptr, "Loader: no conversation builder");
  const MropeDesc desc = builder->mrope_desc();
  SampleBuildFn fn = [b = std::move(builder)](const Sample& s) { return b->build(s); };
  return create(std::move(source), std::move(fn), desc, std::move(config));
}

Result<std::optional<PackedBatch>> Loader::next() {
  Impl& m = *impl_;
  if (m.final_item.has_value()) {
    if (m.final_item->kind == OutItem::kError) return m.final_item->status;
    return std::optional<PackedBatch>();
  }
  if (!m.started) m.start_pipeline();
  const Clock::time_point t0 = Clock::now();
  OutItem item;
  {
    std::unique_lock<std::mutex> l(m.mu);
    m.cv_out.wait(l, [&] { return !m.out.empty(); });
    item = std::move(m.out.front());
    m.out.pop_front();
  }
  m.cv_space.notify_all();
  m.last_wait_s = std::chrono::duration<double>(Clock::now() - t0).count();
  m.wait_s += m.last_wait_s;
  switch (item.kind) {
    case OutItem::kBatch:
      m.current = std::move(item.counters);
      m.current_state = std::move(item.state);
      return std::optional<PackedBatch>(std::move(item.batch));
    case OutItem::kEnd:
      m.current = item.counters;
      m.current_state = item.state;
      m.final_item = std::move(item);
      return std::optional<PackedBatch>();
    case OutItem::kError:
      m.final_item = std::move(item);
      return m.final_item->status;
  }
  return VLPAR_STATUS(StatusCode::kInternal, "Loader::next: unknown item");
}

std::string Loader::save_state() const { return impl_->current_state; }

Status Loader::restore(std::string_view state) {
  Impl& m = *impl_;
  VLPAR_ASSIGN_OR_RETURN(SavedState s, decode_state(state, m.config.packing));
  m.stop_pipeline();
  return m.reset_to(s, std::string(state));
}

LoaderStats Loader::stats() const {
  const Impl& m = *impl_;
  LoaderStats st;
  st.samples_read = m.current.samples_read;
  st.samples_packed = m.current.samples_packed;
  st.skipped_invalid = m.current.skipped_invalid;
  st.skipped_oversize = m.current.skipped_oversize;
  st.batches = m.current.batches;
  st.real_tokens = m.current.real_tokens;
  st.budget_tokens = m.current.budget_tokens;
  st.wait_s = m.wait_s;
  st.last_wait_s = m.last_wait_s;
  st.skipped = m.current.skipped;
  return st;
}

std::string Loader::summary() const {
  const LoaderStats st = stats();
  std::string s = fmt::format(
      "loader: {} batches, {} samples read, {} packed, {} skipped as invalid, {} skipped as over a budget; "
      "packing efficiency {:.2f}%; waited {:.3f} s for data\n",
      st.batches, st.samples_read, st.samples_packed, st.skipped_invalid, st.skipped_oversize,
      100.0 * st.efficiency(), st.wait_s);
  for (const std::string& k : st.skipped) s += "  skipped " + k + "\n";
  const int64_t not_listed = st.skipped_invalid + st.skipped_oversize - static_cast<int64_t>(st.skipped.size());
  if (not_listed > 0) s += fmt::format("  ... and {} more skipped samples\n", not_listed);
  return s;
}

}  // namespace vlpar::data
