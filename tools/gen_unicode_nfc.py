#!/usr/bin/env python3
"""Generates src/data/unicode_nfc_tables.inc: the Unicode data vlpar's NFC normaliser needs (tokenizer, issue 5).

What the tables hold (all from Python's own `unicodedata`, no downloads):
  * a two-stage per-code-point property table (u16): bits 0-7 canonical combining class, bit 8 "has a canonical
    decomposition" (Hangul syllables excluded: they are algorithmic), bit 9 "NFC_Quick_Check is not Yes"
    (the code point cannot occur in NFC text), bit 10 "combines backwards" (the second element of a primary
    composite, NFC_Quick_Check = Maybe). A code point with ccc 0 and bits 9, 10 clear is an NFC
    boundary: nothing before it can interact with it, so text is normalised chunk by
    chunk between such boundaries;
  * the full (recursive) canonical decomposition of every decomposable code point, sorted by code point;
  * every primary composite as a pair (first, second) -> composite, sorted by (first << 21 | second).

Unicode version. HF `tokenizers` (0.22.2, the parity target) normalises with the Rust crate
unicode-normalization-alignments 0.1.12, whose tables are Unicode 9.0.0 (its UNICODE_VERSION constant), while
Python 3.11's unicodedata is 14.0.0. Code points assigned after 9.0.0 are therefore, for `tokenizers`, starters
without a decomposition (ccc 0). To give the same ids as HF, this script asks the installed `tokenizers` which
code points with a canonical decomposition or a non-zero ccc in Python's data it does not know, and strips
their properties (ccc 0, no decomposition, no composition). With --unicode-data-only the script skips that
probe and emits Python's Unicode data as is.

Regex property deltas (second output, src/data/unicode_regex_tables.inc). HF runs the split regex with
Oniguruma, whose Unicode tables are newer (16.0 in tokenizers 0.22.2) than PCRE2 10.42's (14.0, the same as
Python 3.11's): \p{L}, \p{N} and \p{M} take code points PCRE2 does not know yet (CJK extensions H and I, Kawi,
Kaktovik numerals, ...). The script asks the installed `tokenizers` which code points its \p{L}, \p{N}, \p{M} and
\s match, checks that every code point Python's data puts in them is among those (none is dropped) and that \s is
exactly White_Space, and writes the extra code points as PCRE2 class items, which the tokenizer adds to those
properties when it translates the regex. With --unicode-data-only the deltas are empty.

Run: .venv/bin/python tools/gen_unicode_nfc.py   (rewrites both .inc files in src/data/; committed)
"""
import argparse
import os
import sys
import unicodedata as ud

MAX_CP = 0x110000
S_BASE, S_COUNT = 0xAC00, 11172


def is_surrogate(cp):
    return 0xD800 <= cp <= 0xDFFF


def canonical_mapping(cp):
    """The direct (one-level) canonical decomposition mapping of cp, or None."""
    d = ud.decomposition(chr(cp))
    if not d or d.startswith("<"):
        return None
    return [int(x, 16) for x in d.split()]


def probe_unknown_to_tokenizers():
    """Code points whose normalisation properties HF tokenizers' NFC (Unicode 9.0.0 tables) lacks."""
    from tokenizers import normalizers

    nfd = normalizers.NFD()
    unknown = set()
    for cp in range(MAX_CP):
        if is_surrogate(cp) or (S_BASE <= cp < S_BASE + S_COUNT):
            continue
        c = chr(cp)
        if canonical_mapping(cp) is not None and nfd.normalize_str(c) != ud.normalize("NFD", c):
            unknown.add(cp)
        k = ud.combining(c)
        if k:
            # Probe the class against a mark of known class: U+0334 (ccc 1) or U+0301 (ccc 230). A class the
            # crate knows reorders the pair exactly as Python's data does.
            s = "a" + c + "\u0334" if k > 1 else "a\u0301" + c
            if nfd.normalize_str(s) != ud.normalize("NFD", s):
                unknown.add(cp)
    return unknown


WHITE_SPACE = {*range(0x09, 0x0E), 0x20, 0x85, 0xA0, 0x1680, *range(0x2000, 0x200B), 0x2028, 0x2029, 0x202F,
               0x205F, 0x3000}


