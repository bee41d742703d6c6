"""dQ's precision at long key ranges, measured on the kernels (docs/19_hopper_backward.md, "dQ at long key ranges").

One query row attends over Nk keys in bf16; each backend's O, dQ, dK and dV are compared with float64 autograd on
the same bf16 values. scripts/dq_precision.py emulates the roundings on the CPU; this runs the kernels themselves.

    python3 python/examples/dq_long_keys.py --out dq_long_keys.csv [--device cuda] [--nks 1024,4096,16384,40960]
        [--means 0.5,0] [--d 128] [--group 1] [--seeds 1]

Inputs: Q, K, V = MEAN + randn (MEAN 0.5 is the step programs' inputs), dO = randn, rounded to bf16, drawn on the
CPU from the seed so that every device sees the same values. --group G: G query heads share one K/V head (GQA).
Backends, each a row per point (a backend this PyTorch or this device does not have is a row with its reason):
  steps-19, steps-13   the package's flash_attn_func, its backward forced to that step (FLASH_ATTN_STEPS_BACKWARD);
                       on the CPU the steps' blueprints, on a GPU their kernels (step 16's or 12's forward)
  steps-19-centered    the same with step 19's --dq centered (FLASH_ATTN_STEPS_DQ=centered): the keys' mean taken
                       out of dQ's sum
  sdpa-flash, sdpa-cudnn, sdpa-efficient, sdpa-math   PyTorch's SDPA with one backend allowed (PyTorch 2.3 or later)
  composite            the unfused bf16 attention, written out: S, P and O as bf16 tensors, autograd through them
The error is the relative L2 error (‖got − want‖ / ‖want‖) over each tensor. Rows name the date, commit and device.
"""

import argparse
import contextlib
import csv
import datetime
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt  # noqa: E402  (ROOT on sys.path for the package, commit)

import flash_attn_steps as fas  # noqa: E402

ROW = ["date", "commit", "device", "torch", "backend", "mean", "Nk", "d", "H", "Hkv", "seed", "o_err", "dq_err",
       "dk_err", "dv_err", "status"]
BACKENDS = ("steps-19", "steps-19-centered", "steps-13", "sdpa-flash", "sdpa-cudnn", "sdpa-efficient", "sdpa-math",
            "composite")


def inputs(mean, nk, d, group, seed, device):
    """q, dO [1, 1, group, d]; k, v [1, nk, 1, d]: bf16 on `device`, the same values on every device."""
    g = torch.Generator().manual_seed(seed)
    q, k, v = (mean + torch.randn(1, n, h, d, generator=g) for n, h in ((1, group), (nk, 1), (nk, 1)))
    do = torch.randn(1, 1, group, d, generator=g)
    return [t.to(torch.bfloat16).to(device) for t in (q, k, v, do)]


def heads_first(q, k, v):
    """[B, N, H, d] -> [B, H, N, d], each K/V head repeated for the group of query heads that shares it."""
    group = q.shape[2] // k.shape[2]
    return (q.transpose(1, 2),) + tuple(t.repeat_interleave(group, dim=2).transpose(1, 2) for t in (k, v))


def attention64(q, k, v):
    """float64 attention on [B, N, H, d] with K/V heads shared by groups of query heads."""
    qt, kt, vt = heads_first(q, k, v)
    s = qt @ kt.transpose(-1, -2) / math.sqrt(q.shape[-1])
    return (torch.softmax(s, -1) @ vt).transpose(1, 2)


def composite(q, k, v):
    """The unfused attention in the inputs' type: every intermediate a bf16 tensor."""
    qt, kt, vt = heads_first(q, k, v)
    s = (qt @ kt.transpose(-1, -2)) * (1.0 / math.sqrt(q.shape[-1]))
    return (torch.softmax(s, -1) @ vt).transpose(1, 2)


def sdpa(name):
    """A function running SDPA with that one backend, or a string saying why there is none."""
    if not hasattr(F, "scaled_dot_product_attention"):
        return f"PyTorch {torch.__version__} has no scaled_dot_product_attention"
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:
        return f"PyTorch {torch.__version__} has no torch.nn.attention.sdpa_kernel"
    backend = getattr(SDPBackend, {"flash": "FLASH_ATTENTION", "cudnn": "CUDNN_ATTENTION",
                                   "efficient": "EFFICIENT_ATTENTION", "math": "MATH"}[name], None)
    if backend is None:
        return f"PyTorch {torch.__version__} has no SDPA backend '{name}'"

    def fwd(q, k, v):
        qt, kt, vt = heads_first(q, k, v)
        return F.scaled_dot_product_attention(qt, kt, vt).transpose(1, 2)
    return with_backward(fwd, lambda: sdpa_kernel(backend))


