#!/usr/bin/env python3
"""vlpar's CUDA flash attention next to PyTorch's flash SDPA, same device, same run (bench/gpu/validate.sh).

Runs the vlpar benchmark (bench_cuda_attention: one CSV line per shape, equal-length sequences packed as varlen),
then times torch.nn.functional.scaled_dot_product_attention with the FLASH_ATTENTION backend on the same shapes
as dense [B, H, S, D] tensors, forward and backward (autograd of q, k, v), with CUDA events, and prints TFLOP/s
of both and the ratio vlpar / torch. FLOPs as the vlpar benchmark counts them (FlashAttention's convention).
Usage: bench_attention_vs_torch.py <path to bench_cuda_attention> [--iters N]
"""
import sys

from bench_common import bench_args, run_bench, time_ms



def torch_row(row, iters):
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    dt = torch.bfloat16 if row["dtype"] == "bf16" else torch.float16
    b, h, s, d = int(row["batch"]), int(row["heads"]), int(row["seqlen"]), int(row["head_dim"])
    causal = row["causal"] == "1"
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v, g = (torch.rand(b, h, s, d, device="cuda", dtype=dt, generator=gen) * 2 - 1 for _ in range(4))
    q.requires_grad_(True), k.requires_grad_(True), v.requires_grad_(True)
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        fwd = time_ms(lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal), iters)
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
        bwd = time_ms(lambda: torch.autograd.grad(out, (q, k, v), g, retain_graph=True), iters)
    return fwd, bwd


def main():
    args = bench_args(__doc__)
    all_rows = run_bench(args.bench, args.iters)
    if all_rows is None:
        return 1
    rows = [r for r in all_rows if r.get("fwd_ms")]
    if not rows:
        return 0
    try:
        import torch
        print(f"\ntorch {torch.__version__}, {torch.cuda.get_device_name(0)}; flash SDPA as the baseline")
    except ImportError:
        print("no torch on this machine: no baseline")
        return 0
    print(f"{'shape':<16}{'S':>6}{'causal':>7}{'fwd vlpar':>11}{'fwd torch':>11}{'ratio':>7}"
          f"{'bwd vlpar':>11}{'bwd torch':>11}{'ratio':>7}   (TFLOP/s)")
    for r in rows:
        fwd_t, bwd_t = torch_row(r, args.iters)
        flops = float(r["fwd_tflops"]) * float(r["fwd_ms"])  # TFLOP/s · ms = GFLOP
        tf_fwd, tf_bwd = flops / fwd_t, 2.5 * flops / bwd_t
        vf, vb = float(r["fwd_tflops"]), float(r["bwd_tflops"])
        print(f"{r['name']:<16}{r['seqlen']:>6}{r['causal']:>7}{vf:>11.1f}{tf_fwd:>11.1f}{vf / tf_fwd:>7.2f}"
              f"{vb:>11.1f}{tf_bwd:>11.1f}{vb / tf_bwd:>7.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
