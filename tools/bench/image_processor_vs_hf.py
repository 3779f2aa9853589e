#!/usr/bin/env python3
"""Images/s per core of vlpar's decode + Qwen3-VL processing against HF's fast and slow image processors.

Writes a set of real-size JPEGs (photo-like synthetic content, quality 90, 4:2:0, the sizes below) into --dir,
then measures, interleaved round by round on the same encoded files held in memory, all on one thread:
  vlpar      bench/bench_image image_decode_process: libjpeg-turbo decode + smart_resize + bicubic + flatten
             into a new output per image (as HF allocates its tensors); vlpar_into: the same into one reused
             buffer (image_decode_process_into, what the loader does)
  hf_fast    PIL decode + transformers 4.57.1 Qwen2VLImageProcessorFast (torch.set_num_threads(1))
  hf_slow    PIL decode + Qwen2VLImageProcessor (PIL resize, numpy)
with the Qwen3-VL hub settings (patch 16, merge 2, temporal 2, mean = std = 0.5, min/max pixels 65536 /
16777216 unless --min-pixels / --max-pixels). Rates are images per CPU-second (user + system, one thread), so
load from other processes on a shared machine does not count; page faults of fresh output memory do. Prints the
median of each and the ratios.

Run from the repo root after building the bench (cmake --build build/cpu --target bench_image):
  .venv/bin/python tools/bench/image_processor_vs_hf.py [--bench build/cpu/bench/bench_image] [--rounds 5]
"""
import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np
from PIL import Image

SIZES = [(1024, 768), (1000, 750), (1280, 853), (800, 533), (1920, 1080), (640, 480), (1200, 1600), (1366, 768)]


def photo(w, h, seed):
    """Photo-like content: smooth shading, a few soft-edged shapes, texture and sensor noise (~2 bits/pixel)."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    img = np.zeros((h, w, 3), np.float32)
    for c in range(3):
        for _ in range(5):
            fx, fy = rng.uniform(0.001, 0.03, 2)
            img[..., c] += 30 * np.sin(x * fx + y * fy + rng.uniform(0, 6.3))
    for _ in range(12):
        cx, cy, r = rng.uniform(0, w), rng.uniform(0, h), rng.uniform(20, min(w, h) / 3)
        d = np.sqrt((x - cx) ** 2 + (y - cy) ** 2)
        img += (np.clip((r - d) / 3, 0, 1)[..., None] * rng.uniform(-60, 60, 3)).astype(np.float32)
    img += 128 + rng.normal(0, 5, img.shape).astype(np.float32)
    img += 10 * np.sin(x * 0.9 + y * 0.4)[..., None]
    return Image.fromarray(np.clip(img, 0, 255).astype(np.uint8))


def make_images(directory):
    os.makedirs(directory, exist_ok=True)
    for i, (w, h) in enumerate(SIZES):
        path = os.path.join(directory, f"img{i}_{w}x{h}.jpg")
        if not os.path.exists(path):
            photo(w, h, i).save(path, "JPEG", quality=90)
    return sorted(os.path.join(directory, f) for f in os.listdir(directory) if f.endswith(".jpg"))


def time_hf(processor, blobs, min_time):
    """Images per CPU-second (user + system time of this process, which runs one thread) over whole passes of
    the set, for at least min_time CPU seconds. CPU time, like Google Benchmark's default, so that other load on
    a shared machine does not count against either side."""
    n, t0 = 0, time.process_time()
    while True:
        for b in blobs:
            out = processor(images=[Image.open(io.BytesIO(b))], return_tensors="pt")
            assert out["pixel_values"].shape[1] == 1536
            n += 1
        if time.process_time() - t0 >= min_time:
            return n / (time.process_time() - t0)


def time_vlpar(bench, directory, min_pixels, max_pixels):
    """{benchmark name: images per CPU-second} of bench_image's decode+process benchmarks."""
    env = dict(os.environ, VLPAR_BENCH_IMAGES=directory, VLPAR_BENCH_MIN_PIXELS=str(min_pixels),
               VLPAR_BENCH_MAX_PIXELS=str(max_pixels), OMP_NUM_THREADS="1")
    res = subprocess.run([bench, "--benchmark_filter=image_decode_process", "--benchmark_format=json"], env=env,
                         capture_output=True, text=True, check=True)
    data = json.loads(res.stdout[res.stdout.index("{"):])
    return {b["name"].split("/")[0]: b["items_per_second"] for b in data["benchmarks"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench", default="build/cpu/bench/bench_image")
    ap.add_argument("--dir", default="/tmp/vlpar_bench_images")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--min-time", type=float, default=2.0, help="seconds per HF measurement")
    ap.add_argument("--min-pixels", type=int, default=65536)
    ap.add_argument("--max-pixels", type=int, default=16777216)
    args = ap.parse_args()

    import torch
    import transformers
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import Qwen2VLImageProcessor
    from transformers.models.qwen2_vl.image_processing_qwen2_vl_fast import Qwen2VLImageProcessorFast
    torch.set_num_threads(1)

    files = make_images(args.dir)
    blobs = [open(f, "rb").read() for f in files]
    common = dict(patch_size=16, temporal_patch_size=2, merge_size=2, image_mean=[0.5] * 3, image_std=[0.5] * 3)
    fast = Qwen2VLImageProcessorFast(size={"shortest_edge": args.min_pixels, "longest_edge": args.max_pixels},
                                     **common)
    slow = Qwen2VLImageProcessor(min_pixels=args.min_pixels, max_pixels=args.max_pixels, **common)
    print(f"{len(files)} JPEGs in {args.dir}: " + ", ".join(f"{Image.open(f).size[0]}x{Image.open(f).size[1]}"
                                                            for f in files))
    print(f"transformers {transformers.__version__}, torch {torch.__version__} (1 thread), one core each")
    for p in (fast, slow):  # warm-up
        time_hf(p, blobs[:2], 0.0)
    rates = {"vlpar": [], "vlpar_into": [], "hf_fast": [], "hf_slow": []}
    for r in range(args.rounds):
        v = time_vlpar(args.bench, args.dir, args.min_pixels, args.max_pixels)
        rates["vlpar"].append(v["image_decode_process"])
        rates["vlpar_into"].append(v["image_decode_process_into"])
        rates["hf_fast"].append(time_hf(fast, blobs, args.min_time))
        rates["hf_slow"].append(time_hf(slow, blobs, args.min_time))
        print(f"round {r}: " + ", ".join(f"{k} {v[-1]:.1f} img/s" for k, v in rates.items()), flush=True)
    med = {k: statistics.median(v) for k, v in rates.items()}
    print(f"\n{'':10s} {'images/s':>10s} {'ms/image':>10s}   (per core: one thread, CPU time)")
    for k, v in med.items():
        print(f"{k:10s} {v:10.1f} {1000 / v:10.2f}")
    print(f"\nmedian of {args.rounds} rounds; vlpar = process_image (new output per image, as HF), vlpar_into = "
          "process_image_into a reused buffer (the loader's path)")
    for k in ("vlpar", "vlpar_into"):
        print(f"ratio {k} / hf_fast = {med[k] / med['hf_fast']:.2f}x,  {k} / hf_slow = {med[k] / med['hf_slow']:.2f}x")


if __name__ == "__main__":
    sys.exit(main())
