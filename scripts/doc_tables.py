#!/usr/bin/env python3
"""Write the measured tables into the docs and the README from the committed CSVs.

  scripts/doc_tables.py           rewrite every block between <!-- table:NAME --> and <!-- /table:NAME -->
  scripts/doc_tables.py --check   exit 1 if any block is not what the CSVs give (a ctest runs this)

Tables come only from plots/data/*.csv, which scripts/gpu_session.sh writes on a GPU: no measured
number in the docs is typed by hand. Standard library only.
"""
import csv
import glob
import math
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "plots", "data")


def rows(pattern):
    out = []
    for path in sorted(glob.glob(os.path.join(DATA, pattern))):
        with open(path, newline="") as f:
            out.extend(csv.DictReader(f))
    return out


def point(r):
    """A row's point of a target matrix: (dtype, d, causal, N)."""
    return (r["dtype"], int(r["d"]), int(r["causal"]), int(r["N"]))


def mb(x):
    return f"{float(x) / 1e6:,.0f}" if x not in ("", None) else "–"


def provenance(rs, how="scripts/gpu_session.sh"):
    if not rs:
        return f"_no measurements yet: run `{how}` on a GPU machine_"
    r = rs[0]
    gpu = r.get("device") or r.get("gpu")
    cuda = f", CUDA {r['cuda']}" if "cuda" in r else ""
    spans = {}
    for x in rs:  # a run writes a date per row: each commit's first and last
        lo, hi = spans.get(x["commit"], (x["date"], x["date"]))
        spans[x["commit"]] = (min(lo, x["date"]), max(hi, x["date"]))
    when = "; ".join(f"commit `{c}`, {lo}" + (f" – {hi}" if hi != lo else "")
                     for c, (lo, hi) in sorted(spans.items(), key=lambda kv: kv[1]))
    return (f"_Measured on an {gpu}{cuda}, {when}: the programs' own `--csv` rows "
            f"(how each file was made: `plots/data/README.md`)._")


def geomean(xs):
    return math.exp(sum(map(math.log, xs)) / len(xs))


def table(header, body):
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---:" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in body]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------
# One clock (docs/profiling.md): every table that sets a step beside PyTorch's backends takes both sides'
# times from the kernel clock — the GPU time of every kernel a call launches, summed, each rep on a cold
# L2 — and says so in its caption. clock_caption() refuses rows without that clock, or two sides whose
# L2 flush differs: a table that would mix methods is not written.

class ClockError(ValueError):
    pass


def kernel_clock(rs, what):
    """The L2 method every row of rs names in its `clock` column ("cupti;l2-read-256MiB" ->
    "l2-read-256MiB"); ClockError when a row has none or the rows name two."""
    if not rs:
        raise ClockError(f"{what}: no rows")
    methods = {r.get("clock") or "" for r in rs}
    if "" in methods:
        raise ClockError(f"{what}: {sum(1 for r in rs if not r.get('clock'))} row(s) without a kernel clock "
                         "(event-timed rows cannot stand beside kernel times)")
    l2 = {m.split(";", 1)[1] if ";" in m else "" for m in methods}
    if len(l2) != 1 or "" in l2:
        raise ClockError(f"{what}: the rows mix clocks {sorted(methods)}")
    return l2.pop()


CLOCK_CAPTION = ("_Timing (both sides): kernel time — every kernel a call launches, summed, from CUPTI's "
                 "activity records (ours: the step's runner; PyTorch's: `torch.profiler`), the median over "
                 "repeated calls, each after a 256 MiB read flushed the L2 (docs/profiling.md, \"One clock\"). "
                 "A ratio is the peer's kernel time over ours (above 1: ours is faster)._")


def clock_caption(ours, peers):
    """The caption every peer table carries, after checking that both sides were timed alike."""
    a, b = kernel_clock(ours, "our rows"), kernel_clock(peers, "the peers' rows")
    if a != b:
        raise ClockError(f"our rows flushed the L2 by {a}, the peers' by {b}: the table would mix methods")
    return CLOCK_CAPTION


def kms(r, pass_="fwd"):
    """Our kernel time (ms) of a pass, None where the row has none."""
    x = r.get("kernel_ms" if pass_ == "fwd" else "bwd_kernel_ms")
    return float(x) if x not in ("", None) else None


def ktf(r, pass_="fwd"):
    """TFLOP/s by kernel time, FlashAttention's convention (our rows and the peers' name it alike)."""
    x = r.get("kernel_tflops" if pass_ == "fwd" else "bwd_kernel_tflops")
    return float(x) if x not in ("", None) else None


def step_sweep(step):
    """Per (d, causal, N): each variant's median time and TFLOP/s, and the ledger's prediction."""
    rs = [r for r in rows("session_*.csv") if r["step"] == step and r["dtype"] == "fp16"]
    if not rs:
        return provenance(rs)
    defaults = ("-", "gemm=wmma", "grid=qtile")  # each step's default variant comes first
    variants = sorted({r["variant"] for r in rs}, key=lambda v: (v not in defaults, v))
    by = {}
    for r in rs:
        by[(int(r["d"]), int(r["causal"]), int(r["N"]), r["variant"])] = r
    keys = sorted({(d, c, n) for (d, c, n, _) in by}, key=lambda k: (-k[0], k[1], k[2]))
    header = ["d", "causal", "N", "B×H"]
    for v in variants:
        name = v.split("=")[-1] if v != "-" else "kernel"
        header += [f"{name} ms", f"{name} TFLOP/s"]
    header += ["ledger MB (read+write)", "predicted ms"]
    body = []
    for d, c, n in keys:
        first = next((by[(d, c, n, v)] for v in variants if (d, c, n, v) in by), None)
        row = [d, "yes" if c else "no", n, f"{first['B']}×{first['H']}" if first else ""]
        for v in variants:
            r = by.get((d, c, n, v))
            row += [f"{float(r['ms']):.3f}", f"{float(r['tflops']):.1f}"] if r else ["–", "–"]
        row += [mb(int(first["gmem_read_bytes"]) + int(first["gmem_write_bytes"])), f"{float(first['predicted_ms']):.3f}"]
        body.append(row)
    return provenance(rs) + "\n\n" + table(header, body)


def step_dtype(step):
    rs = [r for r in rows("session_*.csv") if r["step"] == step and r["d"] == "128" and r["causal"] == "0"]
    by = {(r["variant"], int(r["N"]), r["dtype"]): r for r in rs}
    body = []
    for (v, n) in sorted({(v, n) for (v, n, _) in by}):
        a, b = by.get((v, n, "fp16")), by.get((v, n, "bf16"))
        if a and b:
            body.append([v, n, f"{float(a['ms']):.3f}", f"{float(b['ms']):.3f}", f"{float(a['max_abs_err']):.1e}",
                         f"{float(b['max_abs_err']):.1e}"])
    return provenance(rs) + "\n\n" + table(["variant", "N", "fp16 ms", "bf16 ms", "fp16 max abs err", "bf16 max abs err"], body)


def step_ncu(step):
    rs = [r for r in rows("ncu_*.csv") if r["step"] == step]
    if not rs:
        return provenance(rs)
    header = ["variant", "N", "causal", "kernel", "ledger read MB", "requested read MB", "L2 read MB", "DRAM read MB",
              "ledger write MB", "requested write MB", "DRAM write MB", "kernel ms", "DRAM GB/s"]
    body = []
    for r in rs:
        dram = int(r["dram_read"]) + int(r["dram_write"])
        ms = float(r["ncu_ms"])
        body.append([r["variant"].split("=")[-1], r["N"], "yes" if r["causal"] == "1" else "no", r["kernel"][:28],
                     mb(r["ledger_read"]), mb(r["req_read"]), mb(r["l2_read"]), mb(r["dram_read"]), mb(r["ledger_write"]),
                     mb(r["req_write"]), mb(r["dram_write"]), f"{ms:.3f}", f"{dram / (ms * 1e-3) / 1e9:,.0f}" if ms else "–"])
    return provenance(rs) + "\n\n" + table(header, body)


def step_backward(step):
    """Per (d, causal, N): the backward's median time and TFLOP/s (2.5x forward FLOPs) for each --bwd
    schedule, the forward's time in the same run, and each schedule's ledger bytes and workspace."""
    rs = [r for r in rows("session_*.csv") if r["step"] == step and r["dtype"] == "fp16" and r.get("bwd_ms")]
    if not rs:
        return provenance(rs)
    variants = sorted({r["variant"] for r in rs}, key=lambda v: (not v.endswith("fused"), v))
    by = {(int(r["d"]), int(r["causal"]), int(r["N"]), r["variant"]): r for r in rs}
    keys = sorted({k[:3] for k in by}, key=lambda k: (-k[0], k[1], k[2]))
    header = ["d", "causal", "N", "B×H", "forward ms"]
    for v in variants:
        name = v.split("=")[-1]
        header += [f"{name} ms", f"{name} TFLOP/s", f"{name} ledger MB", f"{name} workspace MB"]
    body = []
    for d, c, n in keys:
        first = next(by[(d, c, n, v)] for v in variants if (d, c, n, v) in by)
        row = [d, "yes" if c else "no", n, f"{first['B']}×{first['H']}", f"{float(first['ms']):.3f}"]
        for v in variants:
            r = by.get((d, c, n, v))
            if r:
                led = int(r["bwd_gmem_read_bytes"]) + int(r["bwd_gmem_write_bytes"]) + int(r.get("bwd_gmem_atomic_bytes") or 0)
                ok = "" if r["bwd_pass"] == "1" else " (FAIL)"
                row += [f"{float(r['bwd_ms']):.3f}{ok}", f"{float(r['bwd_tflops']):.1f}", mb(led), mb(r["bwd_workspace_bytes"])]
            else:
                row += ["–"] * 4
        body.append(row)
    return provenance(rs) + "\n\n" + table(header, body)


def versus_peers():
    """Our fastest WMMA forward (step 07) and backward (step 08, fused) against PyTorch's SDPA backends
    (scripts/peer_tables.sh early), fp16, by kernel time on both sides: times and the ratio to flash (FA2)."""
    ours = {}
    early = [r for r in rows("clock_*_early.csv") if r["dtype"] == "fp16" and r.get("kernel_ms")]
    for r in early:
        if r["step"] == "07":
            ours[("fwd", int(r["d"]), int(r["causal"]), int(r["N"]))] = r
        if r["step"] == "08" and r["variant"] == "bwd=fused":
            ours[("bwd", int(r["d"]), int(r["causal"]), int(r["N"]))] = r
    peers = {k[:1] + k[2:]: r for k, r in peer_rows("early").items() if k[1] == "fp16"}
    keys = sorted({k[1:] for k in ours}, key=lambda k: (-k[0], k[1], k[2]))
    body, used, used_peers, fwd_x, bwd_x = [], [], [], [], []
    ms = lambda x: f"{x:.2f}" if x else "–"
    for d, c, n in keys:
        f, b = ours.get(("fwd", d, c, n)), ours.get(("bwd", d, c, n))
        fl, cu = peers.get(("flash", d, c, n)), peers.get(("cudnn", d, c, n))
        if not fl:
            continue
        used += [x for x in (f, b) if x]
        used_peers += [x for x in (fl, cu) if x]
        pk = lambda p, key: float(p[key]) if p and p.get(key) else None
        row = [d, "yes" if c else "no", n, ms(kms(f) if f else None), ms(pk(fl, "kernel_ms")), ms(pk(cu, "kernel_ms"))]
        if f:
            fwd_x.append(pk(fl, "kernel_ms") / kms(f))
        row.append(f"{fwd_x[-1]:.3f}" if f else "–")
        row += [ms(kms(b, "bwd") if b else None), ms(pk(fl, "bwd_kernel_ms")), ms(pk(cu, "bwd_kernel_ms"))]
        if b:
            bwd_x.append(pk(fl, "bwd_kernel_ms") / kms(b, "bwd"))
        row.append(f"{bwd_x[-1]:.3f}" if b else "not run (the run's budget)")
        body.append(row)
    if not body:
        return provenance([], "scripts/peer_tables.sh OUTDIR early")
    lines = [f"flash / step 07 (forward): geometric mean {geomean(fwd_x):.3f}, range {min(fwd_x):.3f}–{max(fwd_x):.3f}" if fwd_x else "",
             f"flash / step 08 (backward): geometric mean {geomean(bwd_x):.3f}, range {min(bwd_x):.3f}–{max(bwd_x):.3f} "
             f"over the {len(bwd_x)} points the run reached" if bwd_x else ""]
    return provenance(used, "scripts/peer_tables.sh OUTDIR early") + peers_note(used_peers, used) + "\n\n" + table(
        ["d", "causal", "N", "step 07 fwd ms", "flash fwd ms", "cuDNN fwd ms", "flash/ours fwd",
         "step 08 bwd ms", "flash bwd ms", "cuDNN bwd ms", "flash/ours bwd"], body) + "\n\n" + \
        "; ".join(x for x in lines if x) + "."


