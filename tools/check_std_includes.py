#!/usr/bin/env python3
"""Every public header includes the standard headers of the std names it uses (CI stage `generated`).

The header check (tests/CMakeLists.txt: one translation unit per public header) compiles each header on its own
with the standard library precompiled, so it proves the vlpar and third-party includes of a header and not the
standard ones (libstdc++'s own headers include each other far more than the standard requires, so a compile only
ever proved part of them). This check does that part without a compiler: for each header under include/vlpar, the
names it uses from the table below must have their standard header included by the header itself or by a vlpar
header it includes (transitively), which is what a standard library without libstdc++'s extra includes needs.

Usage: tools/check_std_includes.py [--root DIR]   (exit 1 and one line per missing include)
"""
import argparse
import pathlib
import re
import sys

# std name (regex, matched on code without comments and strings) -> the standard header that declares it
USES = [
    (r"\bstd::vector\b", "vector"),
    (r"\bstd::(basic_)?string\b(?!_view)", "string"),
    (r"\bstd::to_string\b", "string"),
    (r"\bstd::string_view\b", "string_view"),
    (r"\bstd::span\b", "span"),
    (r"\bstd::(optional|nullopt)\b", "optional"),
    (r"\bstd::(unique_ptr|shared_ptr|weak_ptr|make_unique|make_shared)\b", "memory"),
    (r"\bstd::array\b", "array"),
    (r"\bstd::function\b", "functional"),
    (r"\bstd::map\b", "map"),
    (r"\bstd::unordered_map\b", "unordered_map"),
    (r"\bstd::set\b", "set"),
    (r"\bstd::deque\b", "deque"),
    (r"\bstd::variant\b", "variant"),
    (r"\bstd::(mutex|lock_guard|unique_lock|scoped_lock)\b", "mutex"),
    (r"\bstd::condition_variable\b", "condition_variable"),
    (r"\bstd::atomic\b", "atomic"),
    (r"\bstd::thread\b", "thread"),
    (r"\bstd::chrono::", "chrono"),
    (r"\bstd::(pair|move|forward|exchange)\b", "utility"),
    (r"\bstd::initializer_list\b", "initializer_list"),
    (r"\bstd::numeric_limits\b", "limits"),
    (r"\bstd::(u?int(8|16|32|64)_t)\b|(?<![\w:])u?int(8|16|32|64)_t\b", "cstdint"),
    (r"\bstd::(size_t|ptrdiff_t|byte|nullptr_t)\b", "cstddef"),
    (r"\bstd::mem(cpy|set|move|cmp)\b", "cstring"),
    (r"\bstd::(sqrt|exp|log|fabs|isfinite|isnan|isinf|pow|tanh|erf|floor|ceil|fma)\b", "cmath"),
    (r"\bstd::(sort|stable_sort|min_element|max_element|fill|copy|find|lower_bound|upper_bound|clamp)\b",
     "algorithm"),
    (r"\bstd::(accumulate|iota)\b", "numeric"),
    (r"\bstd::(min|max|minmax)\b", "algorithm"),
    (r"\bstd::numbers::", "numbers"),
    (r"\bstd::(exception_ptr|current_exception|rethrow_exception)\b", "exception"),
    (r"\bstd::(hash|less|greater|equal_to|plus)\b", "functional"),
    (r"\bstd::(tuple|make_tuple|tie)\b", "tuple"),
    (r"\bstd::(is_same_v|enable_if_t|is_integral_v|is_floating_point_v|remove_cvref_t|decay_t|is_trivially_"
     r"copyable_v|underlying_type_t|conditional_t|integral_constant|is_signed_v)\b", "type_traits"),
    (r"\bstd::(same_as|integral|floating_point|convertible_to|invocable)\b", "concepts"),
]
# A standard header that the standard itself makes include another ([string.syn] etc.): counts as both.
IMPLIES = {
    "string": {"initializer_list", "compare"},
    "vector": {"initializer_list", "compare"},
    "map": {"initializer_list", "compare"},
    "set": {"initializer_list", "compare"},
    "unordered_map": {"initializer_list", "compare"},
    "deque": {"initializer_list", "compare"},
    "array": {"initializer_list", "compare"},
    "utility": {"initializer_list", "compare"},
    "optional": {"compare"},
    "variant": {"compare"},
    "memory": {"compare"},
    "chrono": {"compare"},
    "thread": {"compare"},
    "string_view": {"compare"},
    "span": {"initializer_list"},
}

INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.M)


def strip(code):
    """Code without comments, string and character literals (names in them are not uses)."""
    code = re.sub(r"/\*.*?\*/", " ", code, flags=re.S)
    code = re.sub(r"//[^\n]*", " ", code)
    code = re.sub(r'R"(\w*)\(.*?\)\1"', '""', code, flags=re.S)
    code = re.sub(r'"(\\.|[^"\\\n])*"', '""', code)
    return re.sub(r"'(\\.|[^'\\\n])+'", "' '", code)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", default=str(pathlib.Path(__file__).resolve().parent.parent))
    args = ap.parse_args()
    inc = pathlib.Path(args.root) / "include"
    headers = {str(p.relative_to(inc)): p.read_text() for p in sorted(inc.glob("vlpar/**/*.hpp"))}
    direct_std, direct_vlpar = {}, {}
    for name, text in headers.items():
        std, own = set(), set()
        for kind, path in INCLUDE.findall(text):
            if kind == "<" and "/" not in path and "." not in path:
                std.add(path)
            elif path.startswith("vlpar/") and path in headers:
                own.add(path)
        direct_std[name], direct_vlpar[name] = std, own

    def provided(name, seen):
        if name in seen:
            return set()
        seen.add(name)
        out = set(direct_std[name])
        for h in direct_vlpar[name]:
            out |= provided(h, seen)
        return out

    problems = []
    for name, text in headers.items():
        have = provided(name, set())
        for h in list(have):
            have |= IMPLIES.get(h, set())
        code = strip(text)
        for pattern, needed in USES:
            if needed in have:
                continue
            m = re.search(pattern, code)
            if m:
                line = code.count("\n", 0, m.start()) + 1
                problems.append(f"include/{name}:{line}: uses {m.group(0)} without #include <{needed}>"
                                " (directly or through a vlpar header it includes)")
    for p in problems:
        print(p)
    if problems:
        print(f"check_std_includes: {len(problems)} missing standard include(s) in include/vlpar", file=sys.stderr)
        return 1
    print(f"check_std_includes: {len(headers)} public headers include the standard headers of the std names they use")
    return 0


if __name__ == "__main__":
    sys.exit(main())