def probe_regex_deltas():
    """{property: sorted code points HF tokenizers' regex puts in it beyond Python's Unicode data}."""
    from tokenizers import Regex, pre_tokenizers

    cps = [cp for cp in range(MAX_CP) if not is_surrogate(cp)]
    text = "".join(chr(c) for c in cps)
    python_sets = {
        "L": lambda c: ud.category(c)[0] == "L",
        "N": lambda c: ud.category(c)[0] == "N",
        "M": lambda c: ud.category(c)[0] == "M",
        "s": lambda c: ord(c) in WHITE_SPACE,
    }
    deltas = {}
    for prop, in_python in python_sets.items():
        pattern = r"\s" if prop == "s" else r"\p{%s}" % prop
        # Behaviour "removed" returns the gaps between matches: every other code point matched.
        gaps = pre_tokenizers.Split(Regex(pattern), behavior="removed").pre_tokenize_str(text)
        matched = [True] * len(cps)
        for _, (a, b) in gaps:
            for i in range(a, b):
                matched[i] = False
        hf = {cps[i] for i in range(len(cps)) if matched[i]}
        py = {cp for cp in cps if in_python(chr(cp))}
        if py - hf:
            sys.exit(f"tokenizers' {pattern} lacks {len(py - hf)} code points of Python's data, e.g. "
                     f"U+{min(py - hf):04X}: a delta cannot express that")
        if prop == "s" and hf != py:
            sys.exit(f"tokenizers' \\s is not White_Space: extra {sorted(hf - py)[:8]}")
        deltas[prop] = sorted(hf - py)
    return deltas


def ranges(cps):
    out = []
    for cp in cps:
        if out and out[-1][1] == cp - 1:
            out[-1][1] = cp
        else:
            out.append([cp, cp])
    return out