def ncu_extra(step):
    """Nsight's atomics, bank conflicts, occupancy, registers and shared memory per kernel."""
    rs = [r for r in rows("ncu-extra_*.csv") if r["step"] == step]
    if not rs:
        return provenance(rs)
    body = []
    for r in rs:
        smem = int(r["smem_static"] or 0) + int(r["smem_dynamic"] or 0)
        body.append([r["kernel"], f"{r['B']}×{r['H']}", r["N"], r["d"], mb(r["ledger_atomic"]), mb(r["red_bytes"]),
                     f"{int(r['bank_conflicts']):,}", r["occupancy_pct"], r["registers"], f"{smem:,}"])
    return provenance(rs) + "\n\n" + table(
        ["kernel", "B×H", "N", "d", "ledger atomic MB", "Nsight reduction MB", "shared-memory bank conflicts",
         "achieved occupancy %", "registers / thread", "shared memory / block (B)"], body)


def compare(a, b, va=("-", "gemm=wmma"), vb=("-",), label_a=None, label_b=None, speedup=True, both=False):
    """Step b against step a (the variants va and vb), d = 128 and 64, fp16, with and without the mask.
    The provenance line names step b's runs, or with both=True the runs of both sides (two sessions)."""
    label_a, label_b = label_a or f"step {a}", label_b or f"step {b}"
    pick = {}
    for r in rows("session_*.csv"):
        if r["dtype"] != "fp16":
            continue
        for side, st, vs in (("a", a, va), ("b", b, vb)):
            if r["step"] == st and r["variant"] in vs:
                pick[(side, int(r["d"]), int(r["causal"]), int(r["N"]))] = r
    body = []
    for (side, d, c, n) in sorted(pick, key=lambda k: (-k[1], k[2], k[3])):
        if side != "a" or ("b", d, c, n) not in pick:
            continue
        ra, rb = pick[("a", d, c, n)], pick[("b", d, c, n)]
        ba = int(ra["gmem_read_bytes"]) + int(ra["gmem_write_bytes"])
        bb = int(rb["gmem_read_bytes"]) + int(rb["gmem_write_bytes"])
        body.append([d, "yes" if c else "no", n, mb(ba), mb(bb), f"{float(ra['ms']):.3f}", f"{float(rb['ms']):.3f}",
                     f"{float(ra['ms']) / float(rb['ms']):.2f}" if speedup else f"{float(rb['ms']) / float(ra['ms']):.2f}"])
    used = [pick[k] for k in pick if k[0] == "b" or (both and ("b",) + k[1:] in pick)]
    return provenance(used) + "\n\n" + table(
        ["d", "causal", "N", f"{label_a} ledger MB", f"{label_b} ledger MB", f"{label_a} ms", f"{label_b} ms",
         f"speedup {label_a} / {label_b}" if speedup else f"time ratio {b}/{a}"], body)


def ncu_on_chip(steps, ns=("1024", "4096")):
    """Nsight per kernel for the given steps at the given N (d = 128): ledger and requested bytes, time,
    shared-memory bank conflicts (in total and per head), achieved occupancy, registers, shared memory.
    A step whose own Nsight run predates the on-chip columns (step 07) gets a second row: its forward
    kernel as profiled with them in ncu-extra_*.csv, where a later step (08) runs it."""
    rs = [r for r in rows("ncu_*.csv") if r["step"] in steps and r["N"] in ns]
    if not rs:
        return provenance(rs)
    kernels = {r["kernel"]: r["step"] for r in rs if not r["occupancy_pct"]}
    extra = [r for r in rows("ncu-extra_*.csv") if r["kernel"] in kernels]
    num = lambda x: float(x) if x not in ("", None) else 0.0

    def line(r, step, order):
        bh = int(r["B"]) * int(r["H"])
        led = int(r["ledger_read"]) + int(r["ledger_write"])
        req = int(r["req_read"]) + int(r["req_write"])
        smem = int(r["smem_static"] or 0) + int(r["smem_dynamic"] or 0)
        bank = r["bank_conflicts"]
        return ((int(r["N"]), int(r["causal"]), r["step"], order),
                [step, r["kernel"], f"{r['B']}×{r['H']}", r["N"], "yes" if r["causal"] == "1" else "no", mb(led),
                 mb(req) if req else "–", f"{num(r['ncu_ms']):.3f}" if num(r["ncu_ms"]) else "–",
                 f"{int(bank):,}" if bank else "–", f"{int(bank) / bh:,.0f}" if bank else "–",
                 r["occupancy_pct"] or "–", r["registers"] or "–", f"{smem:,}" if r["smem_static"] else "–"])

    body = [line(r, r["step"], 0) for r in rs]
    body += [line(dict(r, step=kernels[r["kernel"]]), f"{kernels[r['kernel']]} (run by {r['step']})", 1) for r in extra]
    body = [b for _, b in sorted(body)]
    note = ""
    if extra:
        note = (" _Rows marked \"run by\": the same kernel profiled with the on-chip metrics in "
                "`ncu-extra_*.csv`, at that run's smaller shape and without its time; its own Nsight run above "
                "predates those columns._")
    return provenance(rs + extra) + note + "\n\n" + table(
        ["step", "kernel", "B×H", "N", "causal", "ledger MB", "Nsight requested MB", "kernel ms",
         "shared-memory bank conflicts", "bank conflicts per head", "achieved occupancy %", "registers / thread",
         "shared memory / block (B)"], body)


def target(step):
    """The FlashAttention-2 target matrix: the step's rows of the forward phase (every dtype, d, mask, N)
    against PyTorch's flash backend (FlashAttention-2) at the same point, by kernel time on both sides;
    TFLOP/s on FlashAttention's convention (forward 4·B·H·N²·d, halved when causal). Closing line: the
    geometric mean of ours/flash, the minimum and its point, and how many points fall below 0.85 and 1.0
    (the target: geometric mean >= 1.0, no point below 0.85)."""
    ours, _, peers = fwd_rows()
    ours = [r for r in ours if r["step"] == step and r["d"] != "256"]
    dtypes = {"fp16": 0, "bf16": 1}
    ours.sort(key=lambda r: (dtypes.get(r["dtype"], 2), r["dtype"], -int(r["d"]), int(r["causal"]), int(r["N"])))
    body, ratios, used, used_peers = [], [], [], []
    for r in ours:
        key = point(r)
        fl, cu = peers.get(("flash",) + key), peers.get(("cudnn",) + key)
        if not fl:
            continue
        used.append(r)
        ok = "" if r["pass"] == "1" else " (FAIL)"
        cells = peer_cells(fl, r, ratios, key, used_peers, "fwd")
        body.append([r["dtype"], key[1], "yes" if key[2] else "no", key[3], f"{r['B']}×{r['H']}", f"{ktf(r):.1f}{ok}",
                     cells[0], f"{ktf(cu):.1f}" if cu else "–", cells[1]])
    if not body or not ratios:
        return provenance([], "scripts/peer_tables.sh OUTDIR fwd")
    geo = geomean([x for x, _ in ratios])
    low, (dt, d, c, n) = min(ratios)
    below85 = sum(x < 0.85 for x, _ in ratios)
    below1 = sum(x < 1.0 for x, _ in ratios)
    summary = (f"Over the {len(ratios)} points: geometric mean of step {step} / flash **{geo:.3f}** (target ≥ 1.0); "
               f"minimum **{low:.3f}** ({dt}, d = {d}, {'causal' if c else 'no mask'}, N = {n}; target: none below 0.85); "
               f"{below85} point{'s' if below85 != 1 else ''} below 0.85, {below1} below 1.0.")
    return provenance(used, "scripts/peer_tables.sh OUTDIR fwd") + peers_note(used_peers, used) + \
        " _TFLOP/s on FlashAttention's convention (4·B·H·N²·d, halved with the mask) on both sides._\n\n" + table(
        ["dtype", "d", "causal", "N", "B×H", f"step {step} TFLOP/s", "flash (FA2) TFLOP/s", "cuDNN TFLOP/s",
         f"step {step} / flash"], body) + "\n\n" + summary


def ablation(step, label="without", only=None):
    """The step with each of its changes taken out alone (bench --variants ablations -> ablation_*_stepNN.csv):
    per (d, causal, N), the full step's time and, per ablation, its time over the full step's (above 1:
    the change helped). Closing line: per ablation, the geometric mean of that ratio over the points
    and its range. `label` heads each column ("without" a change; "--tiles" for a step whose only
    experiment is another tile: above 1, the default tile is faster)."""
    rs = [r for r in rows(f"ablation_*_step{step}.csv") if r["step"] == step]
    if only:  # the default and the variants of one flag ("tiles", "ablate")
        rs = [r for r in rs if r["variant"] == "-" or r["variant"].startswith(only + "=")]
    if not rs:
        return provenance(rs)
    by = {(int(r["d"]), int(r["causal"]), int(r["N"]), r["variant"]): r for r in rs}
    names = sorted({r["variant"] for r in rs if r["variant"] != "-"}, key=lambda v: [r["variant"] for r in rs].index(v))
    keys = sorted({k[:3] for k in by}, key=lambda k: (-k[0], k[1], k[2]))
    header = ["d", "causal", "N", "step ms"] + [f"{label} `{v.split('=')[-1]}`" for v in names]
    body, ratios = [], {v: [] for v in names}
    for d, c, n in keys:
        full = by.get((d, c, n, "-"))
        if not full:
            continue
        row = [d, "yes" if c else "no", n, f"{float(full['ms']):.3f}"]
        for v in names:
            r = by.get((d, c, n, v))
            if r and r["pass"] == "1":
                x = float(r["ms"]) / float(full["ms"])
                ratios[v].append(x)
                row.append(f"{x:.2f}")
            else:
                row.append("FAIL" if r else "–")
        body.append(row)
    fails = sum(r["pass"] != "1" for r in rs)
    summary = "Geometric mean over the points (range): " + "; ".join(
        f"`{v.split('=')[-1]}` **{geomean(x):.2f}** ({min(x):.2f}–{max(x):.2f})"
        for v, x in ratios.items() if x) + (f". {fails} run(s) FAILED the check." if fails else
                                            ". Every run passed its check against the reference.")
    return provenance(rs) + "\n\n" + table(header, body) + "\n\n" + summary


def ncu_stalls(steps, n="4096", pattern="ncu_*.csv"):
    """Nsight per kernel at one N (both masks), with the per-operation shared-memory counters: time,
    registers, occupancy, tensor-pipe share, bank conflicts of plain loads (LDS; the hardware counter
    also counts ldmatrix's wavefronts), stores (STS), ldmatrix (LDSM) and cp.async (LDGSTS), all
    load and ldmatrix wavefronts, and the main warp stall reasons (warps stalled per issued
    instruction). Rows without the per-operation columns (older runs) are left out."""
    rs = [r for r in rows(pattern) if r["step"] in steps and r["N"] == n and r.get("wavefronts_ld")]
    if not rs:
        return provenance(rs)
    stalls = ["long_scoreboard", "wait", "math_pipe_throttle", "dispatch_stall", "not_selected",
              "short_scoreboard", "barrier"]
    count = lambda x: f"{int(x):,}" if x not in ("", None) else "–"
    shapes = sorted({(r["B"], r["H"], r["d"]) for r in rs})
    shape = "; ".join(f"B×H = {b}×{h}, d = {d}" for b, h, d in shapes)
    body = []
    for r in sorted(rs, key=lambda r: (int(r["causal"]), r["step"], r["variant"])):
        label = r["step"] + (f" ({r['variant']})" if r["variant"] not in ("", "-") else "")
        body.append([label, r["kernel"], "yes" if r["causal"] == "1" else "no",
                     f"{float(r['ncu_ms']):.3f}", r["registers"] or "–", r["occupancy_pct"] or "–",
                     r["tensor_pct"] or "–", count(r["bank_conflicts_ld"]), count(r["bank_conflicts_st"]),
                     count(r["bank_conflicts_ldsm"]), count(r.get("bank_conflicts_cp_async")),
                     count(r["wavefronts_ld"]), count(r["wavefronts_ldsm"])]
                    + [r[f"stall_{s}"] or "–" for s in stalls])
    return provenance(rs) + f" _N = {n}, {shape}. Bank conflicts: wavefronts beyond the minimum the access " \
        "needs — LDS from the hardware counter of shared-memory loads (its wavefronts include ldmatrix's), " \
        "LDSM for ldmatrix alone, LDGSTS for cp.async's writes. Stalls: warps stalled for that reason per " \
        "issued instruction._\n\n" + table(
        ["step", "kernel", "causal", "kernel ms", "registers / thread", "achieved occupancy %",
         "tensor pipe %", "conflicts LDS", "conflicts STS", "conflicts LDSM", "conflicts LDGSTS",
         "wavefronts LDS", "wavefronts LDSM"] + [f"stall `{s}`" for s in stalls], body)

