"""The host time of one attention call: the package's flash_attn_func against PyTorch's SDPA (docs/python.md,
"What the host profile says"). Each call is timed by the CPU's clock in one thread, at a shape small enough
that the GPU keeps up, so what is measured is the time the CPU spends queuing a call, not the kernels'.

    python3 python/examples/host_cost.py --out host_cost.csv [--calls 1000] [--repeats 5]

For each backend (steps: flash_attn_func; steps-function: the same with its eager path through
torch.autograd.Function rather than the operators, FLASH_ATTN_STEPS_DISPATCH=auto; steps-direct: the package's
implementations called as plain functions, so the difference is what the interface, the operator and autograd
add; sdpa) and each pass (fwd: forward alone under no_grad; fwd+bwd: forward and
backward of the sum of O) it runs --calls calls back to back, --repeats times, after a warm-up, and writes
one row: the median over the repeats of the host time per call (µs), and the wall time per call with the
GPU drained at the end (µs): when the two agree, the GPU waited for the host. The rows name the date,
the commit and the device, like gpt.py's.
"""

import argparse
import csv
import datetime
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt  # noqa: E402  (sdpa, commit)

ROW = ["date", "commit", "device", "backend", "pass", "B", "N", "H", "d", "dtype", "calls", "repeats",
       "host_us_per_call", "wall_us_per_call"]


BACKENDS = ("steps", "steps-function", "steps-direct", "sdpa")


def call(backend, q, k, v, backward):
    if backend == "steps-direct":
        # The package's own implementations, called as plain functions: no checks of the interface, no
        # operator dispatch, no autograd graph. Beside "steps" it prices what those add per call.
        from flash_attn_steps import _ops
        scale = q.shape[-1] ** -0.5
        with torch.no_grad():
            o, lse = _ops.fwd_impl(q, k, v, scale, True, 0, 0.0, 0)
            if backward:
                _ops.bwd_impl(torch.ones_like(o), q, k, v, o, lse, scale, True, 0, 0.0, 0, False)
        return o
    if backend in ("steps", "steps-function"):
        # steps-function: the same call with the eager path through torch.autograd.Function instead of the
        # operators ([dispatch] in _ops.py: FLASH_ATTN_STEPS_DISPATCH=auto); the same path as steps on a
        # PyTorch without torch.library.custom_op.
        import flash_attn_steps as fas
        from flash_attn_steps import _ops
        before = _ops.DISPATCH
        _ops.DISPATCH = "auto" if backend == "steps-function" else "op"
        try:
            o = fas.flash_attn_func(q, k, v, causal=True)
        finally:
            _ops.DISPATCH = before
    else:
        o = gpt.sdpa(q, k, v)
    if backward:
        o.sum().backward()
    return o


def measure(backend, q, k, v, backward, calls, repeats):
    """(host µs per call, wall µs per call), medians over the repeats."""
    sync = torch.cuda.synchronize if q.is_cuda else (lambda: None)
    for _ in range(max(3, calls // 10)):  # warm-up: first-call costs (spec cache, the allocator, dispatch)
        call(backend, q, k, v, backward)
    sync()
    host, wall = [], []
    for _ in range(repeats):
        grad = torch.enable_grad() if backward else torch.no_grad()
        with grad:
            t0 = time.perf_counter()
            for _ in range(calls):
                call(backend, q, k, v, backward)
            t1 = time.perf_counter()
            sync()
            t2 = time.perf_counter()
        host.append((t1 - t0) / calls * 1e6)
        wall.append((t2 - t0) / calls * 1e6)
    return statistics.median(host), statistics.median(wall)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="CSV to append the rows to (header written when new)")
    ap.add_argument("--calls", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--shape", default="1,128,6,64", help="B,N,H,d (default: one head pair of the small GPT's layer, short)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--backends", default=",".join(BACKENDS),
                    help="steps (flash_attn_func), steps-function (the same through torch.autograd.Function, not the "
                         "operators), steps-direct (its implementations without the interface, the operator and autograd), sdpa")
    args = ap.parse_args(argv)
    if args.calls < 1 or args.repeats < 1:
        ap.error("--calls and --repeats must be at least 1")
    unknown = [b for b in args.backends.split(",") if b not in BACKENDS]
    if unknown:
        ap.error(f"--backends: unknown {', '.join(unknown)} (known: {', '.join(BACKENDS)})")
    B, N, H, d = (int(x) for x in args.shape.split(","))
    device = torch.device(args.device)
    dtype = torch.bfloat16  # the package takes fp16 and bf16 only, on the CPU as well
    gen = torch.Generator(device="cpu").manual_seed(0)
    q, k, v = (torch.randn(B, N, H, d, generator=gen).to(device, dtype).requires_grad_() for _ in range(3))
    ident = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%MZ"), "commit": gpt.commit(),
             "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
             "B": B, "N": N, "H": H, "d": d, "dtype": str(dtype).replace("torch.", ""),
             "calls": args.calls, "repeats": args.repeats}
    new = not os.path.exists(args.out) or os.path.getsize(args.out) == 0
    with open(args.out, "a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=ROW)
        if new:
            w.writeheader()
        for backend in args.backends.split(","):
            for name, backward in (("fwd", False), ("fwd+bwd", True)):
                host, wall = measure(backend, q, k, v, backward, args.calls, args.repeats)
                w.writerow({**ident, "backend": backend, "pass": name, "host_us_per_call": f"{host:.1f}",
                            "wall_us_per_call": f"{wall:.1f}"})
                print(f"[host_cost] {backend} {name}: {host:.1f} µs host, {wall:.1f} µs wall per call", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
