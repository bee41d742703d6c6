"""A small character-level GPT, trained with PyTorch's attention and with the course's kernels.

    python3 python/examples/gpt.py --backend steps --seeds 0,1,2 --out gpt.csv    # flash_attn_steps
    python3 python/examples/gpt.py --backend sdpa  --seeds 0,1,2 --out gpt.csv    # SDPA (cuDNN on a GPU)

The text is the repository's own docs and sources (every .md, .cpp, .hpp, .cu and .py under docs/,
steps/, common/ and python/, in sorted order), 90 % for training and the rest for validation. The
model (`--layers 6 --d-model 384 --heads 6 --context 1024`, the defaults) is the same for both
backends; only the attention call differs. Everything but the attention is PyTorch in bf16 autocast.

Each training step appends one row to --out (CSV): the run's identity (date, commit, device, backend,
seed, the model's shape), the step, its training loss, the validation loss where measured (every
--eval-every steps), the step's time (CUDA events around the step: a whole training step, not a
kernel time), and its host time (the CPU's clock from the step's start until its last kernel is queued:
when that is the larger of the two, the GPU waited for the host). After the steps, with --profile-steps K on a GPU, K more steps run under torch.profiler
and --summary gets one row per run: the median step time and the attention's forward + backward
kernel time per step, and the median host time per step (Kineto's GPU records of the attention kernels, summed: the peers' clock,
docs/profiling.md "One clock", in the training step's own cache state, with no L2 flush).

On the CPU (a smoke test: CI runs it with a tiny model) the package runs the blueprints and "sdpa" is
PyTorch's attention written out (its scaled_dot_product_attention, where this PyTorch has it).
"""

import argparse
import csv
import datetime
import math
import os
import pathlib
import re
import statistics
import subprocess
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))

# The attention kernels of each backend, by name, for the summary's attention time: the course's
# kernels are named stepNN_ (their prefix), PyTorch's SDPA backends' by their libraries.
ATTENTION_KERNELS = {
    # Kineto names a kernel as the compiler does ("void fa::step16::step16_pingpong<...>(...)"): the
    # function's name, not the namespace's, is the one followed by "_".
    "steps": re.compile(r"\bstep(1[2-9])_"),
    "sdpa": re.compile(r"sdpa|fmha|flash|attention|fprop|bprop|dgrad|cudnn", re.IGNORECASE),
}

ROW = ["date", "commit", "device", "backend", "seed", "layers", "d_model", "heads", "context", "batch", "step", "loss",
       "val_loss", "step_ms", "host_ms"]
SUMMARY = ["date", "commit", "device", "backend", "seed", "layers", "d_model", "heads", "context", "batch", "steps",
           "final_loss", "final_val_loss", "step_ms_median", "host_ms_median", "attn_kernel_ms_per_step", "attn_kernels_per_step",
           "attn_clock"]


def corpus():
    files = []
    for top in ("docs", "steps", "common", "python"):
        files += [p for p in (ROOT / top).rglob("*") if p.suffix in (".md", ".cpp", ".hpp", ".cu", ".py") and p.is_file()]
    text = "".join(p.read_text(encoding="utf-8", errors="replace") for p in sorted(files))
    if not text:
        raise SystemExit("gpt.py: no text found under docs/, steps/, common/, python/")
    return text


class Attention(nn.Module):
    def __init__(self, d_model, heads, backend, dtype):
        super().__init__()
        self.h, self.backend, self.dtype = heads, backend, dtype
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.proj = nn.Linear(d_model, d_model, bias=False)

    def forward(self, x):
        B, N, C = x.shape
        q, k, v = self.qkv(x).view(B, N, 3, self.h, C // self.h).to(self.dtype).unbind(2)
        if self.backend == "steps":
            import flash_attn_steps as fas
            o = fas.flash_attn_func(q, k, v, causal=True)
        else:
            o = sdpa(q, k, v)
        return self.proj(o.reshape(B, N, C).to(x.dtype))


def sdpa(q, k, v):
    """PyTorch's attention on [B, N, H, d] tensors, causal: cuDNN's backend on a GPU."""
    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
    if hasattr(F, "scaled_dot_product_attention"):
        if q.is_cuda:
            from torch.nn.attention import SDPBackend, sdpa_kernel
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                return F.scaled_dot_product_attention(qt, kt, vt, is_causal=True).transpose(1, 2)
        return F.scaled_dot_product_attention(qt, kt, vt, is_causal=True).transpose(1, 2)
    N = q.shape[1]  # PyTorch before 2.0: the same, written out
    s = (qt.float() @ kt.float().transpose(-1, -2)) / math.sqrt(q.shape[-1])
    s = s.masked_fill(torch.ones(N, N, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    return (torch.softmax(s, -1) @ vt.float()).to(q.dtype).transpose(1, 2)


class Block(nn.Module):
    def __init__(self, d_model, heads, backend, dtype):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.attn = Attention(d_model, heads, backend, dtype)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab, layers, d_model, heads, context, backend, dtype):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d_model), nn.Embedding(context, d_model)
        self.blocks = nn.ModuleList(Block(d_model, heads, backend, dtype) for _ in range(layers))
        self.ln = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)

    def forward(self, idx, targets):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for b in self.blocks:
            x = b(x)
        logits = self.head(self.ln(x))
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1))