# Step 13's FlashAttention-2 target matrix, as scripts/bwd_target.sh runs it: every point the table
# should have, so that a point the run did not reach shows as a row that says so.
BWD_TARGET_POINTS = [(dt, d, c, n) for dt in ("fp16", "bf16") for d in (128, 64) for c in (0, 1)
                     for n in (1024, 4096, 16384)]


def step13_rows(variant="deterministic=off", pattern="target_*_step13.csv"):
    """Step 13's rows of a file with the given variant (the default: racing dQ, no dropout)."""
    return [r for r in rows(pattern) if r["step"] == "13" and r["variant"] == variant and r.get("bwd_ms")]


def peer_rows(kind):
    """The peers' rows of one phase of scripts/peer_tables.sh (peers_*_clock_KIND.csv), status ok, by
    (backend, dtype, d, causal, N)."""
    out = {}
    for r in rows(f"peers_*_clock_{kind}.csv"):
        if r["status"] == "ok":
            out[(r["backend"], r["dtype"], int(r["d"]), int(r["causal"]), int(r["N"]))] = r
    return out


def peer_cells(peer, r, acc, key, used, pass_):
    """The two cells of one peer beside our row r (its TFLOP/s and its kernel time over ours, both by
    kernel time), where the peer timed the same B and H; the ratio goes to acc with the point's key, the
    peer row to used. pass_: "fwd" or "bwd"."""
    pk = peer and (peer.get("kernel_ms") if pass_ == "fwd" else peer.get("bwd_kernel_ms"))
    if peer and pk and (peer["B"], peer["H"]) == (r["B"], r["H"]) and kms(r, pass_):
        used.append(peer)
        x = float(pk) / kms(r, pass_)
        acc.append((x, key))
        return [f"{ktf(peer, pass_):.1f}", f"{x:.3f}"]
    return ["–", "–"]


def peers_note(used, ours, how="scripts/peers.py"):
    """The peers' provenance, with the clock both sides were timed by (clock_caption checks it)."""
    p = used[0]
    torch = f"PyTorch {p['torch']}" if p.get("torch") else "PyTorch"
    dates = sorted(x["date"] for x in used)
    commits = sorted({x["commit"] for x in used})
    when = ", ".join(f"commit `{c}`" for c in commits) + f", {dates[0]}" + (f" – {dates[-1]}" if dates[-1] != dates[0] else "")
    same = set(commits) <= {r["commit"] for r in ours}
    return (f" _Peers: {torch} SDPA, `{how}` on the same GPU in the same session ({when})"
            + ("; the same commit as ours._" if same else " — **another commit than ours**._") + " " + clock_caption(ours, used))


def bwd_target():
    """Step 13's backward against PyTorch's flash (FlashAttention-2) and cuDNN backends, per point of
    the target matrix, by kernel time on both sides (scripts/peer_tables.sh bwd): TFLOP/s on
    FlashAttention's convention (2.5 × the forward's 4·B·H·N²·d, halved with the mask) and the ratios.
    The closing lines: geometric mean and minimum of step 13 / flash, the range of step 13 / cuDNN, and
    the points of the matrix that have no step-13 row."""
    ours = step13_rows(pattern="clock_*_bwd.csv")
    if not ours:
        return provenance([], "scripts/peer_tables.sh OUTDIR bwd")
    peers = peer_rows("bwd")
    by = {point(r): r for r in ours}
    body, vs_flash, vs_cudnn, missing, used_peers = [], [], [], [], []
    for key in BWD_TARGET_POINTS:
        dt, d, c, n = key
        r, fl, cu = by.get(key), peers.get(("flash",) + key), peers.get(("cudnn",) + key)
        if not r:
            missing.append(key)
            body.append([dt, d, "yes" if c else "no", n, "not measured"] + ["–"] * 5)
            continue
        ok = "" if r["bwd_pass"] == "1" else " (FAIL)"
        row = [dt, d, "yes" if c else "no", n, f"{r['B']}×{r['H']}", f"{ktf(r, 'bwd'):.1f}{ok}"]
        for peer, acc in ((fl, vs_flash), (cu, vs_cudnn)):
            row += peer_cells(peer, r, acc, key, used_peers, "bwd")
        body.append(row)
    head = provenance(ours, "scripts/peer_tables.sh OUTDIR bwd")
    head += peers_note(used_peers, ours) if used_peers else " _No peer run covers these points: no ratios._"
    table_ = table(["dtype", "d", "causal", "N", "B×H", "step 13 bwd TFLOP/s", "flash (FA2) bwd TFLOP/s",
                    "step 13 / flash", "cuDNN bwd TFLOP/s", "step 13 / cuDNN"], body)
    lines = []
    if vs_flash:
        low, (dt, d, c, n) = min(vs_flash)
        lines.append(f"Over the {len(vs_flash)} points with both: geometric mean of step 13 / flash "
                     f"**{geomean([x for x, _ in vs_flash]):.3f}** (target ≥ 1.0); minimum **{low:.3f}** ({dt}, d = {d}, "
                     f"{'causal' if c else 'no mask'}, N = {n}; target: none below 0.85); {sum(x < 0.85 for x, _ in vs_flash)} "
                     f"below 0.85, {sum(x < 1.0 for x, _ in vs_flash)} below 1.0.")
    if vs_cudnn:
        xs = [x for x, _ in vs_cudnn]
        lines.append(f"Step 13 / cuDNN: geometric mean {geomean(xs):.3f}, range {min(xs):.3f}–{max(xs):.3f}.")
    if missing:
        names = "; ".join(f"{dt} d = {d} {'causal' if c else 'no mask'} N = {n}" for dt, d, c, n in missing)
        lines.append(f"**Not measured: {len(missing)} of the {len(BWD_TARGET_POINTS)} points** ({names}).")
    fails = sum(r["bwd_pass"] != "1" for r in ours)
    lines.append(f"{fails} row(s) FAILED the gradient check." if fails else
                 "Every measured row passed its gradient check (dQ, dK, dV by FlashAttention's rule).")
    return head + "\n\n" + table_ + "\n\n" + " ".join(lines)


# The Hopper steps' target matrix, as scripts/fwd_target.sh runs it (steps 12, 14 and 15 beside flash
# and cuDNN): every point the table should have.
FWD_TARGET_POINTS = [(dt, d, c, n) for dt in ("fp16", "bf16") for d in (128, 64) for c in (0, 1)
                     for n in (1024, 2048, 4096, 8192, 16384)]


def fwd_rows():
    """The forward phase of scripts/peer_tables.sh (clock_*_fwd.csv: steps 12, 14, 15, 16 at d = 64, 128;
    14-16 at 256) and its peers (peers_*_clock_fwd.csv), by (step,) + point and (backend,) + point."""
    ours = [r for r in rows("clock_*_fwd.csv") if r.get("kernel_ms")]
    return ours, {(r["step"],) + point(r): r for r in ours}, peer_rows("fwd")


def fwd_target(show):
    """The forward of steps 12, 14 and 15 against PyTorch's flash (FlashAttention-2) and cuDNN backends of
    the same run, per point, by kernel time: TFLOP/s (4·B·H·N²·d, halved with the mask) and the ratios.
    `show` is the step the table is about ("14" or "15"): its ratio to the step before and to both peers.
    Closing lines: the targets of docs/15 (step 15 / flash geometric mean >= 1.5; 14 and 15 each faster
    than the step before at every d = 128 point), the cuDNN range, missing points."""
    ours, by, peers = fwd_rows()
    ours = [r for r in ours if r["step"] in ("12", "14", "15") and r["d"] != "256"]
    if not ours:
        return provenance([], "scripts/peer_tables.sh OUTDIR fwd")
    prev = {"14": "12", "15": "14"}[show]
    body, vs_flash, vs_cudnn, vs_prev, missing, used = [], [], [], [], [], []
    slower = {"14": [], "15": []}
    for key in FWD_TARGET_POINTS:
        dt, d, c, n = key
        r, rp = by.get((show,) + key), by.get((prev,) + key)
        fl, cu = peers.get(("flash",) + key), peers.get(("cudnn",) + key)
        for st, pv in (("14", "12"), ("15", "14")):
            a, b = by.get((st,) + key), by.get((pv,) + key)
            if d == 128 and a and b and kms(a) >= kms(b):
                slower[st].append(key)
        if not r:
            missing.append(key)
            body.append([dt, d, "yes" if c else "no", n, "not measured"] + ["–"] * 7)
            continue
        ok = "" if r["pass"] == "1" else " (FAIL)"
        row = [dt, d, "yes" if c else "no", n, f"{r['B']}×{r['H']}", f"{ktf(rp):.1f}" if rp else "–", f"{ktf(r):.1f}{ok}"]
        if rp:
            x = kms(rp) / kms(r)
            vs_prev.append(x)
            row.append(f"{x:.3f}")
        else:
            row.append("–")
        for peer, acc in ((fl, vs_flash), (cu, vs_cudnn)):
            row += peer_cells(peer, r, acc, key, used, "fwd")
        body.append(row)
    head = provenance(ours, "scripts/peer_tables.sh OUTDIR fwd")
    if used:
        head += peers_note(used, ours)
    t = table(["dtype", "d", "causal", "N", "B×H", f"step {prev} TFLOP/s", f"step {show} TFLOP/s",
               f"step {show} / step {prev}", "flash (FA2) TFLOP/s", f"step {show} / flash", "cuDNN TFLOP/s",
               f"step {show} / cuDNN"], body)
    lines = []
    if vs_flash:
        xs = [x for x, _ in vs_flash]
        low, (dt, d, c, n) = min(vs_flash)
        lines.append(f"Over the {len(xs)} points: step {show} / flash geometric mean **{geomean(xs):.3f}**"
                     + (" (target ≥ 1.5)" if show == "15" else "") + f", minimum {low:.3f} ({dt}, d = {d}, "
                     f"{'causal' if c else 'no mask'}, N = {n}).")
    if vs_prev:
        lines.append(f"Step {show} / step {prev}: geometric mean {geomean(vs_prev):.3f}, range {min(vs_prev):.3f}–{max(vs_prev):.3f}.")
    for st, pv in (("14", "12"), ("15", "14")):
        if st == show or show == "15":
            k = slower[st]
            lines.append(f"d = 128 points where step {st} is not faster than step {pv}: **{len(k)}**"
                         + (" (target: none)." if not k else " (" + "; ".join(f"{a} {'causal' if c else 'no mask'} N = {n}" for a, _, c, n in k) + ")."))
    if vs_cudnn:
        xs = [x for x, _ in vs_cudnn]
        lines.append(f"Step {show} / cuDNN: geometric mean {geomean(xs):.3f}, range {min(xs):.3f}–{max(xs):.3f}; "
                     f"{sum(x >= 1.0 for x in xs)} of {len(xs)} points at or above 1.")
    if missing:
        lines.append(f"**Not measured: {len(missing)} of the {len(FWD_TARGET_POINTS)} points.**")
    fails = sum(r["pass"] != "1" for r in ours)
    lines.append(f"{fails} row(s) FAILED the check." if fails else
                 f"Every row shown ({len(ours)}: steps 12, 14 and 15) passed its check against the reference.")
    return head + "\n\n" + t + "\n\n" + " ".join(lines)


