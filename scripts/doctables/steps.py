"""The tables of one step or a few: the sweeps, the Nsight rows, one step against another, the ablations,
step 13's own experiments, the tour."""
import csv
import glob
import os
import re

from . import common
from .common import ROOT, geomean, mb, plain_variant, point, provenance, spread, table


def step_sweep(step):
    """Per (d, causal, N): each variant's median time and TFLOP/s, and the ledger's prediction."""
    rs = [r for r in common.rows("session_*.csv") if r["step"] == step and r["dtype"] == "fp16"]
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
    rs = [r for r in common.rows("session_*.csv") if r["step"] == step and r["d"] == "128" and r["causal"] == "0"]
    by = {(r["variant"], int(r["N"]), r["dtype"]): r for r in rs}
    body = []
    for (v, n) in sorted({(v, n) for (v, n, _) in by}):
        a, b = by.get((v, n, "fp16")), by.get((v, n, "bf16"))
        if a and b:
            body.append([v, n, f"{float(a['ms']):.3f}", f"{float(b['ms']):.3f}", f"{float(a['max_abs_err']):.1e}",
                         f"{float(b['max_abs_err']):.1e}"])
    return provenance(rs) + "\n\n" + table(["variant", "N", "fp16 ms", "bf16 ms", "fp16 max abs err", "bf16 max abs err"], body)


def step_ncu(step):
    rs = [r for r in common.rows("ncu_*_step*.csv") if r["step"] == step]
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
    rs = [r for r in common.rows("session_*.csv") if r["step"] == step and r["dtype"] == "fp16" and r.get("bwd_ms")]
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


def ncu_extra(step):
    """Nsight's atomics, bank conflicts, occupancy, registers and shared memory per kernel."""
    rs = [r for r in common.rows("ncu-extra_*.csv") if r["step"] == step]
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
    for r in common.rows("session_*.csv"):
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
    rs = [r for r in common.rows("ncu_*_step*.csv") if r["step"] in steps and r["N"] in ns]
    if not rs:
        return provenance(rs)
    kernels = {r["kernel"]: r["step"] for r in rs if not r["occupancy_pct"]}
    extra = [r for r in common.rows("ncu-extra_*.csv") if r["kernel"] in kernels]
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


def ablation(step, label="without", only=None, pass_="fwd", pattern=None, kernel=False):
    """The step with each of its changes taken out alone (bench --variants ablations -> ablation_*_stepNN.csv):
    per (d, causal, N), the full step's time and, per ablation, its time over the full step's (above 1:
    the change helped). Closing line: per ablation, the geometric mean of that ratio over the points
    and its range. `label` heads each column ("without" a change; "--tiles" for a step whose only
    experiment is another tile: above 1, the default tile is faster). pass_ "bwd": the backward's times and
    its gradient check (a backward step's ablations). kernel: the kernel clock (CUPTI, every kernel of the pass
    summed, cold L2: `kernel_ms`, `bwd_kernel_ms`) instead of the harness's own timing, and the table says so."""
    ms, ok = ("ms", "pass") if pass_ == "fwd" else ("bwd_ms", "bwd_pass")
    if kernel:
        ms = "kernel_ms" if pass_ == "fwd" else "bwd_kernel_ms"
    rs = [dict(r, variant=plain_variant(r["variant"])) for r in common.rows(pattern or f"ablation_*_step{step}.csv") if r["step"] == step]
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
        row = [d, "yes" if c else "no", n, f"{float(full[ms]):.3f}"]
        for v in names:
            r = by.get((d, c, n, v))
            if r and r[ok] == "1":
                x = float(r[ms]) / float(full[ms])
                ratios[v].append(x)
                row.append(f"{x:.2f}")
            else:
                row.append("FAIL" if r else "–")
        body.append(row)
    fails = sum(r[ok] != "1" for r in rs)
    summary = "Geometric mean over the points (range): " + "; ".join(
        f"`{v.split('=')[-1]}` **{geomean(x):.2f}** ({min(x):.2f}–{max(x):.2f})"
        for v, x in ratios.items() if x) + (f". {fails} run(s) FAILED the check." if fails else
                                            ". Every run passed its check against the reference.")
    if kernel:
        summary = (f"Kernel time (CUPTI activity records, every kernel of the {'forward' if pass_ == 'fwd' else 'backward'} "
                   f"summed, cold L2). ") + summary
    return provenance(rs) + "\n\n" + table(header, body) + "\n\n" + summary


def _over_default(pattern, variant):
    """Step 19's rows of `pattern`: per (d, causal, N), `variant`'s backward kernel time over the default's,
    where both passed their checks."""
    rs = [dict(r, variant=plain_variant(r["variant"])) for r in common.rows(pattern) if r["step"] == "19"]
    by = {(r["d"], r["causal"], r["N"], r["variant"]): r for r in rs if r.get("bwd_pass") == "1"}
    return {k[:3]: float(r["bwd_kernel_ms"]) / float(by[k[:3] + ("-",)]["bwd_kernel_ms"])
            for k, r in by.items() if k[3] == variant and k[:3] + ("-",) in by}


def _verdict(prediction, ok, n, falsifier, fired, show=True):
    """A prediction's closing line: `ok` of `n` points held it; its falsifier fired where `fired` is not
    empty (with `show`, the values that fired it, in order)."""
    return (f"\n\nThe prediction ({prediction}): **{ok} of {n}** ({'held' if ok == n else 'missed'}); its falsifier, {falsifier}: "
            f"**{'fired' if fired else 'did not fire'}**" + (f" ({', '.join(f'{v:.3f}' for v in sorted(fired))})" if fired and show else "") + ".")


def step19_producer_last(pattern="ablast_*_step19.csv", most=1.08, gain=0.04, same=0.02):
    """The test of docs/19's reading of the producer table: at d = 64, the loads issued in line by the
    consumer that released the stage last (`--ablate producer-last`) beside consumer 0 (`producer`) and
    the default, one run (ablast_*_step19.csv), kernel time. Predicted: producer-last at most `most` over
    the default and at least `gain` below producer at every point; falsified (the reading wrong) where it
    is within `same` of producer."""
    text = ablation("19", only="ablate", pass_="bwd", pattern=pattern, kernel=True)
    last, cons0 = _over_default(pattern, "ablate=producer-last"), _over_default(pattern, "ablate=producer")
    both = [k for k in last if k in cons0]
    if not both:
        return text
    ok = sum(last[k] <= most and cons0[k] - last[k] >= gain for k in both)
    fired = [k for k in both if abs(cons0[k] - last[k]) < same]
    return text + _verdict(f"`producer-last` at most {most:.2f} over the default and at least {gain:.2f} below `producer`", ok,
                           len(both), f"`producer-last` within {same:.2f} of `producer` at a point", fired, show=False)


