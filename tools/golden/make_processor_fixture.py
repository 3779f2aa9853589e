#!/usr/bin/env python3
"""Golden fixtures for vlpar's image decoder and Qwen3-VL image/video processor (issue 5 items 2-3).

Writes tests/fixtures/processor/:
  *.jpg, *.png         small encoded test images (synthetic, deterministic; varied sizes, modes and EXIF)
  golden.safetensors   <file>.rgb  U8 [H, W, 3]  what PIL shows: Image.open -> ImageOps.exif_transpose ->
                                                 convert("RGB") (or the documented expectation where vlpar
                                                 deliberately differs from PIL, see cases.txt)
                       <case>.fast U8 [N, 1536]  HF Qwen2VLImageProcessorFast pixel_values as levels v = 127.5·x + 127.5
                       <case>.slow U8 [N, 1536]  HF Qwen2VLImageProcessor (PIL) pixel_values as levels
                       <case>.grid I64 [3]       image_grid_thw row (fast == slow, asserted)
                       video.frames U8 [T, H, W, 3], video.fast U8 [N, 1536], video.grid I64 [3]
  cases.txt            one line per check (formats below), read by tests/unit/test_image_*.cpp
  smart_resize.txt     HF smart_resize (image and video) on many sizes, errors included
  video_sampling.txt   HF Qwen3VLVideoProcessor.sample_frames + Qwen3VLProcessor._calculate_timestamps

Levels are lossless for the fast processor: its output is exactly float32((v − 127.5) / 127.5) for an integer v
(the script asserts this bit for bit). The slow processor computes ((v·(1/255)) − 0.5) / 0.5 in float32/float64,
which reconstructs to within 1e-6 (asserted).

Pinned: transformers 4.57.1, torch 2.15.0, torchvision 0.29.2, Pillow 13.0.0 (the repo's .venv). Run from the repo
root:  .venv/bin/python tools/golden/make_processor_fixture.py
"""
import io
import os
import struct
import sys
import zlib

import numpy as np
import PIL
import torch
import transformers
from PIL import Image, ImageOps
from safetensors.numpy import save_file

from transformers.models.qwen2_vl.image_processing_qwen2_vl import Qwen2VLImageProcessor, smart_resize
from transformers.models.qwen2_vl.image_processing_qwen2_vl_fast import Qwen2VLImageProcessorFast
from transformers.models.qwen3_vl.processing_qwen3_vl import Qwen3VLProcessor
from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor
from transformers.models.qwen3_vl.video_processing_qwen3_vl import smart_resize as video_smart_resize
from transformers.video_utils import VideoMetadata

OUT = "tests/fixtures/processor"
PATCH, TEMPORAL, MERGE = 16, 2, 2


