#!/usr/bin/env python3
"""dQ's precision at long key ranges, on the CPU: which rounding makes a fused backward's dQ lose
percents where dK and dV do not (docs/19_hopper_backward.md, "dQ at long key ranges").

  scripts/dq_precision.py OUT.csv [--nks 1024,4096,16384,40960] [--d 128] [--seed 1] [--commit HASH]

One query row against Nk keys, bf16 inputs (Q, K, V: MEAN + randn, for MEAN = 0.5, the step programs'
inputs, and 0; dO: randn), the softmax scale 1/sqrt(d). Every product is computed in float64; only the
roundings to bf16 that the kernels make are applied, where they make them, so that each one can be
switched on alone:
  fused      what steps 13 and 19 (and FlashAttention's kernels) do: O stored in bf16 by the forward;
             D = dO · O from that stored O; P recomputed from L; dS = P (dP − D) rounded to bf16
             before dQ = dS K
  d-fp32o    the same, with D from the forward's O before it was rounded
  ds-exact   the same as fused, with dS not rounded
  both       D from the unrounded O and dS not rounded
  centered   fused, then the keys' plain mean c taken out of dQ's sum: scale·(Σ_j dS_j k_j − c·Σ_j dS_j),
             with Σ_j dS_j formed from the same rounded dS (a fix that leaves the forward alone)
  shifted    the cheap form of centered (not built in the kernels): every key moved by the same c, stored in
             bf16 (K' = bf16(K − c)); P recomputed from K' and the shifted L' = L − scale·(q·c) (softmax does not
             change), dS rounded, dQ = scale·Σ_j dS_j k'_j: no row sums, but one more rounding of the keys
  unfused    the framework's composite: S, P, dP stored in bf16 between the operations, D = Σ P∘dP
             of those stored values, dS rounded, dQ rounded
The error is the relative L2 error of dQ (before its own final rounding, which every variant shares)
against the float64 computation from the same bf16 inputs; beside it, that of dS, which is dK's error for a
single query row (dK_j = scale·dS_j·q). Accumulation is float64 everywhere: the
kernels' fp32 accumulation adds about sqrt(Nk)·2^-24, far below what is measured here.
Standard library only (no NumPy): a run at Nk = 40k takes seconds.
"""
import argparse
import csv
import math
import random
import struct
import subprocess
import time


def bf16(x):
    """Round a float to the nearest bfloat16 (ties to even), as a float."""
    b = struct.unpack("<I", struct.pack("<f", x))[0]
    b = (b + 0x7FFF + ((b >> 16) & 1)) & 0xFFFF0000
    return struct.unpack("<f", struct.pack("<I", b))[0]


def dot(a, b):
    return math.fsum(x * y for x, y in zip(a, b))


def rel_err(got, want):
    num = math.sqrt(sum((g - w) ** 2 for g, w in zip(got, want)))
    return num / math.sqrt(sum(w * w for w in want))


