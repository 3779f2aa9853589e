#!/usr/bin/env python3
"""Qwen3-VL CPU training step: vlpar (qwen3vl-bench) against PyTorch/transformers, measured in one run.

For each config (a tiny one and a ~100M-parameter one) this script
  1. builds a random Qwen3-VL model with transformers and saves it in HF format (config.json + safetensors);
  2. writes one packed batch in the format of examples/qwen3vl/README.md: a single sample of text with two images
     of different sizes (so PyTorch and vlpar do exactly the same work: no padding, no packing tricks);
  3. runs `qwen3vl-bench --json` on it (forward + backward, median over steps, allocator peak);
  4. times the same step in PyTorch (model.train(), fp32, attn_implementation sdpa — torch's fastest CPU
     attention — and eager; loss.backward(); grads zeroed between steps) with the same number of threads;
  5. prints tokens/s of both and the ratio vlpar / PyTorch, plus vlpar's peak memory.
Both sides run in turn, on the same machine, in the same invocation (this machine is shared and noisy: compare
only the ratio). Usage:
  .venv/bin/python tools/bench/qwen3vl_step_vs_torch.py [--bench build/cpu/examples/qwen3vl/qwen3vl-bench]
        [--threads 2] [--steps 3] [--configs tiny,100m] [--work /tmp/vlpar_bench]
"""
import argparse
import inspect
import json
import os
import statistics
import subprocess
import sys
import time

import torch
from safetensors.torch import save_file
from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

VISION_START, VISION_END, IMAGE_PAD, VIDEO_PAD = 4, 5, 6, 7
FIRST_TEXT_ID = 8

CONFIGS = {
    # The golden dense fixture's sizes (tests/fixtures/qwen3vl/dense) with a longer sequence.
    "tiny": dict(vocab=256, hidden=64, inter=128, layers=3, heads=4, kv=2, hd=16, mrope=[4, 2, 2],
                 v_hidden=32, v_depth=3, v_heads=2, v_inter=64, patch=4, pos=64, deepstack=[0, 1],
                 text_tokens=192, image_grids=[(1, 8, 8), (1, 12, 8)]),
    # ~100M parameters: a 12-layer 640-wide LM with a 32k vocabulary and a 6-block 256-wide ViT on 16-pixel
    # patches; two 224×224-ish images (196 and 256 patches).
    "100m": dict(vocab=32000, hidden=640, inter=1792, layers=12, heads=10, kv=5, hd=64, mrope=[12, 10, 10],
                 v_hidden=256, v_depth=6, v_heads=4, v_inter=1024, patch=16, pos=2304, deepstack=[1, 3, 5],
                 text_tokens=448, image_grids=[(1, 14, 14), (1, 16, 16)]),
}


def build_model(c, attn):
    text = dict(vocab_size=c["vocab"], hidden_size=c["hidden"], intermediate_size=c["inter"],
                num_hidden_layers=c["layers"], num_attention_heads=c["heads"], num_key_value_heads=c["kv"],
                head_dim=c["hd"], hidden_act="silu", max_position_embeddings=8192, rms_norm_eps=1e-6,
                rope_theta=5e6, rope_scaling={"rope_type": "default", "mrope_section": c["mrope"],
                                              "mrope_interleaved": True},
                attention_bias=False, attention_dropout=0.0, tie_word_embeddings=False, use_cache=False)
    vision = dict(depth=c["v_depth"], hidden_size=c["v_hidden"], hidden_act="gelu_pytorch_tanh",
                  intermediate_size=c["v_inter"], num_heads=c["v_heads"], in_channels=3, patch_size=c["patch"],
                  spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=c["hidden"],
                  num_position_embeddings=c["pos"], deepstack_visual_indexes=c["deepstack"])
    cfg = Qwen3VLConfig(text_config=text, vision_config=vision, image_token_id=IMAGE_PAD, video_token_id=VIDEO_PAD,
                        vision_start_token_id=VISION_START, vision_end_token_id=VISION_END,
                        tie_word_embeddings=False)
    cfg._attn_implementation = attn
    torch.manual_seed(0)
    return Qwen3VLForConditionalGeneration._from_config(cfg, dtype=torch.float32)