def fwd16_target():
    """Step 16 against PyTorch's flash and cuDNN backends of the same run over the target matrix (d = 64
    and 128): TFLOP/s and the ratios of times. Closing lines: the targets of docs/16 (step 16 / cuDNN
    geometric mean >= 1.0, no point below 0.9, >= 1.6x flash), with the points below 0.9 named."""
    ours, by, peers = fwd_rows()
    ours = [r for r in ours if r["step"] == "16" or r["d"] == "256"]
    if not ours:
        return provenance([], "scripts/peer_tables.sh OUTDIR fwd")
    body, vs_flash, vs_cudnn, used, missing = [], [], [], [], []
    for key in FWD_TARGET_POINTS:
        dt, d, c, n = key
        r = by.get(("16",) + key)
        if not r:
            missing.append(key)
            body.append([dt, d, "yes" if c else "no", n, "not measured"] + ["–"] * 5)
            continue
        ok = "" if r["pass"] == "1" else " (FAIL)"
        row = [dt, d, "yes" if c else "no", n, f"{r['B']}×{r['H']}", f"{ktf(r):.1f}{ok}"]
        for peer, acc in ((peers.get(("flash",) + key), vs_flash), (peers.get(("cudnn",) + key), vs_cudnn)):
            row += peer_cells(peer, r, acc, key, used, "fwd")
        body.append(row)
    head = provenance(ours, "scripts/peer_tables.sh OUTDIR fwd")
    if used:
        head += peers_note(used, ours)
    head += " _TFLOP/s: 4·B·H·N²·d, halved with the mask, on both sides._"
    t = table(["dtype", "d", "causal", "N", "B×H", "step 16 TFLOP/s", "flash (FA2) TFLOP/s", "step 16 / flash",
               "cuDNN TFLOP/s", "step 16 / cuDNN"], body)
    name = lambda k: f"{k[0]} d = {k[1]} {'causal' if k[2] else 'no mask'} N = {k[3]}"
    lines = []
    if vs_cudnn:
        xs = [x for x, _ in vs_cudnn]
        low = sorted((x, k) for x, k in vs_cudnn if x < 0.9)
        lo, lk = min(vs_cudnn)
        lines.append(f"Over the {len(xs)} points: step 16 / cuDNN geometric mean **{geomean(xs):.3f}** (target ≥ 1.0), "
                     f"minimum {lo:.3f} ({name(lk)}); {sum(x >= 1.0 for x in xs)} of {len(xs)} points at or above 1; "
                     f"points below 0.9 (target: none): **{len(low)}**"
                     + (" — " + "; ".join(f"{name(k)}: {x:.3f}" for x, k in low) + "." if low else "."))
    if vs_flash:
        xs = [x for x, _ in vs_flash]
        lo, lk = min(vs_flash)
        lines.append(f"Step 16 / flash: geometric mean **{geomean(xs):.3f}** (target ≥ 1.6), minimum {lo:.3f} ({name(lk)}).")
    if missing:
        lines.append(f"**Not measured: {len(missing)} of the {len(FWD_TARGET_POINTS)} points.**")
    fails = sum(r["pass"] != "1" for r in ours)
    lines.append(f"{fails} row(s) FAILED the check." if fails else
                 f"Every row of the run ({len(ours)}: step 16 at d = 64, 128, 256; steps 14 and 15 at d = 256) passed its check against the reference.")
    return head + "\n\n" + t + "\n\n" + " ".join(lines)


def fwd16_wide():
    """d = 256: steps 14, 15 and 16 of the same run beside every peer that ran the shape."""
    ours, by, peers = fwd_rows()
    wide = [r for r in ours if r["d"] == "256"]
    if not wide:
        return provenance([], "scripts/peer_tables.sh OUTDIR fwd")
    body, vs15, vsc, vsf, used = [], [], [], [], []
    for dt in ("fp16", "bf16"):
        for c in (0, 1):
            for n in (1024, 2048, 4096, 8192, 16384):
                key = (dt, 256, c, n)
                r16, r15, r14 = by.get(("16",) + key), by.get(("15",) + key), by.get(("14",) + key)
                if not r16:
                    body.append([dt, "yes" if c else "no", n, "not measured"] + ["–"] * 8)
                    continue
                cell = lambda r: (f"{ktf(r):.1f}" + ("" if r["pass"] == "1" else " (FAIL)")) if r else "–"
                row = [dt, "yes" if c else "no", n, cell(r14), cell(r15), cell(r16)]
                if r15:
                    x = kms(r15) / kms(r16)
                    vs15.append(x)
                    row.append(f"{x:.3f}")
                else:
                    row.append("–")
                for peer, acc in ((peers.get(("flash",) + key), vsf), (peers.get(("cudnn",) + key), vsc)):
                    row += peer_cells(peer, r16, acc, key, used, "fwd")
                body.append(row)
    head = provenance(wide, "scripts/peer_tables.sh OUTDIR fwd")
    if used:
        head += peers_note(used, wide)
    t = table(["dtype", "causal", "N", "step 14 TFLOP/s", "step 15 TFLOP/s", "step 16 TFLOP/s", "step 16 / step 15",
               "flash (FA2) TFLOP/s", "step 16 / flash", "cuDNN TFLOP/s", "step 16 / cuDNN"], body)
    rng = lambda xs: f"geometric mean **{geomean(xs):.3f}**, range {min(xs):.3f}–{max(xs):.3f}"
    vsf, vsc = [x for x, _ in vsf], [x for x, _ in vsc]
    lines = [f"d = 256 (B·N = 16k, H = 8): step 16 / step 15 {rng(vs15)}" if vs15 else "",
             f"step 16 / flash {rng(vsf)}" if vsf else "", f"step 16 / cuDNN {rng(vsc)}" if vsc else "",
             f"{sum(x >= 1.0 for x in vsc)} of {len(vsc)} points at or above cuDNN" if vsc else ""]
    best = max((r for r in ours if r["step"] == "16" and r["pass"] == "1"), key=ktf, default=None)
    if best:  # over the whole run (d = 64, 128, 256)
        lines.append(f"step 16's best point of the run, by kernel time: {ktf(best):.1f} TFLOP/s ({best['dtype']}, d = {best['d']}, "
                     f"{'causal' if best['causal'] == '1' else 'no mask'}, N = {best['N']}), "
                     f"{100 * ktf(best) / 989.0:.0f} % of the H200's 989 TFLOP/s dense fp16/bf16 (datasheet)")
    return head + "\n\n" + t + "\n\n" + "; ".join(x for x in lines if x) + "."


def step12_dropout():
    """Step 12's forward with --dropout against the same run without it (dropout_*_step12.csv, written by
    scripts/bwd_target.sh): per point, both times and their ratio (above 1: dropout costs that much)."""
    rs = [r for r in rows("dropout_*_step12.csv") if r["step"] == "12" and r.get("ms")]
    base = {point(r): r for r in rs if "dropout" not in r["variant"]}
    body, used = [], []
    for r in rs:
        if "dropout" not in r["variant"]:
            continue
        key = point(r)
        b = base.get(key)
        if not b:
            continue
        used += [b, r]
        ok = "" if r["pass"] == "1" else " (FAIL)"
        body.append([r["variant"], key[0], key[1], "yes" if key[2] else "no", key[3], f"{r['B']}×{r['H']}",
                     f"{float(b['ms']):.3f}", f"{float(r['ms']):.3f}{ok}", f"{float(r['ms']) / float(b['ms']):.2f}"])
    if not body:
        return provenance([], "scripts/bwd_target.sh")
    return provenance(used) + "\n\n" + table(
        ["variant", "dtype", "d", "causal", "N", "B×H", "forward ms", "with dropout ms", "time ratio"], body)


def bwd_first():
    """Step 13's first kernel (each warp owning 16 keys and every query, Pᵀ and dSᵀ from registers;
    history/target_*_step13_<commit>.csv) against the kernel as built (target_*_step13.csv), per point
    of the target matrix both measured: TFLOP/s and their ratio."""
    old = [r for r in rows(os.path.join("history", "target_*_step13_*.csv"))
           if r["step"] == "13" and r["variant"] == "deterministic=off" and r.get("bwd_ms")]
    new = step13_rows()
    if not (old and new):
        return provenance([], "scripts/bwd_target.sh")
    by_old = {point(r): r for r in old}
    body, xs = [], []
    for r in new:
        key = point(r)
        o = by_old.get(key)
        if not o or (o["B"], o["H"]) != (r["B"], r["H"]):
            continue
        x = float(o["bwd_ms"]) / float(r["bwd_ms"])
        xs.append(x)
        body.append([key[0], key[1], "yes" if key[2] else "no", key[3], f"{float(o['bwd_tflops']):.1f}",
                     f"{float(r['bwd_tflops']):.1f}", f"{x:.3f}"])
    head = provenance(old + new) + (" _The first kernel's rows: `plots/data/history/`; a ratio is the first "
                                    "kernel's time over the kernel's as built (above 1: faster now)._")
    geo = geomean(xs) if xs else float("nan")
    return (head + "\n\n" + table(["dtype", "d", "causal", "N", "first kernel bwd TFLOP/s",
                                    "as built bwd TFLOP/s", "speed-up"], body)
            + f"\n\nOver the {len(xs)} points both runs measured: geometric mean speed-up {geo:.3f}, "
              f"range {min(xs):.3f}–{max(xs):.3f}.")


def bwd_ledger(step08="08", d=128, n=4096):
    """The backward's ledger beside step 08's fused one at one shape (fp16, no mask), both from the
    CSVs' ledger columns (the closed forms, as the programs report them with their measured rows)."""
    a = next((r for r in rows("session_*.csv") if r["step"] == step08 and r["variant"] == "bwd=fused"
              and r["dtype"] == "fp16" and r["causal"] == "0" and int(r["d"]) == d and int(r["N"]) == n), None)
    b = next((r for r in step13_rows() if r["dtype"] == "fp16" and r["causal"] == "0" and int(r["d"]) == d
              and int(r["N"]) == n), None)
    if not (a and b):
        return provenance([], "scripts/bwd_target.sh")
    body = []
    for label, r in ((f"step {step08} (fused)", a), ("step 13", b)):
        atom = int(r.get("bwd_gmem_atomic_bytes") or 0)
        rd, wr = int(r["bwd_gmem_read_bytes"]), int(r["bwd_gmem_write_bytes"])
        body.append([label, mb(rd), mb(wr), mb(atom) if r.get("bwd_gmem_atomic_bytes") else "–", mb(rd + wr + atom),
                     f"{int(r['bwd_matmul_flops']) / 1e9:,.0f}", mb(r["bwd_workspace_bytes"]),
                     f"{float(r['bwd_predicted_ms']):.2f}", f"{float(r['bwd_ms']):.2f}"])
    return provenance([b, a]) + f" _B×H = {b['B']}×{b['H']}, N = {n}, d = {d}, fp16, no mask; the ledger's columns " \
        "(bytes requested before L2; predicted ms is their roofline) are the same for every run of the shape, only " \
        "measured ms is measured._\n\n" + table(
        ["backward", "read MB", "write MB", "fp32 atomics MB", "total MB", "tensor-core GFLOP", "workspace MB",
         "predicted ms", "measured ms"], body)


def bwd_variants():
    """--deterministic and --dropout against the racing, undropped backward at the same point
    (target_*_step13.csv): time ratio (above 1: slower)."""
    base = {point(r): r for r in step13_rows()}
    other = [r for r in rows("target_*_step13.csv") if r["step"] == "13" and r.get("bwd_ms")
             and r["variant"] != "deterministic=off"]
    body, used = [], []
    for r in sorted(other, key=lambda r: (r["variant"], r["dtype"], -int(r["d"]), int(r["causal"]), int(r["N"]))):
        key = point(r)
        b = base.get(key)
        if not b:
            continue
        used += [r, b]
        ok = "" if r["bwd_pass"] == "1" else " (FAIL)"
        body.append([r["variant"].replace(";", ", "), key[0], key[1], "yes" if key[2] else "no", key[3],
                     f"{float(b['bwd_ms']):.3f}", f"{float(r['bwd_ms']):.3f}{ok}",
                     f"{float(r['bwd_ms']) / float(b['bwd_ms']):.2f}", mb(r["bwd_workspace_bytes"])])
    if not body:
        return provenance([], "scripts/bwd_target.sh")
    return provenance(used) + "\n\n" + table(
        ["variant", "dtype", "d", "causal", "N", "default bwd ms", "variant bwd ms", "time ratio", "workspace MB"], body)


def bwd_tiles():
    """Step 13's experiments (bench --steps 13 --variants ablations -> ablation_*_step13.csv): per
    point, the default's backward time and each --tiles or --experiment choice's time over it (above
    1: slower than the default)."""
    rs = [r for r in rows("ablation_*_step13.csv") if r["step"] == "13" and r.get("bwd_ms")]

    def choice(v):  # "tiles 64x64", "experiment red32", or "default"
        for part in v.split(";"):
            flag, _, value = part.partition("=")
            if flag in ("tiles", "experiment") and value not in ("auto", "none"):
                return f"{flag} {value}"
        return "default"
    by = {(int(r["d"]), int(r["causal"]), int(r["N"]), choice(r["variant"])): r for r in rs}
    order = [f"tiles {t}" for t in ("64x128", "128x128", "32x128", "64x64")] + \
            [f"experiment {x}" for x in ("dq-end", "red64", "red32")]
    names = [t for t in order if any(k[3] == t for k in by)]
    body = []
    for d, c, n in sorted({k[:3] for k in by}, key=lambda k: (-k[0], k[1], k[2])):
        full = by.get((d, c, n, "default"))
        if not full:
            continue
        row = [d, "yes" if c else "no", n, f"{float(full['bwd_ms']):.3f}"]
        for t in names:
            r = by.get((d, c, n, t))
            row.append("–" if not r else "FAIL" if r["bwd_pass"] != "1" else f"{float(r['bwd_ms']) / float(full['bwd_ms']):.2f}")
        body.append(row)
    if not body:
        return provenance([], "bench --steps 13 --variants ablations")
    return provenance(rs) + "\n\n" + table(["d", "causal", "N", "default bwd ms"] + [f"`--{t}`" for t in names], body)