# ---- synthetic content ----------------------------------------------------------------------------------------
def synth(w, h, seed, channels=3):
    """Smooth gradients + saturated rectangles (edges that make bicubic overshoot and clip) + mild noise."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    img = np.empty((h, w, channels))
    for c in range(channels):
        fx, fy = rng.uniform(0.02, 0.3, 2)
        img[..., c] = 128 + 100 * np.sin(x * fx + y * fy + rng.uniform(0, 6.3))
    for _ in range(3):
        x0, y0 = rng.integers(0, w), rng.integers(0, h)
        x1, y1 = x0 + rng.integers(2, max(3, w // 2)), y0 + rng.integers(2, max(3, h // 2))
        img[y0:y1, x0:x1] = rng.choice([0.0, 255.0], channels)
    img += rng.normal(0, 4, img.shape)
    return np.clip(np.rint(img), 0, 255).astype(np.uint8)


# ---- a minimal PNG writer (16-bit, sub-byte depths, palettes, Adam7), since PIL writes few of these ----------
ADAM7 = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]


def png_chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def pack_rows(samples, bit_depth):
    """samples [h, w, c] ints -> filter-0 scanlines."""
    out = b""
    for row in samples:
        flat = row.reshape(-1)
        if bit_depth == 16:
            data = flat.astype(">u2").tobytes()
        elif bit_depth == 8:
            data = flat.astype(np.uint8).tobytes()
        else:
            per = 8 // bit_depth
            padded = np.concatenate([flat, np.zeros((-len(flat)) % per, flat.dtype)]).reshape(-1, per)
            shifts = np.array([8 - bit_depth * (k + 1) for k in range(per)])
            data = (padded.astype(np.uint32) << shifts).sum(1).astype(np.uint8).tobytes()
        out += b"\x00" + data
    return out


def write_png(path, samples, bit_depth, color_type, interlace=False, palette=None, trns=None, exif=None):
    h, w = samples.shape[:2]
    body = png_chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, bit_depth, color_type, 0, 0, 1 if interlace else 0))
    if palette is not None:
        body += png_chunk(b"PLTE", bytes(np.asarray(palette, np.uint8).reshape(-1)))
    if trns is not None:
        body += png_chunk(b"tRNS", trns)
    if exif is not None:
        body += png_chunk(b"eXIf", exif)
    if interlace:
        raw = b"".join(pack_rows(samples[y0::dy, x0::dx], bit_depth) for x0, y0, dx, dy in ADAM7
                       if samples[y0::dy, x0::dx].size)
    else:
        raw = pack_rows(samples, bit_depth)
    data = b"\x89PNG\r\n\x1a\n" + body + png_chunk(b"IDAT", zlib.compress(raw, 9)) + png_chunk(b"IEND", b"")
    with open(path, "wb") as f:
        f.write(data)


# ---- EXIF ---------------------------------------------------------------------------------------------------
def exif_tiff(orientation, big_endian, typ=3):
    """A TIFF block with IFD0 = {0x0110 Model "abc", 0x0112 Orientation}; typ 3 = SHORT, 4 = LONG."""
    e = ">" if big_endian else "<"
    value = struct.pack(e + "HH", orientation, 0) if typ == 3 else struct.pack(e + "I", orientation)
    entries = [(0x0110, 2, 4, b"abc\x00"), (0x0112, typ, 1, value)]
    ifd = struct.pack(e + "H", len(entries))
    ifd += b"".join(struct.pack(e + "HHI", t, ty, n) + v for t, ty, n, v in entries) + struct.pack(e + "I", 0)
    return (b"MM" if big_endian else b"II") + struct.pack(e + "HI", 42, 8) + ifd


def jpeg_insert_after_soi(data, segment):
    assert data[:2] == b"\xff\xd8"
    return data[:2] + segment + data[2:]


def app1(payload):
    return b"\xff\xe1" + struct.pack(">H", len(payload) + 2) + payload


def strip_app14(data):
    """Removes the Adobe APP14 segment (FF EE) of a JPEG."""
    i = 2
    while i < len(data):
        assert data[i] == 0xFF
        marker, length = data[i + 1], struct.unpack(">H", data[i + 2:i + 4])[0]
        if marker == 0xEE:
            return data[:i] + data[i + 2 + length:]
        if marker == 0xDA:
            break
        i += 2 + length
    raise AssertionError("no APP14 segment")


def cmyk_to_rgb(cmyk):
    """PIL's cmyk2rgb on ink values (0 = no ink): R = (255 − K) − MULDIV255(C, 255 − K)."""
    c = cmyk.astype(np.int64)
    nk = 255 - c[..., 3:4]
    t = c[..., :3] * nk + 128
    return (nk - (((t >> 8) + t) >> 8)).astype(np.uint8)


# ---- HF processors ------------------------------------------------------------------------------------------
def keys_cubic(x, a=-0.5):
    x = abs(x)
    if x < 1.0:
        return ((a + 2) * x - (a + 3)) * x * x + 1
    if x < 2.0:
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
    return 0.0


def pil_pass(img, out_size, axis):
    """One pass of Pillow's 8-bit bicubic resample (22-bit fixed point) along `axis` of an int array."""
    in_size = img.shape[axis]
    scale = in_size / out_size
    support = 2.0 * max(scale, 1.0)
    img = np.moveaxis(img.astype(np.int64), axis, -1)
    out = np.empty(img.shape[:-1] + (out_size,), np.int64)
    for i in range(out_size):
        center = (i + 0.5) * scale
        xmin = max(int(center - support + 0.5), 0)
        n = min(int(center + support + 0.5), in_size) - xmin
        w = [keys_cubic((j + xmin - center + 0.5) / max(scale, 1.0)) for j in range(n)]
        total = sum(w)
        k = [int(-0.5 + v / total * (1 << 22)) if v < 0 else int(0.5 + v / total * (1 << 22)) for v in w]
        acc = np.full(img.shape[:-1], 1 << 21, np.int64)
        for j in range(n):
            acc += img[..., xmin + j] * k[j]
        out[..., i] = np.clip(acc >> 22, 0, 255)
    return np.moveaxis(out, -1, axis)