def build_batch(c, gen):
    """One sample: text, image A, text, image B, text. Labels: the text tokens (vision tokens ignored)."""
    ids = []
    third = c["text_tokens"] // 3
    for i, g in enumerate(c["image_grids"]):
        ids += torch.randint(FIRST_TEXT_ID, c["vocab"], (third,), generator=gen).tolist()
        ids += [VISION_START] + [IMAGE_PAD] * (g[0] * g[1] * g[2] // 4) + [VISION_END]
    ids += torch.randint(FIRST_TEXT_ID, c["vocab"], (c["text_tokens"] - 2 * third,), generator=gen).tolist()
    input_ids = torch.tensor(ids, dtype=torch.int64)
    labels = input_ids.clone()
    labels[(input_ids == IMAGE_PAD) | (input_ids == VISION_START) | (input_ids == VISION_END)] = -100
    patches = sum(t * h * w for t, h, w in c["image_grids"])
    pixels = torch.randn(patches, 3 * 2 * c["patch"] ** 2, generator=gen)
    grid = torch.tensor(c["image_grids"], dtype=torch.int64)
    return input_ids, labels, pixels, grid


def torch_step_times(model, batch, steps):
    input_ids, labels, pixels, grid = batch
    model.train()
    extra = {}
    if "mm_token_type_ids" in inspect.signature(model.forward).parameters:  # transformers >= 5: text 0, image 1
        extra["mm_token_type_ids"] = (input_ids == IMAGE_PAD).to(torch.int32)[None]
    times, loss = [], None
    for _ in range(steps + 1):  # the first step warms up
        t0 = time.perf_counter()
        out = model(input_ids=input_ids[None], attention_mask=torch.ones_like(input_ids)[None], labels=labels[None],
                    pixel_values=pixels, image_grid_thw=grid, **extra)
        out.loss.backward()
        times.append(time.perf_counter() - t0)
        loss = out.loss.item()
        model.zero_grad(set_to_none=True)
    return statistics.median(times[1:]), loss, times[1:]


def prepare(name, work):
    """The model (HF format) and batch file of config `name` under work/name: (directory, model, batch)."""
    c = CONFIGS[name]
    d = os.path.join(work, name)
    os.makedirs(d, exist_ok=True)
    model = build_model(c, "sdpa")
    model.save_pretrained(d, safe_serialization=True)
    batch = build_batch(c, torch.Generator().manual_seed(1))
    input_ids, labels, pixels, grid = batch
    save_file({"input_ids": input_ids, "labels": labels,
               "cu_seqlens": torch.tensor([0, input_ids.numel()], dtype=torch.int64),
               "pixel_values": pixels, "image_grid_thw": grid}, os.path.join(d, "batch.safetensors"))
    return d, model, batch


def main(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bench", default="build/cpu/examples/qwen3vl/qwen3vl-bench")
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--configs", default="tiny,100m")
    p.add_argument("--work", default="/tmp/vlpar_qwen3vl_bench")
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    rows = []
    for name in a.configs.split(","):
        c = CONFIGS[name]
        d, model, batch = prepare(name, a.work)
        input_ids, labels, pixels, grid = batch
        n_params = sum(x.numel() for x in model.parameters())
        # vlpar and torch alternate: vlpar, torch sdpa, torch eager.
        out = subprocess.run([a.bench, "--model", d, "--input", os.path.join(d, "batch.safetensors"), "--steps",
                              str(a.steps), "--warmup", "1", "--threads", str(a.threads), "--json"],
                             check=True, capture_output=True, text=True)
        v = json.loads(out.stdout.strip().splitlines()[-1])
        t_sdpa, loss_sdpa, _ = torch_step_times(model, batch, a.steps)
        eager = build_model(c, "eager")
        eager.load_state_dict(model.state_dict())
        t_eager, _, _ = torch_step_times(eager, batch, a.steps)
        tokens = input_ids.numel()
        rows.append((name, n_params, tokens, v, t_sdpa, t_eager, loss_sdpa))
        print(f"[{name}] {n_params / 1e6:.1f} M params, {tokens} tokens, {int(grid.prod(-1).sum())} patches, "
              f"{a.threads} threads", flush=True)
        print(f"  vlpar  : {1e3 * v['step_s']:.1f} ms/step, {v['tokens_per_s']:.1f} tokens/s, "
              f"{v['gflops_per_s']:.2f} GFLOP/s, peak {v['peak_mib']:.1f} MiB "
              f"({v['activation_peak_mib']:.1f} MiB above params+grads), loss {v['loss']:.5f}")
        print(f"  torch  : sdpa {1e3 * t_sdpa:.1f} ms/step ({tokens / t_sdpa:.1f} tokens/s), eager "
              f"{1e3 * t_eager:.1f} ms/step, loss {loss_sdpa:.5f}")
        print(f"  ratio  : vlpar/torch-sdpa tokens/s = {t_sdpa / v['step_s']:.2f}x, "
              f"vlpar/torch-eager = {t_eager / v['step_s']:.2f}x", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
