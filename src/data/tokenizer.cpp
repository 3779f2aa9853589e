// Byte-level BPE tokenizer from a HF tokenizer.json. See include/vlpar/data/tokenizer.hpp for the pipeline.
#include "vlpar/data/tokenizer.hpp"

#include <pcre2.h>

#include <algorithm>
#include <array>
#include <fstream>
#include <functional>
#include <limits>
#include <mutex>
#include <nlohmann/json.hpp>
#include <queue>
#include <sstream>
#include <unordered_map>

#include "unicode_nfc.hpp"

namespace vlpar::data {

namespace {

using json = nlohmann::json;
using unicode::append_utf8;
using unicode::decode_utf8;

// ---- GPT-2 bytes_to_unicode ------------------------------------------------------------------------------------
// Bytes '!'..'~', U+00A1..U+00AC and U+00AE..U+00FF map to themselves; the other 68 bytes map to U+0100 + n in
// increasing byte order (HF byte_level.rs bytes_char).
struct ByteAlphabet {
  std::array<char32_t, 256> byte_to_cp{};
  std::array<int16_t, 324> cp_to_byte{};  // -1 where the code point is not in the alphabet
  ByteAlphabet() {
    cp_to_byte.fill(-1);
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool self = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      byte_to_cp[b] = self ? char32_t(b) : char32_t(256 + n++);
      cp_to_byte[byte_to_cp[b]] = static_cast<int16_t>(b);
    }
  }
};
const ByteAlphabet& byte_alphabet() {
  static const ByteAlphabet a;
  return a;
}

// Raw bytes of a byte-level token string ("Ġthe" -> " the"), or nullopt when a character is outside the
// alphabet (such a token can never come out of BPE over bytes, and decodes as its own UTF-8).
std::optional<std::string> byte_level_to_bytes(std::string_view token) {
  if (unicode::first_invalid_utf8(token) != token.size()) return std::nullopt;
  std::string out;
  out.reserve(token.size());
  const auto& a = byte_alphabet();
  for (size_t i = 0; i < token.size();) {
    const char32_t cp = decode_utf8(token, i);
    if (cp >= a.cp_to_byte.size() || a.cp_to_byte[cp] < 0) return std::nullopt;
    out.push_back(static_cast<char>(a.cp_to_byte[cp]));
  }
  return out;
}

// ---- merge table: (id_a, id_b) -> (rank, merged id), open addressing ---------------------------------------------
class MergeMap {
 public:
  struct Value {
    uint32_t rank;
    int32_t id;
  };
  void reserve(size_t n) {
    size_t cap = 16;
    while (cap < 2 * n + 16) cap <<= 1;
    slots_.assign(cap, Slot{kEmpty, {0, 0}});
    mask_ = cap - 1;
  }
  // Later entries overwrite earlier ones, as HF's HashMap::from_iter does.
  void insert_or_assign(int32_t a, int32_t b, Value v) {
    const uint64_t key = pack(a, b);
    for (size_t i = hash(key);; i = (i + 1) & mask_) {
      if (slots_[i].key == kEmpty) {
        slots_[i] = Slot{key, v};
        ++size_;
        return;
      }
      if (slots_[i].key == key) {
        slots_[i].value = v;
        return;
      }
    }
  }
  const Value* find(int32_t a, int32_t b) const {
    const uint64_t key = pack(a, b);
    for (size_t i = hash(key);; i = (i + 1) & mask_) {
      if (slots_[i].key == key) return &slots_[i].value;
      if (slots_[i].key == kEmpty) return nullptr;
    }
  }
  size_t size() const { return size_; }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  struct Slot {
    uint64_t key;
    Value value;
  };
  static uint64_t pack(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }
  size_t hash(uint64_t key) const { return size_t((key * 0x9E3779B97F4A7C15ull) >> 17) & mask_; }
  std::vector<Slot> slots_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

// ---- added-token matcher: leftmost-longest over a byte trie (HF uses Aho-Corasick LeftmostLongest) -------------
class AddedMatcher {
 public:
  void add(std::string_view pattern, int32_t token_index) {
    if (pattern.empty()) return;
    int32_t node = 0;
    for (unsigned char c : pattern) {
      const uint64_t key = (uint64_t(uint32_t(node)) << 8) | c;
      auto it = edges_.find(key);
      if (it == edges_.end()) {
        it = edges_.emplace(key, static_cast<int32_t>(terminal_.size())).first;
        terminal_.push_back(-1);
      }
      node = it->second;
    }
    terminal_[static_cast<size_t>(node)] = token_index;
    first_[static_cast<unsigned char>(pattern[0])] = true;
    empty_ = false;
  }
  bool empty() const { return empty_; }
  // The leftmost-longest match at or after `from`: (start, end, token index), or start == npos.
  struct Match {
    size_t start = std::string_view::npos, end = 0;
    int32_t token = -1;
  };
  Match find(std::string_view text, size_t from) const {
    for (size_t i = from; i < text.size(); ++i) {
      if (!first_[static_cast<unsigned char>(text[i])]) continue;
      int32_t node = 0;
      Match best;
      for (size_t j = i; j < text.size(); ++j) {
        const auto it = edges_.find((uint64_t(uint32_t(node)) << 8) | static_cast<unsigned char>(text[j]));
        if (it == edges_.end()) break;
        node = it->second;
        if (terminal_[static_cast<size_t>(node)] >= 0) best = Match{i, j + 1, terminal_[static_cast<size_t>(node)]};
      }
      if (best.start != std::string_view::npos) return best;
    }
    return {};
  }

