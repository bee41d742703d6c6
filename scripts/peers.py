#!/usr/bin/env python3
"""PyTorch's scaled_dot_product_attention, each backend alone, on the course's benchmark shapes.

  scripts/peers.py OUT.csv [--quick] [--commit HASH] [--backends LIST] [--ns LIST] [--ds LIST] [--fwd-only]
                   [--reps 10] [--graph 10] [--dtypes fp16,bf16] [--deadline EPOCH_S]

The peers our steps are measured against, in the same session and on the same GPU: flash
(FlashAttention-2), cudnn, efficient (memory-efficient) and math, forward and backward, over
N = 512 ... 16k, d = 64 and 128, causal and not, fp16 and bf16, with B·N = 16k tokens and
H·d = 2048 (FlashAttention's benchmark shapes). Each call is timed by the course's one clock
(scripts/clock.py, docs/profiling.md "One clock"): kernel time (every kernel the call launches,
summed, from the profiler's CUPTI records; cold L2), graph time (--graph calls in one CUDA graph) and,
as a third column, CUDA events around the Python call. The backward alone: its kernels (the forward
it needs runs untimed before it) and, in a graph, forward + backward less the forward. TFLOP/s use
FlashAttention's convention (forward 4·B·H·N²·d, halved when causal; backward 2.5×) over kernel time.
A backend that refuses a shape, or runs out of memory, gets a row with its reason and no numbers.
With N = Nk, PyTorch's is_causal (top-left) equals our bottom-right mask.

`--backends package` adds the course's own kernels through the Python package (python/,
flash_attn_steps.flash_attn_func on [B, N, H, d] tensors, its native layout), by the same clock: what
a PyTorch user of the package gets, beside what the step programs measure for the same kernels.

Without PyTorch or without a GPU it prints why and exits 0 (a skipped step, not a failure).
"""
import argparse
import contextlib
import csv
import os
import sys
import time

