// Benchmark: vlpar's byte-level BPE tokenizer (data/tokenizer.hpp) encoding a corpus, in tokens/s.
//   encode/threads:1/cache:{1,0}  one thread encodes every item in turn (word cache on / off)
//   encode/threads:N/cache:1      N std::threads share one const Tokenizer, items split round-robin
//   decode/threads:1              ids back to text
// Counters: tokens_per_s (HF ids of the corpus per second of wall time), MBps (UTF-8 input bytes per second).
// Inputs (environment): VLPAR_TOKENIZER_JSON (default tests/fixtures/tokenizer/tokenizer.json) and
// VLPAR_TOKENIZER_CORPUS (default tests/fixtures/tokenizer/corpus.txt, one item per line, \\ \n \r escaped).
// Correctness: before timing, decode(encode(item)) == normalize(item) is checked for every item, and when
// VLPAR_TOKENIZER_IDS names HF's ids (flat i32: n, offsets[n + 1], ids; tokenizer_vs_hf.py writes it) every item's
// ids must equal HF's; the program exits 1 otherwise.
// tools/bench/tokenizer_vs_hf.py runs this next to HF tokenizers on the same corpus and prints the ratios.
// Run: ./build/cpu/bench/bench_tokenizer [--benchmark_filter=encode]
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "vlpar/data/tokenizer.hpp"

namespace {
using vlpar::data::Tokenizer;

std::string source_dir() {
  std::string f = __FILE__;
  return f.substr(0, f.rfind('/'));
}

std::string env_or(const char* name, const std::string& dflt) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : dflt;
}

struct Data {
  Tokenizer tok;
  std::vector<std::string> items;
  size_t bytes = 0;
  size_t tokens = 0;
  std::vector<std::vector<int32_t>> ids;
};

Data load() {
  const std::string fixtures = source_dir() + "/../tests/fixtures/tokenizer";
  const std::string json = env_or("VLPAR_TOKENIZER_JSON", fixtures + "/tokenizer.json");
  const std::string corpus = env_or("VLPAR_TOKENIZER_CORPUS", fixtures + "/corpus.txt");
  auto tok = Tokenizer::from_file(json);
  if (!tok.ok()) {
    fprintf(stderr, "%s\n", tok.status().to_string().c_str());
    std::exit(1);
  }
  Data d{std::move(tok).value(), {}, 0, 0, {}};
  std::ifstream in(corpus, std::ios::binary);
  if (!in) {
    fprintf(stderr, "cannot open corpus %s\n", corpus.c_str());
    std::exit(1);
  }
  std::string line;
  while (std::getline(in, line)) {
    std::string s;
    for (size_t i = 0; i < line.size(); ++i) {
      if (line[i] == '\\' && i + 1 < line.size()) {
        const char e = line[++i];
        s.push_back(e == 'n' ? '\n' : e == 'r' ? '\r' : e);
      } else {
        s.push_back(line[i]);
      }
    }
    d.bytes += s.size();
    d.items.push_back(std::move(s));
  }
  for (const auto& s : d.items) {
    auto ids = d.tok.encode(s);
    auto back = ids.ok() ? d.tok.decode_bytes(ids.value()) : vlpar::Result<std::string>(ids.status());
    auto norm = d.tok.normalize(s);
    if (!back.ok() || !norm.ok() || back.value() != norm.value()) {
      fprintf(stderr, "correctness check failed on an item of %zu bytes\n", s.size());
      std::exit(1);
    }
    d.tokens += ids.value().size();
    d.ids.push_back(std::move(ids).value());
  }
  if (const char* ids_path = std::getenv("VLPAR_TOKENIZER_IDS")) {
    std::ifstream f(ids_path, std::ios::binary);
    int32_t n = 0;
    f.read(reinterpret_cast<char*>(&n), 4);
    std::vector<int32_t> off(static_cast<size_t>(n) + 1);
    f.read(reinterpret_cast<char*>(off.data()), static_cast<std::streamsize>(4 * off.size()));
    std::vector<int32_t> flat(static_cast<size_t>(off.back()));
    f.read(reinterpret_cast<char*>(flat.data()), static_cast<std::streamsize>(4 * flat.size()));
    if (!f || static_cast<size_t>(n) != d.items.size()) {
      fprintf(stderr, "cannot read %s for %zu items\n", ids_path, d.items.size());
      std::exit(1);
    }
    for (size_t i = 0; i < d.items.size(); ++i) {
      const std::vector<int32_t> hf(flat.begin() + off[i], flat.begin() + off[i + 1]);
      if (hf != d.ids[i]) {
        fprintf(stderr, "item %zu: ids differ from HF\n", i);
        std::exit(1);
      }
    }
    fprintf(stderr, "ids identical to HF on all %zu items\n", d.items.size());
  }
  fprintf(stderr, "tokenizer %s: %zu items, %zu bytes, %zu tokens, vocab %d, regex JIT %s\n", json.c_str(),
          d.items.size(), d.bytes, d.tokens, d.tok.vocab_size(), d.tok.regex_jit() ? "on" : "off");
  return d;
}

Data& data() {
  static Data d = load();  // owned by the benchmark binary
  return d;
}

void set_counters(benchmark::State& state, const Data& d) {
  state.counters["tokens_per_s"] =
      benchmark::Counter(double(d.tokens) * double(state.iterations()), benchmark::Counter::kIsRate);
  state.counters["MBps"] =
      benchmark::Counter(double(d.bytes) * 1e-6 * double(state.iterations()), benchmark::Counter::kIsRate);
}

void BM_encode(benchmark::State& state) {
  Data& d = data();
  const int threads = static_cast<int>(state.range(0));
  d.tok.set_cache_enabled(state.range(1) != 0);
  for (auto _ : state) {
    if (threads == 1) {
      std::vector<int32_t> ids;
      for (const auto& s : d.items) {
        ids.clear();
        if (!d.tok.encode_into(s, ids).ok()) state.SkipWithError("encode failed");
        benchmark::DoNotOptimize(ids.data());
      }
    } else {
      std::vector<std::thread> pool;
      for (int t = 0; t < threads; ++t) {
        pool.emplace_back([&d, t, threads] {
          std::vector<int32_t> ids;
          for (size_t i = static_cast<size_t>(t); i < d.items.size(); i += static_cast<size_t>(threads)) {
            ids.clear();
            (void)d.tok.encode_into(d.items[i], ids);
            benchmark::DoNotOptimize(ids.data());
          }
        });
      }
      for (auto& th : pool) th.join();
    }
  }
  d.tok.set_cache_enabled(true);
  set_counters(state, d);
}

void BM_decode(benchmark::State& state) {
  Data& d = data();
  for (auto _ : state) {
    for (const auto& ids : d.ids) {
      auto s = d.tok.decode(ids);
      benchmark::DoNotOptimize(s.value().data());
    }
  }
  set_counters(state, d);
}

void encode_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"threads", "cache"});
  b->Args({1, 1});
  b->Args({1, 0});
  const int hw = static_cast<int>(std::max(2u, std::thread::hardware_concurrency()));
  b->Args({hw, 1});
}

BENCHMARK(BM_encode)->Name("encode")->Apply(encode_args)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(1.0);
BENCHMARK(BM_decode)->Name("decode/threads:1")->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(1.0);

}  // namespace

BENCHMARK_MAIN();