 private:
  std::unordered_map<uint64_t, int32_t> edges_;  // (node << 8 | byte) -> child node
  std::vector<int32_t> terminal_{-1};            // node -> added-token index or -1; node 0 is the root
  std::array<bool, 256> first_{};                // bytes that start some pattern
  bool empty_ = true;
};

// ---- regex ----------------------------------------------------------------------------------------------------
struct Pcre2CodeDeleter {
  void operator()(pcre2_code* c) const { pcre2_code_free(c); }
};
using Pcre2Code = std::unique_ptr<pcre2_code, Pcre2CodeDeleter>;
struct Pcre2MatchDataDeleter {
  void operator()(pcre2_match_data* m) const { pcre2_match_data_free(m); }
};
using Pcre2MatchData = std::unique_ptr<pcre2_match_data, Pcre2MatchDataDeleter>;

std::string pcre2_error(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof(buf));
  return reinterpret_cast<const char*>(buf);
}

#include "unicode_regex_tables.inc"

// The extra class items of \p{name} (see above), or empty.
std::string_view oniguruma_extra(std::string_view name) {
  if (name == "L") return kOnigurumaExtraL;
  if (name == "N") return kOnigurumaExtraN;
  if (name == "M") return kOnigurumaExtraM;
  return {};
}

// Oniguruma (HF's regex engine) and PCRE2 differ on the Unicode meaning of some escapes. Its \s is the
// White_Space property (PCRE2's also takes U+180E through \h); its \w is Alphabetic + M + Nd + Pc + Join_Control
// (PCRE2's is L + N + '_'); its \p{L}, \p{N}, \p{M} come from newer Unicode data than PCRE2 10.42's 14.0 (the
// code points they add are generated into unicode_regex_tables.inc by tools/gen_unicode_nfc.py). This rewrites
// those escapes into explicit PCRE2 properties and ranges, inside and outside character classes, leaving \Q...\E
// quotes and escaped backslashes alone.
Result<std::string> oniguruma_to_pcre2(std::string_view re, std::string_view origin) {
  static constexpr std::string_view kSpace = "\\p{White_Space}";
  static constexpr std::string_view kNotSpace = "\\P{White_Space}";
  static constexpr std::string_view kWordItems = "\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\p{Join_Control}";
  std::string out;
  int class_depth = 0;  // inside [...] (POSIX [:x:] items do not nest further)
  bool quoted = false;
  for (size_t i = 0; i < re.size(); ++i) {
    const char c = re[i];
    if (quoted) {
      out.push_back(c);
      if (c == '\\' && i + 1 < re.size() && re[i + 1] == 'E') {
        out.push_back('E');
        ++i;
        quoted = false;
      }
      continue;
    }
    if (c == '\\' && i + 1 < re.size()) {
      const char e = re[++i];
      switch (e) {
        case 's': out += kSpace; break;
        case 'S': out += kNotSpace; break;
        case 'w':
          if (class_depth > 0) out.append(kWordItems);
          else out.append("[").append(kWordItems).append("]");
          break;
        case 'W':
          if (class_depth > 0)
            return VLPAR_STATUS(StatusCode::kNotSupported,
                                "tokenizer {}: pre_tokenizer regex uses \\W inside a character class, which has no "
                                "PCRE2 equivalent of Oniguruma's meaning", origin);
          out.append("[^").append(kWordItems).append("]");
          break;
        case 'Q':
          quoted = true;
          out += "\\Q";
          break;
        case 'p':
        case 'P': {
          // \pX or \p{Name}
          std::string_view name;
          size_t consumed = 0;
          if (i + 1 < re.size() && re[i + 1] == '{') {
            const size_t close = re.find('}', i + 2);
            if (close != std::string_view::npos) {
              name = re.substr(i + 2, close - i - 2);
              consumed = close - i;
            }
          } else if (i + 1 < re.size()) {
            name = re.substr(i + 1, 1);
            consumed = 1;
          }
          const std::string_view extra = oniguruma_extra(name);
          if (extra.empty()) {
            out.push_back('\\');
            out.push_back(e);
            break;
          }
          i += consumed;
          std::string prop("\\p{");
          prop.append(name).append("}").append(extra);
          if (e == 'p' && class_depth > 0) {
            out.append(prop);
          } else if (class_depth == 0) {
            out.append(e == 'p' ? "[" : "[^").append(prop).append("]");
          } else {
            return VLPAR_STATUS(StatusCode::kNotSupported,
                                "tokenizer {}: pre_tokenizer regex uses \\P{{{}}} inside a character class, which "
                                "cannot take Oniguruma's newer Unicode data in PCRE2", origin, name);
          }
          break;
        }
        default:
          out.push_back('\\');
          out.push_back(e);
      }
      continue;
    }
    if (c == '[') {
      if (class_depth > 0 && i + 1 < re.size() && re[i + 1] == ':') {
        const size_t close = re.find(":]", i + 2);
        if (close != std::string_view::npos) {
          out.append(re.substr(i, close + 2 - i));
          i = close + 1;
          continue;
        }
      }
      if (class_depth == 0) {
        out.push_back('[');
        class_depth = 1;
        // A ']' right after '[' or '[^' is a literal member.
        if (i + 1 < re.size() && re[i + 1] == '^') out.push_back(re[++i]);
        if (i + 1 < re.size() && re[i + 1] == ']') out.push_back(re[++i]);
        continue;
      }
    } else if (c == ']' && class_depth > 0) {
      class_depth = 0;
    }
    out.push_back(c);
  }
  return out;
}

constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// White_Space (Rust regex \s, used by lstrip/rstrip).
bool is_white_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// ---- word cache ------------------------------------------------------------------------------------------------
// Pieces up to kMaxCachedPiece bytes -> their ids, in kShards independently locked maps. A full shard is cleared
// (bounded memory; frequent words come straight back).
class WordCache {
 public:
  static constexpr size_t kShards = 64;
  static constexpr size_t kPerShard = 1024;  // 64 Ki pieces in all (HF caches 10 Ki words)
  static constexpr size_t kMaxCachedPiece = 96;
  bool get(std::string_view piece, size_t h, std::vector<int32_t>& out) const {
    const Shard& s = shards_[h % kShards];
    std::lock_guard<std::mutex> lock(s.mu);
    const auto it = s.map.find(piece);
    if (it == s.map.end()) return false;
    out.insert(out.end(), it->second.begin(), it->second.end());
    return true;
  }
  void put(std::string_view piece, size_t h, std::span<const int32_t> ids) const {
    Shard& s = shards_[h % kShards];
    std::lock_guard<std::mutex> lock(s.mu);
    if (s.map.size() >= kPerShard) s.map.clear();
    s.map.emplace(std::string(piece), std::vector<int32_t>(ids.begin(), ids.end()));
  }

