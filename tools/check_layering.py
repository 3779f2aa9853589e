#!/usr/bin/env python3
"""Checks the component layering of vlpar (CMakeLists.txt, docs/architecture.md) on the #includes: a header or
source of component X may include vlpar/<Y>/... only when Y is X or below X. Also keeps the heavy third-party
headers where they belong: MPI only in comm (and above), image/regex/YAML libraries only in src/data and src/obs.
Exit 1 with one line per violation. Run by scripts/test.sh (stage generated).
Usage: tools/check_layering.py"""
import pathlib, re, sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
BELOW = {  # component -> components it may include (besides itself), transitively closed
    "core": set(),
    "kernels": {"core"},
    "comm": {"core"},
    "nn": {"core", "kernels", "comm"},
    "parallel": {"core", "kernels", "comm", "nn"},
    "io": {"core", "comm"},  # files and checkpoints need no op or block (the sanitizer tree builds only these)
    "obs": {"core", "comm", "io"},
    "data": {"core", "comm", "io"},
    "reference": {"core", "kernels", "nn"},  # fp64 twins for tests (headers only)
}
PRIVATE_ONLY = {  # third-party header -> components whose *sources* may include it (never a public header)
    "jpeglib.h": {"data"}, "png.h": {"data", "obs"}, "pcre2.h": {"data"}, "yaml-cpp/": {"data"},
    "nlohmann/json": {"io", "obs", "data", "comm", "nn", "parallel", "core", "kernels"},
}
MPI_OK = {"comm", "nn", "parallel", "io", "obs", "data"}
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.M)


def files(component):
    for base in (ROOT / "include/vlpar" / component, ROOT / "src" / component):
        if base.is_dir():
            for p in sorted(base.rglob("*")):
                if p.suffix in (".hpp", ".cpp", ".cuh", ".cu", ".h", ".inc"):
                    yield p


def main():
    bad = []
    for comp, below in BELOW.items():
        for p in files(comp):
            public = "include" in p.relative_to(ROOT).parts[:1]
            for inc in INCLUDE.findall(p.read_text(errors="replace")):
                m = re.match(r"vlpar/([a-z_]+)/", inc)
                if m and m.group(1) != comp and m.group(1) not in below:
                    bad.append(f"{p.relative_to(ROOT)}: includes {inc} ({comp} may use {sorted(below) or 'nothing'})")
                for lib, allowed in PRIVATE_ONLY.items():
                    if inc.startswith(lib) and (public or comp not in allowed):
                        where = "a public header" if public else f"component {comp}"
                        bad.append(f"{p.relative_to(ROOT)}: includes <{inc}>, not allowed in {where}")
                if inc == "mpi.h" and comp not in MPI_OK:
                    bad.append(f"{p.relative_to(ROOT)}: includes <mpi.h> below comm")
    for b in bad:
        print(b)
    print(f"check_layering: {len(bad)} violation(s) in {len(BELOW)} components")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
