#pragma once
// "[2, 3, 4]": a shape read from a file, in the io component's error messages (internal header, not installed).
#include <cstdint>
#include <string>
#include <vector>

#include <fmt/core.h>

namespace vlpar::io::detail {

inline std::string dims_string(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += fmt::format("{}{}", i ? ", " : "", dims[i]);
  return s + "]";
}

}  // namespace vlpar::io::detail