 private:
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  struct Shard {
    mutable std::mutex mu;
    std::unordered_map<std::string, std::vector<int32_t>, Hash, std::equal_to<>> map;
  };
  mutable std::array<Shard, kShards> shards_;
};

constexpr uint32_t kNoRank = std::numeric_limits<uint32_t>::max();

}  // namespace

// ---- the tokenizer ---------------------------------------------------------------------------------------------
struct Tokenizer::Impl {
  std::string origin;  // file path (or caller's name) for messages

  // Vocabulary.
  std::unordered_map<std::string, int32_t> model_vocab;  // tokenizer.json spelling -> id
  std::unordered_map<std::string, int32_t> added_vocab;  // added token content -> id
  std::vector<std::string> id_token;                     // id -> spelling ("" for holes)
  std::vector<std::string> id_bytes;                     // id -> decoded bytes (ByteLevel decoder)
  std::vector<uint8_t> id_flags;                         // bit 0: exists, bit 1: special added token
  std::vector<AddedToken> added;
  AddedMatcher raw_matcher, normalized_matcher;

  // BPE.
  std::array<int32_t, 256> byte_id{};                   // id of the one-byte symbol, -1 if absent
  std::unordered_map<std::string, int32_t> bytes_vocab;  // raw bytes -> id (ignore_merges lookups)
  MergeMap merges;
  bool ignore_merges = false;
  int32_t unk_id = -1;
  bool fuse_unk = false;

  // Normaliser and pre-tokenizer.
  bool nfc = false;
  std::string split_pattern;
  std::vector<Pcre2Code> stages;  // regexes applied in order (Split, then ByteLevel's GPT-2 split if use_regex)
  bool jit = false;
  uint32_t max_ovector = 1;

  WordCache cache;
  bool cache_enabled = true;

  // Per-call scratch (never shared between threads).
  struct Scratch {
    std::vector<Pcre2MatchData> match_data;
    std::vector<int32_t> sym, next_sym, prev_sym;
    std::vector<uint32_t> rank;
    std::vector<std::string>* pieces = nullptr;  // set: pre_tokenize() collects pieces instead of running BPE
  };

  Status load(const json& root);
  Status load_model(const json& model);
  Status load_added(const json& list);
  Status load_normalizer(const json& n);
  Status load_pre_tokenizer(const json& p);
  Status load_decoder(const json& d);
  Status add_stage(std::string_view pattern, bool literal, std::string_view what);

  template <class F>
  Status split_added(std::string_view text, const AddedMatcher& m, F&& emit) const;
  Status pre_tokenize(std::string_view segment, size_t stage, Scratch& s, std::vector<int32_t>& ids) const;
  void bpe_piece(std::string_view piece, Scratch& s, std::vector<int32_t>& ids) const;
  void merge_small(Scratch& s) const;
  void merge_heap(Scratch& s) const;
  Status encode_into(std::string_view text, std::vector<int32_t>& ids) const;
  bool is_word_char(char32_t c) const;
  Pcre2Code word_class;
  Pcre2MatchData word_md;  // only used under word_mu
  mutable std::mutex word_mu;
};

#define TOK_FAIL(code, ...) return VLPAR_STATUS((code), "tokenizer {}: {}", origin, fmt::format(__VA_ARGS__))
#define TOK_CHECK(cond, ...)                                             \
  do {                                                                   \
    if (!(cond)) TOK_FAIL(StatusCode::kInvalidArgument, __VA_ARGS__);    \
  } while (0)

namespace {
bool json_bool(const json& obj, const char* key, bool dflt) {
  const auto it = obj.find(key);
  return (it == obj.end() || !it->is_boolean()) ? dflt : it->get<bool>();
}
std::string json_type(const json& obj) {
  const auto it = obj.find("type");
  return (it != obj.end() && it->is_string()) ? it->get<std::string>() : std::string();
}
}  // namespace

Status Tokenizer::Impl::load(const json& root) {
  TOK_CHECK(root.is_object(), "the top level is not a JSON object");
  const auto model = root.find("model");
  TOK_CHECK(model != root.end() && model->is_object(), "\"model\" is missing (or not an object)");
  VLPAR_RETURN_IF_ERROR(load_model(*model));
  if (const auto it = root.find("added_tokens"); it != root.end() && !it->is_null())
    VLPAR_RETURN_IF_ERROR(load_added(*it));
  if (const auto it = root.find("normalizer"); it != root.end()) VLPAR_RETURN_IF_ERROR(load_normalizer(*it));
  if (const auto it = root.find("pre_tokenizer"); it != root.end()) {
    VLPAR_RETURN_IF_ERROR(load_pre_tokenizer(*it));
  } else {
    TOK_FAIL(StatusCode::kNotSupported, "\"pre_tokenizer\" is missing (a byte-level BPE needs ByteLevel)");
  }
  if (const auto it = root.find("decoder"); it != root.end()) VLPAR_RETURN_IF_ERROR(load_decoder(*it));
  // Normalized added tokens match the normalised text: their patterns are normalised too (HF does the same).
  for (size_t i = 0; i < added.size(); ++i) {
    if (added[i].normalized) {
      std::string pat;
      if (nfc) unicode::append_nfc(added[i].content, pat);
      else pat = added[i].content;
      normalized_matcher.add(pat, static_cast<int32_t>(i));
    } else {
      raw_matcher.add(added[i].content, static_cast<int32_t>(i));
    }
  }
  // Word-character class for single_word (Rust regex \w).
  int err = 0;
  PCRE2_SIZE off = 0;
  static constexpr char kWord[] = "[\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\p{Join_Control}]";
  word_class.reset(pcre2_compile(reinterpret_cast<PCRE2_SPTR>(kWord), PCRE2_ZERO_TERMINATED,
                                 PCRE2_UTF | PCRE2_UCP | PCRE2_ANCHORED, &err, &off, nullptr));
  if (!word_class) TOK_FAIL(StatusCode::kInternal, "PCRE2 rejects the word class: {}", pcre2_error(err));
  word_md.reset(pcre2_match_data_create_from_pattern(word_class.get(), nullptr));
  return Status::Ok();
}