def pil_pass_order(img, out_w, out_h):
    """'H' or 'V': which pass Pillow's resize runs first for this size pair (found by reproducing its output)."""
    arr = np.asarray(img).astype(np.int64)
    ref = np.asarray(img.resize((out_w, out_h), Image.BICUBIC)).astype(np.int64)
    if arr.shape[:2] == (out_h, out_w):
        return "H"
    h_first, v_first = arr, arr
    if out_w != arr.shape[1]:
        h_first = pil_pass(h_first, out_w, 1)
    if out_h != arr.shape[0]:
        h_first = pil_pass(h_first, out_h, 0)
    if out_h != arr.shape[0]:
        v_first = pil_pass(v_first, out_h, 0)
    if out_w != arr.shape[1]:
        v_first = pil_pass(v_first, out_w, 1)
    if np.array_equal(h_first, ref):
        return "H"
    assert np.array_equal(v_first, ref), "Pillow's resize matches neither pass order"
    return "V"


def processors(min_pixels, max_pixels):
    common = dict(patch_size=PATCH, temporal_patch_size=TEMPORAL, merge_size=MERGE, image_mean=[0.5] * 3,
                  image_std=[0.5] * 3)
    fast = Qwen2VLImageProcessorFast(size={"shortest_edge": min_pixels, "longest_edge": max_pixels}, **common)
    slow = Qwen2VLImageProcessor(min_pixels=min_pixels, max_pixels=max_pixels, **common)
    return fast, slow


def fast_levels(pv):
    pv = pv.numpy().astype(np.float32)
    lv = np.rint(pv.astype(np.float64) * 127.5 + 127.5)
    assert lv.min() >= 0 and lv.max() <= 255
    back = (lv.astype(np.float32) - np.float32(127.5)) / np.float32(127.5)
    assert np.array_equal(back.view(np.uint32), pv.view(np.uint32)), "fast output is not (v - 127.5) / 127.5"
    return lv.astype(np.uint8)


def slow_levels(pv):
    pv = np.asarray(pv, np.float32)
    lv = np.rint(pv.astype(np.float64) * 127.5 + 127.5)
    back = (lv - 127.5) / 127.5
    assert np.abs(back - pv).max() <= 1e-6, np.abs(back - pv).max()
    return lv.astype(np.uint8)