def loop_and_grid():
    """Step 03 (K/V outer, a block per (b, h)), step 04 with the same grid, step 04 with a block per Q tile."""
    rs = rows("session_*.csv")
    pick = {}
    for r in rs:
        if r["dtype"] == "fp16" and r["causal"] == "0" and r["step"] in ("03", "04"):
            pick[(r["step"], r["variant"], int(r["d"]), int(r["N"]))] = r
    body = []
    for (d, n) in sorted({(k[2], k[3]) for k in pick}, key=lambda k: (-k[0], k[1])):
        a, b, c = pick.get(("03", "-", d, n)), pick.get(("04", "grid=bh", d, n)), pick.get(("04", "grid=qtile", d, n))
        if not (a and b and c):
            continue
        la = int(a["gmem_read_bytes"]) + int(a["gmem_write_bytes"])
        lb = int(b["gmem_read_bytes"]) + int(b["gmem_write_bytes"])
        ta, tb, tc = float(a["ms"]), float(b["ms"]), float(c["ms"])
        body.append([d, n, f"{a['B']}×{a['H']}", mb(la), mb(lb), f"{ta:.2f}", f"{tb:.2f}", f"{tc:.2f}", f"{ta / tb:.2f}", f"{tb / tc:.1f}"])
    used = [r for k, r in pick.items()]
    return provenance(used) + "\n\n" + table(
        ["d", "N", "B×H", "step 03 ledger MB", "step 04 ledger MB", "03 ms (B·H blocks)", "04 ms, --grid bh",
         "04 ms, --grid qtile", "loop order: 03/04-bh", "grid: bh/qtile"], body)


def spread(r, key="ms"):
    """A measured time and, where the row has several timed runs ([noise]), their min–max."""
    ms = float(r[key])
    lo, hi = r.get(key + "_min") or r.get(key.replace("ms", "ms_min")), r.get(key + "_max") or r.get(key.replace("ms", "ms_max"))
    if r.get("runs", "1") not in ("", "1") and lo and hi:
        return f"{ms:.3g} ({float(lo):.3g}–{float(hi):.3g})"
    return f"{ms:.3g}"


def tour():
    rs = rows("tour_*.csv")
    docs = {os.path.basename(p)[:2]: os.path.basename(p) for p in glob.glob(os.path.join(ROOT, "docs", "[0-9][0-9]_*.md"))}
    body = []
    for r in rs:
        doc = docs.get(r["step"])
        step = f"[{r['step']}](docs/{doc})" if doc else r["step"]
        led = int(r["gmem_read_bytes"]) + int(r["gmem_write_bytes"])
        bwd = f"{float(r['bwd_ms']):.2f}" if r.get("bwd_ms") else "–"
        ok = r["pass"] == "1" and r.get("bwd_pass", "1") in ("1", "")
        if r.get("model_ms"):  # [model] the per-resource model's time and bound, and the runs' spread
            bwd = spread(r, "bwd_ms") if r.get("bwd_ms") else "–"
            bwd_model = f"{float(r['bwd_model_ms']):.3g}" if r.get("bwd_model_ms") else "–"
            body.append([step, r["variant"], "PASS" if ok else "FAIL", mb(led), f"{float(r['predicted_ms']):.3g}",
                         f"{float(r['model_ms']):.3g}", r["bound_by"], spread(r), f"{float(r['tflops']):.1f}", bwd, bwd_model])
        else:
            body.append([step, r["variant"], "PASS" if ok else "FAIL", mb(led), f"{float(r['predicted_ms']):.2f}",
                         f"{float(r['ms']):.2f}", f"{float(r['tflops']):.1f}", bwd])
    shape = f"B={rs[0]['B']}, H={rs[0]['H']}, N={rs[0]['N']}, d={rs[0]['d']}, {rs[0]['dtype']}, no mask" if rs else ""
    if rs and rs[0].get("model_ms"):
        runs = rs[0].get("runs", "1")
        return provenance(rs) + (f" _The tour's shape: {shape}. Measured: the median of {runs} timed runs, their min–max in "
                                 f"brackets. Roofline: bytes and tensor FLOPs over the datasheet-style peaks; model: the "
                                 f"per-resource model ([docs/model.md](docs/model.md)) over the ceilings measured in the same "
                                 f"run, computed before the timing._\n\n") + table(
            ["step", "variant", "check", "ledger MB", "roofline ms", "model ms", "bound by", "measured ms", "TFLOP/s",
             "backward ms", "bwd model ms"], body)
    return provenance(rs) + f" _The tour's shape: {shape}._\n\n" + table(
        ["step", "variant", "check", "ledger MB", "predicted ms", "measured ms", "TFLOP/s", "backward ms"], body)


def decode_rows():
    """decode_*.csv (scripts/decode_target.py, the decode phase of scripts/peer_tables.sh): the rows,
    the measured read bandwidth, the (B, L) points, and a getter by kind, backend, B, L and page size."""
    rs = rows("decode_*.csv")
    bw = next((float(r["bytes_per_s"]) for r in rs if r["kind"] == "hbm-read"), None)
    pts = sorted({(int(r["B"]), int(r["cache_len"])) for r in rs if r["kind"] != "hbm-read"})
    get = lambda kind, backend, b, L, page="": next((r for r in rs if r["kind"] == kind and r["backend"] == backend and
                                                       r["B"] == str(b) and r["cache_len"] == str(L) and r["page_size"] == page), None)
    return rs, bw, pts, get


def us(r, col="kernel_us"):
    return float(r[col]) if r and r.get(col) not in ("", None) else None


def decode_target():
    """Step 17's target run: every point by kernel time on both sides, beside the measured bandwidth and
    every peer; the closing line holds the targets (step 17 / fastest SDPA >= 1.0 as a geometric mean, no
    point below 0.95; B = 1, L >= 32k at 85 % of the measured bandwidth or more)."""
    rs, bw, pts, get = decode_rows()
    if not rs:
        return provenance([], "scripts/peer_tables.sh OUTDIR decode")
    body, vs_sdpa, vs12, paged, b1, ours, peers_used = [], [], [], [], [], [], []
    for b, L in pts:
        skip = next((r for r in rs if r["kind"] == "skipped" and r["B"] == str(b) and r["cache_len"] == str(L)), None)
        if skip:
            body.append([b, f"{L // 1024}k", "not run: " + skip["note"]] + ["–"] * 9)
            continue
        c = get("step17", "contiguous", b, L)
        t = us(c)
        if t is None:
            body.append([b, f"{L // 1024}k", "no time: " + (c["note"] if c else "missing")] + ["–"] * 9)
            continue
        ours.append(c)
        ok = "" if c["pass"] == "1" else " (FAIL)"
        pct = float(c["kernel_pct_of_measured_bw"])
        if b == 1 and L >= 32768:
            b1.append((pct, L))
        cells = [b, f"{L // 1024}k", f"{t:.1f}{ok}", f"{us(c, 'graph_us'):.1f}" if us(c, "graph_us") else "–",
                 f"{float(c['cache_bytes']) / (t * 1e-6) / 1e12:.2f}", f"{pct:.1f}"]
        peer_t = {}
        for name in ("flash", "cudnn", "efficient", "math"):
            r = get("sdpa", name, b, L)
            peer_t[name] = us(r)
            if peer_t[name]:
                peers_used.append(r)
        ran = {k: v for k, v in peer_t.items() if v is not None}
        best = min(ran, key=ran.get) if ran else None
        cells += [f"{peer_t['flash']:.1f}" if peer_t["flash"] else "–", f"{peer_t['cudnn']:.1f}" if peer_t["cudnn"] else "–"]
        if best:
            vs_sdpa.append((ran[best] / t, b, L))
            cells.append(f"{ran[best] / t:.3f} ({best})")
        else:
            cells.append("–")
        s12 = us(get("step12", "prefill", b, L))
        if s12:
            vs12.append((s12 / t, b, L))
        cells.append(f"{s12 / t:.1f}" if s12 else "–")
        worst = []
        for page in ("16", "64", "256"):
            pt = us(get("step17", "paged", b, L, page))
            if pt:
                paged.append((t / pt, b, L, page))
                worst.append(f"{t / pt:.3f}")
        cells.append(" / ".join(worst) if worst else "–")
        body.append(cells)
    head = provenance(ours, "scripts/peer_tables.sh OUTDIR decode")
    if peers_used:
        head += peers_note(peers_used, ours, "scripts/decode_target.py")
    head += (f" _Measured HBM read bandwidth (`bench --peaks`, a streaming read of 4 GiB, same run): "
             f"**{bw / 1e12:.3f} TB/s**. Cache bytes: K and V of every token a sequence sees, 2·B·HKV·L·d·2; "
             f"bf16, d = 128, H = 32, HKV = 8, one new token. Graph: the time per call of `--graph` calls captured "
             f"back to back in one CUDA graph._" if bw else "")
    tab = table(["B", "cache L", "step 17 µs", "graph µs", "TB/s", "% of measured", "flash µs", "cuDNN µs",
                 "fastest SDPA / step 17", "step 12 / step 17", "contiguous / paged 16 / 64 / 256"], body)
    lines = []
    if vs_sdpa:
        x = min(vs_sdpa)
        xs = [v for v, *_ in vs_sdpa]
        low = [p for p in vs_sdpa if p[0] < 0.95]
        lines.append(f"Step 17 / the fastest SDPA backend, kernel for kernel: geometric mean **{geomean(xs):.3f}** "
                     f"(target ≥ 1.0), lowest **{x[0]:.3f}** (B = {x[1]}, L = {x[2] // 1024}k); "
                     f"{sum(v >= 1.0 for v in xs)} of {len(xs)} points at or above 1, **{len(low)} below 0.95** (target: none)"
                     + (" — at B = " + ", ".join(sorted({str(p[1]) for p in low}, key=int)) if low else ""))
    if b1:
        lines.append(f"B = 1, L ≥ 32k: " + ", ".join(f"{p:.1f} % at {L // 1024}k" for p, L in b1) +
                     f" of the measured bandwidth (target 85 %: {sum(p >= 85.0 for p, _ in b1)} of {len(b1)} points)")
    if vs12:
        lines.append(f"against step 12 as prefill (B = 1): lowest {min(vs12)[0]:.1f}×")
    if paged:
        x = min(paged)
        low = [p for p in paged if p[0] < 0.9]
        lines.append(f"paged against contiguous: lowest {x[0]:.3f} (B = {x[1]}, L = {x[2] // 1024}k, pages of {x[3]}); "
                     f"{len(paged) - len(low)} of {len(paged)} paged runs within 10 %"
                     + (", the others at B = " + ", ".join(sorted({str(p[1]) for p in low}, key=int)) if low else ""))
    fails = sum(r["pass"] != "1" for r in rs if r["kind"] in ("step17", "step12"))
    lines.append(f"{fails} run(s) FAILED the check" if fails else "every step run passed its check against the reference")
    return head + "\n\n" + tab + "\n\n" + "; ".join(lines) + "."


def decode_clocks():
    """docs/17's launch-overhead lesson: at B = 1, step 17 and the SDPA backends by the three clocks of the
    same run — CUDA events around one call, the time per call in a CUDA graph, and kernel time."""
    rs, bw, pts, get = decode_rows()
    body, ours, peers_used = [], [], []
    for b, L in pts:
        if b != 1:
            continue
        row = [f"{L // 1024}k"]
        for kind, backend in (("step17", "contiguous"), ("sdpa", "cudnn"), ("sdpa", "flash")):
            r = get(kind, backend, b, L)
            if r and us(r):
                (ours if kind == "step17" else peers_used).append(r)
            row += [f"{us(r, c):.1f}" if r and us(r, c) else "–" for c in ("us", "graph_us", "kernel_us")]
        body.append(row)
    if not ours:
        return provenance([], "scripts/peer_tables.sh OUTDIR decode")
    head = provenance(ours, "scripts/peer_tables.sh OUTDIR decode") + peers_note(peers_used, ours, "scripts/decode_target.py")
    head += (" _Events: CUDA events around one call (a C++ launch for step 17, a Python call for PyTorch's), each "
             "after the L2 flush. Graph: `--graph` calls captured back to back in one CUDA graph, the time per call._")
    return head + "\n\n" + table(["cache L", "step 17 events µs", "graph µs", "kernel µs", "cuDNN events µs", "graph µs",
                                  "kernel µs", "flash events µs", "graph µs", "kernel µs"], body)


