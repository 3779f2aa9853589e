#!/usr/bin/env python3
"""Tokens/s of vlpar's tokenizer against HF `tokenizers` on the same corpus, measured in the same run.

HF (tokenizers 0.22.2, Rust under Python), all with add_special_tokens=False:
  hf_single     tok.encode(item) for each item in a Python loop (one thread)
  hf_batch_1    tok.encode_batch(items) with RAYON_NUM_THREADS=1 (one thread, no per-call Python overhead)
  hf_batch_N    tok.encode_batch(items) on all N hardware threads (Rayon)
vlpar (bench/bench_tokenizer, Google Benchmark):
  vlpar_1       one thread, word cache on          vlpar_1_nocache   one thread, cache off
  vlpar_N       N threads sharing one Tokenizer
Rounds interleave HF and vlpar (best of --rounds for each), so load from other processes hits both alike.
HF's word cache is on (its default). Before timing, vlpar's ids are compared with HF's on every item: any
difference aborts the run. Prints tokens/s of each and the ratios vlpar_1 / hf_batch_1, vlpar_1 / hf_single and
vlpar_N / hf_batch_N.

Run from the repo root after building the bench (cmake --build build/cpu --target bench_tokenizer):
  .venv/bin/python tools/bench/tokenizer_vs_hf.py [--bench build/cpu/bench/bench_tokenizer]
      [--tokenizer tests/fixtures/tokenizer/tokenizer.json] [--corpus tests/fixtures/tokenizer/corpus.txt]
"""
import argparse
import json
import os
import subprocess
import sys
import time


def unescape(line):
    out, i = [], 0
    while i < len(line):
        c = line[i]
        if c == "\\" and i + 1 < len(line):
            e = line[i + 1]
            out.append("\n" if e == "n" else "\r" if e == "r" else e)
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def hf_child(tokenizer, corpus, mode, min_time, out_ids):
    """Runs in a subprocess so RAYON_NUM_THREADS takes effect: prints tokens/s (best of passes)."""
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(tokenizer)
    with open(corpus, encoding="utf-8", newline="") as f:
        items = [unescape(l.rstrip("\n")) for l in f]
    ids = [e.ids for e in tok.encode_batch(items, add_special_tokens=False)]  # warm-up (fills HF's cache too)
    n_tok = sum(len(x) for x in ids)
    if out_ids:  # flat little-endian i32: n_items, offsets[n_items + 1], ids (read by bench_tokenizer)
        import struct
        offsets = [0]
        for x in ids:
            offsets.append(offsets[-1] + len(x))
        with open(out_ids, "wb") as f:
            f.write(struct.pack(f"<i{len(offsets)}i", len(ids), *offsets))
            f.write(struct.pack(f"<{offsets[-1]}i", *(i for x in ids for i in x)))
    best, t_end = 0.0, time.perf_counter() + min_time
    while True:
        t0 = time.perf_counter()
        if mode == "single":
            for s in items:
                tok.encode(s, add_special_tokens=False)
        else:
            tok.encode_batch(items, add_special_tokens=False)
        dt = time.perf_counter() - t0
        best = max(best, n_tok / dt)
        if time.perf_counter() > t_end:
            break
    print(json.dumps({"tokens_per_s": best, "tokens": n_tok}))


def run_hf(args, mode, threads, out_ids=None):
    env = dict(os.environ, RAYON_NUM_THREADS=str(threads), TOKENIZERS_PARALLELISM="true")
    cmd = [sys.executable, __file__, "--hf-child", mode, "--tokenizer", args.tokenizer, "--corpus", args.corpus,
           "--min-time", str(args.min_time)] + (["--out-ids", out_ids] if out_ids else [])
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    return json.loads(r.stdout.strip().splitlines()[-1])["tokens_per_s"]


def run_vlpar(args, hf_ids):
    env = dict(os.environ, VLPAR_TOKENIZER_JSON=args.tokenizer, VLPAR_TOKENIZER_CORPUS=args.corpus,
               VLPAR_TOKENIZER_IDS=hf_ids)
    r = subprocess.run([args.bench, "--benchmark_format=json", "--benchmark_filter=encode"], env=env,
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{args.bench} failed:\n{r.stderr}")
    best = {}
    for b in json.loads(r.stdout)["benchmarks"]:
        if b.get("run_type") != "iteration":
            continue
        name = b["run_name"].split("/min_time")[0]
        best[name] = max(best.get(name, 0.0), b["tokens_per_s"])
    return best, r.stderr.strip()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bench", default="build/cpu/bench/bench_tokenizer")
    ap.add_argument("--tokenizer", default="tests/fixtures/tokenizer/tokenizer.json")
    ap.add_argument("--corpus", default="tests/fixtures/tokenizer/corpus.txt")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--min-time", type=float, default=2.0)
    ap.add_argument("--hf-child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--out-ids", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.hf_child:
        hf_child(args.tokenizer, args.corpus, args.hf_child, args.min_time, args.out_ids)
        return
    import tokenizers
    import tempfile
    n = os.cpu_count() or 1
    hf_ids = os.path.join(tempfile.mkdtemp(prefix="vlpar_tok_bench_"), "hf_ids.bin")
    # Rounds interleave HF and vlpar so that load from other processes hits both alike; best of the rounds.
    hf, vl, info = {}, {}, ""
    for rnd in range(args.rounds):
        for key, mode, threads in (("hf_single", "single", 1), ("hf_batch_1", "batch", 1),
                                   (f"hf_batch_{n}", "batch", n)):
            v = run_hf(args, mode, threads, out_ids=hf_ids if rnd == 0 and key == "hf_single" else None)
            hf[key] = max(hf.get(key, 0.0), v)
        best, info = run_vlpar(args, hf_ids)
        for k, v in best.items():
            vl[k] = max(vl.get(k, 0.0), v)
    print(info)
    print(f"HF tokenizers {tokenizers.__version__}, {n} hardware threads, tokens/s (best of {args.rounds} rounds):")
    rows = dict(hf)
    for name, v in sorted(vl.items()):
        rows["vlpar " + name] = v
    for k, v in rows.items():
        print(f"  {k:40s} {v / 1e6:8.3f} M tokens/s")
    v1 = vl.get("encode/threads:1/cache:1", 0.0)
    vn = max((v for k, v in vl.items() if k.startswith("encode/threads:") and not k.startswith("encode/threads:1/")),
             default=0.0)
    print(f"ratio vlpar 1 thread / HF encode_batch 1 thread : {v1 / hf['hf_batch_1']:.2f}x")
    print(f"ratio vlpar 1 thread / HF encode() loop         : {v1 / hf['hf_single']:.2f}x")
    print(f"ratio vlpar {n} threads / HF encode_batch {n} threads: {vn / hf[f'hf_batch_{n}']:.2f}x")


if __name__ == "__main__":
    main()
