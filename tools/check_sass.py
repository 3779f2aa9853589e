#!/usr/bin/env python3
"""Instruction-level checks of the real (nvcc) build: dumps the SASS and resource usage of every kernel in the given
objects with cuobjdump (tools/fetch_test_tools.py sass) and checks, per kernel and architecture, what its design
promises. The promises are a table in the kernel family's source, one comment line per rule:
    // SASS <kernel pattern> [<kernel pattern> ...]: <INSTR> ... [regs<=N] [stack<=B] [threads=T] [dynsmem=B]
A pattern is an fnmatch pattern over the kernel name as `cu++filt` prints it without vlpar:: namespaces and
parameters (e.g. `rmsnorm_forward_kernel<*, true>`); an instruction is an opcode prefix (`HMMA.16816.F32.BF16`,
`LDSM.16.MT88.4`, `LDGSTS.E.BYPASS.128`, `BAR.SYNC`; `=OPCODE` asks for exactly that opcode). Every rule that matches a kernel applies; every kernel must
match at least one rule (a new kernel without promises fails). Also, for every kernel: no local memory (LDL/STL)
beyond its declared stack<=B (default 0), registers within the smallest regs<=N that applies. threads= (the
largest block its launcher uses) and dynsmem= give the occupancy per SM from NVIDIA's calculator
(tools/occupancy.cpp over cuda_occupancy.h, built on the fly when --cuda-include is given).
Prints `SASS <arch> <kernel>: <instructions found> regs=<n> smem=<bytes> stack=<bytes> ok` (or FAIL and why), and
writes the table as markdown with --table. Exit 1 on any FAIL.
Usage: tools/check_sass.py --cuobjdump DIR/cuobjdump --sources 'src/kernels/cuda/*.cuh' ... --objects a.o b.o
       [--table out.md]"""
import argparse, concurrent.futures, fnmatch, glob, os, re, subprocess, sys

RULE = re.compile(r"^\s*//\s*SASS\s+([A-Za-z_][^:]*?):\s*(.*)$")


def load_rules(patterns):
    rules = []
    for pat in patterns:
        for path in sorted(glob.glob(pat)):
            for line in open(path, encoding="utf-8"):
                m = RULE.match(line)
                if not m:
                    continue
                kernels = re.findall(r"\S+<[^>]*>|\S+", m.group(1))
                rule = {"kernels": kernels, "instrs": [], "regs": None, "stack": None, "threads": None,
                        "dynsmem": None, "src": path}
                for tok in m.group(2).split():
                    key = next((k for k in ("regs<=", "stack<=", "threads=", "dynsmem=") if tok.startswith(k)), None)
                    if key:
                        rule[key.rstrip("<=")] = int(tok[len(key):])
                    else:
                        rule["instrs"].append(tok)
                rules.append(rule)
    return rules


def demangle(names):
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True).stdout.splitlines()
    clean = []
    for n in out:
        n = re.sub(r"^void ", "", n.replace("(anonymous namespace)::", ""))
        n = n[: n.find("(")] if "(" in n else n
        clean.append(re.sub(r"\bvlpar::(cuda_kernels::|emu_test::)?", "", n))
    return dict(zip(names, clean))


def dump(cuobjdump, obj):
    """{(arch, mangled): {"ops": set, "regs", "stack", "smem"}} for one object."""
    env = dict(os.environ, PATH=os.path.dirname(cuobjdump) + os.pathsep + os.environ.get("PATH", ""))
    kernels, arch, fn = {}, None, None
    sass = subprocess.run([cuobjdump, "-sass", obj], capture_output=True, text=True, env=env, check=True).stdout
    for line in sass.splitlines():
        if m := re.match(r"\s*code for (sm_\w+)", line):
            arch = m.group(1)
        elif m := re.match(r"\s*Function : (\S+)", line):
            fn = (arch, m.group(1))
            kernels[fn] = {"ops": set(), "regs": None, "stack": None, "smem": None}
        elif fn and (m := re.match(r"\s*/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", line)):
            kernels[fn]["ops"].add(m.group(1))
    res = subprocess.run([cuobjdump, "-res-usage", obj], capture_output=True, text=True, env=env, check=True).stdout
    arch = None
    lines = res.splitlines()
    for i, line in enumerate(lines):
        if m := re.match(r"arch = (sm_\w+)", line):
            arch = m.group(1)
        elif (m := re.match(r"\s*Function (\S+):", line)) and i + 1 < len(lines):
            u = dict(re.findall(r"(\w+(?:\[\d+\])?):(\d+)", lines[i + 1]))
            k = kernels.setdefault((arch, m.group(1)), {"ops": set(), "regs": None, "stack": None, "smem": None})
            k.update(regs=int(u.get("REG", 0)), stack=int(u.get("STACK", 0)), smem=int(u.get("SHARED", 0)))
    return kernels


def applied_rules(name, rules):
    return [r for r in rules if any(fnmatch.fnmatchcase(name, p) for p in r["kernels"])]


