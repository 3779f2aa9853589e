// NFC normalisation and UTF-8 helpers for the tokenizer. See src/data/unicode_nfc.hpp.
#include "unicode_nfc.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

namespace vlpar::data::unicode {

namespace {

#include "unicode_nfc_tables.inc"

// Property bits of kNfcBlocks (see tools/gen_unicode_nfc.py).
constexpr uint16_t kCccMask = 0xFF;
constexpr uint16_t kHasDecomp = 0x100;
constexpr uint16_t kQcNotYes = 0x200;
constexpr uint16_t kCombinesBack = 0x400;

// Hangul syllables are composed and decomposed algorithmically (Unicode §3.12).
constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount,
                   kSCount = kLCount * kNCount;

inline uint16_t props(char32_t cp) {
  if (cp >= 0x110000) return 0;
  const uint16_t block = kNfcBlockIndex[cp >> kNfcBlockShift];
  return kNfcBlocks[(size_t(block) << kNfcBlockShift) | (cp & ((1u << kNfcBlockShift) - 1))];
}

// A boundary: nothing before it can reorder or compose with it or anything after it.
inline bool is_boundary(uint16_t p) { return (p & (kCccMask | kQcNotYes | kCombinesBack)) == 0; }

void decompose_into(char32_t cp, std::vector<char32_t>& buf) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const char32_t s = cp - kSBase;
    buf.push_back(kLBase + s / kNCount);
    buf.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) buf.push_back(kTBase + s % kTCount);
    return;
  }
  if ((props(cp) & kHasDecomp) == 0) {
    buf.push_back(cp);
    return;
  }
  const auto* end = kNfcDecomp + std::size(kNfcDecomp);
  const auto* e = std::lower_bound(kNfcDecomp, end, cp,
                                   [](const NfcDecompEntry& a, char32_t c) { return a.cp < c; });
  // The property bit and the table come from the same generator run, so the entry exists.
  buf.insert(buf.end(), kNfcDecompPool + e->offset, kNfcDecompPool + e->offset + e->length);
}

// The primary composite of (a, b), or 0.
char32_t compose_pair(char32_t a, char32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount)
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase && b < kTBase + kTCount)
    return a + (b - kTBase);
  const uint64_t key = (uint64_t(a) << 21) | b;
  const auto* end = kNfcCompose + std::size(kNfcCompose);
  const auto* e =
      std::lower_bound(kNfcCompose, end, key, [](const NfcComposePair& p, uint64_t k) { return p.key < k; });
  return (e != end && e->key == key) ? e->composite : 0;
}

// Full NFC of one chunk (decompose, reorder, compose), appended to out.
void normalize_chunk(std::string_view chunk, std::string& out, std::vector<char32_t>& buf) {
  buf.clear();
  for (size_t i = 0; i < chunk.size();) decompose_into(decode_utf8(chunk, i), buf);
  // Canonical ordering: stable sort by ccc inside every run of non-starters (O(n log n) even for a run of
  // 100k alternating marks).
  for (size_t i = 0; i < buf.size();) {
    if ((props(buf[i]) & kCccMask) == 0) {
      ++i;
      continue;
    }
    size_t j = i + 1;
    while (j < buf.size() && (props(buf[j]) & kCccMask) != 0) ++j;
    if (j - i > 1)
      std::stable_sort(buf.begin() + static_cast<long>(i), buf.begin() + static_cast<long>(j),
                       [](char32_t a, char32_t b) { return (props(a) & kCccMask) < (props(b) & kCccMask); });
    i = j;
  }
  // Canonical composition: c composes with the last starter unless a code point between them is a starter or
  // has a ccc >= ccc(c) (c is "blocked"); after reordering, only the last kept code point needs checking.
  size_t out_n = 0;
  long starter = -1;
  for (size_t i = 0; i < buf.size(); ++i) {
    const char32_t c = buf[i];
    const int cc = props(c) & kCccMask;
    if (starter >= 0) {
      const bool adjacent = static_cast<long>(out_n) - 1 == starter;
      const int last_cc = adjacent ? -1 : (props(buf[out_n - 1]) & kCccMask);
      const bool blocked = !adjacent && (last_cc == 0 || last_cc >= cc);
      if (!blocked) {
        if (const char32_t comp = compose_pair(buf[static_cast<size_t>(starter)], c); comp != 0) {
          buf[static_cast<size_t>(starter)] = comp;
          continue;
        }
      }
    }
    if (cc == 0) starter = static_cast<long>(out_n);
    buf[out_n++] = c;
  }
  for (size_t i = 0; i < out_n; ++i) append_utf8(buf[i], out);
}

}  // namespace

