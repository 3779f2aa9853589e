#pragma once
// Hand-encoded tensorboard.Event protos (tensorboard/compat/proto/{event,summary}.proto), just the subset a
// trainer needs, so vlpar writes TensorBoard files without protobuf or TensorFlow.
//   Event   { double wall_time = 1; int64 step = 2; oneof what { string file_version = 3; Summary summary = 5;
//             SessionLog session_log = 7; } SourceMetadata source_metadata = 10; }
//   Summary { repeated Value value = 1; }   Value { string tag = 1; oneof value { float simple_value = 2; } }
//   SessionLog { SessionStatus status = 1; }  (START = 1)     SourceMetadata { string writer = 1; }
// Encoding follows proto3 as the reference (Python) serializer does: fields in field-number order, scalar fields
// equal to their default (wall_time 0.0, step 0) omitted, oneof members always written (simple_value 0.0 too),
// negative int64 as a 10-byte varint. So the bytes equal the reference writer's for the same values.
//   decode_event: the inverse, for tests and tools; unknown fields are skipped, malformed input is a Status.
// Test: tests/unit/test_obs_tensorboard.cpp.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "vlpar/core/status.hpp"

namespace vlpar::obs {

/// One Summary.Value with a simple_value (TensorBoard's legacy scalar, shown by the scalars dashboard).
struct TbScalar {
  std::string tag;
  float value = 0.0f;
};

/// @brief Event{wall_time, file_version="brain.Event:2", source_metadata{writer}} (source_metadata omitted when
/// `writer` is empty). Must be the first record of an event file.
std::string encode_file_version_event(double wall_time, std::string_view writer = {});

/// @brief Event{wall_time, step, summary{value: one per scalar}}.
std::string encode_scalar_event(double wall_time, int64_t step, std::span<const TbScalar> scalars);

/// @brief Event{wall_time, step, session_log{status: START}}. TensorBoard's reader discards every event of this
/// file with step >= `step` that came before it (how a resumed run hides the steps it is about to redo).
std::string encode_session_start_event(double wall_time, int64_t step);

struct DecodedEvent {
  double wall_time = 0.0;
  int64_t step = 0;
  std::optional<std::string> file_version;
  std::string source_writer;             // SourceMetadata.writer ("" when absent)
  std::vector<TbScalar> scalars;         // Summary values that carry simple_value
  int64_t non_scalar_values = 0;         // Summary values with any other payload (tensor, image, ...)
  std::optional<int64_t> session_status; // SessionLog.status when the event is a session_log
};

/// @brief Parses one Event proto (the data of one TFRecord).
Result<DecodedEvent> decode_event(std::string_view bytes);

}  // namespace vlpar::obs