def step19_swapped(pattern="swap19a_*_step19.csv", least=1.05, keys_lo=1.02, keys_hi=1.10, floor=1.00):
    """docs/19's ablation of the swapped operands: S and dP computed with the queries as M (`--ablate
    swapped`, P and dS through shared memory, dQ by keys from registers) beside the default and `dq-keys`
    (the same split of dQ, the products swapped), one run (`pattern`), kernel time. Predicted: swapped over
    the default at least `least` at every point, and at d = 64 swapped over dq-keys within keys_lo–keys_hi;
    falsified by a point where swapped is faster than the default, or (d = 64) than dq-keys (below `floor`)."""
    text = ablation("19", only="ablate", pass_="bwd", pattern=pattern, kernel=True)
    sw, keys = _over_default(pattern, "ablate=swapped"), _over_default(pattern, "ablate=dq-keys")
    if not sw:
        return text
    d64 = {k: sw[k] / keys[k] for k in sw if k[0] == "64" and k in keys}
    ok = sum(sw[k] >= least and (k[0] != "64" or (k in d64 and keys_lo <= d64[k] <= keys_hi)) for k in sw)
    fired = [v for v in sw.values() if v < floor] + [v for v in d64.values() if v < floor]
    lines = "; ".join(f"d = 64, {'causal' if k[1] == '1' else 'no mask'}, N = {k[2]}: **{v:.3f}**"
                      for k, v in sorted(d64.items(), key=lambda kv: (int(kv[0][1]), int(kv[0][2]))))
    if lines:
        text += f"\n\n`swapped` over `dq-keys` (the same split of dQ; above 1: the products' orientation costs): {lines}."
    return text + _verdict(f"`swapped` at least {least:.2f} over the default everywhere, and {keys_lo:.2f}–{keys_hi:.2f} over "
                           f"`dq-keys` at d = 64", ok, len(sw),
                           f"`swapped` below {floor:.2f} of the default, or of `dq-keys` at d = 64", fired)


def step19_tiles(pattern="tiles19_*_step19.csv", lo=0.88, hi=1.00, ceiling=1.03):
    """docs/19's tile-shape ablation: at d = 64, 128 × 128 tiles (`--ablate tiles`, dQ by rows) beside the
    default 64 × 128, one run (tiles19_*_step19.csv), kernel time. Predicted: the ablation's time over the
    default's within lo–hi at every point; falsified (per-item costs are not what 64 × 128 pays at d = 64)
    by any point above `ceiling`."""
    text = ablation("19", only="ablate", pass_="bwd", pattern=pattern, kernel=True, label="with")
    x = _over_default(pattern, "ablate=tiles")
    if not x:
        return text
    inside = sum(lo <= v <= hi for v in x.values())
    fired = [v for v in x.values() if v > ceiling]
    return text + _verdict(f"`tiles` between {lo:.2f} and {hi:.2f} of the default at every point", inside, len(x),
                           f"a point above {ceiling:.2f}", fired)


def step19_tiles_fix(before="tiles19f_*_step19.csv", after="tiles19g_*_step19.csv", lo=0.94, hi=0.99, ceiling=1.01):
    """docs/19's test of one base address for the transposed dS stores of `--ablate tiles` at d = 128: two
    builds benched on one machine, the kernel before the change (`before`) and after it (`after`), each
    beside its own default (the default kernels are the same in both builds, so each file's default
    takes the drift between the two runs out). Per point: the default's kernel time in `after`, tiles over
    the default before and after, and after over before. Predicted: after over before within lo–hi at every
    point; falsified (the address arithmetic was hidden behind other work) by any point above `ceiling`."""
    rb, ra = common.rows(before), common.rows(after)
    x0, x1 = _over_default(before, "ablate=tiles"), _over_default(after, "ablate=tiles")
    both = sorted((k for k in x1 if k in x0), key=lambda k: (int(k[1]), int(k[2])))
    if not both:
        return provenance(rb + ra)
    base = {(r["d"], r["causal"], r["N"]): float(r["bwd_kernel_ms"]) for r in ra
            if r["step"] == "19" and plain_variant(r["variant"]) == "-" and r.get("bwd_pass") == "1"}
    ratio = {k: x1[k] / x0[k] for k in both}
    body = [[d, "yes" if c == "1" else "no", n, f"{base[(d, c, n)]:.3f}", f"{x0[(d, c, n)]:.3f}", f"{x1[(d, c, n)]:.3f}",
             f"{ratio[(d, c, n)]:.3f}"] for d, c, n in both]
    fails = sum(r.get("bwd_pass") != "1" for r in rb + ra if r["step"] == "19")
    text = provenance(rb + ra) + "\n\n" + table(
        ["d", "causal", "N", "default ms", "`tiles` / default, before", "`tiles` / default, after", "after / before"], body)
    text += ("\n\nKernel time (CUPTI activity records, every kernel of the backward summed, cold L2). "
             + ("Every run passed its check against the reference." if not fails else f"**{fails} run(s) FAIL their check** and are not read."))
    inside = sum(lo <= v <= hi for v in ratio.values())
    fired = [v for v in ratio.values() if v > ceiling]
    return text + _verdict(f"after / before between {lo:.2f} and {hi:.2f} at every point", inside, len(ratio),
                           f"a point above {ceiling:.2f}", fired)


def step19_tiles_spread(before=("tiles19f_*_step19.csv", "tiles19h_*_step19.csv"),
                        after=("tiles19g_*_step19.csv", "tiles19i_*_step19.csv")):
    """The run-to-run spread beside docs/19's before/after tables: per point, the lowest and highest
    backward kernel time of the default over every file (the same kernel in both builds), and of `tiles`
    before and after, over the runs that passed their checks."""
    rs = {f: [r for r in common.rows(f) if r["step"] == "19" and r.get("bwd_pass") == "1"] for f in before + after}
    allrows = [r for f in rs for r in rs[f]]
    if not allrows:
        return provenance(allrows)
    def span(files, variant, k):
        ms = [float(r["bwd_kernel_ms"]) for f in files for r in rs[f]
              if plain_variant(r["variant"]) == variant and (r["d"], r["causal"], r["N"]) == k]
        return (f"{min(ms):.3f}–{max(ms):.3f} ({len(ms)})", max(ms) / min(ms)) if ms else ("–", None)
    keys = sorted({(r["d"], r["causal"], r["N"]) for r in allrows}, key=lambda k: (int(k[1]), int(k[2])))
    body = []
    for k in keys:
        cells = [span(before + after, "-", k), span(before, "ablate=tiles", k), span(after, "ablate=tiles", k)]
        body.append([k[0], "yes" if k[1] == "1" else "no", k[2]] + [c[0] for c in cells]
                    + [f"{max(c[1] for c in cells if c[1]):.3f}"])
    return provenance(allrows) + "\n\n" + table(
        ["d", "causal", "N", "default ms, lowest–highest (runs)", "`tiles` before", "`tiles` after", "largest highest / lowest"], body)