Status Tokenizer::Impl::load_model(const json& model) {
  const std::string type = json_type(model);
  if (type.empty()) {
    // HF accepts an untyped model and guesses from its fields; only BPE's shape is accepted here.
    TOK_CHECK(model.contains("merges") && model.contains("vocab"),
              "\"model\" has no \"type\" and is not a BPE model (no vocab + merges)");
  } else if (type != "BPE") {
    TOK_FAIL(StatusCode::kNotSupported, "model type \"{}\" is not supported (only BPE)", type);
  }
  if (const auto it = model.find("dropout"); it != model.end() && !it->is_null()) {
    TOK_CHECK(it->is_number(), "model.dropout is not a number");
    TOK_CHECK(it->get<double>() == 0.0, "model.dropout = {} is not supported (BPE dropout is random)",
              it->get<double>());
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (const auto it = model.find(key); it != model.end() && !it->is_null()) {
      TOK_CHECK(it->is_string(), "model.{} is not a string", key);
      if (!it->get<std::string>().empty())
        TOK_FAIL(StatusCode::kNotSupported, "model.{} = \"{}\" is not supported (byte-level BPE has none)", key,
                 it->get<std::string>());
    }
  }
  if (json_bool(model, "byte_fallback", false))
    TOK_FAIL(StatusCode::kNotSupported, "model.byte_fallback = true is not supported (byte-level BPE needs none)");
  ignore_merges = json_bool(model, "ignore_merges", false);
  fuse_unk = json_bool(model, "fuse_unk", false);

  const auto vocab = model.find("vocab");
  TOK_CHECK(vocab != model.end() && vocab->is_object(), "model.vocab is missing or not an object");
  int32_t max_id = -1;
  model_vocab.reserve(vocab->size());
  for (const auto& [tok, idv] : vocab->items()) {
    TOK_CHECK(idv.is_number_integer(), "model.vocab[\"{}\"] is not an integer id", tok);
    const int64_t id = idv.get<int64_t>();
    TOK_CHECK(id >= 0 && id < std::numeric_limits<int32_t>::max(), "model.vocab[\"{}\"] = {} is not a valid id",
              tok, id);
    model_vocab[tok] = static_cast<int32_t>(id);
    max_id = std::max(max_id, static_cast<int32_t>(id));
  }
  id_token.assign(static_cast<size_t>(max_id + 1), std::string());
  id_bytes.assign(static_cast<size_t>(max_id + 1), std::string());
  id_flags.assign(static_cast<size_t>(max_id + 1), 0);
  byte_id.fill(-1);
  bytes_vocab.reserve(model_vocab.size());
  const auto& alpha = byte_alphabet();
  for (const auto& [tok, id] : model_vocab) {
    const auto u = static_cast<size_t>(id);
    id_token[u] = tok;
    id_flags[u] = 1;
    if (auto raw = byte_level_to_bytes(tok)) {
      id_bytes[u] = *raw;
      if (raw->size() == 1) byte_id[static_cast<unsigned char>((*raw)[0])] = id;
      bytes_vocab.emplace(std::move(*raw), id);
    } else {
      id_bytes[u] = tok;  // ByteLevel decoder: a token with a character outside the alphabet stays as it is
    }
  }
  (void)alpha;

  if (const auto it = model.find("unk_token"); it != model.end() && !it->is_null()) {
    TOK_CHECK(it->is_string(), "model.unk_token is not a string");
    const auto u = model_vocab.find(it->get<std::string>());
    TOK_CHECK(u != model_vocab.end(), "model.unk_token \"{}\" is not in model.vocab", it->get<std::string>());
    unk_id = u->second;
  }

  const auto mit = model.find("merges");
  TOK_CHECK(mit != model.end() && mit->is_array(), "model.merges is missing or not an array");
  merges.reserve(mit->size());
  uint32_t rank = 0;
  for (size_t i = 0; i < mit->size(); ++i) {
    const json& m = (*mit)[i];
    std::string a, b;
    if (m.is_string()) {
      const std::string& s = m.get_ref<const std::string&>();
      if (i == 0 && s.rfind("#version", 0) == 0) continue;  // merges.txt header carried into the JSON
      const size_t sp = s.find(' ');
      TOK_CHECK(sp != std::string::npos && s.find(' ', sp + 1) == std::string::npos && sp > 0 && sp + 1 < s.size(),
                "model.merges[{}] = \"{}\" is not two tokens separated by one space", i, s);
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else if (m.is_array()) {
      TOK_CHECK(m.size() == 2 && m[0].is_string() && m[1].is_string(),
                "model.merges[{}] = {} is not a pair of two strings", i, m.dump());
      a = m[0].get<std::string>();
      b = m[1].get<std::string>();
    } else {
      TOK_FAIL(StatusCode::kInvalidArgument, "model.merges[{}] = {} is neither \"a b\" nor [\"a\", \"b\"]", i,
               m.dump());
    }
    const auto ia = model_vocab.find(a);
    const auto ib = model_vocab.find(b);
    TOK_CHECK(ia != model_vocab.end(), "model.merges[{}]: token \"{}\" is not in model.vocab", i, a);
    TOK_CHECK(ib != model_vocab.end(), "model.merges[{}]: token \"{}\" is not in model.vocab", i, b);
    const auto ic = model_vocab.find(a + b);
    TOK_CHECK(ic != model_vocab.end(), "model.merges[{}]: merged token \"{}\" is not in model.vocab", i, a + b);
    merges.insert_or_assign(ia->second, ib->second, MergeMap::Value{rank++, ic->second});
  }
  return Status::Ok();
}

Status Tokenizer::Impl::load_added(const json& list) {
  TOK_CHECK(list.is_array(), "\"added_tokens\" is not an array");
  // HF re-derives every added id on load, in file order, and only warns when the file's "id" differs
  // (tokenizer/serialization.rs + AddedVocabulary::add_tokens): a content already in the added map or the model
  // vocabulary keeps that id; a new one gets the model's vocabulary size (its entry count) or, once an added id
  // reached it, 1 + the largest added id. Files HF wrote agree with this; the same rule keeps hand-edited ones
  // identical to HF.
  const auto model_size = static_cast<int64_t>(model_vocab.size());
  int64_t max_added = -1;
  for (size_t i = 0; i < list.size(); ++i) {
    const json& t = list[i];
    TOK_CHECK(t.is_object(), "added_tokens[{}] is not an object", i);
    const auto id = t.find("id");
    const auto content = t.find("content");
    TOK_CHECK(id != t.end() && id->is_number_integer(), "added_tokens[{}] has no integer \"id\"", i);
    TOK_CHECK(content != t.end() && content->is_string() && !content->get<std::string>().empty(),
              "added_tokens[{}] has no non-empty \"content\"", i);
    AddedToken a;
    a.content = content->get<std::string>();
    TOK_CHECK(unicode::first_invalid_utf8(a.content) == a.content.size(), "added_tokens[{}] content is not UTF-8",
              i);
    a.special = json_bool(t, "special", false);
    a.single_word = json_bool(t, "single_word", false);
    a.lstrip = json_bool(t, "lstrip", false);
    a.rstrip = json_bool(t, "rstrip", false);
    a.normalized = json_bool(t, "normalized", !a.special);
    int64_t derived;
    if (const auto it = added_vocab.find(a.content); it != added_vocab.end()) derived = it->second;
    else if (const auto mv = model_vocab.find(a.content); mv != model_vocab.end()) derived = mv->second;
    else if (max_added < 0) derived = model_size;
    else derived = (max_added >= model_size || model_size == 0) ? max_added + 1 : model_size;
    TOK_CHECK(derived < std::numeric_limits<int32_t>::max(), "added_tokens[{}] gets id {}, out of range", i,
              derived);
    a.id = static_cast<int32_t>(derived);
    max_added = std::max(max_added, derived);
    const auto u = static_cast<size_t>(a.id);
    if (u >= id_token.size()) {
      id_token.resize(u + 1);
      id_bytes.resize(u + 1);
      id_flags.resize(u + 1, 0);
    }
    id_token[u] = a.content;
    // ByteLevel decoder over the content: characters all in the alphabet map back to bytes, else raw UTF-8.
    if (auto raw = byte_level_to_bytes(a.content)) id_bytes[u] = *raw;
    else id_bytes[u] = a.content;
    id_flags[u] = static_cast<uint8_t>(1 | (a.special ? 2 : 0));
    added_vocab[a.content] = a.id;
    // A content given twice: the later definition (flags) replaces the earlier one.
    const auto same = std::find_if(added.begin(), added.end(), [&](const AddedToken& x) { return x.content == a.content; });
    if (same != added.end()) *same = std::move(a);
    else added.push_back(std::move(a));
  }
  return Status::Ok();
}

Status Tokenizer::Impl::load_normalizer(const json& n) {
  if (n.is_null()) return Status::Ok();
  const std::string type = json_type(n);
  if (type == "NFC") {
    nfc = true;
    return Status::Ok();
  }
  if (type == "Sequence") {
    const auto list = n.find("normalizers");
    TOK_CHECK(list != n.end() && list->is_array(), "normalizer Sequence has no \"normalizers\" array");
    for (const json& x : *list) VLPAR_RETURN_IF_ERROR(load_normalizer(x));
    return Status::Ok();
  }
  TOK_FAIL(StatusCode::kNotSupported, "normalizer type \"{}\" is not supported (only NFC)", type);
}

Status Tokenizer::Impl::add_stage(std::string_view pattern, bool literal, std::string_view what) {
  std::string translated;
  if (literal) {
    translated = std::string(pattern);
  } else {
    auto t = oniguruma_to_pcre2(pattern, origin);
    if (!t.ok()) return t.status();
    translated = std::move(t).value();
  }
  int err = 0;
  PCRE2_SIZE off = 0;
  Pcre2Code code(pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                               PCRE2_UTF | PCRE2_UCP | (literal ? PCRE2_LITERAL : 0u), &err, &off, nullptr));
  if (!code)
    TOK_FAIL(StatusCode::kInvalidArgument, "{} regex \"{}\" is rejected by PCRE2 at offset {}: {}", what,
             std::string(pattern), off, pcre2_error(err));
  jit = pcre2_jit_compile(code.get(), PCRE2_JIT_COMPLETE) == 0;
  uint32_t cap = 0;
  pcre2_pattern_info(code.get(), PCRE2_INFO_CAPTURECOUNT, &cap);
  max_ovector = std::max(max_ovector, cap + 1);
  stages.push_back(std::move(code));
  return Status::Ok();
}

