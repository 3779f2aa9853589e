#!/usr/bin/env python3
"""Writes the seed corpora of vlpar's libFuzzer targets into fuzz/corpus/<target>/ (fuzz/CMakeLists.txt).

Seeds are small valid inputs: copies of the test fixtures where they are small, and hand-made ones where the
fixtures are large or absent (a tar archive with GNU long names and pax headers, a minimal BPE tokenizer.json,
chat records, a checkpoint meta.json). Existing files are kept (crash reproducers found by fuzzing live beside the
seeds as crash-<sha1> files). Usage: tools/make_fuzz_seeds.py
"""
import io
import json
import pathlib
import tarfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
FIX = ROOT / "tests" / "fixtures"
OUT = ROOT / "fuzz" / "corpus"


def put(target, name, data):
    d = OUT / target
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_bytes(data if isinstance(data, bytes) else data.encode())


def copy(target, path, max_bytes=40000):
    if path.stat().st_size <= max_bytes:
        put(target, path.name, path.read_bytes())


def tar_seed(fmt, members):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as tf:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mtime = 0
            tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def main():
    for p in sorted((FIX / "safetensors").rglob("*.safetensors")):
        copy("fuzz_safetensors", p)
    for p in sorted((FIX / "qwen3vl").glob("*/batch.safetensors")):
        put("fuzz_batch_file", p.parent.name + "_batch.safetensors", p.read_bytes())
    for p in sorted((FIX / "qwen3vl").glob("*/config.json")):
        put("fuzz_hf_config", p.parent.name + "_config.json", p.read_bytes())
    for p in sorted((FIX / "processor").iterdir()):
        if p.suffix in (".jpg", ".png"):
            copy("fuzz_image_decode", p, 8000)
    put("fuzz_train_config", "demo.toml", (ROOT / "examples/qwen3vl/configs/demo.toml").read_bytes())
    sample = [("s0.jpg", b"\xff\xd8\xff" + b"x" * 40), ("s0.json", b'{"conversations": []}')]
    put("fuzz_tar", "ustar.tar", tar_seed(tarfile.USTAR_FORMAT, sample))
    put("fuzz_tar", "gnu_longname.tar", tar_seed(tarfile.GNU_FORMAT, [("d/" + "n" * 120 + ".txt", b"long")]))
    put("fuzz_tar", "pax.tar", tar_seed(tarfile.PAX_FORMAT, [("p/\u00e9t\u00e9" + "q" * 110 + ".cls", b"7")]))
    tok = {"version": "1.0", "added_tokens": [{"id": 5, "content": "<|im_start|>", "special": True,
                                                "single_word": False, "lstrip": False, "rstrip": False,
                                                "normalized": False}],
           "normalizer": {"type": "NFC"},
           "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
               {"type": "Split", "pattern": {"Regex": "\\s+|\\w+|[^\\s\\w]+"}, "behavior": "Isolated",
                "invert": False},
               {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]},
           "decoder": {"type": "ByteLevel"},
           "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                     "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False,
                     "vocab": {"a": 0, "b": 1, "ab": 2, "\u0120": 3, "\u0120ab": 4},
                     "merges": ["a b", "\u0120 ab"]}}
    put("fuzz_tokenizer_json", "minimal_bpe.json", json.dumps(tok))
    for i, line in enumerate((FIX / "tokenizer" / "pretokenize.txt").read_text().splitlines()[:12]):
        put("fuzz_tokenizer_encode", f"line{i:02d}.txt", line)
    put("fuzz_tokenizer_encode", "special.txt", "<|im_start|>user\nHi<|im_end|>\n<|vision_start|><|image_pad|>")
    for line in (FIX / "chat" / "cases.txt").read_text().splitlines():
        if line.startswith("record "):
            rec = json.loads(line[len("record "):])
            put("fuzz_conversation", rec.get("id", "record") + ".json", line[len("record "):])
    put("fuzz_conversation", "text_only.json", json.dumps({"messages": [
        {"role": "system", "content": "Be brief."}, {"role": "user", "content": [{"type": "text", "text": "Hi"}]},
        {"role": "assistant", "content": "Hello."}]}))
    meta = {"format": "vlpar-checkpoint", "version": 1, "step": 1, "world_size": 1, "layout": {}, "user": {},
            "files": [{"rank": 0, "name": "rank-00000.safetensors", "bytes": 256}],
            "tensors": {"w": {"dtype": "F32", "shape": [4, 3], "shard_dim": -1,
                              "chunks": [{"rank": 0, "pieces": []}]}}}
    put("fuzz_checkpoint_meta", "meta.json", json.dumps(meta))
    for d in sorted(OUT.iterdir()):
        print(f"{d.name}: {len(list(d.iterdir()))} seeds, {sum(f.stat().st_size for f in d.iterdir())} bytes")


if __name__ == "__main__":
    main()
