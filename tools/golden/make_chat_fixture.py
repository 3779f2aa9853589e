#!/usr/bin/env python3
"""Golden fixture for vlpar's conversation tokenizer (issue 5, item 5): include/vlpar/data/conversation.hpp.

For a few conversation records (single image, system prompt + multi-turn text, two images, media without
placeholders, a video, image + video, a caption-mode sample) this script
  1. writes the Qwen chat-template text itself, exactly as the template does
     ("<|im_start|>{role}\\n{content}<|im_end|>\\n" per turn, every <image> as
     "<|vision_start|><|image_pad|><|vision_end|>", every <video> as "<|vision_start|><|video_pad|><|vision_end|>",
     media without placeholders at the start of the first user turn),
  2. runs transformers' own Qwen3VLProcessor (Qwen2VLImageProcessorFast + Qwen3VLVideoProcessor + the committed
     tiny tokenizer tests/fixtures/tokenizer/tokenizer.json) on that text and the images/frames, which expands
     the pads (t·h·w/4 per image; per temporal patch "<t seconds>" + span for a video) and tokenizes,
  3. derives the labels independently of vlpar's code: the processor's ids are decoded back to the expanded text,
     re-encoded with the HF tokenizer's character offsets, and a token is supervised when it overlaps a supervised
     character range: SFT = each assistant reply's content + its "<|im_end|>"; caption mode = every character
     except the vision spans and the video timestamp text. Vision tokens are always -100.

Outputs in tests/fixtures/chat/: the PNG images and video frames, and cases.txt (records, media fields, expected
ids, labels and grids). Run from the repository root:  .venv/bin/python tools/golden/make_chat_fixture.py
Pinned: transformers 4.57.1, tokenizers 0.22.x, pillow (PNG only: lossless, so the C++ decoder sees the same pixels).
"""
import json
import os
import re

import numpy as np
import PIL
import transformers
from PIL import Image
from tokenizers import Tokenizer
from transformers import Qwen2TokenizerFast
from transformers.models.qwen2_vl.image_processing_qwen2_vl_fast import Qwen2VLImageProcessorFast
from transformers.models.qwen3_vl.processing_qwen3_vl import Qwen3VLProcessor
from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor

OUT = "tests/fixtures/chat"
TOK = "tests/fixtures/tokenizer/tokenizer.json"
IMAGE_MIN, IMAGE_MAX = 1024, 1 << 24          # the C++ test sets ConversationOptions.image to these
VIDEO_MIN, VIDEO_MAX = 4096, 25165824         # hub video_preprocessor_config.json (the C++ default)


