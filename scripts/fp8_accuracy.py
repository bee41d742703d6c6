#!/usr/bin/env python3
"""What FP8 (e4m3) costs attention in accuracy, emulated on the CPU (docs/fp8_accuracy.md).

  python3 scripts/fp8_accuracy.py OUT.csv [--ns 1024,2048] [--ds 64,128,256] [--causal 0,1]
                                   [--heads 2] [--seed 0] [--commit HASH]

An emulation, not a kernel: the arithmetic an FP8 forward does (FlashAttention-3's, the plan of the
course's step 21), in PyTorch on the CPU, every rounding where such a kernel rounds:
  - Q, K, V quantized to e4m3 (round to nearest even, 3 mantissa bits, saturating at ±448) with a scale
    per (b, head) — "tensor" — or per tile of 128 rows — "block": x ≈ scale · e4m3(x / scale),
    scale = amax / 448;
  - "incoherent": Q and K first multiplied by the same random orthogonal matrix M = H·diag(±1)/√d (a
    randomized Hadamard transform): (QM)(KM)ᵀ = QKᵀ, and the outliers are spread over every column;
  - S = Q̃K̃ᵀ in float32 (products of e4m3 values are exact in float32), times the scales;
  - the online softmax over tiles of 128 keys in float32; each tile's P, relative to the running max,
    quantized to e4m3 after a static scale of 256 (P·256 ≤ 256 < 448) for the P·V product; l summed from
    the float32 P;
  - O = Σ P̃ Ṽ / l in float32, rounded to bf16.
The "bf16" row is the same loop in bf16 (step 16's arithmetic: P rounded to bf16, no scales); "fp8-p1"
is per-tensor FP8 with P cast without its scale (the plain FP8 baseline: small weights underflow);
"fp8-qk-only" has block scales and the transform on Q and K alone, P and V as in "bf16" (how much of
the error is S's, how much P·V's).
Every row is compared, as RMSE and largest error, with float64 attention on the bf16 inputs. Inputs:
FlashAttention-3's protocol (standard normal entries; "outliers": 0.1 % of them times 10) in bf16.

What it leaves out, and the GPU will show: the tensor cores' own accumulation of FP8 products (a
report on Hopper, DeepSeek-V3 §3.3.2, has it keep about 14 bits of the running sum inside an MMA), and
the ex2 unit's approximation. Needs PyTorch (Debian's python3-torch); exits 77 without it.
"""
import argparse
import csv
import datetime
import math
import os
import subprocess
import sys

E4M3_MAX = 448.0
P_SCALE = 256.0
TILE = 128
VARIANTS = ("bf16", "fp8-p1", "fp8-tensor", "fp8-block", "fp8-tensor-incoherent", "fp8-block-incoherent", "fp8-qk-only")


def load_torch():
    try:
        import torch
    except ImportError:
        print(f"fp8_accuracy.py: skipped: {sys.executable} has no PyTorch (Debian: python3-torch)", file=sys.stderr)
        return None
    return torch


torch = load_torch()


def e4m3(x):
    """x rounded to e4m3 (OCP E4M3: bias 7, 3 mantissa bits, subnormals down to 2^-9, no infinity), to
    nearest, ties to even, saturating at ±448 — what cvt.rn.satfinite.e4m3x2.f32 gives — as float64."""
    a = x.abs().to(torch.float64).clamp(max=E4M3_MAX)
    e = torch.floor(torch.log2(a.clamp(min=2.0 ** -6)))  # below 2^-6 the spacing stays 2^-9 (subnormals)
    ulp = torch.pow(2.0, e - 3)
    q = torch.round(a / ulp) * ulp  # torch.round: half to even
    return (torch.sign(x.to(torch.float64)) * q.clamp(max=E4M3_MAX)).to(torch.float64)


def bf16(x):
    return x.to(torch.bfloat16).to(torch.float64)


