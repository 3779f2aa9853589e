// Resident memory of this process from /proc/self/status. See include/vlpar/obs/process_memory.hpp.
#include "vlpar/obs/process_memory.hpp"

#include <charconv>
#include <fstream>
#include <iterator>
#include <string>

namespace vlpar::obs {
namespace {

// "VmRSS:\t  123456 kB" -> 123456 * 1024; nullopt when the key is absent.
Result<std::optional<int64_t>> field_bytes(std::string_view text, std::string_view key) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) nl = text.size();
    std::string_view line = text.substr(pos, nl - pos);
    pos = nl + 1;
    if (line.size() <= key.size() || line.substr(0, key.size()) != key || line[key.size()] != ':') continue;
    std::string_view rest = line.substr(key.size() + 1);
    while (!rest.empty() && (rest.front() == ' ' || rest.front() == '\t')) rest.remove_prefix(1);
    int64_t kb = 0;
    const auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), kb);
    VLPAR_CHECK(ec == std::errc() && kb >= 0, "proc status: cannot read the number in '{}'", line);
    std::string_view unit(end, static_cast<size_t>(rest.data() + rest.size() - end));
    VLPAR_CHECK(unit == " kB", "proc status: '{}' is not in kB", line);
    return std::optional<int64_t>(kb * 1024);
  }
  return std::optional<int64_t>();
}

}  // namespace

Result<ProcessMemory> parse_proc_status(std::string_view text) {
  VLPAR_ASSIGN_OR_RETURN(std::optional<int64_t> rss, field_bytes(text, "VmRSS"));
  VLPAR_ASSIGN_OR_RETURN(std::optional<int64_t> hwm, field_bytes(text, "VmHWM"));
  VLPAR_CHECK(rss.has_value(), "proc status: no VmRSS line");
  ProcessMemory m;
  m.rss_bytes = *rss;
  m.peak_rss_bytes = hwm.value_or(*rss);
  return m;
}

Result<ProcessMemory> read_process_memory() {
  std::ifstream in("/proc/self/status");
  VLPAR_CHECK_CODE(static_cast<bool>(in), StatusCode::kNotSupported, "/proc/self/status is not readable here");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return parse_proc_status(text);
}

}  // namespace vlpar::obs
