// Hand-written protobuf wire encoding of the tensorboard.Event subset. See include/vlpar/obs/event_proto.hpp.
// Wire format: each field is a varint key (field_number << 3 | wire_type) then the payload; wire types used here:
// 0 varint, 1 fixed64 (double), 2 length-delimited (string, bytes, nested message), 5 fixed32 (float).
#include "vlpar/obs/event_proto.hpp"

#include <bit>
#include <cstring>

namespace vlpar::obs {
namespace {

enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

// Field numbers, from tensorboard/compat/proto/event.proto and summary.proto.
constexpr uint32_t kEventWallTime = 1;        // double
constexpr uint32_t kEventStep = 2;            // int64
constexpr uint32_t kEventFileVersion = 3;     // string (oneof what)
constexpr uint32_t kEventSummary = 5;         // Summary (oneof what)
constexpr uint32_t kEventSessionLog = 7;      // SessionLog (oneof what)
constexpr uint32_t kEventSourceMetadata = 10; // SourceMetadata
constexpr uint32_t kSummaryValue = 1;         // repeated Value
constexpr uint32_t kValueTag = 1;             // string
constexpr uint32_t kValueSimpleValue = 2;     // float (oneof value)
constexpr uint32_t kSessionLogStatus = 1;     // enum SessionStatus
constexpr uint32_t kSourceMetadataWriter = 1; // string
constexpr int64_t kSessionStart = 1;          // SessionLog.SessionStatus.START

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}
void put_key(std::string& out, uint32_t field, WireType type) { put_varint(out, (uint64_t{field} << 3) | type); }
void put_fixed(std::string& out, uint64_t bits, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((bits >> (8 * i)) & 0xFF));
}
void put_bytes(std::string& out, uint32_t field, std::string_view bytes) {
  put_key(out, field, kLengthDelimited);
  put_varint(out, bytes.size());
  out.append(bytes);
}
// proto3 scalars are written only when they differ from the default (0); the reference serializer compares the
// bit pattern for doubles, so -0.0 is written.
void put_wall_time(std::string& out, double wall_time) {
  const auto bits = std::bit_cast<uint64_t>(wall_time);
  if (bits == 0) return;
  put_key(out, kEventWallTime, kFixed64);
  put_fixed(out, bits, 8);
}
void put_step(std::string& out, int64_t step) {
  if (step == 0) return;
  put_key(out, kEventStep, kVarint);
  put_varint(out, static_cast<uint64_t>(step));  // negative: two's complement, 10 bytes
}

// ---- decoding -------------------------------------------------------------------------------------------------
struct Reader {
  std::string_view buf;
  size_t pos = 0;
  bool done() const { return pos >= buf.size(); }
};

Result<uint64_t> get_varint(Reader& r, const char* what) {
  uint64_t v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (r.done()) return VLPAR_STATUS(StatusCode::kInvalidArgument, "{}: truncated varint at byte {}", what, r.pos);
    const auto b = static_cast<unsigned char>(r.buf[r.pos++]);
    v |= static_cast<uint64_t>(b & 0x7F) << shift;
    if ((b & 0x80) == 0) return v;
  }
  return VLPAR_STATUS(StatusCode::kInvalidArgument, "{}: varint longer than 10 bytes at byte {}", what, r.pos);
}
Result<uint64_t> get_fixed(Reader& r, int bytes, const char* what) {
  if (r.buf.size() - r.pos < static_cast<size_t>(bytes))
    return VLPAR_STATUS(StatusCode::kInvalidArgument, "{}: truncated fixed{} at byte {}", what, 8 * bytes, r.pos);
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(r.buf[r.pos + i])) << (8 * i);
  r.pos += bytes;
  return v;
}
Result<std::string_view> get_bytes(Reader& r, const char* what) {
  VLPAR_ASSIGN_OR_RETURN(uint64_t len, get_varint(r, what));
  if (len > r.buf.size() - r.pos)
    return VLPAR_STATUS(StatusCode::kInvalidArgument, "{}: length {} at byte {} runs past the end ({} bytes)", what,
                        len, r.pos, r.buf.size());
  std::string_view s = r.buf.substr(r.pos, len);
  r.pos += len;
  return s;
}
struct Field {
  uint32_t number = 0;
  uint32_t type = 0;
  uint64_t scalar = 0;     // varint / fixed payload
  std::string_view bytes;  // length-delimited payload
};
Result<Field> get_field(Reader& r, const char* what) {
  VLPAR_ASSIGN_OR_RETURN(uint64_t key, get_varint(r, what));
  Field f;
  f.number = static_cast<uint32_t>(key >> 3);
  f.type = static_cast<uint32_t>(key & 7);
  if (f.number == 0) return VLPAR_STATUS(StatusCode::kInvalidArgument, "{}: field number 0 at byte {}", what, r.pos);
  switch (f.type) {
    case kVarint: {
      VLPAR_ASSIGN_OR_RETURN(f.scalar, get_varint(r, what));
      break;
    }
    case kFixed64: {
      VLPAR_ASSIGN_OR_RETURN(f.scalar, get_fixed(r, 8, what));
      break;
    }
    case kLengthDelimited: {
      VLPAR_ASSIGN_OR_RETURN(f.bytes, get_bytes(r, what));
      break;
    }
    case kFixed32: {
      VLPAR_ASSIGN_OR_RETURN(f.scalar, get_fixed(r, 4, what));
      break;
    }
    default:
      return VLPAR_STATUS(StatusCode::kInvalidArgument, "{}: unsupported wire type {} (field {}) at byte {}", what,
                          f.type, f.number, r.pos);
  }
  return f;
}
Status expect_type(const Field& f, WireType type, const char* what) {
  VLPAR_CHECK(f.type == type, "{}: field {} has wire type {}, expected {}", what, f.number, f.type,
              static_cast<uint32_t>(type));
  return Status::Ok();
}

