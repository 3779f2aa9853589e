#!/usr/bin/env python3
"""Builds tests/fixtures/energon/: a tiny WebDataset prepared by the real Megatron-Energon, plus the goldens that the
C++ shard tests (tests/unit/test_{tar_reader,webdataset,energon,sample_stream}.cpp) compare against.

The tars come from four writers, so the C++ reader sees each header dialect that occurs in practice:
  parts/shard-000.tar  Python tarfile GNU_FORMAT : a GNU long name ('L' entry, ././@LongLink), a directory entry,
                       an Energon meta member (__meta__/...), an upper-case extension, a 0-byte member,
                       members of 511/512/513 bytes, an extension with a dot (seg.mask.png)
  parts/shard-001.tar  Python tarfile PAX_FORMAT : a global pax header ('g', comment=), a non-ASCII key and a long
                       name (both carried by per-member pax 'x' headers, path=)
  parts/shard-002.tar  Python tarfile USTAR_FORMAT: a path that needs the ustar prefix field (prefix/name)
  parts/shard-003.tar  GNU tar --format=gnu       : a long name through ././@LongLink
  parts/shard-004.tar  GNU tar --format=pax       : a global header (--pax-option comment=) and a long name (x path=)
Then `energon prepare` (non-interactive) writes .nv-meta/{dataset.yaml,split.yaml,.info.json,index.sqlite,index.uuid}
and every parts/*.tar.idx. split.yaml: train = shards 000..003, val = shard 004 (as --split-parts regexes).
We add .nv-meta/split_exclude.yaml by hand (users edit split files by hand too): brace patterns in split_parts, a
whole excluded shard and excluded samples "<shard>/<key>".

Goldens (text, one record a line, strings hex-encoded so keys with spaces/UTF-8 survive):
  expected_samples.txt   what Energon's own reader (ShardInfosITarReader, WebdatasetMeta.from_config) returns, per
                         (split config, split part): "part <config> <part> <n_shards> <n_samples>", then per shard
                         "shard <hex name> <count>", then per sample index "sample <hex shard> <index> <hex key> <n>"
                         (n = -1: excluded by the split config) followed by n lines "field <hex ext> <size> <fnv1a64>"
                         (ext exactly as Energon reports it: NOT lower-cased).
  expected_names.txt     "<hex name> <hex key> <hex ext>" or "<hex name> - -" (no match): Energon's split_name_re and
                         skip_meta_re ("meta" in place of the key for skipped names).
  expected_braces.txt    "<hex pattern> <n> <hex item>..." from braceexpand (the library Energon uses).

Run (from the repository root; needs `pip install megatron-energon` in .venv and GNU tar on PATH):
  .venv/bin/python tools/golden/make_energon_fixture.py
Deterministic except .nv-meta/index.uuid (Energon writes a random uuid4): tars, idx files and goldens are
byte-identical per run (GNU tar's pax header names are fixed so they carry no PID).
Versions used for the committed fixture: megatron-energon 7.4.1, braceexpand 0.1.7, GNU tar 1.34, Python 3.11.
"""
import io
import os
import random
import shutil
import subprocess
import sys
import tarfile
import tempfile

import braceexpand
from megatron.energon.epathlib import EPath
from megatron.energon.flavors.webdataset.config import skip_meta_re, split_name_re
from megatron.energon.flavors.webdataset.itar_reader import ShardInfosITarReader
from megatron.energon.flavors.webdataset.metadata import WebdatasetMeta

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "fixtures",
                                     "energon"))
MTIME = 1700000000
VENV_BIN = os.path.dirname(os.path.abspath(sys.executable))


def fnv1a64(data: bytes) -> int:
    h = 0xCBF29CE484222325
    for b in data:
        h ^= b
        h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def hx(s: str) -> str:
    return s.encode("utf-8").hex() or "-"


class Payloads:
    """Deterministic member contents: small pseudo-random 'jpg' bytes, a caption, a json record."""

    def __init__(self, seed):
        self.rng = random.Random(seed)

    def blob(self, n):
        return bytes(self.rng.getrandbits(8) for _ in range(n))

    def sample(self, key, sizes=(0, 0)):
        n_img = sizes[0] or self.rng.randint(200, 1500)
        return [("jpg", self.blob(n_img)),
                ("json", ('{"key": "%s", "n": %d}' % (key, n_img)).encode()),
                ("txt", ("caption of %s" % key).encode())]


def add_file(tf, name, data):
    ti = tarfile.TarInfo(name)
    ti.size = len(data)
    ti.mtime = MTIME
    ti.mode = 0o444
    ti.uname = ti.gname = "bigdata"
    tf.addfile(ti, io.BytesIO(data))