def run(nk, d, mean, seed):
    rng = random.Random(seed)
    q = [bf16(mean + rng.gauss(0, 1)) for _ in range(d)]
    k = [[bf16(mean + rng.gauss(0, 1)) for _ in range(d)] for _ in range(nk)]
    v = [[bf16(mean + rng.gauss(0, 1)) for _ in range(d)] for _ in range(nk)]
    do = [bf16(rng.gauss(0, 1)) for _ in range(d)]
    scale = 1.0 / math.sqrt(d)
    s = [scale * dot(q, kj) for kj in k]
    m = max(s)
    e = [math.exp(x - m) for x in s]
    l = math.fsum(e)
    lse = m + math.log(l)
    p = [x / l for x in e]
    o = [math.fsum(p[j] * v[j][c] for j in range(nk)) for c in range(d)]
    o16 = [bf16(x) for x in o]
    dp = [dot(do, vj) for vj in v]

    def dq_of(o_for_d, round_ds):
        dd = dot(do, o_for_d)
        ds = [p[j] * (dp[j] - dd) for j in range(nk)]
        if round_ds:
            ds = [bf16(x) for x in ds]
        return [scale * math.fsum(ds[j] * k[j][c] for j in range(nk)) for c in range(d)], dd, ds

    ref, d_exact, ds_ref = dq_of(o, False)
    out = {}
    for name, od, rd in (("fused", o16, True), ("d-fp32o", o, True), ("ds-exact", o16, False), ("both", o, False)):
        got, dd, ds = dq_of(od, rd)
        out[name] = (rel_err(got, ref), abs(dd - d_exact), rel_err(ds, ds_ref))
    dd = dot(do, o16)
    ds = [bf16(p[j] * (dp[j] - dd)) for j in range(nk)]
    cmean, sds = [math.fsum(k[j][c] for j in range(nk)) / nk for c in range(d)], math.fsum(ds)
    got = [scale * (math.fsum(ds[j] * k[j][c] for j in range(nk)) - cmean[c] * sds) for c in range(d)]
    out["centered"] = (rel_err(got, ref), abs(dd - d_exact), rel_err(ds, ds_ref))
    # The cheap form: K' = bf16(K - c) in memory, L' = L - scale·(q·c), P' from K' (what the kernel would recompute).
    ks = [[bf16(k[j][c] - cmean[c]) for c in range(d)] for j in range(nk)]
    lse_s = lse - scale * dot(q, cmean)
    ps = [math.exp(scale * dot(q, kj) - lse_s) for kj in ks]
    ds = [bf16(ps[j] * (dp[j] - dd)) for j in range(nk)]
    got = [scale * math.fsum(ds[j] * ks[j][c] for j in range(nk)) for c in range(d)]
    out["shifted"] = (rel_err(got, ref), abs(dd - d_exact), rel_err(ds, ds_ref))
    # The unfused composite: every intermediate stored in bf16.
    s16 = [bf16(x) for x in s]
    m16 = max(s16)
    e16 = [math.exp(x - m16) for x in s16]
    l16 = math.fsum(e16)
    p16 = [bf16(x / l16) for x in e16]
    dp16 = [bf16(x) for x in dp]
    dd16 = math.fsum(a * b for a, b in zip(p16, dp16))
    ds16 = [bf16(p16[j] * (dp16[j] - dd16)) for j in range(nk)]
    got = [scale * math.fsum(ds16[j] * k[j][c] for j in range(nk)) for c in range(d)]
    out["unfused"] = (rel_err(got, ref), abs(dd16 - d_exact), rel_err(ds16, ds_ref))
    # What the error of D alone predicts for the fused dQ: |δD| · ||Σ_j P_j k_j|| · scale / ||dQ||.
    kbar = [math.fsum(p[j] * k[j][c] for j in range(nk)) for c in range(d)]
    predicted = out["fused"][1] * scale * math.sqrt(dot(kbar, kbar)) / math.sqrt(dot(ref, ref))
    return out, predicted, lse


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--nks", default="1024,4096,16384,40960")
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--commit", default="")
    a = ap.parse_args()
    commit = a.commit
    if not commit:
        try:
            commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            commit = "unknown"
    date = time.strftime("%Y-%m-%dT%H:%MZ", time.gmtime())
    with open(a.out, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["date", "commit", "device", "dtype", "d", "Nk", "input_mean", "seed", "variant", "dq_rel_err",
                    "d_abs_err", "predicted_from_d", "ds_rel_err"])
        for mean in (0.5, 0.0):
            for nk in [int(x) for x in a.nks.split(",")]:
                t0 = time.time()
                out, predicted, _ = run(nk, a.d, mean, a.seed)
                for name, (err, derr, dserr) in out.items():
                    w.writerow([date, commit, "cpu (emulation)", "bf16", a.d, nk, mean, a.seed, name, f"{err:.4e}",
                                f"{derr:.4e}", f"{predicted:.4e}" if name == "fused" else "", f"{dserr:.4e}"])
                f.flush()
                print(f"[dq_precision] mean {mean} Nk {nk}: fused {out['fused'][0]:.3%}, d-fp32o {out['d-fp32o'][0]:.3%}, "
                      f"ds-exact {out['ds-exact'][0]:.3%}, centered {out['centered'][0]:.3%}, shifted {out['shifted'][0]:.3%}, unfused {out['unfused'][0]:.3%} ({time.time() - t0:.0f} s)")


if __name__ == "__main__":
    main()