Status decode_value(std::string_view bytes, DecodedEvent& ev) {
  Reader r{bytes};
  std::string tag;
  std::optional<float> simple;
  bool other_payload = false;
  while (!r.done()) {
    VLPAR_ASSIGN_OR_RETURN(Field f, get_field(r, "Summary.Value"));
    if (f.number == kValueTag) {
      VLPAR_RETURN_IF_ERROR(expect_type(f, kLengthDelimited, "Summary.Value.tag"));
      tag.assign(f.bytes);
    } else if (f.number == kValueSimpleValue) {
      VLPAR_RETURN_IF_ERROR(expect_type(f, kFixed32, "Summary.Value.simple_value"));
      simple = std::bit_cast<float>(static_cast<uint32_t>(f.scalar));
    } else if (f.number >= 3 && f.number <= 8 && f.number != 7) {
      other_payload = true;  // histogram, image, audio, tensor, ...
    }
  }
  if (simple) ev.scalars.push_back(TbScalar{std::move(tag), *simple});
  else if (other_payload) ++ev.non_scalar_values;
  return Status::Ok();
}

}  // namespace

std::string encode_file_version_event(double wall_time, std::string_view writer) {
  std::string out;
  put_wall_time(out, wall_time);
  put_bytes(out, kEventFileVersion, "brain.Event:2");
  if (!writer.empty()) {
    std::string meta;
    put_bytes(meta, kSourceMetadataWriter, writer);
    put_bytes(out, kEventSourceMetadata, meta);
  }
  return out;
}

std::string encode_scalar_event(double wall_time, int64_t step, std::span<const TbScalar> scalars) {
  std::string summary;
  for (const TbScalar& s : scalars) {
    std::string value;
    if (!s.tag.empty()) put_bytes(value, kValueTag, s.tag);
    put_key(value, kValueSimpleValue, kFixed32);  // oneof member: written even when 0
    put_fixed(value, std::bit_cast<uint32_t>(s.value), 4);
    put_bytes(summary, kSummaryValue, value);
  }
  std::string out;
  put_wall_time(out, wall_time);
  put_step(out, step);
  put_bytes(out, kEventSummary, summary);  // oneof member: written even when empty
  return out;
}

std::string encode_session_start_event(double wall_time, int64_t step) {
  std::string session;
  put_key(session, kSessionLogStatus, kVarint);
  put_varint(session, static_cast<uint64_t>(kSessionStart));
  std::string out;
  put_wall_time(out, wall_time);
  put_step(out, step);
  put_bytes(out, kEventSessionLog, session);
  return out;
}

Result<DecodedEvent> decode_event(std::string_view bytes) {
  DecodedEvent ev;
  Reader r{bytes};
  while (!r.done()) {
    VLPAR_ASSIGN_OR_RETURN(Field f, get_field(r, "Event"));
    switch (f.number) {
      case kEventWallTime:
        VLPAR_RETURN_IF_ERROR(expect_type(f, kFixed64, "Event.wall_time"));
        ev.wall_time = std::bit_cast<double>(f.scalar);
        break;
      case kEventStep:
        VLPAR_RETURN_IF_ERROR(expect_type(f, kVarint, "Event.step"));
        ev.step = static_cast<int64_t>(f.scalar);
        break;
      case kEventFileVersion:
        VLPAR_RETURN_IF_ERROR(expect_type(f, kLengthDelimited, "Event.file_version"));
        ev.file_version = std::string(f.bytes);
        break;
      case kEventSummary: {
        VLPAR_RETURN_IF_ERROR(expect_type(f, kLengthDelimited, "Event.summary"));
        Reader s{f.bytes};
        while (!s.done()) {
          VLPAR_ASSIGN_OR_RETURN(Field v, get_field(s, "Summary"));
          if (v.number != kSummaryValue) continue;
          VLPAR_RETURN_IF_ERROR(expect_type(v, kLengthDelimited, "Summary.value"));
          VLPAR_RETURN_IF_ERROR(decode_value(v.bytes, ev));
        }
        break;
      }
      case kEventSessionLog: {
        VLPAR_RETURN_IF_ERROR(expect_type(f, kLengthDelimited, "Event.session_log"));
        Reader s{f.bytes};
        ev.session_status = 0;
        while (!s.done()) {
          VLPAR_ASSIGN_OR_RETURN(Field v, get_field(s, "SessionLog"));
          if (v.number == kSessionLogStatus && v.type == kVarint) ev.session_status = static_cast<int64_t>(v.scalar);
        }
        break;
      }
      case kEventSourceMetadata: {
        VLPAR_RETURN_IF_ERROR(expect_type(f, kLengthDelimited, "Event.source_metadata"));
        Reader s{f.bytes};
        while (!s.done()) {
          VLPAR_ASSIGN_OR_RETURN(Field v, get_field(s, "SourceMetadata"));
          if (v.number == kSourceMetadataWriter && v.type == kLengthDelimited) ev.source_writer.assign(v.bytes);
        }
        break;
      }
      default:
        break;  // graph_def, tagged_run_metadata, ...: not needed here
    }
  }
  return ev;
}

}  // namespace vlpar::obs
