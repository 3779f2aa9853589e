#pragma once
// The command-line helper of every vlpar program (the examples' trainers and tools, the benches): typed options
// bound to variables, one parser, one usage text, one error style.
//
//   vlpar::cli::Parser p("qwen3vl-forward", "one forward (and backward) of a Qwen3-VL model over a batch file");
//   p.add("model", &a.model, "HF model directory", cli::kRequired);
//   p.add("threads", &a.threads, "CPU threads (0 = all)");
//   p.add("grads", &a.grads, "also write every parameter gradient");        // a bool option is a flag
//   VLPAR_RETURN_IF_ERROR(p.parse(argc, argv));                               // --help: p.help_requested()
//
// Accepted spellings: `--name value`, `--name=value`; a bool option also as `--name` (true) or `--name=false`.
// A one-letter option is spelled `-x value` (nccl-tests style, bench_comm).
// Errors (returned, never exit; main() prints them with exit_code()) name the option and say what was expected,
// followed by the usage: an unknown
// option, a missing value, a value of the wrong type or out of range, a required option absent.
// assign()/to_text() convert one value from / to text; the trainer's TOML overrides use them too, so every
// program reads numbers the same way.
// Test: tests/unit/test_cli.cpp.
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "vlpar/core/status.hpp"

namespace vlpar::cli {

/// Where a parsed value goes.
using Value = std::variant<bool*, int*, int64_t*, uint64_t*, float*, double*, std::string*>;

/// "an integer", "a number", "true or false", ... (for messages).
const char* type_name(const Value& v);
/// @brief Parses `text` into *v (integers: the whole text in the type's range; floats: the whole text, finite or
/// not; bools: true/false). @return false when the text does not fit the type (the value is left unchanged).
bool assign(const Value& v, std::string_view text);
/// @brief Why `text` did not fit *v, for messages: "is out of range for a 32-bit integer" when the text is a
/// whole integer (an optional '-' and digits) and *v an integer, else "must be <type_name>".
std::string why_not(const Value& v, std::string_view text);
/// The value as text that assign() reads back to the same value (floats: shortest round-trip form).
std::string to_text(const Value& v);

inline constexpr bool kRequired = true;

/// @brief What main() returns: 0 for OK; otherwise prints "program: message" to stderr and returns 1.
int exit_code(std::string_view program, const Status& s);

class Parser {
 public:
  struct Option {
    std::string name;  // without the leading "--"
    Value value;
    std::string help;
    bool required = false;
    bool seen = false;
    std::string default_text;  // the value before parsing, for the usage
  };

  explicit Parser(std::string program, std::string summary = {})
      : program_(std::move(program)), summary_(std::move(summary)) {}

  /// @brief Binds --name to *value (its current value is the default shown in the usage).
  template <class T>
  Parser& add(std::string name, T* value, std::string help, bool required = false) {
    Value v = value;
    options_.push_back(Option{std::move(name), v, std::move(help), required, false, to_text(v)});
    return *this;
  }
  /// @brief Arguments that are not options (and, with `accept_unknown`, unknown `--x=y` options) are collected
  /// into `rest` instead of being errors (the trainer forwards `--section.key=value` overrides this way).
  Parser& collect_rest(std::vector<std::string>* rest, bool accept_unknown) {
    rest_ = rest;
    accept_unknown_ = accept_unknown;
    return *this;
  }

  /// @brief Parses argv[1..argc). --help / -h sets help_requested() and stops (required options not checked).
  Status parse(int argc, const char* const* argv);
  Status parse(int argc, char** argv) { return parse(argc, const_cast<const char* const*>(argv)); }
  bool help_requested() const { return help_; }
  /// True when --name was given on the command line.
  bool seen(std::string_view name) const;
  /// "usage: program [options]" with every option, its type, default and help.
  std::string usage() const;
  const std::string& program() const { return program_; }

 private:
  Option* find(std::string_view name);
  Status error(std::string message) const;

  std::string program_, summary_;
  std::vector<Option> options_;
  std::vector<std::string>* rest_ = nullptr;
  bool accept_unknown_ = false;
  bool help_ = false;
};

/// @brief A program's main(): parses argv into `p`'s options; --help prints the usage (exit 0); otherwise runs
/// `body()` (a callable returning Status). Errors of either print "program: message" (exit 1).
///   int main(int argc, char** argv) { Args a; auto p = parser(a); return cli::run_main(p, argc, argv, [&] { return run(a); }); }
template <class Body>
int run_main(Parser& p, int argc, char** argv, Body&& body) {
  Status s = p.parse(argc, argv);
  if (s.ok() && p.help_requested()) {
    std::fputs(p.usage().c_str(), stdout);
    return 0;
  }
  if (s.ok()) s = body();
  return exit_code(p.program(), s);
}

}  // namespace vlpar::cli
