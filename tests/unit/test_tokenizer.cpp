// Byte-level BPE tokenizer (data/tokenizer.hpp) against HF tokenizers 0.22.2:
//   * ids identical to HF on a 10,240-item corpus (prose in a dozen scripts, Latin in NFC and NFD, code, numbers,
//     whitespace runs, \r\n, emoji with ZWJ and skin tones, inline special tokens, random valid UTF-8, 200-1500
//     character runs), for merges saved as [a, b] pairs and as legacy "a b" strings (the legacy copy also carries
//     added tokens with lstrip/rstrip/single_word/normalized flags);
//   * pre-tokenization identical to HF where Oniguruma's Unicode 16.0 and PCRE2's 14.0 disagree;
//   * decode(encode(s)) == HF's NFC(s) for every item, normalize() likewise; special tokens, skip_special,
//     lossy UTF-8 decode, empty input, invalid UTF-8, unknown ids;
//   * BPE merge order on a hand-made vocabulary (lowest rank first, leftmost on ties) in the short-word and the
//     heap path; concurrent encodes; very long inputs;
//   * malformed tokenizer.json files: each error names the file and the defect.
// Fixtures: tests/fixtures/tokenizer/ (tools/golden/make_tokenizer_fixture.py). With VLPAR_QWEN_TOKENIZER_DIR set
// to the --qwen-out folder of that script, the corpus is also checked against the real 151,643-token Qwen vocabulary.
// Run: ./build/cpu/tests/test_tokenizer
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "vlpar/data/tokenizer.hpp"

namespace vlpar::data {
namespace {

const std::string kDir = std::string(VLPAR_FIXTURES_DIR) + "/tokenizer";

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string unescape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size()) {
      const char e = s[++i];
      out.push_back(e == 'n' ? '\n' : e == 'r' ? '\r' : e);
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else out.push_back(c);
  }
  return out;
}

std::vector<std::string> read_corpus(const std::string& dir) {
  std::vector<std::string> items;
  std::istringstream in(read_file(dir + "/corpus.txt"));
  std::string line;
  while (std::getline(in, line)) items.push_back(unescape(line));
  return items;
}

// ids*.bin (see make_tokenizer_fixture.py): dense ("VTOKIDS1") or sparse with item indices ("VTOKIDSS").
struct IdsFile {
  std::vector<uint32_t> items;  // empty when dense
  std::vector<std::vector<int32_t>> ids;
};
IdsFile read_ids(const std::string& path) {
  const std::string b = read_file(path);
  IdsFile f;
  if (b.size() < 16) return f;
  const bool sparse = b.compare(0, 8, "VTOKIDSS") == 0;
  if (!sparse && b.compare(0, 8, "VTOKIDS1") != 0) return f;
  uint32_t n = 0, width = 0;
  std::memcpy(&n, b.data() + 8, 4);
  std::memcpy(&width, b.data() + 12, 4);
  size_t p = 16;
  if (sparse) {
    f.items.resize(n);
    std::memcpy(f.items.data(), b.data() + p, 4 * size_t(n));
    p += 4 * size_t(n);
  }
  std::vector<uint32_t> off(size_t(n) + 1);
  std::memcpy(off.data(), b.data() + p, 4 * off.size());
  p += 4 * off.size();
  for (uint32_t i = 0; i < n; ++i) {
    std::vector<int32_t> v;
    for (uint32_t k = off[i]; k < off[i + 1]; ++k) {
      if (width == 2) {
        uint16_t x;
        std::memcpy(&x, b.data() + p + 2 * size_t(k), 2);
        v.push_back(x);
      } else {
        int32_t x;
        std::memcpy(&x, b.data() + p + 4 * size_t(k), 4);
        v.push_back(x);
      }
    }
    f.ids.push_back(std::move(v));
  }
  return f;
}

std::string join(const std::vector<int32_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i > 0) s.push_back(' ');
    s.append(std::to_string(v[i]));
  }
  return s;
}

Tokenizer must_load(const std::string& path) {
  auto t = Tokenizer::from_file(path);
  EXPECT_TRUE(t.ok()) << t.status().message();
  if (!t.ok()) std::abort();
  return std::move(t).value();
}