Status Tokenizer::Impl::load_pre_tokenizer(const json& p) {
  TOK_CHECK(!p.is_null(), "pre_tokenizer is null (a byte-level BPE needs ByteLevel)");
  const std::string type = json_type(p);
  std::vector<const json*> steps;
  if (type == "Sequence") {
    const auto list = p.find("pretokenizers");
    TOK_CHECK(list != p.end() && list->is_array(), "pre_tokenizer Sequence has no \"pretokenizers\" array");
    for (const json& x : *list) steps.push_back(&x);
  } else {
    steps.push_back(&p);
  }
  bool byte_level = false;
  for (size_t k = 0; k < steps.size(); ++k) {
    const json& s = *steps[k];
    const std::string t = json_type(s);
    if (t == "Split") {
      TOK_CHECK(!byte_level, "pre_tokenizer: a Split after ByteLevel is not supported");
      const auto pat = s.find("pattern");
      TOK_CHECK(pat != s.end() && pat->is_object(), "pre_tokenizer Split has no \"pattern\" object");
      const std::string behavior = s.value("behavior", std::string());
      if (behavior != "Isolated")
        TOK_FAIL(StatusCode::kNotSupported, "pre_tokenizer Split behavior \"{}\" is not supported (only Isolated)",
                 behavior);
      if (json_bool(s, "invert", false))
        TOK_FAIL(StatusCode::kNotSupported, "pre_tokenizer Split invert = true is not supported");
      if (const auto r = pat->find("Regex"); r != pat->end() && r->is_string()) {
        split_pattern = r->get<std::string>();
        VLPAR_RETURN_IF_ERROR(add_stage(split_pattern, false, "pre_tokenizer Split"));
      } else if (const auto l = pat->find("String"); l != pat->end() && l->is_string()) {
        split_pattern = l->get<std::string>();
        TOK_CHECK(!split_pattern.empty(), "pre_tokenizer Split pattern String is empty");
        VLPAR_RETURN_IF_ERROR(add_stage(split_pattern, true, "pre_tokenizer Split"));
      } else {
        TOK_FAIL(StatusCode::kInvalidArgument, "pre_tokenizer Split pattern has neither \"Regex\" nor \"String\"");
      }
    } else if (t == "ByteLevel") {
      if (json_bool(s, "add_prefix_space", false))
        TOK_FAIL(StatusCode::kNotSupported, "pre_tokenizer ByteLevel add_prefix_space = true is not supported");
      if (json_bool(s, "use_regex", true))
        VLPAR_RETURN_IF_ERROR(add_stage(kGpt2Pattern, false, "ByteLevel (GPT-2)"));
      byte_level = true;
    } else {
      TOK_FAIL(StatusCode::kNotSupported, "pre_tokenizer type \"{}\" is not supported (Split, ByteLevel)", t);
    }
  }
  TOK_CHECK(byte_level, "pre_tokenizer has no ByteLevel step (only byte-level BPE is supported)");
  return Status::Ok();
}