def step19_tiles_small(pattern="tiles19c_*_step19.csv", most_plain=1.00, most_causal=0.98, ceiling=1.02):
    """The test of docs/19's guess about the tile table's sign: `--ablate tiles` beside the default at N = 1k
    (tiles19c_*_step19.csv), kernel time. Predicted: the ablation's time over the default's at most
    `most_plain` without the mask and `most_causal` with it; falsified (the guess wrong) where the point
    without the mask is above `ceiling`."""
    text = ablation("19", only="ablate", pass_="bwd", pattern=pattern, kernel=True, label="with")
    x = _over_default(pattern, "ablate=tiles")
    if not x:
        return text
    ok = sum(v <= (most_causal if k[1] == "1" else most_plain) for k, v in x.items())
    fired = [v for k, v in x.items() if k[1] == "0" and v > ceiling]
    return text + _verdict(f"`tiles` at most {most_plain:.2f} of the default without the mask, at most {most_causal:.2f} with it",
                           ok, len(x), f"a point without the mask above {ceiling:.2f}", fired)


def step19_producer(pattern="abl19_*_step19.csv", lo=1.01, hi=1.08, floor=1.00, ceiling=1.10):
    """Step 19's ablations rerun with `producer` (no producer warp, [no-producer]) among them
    (abl19_*_step19.csv), by kernel time; then docs/19's prediction read from the `producer` column: the
    ablation's time over the default's within lo–hi at every point, falsified by any point below `floor`
    (as fast without the producer warp) or above `ceiling`."""
    text = ablation("19", only="ablate", pass_="bwd", pattern=pattern, kernel=True)  # --ablate's values alone (not --dq)
    x = list(_over_default(pattern, "ablate=producer").values())
    if not x:
        return text
    inside = sum(lo <= v <= hi for v in x)
    fired = [v for v in x if v < floor or v > ceiling]
    return text + _verdict(f"`producer` between {lo:.2f} and {hi:.2f} at every point", inside, len(x),
                           f"a point below {floor:.2f} or above {ceiling:.2f}", fired)


def ncu_stalls(steps, n="4096", pattern="ncu_*_step*.csv"):
    """Nsight per kernel at one N (both masks), with the per-operation shared-memory counters: time,
    registers, occupancy, tensor-pipe share, bank conflicts of plain loads (LDS; the hardware counter
    also counts ldmatrix's wavefronts), stores (STS), ldmatrix (LDSM) and cp.async (LDGSTS), all
    load and ldmatrix wavefronts, and the main warp stall reasons (warps stalled per issued
    instruction). Rows without the per-operation columns (older runs) are left out."""
    rs = [r for r in common.rows(pattern) if r["step"] in steps and r["N"] == n and r.get("wavefronts_ld")]
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


def step13_rows(variant="deterministic=off", pattern="target_*_step13.csv"):
    """Step 13's rows of a file with the given variant (the default: racing dQ, no dropout)."""
    return [r for r in common.rows(pattern) if r["step"] == "13" and r["variant"] == variant and r.get("bwd_ms")]


