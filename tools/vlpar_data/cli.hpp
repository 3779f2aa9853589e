#pragma once
// Shared pieces of the `vlpar-data` subcommands: argument parsing, number formatting, text histograms, and the
// subcommand entry points (each returns the process exit code; only main() exits).
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "vlpar/core/status.hpp"

namespace vlpar::tools {

/// Command-line arguments of one subcommand: "--name value", "--name=value", flags, positionals.
struct Args {
  std::vector<std::string> positional;
  std::map<std::string, std::string> values;  // "--out" -> "DIR"
  std::set<std::string> flags;                // "--overwrite"

  /// @brief Parses argv[first..] given the option names that take a value and the flag names. Unknown options
  /// and missing values are errors naming the option.
  static Result<Args> parse(int argc, char** argv, int first, const std::set<std::string>& with_value,
                            const std::set<std::string>& flag_names);
  std::optional<std::string> get(const std::string& name) const;
  bool has(const std::string& name) const { return flags.contains(name); }
  /// @brief The value of an integer / floating option, or `fallback`. Errors name the option and the text.
  Result<int64_t> get_int(const std::string& name, int64_t fallback) const;
  Result<double> get_double(const std::string& name, double fallback) const;
};

/// "12.3 KiB", "4.0 MiB", "512 B".
std::string human_bytes(double bytes);

/// A histogram over fixed bucket upper bounds (the last bucket is open): one line per bucket with a bar.
struct Histogram {
  std::vector<double> bounds;        // ascending upper bounds (exclusive); values >= the last go to the last+1 bucket
  std::vector<std::string> labels;   // bounds.size() + 1 labels
  std::vector<int64_t> counts;       // bounds.size() + 1
  void add(double v);
  std::string render(std::string_view indent = "    ", int bar_width = 40) const;
};

/// min / mean / p50 / p95 / max of a list of values ("n/a" when empty).
std::string summarize(std::vector<double> values, std::string_view unit = "");

// Subcommands (argv[1] is the subcommand name).
int run_convert(int argc, char** argv);
int run_inspect(int argc, char** argv);
int run_stats(int argc, char** argv);
int run_make_demo(int argc, char** argv);

/// Prints "vlpar-data <cmd>: <status>" to stderr and returns 1.
int fail(std::string_view command, const Status& status);

}  // namespace vlpar::tools