// Compares encode() with the expected ids of every item; prints the first 10 mismatches.
void expect_parity(const Tokenizer& tok, const std::vector<std::string>& corpus,
                   const std::vector<std::vector<int32_t>>& expected, const std::string& what) {
  ASSERT_EQ(corpus.size(), expected.size()) << what;
  size_t wrong = 0, tokens = 0;
  for (size_t i = 0; i < corpus.size(); ++i) {
    auto got = tok.encode(corpus[i]);
    ASSERT_TRUE(got.ok()) << what << " item " << i << ": " << got.status().message();
    tokens += got.value().size();
    if (got.value() != expected[i]) {
      if (++wrong <= 10)
        ADD_FAILURE() << what << " item " << i << " \"" << escape(corpus[i]).substr(0, 200) << "\"\n  HF:    "
                      << join(expected[i]).substr(0, 400) << "\n  vlpar: " << join(got.value()).substr(0, 400);
    }
  }
  EXPECT_EQ(wrong, 0u) << what << ": " << wrong << " of " << corpus.size() << " items differ from HF";
  EXPECT_GT(tokens, corpus.size()) << what << ": vacuous corpus";
}

class TokenizerCorpus : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    corpus_ = new std::vector<std::string>(read_corpus(kDir));
    ids_ = new IdsFile(read_ids(kDir + "/ids.bin"));
  }
  static void TearDownTestSuite() {
    delete corpus_;
    delete ids_;
  }
  static std::vector<std::string>* corpus_;
  static IdsFile* ids_;
};
std::vector<std::string>* TokenizerCorpus::corpus_ = nullptr;
IdsFile* TokenizerCorpus::ids_ = nullptr;

TEST_F(TokenizerCorpus, CorpusIsLargeAndVaried) {
  ASSERT_GE(corpus_->size(), 10000u);
  ASSERT_EQ(ids_->ids.size(), corpus_->size());
  size_t non_ascii = 0, crlf = 0, special = 0;
  for (const auto& s : *corpus_) {
    non_ascii += std::any_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) >= 0x80; });
    crlf += s.find("\r\n") != std::string::npos;
    special += s.find("<|im_start|>") != std::string::npos;
  }
  EXPECT_GT(non_ascii, 3000u);
  EXPECT_GT(crlf, 100u);
  EXPECT_GT(special, 100u);
}

TEST_F(TokenizerCorpus, IdsMatchHfWithPairMerges) {
  const Tokenizer tok = must_load(kDir + "/tokenizer.json");
  EXPECT_TRUE(tok.regex_jit());
  expect_parity(tok, *corpus_, ids_->ids, "tokenizer.json");
}

TEST_F(TokenizerCorpus, IdsMatchHfWithLegacyMergesAndAddedTokenFlags) {
  const Tokenizer tok = must_load(kDir + "/tokenizer_legacy_merges.json");
  const IdsFile sparse = read_ids(kDir + "/ids_legacy.bin");
  ASSERT_GT(sparse.items.size(), 50u) << "the flag tokens should change some items";
  std::vector<std::vector<int32_t>> expected = ids_->ids;
  for (size_t k = 0; k < sparse.items.size(); ++k) expected[sparse.items[k]] = sparse.ids[k];
  expect_parity(tok, *corpus_, expected, "tokenizer_legacy_merges.json");
  // The flag tokens themselves: <mask> swallows the spaces on both sides; café (content written in NFD,
  // normalized=true) matches NFC and NFD text alike.
  const auto mask = *tok.token_to_id("<mask>");
  auto a = tok.encode("x <mask> y");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(std::count(a.value().begin(), a.value().end(), mask), 1);
  EXPECT_EQ(tok.decode(a.value()).value(), "x<mask>y");
  const auto cafe = tok.token_to_id("cafe\xCC\x81");
  ASSERT_TRUE(cafe.has_value());
  for (const std::string s : {"un caf\xC3\xA9 noir", "un cafe\xCC\x81 noir"}) {
    const auto ids = tok.encode(s).value();
    EXPECT_EQ(std::count(ids.begin(), ids.end(), *cafe), 1) << s;
  }
}