int combining_class(char32_t cp) { return props(cp) & kCccMask; }

void append_utf8(char32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

void append_nfc(std::string_view text, std::string& out) {
  // Fast path: ASCII is always NFC (and a boundary), 8 bytes at a time.
  size_t i = 0;
  while (i + 8 <= text.size()) {
    uint64_t w;
    std::memcpy(&w, text.data() + i, 8);
    if (w & 0x8080808080808080ull) break;
    i += 8;
  }
  while (i < text.size() && static_cast<unsigned char>(text[i]) < 0x80) ++i;
  if (i == text.size()) {
    out.append(text);
    return;
  }
  size_t copied = 0;        // text[0, copied) is already in out
  size_t chunk_start = 0;   // start of the chunk holding position i: the last boundary before i (or 0)
  // Rewind i to the start of the ASCII run's last character so the loop sees a boundary there.
  if (i > 0) chunk_start = i - 1;
  std::vector<char32_t> buf;
  while (i < text.size()) {
    const size_t at = i;
    const char32_t cp = decode_utf8(text, i);
    if (cp < 0x80 || is_boundary(props(cp))) {
      chunk_start = at;
      continue;
    }
    // A code point that may interact with its neighbours: normalise from the last boundary to the next one.
    size_t end = i;
    while (end < text.size()) {
      size_t next = end;
      const char32_t c2 = decode_utf8(text, next);
      if (c2 < 0x80 || is_boundary(props(c2))) break;
      end = next;
    }
    out.append(text.substr(copied, chunk_start - copied));
    normalize_chunk(text.substr(chunk_start, end - chunk_start), out, buf);
    copied = chunk_start = i = end;
  }
  out.append(text.substr(copied));
}

namespace {

// Length of the valid UTF-8 sequence at text[i], or 0 with *bad_len = the length of its maximal invalid
// subpart (the bytes Rust's from_utf8_lossy replaces by one U+FFFD), per Unicode Table 3-7.
size_t utf8_sequence(std::string_view text, size_t i, size_t* bad_len) {
  const auto b0 = static_cast<unsigned char>(text[i]);
  if (b0 < 0x80) return 1;
  size_t need;
  unsigned char lo = 0x80, hi = 0xBF;  // range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    *bad_len = 1;
    return 0;
  }
  for (size_t k = 1; k < need; ++k) {
    if (i + k >= text.size()) {
      *bad_len = k;
      return 0;
    }
    const auto b = static_cast<unsigned char>(text[i + k]);
    const bool ok = k == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xBF);
    if (!ok) {
      *bad_len = k;
      return 0;
    }
  }
  return need;
}

}  // namespace

size_t first_invalid_utf8(std::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    if (i + 8 <= text.size()) {
      uint64_t w;
      std::memcpy(&w, text.data() + i, 8);
      if ((w & 0x8080808080808080ull) == 0) {
        i += 8;
        continue;
      }
    }
    size_t bad = 0;
    const size_t n = utf8_sequence(text, i, &bad);
    if (n == 0) return i;
    i += n;
  }
  return text.size();
}

void append_utf8_lossy(std::string_view text, std::string& out) {
  size_t i = 0, copied = 0;
  while (i < text.size()) {
    size_t bad = 0;
    const size_t n = utf8_sequence(text, i, &bad);
    if (n != 0) {
      i += n;
      continue;
    }
    out.append(text.substr(copied, i - copied));
    out.append("\xEF\xBF\xBD");
    i += bad;
    copied = i;
  }
  out.append(text.substr(copied));
}

}  // namespace vlpar::data::unicode
