#!/usr/bin/env python3
"""Proof that every CUDA kernel ran: compares the kernels the emulated test run launched (the log the emulator
appends to, $VLPAR_EMU_LAUNCH_LOG; tests/CMakeLists.txt sets it for every `emu` test) with every __global__ kernel
the real nvcc build compiled (the ptxas report of the `cuda` stage, cmake/ptxas_report.cmake). Prints
`emulated kernels launched: N of M` and fails, listing them, when a compiled kernel never ran.
Names are compared without the vlpar:: namespaces, as the ptxas report prints them. `--twin bf16=f16`: the nvcc
build left a dtype out (CI compiles f32 and bf16 only) whose files are the same templates as another's: each
compiled kernel naming the first dtype must also have run with the second.
Usage: tools/check_emu_coverage.py --report build/cuda/ptxas_report.txt --log build/emu/emu_launches.txt
       [--twin bf16=f16]"""
import argparse, pathlib, re, sys


def normalise(name):
    """The kernel's name without vlpar's namespaces and an anonymous namespace (GCC: {anonymous}, c++filt:
    (anonymous namespace)), so that the ptxas report and the emulator's log name a kernel alike."""
    name = re.sub(r"\{anonymous\}::|\(anonymous namespace\)::", "", name.strip())
    return re.sub(r"\bvlpar::(cuda_kernels::)?", "", name)


def compiled_kernels(report):
    names = set()
    for line in pathlib.Path(report).read_text().splitlines():
        m = re.match(r"^sm_\w+\s+\d+\s+\d+\s+\d+\s+\d+/\d+\s+(.+?)\s+\[[^]]+\]$", line)
        if m:
            name = normalise(m.group(1))
            if not name:
                sys.exit(f"check_emu_coverage: a row of {report} names no kernel: {line!r}")
            names.add(name)
    return names


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--report", required=True, help="ptxas report of the nvcc build")
    ap.add_argument("--log", required=True, help="kernel launch log of the emulated test run")
    ap.add_argument("--twin", action="append", default=[], metavar="DT=OTHER",
                    help="every compiled kernel of dtype DT must also have run with dtype OTHER (not compiled)")
    args = ap.parse_args()
    if not pathlib.Path(args.report).is_file():
        print(f"check_emu_coverage: no ptxas report at {args.report} (no nvcc on this machine): skipped")
        return 0
    compiled = compiled_kernels(args.report)
    if not compiled:
        print(f"check_emu_coverage: {args.report} lists no kernels", file=sys.stderr)
        return 1
    for twin in args.twin:
        have, other = twin.split("=")
        compiled |= {re.sub(rf"\b{have}\b", other, n) for n in compiled if re.search(rf"\b{have}\b", n)}
    log = pathlib.Path(args.log)
    launched = {normalise(l) for l in log.read_text().splitlines() if l.strip()} if log.is_file() else set()
    ran = compiled & launched
    print(f"emulated kernels launched: {len(ran)} of {len(compiled)}")
    missing = sorted(compiled - launched)
    for name in missing:
        print(f"  never launched under emulation: {name}", file=sys.stderr)
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
