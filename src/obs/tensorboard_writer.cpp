// TensorBoard event file writer. See include/vlpar/obs/tensorboard_writer.hpp.
#include "vlpar/obs/tensorboard_writer.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <utility>
#include <vector>

#include "vlpar/obs/tfrecord.hpp"

namespace vlpar::obs {

double unix_time_now() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

TensorBoardWriter::TensorBoardWriter(TensorBoardWriter&& other) noexcept
    : file_(std::exchange(other.file_, nullptr)), path_(std::move(other.path_)) {}

TensorBoardWriter& TensorBoardWriter::operator=(TensorBoardWriter&& other) noexcept {
  if (this != &other) {
    (void)close();
    file_ = std::exchange(other.file_, nullptr);
    path_ = std::move(other.path_);
  }
  return *this;
}

TensorBoardWriter::~TensorBoardWriter() { (void)close(); }

Status TensorBoardWriter::close() {
  if (file_ == nullptr) return Status::Ok();
  const int rc = std::fclose(std::exchange(file_, nullptr));
  VLPAR_CHECK_CODE(rc == 0, StatusCode::kIoError, "closing TensorBoard file '{}' failed: {}", path_,
                   std::strerror(errno));
  return Status::Ok();
}

Result<TensorBoardWriter> TensorBoardWriter::create(const std::string& log_dir, const Options& options) {
  VLPAR_CHECK(!log_dir.empty(), "TensorBoardWriter: log_dir is empty");
  std::error_code ec;
  std::filesystem::create_directories(log_dir, ec);
  VLPAR_CHECK_CODE(!ec, StatusCode::kIoError, "TensorBoardWriter: cannot create directory '{}': {}", log_dir,
                   ec.message());
  const double t0 = options.wall_time.value_or(unix_time_now());
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0') std::snprintf(host, sizeof(host), "localhost");
  const std::string base = fmt::format("{}/events.out.tfevents.{:010d}.{}.{}{}", log_dir,
                                       static_cast<int64_t>(std::floor(t0)), host, ::getpid(),
                                       options.filename_suffix);
  TensorBoardWriter w;
  for (int attempt = 0; attempt < 1000 && w.file_ == nullptr; ++attempt) {
    std::string path = attempt == 0 ? base : fmt::format("{}.{}", base, attempt);
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
      if (errno == EEXIST) continue;
      return VLPAR_STATUS(StatusCode::kIoError, "TensorBoardWriter: cannot create '{}': {}", path, std::strerror(errno));
    }
    w.file_ = ::fdopen(fd, "wb");
    if (w.file_ == nullptr) {
      ::close(fd);
      return VLPAR_STATUS(StatusCode::kIoError, "TensorBoardWriter: fdopen of '{}' failed", path);
    }
    w.path_ = std::move(path);
  }
  VLPAR_CHECK_CODE(w.file_ != nullptr, StatusCode::kIoError, "TensorBoardWriter: every name like '{}' is taken",
                   base);
  VLPAR_RETURN_IF_ERROR(w.write_record(encode_file_version_event(t0, "vlpar.obs.TensorBoardWriter")));
  if (options.resume_step)
    VLPAR_RETURN_IF_ERROR(w.write_record(encode_session_start_event(t0, *options.resume_step + 1)));
  return w;
}

Status TensorBoardWriter::write_record(std::string_view event_bytes) {
  VLPAR_CHECK_CODE(file_ != nullptr, StatusCode::kInvalidArgument, "TensorBoardWriter: the writer is closed");
  const std::string rec = frame_tfrecord(event_bytes);
  const size_t n = std::fwrite(rec.data(), 1, rec.size(), file_);
  VLPAR_CHECK_CODE(n == rec.size() && std::fflush(file_) == 0, StatusCode::kIoError,
                   "TensorBoardWriter: writing to '{}' failed: {}", path_, std::strerror(errno));
  return Status::Ok();
}

Status TensorBoardWriter::add_scalars(int64_t step, std::span<const TbScalar> scalars,
                                      std::optional<double> wall_time) {
  for (const TbScalar& s : scalars) VLPAR_CHECK(!s.tag.empty(), "TensorBoardWriter::add_scalars: empty tag at step {}", step);
  return write_record(encode_scalar_event(wall_time.value_or(unix_time_now()), step, scalars));
}

Status TensorBoardWriter::add_scalar(std::string_view tag, int64_t step, double value,
                                     std::optional<double> wall_time) {
  const TbScalar s{std::string(tag), static_cast<float>(value)};
  return add_scalars(step, std::span<const TbScalar>(&s, 1), wall_time);
}

Status TensorBoardWriter::add_metrics(const MetricsLine& m, std::string_view tag_prefix) {
  std::vector<TbScalar> scalars;
  for (const NamedScalar& s : metrics_scalars(m)) {
    if (s.key == "step" || s.key == "wall_time") continue;
    scalars.push_back(TbScalar{fmt::format("{}{}", tag_prefix, s.key), static_cast<float>(s.value)});
  }
  return add_scalars(m.step, scalars, m.wall_time);
}

}  // namespace vlpar::obs