TEST_F(TokenizerCorpus, DecodeOfEncodeIsHfNfc) {
  const Tokenizer tok = must_load(kDir + "/tokenizer.json");
  std::map<size_t, std::string> nfc;
  std::istringstream in(read_file(kDir + "/nfc.txt"));
  std::string line;
  while (std::getline(in, line)) {
    const size_t tab = line.find('\t');
    nfc[std::stoul(line.substr(0, tab))] = unescape(line.substr(tab + 1));
  }
  ASSERT_GT(nfc.size(), 500u) << "the corpus should hold NFD text";
  size_t wrong = 0;
  for (size_t i = 0; i < corpus_->size(); ++i) {
    const std::string& s = (*corpus_)[i];
    const std::string expected = nfc.count(i) ? nfc[i] : s;
    const auto ids = tok.encode(s).value();
    const auto bytes = tok.decode_bytes(ids).value();
    const auto text = tok.decode(ids).value();
    const auto norm = tok.normalize(s).value();
    if (bytes != expected || text != expected || norm != expected) {
      if (++wrong <= 10)
        ADD_FAILURE() << "item " << i << " \"" << escape(s).substr(0, 200) << "\"\n  HF NFC:  " << escape(expected)
                      << "\n  decode:  " << escape(text) << "\n  normalize: " << escape(norm);
    }
  }
  EXPECT_EQ(wrong, 0u);
}

TEST_F(TokenizerCorpus, PreTokenizationMatchesHfWhereUnicodeVersionsDiffer) {
  // Probes around the code points Oniguruma's Unicode 16.0 \p{L} / \p{N} take and PCRE2 10.42's 14.0 does not
  // (CJK extensions H and I, Kawi, Kaktovik numerals, ...), plus random assigned code points.
  const Tokenizer tok = must_load(kDir + "/tokenizer.json");
  std::istringstream in(read_file(kDir + "/pretokenize.txt"));
  std::string line;
  size_t n = 0, wrong = 0;
  while (std::getline(in, line)) {
    const size_t tab = line.find('\t');
    const std::string item = unescape(line.substr(0, tab));
    std::vector<std::string> expected;
    std::string rest = line.substr(tab + 1);
    for (size_t p = 0;;) {
      const size_t q = rest.find('\x1f', p);
      expected.push_back(unescape(rest.substr(p, q == std::string::npos ? std::string::npos : q - p)));
      if (q == std::string::npos) break;
      p = q + 1;
    }
    const auto got = tok.pre_tokenize(item);
    ASSERT_TRUE(got.ok()) << got.status().message();
    ++n;
    if (got.value() != expected && ++wrong <= 10) {
      std::string g, e;
      for (const auto& x : got.value()) g += "[" + x + "]";
      for (const auto& x : expected) e += "[" + x + "]";
      ADD_FAILURE() << "\"" << item << "\"\n  HF:    " << e << "\n  vlpar: " << g;
    }
  }
  EXPECT_GT(n, 1000u);
  EXPECT_EQ(wrong, 0u) << wrong << " of " << n << " probes split differently from HF";
}

TEST_F(TokenizerCorpus, ConcurrentEncodesGiveTheSequentialIds) {
  const Tokenizer tok = must_load(kDir + "/tokenizer.json");
  constexpr int kThreads = 4;
  std::vector<size_t> wrong(kThreads, 0);
  std::vector<std::thread> pool;
  for (int t = 0; t < kThreads; ++t) {
    pool.emplace_back([&, t] {
      // Every thread walks the whole corpus from its own starting point, so the threads share cache shards.
      const size_t n = corpus_->size();
      for (size_t k = 0; k < n; ++k) {
        const size_t i = (k + static_cast<size_t>(t) * n / kThreads) % n;
        auto got = tok.encode((*corpus_)[i]);
        if (!got.ok() || got.value() != ids_->ids[i]) ++wrong[static_cast<size_t>(t)];
      }
    });
  }
  for (auto& th : pool) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(wrong[static_cast<size_t>(t)], 0u) << "thread " << t;
}

