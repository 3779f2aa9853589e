// Chrome / Perfetto trace recorder with per-thread ring buffers. See include/vlpar/obs/trace_recorder.hpp.
#include "vlpar/obs/trace_recorder.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "vlpar/io/safetensors.hpp"  // atomic_write_file

namespace vlpar::obs {
namespace detail {

struct TraceEvent {
  int64_t start_ns = 0;
  int64_t dur_ns = 0;
  std::string cat, name, args;  // args: JSON members without braces
};

// One track's events: a thread's (only its owner thread appends, plus write_json/clear reading, so `mu` is
// uncontended during training) or a named track's (record_complete_on, from any thread).
struct TraceBuffer {
  TraceState* state = nullptr;
  int64_t tid = 0;
  std::mutex mu;
  std::string thread_name;         // guarded by mu
  std::vector<TraceEvent> ring;    // guarded by mu; size() <= capacity
  size_t head = 0;                 // when full, index of the oldest event (the next to be overwritten)
  int64_t dropped = 0;             // guarded by mu
  size_t capacity = 1;

  void push(TraceEvent&& ev) {
    std::lock_guard<std::mutex> lock(mu);
    if (ring.size() < capacity) {
      ring.push_back(std::move(ev));
    } else {
      ring[head] = std::move(ev);
      head = (head + 1) % capacity;
      ++dropped;
    }
  }
};

struct TraceState {
  TraceRecorder::Options options;
  std::chrono::steady_clock::time_point origin = std::chrono::steady_clock::now();
  double unix_origin_s = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  mutable std::shared_mutex mu;  // guards buffers, named and next_tid
  std::unordered_map<std::thread::id, std::unique_ptr<TraceBuffer>> buffers;
  std::map<std::string, std::unique_ptr<TraceBuffer>, std::less<>> named;  // tracks of their own (not a thread)
  int64_t next_tid = 1;

  std::unique_ptr<TraceBuffer> new_buffer(std::string name) {  // under the unique lock of mu
    auto b = std::make_unique<TraceBuffer>();
    b->state = this;
    b->tid = next_tid++;
    b->thread_name = name.empty() ? fmt::format("thread {}", b->tid) : std::move(name);
    b->capacity = static_cast<size_t>(std::max<int64_t>(1, options.max_events_per_thread));
    return b;
  }
  TraceBuffer* named_buffer(std::string_view name) {
    {
      std::shared_lock<std::shared_mutex> lock(mu);
      auto it = named.find(name);
      if (it != named.end()) return it->second.get();
    }
    std::unique_lock<std::shared_mutex> lock(mu);
    std::unique_ptr<TraceBuffer>& slot = named[std::string(name)];
    if (!slot) slot = new_buffer(std::string(name));
    return slot.get();
  }
  /// Calls f(buffer) for every thread's and named track's buffer, under the shared lock of mu.
  template <class F>
  void for_each_buffer(F&& f) const {
    std::shared_lock<std::shared_mutex> lock(mu);
    for (const auto& [id, b] : buffers) f(*b);
    for (const auto& [name, b] : named) f(*b);
  }

  int64_t now_ns() const {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - origin).count();
  }

  TraceBuffer* this_thread_buffer() {
    const std::thread::id id = std::this_thread::get_id();
    {
      std::shared_lock<std::shared_mutex> lock(mu);
      auto it = buffers.find(id);
      if (it != buffers.end()) return it->second.get();
    }
    std::unique_lock<std::shared_mutex> lock(mu);
    auto& slot = buffers[id];
    if (!slot) slot = new_buffer({});
    return slot.get();
  }
};

}  // namespace detail

namespace {

void append_json_string(std::string& out, std::string_view s) {
  out.push_back('"');
  for (const char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
        else out.push_back(c);
    }
  }
  out.push_back('"');
}

// Non-negative nanoseconds as microseconds with three decimals (exact: no binary rounding on the way).
void append_us(std::string& out, int64_t ns) {
  ns = std::max<int64_t>(ns, 0);
  out += fmt::format("{}.{:03d}", ns / 1000, ns % 1000);
}

void begin_arg(std::string& args, std::string_view key) {
  if (!args.empty()) args.push_back(',');
  append_json_string(args, key);
  args.push_back(':');
}

}  // namespace