def main():
    assert transformers.__version__ == "4.57.1", transformers.__version__
    torch.set_num_threads(1)
    os.makedirs(OUT, exist_ok=True)
    tensors, lines = {}, []
    pil_view = lambda path: ImageOps.exif_transpose(Image.open(path)).convert("RGB")

    def save_jpeg(name, arr, mode, **kw):
        Image.fromarray(arr, mode).save(f"{OUT}/{name}", "JPEG", **kw)

    def expect_pil(name, note="pil"):
        tensors[f"{name}.rgb"] = np.asarray(pil_view(f"{OUT}/{name}"))
        lines.append(f"decode {name} {note}")

    def process(case, name, min_pixels, max_pixels):
        fast, slow = processors(min_pixels, max_pixels)
        img = pil_view(f"{OUT}/{name}")  # HF processors do not apply EXIF: give them PIL's transposed view
        f = fast(images=[img], return_tensors="pt")
        s = slow(images=[img], return_tensors="np")
        grid = f["image_grid_thw"][0].numpy().astype(np.int64)
        assert np.array_equal(grid, np.asarray(s["image_grid_thw"][0])), (case, grid, s["image_grid_thw"])
        tensors[f"{case}.fast"] = fast_levels(f["pixel_values"])
        tensors[f"{case}.slow"] = slow_levels(s["pixel_values"])
        tensors[f"{case}.grid"] = grid
        diff = np.abs(tensors[f"{case}.fast"].astype(int) - tensors[f"{case}.slow"].astype(int))
        rh, rw = int(grid[1]) * PATCH, int(grid[2]) * PATCH
        order = pil_pass_order(img, rw, rh)
        lines.append(f"process {case} {name} {min_pixels} {max_pixels} {order}")
        print(f"{case:14s} {img.size[0]:4d}x{img.size[1]:<4d} grid {grid.tolist()} fast-vs-slow max {diff.max()} "
              f"levels, {np.count_nonzero(diff)} of {diff.size} differ; Pillow pass order {order}")

    # Processed cases (min/max pixels chosen so outputs stay small): tiny max_pixels (downscale 2-4x), min_pixels
    # upscale, one axis up and one down, banker's rounding of 80/32 = 2.5 -> 2, no resize at all.
    save_jpeg("rgb_down.jpg", synth(200, 130, 1), "RGB", quality=92)
    save_jpeg("rgb_up.jpg", synth(40, 30, 2), "RGB", quality=92)
    save_jpeg("rgb_mixed.jpg", synth(110, 52, 3), "RGB", quality=92)
    save_jpeg("gray.jpg", synth(70, 70, 4, 1)[..., 0], "L", quality=90)
    save_jpeg("progressive.jpg", synth(96, 80, 5), "RGB", quality=90, progressive=True, subsampling=0)
    cmyk = synth(60, 40, 6, 4)
    save_jpeg("cmyk_adobe.jpg", cmyk, "CMYK", quality=95)
    with open(f"{OUT}/cmyk_adobe.jpg", "rb") as f:
        adobe = f.read()
    with open(f"{OUT}/cmyk_plain.jpg", "wb") as f:
        f.write(strip_app14(adobe))
    rgba = np.concatenate([synth(48, 33, 7), synth(48, 33, 8, 1)], axis=2)
    Image.fromarray(rgba, "RGBA").save(f"{OUT}/rgba.png")
    pal = Image.fromarray(synth(40, 40, 9)).quantize(colors=37)
    pal.save(f"{OUT}/palette_trns.png", transparency=5)
    Image.fromarray(synth(64, 32, 10)).save(f"{OUT}/exact_size.png")

    for name in ["rgb_down.jpg", "rgb_up.jpg", "rgb_mixed.jpg", "gray.jpg", "progressive.jpg", "cmyk_adobe.jpg",
                 "rgba.png", "palette_trns.png", "exact_size.png"]:
        expect_pil(name)
    # Plain (non-Adobe) CMYK: PIL assumes Adobe polarity anyway; vlpar reads plain ink (see image_decode.hpp).
    # Expected = PIL's formula on the raw samples, which PIL's CMYK view holds inverted.
    raw_ink = 255 - np.asarray(Image.open(f"{OUT}/cmyk_plain.jpg"))
    tensors["cmyk_plain.jpg.rgb"] = cmyk_to_rgb(raw_ink)
    lines.append("decode cmyk_plain.jpg differs_from_pil:plain_cmyk_not_inverted")

    # PNG variants PIL does not write.
    g16 = synth(37, 23, 11, 1).astype(np.uint16) * 257 + np.arange(37, dtype=np.uint16)[None, :, None]
    write_png(f"{OUT}/gray16.png", g16, 16, 0)
    tensors["gray16.png.rgb"] = np.repeat((g16 >> 8).astype(np.uint8), 3, axis=2)
    lines.append("decode gray16.png differs_from_pil:high_byte_not_clip")
    rgb16 = synth(29, 31, 12).astype(np.uint16) * 256 + 77
    write_png(f"{OUT}/rgb16_interlaced.png", rgb16, 16, 2, interlace=True)
    expect_pil("rgb16_interlaced.png")
    la16 = np.concatenate([synth(21, 19, 13, 1), synth(21, 19, 14, 1)], axis=2).astype(np.uint16) * 257
    write_png(f"{OUT}/gray_alpha16.png", la16, 16, 4)
    expect_pil("gray_alpha16.png")
    g2 = synth(23, 17, 15, 1) >> 6
    write_png(f"{OUT}/gray2_interlaced.png", g2, 2, 0, interlace=True)
    expect_pil("gray2_interlaced.png")
    p4 = synth(19, 13, 16, 1) >> 4
    palette = np.random.default_rng(17).integers(0, 256, (16, 3))
    write_png(f"{OUT}/palette4_trns.png", p4, 4, 3, palette=palette, trns=bytes(range(0, 160, 10)))
    expect_pil("palette4_trns.png")

    # EXIF orientations 1..8, both byte orders, on one 24x16 JPEG; a SHORT and a LONG tag; an XMP APP1 first.
    base = io.BytesIO()
    Image.fromarray(synth(24, 16, 18)).save(base, "JPEG", quality=95)
    base = base.getvalue()
    for order in ("II", "MM"):
        for o in range(1, 9):
            name = f"exif_{order}_{o}.jpg"
            data = jpeg_insert_after_soi(base, app1(b"Exif\x00\x00" + exif_tiff(o, order == "MM")))
            if order == "MM" and o == 6:  # an XMP APP1 before the Exif one: the Exif one still counts
                data = jpeg_insert_after_soi(data, app1(b"http://ns.adobe.com/xap/1.0/\x00<x:xmpmeta/>"))
            with open(f"{OUT}/{name}", "wb") as f:
                f.write(data)
            expect_pil(name)
    with open(f"{OUT}/exif_II_8_long.jpg", "wb") as f:
        f.write(jpeg_insert_after_soi(base, app1(b"Exif\x00\x00" + exif_tiff(8, False, typ=4))))
    expect_pil("exif_II_8_long.jpg")
    write_png(f"{OUT}/exif_MM_5.png", synth(14, 9, 19), 8, 2, exif=exif_tiff(5, True))
    expect_pil("exif_MM_5.png")

    process("rgb_down", "rgb_down.jpg", 1024, 6144)      # tiny max_pixels: 200x130 -> 96x32
    process("rgb_up", "rgb_up.jpg", 4096, 1 << 24)       # min_pixels upscale: 40x30 -> 96x64
    process("rgb_mixed", "rgb_mixed.jpg", 1024, 1 << 24)  # width down 110 -> 96, height up 52 -> 64
    process("gray", "gray.jpg", 1024, 1 << 24)
    process("progressive", "progressive.jpg", 1024, 1 << 24)  # 80/32 = 2.5 rounds to 2 (banker's)
    process("cmyk_adobe", "cmyk_adobe.jpg", 1024, 1 << 24)
    process("rgba", "rgba.png", 1024, 1 << 24)
    process("palette_trns", "palette_trns.png", 1024, 1 << 24)
    process("exact_size", "exact_size.png", 1024, 1 << 24)  # 64x32: no resize
    process("exif_rot", "exif_MM_6.jpg", 1024, 1 << 24)     # rotated to 16x24; 16/32 = 0.5 rounds to 0

    # Video: 15 frames of 36x40 at 6 fps -> 5 frames [0, 4, 7, 10, 14] (3.5 and 10.5 round to even), t̄ = 4,
    # 32x32, padded to 6 frames -> grid (3, 2, 2).
    rng = np.random.default_rng(20)
    frames = np.stack([np.roll(synth(36, 40, 21), 3 * k, axis=1) // 2 + rng.integers(0, 100, (40, 36, 3),
                                                                                    dtype=np.uint8)
                       for k in range(15)]).astype(np.uint8)
    vp = Qwen3VLVideoProcessor(size={"shortest_edge": 4096, "longest_edge": 25165824})
    v = vp(videos=[frames], video_metadata=[{"fps": 6.0, "total_num_frames": 15}], return_metadata=True,
           return_tensors="pt")
    md = v["video_metadata"][0]
    ts = Qwen3VLProcessor._calculate_timestamps(None, md.frames_indices, md.fps, MERGE)
    tensors["video.frames"] = frames
    tensors["video.fast"] = fast_levels(v["pixel_values_videos"])
    tensors["video.grid"] = v["video_grid_thw"][0].numpy().astype(np.int64)
    lines.append("video 6.0 4096 25165824 " + ",".join(str(int(i)) for i in md.frames_indices) + " " +
                 ",".join(f"<{t:.1f} seconds>".replace(" ", "_") for t in ts))
    print("video grid", tensors["video.grid"].tolist(), "indices", md.frames_indices.tolist(), ts)

    save_file(tensors, f"{OUT}/golden.safetensors", metadata={
        "generator": "tools/golden/make_processor_fixture.py", "transformers": transformers.__version__,
        "torch": torch.__version__, "pillow": PIL.__version__})
    with open(f"{OUT}/cases.txt", "w") as f:
        f.write("# made by tools/golden/make_processor_fixture.py; formats:\n"
                "#   decode <file> <pil|differs_from_pil:why>           expected RGB = golden <file>.rgb\n"
                "#   process <case> <file> <min_pixels> <max_pixels> <H|V>  golden <case>.fast/.slow/.grid; H|V: the pass\n"
                "#       Pillow (the slow processor) runs first for this size pair (torch: always H)\n"
                "#   video <fps> <min_pixels> <max_pixels> <indices> <timestamps, '_' for ' '>\n")
        f.write("\n".join(lines) + "\n")

    write_smart_resize_table()
    write_video_sampling_table()


