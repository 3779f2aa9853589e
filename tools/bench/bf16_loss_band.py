#!/usr/bin/env python3
"""bf16 loss curve against the fp32 seed-to-seed spread (issue 15's loss-curve check; ctest label `long`).

Trains the demo config (examples/qwen3vl/configs/demo.toml, 300 steps) in f32 with three seeds (model init and data
order both change) and in bf16 with the first seed, all on the same demo data, and reads every run's loss from
its metrics.jsonl. The curves are compared after averaging over windows of 25 steps (single steps are noise). The
band at each window is the f32 runs' own range widened by that range on both sides: [min − spread, max + spread]
with spread = max − min. bf16 passes when every window's mean loss lies in its band — a bf16 run is then no further
from the f32 runs than they are from each other (seed noise), which is what "bf16 trains like f32" can mean for a
curve. Prints the windows, the bands and the worst margin; exit 1 on a window outside its band.
Usage: bf16_loss_band.py --data-tool vlpar-data --train qwen3vl-train --src REPO --work DIR [--steps 300]
(exit 77 when the demo photographs are not installed, like tests/demo_short.sh)"""
import argparse, json, os, shutil, subprocess, sys

p = argparse.ArgumentParser()
p.add_argument("--data-tool", required=True)
p.add_argument("--train", required=True)
p.add_argument("--src", required=True)
p.add_argument("--work", required=True)
p.add_argument("--steps", type=int, default=300)
p.add_argument("--window", type=int, default=25)
a = p.parse_args()

photos = subprocess.run("dpkg -L lomiri-wallpapers-16.04 2>/dev/null | grep -iE '\\.(jpe?g|png)$' | LC_ALL=C sort",
                        shell=True, capture_output=True, text=True).stdout
if not photos.strip():
    print("SKIPPED: lomiri-wallpapers-16.04 is not installed (scripts/install_deps.sh installs it)")
    sys.exit(77)
shutil.rmtree(a.work, ignore_errors=True)
os.makedirs(a.work)
with open(os.path.join(a.work, "photos.txt"), "w") as f:
    f.write(photos)
data = os.path.join(a.work, "data")
subprocess.run([a.data_tool, "make-demo", "--out", data, "--photo-list", os.path.join(a.work, "photos.txt"),
                "--images", "600", "--val-images", "120", "--threads", "2", "--no-progress"], check=True,
               stdout=subprocess.DEVNULL)


def run(name, dtype, seed):
    d = os.path.join(a.work, name)
    cmd = [a.train, "--config", "examples/qwen3vl/configs/demo.toml", f"--data.train={data}", f"--data.eval={data}",
           f"--training.steps={a.steps}", "--schedule.warmup_steps=20", f"--checkpoint.dir={d}/ckpt",
           "--checkpoint.interval=0", f"--metrics.dir={d}", "--metrics.log_interval=1", "--metrics.trace=false",
           "--metrics.tensorboard=false", f"--training.dtype={dtype}", f"--model.seed={seed}", f"--data.seed={seed}"]
    with open(os.path.join(a.work, name + ".log"), "w") as log:
        subprocess.run(cmd, cwd=a.src, check=True, stdout=log, stderr=subprocess.STDOUT)
    losses = {}
    with open(os.path.join(d, "metrics.jsonl")) as f:
        for line in f:
            r = json.loads(line)
            if "loss" in r and "step" in r:
                losses[int(r["step"])] = float(r["loss"])
    return [losses[s] for s in sorted(losses)]


def windows(curve):
    w = a.window
    return [sum(curve[i:i + w]) / len(curve[i:i + w]) for i in range(0, len(curve), w)]


f32 = [windows(run(f"f32_seed{s}", "f32", s)) for s in (1, 2, 3)]
bf16 = windows(run("bf16_seed1", "bf16", 1))
worst = float("inf")
ok = True
print(f"{'steps':>9} {'f32 min':>9} {'f32 max':>9} {'band':>21} {'bf16':>9}")
for i, b in enumerate(bf16):
    vals = [c[i] for c in f32]
    lo, hi = min(vals), max(vals)
    spread = hi - lo
    band = (lo - spread, hi + spread)
    margin = min(b - band[0], band[1] - b)
    worst = min(worst, margin / max(spread, 1e-12))
    inside = band[0] <= b <= band[1]
    ok = ok and inside
    print(f"{i * a.window + 1:>4}-{min((i + 1) * a.window, a.steps):<4} {lo:9.5f} {hi:9.5f} "
          f"[{band[0]:9.5f}, {band[1]:9.5f}] {b:9.5f}{'' if inside else '  OUTSIDE'}")
print(f"worst margin: {worst:.2f} spreads inside the band")
if not ok:
    print("FAIL: the bf16 curve leaves the f32 seed band")
    sys.exit(1)
print("PASS: every window of the bf16 curve lies within the f32 seed band")
shutil.rmtree(a.work, ignore_errors=True)