def gradient_image(w, h, seed):
    """A smooth RGB image (compresses well as PNG) with a seeded twist, uint8 [h, w, 3]."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    a = rng.integers(1, 6, 3)
    b = rng.integers(0, 255, 3)
    img = np.stack([(b[c] + a[c] * x + (c + 1) * y) % 256 for c in range(3)], axis=-1)
    return img.astype(np.uint8)


def save_png(arr, name):
    Image.fromarray(arr, "RGB").save(f"{OUT}/{name}", optimize=True)
    return name


def template(turns, n_images, n_videos):
    """The Qwen2/3-VL chat template text for ShareGPT turns, with one span per media item."""
    img = "<|vision_start|><|image_pad|><|vision_end|>"
    vid = "<|vision_start|><|video_pad|><|vision_end|>"
    has_img = any("<image>" in t["value"] for t in turns)
    has_vid = any("<video>" in t["value"] for t in turns)
    role = {"system": "system", "human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant"}
    text, prepended = "", False
    for t in turns:
        r = role[t["from"]]
        content = t["value"].replace("<image>", img).replace("<video>", vid)
        if r == "user" and not prepended:
            prepended = True
            content = (img * n_images if not has_img else "") + (vid * n_videos if not has_vid else "") + content
        text += f"<|im_start|>{r}\n{content}<|im_end|>\n"
    return text


def labels_for(ids, tok, mode, special):
    """Labels from character ranges of the expanded text (see the module docstring)."""
    text = tok.decode(ids, skip_special_tokens=False)
    enc = tok.encode(text, add_special_tokens=False)
    assert enc.ids == ids, "decode + re-encode does not reproduce the processor's ids"
    sup = np.zeros(len(text) + 1, dtype=bool)
    if mode == "sft":
        head = "<|im_start|>assistant\n"
        for m in re.finditer(re.escape(head), text):
            end = text.index("<|im_end|>", m.end()) + len("<|im_end|>")
            sup[m.end():end] = True
    else:
        sup[:len(text)] = True
    # Vision markup is never supervised: spans and the timestamp text right before a video span.
    for m in re.finditer(r"(<\d+\.\d seconds>)?<\|vision_start\|>(<\|image_pad\|>|<\|video_pad\|>)*<\|vision_end\|>",
                         text):
        sup[m.start():m.end()] = False
    labels = []
    for i, (s, e) in zip(enc.ids, enc.offsets):
        labels.append(i if sup[s:e].any() and i not in special else -100)
    return labels


def main():
    assert transformers.__version__ == "4.57.1", transformers.__version__
    os.makedirs(OUT, exist_ok=True)
    hf_tok = Qwen2TokenizerFast(tokenizer_file=TOK)
    raw_tok = Tokenizer.from_file(TOK)
    ip = Qwen2VLImageProcessorFast(size={"shortest_edge": IMAGE_MIN, "longest_edge": IMAGE_MAX},
                                   patch_size=16, temporal_patch_size=2, merge_size=2)
    vp = Qwen3VLVideoProcessor(size={"shortest_edge": VIDEO_MIN, "longest_edge": VIDEO_MAX})
    proc = Qwen3VLProcessor(image_processor=ip, tokenizer=hf_tok, video_processor=vp)
    special = {raw_tok.token_to_id(t) for t in ["<|vision_start|>", "<|vision_end|>", "<|image_pad|>",
                                                "<|video_pad|>"]}

    img_a = save_png(gradient_image(64, 48, 1), "img_a.png")     # -> 64x64, grid (1, 4, 4), 4 tokens
    img_b = save_png(gradient_image(100, 70, 2), "img_b.png")    # -> 64x96, grid (1, 4, 6), 6 tokens
    img_c = save_png(gradient_image(40, 150, 3), "img_c.png")    # tall
    frames = [gradient_image(72, 40, 10 + k) for k in range(9)]  # 9 frames at 3 fps -> 6 sampled, grid t = 3
    frame_names = [save_png(f, f"vid_{k:02d}.png") for k, f in enumerate(frames)]
    video = np.stack(frames)

    cases = [
        dict(name="single_image", mode="sft",
             record={"id": "single_image", "conversations": [
                 {"from": "human", "value": "<image>\nWhat colour is the top-left quadrant?"},
                 {"from": "gpt", "value": "Red."}]},
             fields=[("jpg", img_a)], images=[img_a]),
        dict(name="system_multi_turn", mode="sft",
             record={"conversations": [
                 {"from": "system", "value": "You are a helpful assistant."},
                 {"from": "human", "value": "Hi there!  How are you?"},
                 {"from": "gpt", "value": "\n\nFine, thanks: 1 2  3 \u2014 caf\u0065\u0301 \u00e9t\u00e9."},
                 {"from": "human", "value": "And now?\n"},
                 {"from": "gpt", "value": "  Still fine.\n"}]},
             fields=[], images=[]),
        dict(name="two_images", mode="sft",
             record={"conversations": [
                 {"from": "human", "value": "Compare <image> and <image>: which is brighter?"},
                 {"from": "gpt", "value": "The second one."},
                 {"from": "human", "value": "Sure?"},
                 {"from": "gpt", "value": "Yes, it is."}]},
             fields=[("0.png", img_a), ("1.png", img_b)], images=[img_a, img_b]),
        dict(name="messages_no_placeholder", mode="sft",
             record={"messages": [
                 {"role": "user", "content": "Describe both pictures."},
                 {"role": "assistant", "content": "Two gradients."}], "images": ["x/img_b.png", "img_c.png"]},
             fields=[("img_b.png", img_b), ("img_c.png", img_c)], images=[img_b, img_c]),
        dict(name="video", mode="sft",
             record={"conversations": [
                 {"from": "human", "value": "What happens in <video>?"},
                 {"from": "gpt", "value": "Colours shift."}],
                 "video": {"frames": [f"{n}" for n in frame_names], "fps": 3.0}},
             fields=[(n, n) for n in frame_names], videos=[(video, 3.0)]),
        dict(name="image_and_video", mode="sft",
             record={"conversations": [
                 {"from": "system", "value": "Be brief."},
                 {"from": "human", "value": "<image>Is this frame in <video> too?"},
                 {"from": "gpt", "value": "No."}],
                 "image": "img_c.png", "video": frame_names, "fps": 3.0},
             fields=[("img_c.png", img_c)] + [(n, n) for n in frame_names], images=[img_c], videos=[(video, 3.0)]),
        dict(name="caption_text_mode", mode="text",
             record={"conversations": [
                 {"from": "human", "value": "Describe <video> and <image>"},
                 {"from": "gpt", "value": "A caption."}],
                 "video": frame_names, "video_fps": 3.0},
             fields=[("png", img_a)] + [(n, n) for n in frame_names], images=[img_a], videos=[(video, 3.0)]),
    ]

    lines = ["# made by tools/golden/make_chat_fixture.py (transformers %s, tokenizers via %s, pillow %s)"
             % (transformers.__version__, TOK, PIL.__version__),
             "# case <name> <sft|text> / record <json> / field <ext> <file> / ids <csv> / labels <csv> /",
             "# image_grids <t,h,w;...> / video_grids <t,h,w;...> / end"]
    for c in cases:
        turns = c["record"].get("conversations")
        if turns is None:
            turns = [{"from": m["role"], "value": m["content"]} for m in c["record"]["messages"]]
        images = [np.array(Image.open(f"{OUT}/{n}").convert("RGB")) for n in c.get("images", [])]
        videos = c.get("videos", [])
        text = template(turns, len(images), len(videos))
        kw = {}
        if images:
            kw["images"] = images
        if videos:
            kw["videos"] = [v for v, _ in videos]
            kw["video_metadata"] = [{"fps": fps, "total_num_frames": len(v)} for v, fps in videos]
        out = proc(text=[text], **kw)
        ids = [int(i) for i in out["input_ids"][0]]
        labels = labels_for(ids, raw_tok, c["mode"], special)
        igrid = out["image_grid_thw"].tolist() if images else []
        vgrid = out["video_grid_thw"].tolist() if videos else []
        lines.append(f"case {c['name']} {c['mode']}")
        lines.append("record " + json.dumps(c["record"], ensure_ascii=False))
        for ext, f in c["fields"]:
            lines.append(f"field {ext} {f}")
        lines.append("ids " + ",".join(map(str, ids)))
        lines.append("labels " + ",".join(map(str, labels)))
        lines.append("image_grids " + ";".join(",".join(map(str, g)) for g in igrid))
        lines.append("video_grids " + ";".join(",".join(map(str, g)) for g in vgrid))
        lines.append("end")
        n_sup = sum(1 for l in labels if l != -100)
        print(f"{c['name']}: {len(ids)} tokens, {n_sup} supervised, image grids {igrid}, video grids {vgrid}")
    with open(f"{OUT}/cases.txt", "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