def write_smart_resize_table():
    rng = np.random.default_rng(30)
    rows = []
    sizes = [(48, 80), (80, 48), (16, 16), (1, 200), (1, 201), (200, 1), (3, 700), (4000, 20), (32, 32), (33, 97),
             (1080, 1920), (768, 1024), (4000, 3000), (5000, 5000), (10000, 60), (6000, 7000), (1, 1), (31, 17)]
    sizes += [tuple(int(v) for v in rng.integers(1, 3000, 2)) for _ in range(60)]
    limits = [(65536, 16777216), (1024, 6144), (4096, 1 << 24), (56 * 56, 28 * 28 * 1280), (1, 1), (100, 50)]
    for h, w in sizes:
        for lo, hi in limits:
            try:
                rh, rw = smart_resize(h, w, factor=32, min_pixels=lo, max_pixels=hi)
                rows.append(f"image {h} {w} 32 {lo} {hi} {rh} {rw}")
            except ValueError:
                rows.append(f"image {h} {w} 32 {lo} {hi} error")
    for t, h, w in [(5, 40, 36), (4, 1080, 1920), (768, 1080, 1920), (3, 50, 70), (1, 64, 64), (6, 31, 64),
                    (8, 32, 6401), (9, 720, 1280), (2, 32, 32), (17, 333, 777)]:
        for lo, hi in [(4096, 25165824), (131072, 786432), (1024, 16000)]:
            try:
                rh, rw = video_smart_resize(t, h, w, temporal_factor=2, factor=32, min_pixels=lo, max_pixels=hi)
                rows.append(f"video {t} {h} {w} 2 32 {lo} {hi} {rh} {rw}")
            except ValueError:
                rows.append(f"video {t} {h} {w} 2 32 {lo} {hi} error")
    with open(f"{OUT}/smart_resize.txt", "w") as f:
        f.write("# HF transformers 4.57.1 smart_resize, made by tools/golden/make_processor_fixture.py\n"
                "# image H W factor min_pixels max_pixels -> h w | error\n"
                "# video T H W temporal_factor factor min_pixels max_pixels -> h w | error\n")
        f.write("\n".join(rows) + "\n")