Status Tokenizer::Impl::load_decoder(const json& d) {
  if (d.is_null()) return Status::Ok();
  const std::string t = json_type(d);
  if (t != "ByteLevel")
    TOK_FAIL(StatusCode::kNotSupported, "decoder type \"{}\" is not supported (only ByteLevel)", t);
  return Status::Ok();
}

bool Tokenizer::Impl::is_word_char(char32_t c) const {
  std::string u;
  append_utf8(c, u);
  std::lock_guard<std::mutex> lock(word_mu);
  return pcre2_match(word_class.get(), reinterpret_cast<PCRE2_SPTR>(u.data()), u.size(), 0, 0, word_md.get(),
                     nullptr) >= 0;
}

// Cuts added tokens out of text (HF AddedVocabulary::find_matches): emit(piece, -1) for text between matches,
// emit(piece, id) for a match (its span widened by lstrip/rstrip).
template <class F>
Status Tokenizer::Impl::split_added(std::string_view text, const AddedMatcher& m, F&& emit) const {
  if (m.empty()) return emit(text, -1);
  size_t start_offset = 0;
  size_t from = 0;
  while (true) {
    const AddedMatcher::Match mt = m.find(text, from);
    if (mt.start == std::string_view::npos) break;
    from = mt.end;
    size_t start = mt.start, stop = mt.end;
    const AddedToken& tok = added[static_cast<size_t>(mt.token)];
    if (tok.single_word) {
      bool word_before = false, word_after = false;
      if (start > 0) {
        size_t k = start - 1;
        while (k > 0 && (static_cast<unsigned char>(text[k]) & 0xC0) == 0x80) --k;
        size_t kk = k;
        word_before = is_word_char(decode_utf8(text, kk));
      }
      if (stop < text.size()) {
        size_t kk = stop;
        word_after = is_word_char(decode_utf8(text, kk));
      }
      if (word_before || word_after) continue;
    }
    if (tok.lstrip) {
      size_t s = start;
      while (s > 0) {
        size_t k = s - 1;
        while (k > 0 && (static_cast<unsigned char>(text[k]) & 0xC0) == 0x80) --k;
        size_t kk = k;
        if (!is_white_space(decode_utf8(text, kk))) break;
        s = k;
      }
      start = std::max(s, start_offset);
    }
    if (tok.rstrip) {
      while (stop < text.size()) {
        size_t kk = stop;
        if (!is_white_space(decode_utf8(text, kk))) break;
        stop = kk;
      }
    }
    if (start_offset < start) VLPAR_RETURN_IF_ERROR(emit(text.substr(start_offset, start - start_offset), -1));
    VLPAR_RETURN_IF_ERROR(emit(std::string_view(), tok.id));
    start_offset = stop;  // HF resumes matching at the match's own end, even after rstrip
  }
  if (start_offset < text.size()) VLPAR_RETURN_IF_ERROR(emit(text.substr(start_offset), -1));
  return Status::Ok();
}

