#!/usr/bin/env python3
"""Greedy decoding speed: vlpar's qwen3vl-generate against transformers `generate`, measured in one run.

Uses the ~100M-parameter Qwen3-VL config of tools/bench/qwen3vl_step_vs_torch.py (12-layer 640-wide LM, 32k vocab,
6-block ViT; one sample of text + two images). The model directory and batch are reused from --work when present
(that script writes them), otherwise built the same way. The prompt is the sample up to its last <|vision_end|>
plus --text-after text tokens. Then, in turn, on the same machine and thread count:
  1. vlpar: qwen3vl-generate --prompt-tokens K --max-new-tokens N --eos none --threads T (prefill =
     Model::forward over the prompt incl. the vision encoder; decode = one token at a time over the KV cache), with
     OMP_NUM_THREADS=T: Eigen's GEMM otherwise parallelises on its own over every core even at --threads 1;
  2. transformers 4.57.1 (fp32, eval, sdpa attention, use_cache, greedy): generate with 1 new token (prefill + the
     first token) and with N new tokens; decode tokens/s = (N − 1) / (t_N − t_1).
Prints both and whether the generated ids agree. This machine is shared and noisy: compare within one run only.
Usage:
  .venv/bin/python tools/bench/qwen3vl_generate_vs_hf.py [--generate build/cpu/examples/qwen3vl/qwen3vl-generate]
        [--threads 2] [--new-tokens 32] [--work /tmp/vlpar_qwen3vl_bench]
"""
import argparse
import os
import re
import subprocess
import sys
import time

import torch
from safetensors.torch import load_file, save_file
from transformers import Qwen3VLForConditionalGeneration

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import qwen3vl_step_vs_torch as step_bench  # noqa: E402  (build_model, build_batch, CONFIGS)

VISION_END = step_bench.VISION_END


def ensure_model(work):
    d = os.path.join(work, "100m")
    if not (os.path.exists(os.path.join(d, "model.safetensors")) and os.path.exists(os.path.join(d, "batch.safetensors"))):
        os.makedirs(d, exist_ok=True)
        c = step_bench.CONFIGS["100m"]
        step_bench.build_model(c, "sdpa").save_pretrained(d, safe_serialization=True)
        input_ids, labels, pixels, grid = step_bench.build_batch(c, torch.Generator().manual_seed(1))
        save_file({"input_ids": input_ids, "labels": labels,
                   "cu_seqlens": torch.tensor([0, input_ids.numel()], dtype=torch.int64),
                   "pixel_values": pixels, "image_grid_thw": grid}, os.path.join(d, "batch.safetensors"))
    return d


def main(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--generate", default="build/cpu/examples/qwen3vl/qwen3vl-generate")
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--new-tokens", type=int, default=32)
    p.add_argument("--text-after", type=int, default=4)
    p.add_argument("--work", default="/tmp/vlpar_qwen3vl_bench")
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    d = ensure_model(a.work)
    batch = load_file(os.path.join(d, "batch.safetensors"))
    ids = batch["input_ids"]
    k = max(i for i, t in enumerate(ids.tolist()) if t == VISION_END) + 1 + a.text_after
    n = a.new_tokens

    out = subprocess.run([a.generate, "--model", d, "--input", os.path.join(d, "batch.safetensors"),
                          "--prompt-tokens", str(k), "--max-new-tokens", str(n), "--eos", "none",
                          "--threads", str(a.threads)], check=True, capture_output=True, text=True,
                         env=dict(os.environ, OMP_NUM_THREADS=str(a.threads))).stdout
    print(out, end="")
    v_ids = [int(x) for x in re.search(r"^generated: (.*)$", out, re.M).group(1).split()]
    m = re.search(r"prefill ([0-9.]+) s .*decode (\d+) steps in ([0-9.]+) s = ([0-9.]+) tokens/s", out)
    v_prefill, v_decode = float(m.group(1)), float(m.group(4))

    model = Qwen3VLForConditionalGeneration.from_pretrained(d, dtype=torch.float32, attn_implementation="sdpa").eval()
    prompt = ids[:k].unsqueeze(0)
    kw = dict(input_ids=prompt, attention_mask=torch.ones_like(prompt), pixel_values=batch["pixel_values"],
              image_grid_thw=batch["image_grid_thw"], do_sample=False, use_cache=True, eos_token_id=None,
              pad_token_id=0)

    def timed(new):
        t0 = time.perf_counter()
        with torch.no_grad():
            seq = model.generate(**kw, max_new_tokens=new, min_new_tokens=new)
        return time.perf_counter() - t0, seq[0, k:].tolist()

    timed(1)  # warm-up
    t1, _ = timed(1)
    tn, hf_ids = timed(n)
    hf_decode = (n - 1) / (tn - t1)
    same = sum(int(x == y) for x, y in zip(v_ids, hf_ids))
    lead = next((i for i, (x, y) in enumerate(zip(v_ids, hf_ids)) if x != y), len(hf_ids))
    print(f"[100m] prompt {k} tokens, {n} new tokens, {a.threads} threads")
    print(f"  vlpar        : prefill {v_prefill:.3f} s, decode {v_decode:.2f} tokens/s")
    print(f"  transformers : prefill+1 {t1:.3f} s, decode {hf_decode:.2f} tokens/s (sdpa, use_cache)")
    print(f"  decode ratio vlpar / transformers: {v_decode / hf_decode:.2f}x")
    print(f"  ids: {same}/{n} equal, first {lead} identical")


if __name__ == "__main__":
    main(sys.argv[1:])