def add_dir(tf, name):
    ti = tarfile.TarInfo(name)
    ti.type = tarfile.DIRTYPE
    ti.mtime = MTIME
    ti.mode = 0o755
    tf.addfile(ti)


def write_python_tar(path, fmt, members, pax_headers=None):
    """members: list of ("file", name, bytes) or ("dir", name)."""
    with tarfile.open(path, "w", format=fmt, pax_headers=pax_headers or {}) as tf:
        for m in members:
            if m[0] == "dir":
                add_dir(tf, m[1])
            else:
                add_file(tf, m[1], m[2])


def write_gnu_tar(path, fmt, members, extra=()):
    """Stages the files in a temp dir and lets GNU tar archive them in the given order."""
    with tempfile.TemporaryDirectory() as stage:
        names = []
        for _, name, data in members:
            full = os.path.join(stage, name)
            os.makedirs(os.path.dirname(full), exist_ok=True)
            with open(full, "wb") as f:
                f.write(data)
            os.utime(full, (MTIME, MTIME))
            names.append(name)
        list_file = os.path.join(stage, "..", os.path.basename(stage) + ".list")
        with open(list_file, "w") as f:
            f.write("\n".join(names) + "\n")
        try:
            subprocess.run(["tar", f"--format={fmt}", "--owner=bigdata:1000", "--group=bigdata:1000",
                            "--mode=a=r", f"--mtime=@{MTIME}", "--no-recursion", *extra,
                            "-cf", path, "-C", stage, "-T", list_file], check=True)
        finally:
            os.remove(list_file)


def sample_members(p, key, sizes=(0, 0)):
    return [("file", f"{key}.{ext}", data) for ext, data in p.sample(key, sizes)]


def build_tars(parts):
    p = Payloads(20250101)
    long_dir = "deep/" + "/".join(["level%02d_directory_name" % i for i in range(5)])  # > 100 chars in total

    # shard-000: Python GNU format.
    m = []
    m += sample_members(p, "s000000")
    m += [("dir", "deep/")]
    m += sample_members(p, long_dir + "/s000001_long_key")                  # GNU 'L' entries
    m += [("file", "__meta__/info.json", b'{"comment": "skipped by Energon and vlpar"}')]
    m += [("file", "s000002.JPG", p.blob(511)), ("file", "s000002.txt", b""),       # upper-case ext, 0 bytes
          ("file", "s000002.seg.mask.png", p.blob(512))]                           # ext with a dot
    m += sample_members(p, "s000003", sizes=(513, 0))
    m += [("file", "README", b"a member without an extension: not part of any sample")]
    m += sample_members(p, "s000004")
    write_python_tar(os.path.join(parts, "shard-000.tar"), tarfile.GNU_FORMAT, m)

    # shard-001: Python PAX format with a global header.
    m = []
    m += sample_members(p, "s000010")
    m += sample_members(p, "caf\u00e9_s000011")                                 # non-ASCII: pax path=
    m += sample_members(p, long_dir + "/s000012_long_key")                      # long: pax path=
    m += sample_members(p, "s000013")
    write_python_tar(os.path.join(parts, "shard-001.tar"), tarfile.PAX_FORMAT, m,
                     pax_headers={"comment": "vlpar fixture global header"})

    # shard-002: Python USTAR format; a path that fits only through the prefix field.
    m = []
    m += sample_members(p, "s000020")
    m += sample_members(p, long_dir + "/s000021")
    m += sample_members(p, "s000022")
    write_python_tar(os.path.join(parts, "shard-002.tar"), tarfile.USTAR_FORMAT, m)

    # shard-003: GNU tar, gnu format.
    m = []
    m += sample_members(p, "s000030")
    m += sample_members(p, long_dir + "/s000031_with_a_long_key_for_gnu_tar")
    m += sample_members(p, "s000032")
    m += sample_members(p, "s000033")
    write_gnu_tar(os.path.join(parts, "shard-003.tar"), "gnu", [x for x in m])

    # shard-004: GNU tar, pax format with a global header.
    m = []
    m += sample_members(p, "s000040")
    m += sample_members(p, long_dir + "/s000041_with_a_long_key_for_gnu_pax")
    m += sample_members(p, "s000042")
    write_gnu_tar(os.path.join(parts, "shard-004.tar"), "pax", m,
                  extra=["--pax-option=comment=vlpar fixture,delete=atime,delete=ctime,"
                         "globexthdr.name=GlobalHead,globexthdr.mtime=1700000000,exthdr.name=%d/PaxHeaders/%f,"
                         "exthdr.mtime=1700000000"])  # no PIDs, no clock


