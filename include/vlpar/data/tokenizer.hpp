#pragma once
// Byte-level BPE tokenizer loaded from a HF tokenizer.json (Qwen2/2.5/3/3-VL family; spec
// formats-and-conventions.md §2), giving the ids of HF `tokenizers` 0.22.2 `encode(text, add_special_tokens=False)`.
//
// Pipeline of encode(text):
//   1. added tokens with normalized=false are cut out of the raw text first: leftmost-longest matching (HF's
//      Aho-Corasick), honouring single_word (discard a match inside a word, Unicode \w), lstrip/rstrip (swallow
//      the White_Space beside it); each match is one id and is never split;
//   2. every remaining segment is normalised (NFC, tables from tools/gen_unicode_nfc.py restricted to HF's
//      Unicode 9.0.0 normaliser), then added tokens with normalized=true are cut out of it the same way;
//   3. pre-tokenization: the Split regex READ FROM THE FILE, run with PCRE2 (UTF + UCP, JIT when the build has
//      it), behaviour Isolated (every match and every gap is a piece); Oniguruma's \s / \S / \w / \W are
//      rewritten to their PCRE2 equivalents (\p{White_Space}, ...) since PCRE2's \s also takes U+180E. The
//      regex sees one segment at a time, so (?!\S) at a segment's end sees the end of the text, as in HF;
//      a bare ByteLevel(use_regex=true) pre-tokenizer uses the GPT-2 pattern;
//   4. each piece's UTF-8 bytes become BPE symbols (one per byte: the GPT-2 bytes_to_unicode alphabet of the
//      vocabulary), merged by lowest merge rank, leftmost on ties (HF word.rs); results are cached per piece.
// decode(ids) maps every id to its token's bytes (ByteLevel decoder: a token holding a character outside the
// byte alphabet is emitted as its raw UTF-8), optionally skipping special added tokens, and replaces invalid
// UTF-8 by U+FFFD as HF does; decode_bytes returns the bytes unreplaced.
//
// Supported tokenizer.json (anything else is an error naming the file and the field): model BPE with merges as
// "a b" strings or [a, b] pairs, no dropout, empty continuing_subword_prefix / end_of_word_suffix, no
// byte_fallback, optional unk_token (+ fuse_unk), ignore_merges; normalizer null, NFC or a Sequence of NFC;
// pre_tokenizer Sequence[Split(Regex, Isolated, invert=false), ByteLevel(use_regex=false)] or a lone ByteLevel;
// decoder ByteLevel or null. The post_processor is ignored (encode never adds special tokens; Qwen adds none).
//
// Thread safety: a const Tokenizer may be used by any number of threads at once (the word cache is sharded
// and locked). Test: tests/unit/test_tokenizer.cpp; bench: bench/bench_tokenizer.cpp +
// tools/bench/tokenizer_vs_hf.py; fixtures: tools/golden/make_tokenizer_fixture.py.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "vlpar/core/status.hpp"

namespace vlpar::data {

/// One entry of tokenizer.json's "added_tokens" (HF AddedToken).
struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool single_word = false;  // match only where the token is not inside a word
  bool lstrip = false;       // the match swallows the whitespace on its left
  bool rstrip = false;       // the match swallows the whitespace on its right
  bool normalized = false;   // matched against the normalised text instead of the raw text
  bool special = false;      // dropped by decode(ids, skip_special = true)
};

class Tokenizer {
 public:
  /// @brief Loads a HF tokenizer.json. Errors name the file and the defect (missing model, unknown model or
  /// pre-tokenizer type, a bad merges entry, a regex PCRE2 rejects, ...).
  static Result<Tokenizer> from_file(const std::string& path);
  /// @brief The same from the file's text; `origin` names it in error messages.
  static Result<Tokenizer> from_json(std::string_view json, std::string_view origin = "<memory>");

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  /// @brief Token ids of text (HF encode(text, add_special_tokens=False).ids). Errors: text is not valid UTF-8
  /// (the byte offset is named), or PCRE2 fails on a segment.
  Result<std::vector<int32_t>> encode(std::string_view text) const;
  /// @brief Appends the ids of text to ids (no allocation per call once ids has capacity).
  Status encode_into(std::string_view text, std::vector<int32_t>& ids) const;

  /// @brief Text of ids, as HF decode(ids, skip_special_tokens): invalid UTF-8 becomes U+FFFD. Error: an id
  /// that names no token (HF silently drops those).
  Result<std::string> decode(std::span<const int32_t> ids, bool skip_special = false) const;
  /// @brief The exact bytes of ids (no U+FFFD replacement): decode_bytes(encode(s)) == NFC(s) byte for byte.
  Result<std::string> decode_bytes(std::span<const int32_t> ids, bool skip_special = false) const;

  /// @brief The normaliser alone (NFC or identity), as HF's tokenizer.normalizer.normalize_str.
  Result<std::string> normalize(std::string_view text) const;

  /// @brief Id of a vocabulary or added token, by its tokenizer.json spelling (byte-level alphabet for
  /// vocabulary tokens, e.g. "Ġthe"; plain text for added tokens, e.g. "<|im_start|>").
  std::optional<int32_t> token_to_id(std::string_view token) const;
  /// @brief The tokenizer.json spelling of an id, or nullopt.
  std::optional<std::string> id_to_token(int32_t id) const;
  /// @brief 1 + the largest id of the vocabulary and the added tokens (the embedding rows it needs).
  int32_t vocab_size() const;
  /// @brief Whether id is a special added token.
  bool is_special(int32_t id) const;
  /// @brief The added tokens in tokenizer.json order.
  const std::vector<AddedToken>& added_tokens() const;
  /// @brief The split regex as written in the file (empty for a lone ByteLevel pre-tokenizer).
  const std::string& split_pattern() const;
  /// @brief Whether PCRE2 JIT-compiled the split regex.
  bool regex_jit() const;

  /// Word-cache switch for benchmarks (on by default). Not thread-safe against concurrent encodes.
  void set_cache_enabled(bool enabled);

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace vlpar::data