def hadamard(d, seed):
    """M = H_d · diag(r) / √d with H_d Sylvester's Hadamard matrix and r a seeded ±1 vector: orthogonal."""
    h = torch.ones(1, 1, dtype=torch.float64)
    while h.shape[0] < d:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    if h.shape[0] != d:
        raise ValueError(f"the Hadamard transform needs d a power of two (got {d})")
    g = torch.Generator().manual_seed(seed)
    r = torch.randint(0, 2, (d,), generator=g).to(torch.float64) * 2 - 1
    return h * r / math.sqrt(d)


def quantize(x, block):
    """x [H, n, d] in float64 → (e4m3 codes as float64, scales [H, n] per row): one scale per head
    (block = 0) or per tile of `block` rows, amax / 448 (1 where the tile is all zero)."""
    H, n, d = x.shape
    if block:
        tiles = (n + block - 1) // block
        pad = tiles * block - n
        xp = torch.cat([x, x.new_zeros(H, pad, d)], 1).view(H, tiles, block, d)
        amax = xp.abs().amax(dim=(2, 3), keepdim=True)
        scale = torch.where(amax > 0, amax / E4M3_MAX, torch.ones_like(amax))
        codes = e4m3(xp / scale).view(H, tiles * block, d)[:, :n]
        rows = scale.view(H, tiles, 1).expand(H, tiles, block).reshape(H, tiles * block)[:, :n]
        return codes, rows
    amax = x.abs().amax(dim=(1, 2), keepdim=True)
    scale = torch.where(amax > 0, amax / E4M3_MAX, torch.ones_like(amax))
    return e4m3(x / scale), scale.view(H, 1).expand(H, n)


def flash(q, k, v, sq, sk, sv, causal, p_round, scale):
    """The tiled forward: q [H, N, d], k and v [H, Nk, d] as the kernel holds them (codes, or bf16
    values), their per-row scales sq [H, N], sk and sv [H, Nk]; P per tile rounded by p_round. float32
    arithmetic, O returned in float64 (before its final rounding)."""
    f32 = torch.float32
    H, N, d = q.shape
    Nk = k.shape[1]
    qf, kf, vf = q.to(f32), k.to(f32), v.to(f32)
    m = torch.full((H, N, 1), -math.inf, dtype=f32)
    l = torch.zeros((H, N, 1), dtype=f32)
    acc = torch.zeros((H, N, d), dtype=f32)
    rows = torch.arange(N).view(N, 1)
    for j0 in range(0, Nk, TILE):
        j1 = min(j0 + TILE, Nk)
        s = torch.matmul(qf, kf[:, j0:j1].transpose(1, 2))  # exact products, float32 sums
        s = s * (sq.to(f32).unsqueeze(2) * sk[:, j0:j1].to(f32).unsqueeze(1) * scale)
        if causal:
            cols = torch.arange(j0, j1).view(1, j1 - j0)
            s = s.masked_fill((cols > rows + Nk - N).unsqueeze(0), -math.inf)
        m_new = torch.maximum(m, s.amax(dim=2, keepdim=True))
        m_use = torch.where(m_new == -math.inf, torch.zeros_like(m_new), m_new)
        alpha = torch.exp(m - m_use)
        p = torch.exp(s - m_use)
        l = l * alpha + p.sum(dim=2, keepdim=True)
        pv = torch.matmul(p_round(p).to(f32), vf[:, j0:j1] * sv[:, j0:j1].to(f32).unsqueeze(2))
        acc = acc * alpha + pv
        m = m_new
    out = torch.where(l > 0, acc / l, torch.zeros_like(acc))
    return out.to(torch.float64)


def reference(q, k, v, causal, scale):
    s = torch.matmul(q, k.transpose(1, 2)) * scale
    N, Nk = q.shape[1], k.shape[1]
    if causal:
        mask = torch.arange(Nk).view(1, Nk) > torch.arange(N).view(N, 1) + Nk - N
        s = s.masked_fill(mask.unsqueeze(0), -math.inf)
    p = torch.softmax(s, dim=2)
    p = torch.nan_to_num(p, nan=0.0)
    return torch.matmul(p, v)


