#!/usr/bin/env python3
"""Training-step speed on a busy machine: vlpar (qwen3vl-bench) and PyTorch, idle and beside 1, 2 and 4 busy processes.

Issue 18, item 1. For each config (tools/bench/qwen3vl_step_vs_torch.py: `tiny` and the ~110M `100m`) and each load
k in --loads, this script starts k busy-loop processes, then times the same Qwen3-VL training step (forward +
backward, one packed sample with two images) in vlpar and in PyTorch (fp32, sdpa, the same thread count), and stops
the load. Everything runs in one invocation on the same machine, so only ratios are compared:
  slowdown(k)      = mean step time beside k busy processes / mean step time idle, for each library (the mean:
                     a training run's time is the sum of its steps, slow outliers included; the slowest is shown);
  vs torch         = vlpar's slowdown / PyTorch's slowdown              (target: <= 1.5 under every load);
  fair share       = (threads + k) / threads: the slowdown a fair scheduler gives a job of `threads` busy threads
                     beside k busy processes;  vs fair = vlpar's slowdown / fair share   (target: <= 3).
Usage (after building qwen3vl-bench, with the .venv of the README):
  .venv/bin/python bench/contention/contention.py [--bench build/emu/examples/qwen3vl/qwen3vl-bench[,baseline]]
        [--threads 2] [--steps 9] [--loads 0,1,2,4] [--configs tiny,100m] [--vlpar-only]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "bench"))
import torch  # noqa: E402
from qwen3vl_step_vs_torch import prepare, torch_step_times  # noqa: E402

BUSY = "while True: pass"


def vlpar_step(bench, d, steps, threads):
    """(mean, max) step seconds of qwen3vl-bench (older builds print only the median: used for both)."""
    out = subprocess.run([bench, "--model", d, "--input", os.path.join(d, "batch.safetensors"), "--steps", str(steps),
                          "--warmup", "1", "--threads", str(threads), "--json"],
                         check=True, capture_output=True, text=True)
    j = json.loads(out.stdout.strip().splitlines()[-1])
    return j.get("step_mean_s", j["step_s"]), j.get("step_max_s", j["step_s"])


def torch_step(model, batch, steps):
    times = torch_step_times(model, batch, steps)[2]
    return statistics.fmean(times), max(times)


def with_load(k, fn):
    """Runs fn() beside k busy-loop processes (started 0.5 s before, killed after)."""
    busy = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(k)]
    try:
        time.sleep(0.5 if k else 0)
        return fn()
    finally:
        for p in busy:
            p.kill()
        for p in busy:
            p.wait()


def main(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bench", default="build/emu/examples/qwen3vl/qwen3vl-bench",
                   help="qwen3vl-bench, or several comma-separated (e.g. a baseline build next to this one)")
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--steps", type=int, default=9)
    p.add_argument("--loads", default="0,1,2,4")
    p.add_argument("--configs", default="tiny,100m")
    p.add_argument("--work", default="/tmp/vlpar_contention")
    p.add_argument("--vlpar-only", action="store_true", help="skip PyTorch (quick runs while tuning)")
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    loads = sorted(set([0] + [int(x) for x in a.loads.split(",")]))
    benches = a.bench.split(",")
    names = [f"vlpar{i}" if len(benches) > 1 else "vlpar" for i in range(len(benches))]
    runners = [(n, (lambda b: lambda d, m, bt: vlpar_step(b, d, a.steps, a.threads))(b))
               for n, b in zip(names, benches)]
    if not a.vlpar_only:
        runners.append(("torch", lambda d, m, bt: torch_step(m, bt, a.steps)))
    for n, b in zip(names, benches):
        print(f"{n} = {b}")
    worst = {n: [0.0, 0.0] for n in names}  # slowdown / torch's, slowdown / fair share
    for name in a.configs.split(","):
        d, model, batch = prepare(name, a.work)
        print(f"[{name}] {sum(x.numel() for x in model.parameters()) / 1e6:.1f} M params, {a.threads} threads, "
              f"{a.steps} steps per run; mean step ms (slowest), slowdown = mean / idle mean")
        print("  load  fair x  " + "  ".join(f"{n + ' ms':>18} {n + ' x':>8}" for n, _ in runners)
              + "".join(f"  {n + '/torch':>12} {n + '/fair':>11}" for n in names if not a.vlpar_only))
        idle = {}
        for k in loads:
            row = {}
            for n, fn in runners:  # each runner under the same load in turn
                row[n] = with_load(k, lambda: fn(d, model, batch))
                idle.setdefault(n, row[n][0])
            fair = (a.threads + k) / a.threads
            x = {n: row[n][0] / idle[n] for n in row}
            line = f"  {k:>4} {fair:>7.2f}  " + "  ".join(
                f"{1e3 * row[n][0]:>9.1f} ({1e3 * row[n][1]:>6.0f}) {x[n]:>8.2f}" for n, _ in runners)
            for n in names:
                if not a.vlpar_only:
                    line += f"  {x[n] / x['torch']:>12.2f} {x[n] / fair:>11.2f}"
                    if k:
                        worst[n][0] = max(worst[n][0], x[n] / x["torch"])
                if k:
                    worst[n][1] = max(worst[n][1], x[n] / fair)
            print(line, flush=True)
    for n in names:
        print(f"worst {n}: slowdown / torch's {worst[n][0]:.2f} (target <= 1.5), / fair share {worst[n][1]:.2f} "
              f"(target <= 3)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