def write_regex_tables(path, deltas, note):
    lines = ["// Generated by tools/gen_unicode_nfc.py; do not edit. Code points HF tokenizers' regex (Oniguruma) puts",
             f"// in \\p{{L}}, \\p{{N}}, \\p{{M}} beyond Python unicodedata {ud.unidata_version} / PCRE2's tables. {note}"]
    for prop in ("L", "N", "M"):
        rs = ranges(deltas.get(prop, []))
        items = [f"\\x{{{a:X}}}" if a == b else f"\\x{{{a:X}}}-\\x{{{b:X}}}" for a, b in rs]
        lines.append(f"// {prop}: {len(deltas.get(prop, []))} code points in {len(rs)} ranges")
        lines.append(f"constexpr std::string_view kOnigurumaExtra{prop} =")
        parts = [items[i:i + 6] for i in range(0, len(items), 6)] or [[]]
        for k, part in enumerate(parts):
            lines.append('    R"(' + "".join(part) + ')"' + (";" if k == len(parts) - 1 else ""))
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "src", "data",
                                                  "unicode_nfc_tables.inc"))
    ap.add_argument("--unicode-data-only", action="store_true",
                    help="do not restrict to the code points HF tokenizers' NFC knows")
    args = ap.parse_args()

    unknown = set() if args.unicode_data_only else probe_unknown_to_tokenizers()
    deltas = {} if args.unicode_data_only else probe_regex_deltas()
    write_regex_tables(os.path.join(os.path.dirname(args.out), "unicode_regex_tables.inc"), deltas,
                       "(empty: --unicode-data-only)" if args.unicode_data_only else "")

    def ccc(cp):
        return 0 if cp in unknown else ud.combining(chr(cp))

    def mapping(cp):
        return None if cp in unknown else canonical_mapping(cp)

    def full_decomposition(cp):
        m = mapping(cp)
        if m is None:
            return [cp]
        out = []
        for x in m:
            out.extend(full_decomposition(x))
        return out

    decomp = {}   # cp -> full canonical decomposition (non-Hangul)
    compose = {}  # (a, b) -> composite
    for cp in range(MAX_CP):
        if is_surrogate(cp) or (S_BASE <= cp < S_BASE + S_COUNT):
            continue
        m = mapping(cp)
        if m is None:
            continue
        decomp[cp] = full_decomposition(cp)
        # Primary composite: a two-element mapping not excluded from composition (Full_Composition_Exclusion
        # covers singletons, non-starter decompositions and CompositionExclusions.txt; NFC(X) == X tests it).
        if len(m) == 2 and ccc(cp) == 0 and ccc(m[0]) == 0 and ud.normalize("NFC", chr(cp)) == chr(cp):
            compose[(m[0], m[1])] = cp
    combines_back = {b for (_, b) in compose}
    combines_back.update(range(0x1161, 0x1176))  # Hangul V jamo (LV composition)
    combines_back.update(range(0x11A8, 0x11C3))  # Hangul T jamo (LVT composition)

    props = [0] * MAX_CP
    for cp in range(MAX_CP):
        if is_surrogate(cp):
            continue
        p = ccc(cp)
        if cp in decomp:
            p |= 0x100
            if ud.normalize("NFC", chr(cp)) != chr(cp):
                p |= 0x200  # cannot occur in NFC text (singleton, excluded or non-starter decomposition)
        if cp in combines_back:
            p |= 0x400
        props[cp] = p

    # Two-stage table with 128-entry blocks.
    block = 128
    blocks, index = [], []
    seen = {}
    for start in range(0, MAX_CP, block):
        b = tuple(props[start:start + block])
        if b not in seen:
            seen[b] = len(blocks)
            blocks.append(b)
        index.append(seen[b])

    pool, entries = [], []
    for cp in sorted(decomp):
        entries.append((cp, len(pool), len(decomp[cp])))
        pool.extend(decomp[cp])
    pairs = sorted(((a << 21) | b, c) for (a, b), c in compose.items())

    lines = []
    w = lines.append
    w("// Generated by tools/gen_unicode_nfc.py; do not edit. Unicode data: Python unicodedata "
      f"{ud.unidata_version}" + ("" if args.unicode_data_only else
                                 ", restricted to what HF tokenizers' NFC knows (Unicode 9.0.0)") + ".")
    w(f"// {len(unknown)} code points stripped as unknown to tokenizers: " +
      (" ".join(f"{cp:04X}" for cp in sorted(unknown)) if unknown else "none"))
    w(f"constexpr int kNfcBlockShift = 7;  // {block}-entry blocks")
    w(f"constexpr uint16_t kNfcBlockIndex[{len(index)}] = {{")
    for i in range(0, len(index), 24):
        w("    " + ", ".join(str(x) for x in index[i:i + 24]) + ",")
    w("};")
    w(f"constexpr uint16_t kNfcBlocks[{len(blocks) * block}] = {{")
    for b in blocks:
        for i in range(0, block, 16):
            w("    " + ", ".join(f"0x{x:x}" for x in b[i:i + 16]) + ",")
    w("};")
    w(f"constexpr uint32_t kNfcDecompPool[{len(pool)}] = {{")
    for i in range(0, len(pool), 12):
        w("    " + ", ".join(f"0x{x:x}" for x in pool[i:i + 12]) + ",")
    w("};")
    w("struct NfcDecompEntry { uint32_t cp; uint16_t offset; uint16_t length; };")
    w(f"constexpr NfcDecompEntry kNfcDecomp[{len(entries)}] = {{")
    for i in range(0, len(entries), 6):
        w("    " + " ".join(f"{{0x{cp:x}, {o}, {n}}}," for cp, o, n in entries[i:i + 6]))
    w("};")
    w("struct NfcComposePair { uint64_t key; uint32_t composite; };  // key = first << 21 | second")
    w(f"constexpr NfcComposePair kNfcCompose[{len(pairs)}] = {{")
    for i in range(0, len(pairs), 5):
        w("    " + " ".join(f"{{0x{k:x}ull, 0x{c:x}}}," for k, c in pairs[i:i + 5]))
    w("};")
    with open(args.out, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    print(f"wrote {args.out}: {len(blocks)} blocks, {len(entries)} decompositions ({len(pool)} code points), "
          f"{len(pairs)} compositions, {len(unknown)} code points stripped", file=sys.stderr)


if __name__ == "__main__":
    main()