@contextlib.contextmanager
def environment(**values):
    """The package's variables set while the block runs (FLASH_ATTN_STEPS_BACKWARD="19", ...). The package
    reads them when autograd calls its backward, so the block must hold the backward call too, not only
    the forward."""
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                del os.environ[k]
            else:
                os.environ[k] = v


def with_backward(fwd, setting=contextlib.nullcontext):
    """A backend's run: forward and backward (dO given) both inside its setting; returns O."""
    def run(q, k, v, do):
        with setting():
            o = fwd(q, k, v)
            o.backward(do)
        return o
    return run


def backend_fn(name):
    if name.startswith("steps-"):
        env = {"FLASH_ATTN_STEPS_BACKWARD": name.split("-")[1]}
        if name.endswith("-centered"):
            env["FLASH_ATTN_STEPS_DQ"] = "centered"
        return with_backward(fas.flash_attn_func, lambda: environment(**env))
    if name.startswith("sdpa-"):
        return sdpa(name.split("-")[1])
    return with_backward(composite)


def rel(got, want):
    return float((got.double() - want).norm() / want.norm())


def point(name, fn, q, k, v, do, want):
    """(o, dq, dk, dv errors, status) of one backend at one point; the errors None where it did not run."""
    if isinstance(fn, str):
        return None, "not run: " + fn
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    try:
        o = fn(*leaves, do)
        torch.cuda.synchronize() if q.is_cuda else None
    except (RuntimeError, ValueError) as e:  # a backend that refuses the shape (fas.UnsupportedError is one)
        return None, "refused: " + " ".join(str(e).split())[:200]
    errs = [rel(o, want[0])] + [rel(t.grad, w) for t, w in zip(leaves, want[1:])]
    if not all(math.isfinite(x) for x in errs):
        return errs, "FAILED: not finite"
    return errs, "ok"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--nks", default="1024,4096,16384,40960")
    ap.add_argument("--means", default="0.5,0")
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--group", type=int, default=1, help="query heads per K/V head (GQA)")
    ap.add_argument("--seeds", default="1")
    ap.add_argument("--backends", default=",".join(BACKENDS))
    a = ap.parse_args(argv)
    device = torch.device(a.device)
    names = [x for x in a.backends.split(",") if x]
    bad = [x for x in names if x not in BACKENDS]
    if bad:
        ap.error(f"unknown backend(s) {', '.join(bad)} (known: {', '.join(BACKENDS)})")
    if device.type == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda: PyTorch sees no CUDA device")
    fns = {n: backend_fn(n) for n in names}
    points = [(float(m), int(n), int(s)) for m in a.means.split(",") for n in a.nks.split(",") for s in a.seeds.split(",")]
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%MZ")
    failed = 0
    with open(a.out, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(ROW)
        for i, (mean, nk, seed) in enumerate(points):
            q, k, v, do = inputs(mean, nk, a.d, a.group, seed, device)
            ref = [t.detach().double().requires_grad_() for t in (q, k, v)]
            o64 = attention64(*ref)
            o64.backward(do.double())
            want = [o64.detach()] + [t.grad for t in ref]
            for name in names:
                errs, status = point(name, fns[name], q, k, v, do, want)
                failed += status.startswith("FAILED")
                cells = [f"{x:.4e}" for x in errs] if errs else [""] * 4
                w.writerow([date, gpt.commit(), where, torch.__version__, name, mean, nk, a.d, a.group, 1, seed]
                           + cells + [status])
                shown = f"dQ {errs[1] * 100:.2f} %, dK {errs[2] * 100:.2f} %, dV {errs[3] * 100:.2f} %" if errs else ""
                print(f"[dq_long_keys {i + 1}/{len(points)}] mean {mean} Nk {nk} {name}: {status} {shown}", flush=True)
    print(f"dq_long_keys: {len(points) * len(names)} rows in {a.out}" + (f", {failed} FAILED" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