def inputs(H, N, d, outliers, seed):
    """FlashAttention-3's protocol: standard normal; with outliers, 0.1 % of the entries times 10; bf16."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(3):
        x = torch.randn(H, N, d, generator=g, dtype=torch.float64)
        if outliers:
            pick = torch.rand(H, N, d, generator=g) < 0.001
            x = torch.where(pick, x * 10, x)
        out.append(bf16(x))
    return out


def run_variant(variant, q, k, v, causal, scale, seed):
    """O of one variant, in float64 after its rounding to bf16."""
    H, N, d = q.shape
    ones_q, ones_k = torch.ones(H, N, dtype=torch.float64), torch.ones(H, k.shape[1], dtype=torch.float64)
    if variant == "bf16":
        return bf16(flash(q, k, v, ones_q, ones_k, ones_k, causal, bf16, scale))
    if variant == "fp8-qk-only":  # block scales and the transform on Q and K; P and V as in bf16
        M = hadamard(d, seed)
        cq, sq = quantize(q @ M, TILE)
        ck, sk = quantize(k @ M, TILE)
        return bf16(flash(cq, ck, v, sq, sk, torch.ones_like(ones_k), causal, bf16, scale))
    block = TILE if "block" in variant else 0
    if "incoherent" in variant:
        M = hadamard(d, seed)
        q, k = q @ M, k @ M
    cq, sq = quantize(q, block)
    ck, sk = quantize(k, block)
    cv, sv = quantize(v, block)
    if variant == "fp8-p1":
        p_round = e4m3  # P cast as it is: weights below 2^-9 are lost
    else:
        p_round = lambda p: e4m3(p * P_SCALE) / P_SCALE  # noqa: E731
    return bf16(flash(cq, ck, cv, sq, sk, sv, causal, p_round, scale))


def commit(given=""):
    if given:
        return given
    if os.environ.get("FA_COMMIT"):
        return os.environ["FA_COMMIT"]
    try:
        return subprocess.check_output(["git", "rev-parse", "--short", "HEAD"], text=True, stderr=subprocess.DEVNULL,
                                       cwd=os.path.dirname(os.path.abspath(__file__))).strip()
    except Exception:  # noqa: BLE001 — no git
        return "unknown"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--ns", default="1024,2048")
    ap.add_argument("--ds", default="64,128,256")
    ap.add_argument("--causal", default="0,1")
    ap.add_argument("--heads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--commit", default="")
    a = ap.parse_args(argv)
    if torch is None:
        return 77
    try:
        ns, ds, cs = ([int(x) for x in v.split(",")] for v in (a.ns, a.ds, a.causal))
    except ValueError:
        ap.error("--ns, --ds and --causal take comma-separated integers")
    if a.heads < 1 or any(n < 1 for n in ns) or any(d < 1 or d & (d - 1) for d in ds) or any(c not in (0, 1) for c in cs):
        ap.error("--heads and --ns positive, --ds powers of two (the Hadamard transform), --causal 0 or 1")
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%MZ")
    cols = ["date", "commit", "machine", "protocol", "d", "N", "causal", "heads", "seed", "variant", "rmse", "max_abs",
            "ref_rms"]
    with open(a.out, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(cols)
        for protocol in ("normal", "outliers"):
            for d in ds:
                for n in ns:
                    for c in cs:
                        q, k, v = inputs(a.heads, n, d, protocol == "outliers", a.seed + 1000 * d + n)
                        scale = 1.0 / math.sqrt(d)
                        ref = reference(q, k, v, bool(c), scale)
                        ref_rms = ref.pow(2).mean().sqrt().item()
                        for var in VARIANTS:
                            o = run_variant(var, q, k, v, bool(c), scale, a.seed)
                            err = o - ref
                            rmse = err.pow(2).mean().sqrt().item()
                            w.writerow([when, commit(a.commit), "CPU emulation (PyTorch, float32/float64)", protocol, d, n,
                                        c, a.heads, a.seed, var, f"{rmse:.4e}", f"{err.abs().max().item():.4e}",
                                        f"{ref_rms:.4e}"])
                            print(f"[fp8] {protocol} d={d} N={n} causal={c} {var}: RMSE {rmse:.3e}", flush=True)
                        f.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
