#!/usr/bin/env python3
"""Writes the safetensors golden files of tests/unit/test_safetensors.cpp and test_hf_checkpoint.cpp.

Everything is written by the reference library (safetensors.torch.save_file, huggingface_hub's shard split), so the
C++ tests check vlpar against it: bit-exact reads, byte-identical writes.

  tests/fixtures/safetensors/mixed.safetensors       F32/BF16/F16/F64/I64/I32, a scalar, a 0-size tensor, special
                                                     values (+-0, +-inf, NaN, subnormals), a name needing JSON escapes
  tests/fixtures/safetensors/mixed.expected.txt      per tensor: hex(name) dtype dims hex(bytes), bytes taken from
                                                     torch's own memory (not from the file)
  tests/fixtures/safetensors/unsupported.safetensors F32 next to U8, BOOL and F8_E4M3 tensors
  tests/fixtures/safetensors/sharded/                a..f split with max_shard_size=100 bytes (3 shards, one of them
                                                     an oversize tensor) + model.safetensors.index.json written as
                                                     transformers' save_pretrained does (indent 2, sorted, newline)

Run from the repo root: .venv/bin/python tools/golden/make_safetensors_fixtures.py   (deterministic; no RNG)
"""
import json
import math
import os
import shutil

import torch
from huggingface_hub import split_torch_state_dict_into_shards
from safetensors.torch import save_file

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "fixtures", "safetensors")
DTYPE_NAME = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16", torch.float64: "F64",
              torch.int64: "I64", torch.int32: "I32"}


def tensor_bytes(t):
    return t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def mixed_tensors():
    inf, nan = math.inf, math.nan
    f32 = torch.tensor([[1.0, -0.0, inf], [-inf, nan, 1e-40]], dtype=torch.float32)  # 1e-40 is subnormal
    bf16 = torch.tensor([3.14159, -2.5, 1e-39, 65504.0, -1.0e30], dtype=torch.float32).to(torch.bfloat16)
    f16 = torch.tensor([[6e-8, 65504.0], [-inf, 0.333], [-0.0, 1.0]], dtype=torch.float32).to(torch.float16)
    f64 = torch.tensor([1.0 / 3.0, 1e300, 1.0 + 2.0 ** -8 + 2.0 ** -30], dtype=torch.float64)
    i64 = torch.tensor([2 ** 40, -1, 0, 151643], dtype=torch.int64)
    i32 = torch.tensor([[-(2 ** 31), 7], [2 ** 31 - 1, 0]], dtype=torch.int32)
    return {
        "model.f32": f32,
        "model.bf16": bf16,
        "model.f16": f16,
        "model.f64": f64,
        "ids.i64": i64,
        "ids.i32": i32,
        "scalar": torch.tensor(2.5, dtype=torch.float32),
        "empty": torch.zeros(0, 3, dtype=torch.float32),
        'odd "name"\\\t\u00e9': torch.tensor([4.0, 5.0], dtype=torch.float32),
    }


def write_expected(path, tensors):
    with open(path, "w") as f:
        f.write("# hex(utf8 name) dtype dims(comma separated, '-' for a scalar) hex(little-endian bytes, '-' if none)\n")
        for name, t in tensors.items():
            dims = ",".join(str(d) for d in t.shape) or "-"
            data = tensor_bytes(t).hex() or "-"
            f.write(f"{name.encode().hex()} {DTYPE_NAME[t.dtype]} {dims} {data}\n")


def sharded_tensors():
    return {  # order matters: the split is greedy in state-dict order
        "a": torch.arange(10, dtype=torch.float32) * 0.5,     # 40 B
        "b": (torch.arange(20, dtype=torch.float32) - 7.25).to(torch.bfloat16),  # 40 B
        "c": torch.arange(40, dtype=torch.float32) / 3.0,     # 160 B > 100: its own shard
        "d": torch.tensor([1, -2, 3, 2 ** 50], dtype=torch.int64),  # 32 B
        "e": (torch.arange(8, dtype=torch.float32) / 7.0).to(torch.float16),  # 16 B
        "f": torch.tensor([9.0, -8.0, 7.5], dtype=torch.float32),  # 12 B
    }


def write_sharded(dirname, tensors, max_shard_size):
    shutil.rmtree(dirname, ignore_errors=True)
    os.makedirs(dirname)
    split = split_torch_state_dict_into_shards(tensors, max_shard_size=max_shard_size)
    assert split.is_sharded
    for filename, names in split.filename_to_tensors.items():
        save_file({n: tensors[n] for n in names}, os.path.join(dirname, filename), metadata={"format": "pt"})
    index = {"metadata": dict(split.metadata), "weight_map": split.tensor_to_filename}
    with open(os.path.join(dirname, "model.safetensors.index.json"), "w", encoding="utf-8") as f:
        f.write(json.dumps(index, indent=2, sort_keys=True) + "\n")  # transformers' save_pretrained


def main():
    os.makedirs(ROOT, exist_ok=True)
    mixed = mixed_tensors()
    save_file(mixed, os.path.join(ROOT, "mixed.safetensors"), metadata={"format": "pt"})
    write_expected(os.path.join(ROOT, "mixed.expected.txt"), mixed)
    unsupported = {
        "ok": torch.tensor([1.5, -2.0], dtype=torch.float32),
        "bytes": torch.tensor([1, 2, 255], dtype=torch.uint8),
        "mask": torch.tensor([True, False]),
        "fp8": torch.tensor([0.5, -1.0], dtype=torch.float32).to(torch.float8_e4m3fn),
    }
    save_file(unsupported, os.path.join(ROOT, "unsupported.safetensors"), metadata={"format": "pt"})
    write_sharded(os.path.join(ROOT, "sharded"), sharded_tensors(), max_shard_size=100)


if __name__ == "__main__":
    main()
