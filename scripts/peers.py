#!/usr/bin/env python3
"""PyTorch's scaled_dot_product_attention, each backend alone, on the course's benchmark shapes.

  scripts/peers.py OUT.csv [--quick] [--commit HASH] [--backends LIST] [--ns LIST] [--ds LIST] [--fwd-only]

The peers our steps are measured against, in the same session and on the same GPU: flash
(FlashAttention-2), cudnn, efficient (memory-efficient) and math, forward and backward, over
N = 512 ... 16k, d = 64 and 128, causal and not, fp16 and bf16, with B·N = 16k tokens and
H·d = 2048 (FlashAttention's benchmark shapes). Times are CUDA-event medians after warm-up;
TFLOP/s use FlashAttention's convention (forward 4·B·H·N²·d, halved when causal; backward 2.5×).
A backend that refuses a shape, or runs out of memory, gets a row with its reason and no numbers.
With N = Nk, PyTorch's is_causal (top-left) equals our bottom-right mask.

Without PyTorch or without a GPU it prints why and exits 0 (a skipped step, not a failure).
"""
import argparse
import csv
import datetime
import os
import statistics
import subprocess
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--quick", action="store_true", help="N = 1024 and 4096 only")
    ap.add_argument("--commit", default=os.environ.get("FA_COMMIT", ""))
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--ns", default="", help="comma-separated N values (default 512 ... 16384; --quick: 1024, 4096)")
    ap.add_argument("--backends", default="", help="comma-separated subset of flash,cudnn,efficient,math (default all)")
    ap.add_argument("--ds", default="64,128", help="comma-separated head dimensions (default 64,128)")
    ap.add_argument("--fwd-only", action="store_true", help="time the forward alone (the bwd columns stay empty)")
    args = ap.parse_args()
    try:
        import torch
        from torch.nn.attention import SDPBackend, sdpa_kernel
        import torch.nn.functional as F
    except ImportError as e:
        print(f"peers.py: skipped: PyTorch is not installed ({e})", file=sys.stderr)
        return 0
    if not torch.cuda.is_available():
        print("peers.py: skipped: PyTorch sees no CUDA device", file=sys.stderr)
        return 0

    commit = args.commit
    if not commit:
        try:
            commit = subprocess.check_output(["git", "rev-parse", "--short", "HEAD"], text=True,
                                             stderr=subprocess.DEVNULL).strip()
        except Exception:
            commit = "unknown"
    gpu = torch.cuda.get_device_name(0)
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%MZ")
    backends = [("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION),
                ("efficient", SDPBackend.EFFICIENT_ATTENTION), ("math", SDPBackend.MATH)]
    if args.backends:
        want = args.backends.split(",")
        unknown = [b for b in want if b not in {n for n, _ in backends}]
        if unknown:
            print(f"peers.py: unknown backend(s) {unknown}", file=sys.stderr)
            return 2
        backends = [(n, be) for n, be in backends if n in want]
    ns = [int(x) for x in args.ns.split(",")] if args.ns else [1024, 4096] if args.quick else [512, 1024, 2048, 4096, 8192, 16384]

    def timed(fn, reps):
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        ts = []
        for _ in range(reps):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            ts.append(a.elapsed_time(b))
        return statistics.median(ts)

    cols = ["date", "commit", "gpu", "torch", "cuda", "backend", "dtype", "causal", "d", "N", "B", "H",
            "fwd_ms", "fwd_tflops", "bwd_ms", "bwd_tflops", "status"]
    with open(args.out, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(cols)
        ds = [int(x) for x in args.ds.split(",")]
        total = len(ns) * 2 * len(ds) * 2 * len(backends)
        k = 0
        for dtype_name, dtype in (("fp16", torch.float16), ("bf16", torch.bfloat16)):
            for d in ds:
                for causal in (0, 1):
                    for n in ns:
                        B, H = 16384 // n, 2048 // d
                        flops = 4.0 * B * H * n * n * d / (2 if causal else 1)
                        gen = torch.Generator(device="cuda").manual_seed(42)
                        q, kk, v = (torch.randn(B, H, n, d, device="cuda", dtype=dtype, generator=gen).requires_grad_()
                                    for _ in range(3))
                        do = torch.randn(B, H, n, d, device="cuda", dtype=dtype, generator=gen)
                        for name, be in backends:
                            k += 1
                            row = [date, commit, gpu, torch.__version__, torch.version.cuda, name, dtype_name, causal, d, n, B, H]
                            if name == "math" and n > 4096:
                                w.writerow(row + ["", "", "", "", "skipped: the math backend materializes S (N > 4096)"])
                                continue
                            try:
                                with sdpa_kernel(be):
                                    out = F.scaled_dot_product_attention(q, kk, v, is_causal=bool(causal))
                                    fwd = timed(lambda: F.scaled_dot_product_attention(q, kk, v, is_causal=bool(causal)),
                                                args.reps)
                                    if not args.fwd_only:
                                        bwd_total = timed(lambda: torch.autograd.grad(
                                            F.scaled_dot_product_attention(q, kk, v, is_causal=bool(causal)), (q, kk, v), do),
                                            args.reps)
                                del out
                                if args.fwd_only:
                                    w.writerow(row + [f"{fwd:.4f}", f"{flops / fwd / 1e9:.1f}", "", "", "ok"])
                                    msg = f"{fwd:.3f} ms fwd"
                                else:
                                    bwd = max(bwd_total - fwd, 1e-6)  # backward alone: forward + backward minus forward
                                    w.writerow(row + [f"{fwd:.4f}", f"{flops / fwd / 1e9:.1f}", f"{bwd:.4f}",
                                                      f"{2.5 * flops / bwd / 1e9:.1f}", "ok"])
                                    msg = f"{fwd:.3f} ms fwd, {bwd:.3f} ms bwd"
                            except Exception as e:  # a backend that does not support the shape, or OOM
                                reason = str(e).strip().splitlines()[0][:160].replace(",", ";") if str(e).strip() else type(e).__name__
                                w.writerow(row + ["", "", "", "", f"failed: {reason}"])
                                msg = f"failed: {reason[:80]}"
                                torch.cuda.empty_cache()
                            f.flush()
                            print(f"[peers {k}/{total}] {name} {dtype_name} d={d} causal={causal} N={n}: {msg}",
                                  file=sys.stderr, flush=True)
                        del q, kk, v, do
                        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