TEST_F(TokenizerCorpus, SpecialTokens) {
  const Tokenizer tok = must_load(kDir + "/tokenizer.json");
  const int32_t vs = *tok.token_to_id("<|vision_start|>");
  const int32_t ip = *tok.token_to_id("<|image_pad|>");
  const int32_t ve = *tok.token_to_id("<|vision_end|>");
  const int32_t think = *tok.token_to_id("<think>");
  EXPECT_EQ(tok.encode("<|vision_start|><|image_pad|><|vision_end|>").value(), (std::vector<int32_t>{vs, ip, ve}));
  EXPECT_TRUE(tok.is_special(vs));
  EXPECT_FALSE(tok.is_special(think));
  EXPECT_EQ(tok.vocab_size(), 4098);
  EXPECT_EQ(tok.added_tokens().size(), 10u);
  // Glued to text on both sides, and never split or merged with it.
  const auto ids = tok.encode("hi<|im_start|>user\n<think>x</think><|im_end|>").value();
  EXPECT_EQ(std::count(ids.begin(), ids.end(), *tok.token_to_id("<|im_start|>")), 1);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), think), 1);
  EXPECT_EQ(tok.decode(ids).value(), "hi<|im_start|>user\n<think>x</think><|im_end|>");
  EXPECT_EQ(tok.decode(ids, /*skip_special=*/true).value(), "hiuser\n<think>x</think>");
  // A near miss is text.
  const auto near = tok.encode("<|im_start").value();
  EXPECT_GT(near.size(), 1u);
  EXPECT_EQ(std::count(near.begin(), near.end(), *tok.token_to_id("<|im_start|>")), 0);
  EXPECT_EQ(tok.id_to_token(vs).value(), "<|vision_start|>");
  EXPECT_EQ(tok.split_pattern().substr(0, 8), "(?i:'s|'");
}

TEST_F(TokenizerCorpus, EmptyInvalidAndLossy) {
  const Tokenizer tok = must_load(kDir + "/tokenizer.json");
  EXPECT_TRUE(tok.encode("").value().empty());
  EXPECT_EQ(tok.decode(std::vector<int32_t>{}).value(), "");
  auto bad = tok.encode(std::string("ab\xC3(", 4));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("not valid UTF-8 at byte 2"), std::string::npos) << bad.status().message();
  auto unknown = tok.decode(std::vector<int32_t>{5, tok.vocab_size()});
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("ids[1]"), std::string::npos) << unknown.status().message();
  EXPECT_FALSE(tok.decode(std::vector<int32_t>{-1}).ok());
  // "中" is E4 B8 AD: its first byte alone is invalid UTF-8 -> one U+FFFD (HF's from_utf8_lossy), bytes kept.
  const int32_t e4 = *tok.token_to_id("ä");  // byte 0xE4 maps to itself in the GPT-2 alphabet
  EXPECT_EQ(tok.decode(std::vector<int32_t>{e4, *tok.token_to_id("a")}).value(), "\xEF\xBF\xBD" "a");
  EXPECT_EQ(tok.decode_bytes(std::vector<int32_t>{e4}).value(), "\xE4");
}

TEST_F(TokenizerCorpus, VeryLongInputs) {
  const Tokenizer tok = must_load(kDir + "/tokenizer.json");
  std::string spaces = "a" + std::string(200000, ' ') + "b";
  std::string cjk;
  for (int i = 0; i < 50000; ++i) cjk += "\xE4\xB8\x80";  // 一 x 50,000: one 150 kB regex piece
  // 100,000 alternating marks after one letter: one NFC chunk to reorder (HF: ạ + U+0323 x 49,999 + U+0301 x
  // 50,000, checked with tokenizers 0.22.2).
  std::string marks = "a", nfc_marks = "\xE1\xBA\xA1";
  for (int i = 0; i < 50000; ++i) marks += "\xCC\x81\xCC\xA3";
  for (int i = 0; i < 49999; ++i) nfc_marks += "\xCC\xA3";
  for (int i = 0; i < 50000; ++i) nfc_marks += "\xCC\x81";
  EXPECT_EQ(tok.normalize(marks).value(), nfc_marks);
  EXPECT_EQ(tok.decode(tok.encode(marks).value()).value(), nfc_marks);
  for (const std::string& s : {spaces, cjk}) {
    auto ids = tok.encode(s);
    ASSERT_TRUE(ids.ok()) << ids.status().message();
    EXPECT_EQ(tok.decode(ids.value()).value(), s);
  }
}