def commit():
    if os.environ.get("FA_COMMIT"):
        return os.environ["FA_COMMIT"]
    try:
        return subprocess.check_output(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, text=True,
                                       stderr=subprocess.DEVNULL).strip()
    except Exception:  # noqa: BLE001 — no git
        return "unknown"


def batches(data, batch, context, gen, device):
    ix = torch.randint(len(data) - context - 1, (batch,), generator=gen)
    x = torch.stack([data[i:i + context] for i in ix.tolist()])
    y = torch.stack([data[i + 1:i + context + 1] for i in ix.tolist()])
    return x.to(device), y.to(device)


def train(args, seed, data, val, vocab, rows, summary):
    device = torch.device(args.device)
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    torch.manual_seed(seed)
    model = GPT(vocab, args.layers, args.d_model, args.heads, args.context, args.backend, dtype).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.1)
    gen = torch.Generator().manual_seed(seed)
    vgen = torch.Generator().manual_seed(10_000 + seed)
    ident = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%MZ"), "commit": commit(),
             "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
             "backend": args.backend, "seed": seed, "layers": args.layers, "d_model": args.d_model,
             "heads": args.heads, "context": args.context, "batch": args.batch}
    amp = torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=args.dtype == "bf16")

    def step(x, y):
        with amp:
            loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss

    times, hosts, losses = [], [], []
    val_loss = ""
    for it in range(1, args.steps + 1):
        lr = args.lr * min(1.0, it / max(1, args.warmup)) * 0.5 * (1 + math.cos(math.pi * it / args.steps))
        for g in opt.param_groups:
            g["lr"] = lr
        x, y = batches(data, args.batch, args.context, gen, device)
        if device.type == "cuda":
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            t0 = time.perf_counter()
            loss = step(x, y)
            host = (time.perf_counter() - t0) * 1e3  # queued, not yet run: nothing in step() waits for the GPU
            b.record()
            b.synchronize()
            ms = a.elapsed_time(b)
        else:
            t0 = time.perf_counter()
            loss = step(x, y)
            ms = host = (time.perf_counter() - t0) * 1e3
        times.append(ms)
        hosts.append(host)
        losses.append(loss.item())
        val_loss = ""
        if it % args.eval_every == 0 or it == args.steps:
            with torch.no_grad(), amp:
                vx, vy = batches(val, args.batch, args.context, vgen, device)
                val_loss = f"{model(vx, vy).item():.5f}"
        rows.writerow({**ident, "step": it, "loss": f"{losses[-1]:.5f}", "val_loss": val_loss, "step_ms": f"{ms:.3f}",
                       "host_ms": f"{host:.3f}"})
        if not math.isfinite(losses[-1]):
            raise SystemExit(f"gpt.py: the loss is {losses[-1]} at step {it} ({args.backend}, seed {seed})")
        if it % args.log_every == 0 or it == args.steps:
            print(f"[gpt] {args.backend} seed {seed} step {it}/{args.steps}: loss {losses[-1]:.4f}"
                  f"{' val ' + val_loss if val_loss else ''}, {statistics.median(times[-args.log_every:]):.1f} ms/step"
                  f" (host {statistics.median(hosts[-args.log_every:]):.1f})",
                  flush=True)
    attn_ms, attn_n, clock, ok = "", "", "", True
    if args.profile_steps and device.type == "cuda":
        try:
            attn_ms, attn_n = attention_kernel_ms(args, step, data, gen, device)
            clock = "kineto;in-situ (no L2 flush)"
        except LookupError as e:  # the run's loss curve is kept; the summary says the time is missing, and the exit is 1
            print(f"gpt.py: {e}", file=sys.stderr)
            clock, ok = "none: no attention kernel found in the profile", False
    if args.host_profile:
        host_profile(args, step, data, gen, device, seed)
    summary.writerow({**ident, "steps": args.steps, "final_loss": f"{losses[-1]:.5f}", "final_val_loss": val_loss,
                      "step_ms_median": f"{statistics.median(times[len(times) // 10:]):.3f}",
                      "host_ms_median": f"{statistics.median(hosts[len(hosts) // 10:]):.3f}",
                      "attn_kernel_ms_per_step": attn_ms, "attn_kernels_per_step": attn_n, "attn_clock": clock})
    return ok


