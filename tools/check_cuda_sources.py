#!/usr/bin/env python3
"""Checks the rules that let one CUDA source compile for nvcc and for the emulated build (docs/cuda-emulation.md):
every .cu/.cuh under src/kernels/cuda/ and tests/emu/ includes "cuda_compat.cuh" before anything else; shared
memory is declared with VLPAR_SHARED / VLPAR_DYN_SMEM (no raw __shared__); kernels are launched with
launch<Kernel>() (no <<<...>>> outside launch.cuh); inline PTX (asm) only inside an #if defined(__CUDA_ARCH__)
branch. Exit 1 with one line per violation. Run by scripts/test.sh (stage generated).
Usage: tools/check_cuda_sources.py"""
import pathlib, re, sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
DIRS = [ROOT / "src/kernels/cuda", ROOT / "tests/emu"]
EXEMPT = {"cuda_compat.cuh"}


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def check(path):
    bad = []
    rel = path.relative_to(ROOT)
    code = strip_comments(path.read_text())
    includes = re.findall(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', code, re.M)
    if path.name not in EXEMPT and (not includes or includes[0].split("/")[-1] != "cuda_compat.cuh"):
        bad.append(f"{rel}: the first #include must be \"cuda_compat.cuh\" (found {includes[:1] or 'none'})")
    if path.name not in EXEMPT and re.search(r"\b__shared__\b", code):
        bad.append(f"{rel}: raw __shared__; declare shared memory with VLPAR_SHARED / VLPAR_DYN_SMEM")
    if path.name != "launch.cuh" and "<<<" in code:
        bad.append(f"{rel}: <<<...>>> launch; use launch<Kernel>(LaunchConfig{{...}}, args...) (launch.cuh)")
    depth, arch_depth = 0, []
    for line in code.splitlines():  # asm only under #if defined(__CUDA_ARCH__)
        s = line.strip()
        if re.match(r"#\s*if", s):
            depth += 1
            if "__CUDA_ARCH__" in s and "!" not in s:
                arch_depth.append(depth)
        elif re.match(r"#\s*(elif|else)", s):
            if arch_depth and arch_depth[-1] == depth:
                arch_depth.pop()
        elif re.match(r"#\s*endif", s):
            if arch_depth and arch_depth[-1] == depth:
                arch_depth.pop()
            depth -= 1
        elif re.search(r"\basm\b|\b__asm__\b", s) and not arch_depth:
            bad.append(f"{rel}: inline asm outside an #if defined(__CUDA_ARCH__) branch: {s[:60]}")
    return bad


def main():
    files = [p for d in DIRS if d.is_dir() for p in sorted(d.rglob("*")) if p.suffix in (".cu", ".cuh")]
    bad = [b for p in files for b in check(p)]
    for b in bad:
        print(b)
    print(f"check_cuda_sources: {len(bad)} violation(s) in {len(files)} CUDA sources")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
