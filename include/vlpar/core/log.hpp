#pragma once
// Logging through fmt with a rank prefix: "[vlpar rank 0@host I] message". Writes to stderr.
// Level threshold comes from VLPAR_LOG_LEVEL (debug|info|warn|error), read from the environment.
#include <fmt/core.h>

#include <string_view>
#include <utility>

namespace vlpar {

enum class LogLevel : int { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

LogLevel log_threshold();
void log_write(LogLevel level, std::string_view message);

template <class... Args>
void log(LogLevel level, fmt::format_string<Args...> f, Args&&... args) {
  if (level < log_threshold()) return;
  log_write(level, fmt::format(f, std::forward<Args>(args)...));
}
template <class... Args>
void log_info(fmt::format_string<Args...> f, Args&&... args) { log(LogLevel::kInfo, f, std::forward<Args>(args)...); }
template <class... Args>
void log_warn(fmt::format_string<Args...> f, Args&&... args) { log(LogLevel::kWarn, f, std::forward<Args>(args)...); }

}  // namespace vlpar
