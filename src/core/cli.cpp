// The command-line helper. See include/vlpar/core/cli.hpp.
#include "vlpar/core/cli.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <limits>

namespace vlpar::cli {

const char* type_name(const Value& v) {
  return std::visit(
      [](auto* p) -> const char* {
        using T = std::remove_pointer_t<decltype(p)>;
        if constexpr (std::is_same_v<T, std::string>) return "a string";
        else if constexpr (std::is_same_v<T, bool>) return "true or false";
        else if constexpr (std::is_floating_point_v<T>) return "a number";
        else if constexpr (std::is_same_v<T, uint64_t>) return "an integer in [0, 2^63)";
        else if constexpr (std::is_same_v<T, int>) return "a 32-bit integer";
        else return "an integer";
      },
      v);
}

bool assign(const Value& v, std::string_view text) {
  return std::visit(
      [&](auto* p) -> bool {
        using T = std::remove_pointer_t<decltype(p)>;
        if constexpr (std::is_same_v<T, std::string>) {
          *p = std::string(text);
        } else if constexpr (std::is_same_v<T, bool>) {
          if (text != "true" && text != "false") return false;
          *p = text == "true";
        } else if constexpr (std::is_floating_point_v<T>) {
          const std::string s(text);
          char* end = nullptr;
          const double x = std::strtod(s.c_str(), &end);
          if (s.empty() || *end != '\0') return false;
          *p = T(x);
        } else {
          T x{};
          const auto [q, ec] = std::from_chars(text.data(), text.data() + text.size(), x);
          if (text.empty() || ec != std::errc() || q != text.data() + text.size()) return false;
          if constexpr (std::is_same_v<T, uint64_t>) {
            if (x > uint64_t(std::numeric_limits<int64_t>::max())) return false;  // TOML integers are signed
          }
          *p = x;
        }
        return true;
      },
      v);
}

std::string why_not(const Value& v, std::string_view text) {
  const bool integer_field = std::visit(
      [](auto* p) {
        using T = std::remove_pointer_t<decltype(p)>;
        return std::is_integral_v<T> && !std::is_same_v<T, bool>;
      },
      v);
  const std::string_view digits = text.starts_with('-') ? text.substr(1) : text;
  const bool integer_text =
      !digits.empty() && std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; });
  return fmt::format("{} {}", integer_field && integer_text ? "is out of range for" : "must be", type_name(v));
}

std::string to_text(const Value& v) {
  return std::visit(
      [](auto* p) -> std::string {
        using T = std::remove_pointer_t<decltype(p)>;
        if constexpr (std::is_same_v<T, std::string>) return *p;
        else if constexpr (std::is_same_v<T, bool>) return *p ? "true" : "false";
        else return fmt::format("{}", *p);
      },
      v);
}

namespace {

const char* metavar(const Value& v) {
  return std::visit(
      [](auto* p) -> const char* {
        using T = std::remove_pointer_t<decltype(p)>;
        if constexpr (std::is_same_v<T, std::string>) return "STR";
        else if constexpr (std::is_floating_point_v<T>) return "X";
        else return "N";
      },
      v);
}

}  // namespace

Parser::Option* Parser::find(std::string_view name) {
  for (Option& o : options_)
    if (o.name == name) return &o;
  return nullptr;
}

bool Parser::seen(std::string_view name) const {
  for (const Option& o : options_)
    if (o.name == name) return o.seen;
  return false;
}

Status Parser::error(std::string message) const {
  return Status(StatusCode::kInvalidArgument, fmt::format("{}\n{}", message, usage()));
}

Status Parser::parse(int argc, const char* const* argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      help_ = true;
      return Status::Ok();
    }
    const bool short_form = arg.size() == 2 && arg[0] == '-' && arg[1] != '-';  // -x value
    if (!short_form && (!arg.starts_with("--") || arg.size() == 2)) {
      if (rest_ != nullptr) {
        rest_->emplace_back(arg);
        continue;
      }
      return error(fmt::format("unexpected argument '{}'", arg));
    }
    const std::string_view body = arg.substr(short_form ? 1 : 2);
    const std::string_view dashes = short_form ? "-" : "--";
    const size_t eq = body.find('=');
    const std::string_view name = body.substr(0, eq);
    Option* o = find(name);
    if (o == nullptr) {
      if (accept_unknown_ && rest_ != nullptr) {
        rest_->emplace_back(arg);
        continue;
      }
      return error(fmt::format("unknown option {}{}", dashes, name));
    }
    std::string_view text;
    if (eq != std::string_view::npos) {
      text = body.substr(eq + 1);
    } else if (std::holds_alternative<bool*>(o->value)) {
      text = "true";  // a bare flag
    } else if (i + 1 < argc) {
      text = argv[++i];
    } else {
      return error(fmt::format("{}{} needs a value ({})", dashes, name, type_name(o->value)));
    }
    if (!assign(o->value, text))
      return error(fmt::format("{}{} {}, got '{}'", dashes, name, why_not(o->value, text), text));
    o->seen = true;
  }
  for (const Option& o : options_)
    if (o.required && !o.seen) return error(fmt::format("{}{} is required", o.name.size() == 1 ? "-" : "--", o.name));
  return Status::Ok();
}

std::string Parser::usage() const {
  std::string out = fmt::format("usage: {} [options]{}\n", program_, rest_ != nullptr ? " [...]" : "");
  if (!summary_.empty()) out += summary_ + "\n";
  for (const Option& o : options_) {
    const bool flag = std::holds_alternative<bool*>(o.value);
    const std::string left = fmt::format("  {}{}{}", o.name.size() == 1 ? "-" : "--", o.name,
                                         flag ? "" : std::string(" ") + metavar(o.value));
    std::string right = o.help;
    if (o.required) right += " (required)";
    else if (!o.default_text.empty() && !(flag && o.default_text == "false"))
      right += fmt::format(" (default {})", o.default_text);
    out += fmt::format("{:<40} {}\n", left, right);
  }
  return out;
}

int exit_code(std::string_view program, const Status& s) {
  if (s.ok()) return 0;
  fmt::print(stderr, "{}: {}\n", program, s.message());
  return 1;
}

}  // namespace vlpar::cli
