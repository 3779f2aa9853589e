"""Shared parts of the torch side-by-side scripts (bench/gpu/bench_*_vs_torch.py): CUDA-event timing and running
a vlpar benchmark program for its CSV output."""
import argparse
import csv
import io
import subprocess
import sys


def time_ms(fn, iters):
    """Mean milliseconds of `iters` calls of fn after 2 warm-up calls, timed with CUDA events."""
    import torch
    for _ in range(2):
        fn()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    stop.record()
    torch.cuda.synchronize()
    return start.elapsed_time(stop) / iters


def run_bench(path, iters):
    """Runs a vlpar benchmark program (echoing its output); its CSV rows, or None when it failed."""
    out = subprocess.run([path, "--iters", str(iters)], capture_output=True, text=True)
    print(out.stdout, end="")
    if out.returncode != 0:
        print(out.stderr, file=sys.stderr)
        return None
    return list(csv.DictReader(io.StringIO(out.stdout)))


def bench_args(doc):
    """The scripts' command line: the benchmark program's path and --iters."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bench")
    ap.add_argument("--iters", type=int, default=10)
    return ap.parse_args()