// ---- hand-made tokenizers --------------------------------------------------------------------------------------
// The GPT-2 alphabet maps a-z to themselves, so a tiny vocabulary over {a, b, c} is readable.
std::string tiny_json(const std::string& merges, const std::string& model_type = "\"BPE\"",
                      const std::string& regex = R"(\\p{L}+|\\s+)", bool with_model = true) {
  std::string model = R"("model": {"type": )" + model_type +
                      R"(, "vocab": {"a": 0, "b": 1, "c": 2, "ab": 3, "bc": 4, "abc": 5, "aa": 6, "aaaa": 7,
                      "Ġ": 8}, "merges": )" + merges + "}";
  return std::string("{") + (with_model ? model + "," : "") +
         R"("added_tokens": [], "normalizer": {"type": "NFC"},
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
              {"type": "Split", "pattern": {"Regex": ")" + regex + R"("}, "behavior": "Isolated", "invert": false},
              {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}]},
            "decoder": {"type": "ByteLevel"}})";
}

std::vector<int32_t> enc(const Tokenizer& t, const std::string& s) { return t.encode(s).value(); }

TEST(TokenizerBpe, LowestRankMergesFirst) {
  // Ranks: (b c) 0, (a b) 1, (a bc) 2, (ab c) 3.  "abc": b c first -> a bc -> abc.
  auto t1 = Tokenizer::from_json(tiny_json(R"(["b c", "a b", "a bc", "ab c"])"));
  ASSERT_TRUE(t1.ok()) << t1.status().message();
  EXPECT_EQ(enc(t1.value(), "abc"), (std::vector<int32_t>{5}));
  // Without (a bc): b c wins and then nothing merges a with bc.
  auto t2 = Tokenizer::from_json(tiny_json(R"(["b c", "a b", "ab c"])"));
  ASSERT_TRUE(t2.ok());
  EXPECT_EQ(enc(t2.value(), "abc"), (std::vector<int32_t>{0, 4}));
  // (a b) ranked first: a b -> ab c -> abc.
  auto t3 = Tokenizer::from_json(tiny_json(R"([["a", "b"], ["b", "c"], ["ab", "c"]])"));
  ASSERT_TRUE(t3.ok());
  EXPECT_EQ(enc(t3.value(), "abc"), (std::vector<int32_t>{5}));
  EXPECT_EQ(enc(t3.value(), "abcbc"), (std::vector<int32_t>{5, 4}));
}

TEST(TokenizerBpe, LeftmostOnTiesInShortAndLongWords) {
  // (a a) 0, (aa aa) 1: "aaaaa" -> aa aa a -> aaaa a; the same pattern repeated past the heap threshold.
  auto t = Tokenizer::from_json(tiny_json(R"(["a a", "aa aa"])"));
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(enc(t.value(), "aaaaa"), (std::vector<int32_t>{7, 0}));
  EXPECT_EQ(enc(t.value(), "aaa"), (std::vector<int32_t>{6, 0}));
  std::vector<int32_t> expected;
  for (int i = 0; i < 25; ++i) expected.push_back(7);
  expected.push_back(6);
  expected.push_back(0);
  EXPECT_EQ(enc(t.value(), std::string(103, 'a')), expected);  // 103 symbols: the heap path
  // A byte outside the vocabulary (no unk token) is dropped and its neighbours merge, as in HF (which gives [6]).
  EXPECT_EQ(enc(t.value(), "aza"), (std::vector<int32_t>{6}));
}

TEST(TokenizerBpe, CacheOffGivesTheSameIds) {
  auto t = Tokenizer::from_file(kDir + "/tokenizer.json");
  ASSERT_TRUE(t.ok());
  const std::string s = "The cache must not change anything: café, 東京, 123 4567!";
  const auto with_cache = enc(t.value(), s);
  t.value().set_cache_enabled(false);
  EXPECT_EQ(enc(t.value(), s), with_cache);
}

TEST(TokenizerLoad, AddedIdsAreDerivedAsHfDoes) {
  // HF ignores the file's added ids: <x> and <y> get 9 and 10 (after the 9 vocabulary entries), "ab" keeps its
  // vocabulary id 3. HF tokenizers 0.22.2 gives [9, 10, 3] and vocab size 11 for this file.
  std::string j = tiny_json(R"(["a a", "aa aa"])");
  const std::string flags = R"("single_word": false, "lstrip": false, "rstrip": false, "normalized": false)";
  j.replace(j.find(R"("added_tokens": [])"), 18,
            R"("added_tokens": [{"id": 50, "content": "<x>", "special": true, )" + flags +
                R"(}, {"id": 20, "content": "<y>", "special": true, )" + flags +
                R"(}, {"id": 77, "content": "ab", "special": false, )" + flags + "}]");
  auto t = Tokenizer::from_json(j);
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(enc(t.value(), "<x><y>ab"), (std::vector<int32_t>{9, 10, 3}));
  EXPECT_EQ(t.value().vocab_size(), 11);
}