// Splits segment with regex stage `stage` (Isolated: matches and gaps are pieces) and sends each piece to the
// next stage, the last one to BPE.
Status Tokenizer::Impl::pre_tokenize(std::string_view seg, size_t stage, Scratch& s,
                                     std::vector<int32_t>& ids) const {
  if (seg.empty()) return Status::Ok();
  if (stage == stages.size()) {
    if (s.pieces != nullptr) s.pieces->emplace_back(seg);
    else bpe_piece(seg, s, ids);
    return Status::Ok();
  }
  pcre2_code* re = stages[stage].get();
  pcre2_match_data* md = s.match_data[stage].get();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(seg.data());
  size_t offset = 0, gap = 0;
  while (offset <= seg.size()) {
    int rc = pcre2_match(re, subject, seg.size(), offset, PCRE2_NO_UTF_CHECK, md, nullptr);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT)  // pathological backtracking: the interpreter keeps its frames on the heap
      rc = pcre2_match(re, subject, seg.size(), offset, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0)
      return VLPAR_STATUS(StatusCode::kInternal, "tokenizer {}: PCRE2 failed on a {}-byte segment: {}", origin,
                          seg.size(), pcre2_error(rc));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    const size_t ms = ov[0], me = ov[1];
    if (me == ms) {  // empty match: no piece; step one character
      if (ms >= seg.size()) break;
      size_t k = ms;
      decode_utf8(seg, k);
      offset = k;
      continue;
    }
    if (ms > gap) VLPAR_RETURN_IF_ERROR(pre_tokenize(seg.substr(gap, ms - gap), stage + 1, s, ids));
    VLPAR_RETURN_IF_ERROR(pre_tokenize(seg.substr(ms, me - ms), stage + 1, s, ids));
    gap = offset = me;
  }
  if (gap < seg.size()) VLPAR_RETURN_IF_ERROR(pre_tokenize(seg.substr(gap), stage + 1, s, ids));
  return Status::Ok();
}

// Lowest-rank-first merging by repeated scans over s.sym (short words: O(n) lookups, O(n^2) cheap compares).
void Tokenizer::Impl::merge_small(Scratch& s) const {
  auto& sym = s.sym;
  auto& rank = s.rank;  // rank[i] = rank of (sym[i], sym[i+1])
  const size_t n = sym.size();
  rank.resize(n > 0 ? n - 1 : 0);
  for (size_t i = 0; i + 1 < n; ++i) {
    const auto* v = merges.find(sym[i], sym[i + 1]);
    rank[i] = v ? v->rank : kNoRank;
  }
  while (!rank.empty()) {
    size_t best = 0;
    for (size_t i = 1; i < rank.size(); ++i)
      if (rank[i] < rank[best]) best = i;
    if (rank[best] == kNoRank) break;
    sym[best] = merges.find(sym[best], sym[best + 1])->id;
    sym.erase(sym.begin() + static_cast<long>(best) + 1);
    rank.erase(rank.begin() + static_cast<long>(best));
    if (best > 0) {
      const auto* v = merges.find(sym[best - 1], sym[best]);
      rank[best - 1] = v ? v->rank : kNoRank;
    }
    if (best < rank.size()) {
      const auto* v = merges.find(sym[best], sym[best + 1]);
      rank[best] = v ? v->rank : kNoRank;
    }
  }
}

// The same order with a min-heap of (rank, position) over a linked list (HF word.rs); stale entries are skipped.
void Tokenizer::Impl::merge_heap(Scratch& s) const {
  auto& sym = s.sym;
  const int n = static_cast<int>(sym.size());
  auto& next = s.next_sym;
  auto& prev = s.prev_sym;
  next.resize(static_cast<size_t>(n));
  prev.resize(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    next[static_cast<size_t>(i)] = i + 1 < n ? i + 1 : -1;
    prev[static_cast<size_t>(i)] = i - 1;
  }
  using Entry = std::pair<uint64_t, int32_t>;  // (rank << 32 | pos, new id)
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> heap;
  auto push = [&](int pos) {
    const int nx = next[static_cast<size_t>(pos)];
    if (nx < 0) return;
    if (const auto* v = merges.find(sym[static_cast<size_t>(pos)], sym[static_cast<size_t>(nx)]))
      heap.emplace((uint64_t(v->rank) << 32) | uint32_t(pos), v->id);
  };
  for (int i = 0; i + 1 < n; ++i) push(i);
  std::vector<char> alive(static_cast<size_t>(n), 1);
  while (!heap.empty()) {
    const auto [key, new_id] = heap.top();
    heap.pop();
    const int pos = static_cast<int>(key & 0xFFFFFFFFu);
    const auto upos = static_cast<size_t>(pos);
    if (!alive[upos]) continue;
    const int nx = next[upos];
    if (nx < 0) continue;
    const auto* v = merges.find(sym[upos], sym[static_cast<size_t>(nx)]);
    if (v == nullptr || v->id != new_id || v->rank != uint32_t(key >> 32)) continue;  // stale
    sym[upos] = new_id;
    alive[static_cast<size_t>(nx)] = 0;
    next[upos] = next[static_cast<size_t>(nx)];
    if (next[upos] >= 0) prev[static_cast<size_t>(next[upos])] = pos;
    if (prev[upos] >= 0) push(prev[upos]);
    push(pos);
  }
  size_t w = 0;
  for (int i = 0; i >= 0 && i < n; i = next[static_cast<size_t>(i)]) sym[w++] = sym[static_cast<size_t>(i)];
  sym.resize(w);
}

void Tokenizer::Impl::bpe_piece(std::string_view piece, Scratch& s, std::vector<int32_t>& ids) const {
  if (ignore_merges) {
    if (const auto it = bytes_vocab.find(std::string(piece)); it != bytes_vocab.end()) {
      ids.push_back(it->second);
      return;
    }
  }
  const bool cacheable = cache_enabled && piece.size() <= WordCache::kMaxCachedPiece;
  size_t h = 0;
  if (cacheable) {
    h = std::hash<std::string_view>{}(piece);
    if (cache.get(piece, h, ids)) return;
  }
  // One symbol per byte (HF: one per character of the byte-level string). A byte outside the vocabulary becomes
  // unk (consecutive ones fused when fuse_unk) or, with no unk token, is dropped.
  auto& sym = s.sym;
  sym.clear();
  bool last_unk = false;
  for (unsigned char b : piece) {
    const int32_t id = byte_id[b];
    if (id >= 0) {
      sym.push_back(id);
      last_unk = false;
    } else if (unk_id >= 0) {
      if (!(fuse_unk && last_unk)) sym.push_back(unk_id);
      last_unk = true;
    }
  }
  if (sym.size() <= 48) merge_small(s);
  else merge_heap(s);
  ids.insert(ids.end(), sym.begin(), sym.end());
  if (cacheable) cache.put(piece, h, sym);
}

