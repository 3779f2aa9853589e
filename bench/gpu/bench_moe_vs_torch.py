#!/usr/bin/env python3
"""vlpar's CUDA grouped GEMMs next to torch._grouped_mm, same device, same run (bench/gpu/validate.sh).

Runs the vlpar benchmark (bench_cuda_moe: one CSV line per measurement, plus each routing's expert end offsets),
then times torch._grouped_mm (bf16, the CUTLASS grouped GEMM behind torch's MoE path) on the same groups for the
same four GEMMs (gate_up forward, down forward, down dX, down dW with ragged K), with CUDA events, and prints
TFLOP/s of both and the ratio vlpar / torch. A GEMM torch cannot run on this device or version is reported as such.
Usage: bench_moe_vs_torch.py <path to bench_cuda_moe> [--iters N]
"""
import sys

from bench_common import bench_args, run_bench, time_ms

HIDDEN, INTER, EXPERTS = 2048, 768, 128



def torch_gemms(ends, iters):
    """{name: (ms or None, flops)} for the four GEMMs over groups ending at `ends`."""
    import torch
    rows = ends[-1]
    offs = torch.tensor(ends, dtype=torch.int32, device="cuda")
    bf = torch.bfloat16
    rnd = lambda *s: torch.rand(*s, device="cuda", dtype=bf) - 0.5
    x, act, dy = rnd(rows, HIDDEN), rnd(rows, INTER), rnd(rows, HIDDEN)
    w_gu = rnd(EXPERTS, 2 * INTER, HIDDEN).transpose(-2, -1)  # [E, H, 2I] view of the [E, 2I, H] weight
    w_dn = rnd(EXPERTS, HIDDEN, INTER).transpose(-2, -1)      # [E, I, H]
    w_dn_kn = rnd(EXPERTS, HIDDEN, INTER)                     # dX = dY · W_down: [E, H, I]
    cases = {
        "grouped_gate_up_fwd": (lambda: torch._grouped_mm(x, w_gu, offs=offs), 2 * INTER, HIDDEN),
        "grouped_down_fwd": (lambda: torch._grouped_mm(act, w_dn, offs=offs), HIDDEN, INTER),
        "grouped_down_dx": (lambda: torch._grouped_mm(dy, w_dn_kn, offs=offs), INTER, HIDDEN),
        "grouped_down_dw": (lambda: torch._grouped_mm(act.t(), dy, offs=offs), HIDDEN, INTER),
    }
    out = {}
    for name, (fn, n, k) in cases.items():
        try:
            out[name] = (time_ms(fn, iters), 2.0 * rows * n * k)
        except (RuntimeError, TypeError) as e:  # unsupported arch/layout in this torch: report, do not fail
            out[name] = (None, str(e).splitlines()[0][:80])
    return out


def main():
    args = bench_args(__doc__)
    all_rows = run_bench(args.bench, args.iters)
    if all_rows is None:
        return 1
    rows = all_rows
    offsets = {(r["tokens"], r["routing"]): [int(v) for v in r["ms"].split(";")] for r in rows
               if r.get("what") == "offsets"}
    try:
        import torch
        if not hasattr(torch, "_grouped_mm"):
            print(f"torch {torch.__version__} has no _grouped_mm: no baseline")
            return 0
        print(f"\ntorch {torch.__version__}, {torch.cuda.get_device_name(0)}; torch._grouped_mm as the baseline")
    except ImportError:
        print("no torch on this machine: no baseline")
        return 0
    print(f"{'gemm':<22}{'tokens':>7}{'routing':>9}{'vlpar':>9}{'torch':>9}{'ratio':>7}   (TFLOP/s)")
    for key, ends in offsets.items():
        ref = torch_gemms(ends, args.iters)
        for r in rows:
            if (r["tokens"], r["routing"]) != key or r["what"] not in ref:
                continue
            ms, flops = ref[r["what"]]
            mine = float(r["rate"])
            if ms is None:
                print(f"{r['what']:<22}{key[0]:>7}{key[1]:>9}{mine:>9.1f}   torch: {flops}")
                continue
            theirs = flops / (ms * 1e-3) / 1e12
            print(f"{r['what']:<22}{key[0]:>7}{key[1]:>9}{mine:>9.1f}{theirs:>9.1f}{mine / theirs:>7.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