// ---- malformed files -------------------------------------------------------------------------------------------
struct TempFile {
  std::string path;
  explicit TempFile(const std::string& text) {
    path = (std::filesystem::temp_directory_path() /
            ("vlpar_tok_" + std::to_string(std::hash<std::string>{}(text)) + ".json")).string();
    std::ofstream(path, std::ios::binary) << text;
  }
  ~TempFile() { std::remove(path.c_str()); }
};

void expect_load_error(const std::string& json, const std::string& defect) {
  const TempFile f(json);
  auto t = Tokenizer::from_file(f.path);
  ASSERT_FALSE(t.ok()) << "expected an error about: " << defect;
  const std::string& m = t.status().message();
  EXPECT_NE(m.find(f.path), std::string::npos) << m;
  EXPECT_NE(m.find(defect), std::string::npos) << m;
}

TEST(TokenizerLoad, MalformedFilesNameTheFileAndTheDefect) {
  expect_load_error(tiny_json(R"(["a b"])", "\"BPE\"", R"(\\p{L}+)", false), "\"model\" is missing");
  expect_load_error(tiny_json(R"(["a b"])", "\"WordPiece\""), "model type \"WordPiece\" is not supported");
  expect_load_error(tiny_json(R"(["a b", "ab"])"), "model.merges[1] = \"ab\" is not two tokens");
  expect_load_error(tiny_json(R"(["a b", "a  b"])"), "model.merges[1]");
  expect_load_error(tiny_json(R"([["a", "b"], ["a"]])"), "model.merges[1] = [\"a\"] is not a pair");
  expect_load_error(tiny_json(R"(["a b", 7])"), "model.merges[1] = 7 is neither");
  expect_load_error(tiny_json(R"(["a b", "a x"])"), "model.merges[1]: token \"x\" is not in model.vocab");
  expect_load_error(tiny_json(R"(["c a"])"), "model.merges[0]: merged token \"ca\" is not in model.vocab");
  expect_load_error(tiny_json(R"(["a b"])", "\"BPE\"", R"((?<x\\p{L}+)"), "rejected by PCRE2");
  expect_load_error(tiny_json(R"(["a b"])", "\"BPE\"", R"([a-)"), "rejected by PCRE2");
  expect_load_error("{\"model\": ", "not valid JSON");
  auto missing = Tokenizer::from_file("/nonexistent/tokenizer.json");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kIoError);
  EXPECT_NE(missing.status().message().find("/nonexistent/tokenizer.json"), std::string::npos);
}

// ---- the real Qwen vocabulary (optional) ------------------------------------------------------------------------
TEST(TokenizerQwen, RealVocabularyMatchesHf) {
  const char* dir = std::getenv("VLPAR_QWEN_TOKENIZER_DIR");
  if (dir == nullptr)
    GTEST_SKIP() << "VLPAR_QWEN_TOKENIZER_DIR not set (make it with make_tokenizer_fixture.py --qwen-tiktoken)";
  const Tokenizer tok = must_load(std::string(dir) + "/tokenizer.json");
  // Qwen2/3: [151652, 151655, 151653]; Qwen3.5: the same tokens at 248053.. (the folder decides).
  const std::vector<int32_t> anchor = {*tok.token_to_id("<|vision_start|>"), *tok.token_to_id("<|image_pad|>"),
                                       *tok.token_to_id("<|vision_end|>")};
  EXPECT_EQ(tok.encode("<|vision_start|><|image_pad|><|vision_end|>").value(), anchor);
  if (tok.vocab_size() < 200000) {
    EXPECT_EQ(anchor, (std::vector<int32_t>{151652, 151655, 151653}));
  }
  expect_parity(tok, read_corpus(dir), read_ids(std::string(dir) + "/ids.bin").ids, "real Qwen vocabulary");
}

}  // namespace
}  // namespace vlpar::data