Status Tokenizer::Impl::encode_into(std::string_view text, std::vector<int32_t>& ids) const {
  const size_t bad = unicode::first_invalid_utf8(text);
  VLPAR_CHECK(bad == text.size(), "tokenizer {}: encode: text is not valid UTF-8 at byte {} (of {})", origin, bad,
              text.size());
  Scratch s;
  s.match_data.reserve(stages.size());
  for (const auto& st : stages) s.match_data.emplace_back(pcre2_match_data_create_from_pattern(st.get(), nullptr));
  auto on_normalized = [&](std::string_view piece, int32_t id) -> Status {
    if (id >= 0) {
      ids.push_back(id);
      return Status::Ok();
    }
    return pre_tokenize(piece, 0, s, ids);
  };
  auto on_raw = [&](std::string_view piece, int32_t id) -> Status {
    if (id >= 0) {
      ids.push_back(id);
      return Status::Ok();
    }
    std::string_view norm = piece;
    std::string buf;
    if (nfc) {
      unicode::append_nfc(piece, buf);
      norm = buf;
    }
    return split_added(norm, normalized_matcher, on_normalized);
  };
  return split_added(text, raw_matcher, on_raw);
}

#undef TOK_CHECK
#undef TOK_FAIL

// ---- public API ------------------------------------------------------------------------------------------------
Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Result<Tokenizer> Tokenizer::from_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return VLPAR_STATUS(StatusCode::kIoError, "tokenizer {}: cannot open the file", path);
  std::stringstream ss;
  ss << f.rdbuf();
  if (f.bad()) return VLPAR_STATUS(StatusCode::kIoError, "tokenizer {}: read error", path);
  return from_json(ss.str(), path);
}

Result<Tokenizer> Tokenizer::from_json(std::string_view text, std::string_view origin) {
  json root = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded())
    return VLPAR_STATUS(StatusCode::kInvalidArgument, "tokenizer {}: not valid JSON", origin);
  auto impl = std::make_unique<Impl>();
  impl->origin = std::string(origin);
  VLPAR_RETURN_IF_ERROR(impl->load(root));
  return Tokenizer(std::move(impl));
}

Result<std::vector<int32_t>> Tokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  VLPAR_RETURN_IF_ERROR(impl_->encode_into(text, ids));
  return ids;
}

Status Tokenizer::encode_into(std::string_view text, std::vector<int32_t>& ids) const {
  return impl_->encode_into(text, ids);
}

Result<std::string> Tokenizer::decode_bytes(std::span<const int32_t> ids, bool skip_special) const {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    VLPAR_CHECK(id >= 0 && static_cast<size_t>(id) < impl_->id_flags.size() &&
                    (impl_->id_flags[static_cast<size_t>(id)] & 1),
                "tokenizer {}: decode: ids[{}] = {} names no token (vocab_size {})", impl_->origin, i, id,
                vocab_size());
    if (skip_special && (impl_->id_flags[static_cast<size_t>(id)] & 2)) continue;
    out += impl_->id_bytes[static_cast<size_t>(id)];
  }
  return out;
}

Result<std::string> Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  auto bytes = decode_bytes(ids, skip_special);
  if (!bytes.ok()) return bytes.status();
  if (unicode::first_invalid_utf8(bytes.value()) == bytes.value().size()) return bytes;
  std::string out;
  unicode::append_utf8_lossy(bytes.value(), out);
  return out;
}

Result<std::vector<std::string>> Tokenizer::pre_tokenize(std::string_view text) const {
  const size_t bad = unicode::first_invalid_utf8(text);
  VLPAR_CHECK(bad == text.size(), "tokenizer {}: pre_tokenize: text is not valid UTF-8 at byte {}", impl_->origin,
              bad);
  std::vector<std::string> pieces;
  std::vector<int32_t> unused;
  Impl::Scratch s;
  s.pieces = &pieces;
  for (const auto& st : impl_->stages)
    s.match_data.emplace_back(pcre2_match_data_create_from_pattern(st.get(), nullptr));
  VLPAR_RETURN_IF_ERROR(impl_->pre_tokenize(text, 0, s, unused));
  return pieces;
}

Result<std::string> Tokenizer::normalize(std::string_view text) const {
  const size_t bad = unicode::first_invalid_utf8(text);
  VLPAR_CHECK(bad == text.size(), "tokenizer {}: normalize: text is not valid UTF-8 at byte {}", impl_->origin,
              bad);
  if (!impl_->nfc) return std::string(text);
  std::string out;
  unicode::append_nfc(text, out);
  return out;
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  const std::string key(token);
  if (const auto it = impl_->added_vocab.find(key); it != impl_->added_vocab.end()) return it->second;
  if (const auto it = impl_->model_vocab.find(key); it != impl_->model_vocab.end()) return it->second;
  return std::nullopt;
}

std::optional<std::string> Tokenizer::id_to_token(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= impl_->id_flags.size() || !(impl_->id_flags[static_cast<size_t>(id)] & 1))
    return std::nullopt;
  return impl_->id_token[static_cast<size_t>(id)];
}

int32_t Tokenizer::vocab_size() const { return static_cast<int32_t>(impl_->id_flags.size()); }

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < impl_->id_flags.size() && (impl_->id_flags[static_cast<size_t>(id)] & 2);
}

const std::vector<AddedToken>& Tokenizer::added_tokens() const { return impl_->added; }
const std::string& Tokenizer::split_pattern() const { return impl_->split_pattern; }
bool Tokenizer::regex_jit() const { return impl_->jit; }
void Tokenizer::set_cache_enabled(bool enabled) { impl_->cache_enabled = enabled; }

}  // namespace vlpar::data
