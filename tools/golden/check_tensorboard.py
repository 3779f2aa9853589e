#!/usr/bin/env python3
"""TensorBoard interop for vlpar's event file writer (include/vlpar/obs/tensorboard_writer.hpp).

Two jobs:

  read PATH [--expect EXPECT.json]
      Loads an event file (or a directory of them) with TensorBoard's own reader,
      tensorboard.backend.event_processing.event_accumulator.EventAccumulator, and prints every scalar series as
      "tag step value". With --expect, compares against a JSON list of {"tag","step","value"} (float32 equality,
      NaN equal to NaN; a (tag, step) shown twice is a difference) and exits 1 on any difference. This is how we check that a vlpar-written file is a real
      TensorBoard file: the reader verifies the TFRecord CRCs and parses the Event protos.

  make-fixture --out DIR
      Writes tests/fixtures/obs/torch_scalars.tfevents with torch.utils.tensorboard.SummaryWriter.add_scalar
      (legacy simple_value scalars) and DIR/torch_scalars.json listing what was written, for the C++ test
      (tests/unit/test_obs_tensorboard.cpp): vlpar must parse that file (framing, CRCs, protos) and produce
      byte-identical records for the same (wall_time, step, tag, value).

Environment: the repository's .venv (torch 2.15, tensorboard 2.21: `.venv/bin/pip install tensorboard`).
  .venv/bin/python tools/golden/check_tensorboard.py make-fixture --out tests/fixtures/obs
  .venv/bin/python tools/golden/check_tensorboard.py read build/tb_demo --expect build/tb_demo/expect.json
"""
import argparse
import glob
import json
import math
import os
import shutil
import struct
import sys
import tempfile

# The values the fixture holds: edge cases of the proto3 encoding (step 0 omitted, simple_value 0.0 kept as a oneof
# member, a large step needing a 6-byte varint, non-representable float32 values rounded, infinities, -0.0).
FIXTURE_SCALARS = [
    ("train/loss", 0, 2.5, 1700000000.25),
    ("train/loss", 1, 2.25, 1700000001.5),
    ("train/lr", 1, 3e-4, 1700000001.5),
    ("train/loss", 7, -1.5, 1700000007.0),
    ("train/grad_norm", 100000, 0.0, 1700000100.125),
    ("eval/accuracy", 2**40, 0.1, 1700000200.0),
    ("train/loss", 12, float("inf"), 1700000012.0),
    ("train/aux_loss", 13, -0.0, 1700000013.0),
]


def make_fixture(out_dir):
    from torch.utils.tensorboard import SummaryWriter

    os.makedirs(out_dir, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        w = SummaryWriter(log_dir=tmp)
        for tag, step, value, wall in FIXTURE_SCALARS:
            w.add_scalar(tag, value, global_step=step, walltime=wall)
        w.close()
        files = glob.glob(os.path.join(tmp, "events.out.tfevents.*"))
        assert len(files) == 1, files
        shutil.copyfile(files[0], os.path.join(out_dir, "torch_scalars.tfevents"))
    expect = [{"tag": t, "step": s, "value": v if math.isfinite(v) else str(v), "wall_time": wt}
              for t, s, v, wt in FIXTURE_SCALARS]
    with open(os.path.join(out_dir, "torch_scalars.json"), "w") as f:
        json.dump({"writer": "torch.utils.tensorboard.SummaryWriter.add_scalar (new_style=False)",
                   "scalars": expect}, f, indent=1)
        f.write("\n")
    print(f"wrote {out_dir}/torch_scalars.tfevents and torch_scalars.json")


def f32(x):
    return struct.unpack("<f", struct.pack("<f", float(x)))[0]


def read(path, expect_path):
    from tensorboard.backend.event_processing import event_accumulator as ea

    # size_guidance 0 = keep every event (the default samples long series down to 10,000 points).
    acc = ea.EventAccumulator(path, size_guidance={ea.SCALARS: 0})
    acc.Reload()
    got = {}
    duplicates = 0
    for tag in sorted(acc.Tags()["scalars"]):
        for e in acc.Scalars(tag):
            print(f"{tag} {e.step} {e.value!r} {e.wall_time!r}")
            if (tag, e.step) in got:  # e.g. a resumed run whose redone steps were not purged
                print(f"DUPLICATE {(tag, e.step)}: {got[(tag, e.step)]!r} and {e.value!r}", file=sys.stderr)
                duplicates += 1
            got[(tag, e.step)] = e.value
    if not got:
        print(f"no scalars in {path}", file=sys.stderr)
        return 1
    if expect_path is None:
        return 0
    with open(expect_path) as f:
        expect = json.load(f)
    if isinstance(expect, dict):
        expect = expect["scalars"]
    bad = duplicates
    for e in expect:
        key = (e["tag"], e["step"])
        want = f32(float(e["value"]))
        if key not in got:
            print(f"MISSING {key}", file=sys.stderr)
            bad += 1
            continue
        have = got.pop(key)
        if not (have == want or (math.isnan(have) and math.isnan(want))):
            print(f"MISMATCH {key}: got {have!r}, want {want!r}", file=sys.stderr)
            bad += 1
    for key in got:
        print(f"UNEXPECTED {key} = {got[key]!r}", file=sys.stderr)
        bad += 1
    print("OK: every expected scalar read back by EventAccumulator" if bad == 0 else f"{bad} differences")
    return 0 if bad == 0 else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("read")
    r.add_argument("path")
    r.add_argument("--expect")
    m = sub.add_parser("make-fixture")
    m.add_argument("--out", required=True)
    a = ap.parse_args()
    if a.cmd == "make-fixture":
        make_fixture(a.out)
        return 0
    return read(a.path, a.expect)


if __name__ == "__main__":
    sys.exit(main())
