#!/usr/bin/env python3
"""Greedy-generation golden for vlpar's qwen3vl::Generator (examples/qwen3vl/generate.hpp).

Loads the committed tiny fixture models tests/fixtures/qwen3vl/{dense,moe} with transformers 4.57.1 (fp32, eager
attention, eval mode), builds two prompts from each fixture's packed batch — sample 0 (two images) and sample 1 (one
video with two temporal patches), each truncated a few text tokens after its last vision span — and runs HF
`generate` greedily (do_sample=False, use_cache=True, max_new_tokens 12, no eos). HF's Qwen3-VL computes the MRoPE
positions of the prompt with get_rope_index at prefill and caches rope_deltas; each decode step then uses
position = cache_position + rope_delta on all three rows (modeling_qwen3_vl.py, Qwen3VLModel.forward). The C++ test
(examples/qwen3vl/tests/test_generate.cpp) must reproduce the generated ids exactly.

Writes tests/fixtures/qwen3vl/generate.json:
  {"transformers": "4.57.1", "max_new_tokens": 12, "cases": [
     {"model": "dense", "sample": 0, "prompt_len": 27, "generated": [..12 ids..],
      "top2_gap": [..12 floats..],    # logit(top1) - logit(top2) at each step: how far each argmax is from a tie
      "max_abs_logit": float},        # largest |logit| over the steps (the scale of the test's 1e-5 bound)
     ...]}
The prompt of a case is the first prompt_len tokens of that sample, with all of the sample's images / videos.

Usage (from the repository root; CPU only, a few seconds):
  .venv/bin/python tools/golden/make_generate_fixture.py [--out tests/fixtures/qwen3vl/generate.json]
"""
import argparse
import json
import os

import safetensors.torch
import torch
import transformers
from transformers import Qwen3VLForConditionalGeneration, Qwen3VLMoeForConditionalGeneration

PINNED_TRANSFORMERS = "4.57.1"
MAX_NEW_TOKENS = 12
TEXT_AFTER_VISION = 2  # prompt = tokens up to the last <|vision_end|> plus this many text tokens
VISION_END = 5         # the fixtures' <|vision_end|> id (tools/golden/qwen3vl_golden.py)
FIXTURES = os.path.join("tests", "fixtures", "qwen3vl")


def sample_inputs(batch, s):
    """input_ids [1, n] and the vision tensors of sample s of a packed fixture batch."""
    cu = batch["cu_seqlens"].tolist()
    ids = batch["input_ids"][cu[s]:cu[s + 1]]
    out = {}
    for kind, pix, grid in (("images", "pixel_values", "image_grid_thw"),
                            ("videos", "pixel_values_videos", "video_grid_thw")):
        per = batch[f"{kind}_per_sample"].tolist()
        grids = batch[grid] if grid in batch else torch.zeros(0, 3, dtype=torch.int64)
        first = sum(per[:s])
        rows = [int(g.prod()) for g in grids]
        begin = sum(rows[:first])
        end = begin + sum(rows[first:first + per[s]])
        if per[s] > 0:
            out[pix] = batch[pix][begin:end]
            out[grid] = grids[first:first + per[s]]
    return ids, out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(FIXTURES, "generate.json"))
    ap.add_argument("--allow-other-transformers", action="store_true")
    args = ap.parse_args()
    if transformers.__version__ != PINNED_TRANSFORMERS and not args.allow_other_transformers:
        raise SystemExit(f"transformers {transformers.__version__} != pinned {PINNED_TRANSFORMERS}")
    torch.set_num_threads(1)
    torch.manual_seed(0)

    cases = []
    for name, cls in (("dense", Qwen3VLForConditionalGeneration), ("moe", Qwen3VLMoeForConditionalGeneration)):
        d = os.path.join(FIXTURES, name)
        model = cls.from_pretrained(d, dtype=torch.float32, attn_implementation="eager").eval()
        batch = safetensors.torch.load_file(os.path.join(d, "batch.safetensors"))
        for s in (0, 1):
            ids, vision = sample_inputs(batch, s)
            last_end = max(i for i, t in enumerate(ids.tolist()) if t == VISION_END)
            n = last_end + 1 + TEXT_AFTER_VISION
            assert n <= ids.numel(), (name, s, n)
            prompt = ids[:n].unsqueeze(0)
            with torch.no_grad():
                out = model.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt), **vision,
                                     do_sample=False, use_cache=True, max_new_tokens=MAX_NEW_TOKENS,
                                     min_new_tokens=MAX_NEW_TOKENS, eos_token_id=None, pad_token_id=0,
                                     output_logits=True, return_dict_in_generate=True)
            gen = out.sequences[0, n:].tolist()
            assert len(gen) == MAX_NEW_TOKENS, gen
            gaps, scale = [], 0.0
            for step_logits in out.logits:
                scale = max(scale, float(step_logits.abs().max()))
                top = torch.topk(step_logits[0].double(), 2).values
                gaps.append(float(top[0] - top[1]))
            cases.append({"model": name, "sample": s, "prompt_len": n, "generated": gen,
                          "top2_gap": [round(g, 6) for g in gaps], "max_abs_logit": round(scale, 6)})
            print(f"{name} sample {s}: prompt {n} tokens -> {gen} (smallest top-2 gap {min(gaps):.3g}, "
                  f"max |logit| {scale:.3g})")

    doc = {"transformers": transformers.__version__, "torch": torch.__version__,
           "command": "tools/golden/make_generate_fixture.py", "max_new_tokens": MAX_NEW_TOKENS, "cases": cases}
    with open(args.out, "w") as f:  # one case per line
        head = json.dumps({k: v for k, v in doc.items() if k != "cases"})[:-1]
        f.write(head + ', "cases": [\n' + ",\n".join(json.dumps(c) for c in cases) + "\n]}\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
