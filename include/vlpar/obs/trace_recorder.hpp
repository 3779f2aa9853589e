#pragma once
// A Chrome / Perfetto trace of where a training step spends its time (Trace Event Format, spec §4).
//   TraceRecorder : collects complete events (ph "X": ts and dur in µs, pid, tid, name, cat, args) from any number
//                   of threads. Each thread appends to its own buffer (registered on first use, then only its own
//                   uncontended mutex is taken), so threads do not serialise on one lock; write_json merges the
//                   buffers. Memory is bounded: each thread buffer is a ring of max_events_per_thread events; when
//                   full the oldest event is dropped and counted (otherData.dropped_events in the JSON).
//   Span          : RAII scope; the event is recorded when the Span ends (destructor or end()). Spans opened
//                   inside spans on the same thread nest (Perfetto draws them as a stack). A Span may end on another
//                   thread; it stays on the track of the thread that opened it.
//   Tracks are keyed by std::thread::id: a thread started after another one ended may be given the same id by the
//   C library and then continues that thread's track (their events never overlap in time, so nesting stays valid);
//   call set_thread_name at the start of a thread to give the track its name.
//   A disabled recorder returns inert Spans: no clock read, no allocation, no lock (a branch and a few stores).
//   write_json    : {"traceEvents":[ M process/thread names..., X events sorted by (ts, -dur) ...],
//                    "displayTimeUnit":"ms", "otherData":{...}}, written atomically (tmp, fsync, rename), so it can
//                   be called periodically (e.g. at each checkpoint) and at the end; it does not clear the buffers.
// ts is µs since the recorder was created (steady clock, ns resolution written as fractional µs, so a child never
// sticks out of its parent by rounding); otherData.unix_time_origin_s aligns files of several ranks.
// Categories used by the trainer: see kTraceCategories. Open the file in https://ui.perfetto.dev or chrome://tracing.
// Test: tests/unit/test_obs_trace.cpp.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "vlpar/core/status.hpp"

namespace vlpar::obs {

/// The span categories of the vlpar trainer (any other string works too).
namespace trace_cat {
inline constexpr std::string_view kData = "data";
inline constexpr std::string_view kVisionEncoder = "vision_encoder";
inline constexpr std::string_view kMerger = "merger";
inline constexpr std::string_view kDecoder = "decoder";
inline constexpr std::string_view kLoss = "loss";
inline constexpr std::string_view kOptimizer = "optimizer";
inline constexpr std::string_view kCommunication = "communication";
inline constexpr std::string_view kCheckpoint = "checkpoint";
inline constexpr std::string_view kPipeline = "pipeline";  // pipeline actions (F/B of a stage), their waits
}  // namespace trace_cat

class TraceRecorder;
namespace detail {
struct TraceState;   // src/obs/trace_recorder.cpp
struct TraceBuffer;  // one thread's ring of events
}  // namespace detail

class Span {
 public:
  Span() = default;  // inert
  Span(Span&& other) noexcept;
  Span& operator=(Span&&) = delete;
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;
  ~Span() {
    if (buffer_ != nullptr) end();
  }

  /// @brief Adds an entry to the event's "args" (ignored by an inert span). Returns *this for chaining.
  Span& arg(std::string_view key, int64_t value);
  Span& arg(std::string_view key, double value);
  Span& arg(std::string_view key, std::string_view value);
  Span& arg(std::string_view key, const char* value) { return arg(key, std::string_view(value)); }
  Span& arg(std::string_view key, int value) { return arg(key, static_cast<int64_t>(value)); }

  /// @brief Records the event now (idempotent).
  void end();
  bool active() const { return buffer_ != nullptr; }

 private:
  friend class TraceRecorder;
  Span(detail::TraceBuffer* buffer, int64_t start_ns, std::string_view cat, std::string_view name);
  detail::TraceBuffer* buffer_ = nullptr;  // the opening thread's buffer; null when inert or ended
  int64_t start_ns_ = 0;
  std::string cat_, name_;
  std::string args_;       // JSON members without braces: "k":v,"k2":"s"
};

class TraceRecorder {
 public:
  struct Options {
    bool enabled = true;
    int64_t pid = 0;                        // the process id in the trace (the rank)
    std::string process_name;               // M event process_name (e.g. "rank 0"); empty: none
    int64_t max_events_per_thread = 1 << 16;  // ring size per thread (~100 B per event)
  };

  TraceRecorder();  // enabled, default options
  explicit TraceRecorder(const Options& options);
  TraceRecorder(TraceRecorder&&) noexcept;
  TraceRecorder& operator=(TraceRecorder&&) noexcept;
  ~TraceRecorder();

  bool enabled() const { return enabled_; }

  /// @brief Opens a span on the calling thread's track (inert when disabled: nothing but this branch runs).
  [[nodiscard]] Span span(std::string_view cat, std::string_view name) {
    if (!enabled_) return Span();
    return open_span(cat, name);
  }

  /// @brief Records a complete event that was timed elsewhere: [start_ns, start_ns + dur_ns) on the recorder's
  /// clock (now_ns()), on the calling thread's track.
  void record_complete(std::string_view cat, std::string_view name, int64_t start_ns, int64_t dur_ns);
  /// @brief The same on a track of its own named `track` (created on first use; not a thread's), e.g. the events
  /// of another rank gathered into this trace.
  void record_complete_on(std::string_view track, std::string_view cat, std::string_view name, int64_t start_ns,
                          int64_t dur_ns);

  /// @brief Nanoseconds since the recorder was created (steady clock).
  int64_t now_ns() const;

  /// @brief Names the calling thread's track (M event thread_name). Default "thread <tid>"; the first thread to
  /// record gets tid 1.
  void set_thread_name(std::string_view name);

  /// @brief Events currently held (all threads) and events dropped by the rings so far.
  int64_t event_count() const;
  int64_t dropped_events() const;

  /// @brief The trace JSON of everything held now.
  std::string to_json() const;
  /// @brief to_json() written atomically to `path`.
  Status write_json(const std::string& path) const;
  /// @brief Forgets all held events (thread registrations and names are kept).
  void clear();

 private:
  Span open_span(std::string_view cat, std::string_view name);
  bool enabled_ = false;
  std::unique_ptr<detail::TraceState> state_;  // null when disabled
};

}  // namespace vlpar::obs
