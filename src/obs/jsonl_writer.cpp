// metrics.jsonl writer with resume truncation. See include/vlpar/obs/jsonl_writer.hpp.
#include "vlpar/obs/jsonl_writer.hpp"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <utility>

#include "vlpar/io/safetensors.hpp"  // atomic_write_file

namespace vlpar::obs {
namespace {

using ordered_json = nlohmann::ordered_json;

// Integral fields stay integers in the JSON ("step": 12, not 12.0), the rest are doubles; NaN/Inf become null.
ordered_json json_value(const NamedScalar& s) {
  if (s.key == "step") return static_cast<int64_t>(s.value);
  if (!std::isfinite(s.value)) return nullptr;
  return s.value;
}

std::string to_line(int64_t step, std::span<const NamedScalar> scalars) {
  ordered_json j = ordered_json::object();
  j["step"] = step;
  for (const NamedScalar& s : scalars) {
    if (s.key == "step") continue;
    j[s.key] = json_value(s);
  }
  // Tags may contain any bytes; invalid UTF-8 is replaced rather than failing a training run over a log line.
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

std::string metrics_json(const MetricsLine& m) { return to_line(m.step, metrics_scalars(m)); }

JsonlWriter::JsonlWriter(JsonlWriter&& other) noexcept
    : file_(std::exchange(other.file_, nullptr)),
      path_(std::move(other.path_)),
      dropped_on_open_(other.dropped_on_open_) {}

JsonlWriter& JsonlWriter::operator=(JsonlWriter&& other) noexcept {
  if (this != &other) {
    (void)close();
    file_ = std::exchange(other.file_, nullptr);
    path_ = std::move(other.path_);
    dropped_on_open_ = other.dropped_on_open_;
  }
  return *this;
}

JsonlWriter::~JsonlWriter() { (void)close(); }

Status JsonlWriter::close() {
  if (file_ == nullptr) return Status::Ok();
  const int rc = std::fclose(std::exchange(file_, nullptr));
  VLPAR_CHECK_CODE(rc == 0, StatusCode::kIoError, "closing '{}' failed: {}", path_, std::strerror(errno));
  return Status::Ok();
}

Result<JsonlWriter> JsonlWriter::open(const std::string& path, std::optional<int64_t> resume_step) {
  VLPAR_CHECK(!path.empty(), "JsonlWriter::open: empty path");
  JsonlWriter w;
  w.path_ = path;
  if (resume_step) {
    std::ifstream in(path, std::ios::binary);
    if (in) {
      const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      std::string kept;
      size_t pos = 0;
      while (pos < text.size()) {
        const size_t nl = text.find('\n', pos);
        if (nl == std::string::npos) {  // torn last line (the writer died mid-write)
          ++w.dropped_on_open_;
          break;
        }
        const std::string_view line(text.data() + pos, nl - pos);
        pos = nl + 1;
        if (line.empty()) continue;
        const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
        const bool keep = j.is_object() && j.contains("step") && j["step"].is_number_integer() &&
                          j["step"].get<int64_t>() <= *resume_step;
        if (keep) {
          kept.append(line);
          kept.push_back('\n');
        } else {
          ++w.dropped_on_open_;
        }
      }
      const std::span<const std::byte> piece(reinterpret_cast<const std::byte*>(kept.data()), kept.size());
      VLPAR_RETURN_IF_ERROR(io::atomic_write_file(path, std::span<const std::span<const std::byte>>(&piece, 1)));
    }
  }
  w.file_ = std::fopen(path.c_str(), resume_step ? "ab" : "wb");
  VLPAR_CHECK_CODE(w.file_ != nullptr, StatusCode::kIoError, "cannot open '{}' for writing: {}", path,
                   std::strerror(errno));
  return w;
}

Status JsonlWriter::write_line(const std::string& line) {
  VLPAR_CHECK(file_ != nullptr, "JsonlWriter: not open");
  std::string buf = line;
  buf.push_back('\n');
  const size_t n = std::fwrite(buf.data(), 1, buf.size(), file_);
  VLPAR_CHECK_CODE(n == buf.size() && std::fflush(file_) == 0, StatusCode::kIoError, "writing to '{}' failed: {}",
                   path_, std::strerror(errno));
  return Status::Ok();
}

Status JsonlWriter::append(const MetricsLine& m) { return write_line(metrics_json(m)); }

Status JsonlWriter::append(int64_t step, std::span<const NamedScalar> scalars) {
  return write_line(to_line(step, scalars));
}

}  // namespace vlpar::obs
