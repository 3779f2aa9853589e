// The command-line helper (include/vlpar/core/cli.hpp): both spellings, flags, defaults kept, every value type's
// range, named errors (unknown option, missing value, wrong type, required option), --help, pass-through of
// overrides, and to_text/assign round trips.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "vlpar/core/cli.hpp"

namespace vlpar::test {
namespace {

struct Opts {
  std::string model = "m0";
  int threads = 0;
  int64_t big = 5;
  uint64_t seed = 7;
  double lr = 1e-3;
  float eps = 1e-8f;
  bool grads = false;
};

cli::Parser parser(Opts& o) {
  cli::Parser p("prog", "a test program");
  p.add("model", &o.model, "model dir", cli::kRequired);
  p.add("threads", &o.threads, "threads");
  p.add("big", &o.big, "an i64");
  p.add("seed", &o.seed, "a seed");
  p.add("lr", &o.lr, "learning rate");
  p.add("eps", &o.eps, "epsilon");
  p.add("grads", &o.grads, "a flag");
  return p;
}

Status parse(cli::Parser& p, std::vector<const char*> args) {
  args.insert(args.begin(), "prog");
  return p.parse(int(args.size()), args.data());
}

TEST(Cli, BothSpellingsFlagsAndDefaults) {
  Opts o;
  cli::Parser p = parser(o);
  ASSERT_TRUE(parse(p, {"--model", "dir", "--threads=3", "--lr", "2.5e-4", "--grads", "--seed=9"}).ok());
  EXPECT_EQ(o.model, "dir");
  EXPECT_EQ(o.threads, 3);
  EXPECT_EQ(o.lr, 2.5e-4);
  EXPECT_TRUE(o.grads);
  EXPECT_EQ(o.seed, 9u);
  EXPECT_EQ(o.big, 5);  // not given: the default stays
  EXPECT_TRUE(p.seen("threads"));
  EXPECT_FALSE(p.seen("big"));
  Opts q;
  cli::Parser r = parser(q);
  ASSERT_TRUE(parse(r, {"--model=x", "--grads=false", "--big=-9000000000"}).ok());
  EXPECT_FALSE(q.grads);
  EXPECT_EQ(q.big, -9000000000);
}

void expect_error(std::vector<const char*> args, const std::string& needle) {
  Opts o;
  cli::Parser p = parser(o);
  const Status s = parse(p, args);
  ASSERT_FALSE(s.ok()) << needle;
  EXPECT_NE(s.message().find(needle), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("usage: prog"), std::string::npos) << s.message();
}

TEST(Cli, ErrorsNameTheOptionAndShowTheUsage) {
  expect_error({"--model", "m", "--treads", "2"}, "unknown option --treads");
  expect_error({"--model"}, "--model needs a value");
  expect_error({"--model", "m", "--threads", "two"}, "--threads must be a 32-bit integer, got 'two'");
  expect_error({"--model", "m", "--threads", "3000000000"}, "--threads is out of range for a 32-bit integer, got '3000000000'");
  expect_error({"--model", "m", "--seed=-1"}, "--seed is out of range for an integer in [0, 2^63), got '-1'");
  expect_error({"--model", "m", "--lr", "1e-3x"}, "--lr must be a number");
  expect_error({"--model", "m", "--grads=yes"}, "--grads must be true or false");
  expect_error({"--threads", "2"}, "--model is required");
  expect_error({"--model", "m", "stray"}, "unexpected argument 'stray'");
}

TEST(Cli, HelpRestAndRoundTrips) {
  Opts o;
  cli::Parser p = parser(o);
  ASSERT_TRUE(parse(p, {"--help"}).ok());  // required options are not checked under --help
  EXPECT_TRUE(p.help_requested());
  const std::string u = p.usage();
  EXPECT_NE(u.find("--threads N"), std::string::npos) << u;
  EXPECT_NE(u.find("(default 0.001)"), std::string::npos) << u;
  EXPECT_NE(u.find("--model STR"), std::string::npos) << u;
  EXPECT_NE(u.find("(required)"), std::string::npos) << u;

  std::vector<std::string> rest;
  Opts q;
  cli::Parser r = parser(q);
  r.collect_rest(&rest, true);
  ASSERT_TRUE(parse(r, {"--model", "m", "--training.steps=3", "pos"}).ok());
  EXPECT_EQ(rest, (std::vector<std::string>{"--training.steps=3", "pos"}));

  const auto as_double = [](const cli::Value& v) {
    return std::visit(
        [](auto* p) -> double {
          if constexpr (std::is_arithmetic_v<std::remove_pointer_t<decltype(p)>>) return double(*p);
          return NAN;
        },
        v);
  };
  double d = 0.1 + 0.2;
  float f = 1.f / 3.f;
  uint64_t u64 = (uint64_t(1) << 62) + 1;
  for (cli::Value v : {cli::Value(&d), cli::Value(&f), cli::Value(&u64)}) {
    const std::string t = cli::to_text(v);
    const double before = as_double(v);
    ASSERT_TRUE(cli::assign(v, t)) << t;
    EXPECT_EQ(as_double(v), before) << t;
  }
  EXPECT_EQ(u64, (uint64_t(1) << 62) + 1);
}

TEST(Cli, OneLetterOptionsTakeOneDash) {
  int n = 20;
  std::string bytes = "64M";
  cli::Parser p("bench");
  p.add("n", &n, "iterations");
  p.add("e", &bytes, "max bytes");
  std::vector<const char*> args = {"bench", "-n", "7", "-e", "1G"};
  ASSERT_TRUE(p.parse(int(args.size()), args.data()).ok());
  EXPECT_EQ(n, 7);
  EXPECT_EQ(bytes, "1G");
  EXPECT_NE(p.usage().find("  -n N"), std::string::npos) << p.usage();
  std::vector<const char*> bad = {"bench", "-q", "1"};
  const Status s = p.parse(int(bad.size()), bad.data());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("unknown option -q"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace vlpar::test
