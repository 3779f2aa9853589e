#!/usr/bin/env python3
"""Kill-and-resume soak of the Qwen3-VL trainer (issue 18): trains the demo model, kills the trainer with SIGKILL
at seeded random moments N times (every other kill aimed at a checkpoint write: the moment a step-<N>.tmp directory
appears, plus a random delay), resumes each time from the latest committed checkpoint, and checks that the final
weights and optimizer state equal an uninterrupted run's bit for bit (every tensor of the final checkpoint).

Every kill prints its number, its kind, its delay and the step the trainer had reached. Exit 0 when the final
state is identical, 1 when not (the differing tensors are named), 77 when the demo photographs are missing
(scripts/install_deps.sh installs lomiri-wallpapers-16.04).

Usage: tools/soak/kill_resume.py --build BUILD_DIR --work DIR [--kills N] [--steps S] [--interval I] [--seed X]
The ctest qwen3vl_soak_short runs 3 kills over 24 steps; the long run (docs/robustness.md) 50 or more.
"""
import argparse
import json
import os
import pathlib
import random
import re
import shutil
import signal
import struct
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent


def photos():
    try:
        out = subprocess.run(["dpkg", "-L", "lomiri-wallpapers-16.04"], capture_output=True, text=True).stdout
    except FileNotFoundError:
        return []
    return sorted(p for p in out.splitlines() if p.lower().endswith((".jpg", ".jpeg", ".png")))


def tensors(path):
    """name -> (dtype, shape, raw bytes) of a safetensors file (stdlib only)."""
    blob = path.read_bytes()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    data = blob[8 + n:]
    out = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        b, e = entry["data_offsets"]
        out[name] = (entry["dtype"], tuple(entry["shape"]), data[b:e])
    return out


def final_state(ckpt_dir, steps):
    step_dir = pathlib.Path(ckpt_dir) / f"step-{steps}"
    state = {}
    for f in sorted(step_dir.glob("rank-*.safetensors")):
        for name, t in tensors(f).items():
            state[f"{f.name}:{name}"] = t
    if not state:
        raise SystemExit(f"soak: no checkpoint tensors in {step_dir}")
    return state


def train_cmd(args, data, ckpt, metrics):
    return [str(args.build / "examples/qwen3vl/qwen3vl-train"), "--config", "examples/qwen3vl/configs/demo.toml",
            f"--data.train={data}", f"--data.eval={data}", f"--training.steps={args.steps}",
            "--schedule.warmup_steps=5", f"--checkpoint.dir={ckpt}", f"--checkpoint.interval={args.interval}",
            "--checkpoint.keep_last=2", "--checkpoint.resume=true", f"--metrics.dir={metrics}",
            "--metrics.log_interval=1", "--metrics.trace=false", "--metrics.tensorboard=false"]


def last_step(log):
    """The last step of the metrics lines ("step:  12/30  loss: ...", colours stripped) in a trainer's log."""
    step = 0
    for line in pathlib.Path(log).read_text(errors="replace").splitlines():
        m = re.search(r"step:\s*(\d+)", re.sub(r"\x1b\[[0-9;]*m", "", line))
        if m:
            step = int(m.group(1))
    return step


def committed_step(ckpt):
    """The step of the checkpoint <ckpt>/latest names (0 when there is none yet)."""
    try:
        return int((pathlib.Path(ckpt) / "latest").read_text().strip().removeprefix("step-"))
    except (OSError, ValueError):
        return 0


def tmp_dirs(ckpt):
    """(name, inode, ctime) of the step-*.tmp directories: a save in progress, or a killed save's leftover."""
    out = set()
    for p in pathlib.Path(ckpt).glob("step-*.tmp"):
        try:
            st = p.stat()
            out.add((p.name, st.st_ino, st.st_ctime_ns))
        except OSError:
            pass
    return out


def run_killed(cmd, log, ckpt, kind, delay, timeout):
    """Starts cmd; kills it with SIGKILL `delay` s after start ('time') or after a step-*.tmp appears ('save').
    Returns True when the trainer finished on its own first."""
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
        t0 = time.monotonic()
        armed = t0 + delay if kind == "time" else None
        stale = tmp_dirs(ckpt)  # leftovers of an earlier killed save: not a write of this run
        while proc.poll() is None:
            now = time.monotonic()
            if now - t0 > timeout:
                proc.kill()
                raise SystemExit(f"soak: the trainer ran past {timeout} s ({log})")
            if armed is None and tmp_dirs(ckpt) - stale:
                armed = now + delay
            if armed is not None and now >= armed:
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                return False
            time.sleep(0.001)
    if proc.returncode != 0:
        print(pathlib.Path(log).read_text(errors="replace")[-3000:])
        raise SystemExit(f"soak: the trainer failed with exit code {proc.returncode} ({log})")
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", type=pathlib.Path, required=True)
    ap.add_argument("--work", type=pathlib.Path, required=True)
    ap.add_argument("--kills", type=int, default=4)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--interval", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds one trainer run may take")
    args = ap.parse_args()
    args.build = args.build.resolve()
    pics = photos()
    if not pics:
        print("SKIPPED: lomiri-wallpapers-16.04 is not installed (scripts/install_deps.sh installs it)")
        return 77
    work = args.work.resolve()
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    (work / "photos.txt").write_text("\n".join(pics) + "\n")
    data = work / "data"
    subprocess.run([str(args.build / "tools/vlpar-data"), "make-demo", "--out", str(data), "--photo-list",
                    str(work / "photos.txt"), "--images", "200", "--val-images", "8", "--threads", "2",
                    "--no-progress"], check=True, stdout=subprocess.DEVNULL)
    t0 = time.monotonic()
    ref = work / "reference"
    run_killed(train_cmd(args, data, ref / "ckpt", ref / "metrics"), work / "reference.log", ref / "ckpt",
               "time", 1e9, args.timeout)
    per_run = time.monotonic() - t0
    print(f"soak: reference run of {args.steps} steps in {per_run:.1f} s")
    rng = random.Random(args.seed)
    soak = work / "soak"
    cmd = train_cmd(args, data, soak / "ckpt", soak / "metrics")
    kills = 0
    while kills < args.kills:
        kind = "save" if kills % 2 else "time"
        # a time kill lands anywhere in what is left of the run (start-up and data loading included)
        left = per_run * (args.steps - committed_step(soak / "ckpt")) / args.steps
        delay = rng.uniform(0.0, 0.05) if kind == "save" else rng.uniform(0.0, left)
        log = work / f"run-{kills:03d}.log"
        if run_killed(cmd, log, soak / "ckpt", kind, delay, args.timeout):
            print(f"soak: the trainer finished before kill {kills + 1} (delay {delay:.3f} s after {kind})")
            break
        kills += 1
        print(f"soak: kill {kills} ({kind}, {delay:.3f} s) at step {last_step(log)}")
    finished = run_killed(cmd, work / "final.log", soak / "ckpt", "time", 1e9, args.timeout)
    assert finished
    a = final_state(ref / "ckpt", args.steps)
    b = final_state(soak / "ckpt", args.steps)
    differ = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
    if differ:
        print(f"FAIL: {len(differ)} of {len(a)} tensors differ after {kills} kills: " + ", ".join(differ[:10]))
        return 1
    print(f"PASS: {kills} kills survived; all {len(a)} tensors of step {args.steps} equal the uninterrupted run's "
          "bit for bit")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