def step12_dropout():
    """Step 12's forward with --dropout against the same run without it (dropout_*_step12.csv, written by
    scripts/bwd_target.sh): per point, both times and their ratio (above 1: dropout costs that much)."""
    rs = [r for r in common.rows("dropout_*_step12.csv") if r["step"] == "12" and r.get("ms")]
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
    old = [r for r in common.rows(os.path.join("history", "target_*_step13_*.csv"))
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
    a = next((r for r in common.rows("session_*.csv") if r["step"] == step08 and r["variant"] == "bwd=fused"
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
    other = [r for r in common.rows("target_*_step13.csv") if r["step"] == "13" and r.get("bwd_ms")
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
    rs = [r for r in common.rows("ablation_*_step13.csv") if r["step"] == "13" and r.get("bwd_ms")]

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
    rs = common.rows("session_*.csv")
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


def tour(prefix=""):
    """The tour's rows, every step on one shape; its links are relative to docs/ (docs/results.md holds it),
    or to the root with docs="docs/"."""
    rs = common.rows("tour_*.csv")
    docs = {os.path.basename(p)[:2]: os.path.basename(p) for p in glob.glob(os.path.join(ROOT, "docs", "[0-9][0-9]_*.md"))}
    body = []
    for r in rs:
        doc = docs.get(r["step"])
        step = f"[{r['step']}]({prefix}{doc})" if doc else r["step"]
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
                                 f"per-resource model ([{prefix}model.md]({prefix}model.md)) over the ceilings measured in the same "
                                 f"run, computed before the timing._\n\n") + table(
            ["step", "variant", "check", "ledger MB", "roofline ms", "model ms", "bound by", "measured ms", "TFLOP/s",
             "backward ms", "bwd model ms"], body)
    return provenance(rs) + f" _The tour's shape: {shape}._\n\n" + table(
        ["step", "variant", "check", "ledger MB", "predicted ms", "measured ms", "TFLOP/s", "backward ms"], body)


def step19_dq_turns():
    """Step 19's dQ split at d = 64 by turns against by keys (dqturns_*_step19.csv: the ablations run at
    ba858e4, where by turns was the default and `--ablate dq-keys` the split by keys; the split by keys is
    the default again since, by turns `--ablate dq-turns`). Every row of that run, by kernel time, named
    by what it ran; closing line: by keys' time over by turns' at the points that have both (above 1: by
    turns faster)."""
    rs = [r for r in common.rows("dqturns_*_step19.csv") if r["step"] == "19" and r.get("bwd_kernel_ms")]
    if not rs:
        return provenance(rs, "build/bench --steps 19 --variants ablations --ds 64 (docs/19_hopper_backward.md)")
    what = {"-": "by turns", "ablate=atomics": "by turns, dQ added from registers",
            "ablate=overlap": "by turns, every product waited for", "ablate=dq-keys": "by keys",
            "ablate=dk-first": "by turns, dQ issued before dK"}
    body, by = [], {}
    for r in sorted(rs, key=lambda r: (int(r["causal"]), -int(r["N"]))):
        v = plain_variant(r["variant"])
        by[(int(r["causal"]), int(r["N"]), v)] = r
        ok = "" if r["bwd_pass"] == "1" else " (FAIL)"
        body.append([r["d"], "yes" if r["causal"] == "1" else "no", r["N"], what.get(v, v), f"{float(r['bwd_kernel_ms']):.3f}{ok}"])
    both = [(k[:2], float(by[k[:2] + ("ablate=dq-keys",)]["bwd_kernel_ms"]) / float(r["bwd_kernel_ms"]))
            for k, r in by.items() if k[2] == "-" and k[:2] + ("ablate=dq-keys",) in by]
    close = "; ".join(f"{'causal' if c else 'no mask'}, N = {n}: **{x:.2f}**" for (c, n), x in both) or "no point has both"
    return (provenance(rs) + "\n\n" + table(["d", "causal", "N", "dQ split (as run)", "bwd kernel ms"], body)
            + f"\n\nKernel time (CUPTI, every kernel of the backward summed, cold L2). By keys' time over by turns' "
              f"(above 1: by turns faster): {close}. The run stopped at its time budget: the rows it did not reach are not here.")


def _samples_rows(names, runs, find, cell):
    """A samples table's rows: per (kind, name), each run's `cell(row, kind)` (– where the run has no such row)."""
    body = []
    for kind, name in names:
        cells = [cell(r, kind) if (r := find(run, kind, name)) is not None else "–" for run in runs]
        body.append([f"`{name}`" if kind == "opcode" else f"stall `{name}`"] + cells)
    return body


def sass_stalls(step):
    """Where a step's main kernel waits, by SASS opcode (sass_*_stepNN.csv, scripts/ncu_sass.py over Nsight's
    source page): one column per profiled run (commit and shape), in date order; rows the opcodes that
    hold the most samples in any run, then the stall reasons. A cell is the share of that run's warp-state
    samples; an opcode's first cell names its most common reason there."""
    rs = common.rows(f"sass_*_step{step}.csv")
    if not rs:
        return provenance(rs, "scripts/ncu_sass.py --report R.ncu-rep --out plots/data/sass_<gpu>_step" + step + ".csv")
    runs = sorted({(r["date"], r["commit"], r["label"]) for r in rs})
    by = {(r["commit"], r["label"], r["kind"], r["name"]): r for r in rs}
    top_ops, top_reasons = [], []
    for _, c, l in runs:
        mine = [r for r in rs if (r["commit"], r["label"]) == (c, l)]
        for kind, keep, n in (("opcode", top_ops, 8), ("reason", top_reasons, 5)):
            for r in sorted((r for r in mine if r["kind"] == kind), key=lambda r: -float(r["samples_pct"]))[:n]:
                if r["name"] not in keep:
                    keep.append(r["name"])
    body = _samples_rows([("opcode", n) for n in top_ops] + [("reason", n) for n in top_reasons], runs,
                         lambda run, kind, name: by.get((run[1], run[2], kind, name)),
                         lambda r, kind: f"{float(r['samples_pct']):.1f}" + (
                             f" ({r['top_reason']} {float(r['top_reason_pct']):.0f} %)" if kind == "opcode" and r["top_reason"] else ""))
    header = ["opcode / reason"] + [f"`{c}`, {l}" for _, c, l in runs]
    note = (" _A cell: the share (%) of the kernel's warp-state samples at that opcode (in parentheses its most"
            " common stall reason, as a share of the opcode's samples), or with that stall reason. The samples"
            " cover every warp, the producer's and the writer's waiting ones too._")
    return provenance(rs) + note + "\n\n" + table(header, body)


def sass_counts(pattern, n_ops=8, n_reasons=5):
    """Nsight's warp-state samples by SASS opcode and stall reason for runs of one kernel profiled at one shape
    (scripts/ncu_sass.py with its `samples` column), as counts against the first run's: a cell is a row's
    samples over all of the first run's samples, in %, so that a column's total is that run's samples
    against the first's (at one sampling interval, time × the warps sampled). Rows: the opcodes and reasons
    with the most samples in any run; an opcode's cell names its most common stall reason there."""
    rs = [r for r in common.rows(pattern) if r.get("samples", "") != ""]
    if not rs:
        return provenance(rs)
    runs = []
    for r in rs:
        if r["label"] not in runs:
            runs.append(r["label"])
    total = {l: sum(int(r["samples"]) for r in rs if r["label"] == l and r["kind"] == "opcode") for l in runs}
    base = total[runs[0]]
    by = {(r["label"], r["kind"], r["name"]): r for r in rs}
    names = []
    for kind, n in (("opcode", n_ops), ("reason", n_reasons)):
        for l in runs:
            mine = sorted((r for r in rs if r["label"] == l and r["kind"] == kind), key=lambda r: -int(r["samples"]))
            for r in mine[:n]:
                if (kind, r["name"]) not in names:
                    names.append((kind, r["name"]))
    body = [["all samples"] + [f"**{100.0 * total[l] / base:.0f}**" for l in runs]] + _samples_rows(
        names, runs, lambda l, kind, name: by.get((l, kind, name)),
        lambda r, kind: f"{100.0 * int(r['samples']) / base:.1f}" + (f" ({r['top_reason']})" if kind == "opcode" and r["top_reason"] else ""))
    note = (f" _A cell: that opcode's (or stall reason's) warp-state samples over all of the `{runs[0]}` run's samples,"
            " in % (in parentheses the opcode's most common stall reason there). The samples cover every warp, the"
            " producer's and the writer's waiting ones too._")
    return provenance(rs) + note + "\n\n" + table(["opcode / reason"] + [f"`{l}`" for l in runs], body)


def step19_hoist():
    """Step 19's plain backward before and after the mask's hoist ([mask-hoist]): eb403a7's target-matrix
    run (prehoist_*_bwd19.csv) beside 7a55647's (predesc_*_bwd19.csv, the clock files of those commits kept)."""
    return step19_before_after("prehoist_*_bwd19.csv", "predesc_*_bwd19.csv")


def step19_desc():
    """Step 19's plain backward before and after [desc-add] (descriptors by one add): 7a55647's
    target-matrix run (predesc_*_bwd19.csv) beside c241b00's (preturns_*_bwd19.csv)."""
    return step19_before_after("predesc_*_bwd19.csv", "preturns_*_bwd19.csv")


def step19_turns():
    """Step 19's plain backward before and after dQ by turns at d = 64 (the default again): c241b00's
    target-matrix run (preturns_*_bwd19.csv) beside the current one (clock_*_bwd19.csv)."""
    return step19_before_after("preturns_*_bwd19.csv", "clock_*_bwd19.csv")


def step19_kernels(old_pattern, new_pattern):
    """Two runs of step 19's target matrix, kernel by kernel (the bwd_kernels_ms column: CUPTI, each
    kernel of the backward summed over its launches): per point, bwd_pre and dq_convert in µs and
    bwd_kv in ms, before and after. Closing line: per kernel, the geometric mean of after over before
    at each head dimension (above 1: slower)."""
    old = [r for r in common.rows(old_pattern) if r["step"] == "19" and plain_variant(r["variant"]) == "-"]
    new = [r for r in common.rows(new_pattern) if r["step"] == "19" and plain_variant(r["variant"]) == "-"]
    if not old or not new:
        return provenance(old + new, "build/bench --steps 19 (docs/19_hopper_backward.md)")
    key = lambda r: (r["dtype"], int(r["d"]), int(r["causal"]), int(r["N"]))
    split = lambda r: {k: float(v) for k, v in (x.split(":") for x in r["bwd_kernels_ms"].split(";"))}
    before = {key(r): r for r in old}
    names = ("bwd_pre", "bwd_kv", "dq_convert")
    body, ratio = [], {(n, d): [] for n in names for d in (64, 128)}
    for r in sorted(new, key=lambda r: (r["dtype"], -int(r["d"]), int(r["causal"]), int(r["N"]))):
        b = before.get(key(r))
        if b is None or not b.get("bwd_kernels_ms") or not r.get("bwd_kernels_ms"):
            continue
        kb, kn = split(b), split(r)
        row = [r["dtype"], r["d"], "yes" if r["causal"] == "1" else "no", r["N"]]
        for n in names:
            f = (lambda x: f"{x:.3f}") if n == "bwd_kv" else (lambda x: f"{1000 * x:.0f}")
            row += [f(kb[n]), f(kn[n])]
            ratio[(n, int(r["d"]))].append(kn[n] / kb[n])
        ok = "" if r["bwd_pass"] == "1" else " (FAIL)"
        row[-1] += ok
        body.append(row)
    c_old, c_new = old[0]["commit"], new[0]["commit"]
    head = ["dtype", "d", "causal", "N"]
    for n, unit in (("bwd_pre", "µs"), ("bwd_kv", "ms"), ("dq_convert", "µs")):
        head += [f"{n} `{c_old}` {unit}", f"{n} `{c_new}` {unit}"]
    close = "; ".join(f"{n} at d = {d}: **{geomean(x):.2f}** ({min(x):.2f}–{max(x):.2f})" for (n, d), x in ratio.items() if x)
    return (provenance(old + new) + "\n\n" + table(head, body)
            + "\n\nKernel time per kernel (CUPTI, cold L2), the same `bench` command at both commits. `"
            + c_new + "` over `" + c_old + "` (above 1: slower), geometric mean (range): " + close + ".")


def step19_before_after(old_pattern, new_pattern):
    """Two runs of step 19's target matrix, point by point by kernel time; closing line: the speed-up's
    geometric mean and range, and the points docs/19's predictions name (fp16, N = 16384, no mask)."""
    old = [r for r in common.rows(old_pattern) if r["step"] == "19" and plain_variant(r["variant"]) == "-"]
    new = [r for r in common.rows(new_pattern) if r["step"] == "19" and plain_variant(r["variant"]) == "-"]
    if not old or not new:
        return provenance(old + new, "build/bench --steps 19 (docs/19_hopper_backward.md)")
    key = lambda r: (r["dtype"], int(r["d"]), int(r["causal"]), int(r["N"]))
    before = {key(r): r for r in old}
    body, xs, named = [], [], []
    for r in sorted(new, key=lambda r: (r["dtype"], -int(r["d"]), int(r["causal"]), int(r["N"]))):
        b = before.get(key(r))
        if b is None or not b.get("bwd_kernel_ms") or not r.get("bwd_kernel_ms"):
            continue
        x = float(b["bwd_kernel_ms"]) / float(r["bwd_kernel_ms"])
        xs.append(x)
        ok = "" if r["bwd_pass"] == "1" and b["bwd_pass"] == "1" else " (FAIL)"
        body.append([r["dtype"], r["d"], "yes" if r["causal"] == "1" else "no", r["N"], f"{float(b['bwd_kernel_ms']):.3f}",
                     f"{float(r['bwd_kernel_ms']):.3f}", f"{x:.2f}{ok}"])
        if r["dtype"] == "fp16" and r["causal"] == "0" and r["N"] == "16384":
            named.append(f"d = {r['d']}: **{x:.2f}**")
    c_old, c_new = old[0]["commit"], new[0]["commit"]
    return (provenance(old + new) + "\n\n"
            + table(["dtype", "d", "causal", "N", f"`{c_old}` ms", f"`{c_new}` ms", "speed-up"], body)
            + f"\n\nKernel time of the whole backward (CUPTI, every kernel summed, cold L2), two runs of the same "
              f"`bench` command in one session each. Speed-up over the {len(xs)} points: geometric mean "
              f"**{geomean(xs):.2f}**, range {min(xs):.2f}–{max(xs):.2f}. At the points the prediction named "
              f"(fp16, N = 16384, no mask): " + "; ".join(named) + ".")


def bwd_model(step, pattern):
    """A backward step's rows of one run beside the model's prediction for them (docs/model.md: the
    per-resource model, computed from the ledger before any launch, never fitted): per point, the
    predicted and the measured kernel time of the backward, their ratio, and the resource the model
    says bounds it. Closing line: the ratio's geometric mean and range."""
    rs = [r for r in common.rows(pattern) if r["step"] == step and r.get("bwd_model_ms") and r.get("bwd_kernel_ms")
          and plain_variant(r["variant"]) == "-"]
    if not rs:
        return provenance(rs)
    body, ratios = [], []
    for r in sorted(rs, key=lambda r: (r["dtype"], -int(r["d"]), int(r["causal"]), int(r["N"]))):
        x = float(r["bwd_kernel_ms"]) / float(r["bwd_model_ms"])
        ratios.append(x)
        body.append([r["dtype"], r["d"], "yes" if r["causal"] == "1" else "no", r["N"], f"{float(r['bwd_model_ms']):.3f}",
                     f"{float(r['bwd_kernel_ms']):.3f}", f"{x:.2f}", r.get("bwd_bound_by") or "–"])
    return (provenance(rs) + "\n\n" + table(["dtype", "d", "causal", "N", "model ms", "measured ms (kernel time)",
                                             "measured / model", "bound by (model)"], body)
            + f"\n\nMeasured / model over the {len(ratios)} points: geometric mean **{geomean(ratios):.2f}**, "
              f"range {min(ratios):.2f}–{max(ratios):.2f}.")


def dq_precision():
    """dQ's relative error against float64 at long key ranges (dq_precision.csv, scripts/dq_precision.py, a
    CPU emulation): per input mean and Nk, each variant's error in percent, and the error that D's own
    error predicts for the fused variant (|δD|·scale·||Σ_j P_j k_j|| / ||dQ||)."""
    rs = common.rows("dq_precision.csv")
    if not rs:
        return provenance(rs, "scripts/dq_precision.py plots/data/dq_precision.csv")
    variants = ["fused", "d-fp32o", "ds-exact", "both", "centered", "shifted", "unfused"]
    by = {(r["input_mean"], int(r["Nk"]), r["variant"]): r for r in rs}
    keys = sorted({(r["input_mean"], int(r["Nk"])) for r in rs}, key=lambda k: (-float(k[0]), k[1]))
    body = []
    for mean, nk in keys:
        row = [mean, nk]
        for v in variants:
            r = by.get((mean, nk, v))
            row.append(f"{100 * float(r['dq_rel_err']):.2f}" if r else "–")
        f = by.get((mean, nk, "fused"))
        row.append(f"{100 * float(f['predicted_from_d']):.2f}" if f and f.get("predicted_from_d") else "–")
        for v in ("fused", "shifted"):  # dS's error: dK's, for one query row
            r = by.get((mean, nk, v))
            row.append(f"{100 * float(r['ds_rel_err']):.2f}" if r and r.get("ds_rel_err") else "–")
        body.append(row)
    r = rs[0]
    head = (f"_Computed on the CPU by `scripts/dq_precision.py` at commit `{r['commit']}`, {r['date']} (an emulation: "
            f"float64 arithmetic, the kernels' bf16 roundings applied where they make them; d = {r['d']}, one query row, "
            f"seed {r['seed']}). Relative L2 error of dQ against float64 from the same bf16 inputs, in percent; the last "
            f"two columns that of dS, which is dK's for one query row._")
    return head + "\n\n" + table(["input mean", "Nk", "fused (the kernels)", "D from unrounded O", "dS not rounded",
                                  "both", "keys' mean taken out", "keys shifted, K' stored", "unfused composite",
                                  "predicted from δD", "dS: fused", "dS: keys shifted"], body)


def dq_centered_cost():
    """--dq centered's cost in kernel time (dqcentered_*_step19.csv: bench over the backward target matrix, the
    plain and the centered backward run point by point in turn): per point both times and centered / plain;
    closing lines read docs/19's prediction, written before the run (geometric mean at most 1.025, no point
    above 1.04, the N = 16k points at most 1.02; under 1.03 as the mean, the flag is offered)."""
    rs = [r for r in common.rows("dqcentered_*_step19.csv") if r["step"] == "19" and r.get("bwd_kernel_ms")]
    if not rs:
        return provenance(rs, "bench --steps 19 over the backward target matrix, with and without --set dq=centered (docs/19_hopper_backward.md)")
    by = {}
    for r in rs:
        by[(r["device"], r["dtype"], int(r["d"]), int(r["causal"]), int(r["N"]), plain_variant(r["variant"]))] = r
    body, ratios, long_ = [], [], []
    for key in sorted({k[:5] for k in by}, key=lambda k: (k[0], k[1], k[2], k[3], k[4])):
        p, c = by.get(key + ("-",)), by.get(key + ("dq=centered",))
        if not p or not c:
            continue
        x = float(c["bwd_kernel_ms"]) / float(p["bwd_kernel_ms"])
        ok = "" if p["bwd_pass"] == "1" and c["bwd_pass"] == "1" else " (FAIL)"
        ratios.append(x)
        if key[4] >= 16384:
            long_.append(x)
        body.append([key[1], key[2], "yes" if key[3] else "no", key[4], f"{float(p['bwd_kernel_ms']):.3f}",
                     f"{float(c['bwd_kernel_ms']):.3f}", f"{x:.3f}{ok}"])
    if not ratios:
        return provenance(rs) + "\n\nNo point has both the plain and the centered backward."
    g = geomean(ratios)
    verdict = lambda ok: "held" if ok else "missed"
    close = (f"Kernel time (CUPTI, every kernel of the backward summed, cold L2). Centered / plain over the {len(ratios)} "
             f"points: geometric mean **{g:.3f}** (predicted at most 1.025: **{verdict(g <= 1.025)}**), largest "
             f"**{max(ratios):.3f}** (predicted at most 1.04: **{verdict(max(ratios) <= 1.04)}**)")
    if long_:
        close += f"; at N = 16k at most **{max(long_):.3f}** (predicted at most 1.02: **{verdict(max(long_) <= 1.02)}**)"
    return (provenance(rs) + "\n\n" + table(["dtype", "d", "causal", "N", "plain bwd kernel ms", "centered bwd kernel ms",
                                             "centered / plain"], body) + "\n\n" + close + ".")


def ncu_metrics(path):
    """One launch's metrics from ncu's own --csv (one row per metric): the numeric ones by name, with the
    kernel's name and grid under "kernel" and "grid"."""
    with open(path, newline="") as f:
        rs = list(csv.DictReader(f))
    m = {r["Metric Name"]: float(r["Metric Value"].replace(",", "")) for r in rs
         if r["Metric Value"].replace(",", "").replace(".", "").isdigit()}
    m["kernel"], m["grid"] = rs[0]["Kernel Name"], rs[0]["Grid Size"]
    return m


def ncu_pair_rows(a, b):
    """Rows of a two-column Nsight table (a launch against another): time, cycles, instructions, the issue slots
    used (issued instructions per scheduler over the SM's active cycles), cycles per issued instruction, SM
    throughput; each with b / a."""
    for m in (a, b):
        if "Avg. Issued Instructions Per Scheduler" in m and m.get("SM Active Cycles"):
            m["issue slots used (%)"] = 100.0 * m["Avg. Issued Instructions Per Scheduler"] / m["SM Active Cycles"]
    shown = [("Duration", "bwd_kv duration (ms)", 1e-6), ("Elapsed Cycles", "elapsed cycles (millions)", 1e-6),
             ("Executed Instructions", "executed warp instructions (millions)", 1e-6),
             ("issue slots used (%)", "issue slots used (%): issued instructions per scheduler / active cycles", 1.0),
             ("Warp Cycles Per Issued Instruction", "warp cycles per issued instruction", 1.0),
             ("Compute (SM) Throughput", "compute (SM) throughput (%)", 1.0)]
    return [[label, f"{a[k] * f:.4g}", f"{b[k] * f:.4g}", f"{b[k] / a[k]:.3f}"] for k, label, f in shown if k in a and k in b]


def dropout_why():
    """Why dropout costs step 19 what it does (docs/19, "Dropout"): Nsight Compute on bwd_kv at d = 128, N = 4096,
    bf16, plain and with --dropout 0.1 --dropout-kernel run (dropout_ncu_{plain,dropout}_<gpu>.csv, ncu's own
    --csv), and the instructions dropout adds per entry of Sᵀ (B·H·N·N entries, no mask; 32 threads a warp
    instruction)."""
    files = {v: sorted(glob.glob(os.path.join(common.DATA, f"dropout_ncu_{v}_*.csv"))) for v in ("plain", "dropout")}
    if not files["plain"] or not files["dropout"]:
        return "_no measurements yet: run ncu on step19 with and without --dropout on a GPU machine (plots/data/README.md)_"
    m = {v: ncu_metrics(paths[0]) for v, paths in files.items()}
    where = os.path.basename(files["plain"][0])[len("dropout_ncu_plain_"):-4]
    grid = [int(x) for x in re.findall(r"\d+", m["plain"]["grid"])]
    close = ""
    shape = re.search(r"--b (\d+) --h (\d+) --n (\d+)", open(os.path.join(common.DATA, "README.md")).read().split("dropout_ncu_plain_")[1])
    if shape and "Executed Instructions" in m["plain"]:
        b_, h_, n_ = (int(x) for x in shape.groups())
        added = (m["dropout"]["Executed Instructions"] - m["plain"]["Executed Instructions"]) * 32 / (b_ * h_ * n_ * n_)
        close = (f"\n\nAdded by dropout: **{added:.1f}** thread instructions per entry of Sᵀ "
                 f"(B·H·N² = {b_}·{h_}·{n_}² entries, the shape of `plots/data/README.md`'s command).")
    return (f"_Nsight Compute (`ncu --clock-control none`, sections SpeedOfLight, WarpStateStats, InstructionStats, "
            f"LaunchStats) on one launch of `step19_bwd_kv` per variant, grid {grid}, on the GPU of the files' name ({where}); "
            f"the command, shape and commit: `plots/data/README.md`._\n\n"
            + table(["bwd_kv, bf16, d = 128", "plain", "with dropout", "dropout / plain"], ncu_pair_rows(m["plain"], m["dropout"]))
            + close)


def dq_centered_why():
    """Why --dq centered costs what it does (docs/19): Nsight Compute on bwd_kv at d = 64, N = 4096, bf16, plain and
    centered (dqcentered_ncu_{plain,centered}_<gpu>.csv, ncu's own --csv), and the static opcode counts of the
    default consumer kernels (dqcentered_sass_<gpu>.txt, scripts/sass_opcodes.py): per kernel the total and the
    opcodes the row sums add."""
    files = {v: sorted(glob.glob(os.path.join(common.DATA, f"dqcentered_ncu_{v}_*.csv"))) for v in ("plain", "centered")}
    sass = sorted(glob.glob(os.path.join(common.DATA, "dqcentered_sass_*.txt")))
    if not files["plain"] or not files["centered"] or not sass:
        return "_no measurements yet: run ncu on step19 --dq plain and centered, and scripts/sass_opcodes.py, on a GPU machine_"
    m = {v: ncu_metrics(paths[0]) for v, paths in files.items()}
    body = ncu_pair_rows(m["plain"], m["centered"])
    counts = {}
    for line in open(sass[0]):
        w = line.split()
        if len(w) < 9:
            continue
        ops = dict(kv.split("=") for kv in w[9:])
        counts[("bf16" if "bfloat16" in w[0] else "fp16", int(w[2]), w[4], w[6])] = (int(w[8]), ops)
    sbody = []
    for (t, d, split, cent), (total, ops) in sorted(counts.items()):
        if cent != "1" or (t, d, split, "0") not in counts:  # the centered kernel beside the plain one of its dQ split
            continue
        total0, ops0 = counts[(t, d, split, "0")]
        delta = ", ".join(f"{k} +{int(ops[k]) - int(ops0[k])}" for k in ops if int(ops[k]) != int(ops0[k]))
        sbody.append([t, d, total0, total, f"+{total - total0}", delta])
    where = os.path.basename(files["plain"][0])[len("dqcentered_ncu_plain_"):-4]
    targs = re.search(r"<([^,]+), (\d+),", m["plain"]["kernel"])  # the instantiation: storage type, d
    what = f"bwd_kv, {'bf16' if 'bfloat16' in targs.group(1) else 'fp16'}, d = {targs.group(2)}" if targs else "bwd_kv"
    return (f"_Nsight Compute (`ncu --clock-control none`, sections SpeedOfLight, WarpStateStats, InstructionStats) on one "
            f"launch of `step19_bwd_kv` per variant, grid {m['plain']['grid']}, on the GPU of the files' name ({where}); "
            f"the command, shape and commit: `plots/data/README.md`._\n\n"
            + table([what, "plain", "centered", "centered / plain"], body)
            + "\n\n_Static instruction counts of the default consumer kernels (`cuobjdump -sass` of the same build, "
              "`scripts/sass_opcodes.py`): the whole kernel, plain and centered, and the opcodes whose counts change._\n\n"
            + table(["type", "d", "plain", "centered", "added", "by opcode"], sbody))


def dq_kernels(on_gpu=True):
    """dQ's relative error against float64 at long key ranges, by python/examples/dq_long_keys.py: on a GPU the
    kernels (dq_long_keys_<gpu>.csv and dq_long_keys_gqa_<gpu>.csv), on the CPU the steps' blueprints
    (dq_long_keys_cpu.csv). Per input mean, Nk and heads per K/V head: each backend's dQ error in percent, and the
    largest dK and dV error of the fused backends. The GPU table's closing lines read docs/19's prediction,
    written before the first GPU run: at mean 0.5 and the longest Nk, each fused backend (steps 13 and 19,
    SDPA's flash and cuDNN) at least twice the composite's dQ error; dK and dV of the fused backends under 1 %;
    at mean 0, every fused backend's dQ error under 1 %. A backend that did not run is '–', named under the
    table with its reason."""
    rs = [r for r in common.rows("dq_long_keys_*.csv") if r.get("backend") and (r["device"] != "cpu") == on_gpu]
    if not rs:
        return provenance(rs, "python/examples/dq_long_keys.py" + (" (scripts/python_gpu.sh's dq phase)" if on_gpu else
                                                                    " --device cpu --backends steps-19,steps-19-centered,steps-13,composite"))
    fused = ["steps-19", "steps-13", "sdpa-flash", "sdpa-cudnn"]
    order = [b for b in ["steps-19", "steps-19-centered"] + fused[1:] + ["sdpa-efficient", "sdpa-math", "composite"]
             if any(r["backend"] == b for r in rs)]
    ok = [r for r in rs if r["status"] == "ok"]
    by = {(float(r["mean"]), int(r["Nk"]), r["H"], r["backend"]): r for r in ok}
    keys = sorted({(float(r["mean"]), int(r["Nk"]), r["H"]) for r in rs}, key=lambda k: (-k[0], k[2], k[1]))
    body = []
    for mean, nk, h in keys:
        row = [f"{mean:g}", nk, f"{h} : 1"]
        for b in order:
            r = by.get((mean, nk, h, b))
            row.append(f"{100 * float(r['dq_err']):.2f}" if r else "–")
        kv = [max(float(r["dk_err"]), float(r["dv_err"])) for (m, n, hh, b), r in by.items()
              if (m, n, hh) == (mean, nk, h) and b in fused]
        body.append(row + [f"{100 * max(kv):.2f}" if kv else "–"])
    lines = []
    top = max(k[1] for k in keys)
    pairs = [(b, by.get((0.5, top, "1", b)), by.get((0.5, top, "1", "composite"))) for b in fused]
    pairs = [(b, float(r["dq_err"]) / float(c["dq_err"])) for b, r, c in pairs if r and c]
    if pairs and on_gpu:
        held = sum(x >= 2 for _, x in pairs)
        lines.append(f"Mean 0.5, Nk = {top}, one query head per K/V head: fused dQ error over the composite's "
                     + ", ".join(f"{b} {x:.1f}" for b, x in pairs)
                     + f" (predicted at least 2: **{'held' if held == len(pairs) else 'missed'}**, {held} of {len(pairs)}).")
    kv = [max(float(r["dk_err"]), float(r["dv_err"])) for r in ok if r["backend"] in fused]
    if kv and on_gpu:
        lines.append(f"dK and dV of the fused backends: largest error {100 * max(kv):.2f} % (predicted under 1 %: "
                     f"**{'held' if max(kv) < 0.01 else 'missed'}**).")
    zero = [float(r["dq_err"]) for r in ok if float(r["mean"]) == 0 and r["backend"] in fused]
    if zero and on_gpu:
        lines.append(f"Mean 0, fused backends: largest dQ error {100 * max(zero):.2f} % (predicted under 1 %: "
                     f"**{'held' if max(zero) < 0.01 else 'missed'}**).")
    # [dq-centered] docs/19's prediction for --dq centered on the kernels, written before its first GPU run:
    # at mean 0.5 below the composite's dQ error at every Nk and query heads per K/V head, and at least 4 times
    # below plain step 19's at the longest Nk; at mean 0 within 0.05 points of plain step 19; dK and dV the same.
    cent = [(k, by.get(k + ("steps-19-centered",)), by.get(k + ("composite",)), by.get(k + ("steps-19",))) for k in keys]
    cent = [(k, c, u, p) for k, c, u, p in cent if c and u and p]
    if cent and on_gpu:
        half = [(k, float(c["dq_err"]), float(u["dq_err"])) for k, c, u, p in cent if k[0] == 0.5]
        below = sum(x < y for _, x, y in half)
        lines.append(f"--dq centered (steps-19-centered), mean 0.5: dQ error below the composite's at {below} of {len(half)} "
                     f"points (predicted all: **{'held' if half and below == len(half) else 'missed'}**).")
        gain = [float(p["dq_err"]) / float(c["dq_err"]) for k, c, u, p in cent if k[0] == 0.5 and k[1] == top and k[2] == "1"]
        if gain:
            lines.append(f"Plain step 19's dQ error over the centered one at Nk = {top}: **{gain[0]:.1f}** (predicted at least 4: "
                         f"**{'held' if gain[0] >= 4 else 'missed'}**).")
        zero = [abs(float(c["dq_err"]) - float(p["dq_err"])) for k, c, u, p in cent if k[0] == 0]
        if zero:
            lines.append(f"Mean 0: the centered dQ error within {100 * max(zero):.2f} points of plain step 19's (predicted "
                         f"within 0.05: **{'held' if max(zero) <= 0.0005 else 'missed'}**).")
        same = all(c["dk_err"] == p["dk_err"] and c["dv_err"] == p["dv_err"] for k, c, u, p in cent)
        lines.append(f"dK and dV: {'the same' if same else 'not the same'} as plain step 19's at every point (predicted the "
                     f"same: **{'held' if same else 'missed'}**).")
    skipped = sorted({(r["backend"], r["status"]) for r in rs if r["status"] != "ok"})
    if skipped:
        lines.append("Not measured: " + "; ".join(f"{b}: {s}" for b, s in skipped) + ".")
    r0 = rs[0]
    head = (provenance(rs, "python/examples/dq_long_keys.py") if on_gpu else
            f"_Computed on the CPU by `python/examples/dq_long_keys.py --device cpu` at commit `{r0['commit']}`, "
            f"{r0['date']} (the steps' blueprints through the package: the kernels' arithmetic, emulated)._")
    return (head + f" _One query row, d = {rs[0]['d']}, bf16, seed "
            f"{rs[0]['seed']}, PyTorch {rs[0]['torch']}; relative L2 error against float64 autograd on the same bf16 "
            "values, in percent. q : kv: query heads per K/V head._\n\n"
            + table(["input mean", "Nk", "q : kv"] + [f"dQ {b}" for b in order] + ["dK, dV (largest, fused)"], body)
            + ("\n\n" + " ".join(x for x in lines if x) if any(lines) else ""))


def bwd_dropout():
    """What --dropout 0.1 costs the backward (dropout_*_bwd.csv, scripts/bwd_dropout.sh: steps 19 and 13 at each
    point with and without it, point by point in turn): per step and point both kernel times and their ratio;
    closing lines read docs/19's prediction, written before the run (step 19: 1.2-1.5 at d = 128, 1.3-1.8 at
    d = 64, above 1.10 at every point; above step 13's ratio at each point)."""
    rs = [r for r in common.rows("dropout_*_bwd.csv") if r.get("bwd_kernel_ms")]
    if not rs:
        return provenance(rs, "scripts/bwd_dropout.sh")
    by = {}
    for r in rs:
        by[(r["device"], r["step"], point(r), "dropout=" in r["variant"])] = r
    body, ratio, used = [], {}, []
    for dev, step, key in sorted({k[:3] for k in by}, key=lambda k: (k[0], -int(k[1]), k[2][0], -k[2][1], k[2][2], k[2][3])):
        a, b = by.get((dev, step, key, False)), by.get((dev, step, key, True))
        if not a or not b:
            continue
        x = float(b["bwd_kernel_ms"]) / float(a["bwd_kernel_ms"])
        ok = "" if all(r[c] == "1" for r in (a, b) for c in ("pass", "bwd_pass")) else " (FAIL)"
        ratio[(step, key)] = x
        used += [a, b]
        body.append([step, key[0], key[1], "yes" if key[2] else "no", key[3], f"{a['B']}×{a['H']}",
                     f"{float(a['bwd_kernel_ms']):.3f}", f"{float(b['bwd_kernel_ms']):.3f}", f"{x:.2f}{ok}"])
    if not body:
        return provenance(rs) + "\n\nNo point has both runs."
    verdict = lambda ok: "held" if ok else "missed"
    close = []
    for d, lo, hi in ((128, 1.2, 1.5), (64, 1.3, 1.8)):
        xs = [x for (s, k), x in ratio.items() if s == "19" and k[1] == d]
        if xs:
            n_in = sum(lo <= x <= hi for x in xs)
            close.append(f"step 19 at d = {d}: {min(xs):.2f}–{max(xs):.2f} (predicted {lo}–{hi}: **{verdict(n_in == len(xs))}**, "
                         f"{n_in} of {len(xs)})")
    s19 = [x for (s, k), x in ratio.items() if s == "19"]
    if s19:
        over = sum(x > 1.10 for x in s19)
        close.append(f"above 1.10 (the issue's 10 %) at {over} of {len(s19)} points")
    pairs = [(x, ratio[("13", k)]) for (s, k), x in ratio.items() if s == "19" and ("13", k) in ratio]
    if pairs:
        above = sum(a > b for a, b in pairs)
        close.append(f"step 19's ratio above step 13's at {above} of {len(pairs)} points (predicted at all: "
                     f"**{verdict(above == len(pairs))}**)")
    return (provenance(used) + " _Kernel time (CUPTI, every kernel of the backward summed, cold L2); each run checked on one "
            "head. The ratio is the time with `--dropout 0.1` over the time without (above 1: what dropout costs)._\n\n" +
            table(["step", "dtype", "d", "causal", "N", "B×H", "bwd kernel ms", "with dropout, ms", "with / without"], body) +
            "\n\n" + ("; ".join(close) + ".")[0].upper() + ("; ".join(close) + ".")[1:])