def occupancy(tool, jobs):
    """[(arch, regs, smem, threads, dynsmem)] -> ["<blocks>/SM <pct>% (<limiter>)"] via tools/occupancy.cpp."""
    if not tool or not jobs:
        return ["-"] * len(jobs)
    lines = "".join(f"{a} {r} {s} {t} {d}\n" for a, r, s, t, d in jobs)
    out = subprocess.run([tool], input=lines, capture_output=True, text=True, check=True).stdout.split("\n")
    return [f"{b}/SM {p}% ({lim})" for b, p, lim in (o.split() for o in out if o.strip())]


def check_kernel(name, arch, k, rules):
    applied = applied_rules(name, rules)
    if not applied:
        return [], "FAIL: no `// SASS` rule names this kernel"
    need = sorted({i for r in applied for i in r["instrs"]})
    found = [i for i in need
             if any(op == i.lstrip("=") or (not i.startswith("=") and op.startswith(i + ".")) for op in k["ops"])]
    errors = [f"missing {i}" for i in need if i not in found]
    budgets = [r["regs"] for r in applied if r["regs"] is not None]
    if budgets and k["regs"] is not None and k["regs"] > min(budgets):
        errors.append(f"{k['regs']} registers > budget {min(budgets)}")
    stack_ok = max([r["stack"] for r in applied if r["stack"] is not None] or [0])
    if (k["stack"] or 0) > stack_ok:
        errors.append(f"stack frame {k['stack']} B > {stack_ok} B")
    local = sorted(op for op in k["ops"] if op.split(".")[0] in ("LDL", "STL"))
    if local and stack_ok == 0:
        errors.append(f"local memory ({', '.join(local)})")
    return found, ("FAIL: " + "; ".join(errors)) if errors else "ok"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cuobjdump", required=True)
    ap.add_argument("--sources", nargs="+", required=True)
    ap.add_argument("--objects", nargs="+", required=True)
    ap.add_argument("--table")
    ap.add_argument("--cuda-include", help="directory of cuda_occupancy.h: adds occupancy per kernel")
    args = ap.parse_args()
    tool = None
    if args.cuda_include:
        tool = os.path.join(os.path.dirname(os.path.abspath(args.table or "build")), "occupancy")
        subprocess.run(["g++", "-std=c++17", "-O1", f"-I{args.cuda_include}",
                        os.path.join(os.path.dirname(os.path.abspath(__file__)), "occupancy.cpp"), "-o", tool],
                       check=True)
    rules = load_rules(args.sources)
    kernels = {}
    # One process per core: cuobjdump and the parsing of its SASS take ~45 s for the library's 28 objects on one.
    with concurrent.futures.ProcessPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        for part in pool.map(dump, [args.cuobjdump] * len(args.objects), args.objects):  # in object order
            kernels.update(part)
    names = demangle(sorted({m for _, m in kernels}))
    rows, failed = [], 0
    order = sorted(kernels.items(), key=lambda kv: (names[kv[0][1]], kv[0][0]))
    jobs, launch = [], []
    for (arch, mangled), k in order:  # occupancy at the block size the rules give (sm_90a: SHARED has 1 KiB system)
        applied = applied_rules(names[mangled], rules)
        threads = next((r["threads"] for r in reversed(applied) if r["threads"]), None)
        dyn = next((r["dynsmem"] for r in reversed(applied) if r["dynsmem"] is not None), 0)
        static = max(0, (k["smem"] or 0) - (1024 if arch.startswith("sm_9") else 0))
        launch.append((threads, dyn))
        if threads:
            jobs.append((arch, k["regs"] or 0, static, threads, dyn))
    occ = iter(occupancy(tool, jobs))
    for ((arch, mangled), k), (threads, dyn) in zip(order, launch):
        found, verdict = check_kernel(names[mangled], arch, k, rules)
        failed += verdict != "ok"
        o = f"{next(occ)} at {threads} threads" + (f" + {dyn} B dynamic smem" if dyn else "") if threads else "-"
        print(f"SASS {arch} {names[mangled]}: {' '.join(found) or '-'} regs={k['regs']} smem={k['smem']} "
              f"stack={k['stack']} occupancy={o} {verdict}")
        rows.append(f"| `{names[mangled]}` | {arch} | {k['regs']} | {k['smem']} | {k['stack']} | {o} | "
                    f"{' '.join(found) or '—'} |")
    print(f"check_sass: {len(kernels)} kernel builds, {failed} failed")
    if args.table:
        with open(args.table, "w", encoding="utf-8") as f:
            f.write("| kernel | arch | registers | static smem (B) | stack (B) | occupancy per SM | instructions "
                    "checked |\n")
            f.write("|---|---|---|---|---|---|---|\n" + "\n".join(rows) + "\n")
    return 1 if failed or not kernels else 0


if __name__ == "__main__":
    sys.exit(main())
