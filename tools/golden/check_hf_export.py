#!/usr/bin/env python3
"""Checks that an HF directory exported by vlpar loads in transformers and gives the fixture's logits.

  .venv/bin/python tools/golden/check_hf_export.py EXPORTED_DIR FIXTURE_DIR
EXPORTED_DIR is written by vlpar (e.g. `qwen3vl::export_hf`, or the trainer's export); FIXTURE_DIR is a
tools/golden fixture with the same weights (batch.safetensors + expected.safetensors). Loads EXPORTED_DIR with
AutoModelForImageTextToText-style from_pretrained (fp32, eager), runs every sample of the fixture's pack alone and
compares the concatenated logits with the fixture's; exits 1 on a mismatch beyond 1e-5 relative.
"""
import sys

import torch
from safetensors.torch import load_file
from transformers import AutoConfig, Qwen3VLForConditionalGeneration, Qwen3VLMoeForConditionalGeneration


def main(exported, fixture):
    cfg = AutoConfig.from_pretrained(exported)
    cls = Qwen3VLMoeForConditionalGeneration if cfg.model_type == "qwen3_vl_moe" else Qwen3VLForConditionalGeneration
    model = cls.from_pretrained(exported, dtype=torch.float32, attn_implementation="eager")
    model.train()
    b = load_file(f"{fixture}/batch.safetensors")
    want = load_file(f"{fixture}/expected.safetensors")["logits"]
    cu = b["cu_seqlens"].tolist()
    img, vid = b["images_per_sample"].tolist(), b["videos_per_sample"].tolist()
    ig, vg = b["image_grid_thw"], b["video_grid_thw"]
    irow = vrow = ii = vi = 0
    logits = []
    with torch.no_grad():
        for s in range(len(cu) - 1):
            ids = b["input_ids"][cu[s]:cu[s + 1]][None]
            kw = {}
            if img[s]:
                g = ig[ii:ii + img[s]]
                n = int(g.prod(-1).sum())
                kw.update(pixel_values=b["pixel_values"][irow:irow + n], image_grid_thw=g)
                ii, irow = ii + img[s], irow + n
            if vid[s]:
                g = vg[vi:vi + vid[s]]
                n = int(g.prod(-1).sum())
                kw.update(pixel_values_videos=b["pixel_values_videos"][vrow:vrow + n], video_grid_thw=g)
                vi, vrow = vi + vid[s], vrow + n
            out = model(input_ids=ids, attention_mask=torch.ones_like(ids), **kw)
            logits.append(out.logits[0])
    got = torch.cat(logits)
    rel = ((got - want).abs().max() / want.abs().max()).item()
    print(f"{exported}: {cls.__name__} loaded by transformers; logits max relative error vs {fixture}: {rel:.2e}")
    return 0 if rel <= 1e-5 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