def probe_rows(path):
    """The ROW lines of a probe's log (plots/data/logs/<commit>/): the step program's own --csv rows, each
    printed by the probe's command as `ROW <label> pass P ev_ms|ev_us X kernel_ms|kernel_us Y graph_ms|graph_us
    Z parts name:ms;...`. Returns {label: {"pass", "ev", "kernel", "graph" (µs), "parts" {name: µs}}}."""
    out = {}
    with open(os.path.join(DATA, path)) as f:
        for line in f:
            m = re.match(r"ROW (.*?) pass (\d) ev_(ms|us) ([\d.]+) kernel_(?:ms|us) ([\d.]+) graph_(?:ms|us) ([\d.]+) parts (\S*)", line)
            if not m:
                continue
            k = 1e3 if m.group(3) == "ms" else 1.0
            parts = {n: float(x) * 1e3 for n, x in (p.rsplit(":", 1) for p in m.group(7).split(";") if p)}
            out[" ".join(m.group(1).split())] = {"pass": m.group(2), "ev": float(m.group(4)) * k,
                                                 "kernel": float(m.group(5)) * k, "graph": float(m.group(6)) * k, "parts": parts}
    return out


PROBE_BEFORE = "logs/f176ebd/clock_probe.txt"   # step 17's kernel of 0a6b13e, the harness of f176ebd
PROBE_AFTER = "logs/507e0cd/callB_probe_tests_decode.txt"  # the kernel of 8c3e4fb (the code of 507e0cd)


def decode_merge():
    """docs/17's merge ablation, from the two probes' logs (B = 1, bf16, d = 128, H = 32, HKV = 8, 32 splits):
    the fused call, the split and merge kernels apart (--combine kernel) before and after the merge was made
    shorter, and --combine pdl by kernel and graph time."""
    a, b = probe_rows(PROBE_BEFORE), probe_rows(PROBE_AFTER)
    body = []
    f = lambda x: f"{x:.1f}" if x is not None else "–"
    for L in (4096, 32768, 131072):
        key = f"L={L}"
        fa, fb = a.get(key), b.get(key)
        ka, kb, pd = a.get(f"{key} --combine kernel"), b.get(f"{key} --combine kernel"), b.get(f"{key} --combine pdl")
        if not (fa and fb and ka and kb and pd):
            continue
        body.append([f"{L // 1024}k", f(fa["kernel"]), f(fb["kernel"]), f(fb["graph"]), f(ka["parts"].get("split")),
                     f(ka["parts"].get("combine")), f(kb["parts"].get("split")), f(kb["parts"].get("combine")), f(kb["graph"]),
                     f(pd["kernel"]), f(pd["graph"])])
    if not body:
        return "_no probe logs_"
    head = ("_Step 17's probes on an NVIDIA H200: its --csv rows as the probe commands printed them "
            f"(`plots/data/{PROBE_BEFORE}`: the kernel of `0a6b13e`; `plots/data/{PROBE_AFTER}`: the kernel of "
            "`8c3e4fb`), two commands of two sessions. B = 1, bf16, d = 128, H = 32, HKV = 8, 32 splits. Kernel time "
            "(CUPTI, every kernel summed, cold L2) unless a column says graph (`--graph` calls in one CUDA graph, per "
            "call); µs._")
    return head + "\n\n" + table(["cache L", "fused, before", "fused, after", "fused, after, graph", "split kernel, before",
                                  "merge kernel, before",
                                  "split kernel, after", "merge kernel, after", "`--combine kernel` graph", "`--combine pdl` kernel",
                                  "`--combine pdl` graph"], body)


def probe_peers(path):
    """The PEER lines of a probe's log (scripts/clock.py's kernel time of PyTorch's decode calls):
    {(B, L, backend): kernel µs}."""
    out = {}
    with open(os.path.join(DATA, path)) as f:
        for line in f:
            m = re.match(r"PEER \('decode', (\d+), (\d+)\) (\w+): kernel ([\d.]+) us", line)
            if m:
                out[(int(m.group(1)), int(m.group(2)), m.group(3))] = float(m.group(4))
    return out


def decode_probe():
    """docs/17's first probe by the kernel clock, before the merge changed: the fused call, its split and
    merge kernels apart (--combine kernel), and cuDNN's call, kernel for kernel."""
    a, peers = probe_rows(PROBE_BEFORE), probe_peers(PROBE_BEFORE)
    body = []
    for b, L in ((1, 4096), (1, 32768), (1, 131072), (4, 32768)):
        key = f"L={L}" if b == 1 else f"B={b} L={L // 1024}k"
        fused, kern = a.get(key), a.get(f"{key} --combine kernel")
        cu = peers.get((b, L, "cudnn"))
        if not (fused and kern and cu):
            continue
        body.append([b, f"{L // 1024}k", f"{fused['kernel']:.1f}", f"{kern['parts'].get('split', 0):.1f}",
                     f"{kern['parts'].get('combine', 0):.1f}", f"{cu:.1f}"])
    if not body:
        return "_no probe log_"
    head = (f"_Step 17's first probe on an NVIDIA H200 (`plots/data/{PROBE_BEFORE}`: the kernel of `0a6b13e`; its "
            "--csv rows and scripts/clock.py's PyTorch rows as the probe printed them). Kernel time in µs on both "
            "sides; bf16, d = 128, H = 32, HKV = 8, one new token, 32 splits._")
    return head + "\n\n" + table(["B", "L", "step 17 (fused)", "its split kernel alone", "its merge as a kernel",
                                  "cuDNN (two kernels)"], body)


def decode_splits():
    """docs/17's --splits ablation, from the first probe (the merge before it was made shorter)."""
    a = probe_rows(PROBE_BEFORE)
    body = []
    for L in (4096, 32768, 131072):
        row = [f"{L // 1024}k"]
        for sp in ("8", "16", "", "64", "128"):
            r = a.get(f"L={L}" + (f" --splits {sp}" if sp else ""))
            row.append(f"{r['kernel']:.1f}" if r else "–")
        body.append(row)
    head = (f"_Step 17's first probe on an NVIDIA H200 (`plots/data/{PROBE_BEFORE}`: the kernel of `0a6b13e`, its merge "
            "before it was made shorter), kernel time in µs; B = 1, bf16, d = 128, H = 32, HKV = 8; the fused combine._")
    return head + "\n\n" + table(["cache L", "8 splits", "16", "32 (the heuristic's)", "64", "128"], body)


# ------------------------------------------------------------------------------------------------
# Step 18: the ring on one GPU (ring_bench) and its projection to P GPUs, the timeline, ring_nccl.

def ring_rows(kind=""):
    """ring_<gpu>.csv (kind ""), ring_timeline_<gpu>.csv ("timeline") or ring_nccl_<gpu>.csv ("nccl")."""
    out = []
    for path in sorted(glob.glob(os.path.join(DATA, f"ring_{kind + '_' if kind else ''}*.csv"))):
        name = os.path.basename(path)
        if not kind and any(name.startswith(f"ring_{k}_") for k in ("timeline", "nccl", "priority")):
            continue
        if kind == "priority" and name.startswith("ring_priority_timeline_"):
            continue
        with open(path, newline="") as f:
            out.extend(csv.DictReader(f))
    return out


def ring_provenance(rs, how, what="`ring_bench`'s rows"):
    """Like provenance(), the rows' dates as one span (ring_bench writes a date per row)."""
    if not rs:
        return provenance([], how)
    commits = sorted({r["commit"] for r in rs if "commit" in r})
    dates = sorted(r["date"] for r in rs if r.get("date"))
    span = f"{dates[0]} – {dates[-1][11:]}" if dates and dates[0] != dates[-1] else (dates[0] if dates else "")
    return (f"_Measured on an {rs[0]['device']}, commit " + ", ".join(f"`{c}`" for c in commits) +
            f", {span}: {what} (how each file was made: `plots/data/README.md`)._")


def kn(n):
    n = int(n)
    return f"{n // 1048576}M" if n % 1048576 == 0 else f"{n // 1024}k"


def ring_summary(rs):
    ok = [r for r in rs if r["check"] == "PASS" and r["proj_eff"]]
    zz8 = [float(r["proj_eff"]) for r in ok if r["layout"] == "zigzag" and r["P"] == "8" and int(r["N"]) >= 131072]
    c8 = [float(r["proj_eff"]) for r in ok if r["layout"] == "contiguous" and r["P"] == "8"]
    zi = [float(r["imbalance"]) for r in ok if r["layout"] == "zigzag"]
    one = [float(r["t1_ms"]) / float(r["ring_ms"]) for r in ok if int(r["N"]) >= 131072]
    parts = []
    if zz8:
        parts.append(f"zig-zag at P = 8 and N ≥ 128k: projected efficiency **{min(zz8):.3f} – {max(zz8):.3f}** "
                     f"({sum(x >= 0.9 for x in zz8)} of {len(zz8)} points at 0.9 or more)")
    zs8 = [float(r["mean_rank_ms"]) / float(r["proj_ms"]) for r in ok if r["layout"] == "zigzag" and r["P"] == "8" and int(r["N"]) >= 131072]
    if zs8:
        parts.append(f"by the shard kernels' own time: {min(zs8):.3f} – {max(zs8):.3f}")
    if c8:
        parts.append(f"contiguous causal at P = 8: {min(c8):.3f} – {max(c8):.3f}")
    if zi:
        parts.append(f"busiest over mean rank, zig-zag: at most {max(zi):.3f}")
    for P in ("2", "4", "8"):
        ci = [float(r["imbalance"]) for r in ok if r["layout"] == "contiguous" and r["P"] == P]
        if ci:
            parts.append(f"contiguous at P = {P}: {min(ci):.3f} – {max(ci):.3f} (count {(2 * int(P) - 1) / int(P):.3f})")
    if one:
        parts.append(f"step 12 over the whole sequence / the ring of P streams on the same GPU, N ≥ 128k: {min(one):.3f} – {max(one):.3f}")
    parts.append(f"{len(ok)} of {len(rs)} rows checked PASS against step 12's O")
    return "; ".join(parts) + "."


def ring_table():
    """Every point of ring_bench: the one-GPU measurements and the projection to P GPUs."""
    rs = ring_rows()
    if not rs:
        return provenance([], "ring_bench")
    body = []
    for r in sorted(rs, key=lambda r: (int(r["N"]), int(r["causal"]), int(r["P"]), r["layout"] != "zigzag")):
        head = [kn(r["N"]), "causal" if r["causal"] == "1" else "none", r["P"], r["layout"]]
        if not r["proj_eff"]:
            body.append(head + [r["status"]] + ["–"] * 10)
            continue
        f = lambda k, p=1: f"{float(r[k]):.{p}f}"
        body.append(head + [f("t1_ms"), f("ring_ms"), f"{float(r['t1_ms']) / float(r['ring_ms']):.3f}", f("crit_ms", 2),
                            f("imbalance", 3), f("xfer_ms", 3), f("link_ms", 3), f("proj_ms", 2), f"**{float(r['proj_eff']):.3f}**",
                            f"{float(r['mean_rank_ms']) / float(r['proj_ms']):.3f}", r["check"]])
    r0 = rs[0]
    head = ring_provenance(rs, "ring_bench")
    head += (f" _B = {r0['B']}, H = {r0['H']}, d = {r0['d']}, {r0['dtype']}. One GPU: step 12 over the whole sequence, and the ring "
             f"of P ranks as P pairs of streams; each rank's steps timed alone give the critical path (Σ over steps of the slowest "
             f"rank) and the busiest rank over the mean. Transfer: one K/V buffer copied on this GPU, alone; over NVLink: the same "
             f"bytes at 450 GB/s (datasheet, each way). Projected = a rank's start and finish + Σ over steps of the slower of the "
             f"slowest rank and the link; efficiency = t(step 12) / (P · projected): **a projection to P GPUs, not a measurement "
             f"on them**. Eff. (shard kernels): the same with the shard kernels' own time in place of step 12's, "
             f"(Σ over ranks and steps) / (P · projected)._")
    tab = table(["N", "mask", "P", "layout", "step 12 ms", "ring, one GPU ms", "step 12 / ring", "critical path ms",
                 "busiest / mean", "transfer alone ms", "NVLink ms", "projected ms", "projected eff.", "eff. (shard kernels)", "check"], body)
    return head + "\n\n" + tab + "\n\n" + ring_summary(rs)


def ring_line():
    rs = ring_rows()
    return ring_provenance(rs, "ring_bench") + " " + ring_summary(rs) if rs else provenance([], "ring_bench")