sys.dont_write_bytecode = True  # clock.py imported from the source tree: no __pycache__ there
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from clock import KERNEL_CLOCK, Clock, first_line, load_torch, run_commit, utc_date  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--quick", action="store_true", help="N = 1024 and 4096 only")
    ap.add_argument("--commit", default="", help="the rows' commit (default: FA_COMMIT, else git's)")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--ns", default="", help="comma-separated N values (default 512 ... 16384; --quick: 1024, 4096)")
    ap.add_argument("--backends", default="", help="comma-separated subset of flash,cudnn,efficient,math (default all)")
    ap.add_argument("--ds", default="64,128", help="comma-separated head dimensions (default 64,128)")
    ap.add_argument("--fwd-only", action="store_true", help="time the forward alone (the bwd columns stay empty)")
    ap.add_argument("--graph", type=int, default=10, help="calls per CUDA graph (default 10)")
    ap.add_argument("--dtypes", default="fp16,bf16", help="comma-separated subset of fp16,bf16 (default both)")
    ap.add_argument("--deadline", type=float, default=0.0, help="epoch seconds after which no new point starts "
                    "(its rows say so)")
    args = ap.parse_args()
    if args.graph < 1 or args.reps < 1:
        print("peers.py: --graph and --reps must be at least 1", file=sys.stderr)
        return 2
    torch = load_torch("peers.py")
    if torch is None:
        return 0
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        import torch.nn.functional as F
    except ImportError as e:
        print(f"peers.py: skipped: this PyTorch has no torch.nn.attention ({e})", file=sys.stderr)
        return 0

    commit = run_commit(args.commit)
    gpu = torch.cuda.get_device_name(0)
    date = utc_date()
    backends = [("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION),
                ("efficient", SDPBackend.EFFICIENT_ATTENTION), ("math", SDPBackend.MATH)]
    if args.backends:
        want = args.backends.split(",")
        unknown = [b for b in want if b not in {n for n, _ in backends} | {"package"}]
        if unknown:
            print(f"peers.py: unknown backend(s) {unknown}", file=sys.stderr)
            return 2
        backends = [(n, be) for n, be in backends if n in want] + ([("package", None)] if "package" in want else [])
    fas = None
    if any(n == "package" for n, _ in backends):
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python"))
        import flash_attn_steps as fas  # its C library: build/libfa_python.so, or FLASH_ATTN_STEPS_LIB
    ns = [int(x) for x in args.ns.split(",")] if args.ns else [1024, 4096] if args.quick else [512, 1024, 2048, 4096, 8192, 16384]

    clock = Clock(torch, reps=args.reps, graph_calls=args.graph)

    cols = ["date", "commit", "gpu", "torch", "cuda", "backend", "dtype", "causal", "d", "N", "B", "H",
            "fwd_ms", "fwd_tflops", "bwd_ms", "bwd_tflops", "status",
            "kernel_ms", "kernel_tflops", "kernels", "graph_ms", "bwd_kernel_ms", "bwd_kernel_tflops", "bwd_kernels",
            "bwd_graph_ms", "graph_calls", "clock", "note"]
    fmt = lambda x, p=4: "" if x is None else f"{x:.{p}f}"
    with open(args.out, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(cols)
        ds = [int(x) for x in args.ds.split(",")]
        k = 0
        dtypes = [(n, t) for n, t in (("fp16", torch.float16), ("bf16", torch.bfloat16)) if n in args.dtypes.split(",")]
        if not dtypes:
            print("peers.py: --dtypes: fp16 and/or bf16", file=sys.stderr)
            return 2
        total = len(ns) * len(dtypes) * len(ds) * 2 * len(backends)
        for dtype_name, dtype in dtypes:
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
                            empty = [""] * (len(cols) - len(row) - 1)
                            if args.deadline and time.time() > args.deadline:
                                w.writerow(row + ["", "", "", "", "skipped: past the run's deadline"] + empty[4:])
                                continue
                            if name == "math" and n > 4096:
                                w.writerow(row + ["", "", "", "", "skipped: the math backend materializes S (N > 4096)"] + empty[4:])
                                continue
                            fwd_fn = lambda: F.scaled_dot_product_attention(q, kk, v, is_causal=bool(causal))
                            args_ = (q, kk, v)
                            if name == "package":  # [B, N, H, d]: the package's own layout, no copies
                                args_ = tuple(x.detach().transpose(1, 2).contiguous().requires_grad_() for x in (q, kk, v))
                                do_p = do.transpose(1, 2).contiguous()
                                fwd_fn = lambda: fas.flash_attn_func(*args_, causal=bool(causal))
                            grads_of = lambda out: torch.autograd.grad(out, args_, do_p if name == "package" else do)
                            both_fn = lambda: grads_of(fwd_fn())
                            notes = []
                            try:
                                with (sdpa_kernel(be) if be is not None else contextlib.nullcontext()):
                                    fwd_fn()
                                    t = clock.time_call(fwd_fn, notes, "forward")
                                    fwd, kern, nk, fb, gms = (t["event_ms"], t["kernel_ms"], t["kernels"], t["fallbacks"],
                                                              t["graph_ms"])
                                    bwd = bkern = nbk = bgms = None
                                    if not args.fwd_only:
                                        bwd = max(clock.event_ms(both_fn) - fwd, 1e-6)  # events: fwd + bwd less fwd
                                        bkern, nbk, bfb = clock.kernel_ms(grads_of, before=fwd_fn)
                                        fb += bfb
                                        both_g = clock.graph_or_none(both_fn, notes, "forward + backward")
                                        bgms = both_g - gms if both_g is not None and gms is not None else None
                                if fb:
                                    notes.append(f"{fb} GPU records placed by their start (launch not in the trace)")
                                tf = lambda fl, t: fmt(fl / t / 1e9 if t else None, 1)
                                w.writerow(row + [fmt(fwd), tf(flops, fwd), fmt(bwd), tf(2.5 * flops, bwd), "ok",
                                                  fmt(kern), tf(flops, kern), nk, fmt(gms), fmt(bkern), tf(2.5 * flops, bkern),
                                                  "" if nbk is None else nbk, fmt(bgms), args.graph, KERNEL_CLOCK,
                                                  "; ".join(notes).replace(",", ";")])
                                msg = f"{kern:.3f} ms fwd kernel" + (f", {bkern:.3f} ms bwd kernel" if bkern else "")
                            except Exception as e:  # a backend that does not support the shape, or OOM
                                reason = first_line(e, 160).replace(",", ";")
                                w.writerow(row + ["", "", "", "", f"failed: {reason}"] + empty[4:])
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