// ---- Span --------------------------------------------------------------------------------------------------------
Span::Span(detail::TraceBuffer* buffer, int64_t start_ns, std::string_view cat, std::string_view name)
    : buffer_(buffer), start_ns_(start_ns), cat_(cat), name_(name) {}

Span::Span(Span&& other) noexcept
    : buffer_(std::exchange(other.buffer_, nullptr)),
      start_ns_(other.start_ns_),
      cat_(std::move(other.cat_)),
      name_(std::move(other.name_)),
      args_(std::move(other.args_)) {}

Span& Span::arg(std::string_view key, int64_t value) {
  if (buffer_ == nullptr) return *this;
  begin_arg(args_, key);
  args_ += std::to_string(value);
  return *this;
}

Span& Span::arg(std::string_view key, double value) {
  if (buffer_ == nullptr) return *this;
  begin_arg(args_, key);
  args_ += std::isfinite(value) ? fmt::format("{}", value) : std::string("null");
  return *this;
}

Span& Span::arg(std::string_view key, std::string_view value) {
  if (buffer_ == nullptr) return *this;
  begin_arg(args_, key);
  append_json_string(args_, value);
  return *this;
}

void Span::end() {
  detail::TraceBuffer* buffer = std::exchange(buffer_, nullptr);
  if (buffer == nullptr) return;
  const int64_t end_ns = buffer->state->now_ns();
  buffer->push(detail::TraceEvent{start_ns_, end_ns - start_ns_, std::move(cat_), std::move(name_), std::move(args_)});
}

// ---- TraceRecorder -----------------------------------------------------------------------------------------------
TraceRecorder::TraceRecorder() : TraceRecorder(Options{}) {}

TraceRecorder::TraceRecorder(const Options& options) : enabled_(options.enabled) {
  if (enabled_) {
    state_ = std::make_unique<detail::TraceState>();
    state_->options = options;
  }
}

TraceRecorder::TraceRecorder(TraceRecorder&& other) noexcept
    : enabled_(std::exchange(other.enabled_, false)), state_(std::move(other.state_)) {}

TraceRecorder& TraceRecorder::operator=(TraceRecorder&& other) noexcept {
  if (this != &other) {
    enabled_ = std::exchange(other.enabled_, false);
    state_ = std::move(other.state_);
  }
  return *this;
}

TraceRecorder::~TraceRecorder() = default;

Span TraceRecorder::open_span(std::string_view cat, std::string_view name) {
  detail::TraceBuffer* buffer = state_->this_thread_buffer();
  return Span(buffer, state_->now_ns(), cat, name);
}

void TraceRecorder::record_complete(std::string_view cat, std::string_view name, int64_t start_ns, int64_t dur_ns) {
  if (!enabled_) return;
  state_->this_thread_buffer()->push(
      detail::TraceEvent{start_ns, std::max<int64_t>(dur_ns, 0), std::string(cat), std::string(name), {}});
}

void TraceRecorder::record_complete_on(std::string_view track, std::string_view cat, std::string_view name,
                                       int64_t start_ns, int64_t dur_ns) {
  if (!enabled_) return;
  state_->named_buffer(track)->push(
      detail::TraceEvent{start_ns, std::max<int64_t>(dur_ns, 0), std::string(cat), std::string(name), {}});
}

int64_t TraceRecorder::now_ns() const { return enabled_ ? state_->now_ns() : 0; }

void TraceRecorder::set_thread_name(std::string_view name) {
  if (!enabled_) return;
  detail::TraceBuffer* b = state_->this_thread_buffer();
  std::lock_guard<std::mutex> lock(b->mu);
  b->thread_name = std::string(name);
}

int64_t TraceRecorder::event_count() const {
  if (!enabled_) return 0;
  int64_t n = 0;
  state_->for_each_buffer([&](detail::TraceBuffer& b) {
    std::lock_guard<std::mutex> bl(b.mu);
    n += static_cast<int64_t>(b.ring.size());
  });
  return n;
}

int64_t TraceRecorder::dropped_events() const {
  if (!enabled_) return 0;
  int64_t n = 0;
  state_->for_each_buffer([&](detail::TraceBuffer& b) {
    std::lock_guard<std::mutex> bl(b.mu);
    n += b.dropped;
  });
  return n;
}