def ring_overlap(kind="timeline"):
    """The concurrent timeline (P streams on one GPU): do the transfers hide behind the compute? kind "timeline"
    (the main run) or "priority_timeline" (the receive streams at normal and at high priority, one run)."""
    ts = [t for t in ring_rows(kind) if t["mode"] == "concurrent"]
    if not ts:
        return provenance([], "ring_bench --timeline")
    rs = ring_rows("" if kind == "timeline" else "priority")
    prio = lambda t: t.get("comm_priority") or "normal"
    body = []
    keys = {(t["N"], t["P"], t["causal"], t["layout"], prio(t)) for t in ts}
    for key in sorted(keys, key=lambda k: (k[4] != "normal", int(k[2]), k[3] != "zigzag")):
        N, P, causal, layout, pr = key
        mine = [t for t in ts if (t["N"], t["P"], t["causal"], t["layout"], prio(t)) == key]
        comp = {(int(t["rank"]), int(t["step"])): (float(t["t0_ms"]), float(t["t1_ms"])) for t in mine if t["what"] == "compute"}
        xs = [t for t in mine if t["what"] == "transfer"]
        hidden, lens = 0, []
        for x in xs:
            r, st, a, b = int(x["rank"]), int(x["step"]), float(x["t0_ms"]), float(x["t1_ms"])
            lens.append(b - a)
            c = comp.get((r, st))  # the rank's compute of the same step, which the transfer runs under
            hidden += bool(c and b <= c[1])
        lens.sort()
        idle = 0.0
        for (r, st), (a, b) in comp.items():
            if (r, st - 1) in comp:
                idle = max(idle, a - comp[(r, st - 1)][1])
        alone = next((float(r["xfer_ms"]) for r in rs if (r["N"], r["P"], r["causal"], r["layout"]) == key[:4] and r["xfer_ms"] and
                      (r.get("comm_priority") or "normal") == pr), None)
        body.append([kn(N), P, "causal" if causal == "1" else "none", layout, pr, len(xs), hidden, f"{lens[len(lens) // 2]:.3f}",
                     f"{lens[-1]:.3f}", f"{alone:.3f}" if alone is not None else "–", f"{idle:.3f}",
                     f"{max(b for a, b in comp.values()):.2f}"])
    head = ring_provenance(rs, "ring_bench --timeline")
    head += (" _The first (warm-up) call of each point, its ranks as P pairs of streams on one GPU; receive streams at the "
             "priority shown ([priority]). A transfer is hidden when it ends before its rank's compute of the same step does; "
             "alone: one K/V buffer copied with nothing else running; idle: the longest gap between a rank's compute of one step "
             "and of the next (the wait for a shard)._")
    return head + "\n\n" + table(["N", "P", "mask", "layout", "receive priority", "transfers", "hidden", "median beside compute ms",
                                     "longest ms", "alone ms", "rank idle between steps, most ms", "ring ms"], body)


def ring_nccl():
    rs = ring_rows("nccl")
    if not rs:
        return provenance([], "scripts/ring.sh")
    body = [[kn(r["N"]), r["P"], "causal" if r["causal"] == "1" else "none", r["layout"], f"{r['H']}×{r['d']}", r["dtype"],
             f"{float(r['ring_ms']):.2f}", f"{float(r['max_abs_diff']):.2e}", f"{float(r['tol']):.2e}", r["rows_checked"], r["check"]]
            for r in rs]
    head = ring_provenance(rs, "scripts/ring.sh", "`ring_nccl`'s rows (rank 0)")
    return head + "\n\n" + table(["N", "P", "mask", "layout", "H×d", "dtype", "ring ms", "max |ΔO|", "tol", "rows checked", "check"], body)


# ------------------------------------------------------------------------------------------------
# The theory the measurements stand on: the closed-form traffic of FlashAttention-1's loop order
# against the naive one (docs/00, docs/03); the measured fraction of the tensor peak beside the
# papers' A100 figures (docs/12, README).

def traffic_model():
    """traffic_model.csv's forward rows without the mask (./plot_traffic, no GPU): (step, d, N) -> bytes per head."""
    out = {}
    for r in rows("traffic_model.csv"):
        if r["pass"] == "forward" and r["causal"] == "0":
            out[(r["step"], int(r["d"]), int(r["N"]))] = int(r["gmem_read_bytes"]) + int(r["gmem_write_bytes"]) + int(r["gmem_atomic_bytes"])
    return out


def io_complexity(ns=(256, 1024, 4096, 16384, 32768)):
    """Steps 01 (S and P through HBM), 03 (FlashAttention-1's K/V-outer loop) and 04 (FlashAttention-2's
    Q-outer loop) from their closed-form ledgers, per head, d = 128 and 64: bytes, their ratios, and the
    bytes per (query, key) pair. The closing line: the ratio of step 03 to step 01 over every N of the file."""
    m = traffic_model()
    if not m:
        return "_no closed-form ledgers yet: run `./plot_traffic` (no GPU needed)_"
    body, spans = [], {}
    for d in (128, 64):
        for n in ns:
            a, b, c = m.get(("01", d, n)), m.get(("03", d, n)), m.get(("04", d, n))
            if not (a and b and c):
                continue
            body.append([d, n, f"{a / 1e6:,.1f}", f"{b / 1e6:,.1f}", f"{c / 1e6:,.1f}", f"{b / a:.2f}", f"{c / a:.2f}",
                         f"{a / n / n:.1f}", f"{b / n / n:.1f}", f"{c / n / n:.1f}"])
        r = [m[("03", d, n)] / m[("01", d, n)] for (s_, dd, n) in m if s_ == "01" and dd == d and ("03", d, n) in m]
        ns_all = sorted(n for (s_, dd, n) in m if s_ == "01" and dd == d and ("03", d, n) in m)
        if r:
            spans[d] = (min(r), max(r), ns_all[0], ns_all[-1])
    head = ("_Closed-form ledgers, not a measurement: `plots/data/traffic_model.csv`, written by `./plot_traffic` on "
            "the CPU from each step's `closed_form()` (a test holds each equal to its blueprint's count). Bytes requested "
            "from global memory per head, read + written, fp16, N = Nk, no mask; MB = 10⁶ bytes; a pair is one (query, key)._")
    t = table(["d", "N", "step 01 MB", "step 03 MB", "step 04 MB", "03 / 01", "04 / 01", "01 bytes per pair",
               "03 bytes per pair", "04 bytes per pair"], body)
    lines = []
    for d, (lo, hi, n0, n1) in spans.items():
        verdict = "more than step 01 at every N" if lo > 1 else ("less than step 01 at every N" if hi < 1 else "more at some N, less at others")
        lines.append(f"d = {d}: step 03 moves {lo:.2f}–{hi:.2f}× step 01's bytes over N = {n0} … {n1} — {verdict}")
    return head + "\n\n" + t + "\n\n" + "; ".join(lines) + "."


def h200_tensor_peak():
    """The H200's dense fp16/bf16 tensor rate as common/roofline.cpp's h200_datasheet() gives it (FLOP/s)."""
    src = open(os.path.join(ROOT, "common", "roofline.cpp"), encoding="utf-8").read()
    body = src[src.index("DeviceSpec h200_datasheet()"):]
    return float(re.search(r"tensor_flops\s*=\s*([0-9.eE+]+)", body).group(1))


PEAK_ROWS = (  # (label, file pattern, match, TFLOP/s column)
    # steps 03-05: their sweeps, timed by CUDA events (no peer stands beside them in this table's ratios)
    ("step 03 (FlashAttention-1's loop order, split-K warps, WMMA)", "session_*_step03.csv", {"step": "03", "variant": "-"}, "tflops"),
    ("step 04 (FlashAttention-2's loop order and grid, WMMA)", "session_*_step04.csv", {"step": "04", "variant": "grid=qtile"}, "tflops"),
    ("step 05 (and FlashAttention-2's split-Q warps)", "session_*_step05.csv", {"step": "05", "variant": "split=q"}, "tflops"),
    # step 12, FlashAttention-2 and step 16: the one-clock run (scripts/peer_tables.sh fwd), by kernel time
    ("step 12 (`mma.sync`, FlashAttention-2's level)", "clock_*_fwd.csv", {"step": "12", "variant": "-"}, "kernel_tflops"),
    ("FlashAttention-2 itself (PyTorch's flash backend)", "peers_*_clock_fwd.csv", {"backend": "flash"}, "kernel_tflops"),
    ("step 16 (Hopper: `wgmma`, TMA, ping-pong)", "clock_*_fwd.csv", {"step": "16", "variant": "-"}, "kernel_tflops"),
)


def peak_points(n=16384):
    """Per PEAK_ROWS entry: the latest H200 row at (fp16, no mask, d, N = n) for d = 128 and 64, and every
    such row's TFLOP/s over N (for the range), from the named CSVs."""
    out = []
    for label, pattern, match, col in PEAK_ROWS:
        rs = [r for r in rows(pattern) if all(r.get(k) == v for k, v in match.items()) and r["dtype"] == "fp16" and r["causal"] == "0"
              and "H200" in (r.get("device") or r.get("gpu") or "") and r.get(col)
              and r.get("pass", "1") == "1" and r.get("status", "ok") == "ok"]
        at = {}
        for r in sorted(rs, key=lambda r: r["date"]):
            at[(int(r["d"]), int(r["N"]))] = r  # the latest run of a point
        out.append((label, col, {d: at.get((d, n)) for d in (128, 64)}, [r for k, r in at.items() if k[0] in (64, 128)]))
    return out


def pct1(x):
    """A percentage: one decimal, two below 1 % (step 03's are a few hundredths)."""
    return f"{x:.2f}" if x < 1 else f"{x:.1f}"


def paper_peaks():
    """What the H200 measured at FlashAttention-2's benchmark shapes (B·N = 16k, H·d = 2048, fp16, no mask)
    as a fraction of its dense fp16 tensor peak: each step at N = 16k, d = 128 and 64, and its range over N."""
    peak = h200_tensor_peak()
    pts = peak_points()
    body, used = [], []
    for label, col, at, every in pts:
        cells = [label]
        for d in (128, 64):
            r = at[d]
            if r:
                used.append(r)
                t = float(r[col])
                cells += [f"{t:.1f}", pct1(100 * t / (peak / 1e12))]
            else:
                cells += ["–", "–"]
        if every:
            pct = [100 * float(r[col]) / (peak / 1e12) for r in every]
            ns = sorted({int(r["N"]) for r in every})
            cells.append(f"{pct1(min(pct))} – {pct1(max(pct))} (N = {ns[0]} … {ns[-1]})")
        else:
            cells.append("–")
        runs = sorted({r["commit"] for r in (at[128], at[64]) if r})
        cells.append(", ".join(f"`{c}`" for c in runs) or "–")
        body.append(cells)
    devices = sorted({r.get("device") or r.get("gpu") for r in used})
    dates = sorted({r["date"] for r in used})
    head = (f"_Measured on an {', '.join(devices)} ({dates[0]} … {dates[-1]}, the commits per row): the programs' own "
            f"`--csv` rows and `scripts/peers.py`'s (how each file was made: `plots/data/README.md`). Timing: steps "
            f"03–05 by CUDA events around each launch (their sweeps); step 12, FlashAttention-2 and step 16 by kernel "
            f"time, one run, the same clock on both sides (docs/profiling.md, \"One clock\"). TFLOP/s on "
            f"FlashAttention's convention, 4·B·H·N²·d; the peak: {peak / 1e12:.0f} TFLOP/s dense fp16/bf16, "
            f"`h200_datasheet()` in `common/roofline.cpp`. fp16, no mask, B·N = 16k, H·d = 2048._" if used else
            "_no measurements yet: run `scripts/gpu_session.sh` on a GPU machine_")
    return head + "\n\n" + table(["kernel", "d = 128 TFLOP/s, N = 16k", "% of peak", "d = 64 TFLOP/s, N = 16k", "% of peak",
                                    "% of peak over N, both d", "commit"], body)


def paper_peaks_line():
    """One sentence for the README: step 12, FlashAttention-2 and step 16 at N = 16k as % of the H200's peak."""
    peak = h200_tensor_peak() / 1e12
    pts = {label.split(" (")[0]: (col, at) for label, col, at, _ in peak_points()}

    def pct(name):
        col, at = pts.get(name, (None, None))
        if not at or not at[128] or not at[64]:
            return None
        return f"{100 * float(at[128][col]) / peak:.0f} % (d = 128) and {100 * float(at[64][col]) / peak:.0f} % (d = 64)"
    names = ("step 12", "FlashAttention-2 itself", "step 16")
    parts = [pct(n) for n in names]
    if not all(parts):
        return "_no measurements yet: run `scripts/gpu_session.sh` on a GPU machine_"
    used = [r for n in names for r in pts[n][1].values()]
    device = ", ".join(sorted({r.get("device") or r.get("gpu") for r in used}))
    commits = ", ".join(f"`{c}`" for c in sorted({r["commit"] for r in used}))
    return (f"On an {device} (commits {commits}), at N = 16k without the mask (fp16, B·N = 16k, H·d = 2048), step 12 "
            f"reaches {parts[0]} of the {peak:.0f} TFLOP/s dense fp16 peak, FlashAttention-2 (PyTorch's flash backend) "
            f"{parts[1]}, and step 16 {parts[2]}.")



