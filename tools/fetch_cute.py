#!/usr/bin/env python3
"""Fetches the CuTe/CUTLASS C++ headers for the emulator's fragment-layout cross-check
(tests/emu/test_emu_fragment_layouts.cpp): the PyPI wheel nvidia-cutlass (pinned) is downloaded with pip and its
cutlass_library/source/include directory extracted to <dest>/cutlass-<version>/include. Test-only: the library
never includes CuTe. Idempotent (an extracted copy is reused); prints the include directory. Exit 1 when pip
cannot fetch it (CMake then leaves the cross-check out and says so).
Usage: tools/fetch_cute.py [dest]   (default build/third_party)"""
import pathlib, subprocess, sys, tempfile, zipfile

VERSION = "4.2.0.0"  # ../shared/spec/cuda-emulation.md §8.3: the layouts below were checked against this one


def main():
    dest = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "build/third_party").resolve()
    include = dest / f"cutlass-{VERSION}" / "include"
    if (include / "cute" / "atom" / "mma_traits_sm80.hpp").is_file():
        print(include)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        r = subprocess.run([sys.executable, "-m", "pip", "download", f"nvidia-cutlass=={VERSION}", "--no-deps",
                            "-q", "-d", tmp], capture_output=True, text=True)
        wheels = list(pathlib.Path(tmp).glob("nvidia_cutlass-*.whl"))
        if r.returncode != 0 or not wheels:
            print(f"fetch_cute: pip download nvidia-cutlass=={VERSION} failed:\n{r.stderr}", file=sys.stderr)
            return 1
        prefix = "cutlass_library/source/include/"
        with zipfile.ZipFile(wheels[0]) as z:
            for name in z.namelist():
                if name.startswith(prefix) and not name.endswith("/"):
                    out = include / name[len(prefix):]
                    out.parent.mkdir(parents=True, exist_ok=True)
                    out.write_bytes(z.read(name))
    print(include)
    return 0


if __name__ == "__main__":
    sys.exit(main())