void TraceRecorder::clear() {
  if (!enabled_) return;
  state_->for_each_buffer([](detail::TraceBuffer& b) {
    std::lock_guard<std::mutex> bl(b.mu);
    b.ring.clear();
    b.head = 0;
    b.dropped = 0;
  });
}

std::string TraceRecorder::to_json() const {
  struct Flat {
    int64_t tid;
    const detail::TraceEvent* ev;
  };
  struct ThreadInfo {
    int64_t tid;
    std::string name;
  };
  std::vector<detail::TraceEvent> events;  // snapshot, so buffers are locked only while copying
  std::vector<int64_t> tids;
  std::vector<ThreadInfo> threads;
  int64_t dropped = 0;
  int64_t pid = 0;
  double unix_origin_s = 0.0;
  std::string process_name;
  if (enabled_) {
    pid = state_->options.pid;
    unix_origin_s = state_->unix_origin_s;
    process_name = state_->options.process_name;
    state_->for_each_buffer([&](detail::TraceBuffer& b) {
      std::lock_guard<std::mutex> bl(b.mu);
      threads.push_back({b.tid, b.thread_name});
      dropped += b.dropped;
      for (const detail::TraceEvent& ev : b.ring) {
        events.push_back(ev);
        tids.push_back(b.tid);
      }
    });
  }
  std::vector<Flat> order;
  order.reserve(events.size());
  for (size_t i = 0; i < events.size(); ++i) order.push_back({tids[i], &events[i]});
  // Sorted by start, parents (longer) before children, then track: deterministic and easy to read.
  std::sort(order.begin(), order.end(), [](const Flat& a, const Flat& b) {
    if (a.ev->start_ns != b.ev->start_ns) return a.ev->start_ns < b.ev->start_ns;
    if (a.ev->dur_ns != b.ev->dur_ns) return a.ev->dur_ns > b.ev->dur_ns;
    return a.tid < b.tid;
  });
  std::sort(threads.begin(), threads.end(), [](const ThreadInfo& a, const ThreadInfo& b) { return a.tid < b.tid; });

  std::string out = "{\"traceEvents\":[";
  bool first = true;
  auto sep = [&] {
    if (!first) out += ",\n";
    first = false;
  };
  if (!process_name.empty()) {
    sep();
    out += fmt::format("{{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":{},\"tid\":0,\"args\":{{\"name\":", pid);
    append_json_string(out, process_name);
    out += "}}";
  }
  for (const ThreadInfo& t : threads) {
    sep();
    out += fmt::format("{{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":{},\"tid\":{},\"args\":{{\"name\":", pid, t.tid);
    append_json_string(out, t.name);
    out += "}}";
    sep();
    out += fmt::format(
        "{{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":{},\"tid\":{},\"args\":{{\"sort_index\":{}}}}}", pid,
        t.tid, t.tid);
  }
  for (const Flat& f : order) {
    sep();
    out += "{\"name\":";
    append_json_string(out, f.ev->name);
    out += ",\"cat\":";
    append_json_string(out, f.ev->cat);
    out += ",\"ph\":\"X\",\"ts\":";
    append_us(out, f.ev->start_ns);
    out += ",\"dur\":";
    append_us(out, f.ev->dur_ns);
    out += fmt::format(",\"pid\":{},\"tid\":{}", pid, f.tid);
    if (!f.ev->args.empty()) out += fmt::format(",\"args\":{{{}}}", f.ev->args);
    out += "}";
  }
  out += fmt::format(
      "],\n\"displayTimeUnit\":\"ms\",\n\"otherData\":{{\"producer\":\"vlpar.obs.TraceRecorder\","
      "\"unix_time_origin_s\":{:.6f},\"dropped_events\":{}}}}}\n",
      unix_origin_s, dropped);
  return out;
}

Status TraceRecorder::write_json(const std::string& path) const {
  const std::string text = to_json();
  const std::span<const std::byte> piece(reinterpret_cast<const std::byte*>(text.data()), text.size());
  return io::atomic_write_file(path, std::span<const std::span<const std::byte>>(&piece, 1));
}

}  // namespace vlpar::obs