# ---- the per-resource model (docs/model.md) ---------------------------------------------------
PEAK_WHAT = {
    "hbm-read": "HBM, streaming read", "hbm-write": "HBM, streaming write", "l2-read": "L2, reads of a resident buffer",
    "smem-read": "shared memory, 16-byte loads", "smem-write": "shared memory, 16-byte stores",
    "ldmatrix": "ldmatrix.x4", "wmma-f16": "WMMA m16n16k16, fp16", "mma-sync-f16": "mma.sync m16n8k16, fp16",
    "wgmma-f16": "wgmma m64n128k16, fp16", "fp32-fma": "fp32 FMA (2 FLOPs)", "ex2": "ex2.approx (special-function unit)",
    "barrier": "__syncthreads, whole GPU", "barrier-latency": "__syncthreads, one block alone",
    "atomic-f32": "fp32 atomicAdd (RED), in L2", "hbm-latency": "dependent load, HBM", "l2-latency": "dependent load, L2",
    "launch": "empty kernel, back to back",
}


def fmt_value(v, unit):
    v = float(v)
    unit = {"bytes/s": "B/s", "flops/s": "FLOP/s"}.get(unit, unit)
    if unit.endswith("/s"):
        for scale, pre in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M")):
            if v >= scale:
                return f"{v / scale:.3g} {pre}{unit}"
    return f"{v:.3g} {unit}"


def ceilings():
    rs = rows("peaks_*.csv")
    if not rs:
        return provenance([], "bench --peaks")
    body = [[f"`{r['peak']}`", PEAK_WHAT.get(r["peak"], ""), fmt_value(r["value"], r["unit"])] for r in rs]
    return provenance(rs, "bench --peaks") + " _One launch of each microbenchmark takes at least 1 ms; the median of 10._\n\n" + table(
        ["ceiling", "what it measures", "measured"], body)


def model_rows(name):
    return [r for r in rows(name) if r["ratio"]]


def model_tour():
    rs = [r for r in model_rows("model_h200.csv") if r["file"].startswith("tour")]
    src = rows("tour_*.csv")
    if not rs:
        return provenance([], "scripts/gpu_session.sh")
    body = []
    for r in rs:
        ratio = float(r["ratio"])
        ok = "yes" if 1 / 1.5 <= ratio <= 1.5 else "**no**"
        meas = f"{float(r['measured_ms']):.3g} ({float(r['ms_min']):.3g}–{float(r['ms_max']):.3g})"
        body.append([r["step"], r["variant"], r["pass_of"], meas, f"{float(r['model_ms']):.3g}", f"{ratio:.2f}", ok,
                     r["bound_by"]])
    return provenance(src) + (" _The tour's shape; measured: median of three timed runs (min–max); model: computed in the same "
                              "run before the timing; ratio = measured / model; the goal: within 1.5× either side._\n\n") + table(
        ["step", "variant", "pass", "measured ms", "model ms", "ratio", "within 1.5×", "bound by"], body)


def model_summary(name="model_h200.csv", how="validation"):
    rs = model_rows(name)
    if not rs:
        return "_no data_"
    by = {}
    for r in rs:
        by.setdefault(r["step"], []).append(float(r["ratio"]))
    body = []
    for step in sorted(by):
        xs = by[step]
        inside = sum(1 / 1.5 <= x <= 1.5 for x in xs)
        body.append([step, len(xs), inside, f"{100 * inside / len(xs):.0f} %", f"{min(xs):.2f}", f"{max(xs):.2f}"])
    total = sum(len(v) for v in by.values())
    inside = sum(1 / 1.5 <= x <= 1.5 for v in by.values() for x in v)
    body.append(["all", total, inside, f"{100 * inside / total:.0f} %", f"{min(min(v) for v in by.values()):.2f}",
                 f"{max(max(v) for v in by.values()):.2f}"])
    files = sorted({r["file"] for r in rs})
    src = [x for f in files for x in rows(f)]
    return provenance(src) + (f" _The {how} run's passes (forward and backward; {', '.join('`' + f + '`' for f in files)}), "
                              "re-modelled by `model` from the recorded launches and the same run's ceilings._\n\n") + table(
        ["step", "passes", "within 1.5×", "share", "lowest ratio", "highest ratio"], body)


def step08_stored():
    rs = [r for r in rows("tour_*.csv") if r["step"] == "08" and r.get("model_ms")]
    if not rs:
        return provenance([], "the tour")
    body = []
    for r in rs:
        save = f"{float(r['bwd_save_ms']):.3g}" if r.get("bwd_save_ms") else "–"
        body.append([r["variant"].replace("bwd=", ""), spread(r, "bwd_ms"), save, f"{int(r['bwd_matmul_flops']) / 1e9:,.0f}",
                     mb(int(r["bwd_gmem_read_bytes"])), mb(int(r["bwd_gmem_write_bytes"])), mb(int(r["bwd_workspace_bytes"])),
                     f"{float(r['bwd_model_ms']):.3g}", r["bwd_bound_by"]])
    return provenance(rs) + (" _The tour's shape; backward: median of three timed runs (min–max); writing P: the forward's "
                             "extra kernel for `stored`, timed alone._\n\n") + table(
        ["backward", "backward ms", "writing P ms", "tensor GFLOP", "read MB", "written MB", "workspace MB", "model ms",
         "bound by"], body)


def model_step(step):
    """One step's passes of the model's validation run (docs/NN's "The per-resource model")."""
    rs = [r for r in model_rows("model_h200.csv") if r["step"] == step]
    if not rs:
        return "_This step was not in the model's validation run (its sweep's budget ended before it)._"
    src = [x for x in rows("tour_*.csv") + rows("model_sweep_*.csv") if x["step"] == step]
    body = []
    for r in rs:
        ratio = float(r["ratio"])
        where = "tour" if r["file"].startswith("tour") else "sweep"
        body.append([where, r["variant"], r["pass_of"], r["N"], r["d"], "yes" if r["causal"] == "1" else "no",
                     f"{float(r['measured_ms']):.3g} ({float(r['ms_min']):.3g}–{float(r['ms_max']):.3g})",
                     f"{float(r['model_ms']):.3g}", f"{ratio:.2f}", r["bound_by"]])
    return provenance(src) + " _Measured: median of three timed runs (min–max); ratio = measured / model ([model.md](model.md))._\n\n" + table(
        ["run", "variant", "pass", "N", "d", "causal", "measured ms", "model ms", "ratio", "bound by"], body)

TABLES = {
    "step01-sweep": lambda: step_sweep("01"),
    "step01-dtype": lambda: step_dtype("01"),
    "step01-ncu": lambda: step_ncu("01"),
    "step02-sweep": lambda: step_sweep("02"),
    "step02-ncu": lambda: step_ncu("02"),
    "step02-vs-01": lambda: compare("01", "02", speedup=False),
    "step03-sweep": lambda: step_sweep("03"),
    "step03-ncu": lambda: step_ncu("03"),
    "step04-sweep": lambda: step_sweep("04"),
    "step04-ncu": lambda: step_ncu("04"),
    "step05-sweep": lambda: step_sweep("05"),
    "step05-ncu": lambda: step_ncu("05"),
    "step05-q-vs-k": lambda: compare("05", "05", ("split=k",), ("split=q",), "split-K", "split-Q"),
    "step06-sweep": lambda: step_sweep("06"),
    "step06-ncu": lambda: step_ncu("06"),
    "step06-vs-05": lambda: compare("05", "06", ("split=q",), ("-",), "step 05 (split-Q)", "step 06"),
    "step07-sweep": lambda: step_sweep("07"),
    "step07-ncu": lambda: step_ncu("07"),
    "step07-vs-06": lambda: compare("06", "07"),
    "step08-backward": lambda: step_backward("08"),
    "step09-sweep": lambda: step_sweep("09"),
    "step10-sweep": lambda: step_sweep("10"),
    "step11-sweep": lambda: step_sweep("11"),
    "step12-sweep": lambda: step_sweep("12"),
    "step09-vs-07": lambda: compare("07", "09", both=True),
    "step10-vs-09": lambda: compare("09", "10", ("-",), ("-",), speedup=False, both=True),
    "step09-10-ncu": lambda: ncu_on_chip(("07", "09", "10")),
    "step11-vs-10": lambda: compare("10", "11", ("-",), ("-",), both=True),
    "step10-11-ncu": lambda: ncu_stalls(("10", "11")),
    "step09-11-ncu": lambda: ncu_stalls(("09", "10", "11")),
    "step12-vs-11": lambda: compare("11", "12", ("-",), ("-",), both=True),
    "step11-12-ncu": lambda: ncu_stalls(("11", "12")),
    "step12-ablation": lambda: ablation("12"),
    "step12-target": lambda: target("12"),
    "step13-target": bwd_target,
    "step14-sweep": lambda: step_sweep("14"),
    "step15-sweep": lambda: step_sweep("15"),
    "step14-tiles": lambda: ablation("14", "--tiles"),
    "step15-tiles": lambda: ablation("15", "--tiles"),
    "step14-target": lambda: fwd_target("14"),
    "step15-target": lambda: fwd_target("15"),
    "step15-ncu": lambda: ncu_stalls(("14", "15")),
    "step16-target": fwd16_target,
    "step17-target": decode_target,
    "step17-clocks": decode_clocks,
    "step17-merge": decode_merge,
    "step17-probe": decode_probe,
    "step17-splits": decode_splits,
    "step18-ring": ring_table,
    "step18-ring-line": ring_line,
    "step18-overlap": ring_overlap,
    "step18-priority": lambda: ring_overlap("priority_timeline"),
    "step18-nccl": ring_nccl,
    "step16-d256": fwd16_wide,
    "step16-ablation": lambda: ablation("16", only="ablate"),
    "step16-tiles": lambda: ablation("16", "--tiles", only="tiles"),
    "step16-ncu": lambda: ncu_stalls(("15", "16"), pattern="ncu16_*.csv"),
    "step13-ledger": bwd_ledger,
    "step13-first": bwd_first,
    "step13-ncu": lambda: ncu_stalls(("13",)),
    "step13-ncu-bytes": lambda: step_ncu("13"),
    "step12-dropout": step12_dropout,
    "step13-variants": bwd_variants,
    "step13-tiles": bwd_tiles,
    "all-steps-ncu": lambda: ncu_stalls(tuple(f"{i:02d}" for i in range(1, 13))),
    "step08-ncu": lambda: step_ncu("08"),
    "step08-ncu-extra": lambda: ncu_extra("08"),
    "versus-peers": versus_peers,
    "loop-and-grid": loop_and_grid,
    "tour": tour,
    # The theory: IO complexity (docs/03); the papers' fractions of peak beside the H200's (docs/12, README).
    "io-complexity": io_complexity,
    "peak-fraction": paper_peaks,
    "peak-fraction-line": paper_peaks_line,
    # The per-resource model (docs/model.md), and step 08's stored P (docs/08).
    "ceilings": ceilings,
    "model-tour": model_tour,
    "model-summary": model_summary,
    "model-dev-summary": lambda: model_summary("model_dev_h200.csv", "development"),
    "step08-stored": step08_stored,
    **{f"model-step{i:02d}": (lambda i=i: model_step(f"{i:02d}")) for i in range(1, 18)},
}

# The tables that set a step beside PyTorch's backends: each must carry CLOCK_CAPTION (tests/test_doc_tables.py).
PEER_TABLES = ("step12-target", "step13-target", "step14-target", "step15-target", "step16-target", "step16-d256",
               "step17-target", "step17-clocks", "versus-peers")

BLOCK = re.compile(r"(<!-- table:([\w-]+) -->\n)(.*?)(<!-- /table:\2 -->)", re.S)


def main():
    check = "--check" in sys.argv
    stale = []
    files = glob.glob(os.path.join(ROOT, "docs", "*.md")) + [os.path.join(ROOT, "README.md")]
    for path in sorted(files):
        if not os.path.exists(path):
            continue
        text = open(path, encoding="utf-8").read()

        def fill(m):
            name = m.group(2)
            if name not in TABLES:
                sys.exit(f"{path}: unknown table '{name}'")
            return m.group(1) + TABLES[name]() + "\n" + m.group(4)

        new = BLOCK.sub(fill, text)
        if new != text:
            stale.append(os.path.relpath(path, ROOT))
            if not check:
                open(path, "w", encoding="utf-8").write(new)
    if check and stale:
        print("stale tables (run scripts/doc_tables.py):", ", ".join(stale))
        sys.exit(1)
    print(("checked: " if check else "updated: ") + (", ".join(stale) if stale else "all tables current"))


if __name__ == "__main__":
    main()
