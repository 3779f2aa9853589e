// Shared pieces of the vlpar-data subcommands. See cli.hpp.
#include "cli.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace vlpar::tools {

Result<Args> Args::parse(int argc, char** argv, int first, const std::set<std::string>& with_value,
                         const std::set<std::string>& flag_names) {
  Args a;
  for (int i = first; i < argc; ++i) {
    std::string arg = argv[i];
    if (!arg.starts_with("--")) {
      a.positional.push_back(arg);
      continue;
    }
    std::optional<std::string> inline_value;
    if (const size_t eq = arg.find('='); eq != std::string::npos) {
      inline_value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
    }
    if (flag_names.contains(arg)) {
      VLPAR_CHECK(!inline_value, "option {} takes no value", arg);
      a.flags.insert(arg);
    } else if (with_value.contains(arg)) {
      if (inline_value) {
        a.values[arg] = *inline_value;
      } else {
        VLPAR_CHECK(i + 1 < argc, "option {} needs a value", arg);
        a.values[arg] = argv[++i];
      }
    } else {
      return VLPAR_STATUS(StatusCode::kInvalidArgument, "unknown option {}", arg);
    }
  }
  return a;
}

std::optional<std::string> Args::get(const std::string& name) const {
  const auto it = values.find(name);
  if (it == values.end()) return std::nullopt;
  return it->second;
}

Result<int64_t> Args::get_int(const std::string& name, int64_t fallback) const {
  const auto v = get(name);
  if (!v) return fallback;
  int64_t out = 0;
  const auto [p, ec] = std::from_chars(v->data(), v->data() + v->size(), out);
  VLPAR_CHECK(ec == std::errc() && p == v->data() + v->size(), "option {}: '{}' is not an integer", name, *v);
  return out;
}

Result<double> Args::get_double(const std::string& name, double fallback) const {
  const auto v = get(name);
  if (!v) return fallback;
  double out = 0;
  const auto [p, ec] = std::from_chars(v->data(), v->data() + v->size(), out);
  VLPAR_CHECK(ec == std::errc() && p == v->data() + v->size() && std::isfinite(out),
              "option {}: '{}' is not a number", name, *v);
  return out;
}

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024.0 && u < 4) {
    b /= 1024.0;
    ++u;
  }
  return u == 0 ? fmt::format("{:.0f} B", b) : fmt::format("{:.1f} {}", b, units[u]);
}

void Histogram::add(double v) {
  if (counts.size() != bounds.size() + 1) counts.assign(bounds.size() + 1, 0);
  const size_t i = static_cast<size_t>(std::upper_bound(bounds.begin(), bounds.end(), v) - bounds.begin());
  ++counts[i];
}

std::string Histogram::render(std::string_view indent, int bar_width) const {
  if (counts.empty()) return std::string(indent) + "(no values)\n";
  int64_t top = 1, total = 0;
  size_t width = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    top = std::max(top, counts[i]);
    total += counts[i];
    width = std::max(width, labels[i].size());
  }
  // Only the buckets from the first to the last non-empty one.
  size_t lo = 0, hi = counts.size();
  while (lo < hi && counts[lo] == 0) ++lo;
  while (hi > lo && counts[hi - 1] == 0) --hi;
  std::string out;
  for (size_t i = lo; i < hi; ++i) {
    const int bar = static_cast<int>(std::llround(double(counts[i]) * bar_width / double(top)));
    out += fmt::format("{}{:<{}}  {:>8}  {:5.1f}%  {}\n", indent, labels[i], width, counts[i],
                       100.0 * double(counts[i]) / double(std::max<int64_t>(total, 1)), std::string(size_t(bar), '#'));
  }
  return out;
}

std::string summarize(std::vector<double> v, std::string_view unit) {
  if (v.empty()) return "n/a";
  std::sort(v.begin(), v.end());
  double sum = 0;
  for (double x : v) sum += x;
  auto q = [&](double p) { return v[static_cast<size_t>(std::min<double>(double(v.size() - 1), p * double(v.size())))]; };
  return fmt::format("min {:.0f}{u}  mean {:.1f}{u}  p50 {:.0f}{u}  p95 {:.0f}{u}  max {:.0f}{u}", v.front(),
                     sum / double(v.size()), q(0.5), q(0.95), v.back(), fmt::arg("u", unit));
}

int fail(std::string_view command, const Status& status) {
  std::fprintf(stderr, "vlpar-data %.*s: %s\n", static_cast<int>(command.size()), command.data(),
               status.to_string().c_str());
  return 1;
}

}  // namespace vlpar::tools