def write_video_sampling_table():
    vp = Qwen3VLVideoProcessor()
    rows = []
    cases = [(15, 6.0), (1, 30.0), (2, 2.0), (3, 1.0), (4, 24.0), (10, 2.0), (100, 29.97), (300, 30.0), (7, 0.5),
             (1000, 25.0), (20000, 24.0), (901, 30.0), (5, 4.0), (12, 4.0), (61, 10.0), (33, 15.0)]
    for total, fps in cases:
        idx = vp.sample_frames(VideoMetadata(total_num_frames=total, fps=fps))
        ts = Qwen3VLProcessor._calculate_timestamps(None, idx, fps, MERGE)
        rows.append(f"{total} {fps!r} " + ",".join(str(int(i)) for i in idx) + " " +
                    ",".join(f"<{t:.1f} seconds>".replace(" ", "_") for t in ts))
    with open(f"{OUT}/video_sampling.txt", "w") as f:
        f.write("# HF 4.57.1 Qwen3VLVideoProcessor.sample_frames (fps 2, min 4, max 768 frames) and\n"
                "# Qwen3VLProcessor._calculate_timestamps (merge 2); made by tools/golden/make_processor_fixture.py\n"
                "# total_frames video_fps indices timestamps ('_' for ' ')\n")
        f.write("\n".join(rows) + "\n")


if __name__ == "__main__":
    sys.exit(main())