def energon_prepare(root):
    cmd = [os.path.join(VENV_BIN, "energon"), "prepare", "--non-interactive", "--no-progress", "--num-workers", "1",
           "--split-parts", r"train:parts/shard-00[0-3]\.tar", "--split-parts", r"val:parts/shard-004\.tar",
           "--sample-type", "CrudeWebdataset", root]
    subprocess.run(cmd, check=True)


SPLIT_EXCLUDE = """\
# Written by tools/golden/make_energon_fixture.py (not by energon prepare): brace patterns and excludes.
split_parts:
  train:
    - parts/shard-{000..003}.tar
  val:
    - parts/shard-00{4,1}.tar
exclude:
  - parts/shard-001.tar
  - parts/shard-000.tar/s000003
  - parts/shard-00{2,3}.tar/s0000{21,30}
  - parts/shard-000.tar/deep/level00_directory_name/level01_directory_name/level02_directory_name/level03_directory_name/level04_directory_name/s000001_long_key
"""


def dump_samples(root, out):
    for config in ("split.yaml", "split_exclude.yaml"):
        for part in ("train", "val"):
            meta = WebdatasetMeta.from_config(EPath(root), split_part=part, split_config=config)
            excludes = meta.sample_excludes
            reader = ShardInfosITarReader(EPath(root), meta.shards, sample_filter=lambda k: k not in excludes)
            out.write(f"part {config} {part} {len(meta.shards)} {len(reader)}\n")
            for shard in meta.shards:
                out.write(f"shard {hx(shard.name)} {shard.count}\n")
            cum = 0
            for shard in meta.shards:
                for i in range(shard.count):
                    s = reader[cum + i]
                    if s is None:
                        out.write(f"sample {hx(shard.name)} {i} - -1\n")
                        continue
                    fields = [(k, v) for k, v in s.items() if not k.startswith("__")]
                    out.write(f"sample {hx(s['__shard__'])} {i} {hx(s['__key__'])} {len(fields)}\n")
                    for ext, data in fields:
                        out.write(f"field {hx(ext)} {len(data)} {fnv1a64(data):016x}\n")
                cum += shard.count


NAMES = ["a.jpg", "a.b.c", "dir/a.jpg", "dir.x/a.jpg", "dir/a", "dir.x/a", "a", ".hidden", "dir/.hidden.txt",
         "d1/d.2/.x.y", "a.", "a..b", "x/y/z.tar.gz", "__meta__", "__meta__/x.json", "__key__.txt", "____",
         "a/__meta__/x.json", "__m/x__.y", "caf\u00e9.JPG", "k.JPG", "sp ace.txt", "/abs/p.q", "dir/", "./a.b"]

PATTERNS = ["shard-{000..003}.tar", "a{b,c}d", "{07..10}", "{1..3}", "{4..1}", "{2..-1}", "{-01..2}",
            "{a..c}", "{a..g..2}", "{Z..b}", "x{1..10..3}", "p{2.{5..7},3.{2,3}}", "index.html{,.backup}",
            "plain", "{single}", "a\\{b\\}c", "{a\\,b,c}", "x\\\\y{1,2}", "{a,b}{1,2}", "{}", "{,}",
            "pre{x,{y,z}}post", "{1..2}{a,b}", "{a..c..-1}", "{5..1..2}", "{0..0}", "{-0..2}", "{+1..2}", "{e..a}",
            "{b..Y}", "{c..A..2}", "{A..A}"]


def main():
    if os.path.isdir(ROOT):
        shutil.rmtree(ROOT)
    parts = os.path.join(ROOT, "parts")
    os.makedirs(parts)
    build_tars(parts)
    energon_prepare(ROOT)
    with open(os.path.join(ROOT, ".nv-meta", "split_exclude.yaml"), "w") as f:
        f.write(SPLIT_EXCLUDE)
    with open(os.path.join(ROOT, "expected_samples.txt"), "w") as f:
        dump_samples(ROOT, f)
    with open(os.path.join(ROOT, "expected_names.txt"), "w") as f:
        for n in NAMES:
            if skip_meta_re.match(n):
                f.write(f"{hx(n)} meta meta\n")
                continue
            mt = split_name_re.match(n)
            f.write(f"{hx(n)} {hx(mt.group(1))} {hx(mt.group(2))}\n" if mt else f"{hx(n)} - -\n")
    with open(os.path.join(ROOT, "expected_braces.txt"), "w") as f:
        for pat in PATTERNS:
            items = list(braceexpand.braceexpand(pat))
            f.write(" ".join([hx(pat), str(len(items))] + [hx(i) for i in items]) + "\n")
    total = sum(os.path.getsize(os.path.join(d, n)) for d, _, ns in os.walk(ROOT) for n in ns)
    print(f"wrote {ROOT} ({total} bytes)")


if __name__ == "__main__":
    main()
