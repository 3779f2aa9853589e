// Rank-prefixed logging to stderr.
#include "vlpar/core/log.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "vlpar/core/status.hpp"

namespace vlpar {

LogLevel log_threshold() {
  static const LogLevel level = [] {
    const char* env = std::getenv("VLPAR_LOG_LEVEL");
    if (!env) return LogLevel::kInfo;
    if (!std::strcmp(env, "debug")) return LogLevel::kDebug;
    if (!std::strcmp(env, "warn")) return LogLevel::kWarn;
    if (!std::strcmp(env, "error")) return LogLevel::kError;
    return LogLevel::kInfo;
  }();
  return level;
}

void log_write(LogLevel level, std::string_view message) {
  static constexpr char kLetters[] = {'D', 'I', 'W', 'E'};
  // One fwrite per line so lines from concurrent threads do not interleave.
  const std::string line = fmt::format("[vlpar {} {}] {}\n", process_tag(), kLetters[int(level)], message);
  std::fwrite(line.data(), 1, line.size(), stderr);
}

}  // namespace vlpar