def host_profile(args, step, data, gen, device, seed):
    """Where a step's host time goes: args.profile_steps more steps under cProfile, the functions by cumulative
    time appended to args.host_profile (text). On a GPU that is the time the CPU spends queuing the step's work,
    and a call that waits for the GPU shows its wait as its own time."""
    import cProfile
    import io
    import pstats
    n = max(1, args.profile_steps)
    if device.type == "cuda":
        torch.cuda.synchronize()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(n):
        step(*batches(data, args.batch, args.context, gen, device))
    prof.disable()
    if device.type == "cuda":
        torch.cuda.synchronize()
    text = io.StringIO()
    stats = pstats.Stats(prof, stream=text)
    stats.sort_stats("cumulative").print_stats(40)
    with open(args.host_profile, "a") as f:
        f.write(f"# gpt.py host profile: backend {args.backend}, seed {seed}, {n} steps on {device} "
                f"(cumulative seconds over the {n} steps; divide by {n} for one step)\n{text.getvalue()}\n")


def attention_kernel_ms(args, step, data, gen, device):
    """The attention kernels' GPU time per training step (forward and backward), from the profiler."""
    import json
    import tempfile
    from torch.profiler import ProfilerActivity, profile
    pattern = ATTENTION_KERNELS[args.backend]
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(args.profile_steps):
            step(*batches(data, args.batch, args.context, gen, device))
        torch.cuda.synchronize()
    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        prof.export_chrome_trace(path)
        events = json.load(open(path))["traceEvents"]
    finally:
        os.remove(path)
    kernels = [e for e in events if e.get("cat") == "kernel" and pattern.search(str(e.get("name", "")))]
    if not kernels:
        raise LookupError(f"the profile holds no {args.backend} attention kernel (pattern {pattern.pattern}; "
                          f"kernels seen: {sorted({str(e.get('name'))[:60] for e in events if e.get('cat') == 'kernel'})[:5]})")
    ms = sum(e["dur"] for e in kernels) / 1000.0 / args.profile_steps
    return f"{ms:.4f}", f"{len(kernels) / args.profile_steps:.1f}"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--backend", choices=("steps", "sdpa"), required=True)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--d-model", type=int, default=384)
    ap.add_argument("--heads", type=int, default=6)
    ap.add_argument("--context", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--dtype", choices=("bf16", "fp16"), default="bf16")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--log-every", type=int, default=100)
    ap.add_argument("--profile-steps", type=int, default=10)
    ap.add_argument("--out", required=True, help="CSV of every step (appended to)")
    ap.add_argument("--summary", help="CSV of one row per run (appended to)")
    ap.add_argument("--host-profile", help="after each seed, --profile-steps more steps under cProfile: the functions "
                    "by cumulative time appended to this text file (where the host time of a step goes)")
    args = ap.parse_args(argv)
    for name in ("steps", "layers", "d_model", "heads", "context", "batch", "eval_every", "log_every"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.d_model % args.heads:
        ap.error("--heads must divide --d-model")
    try:
        seeds = [int(s) for s in args.seeds.split(",")]
    except ValueError:
        ap.error(f"--seeds: a comma-separated list of integers (got {args.seeds!r})")
    text = corpus()
    chars = sorted(set(text))
    lookup = {c: i for i, c in enumerate(chars)}
    ids = torch.tensor([lookup[c] for c in text], dtype=torch.long)
    cut = int(0.9 * len(ids))
    data, val = ids[:cut], ids[cut:]
    if len(val) <= args.context + 1:
        ap.error(f"--context {args.context} is longer than the validation text ({len(val)} characters)")
    print(f"[gpt] {len(text)} characters, {len(chars)} symbols; {args.backend} on {args.device}, seeds {seeds}",
          flush=True)
    outs = []
    for path, cols in ((args.out, ROW), (args.summary, SUMMARY)):
        if not path:
            outs.append(csv.DictWriter(open(os.devnull, "w"), fieldnames=cols))
            continue
        new = not os.path.exists(path) or os.path.getsize(path) == 0
        if not new:
            with open(path, newline="") as old:
                header = next(csv.reader(old), [])
            if header != cols:
                ap.error(f"{path} has other columns than this script writes ({','.join(header)}): "
                         "write to a new file (or remove it)")
        f = open(path, "a", newline="")
        w = csv.DictWriter(f, fieldnames=cols)
        if new:
            w.writeheader()
        outs.append(w)
    ok = [train(args, seed, data, val, len(chars), *outs) for seed in seeds]
    return 0 if all(ok) else 1


if __name__ == "__main__":
    sys.exit(main())
