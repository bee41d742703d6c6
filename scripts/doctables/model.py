"""The theory and the model: the closed-form traffic (docs/00, docs/03), the papers' fractions of peak
(docs/12, README), the measured ceilings and the per-resource model (docs/model.md)."""
import os
import re

from . import common
from .common import ROOT, mb, provenance, spread, table


# ------------------------------------------------------------------------------------------------
# The theory the measurements stand on: the closed-form traffic of FlashAttention-1's loop order
# against the naive one (docs/00, docs/03); the measured fraction of the tensor peak beside the
# papers' A100 figures (docs/12, README).

def traffic_model():
    """traffic_model.csv's forward rows without the mask (./plot_traffic, no GPU): (step, d, N) -> bytes per head."""
    out = {}
    for r in common.rows("traffic_model.csv"):
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
    """The H200's dense fp16/bf16 tensor rate as common/perf/roofline.cpp's h200_datasheet() gives it (FLOP/s)."""
    src = open(os.path.join(ROOT, "common", "perf", "roofline.cpp"), encoding="utf-8").read()
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
        rs = [r for r in common.rows(pattern) if all(r.get(k) == v for k, v in match.items()) and r["dtype"] == "fp16" and r["causal"] == "0"
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
            f"`h200_datasheet()` in `common/perf/roofline.cpp`. fp16, no mask, B·N = 16k, H·d = 2048._" if used else
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
    "launch": "empty kernel, back to back", "smem-latency": "dependent shared load, one warp",
    "mma-latency": "dependent mma.sync, one warp", "ex2-latency": "dependent ex2, one warp",
    "fma-latency": "dependent FMA, one warp",
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
    rs = common.rows("peaks_*.csv")
    if not rs:
        return provenance([], "bench --peaks")
    body = [[f"`{r['peak']}`", PEAK_WHAT.get(r["peak"], ""), fmt_value(r["value"], r["unit"])] for r in rs]
    return provenance(rs, "bench --peaks") + " _One launch of each microbenchmark takes at least 1 ms; the median of 10._\n\n" + table(
        ["ceiling", "what it measures", "measured"], body)


def model_rows(name):
    return [r for r in common.rows(name) if r["ratio"]]


def model_tour():
    rs = [r for r in model_rows("model_h200.csv") if r["file"].startswith("tour")]
    src = common.rows("tour_*.csv")
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
    src = [x for f in files for x in common.rows(f)]
    return provenance(src) + (f" _The {how} run's passes (forward and backward; {', '.join('`' + f + '`' for f in files)}), "
                              "re-modelled by `model` from the recorded launches and the same run's ceilings._\n\n") + table(
        ["step", "passes", "within 1.5×", "share", "lowest ratio", "highest ratio"], body)


def step08_stored():
    rs = [r for r in common.rows("tour_*.csv") if r["step"] == "08" and r.get("model_ms")]
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
    src = [x for x in common.rows("tour_*.csv") + common.rows("model_sweep_*.csv") if x["step"] == step]
    # [latency] the same pass with the latency term, where the term has the step's listing
    lat = {_key(dict(r, file=os.path.basename(r["file"]))): r for r in model_rows("model_latency_h200.csv")
           if r["step"] == step and float(r.get("latency_ms") or 0) > 0}
    body = []
    for r in rs:
        ratio = float(r["ratio"])
        where = "tour" if r["file"].startswith("tour") else "sweep"
        w = lat.get(_key(dict(r, file=os.path.basename(r["file"]))))
        body.append([where, r["variant"], r["pass_of"], r["N"], r["d"], "yes" if r["causal"] == "1" else "no",
                     f"{float(r['measured_ms']):.3g} ({float(r['ms_min']):.3g}–{float(r['ms_max']):.3g})",
                     f"{float(r['model_ms']):.3g}", f"{ratio:.2f}", r["bound_by"]] +
                    (([f"{float(w['model_ms']):.3g}", f"{float(w['ratio']):.2f}", w["bound_by"]] if w else ["–", "–", "–"])
                     if lat else []))
    note = (" _With the latency term: the same passes re-modelled with the step's SASS loops ([model.md](model.md), "
            "\"The latency term\"); – where the profile has no listing of the step._" if lat else "")
    return provenance(src) + " _Measured: median of three timed runs (min–max); ratio = measured / model ([model.md](model.md))._" + note + "\n\n" + table(
        ["run", "variant", "pass", "N", "d", "causal", "measured ms", "model ms", "ratio", "bound by"] +
        (["with the latency term: model ms", "ratio", "bound by"] if lat else []), body)


# ------------------------------------------------------------------------------------------------
# [latency] The latency term (docs/model.md, "The latency term"): the model with one warp's path through
# the SASS loop tree, beside the model without it, on the committed runs' launches; and one kernel's path.

LATENCY_HOW = "`model --out plots/data/model_latency_h200.csv --paths plots/data/model_paths_h200.csv` (docs/model.md)"


def _latency_note():
    peaks = common.rows("latencies_*.csv")
    when = f", measured {peaks[0]['date']} on an {peaks[0]['device']}" if peaks else ""
    return (" _Model with the latency term: `model` over the same rows, with the loops of "
            "`plots/data/sass_profile_h200.csv` (`scripts/sass_profile.py` on `cuobjdump -sass` of steps 01–12 built "
            f"for sm_90, tree at 9ad688f; its latencies from `plots/data/latencies_h200.csv`{when}). Without: "
            "`plots/data/model_h200.csv`, the same model before the term. Ratio = measured / model._")


def _key(r):
    return (r["file"], r["step"], r["variant"], r["pass_of"], r["N"], r["d"], r["causal"])


def model_latency():
    """The tour's passes: measured, the model without the latency term and with it, the ratio and the bound.
    Closing line: the passes within 1.5× before and after."""
    new = [r for r in model_rows("model_latency_h200.csv") if r["file"].startswith("plots/data/tour") or r["file"].startswith("tour")]
    old = {_key(dict(r, file="tour")): r for r in model_rows("model_h200.csv") if r["file"].startswith("tour")}
    src = common.rows("tour_*.csv")
    if not new:
        return provenance([], LATENCY_HOW)
    body, before, after = [], 0, 0
    for r in new:
        o = old.get(_key(dict(r, file="tour")))
        ratio = float(r["ratio"])
        inside = 1 / 1.5 <= ratio <= 1.5
        after += inside
        if o:
            before += 1 / 1.5 <= float(o["ratio"]) <= 1.5
        body.append([r["step"], r["variant"], r["pass_of"], f"{float(r['measured_ms']):.3g}",
                     f"{float(o['model_ms']):.3g}" if o else "–", f"{float(o['ratio']):.2f}" if o else "–",
                     f"{float(r['latency_ms']):.3g}" if float(r.get("latency_ms") or 0) > 0 else "–",
                     f"{float(r['model_ms']):.3g}", f"{ratio:.2f}", "yes" if inside else "**no**", r["bound_by"]])
    text = provenance(src) + _latency_note() + "\n\n" + table(
        ["step", "variant", "pass", "measured ms", "model ms (without)", "ratio (without)", "latency term ms",
         "model ms (with)", "ratio (with)", "within 1.5×", "bound by"], body)
    return text + (f"\n\nWithin 1.5× of the measurement: **{before} of {len(body)}** passes without the latency term, "
                   f"**{after} of {len(body)}** with it.")


def model_latency_sweeps():
    """The committed sweeps (rows the term was not developed on) re-modelled with the term: per file and step,
    the passes within 1.5× and within 2×, and the ratios' range."""
    rs = [r for r in model_rows("model_latency_h200.csv") if "sweep" in r["file"]]
    if not rs:
        return provenance([], LATENCY_HOW)
    by = {}
    for r in rs:
        by.setdefault((os.path.basename(r["file"]), r["step"]), []).append(float(r["ratio"]))
    body = []
    for (f, step), xs in sorted(by.items()):
        body.append([f"`{f}`", step, len(xs), sum(1 / 1.5 <= x <= 1.5 for x in xs), sum(0.5 <= x <= 2 for x in xs),
                     f"{min(xs):.2f}", f"{max(xs):.2f}"])
    files = sorted({os.path.basename(r["file"]) for r in rs})
    src = [x for f in files for x in common.rows(f)]
    return provenance(src) + _latency_note() + "\n\n" + table(
        ["file", "step", "passes", "within 1.5×", "within 2×", "lowest ratio", "highest ratio"], body)


def model_path(step="03", variant="-"):
    """One tour kernel's warp path (model_paths_h200.csv): each loop of its tree, how the listing bounds it,
    its trips per entry and executions per warp, its own instructions and chain per trip (the profile), and
    its share of the path's cycles."""
    rs = [r for r in common.rows("model_paths_h200.csv")
          if "tour" in r["file"] and r["step"] == step and r["variant"] == variant and r["pass_of"] == "fwd"]
    if not rs:
        return provenance([], LATENCY_HOW)
    prof = {(r["function"], r["loop"]): r for r in common.rows("sass_profile_h200.csv")}
    r0 = rs[0]
    body = []
    for r in sorted(rs, key=lambda r: int(r["loop"])):
        p = prof.get((r["function"], r["loop"]), {})
        kind = {"once": "once", "imm": "constant", "ntid": "blockDim", "runtime": "the problem"}.get(r["trip_kind"], r["trip_kind"])
        hot = " (hot)" if r["loop"] == r0["hot_loop"] else ""
        body.append([r["loop"] + hot, r["parent"] or "–", kind, f"{float(r['trips_per_entry']):.4g}",
                     f"{float(r['executions']):.4g}", p.get("instructions", "?"), p.get("barrier", "?"),
                     p.get("chain_cycles", "?"), f"{100 * float(r['cycles']) / float(r0['path_cycles']):.1f} %"])
    src = [x for x in common.rows("tour_*.csv") if x["step"] == step]
    head = (provenance(src) + _latency_note() + f" _Kernel `{r0['kernel']}` ({r0['dtype']}, d = {r0['d']}, the tour's "
            f"N = {r0['N']}): `{r0['function']}`. One warp's path: **{float(r0['path_cycles']):.4g} cycles**, "
            f"{float(r0['path_instructions']):.4g} instructions; the hot loop's trips from the ledger's `{r0['marker']}`; "
            f"warps per scheduler: {float(r0['warps_per_scheduler']):g}; the term: {float(r0['latency_ms']):.3g} ms "
            f"({r0['latency_by']})._\n\n")
    return head + table(["loop", "inside", "bound by", "trips per entry", "runs per warp", "instructions (own)",
                         "barriers (own)", "chain cycles per trip", "share of the path"], body)


def model_latencies():
    """The latencies the chains wait out (bench --peaks' ns rows of latencies_*.csv), in ns and in cycles at the
    clock scripts/sass_profile.py converts at (its --clock-mhz default)."""
    rs = [r for r in common.rows("latencies_*.csv") if r["unit"] == "ns"]
    if not rs:
        return provenance([], "bench --peaks")
    src = open(os.path.join(ROOT, "scripts", "sass_profile.py"), encoding="utf-8").read()
    mhz = float(re.search(r'"--clock-mhz", type=float, default=([0-9.]+)', src).group(1))
    waits = {"smem-latency": "LDS, LDSM, shuffles, S2R", "l2-latency": "LDG (a hit in L2)", "hbm-latency": "LDG (a miss)",
             "ex2-latency": "MUFU", "mma-latency": "HMMA", "fma-latency": "the fixed-latency rest, a source register's reuse",
             "barrier-latency": "BAR.SYNC"}
    body = [[f"`{r['peak']}`", waits.get(r["peak"], "–"), f"{float(r['value']):.3g}", f"{float(r['value']) * mhz / 1e3:.0f}"]
            for r in rs if r["peak"] in waits]
    return provenance(rs) + (f" _One warp alone, each instruction waiting on the one before; cycles at {mhz:g} MHz._\n\n") + table(
        ["latency", "what waits on it in the replay", "ns", "cycles"], body)


def _template_args(name):
    """A kernel's template arguments in order, from a mangled (Li128E, Lb1E) or demangled ((int)128, (bool)1)
    name, with its storage type: enough to match Nsight's kernel to the profile's instantiation."""
    ints = re.findall(r"L[ib](\d+)E", name) or re.findall(r"\((?:int|bool)\)(\d+)", name)
    dtype = "bf16" if "bfloat16" in name else "fp16" if "half" in name else ""
    return dtype, tuple(int(x) for x in ints)


def model_latency_counts():
    """Nsight's executed warp instructions by class on the tour's kernels (scripts/ncu_sass.py rows, opcodes
    classed as scripts/sass_profile.py classes them) beside the model's path × warps (model --counts)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("sass_profile", os.path.join(ROOT, "scripts", "sass_profile.py"))
    sp = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sp)
    ncu = [r for r in common.rows("ncu_sass_*_tour.csv") if r["kind"] == "opcode"]
    model = [r for r in common.rows("model_counts_h200.csv") if "tour" in r["file"]]
    if not ncu or not model:
        return provenance([], "scripts/latency_check.sh OUTDIR")
    measured = {}
    for r in ncu:
        step = re.search(r"step(\d\d)", r["label"]).group(1)
        cls = sp.Instr(0, r["name"], 0).klass()
        key = (step, r["kernel"])
        measured.setdefault(key, {}).setdefault(cls, 0)
        measured[key][cls] += int(r["executed"] or 0)
    body = []
    for (step, kname), by in sorted(measured.items()):
        m = next((x for x in model if x["step"] == step and f"step{step}_{x['kernel']}" in kname
                  and _template_args(x["function"]) == _template_args(kname)), None)
        if m is None:
            continue
        for cls in sp.CLASSES:
            want, got = float(m["inst_" + cls]), by.get(cls, 0)
            body.append([step, m["kernel"], cls, f"{want:.4g}", f"{got:.4g}", f"{got / want:.2f}" if want > 0 else "–"])
    return provenance(ncu) + (" _Nsight: executed warp instructions per opcode (`scripts/ncu_sass.py`, one launch of "
                              "each kernel at the tour's shape), summed by the classes of `scripts/sass_profile.py`. "
                              "Model: one warp's path by class × the launch's warps (`model --counts`). Ratio = "
                              "Nsight / model._\n\n") + table(["step", "kernel", "class", "model", "Nsight", "ratio"], body)


# ------------------------------------------------------------------------------------------------
# [latval] The latency term's validation run (docs/model.md, "What the latency term's validation run
# measured"): scripts/latency_check.sh's files, committed under model_latval_* names so that the
# development tables above keep reading the files the prediction was made from.

LATVAL_HOW = "scripts/latency_check.sh OUTDIR"


def _within(x):
    return 1 / 1.5 <= x <= 1.5


def _pct(x):
    """A relative change as a signed percentage with one decimal (no \"-0.0\")."""
    v = round(100 * x, 1)
    return f"{v + 0.0:+.1f} %"


def model_latval():
    """The validation run's tour (model_latval_tour_h200.csv) re-modelled by `model` with the run's own profile
    and ceilings (model_latval_h200.csv), beside the development table's ratio (model_latency_h200.csv's tour
    rows). Closing lines, computed: the passes within 1.5×, those outside, the ratios within 10 % of the
    development table's (the prediction), and the check that `model` gives the times the run computed."""
    rs = model_rows("model_latval_h200.csv")
    src = common.rows("model_latval_tour_h200.csv")
    if not rs or not src:
        return provenance([], LATVAL_HOW)
    dev = {(r["step"], r["variant"], r["pass_of"]): r for r in model_rows("model_latency_h200.csv")
           if os.path.basename(r["file"]).startswith("tour")}
    tour = {(t["step"], t["variant"]): t for t in src}
    body, inside, outside, changes, worst_in_run = [], 0, [], [], 0.0
    for r in rs:
        key = (r["step"], r["variant"], r["pass_of"])
        ratio = float(r["ratio"])
        ok = _within(ratio)
        inside += ok
        if not ok:
            outside.append(f"{r['step']} `{r['variant']}` {r['pass_of']} {ratio:.3f}")
        t = tour.get((r["step"], r["variant"]))
        if t:  # the time the run itself computed before the timing, against `model`'s
            run_ms = t.get("model_ms" if r["pass_of"] == "fwd" else "bwd_model_ms")
            if run_ms:
                worst_in_run = max(worst_in_run, abs(float(run_ms) / float(r["model_ms"]) - 1))
        d = dev.get(key)
        if d:
            change = ratio / float(d["ratio"]) - 1
            changes.append((abs(change), change, key, _within(float(d["ratio"])), ok))
        lat = float(r.get("latency_ms") or 0)
        body.append([r["step"], r["variant"], r["pass_of"],
                     f"{float(r['measured_ms']):.3g} ({float(r['ms_min']):.3g}–{float(r['ms_max']):.3g})",
                     f"{lat:.3g}" if lat > 0 else "–", f"{float(r['model_ms']):.3g}", f"{ratio:.2f}",
                     "yes" if ok else "**no**", f"{float(d['ratio']):.2f}" if d else "–",
                     _pct(change) if d else "–", r["bound_by"]])
    n_dev = len(changes)
    held = sum(a <= 0.10 for a, *_ in changes)
    big = max(changes) if changes else None
    dev_in = sum(x[3] for x in changes)
    new_in = sum(x[4] for x in changes)
    text = provenance(src, LATVAL_HOW) + (
        " _Measured: median of three timed runs (min–max). Model: `model` over the run's rows with the run's own "
        "profile (`model_latval_sass_profile_h200.csv`) and ceilings (`model_latval_peaks_h200.csv`); – where the "
        "profile has no listing of the step. Development: the ratio of the table above (tour at 097d19c, the "
        "committed profile); change = this ratio over that one − 1. Ratio = measured / model._\n\n") + table(
        ["step", "variant", "pass", "measured ms", "latency term ms", "model ms", "ratio", "within 1.5×",
         "development ratio", "change", "bound by"], body)
    lines = [f"Within 1.5× of the measurement: **{inside} of {len(body)}** passes"
             + (f"; of the {n_dev} the development table has, **{new_in} of {n_dev}** (the development table: {dev_in} of {n_dev})"
                if n_dev else "") + "."]
    if outside:
        lines.append("Outside: " + "; ".join(outside) + ".")
    if big:
        step, variant, pass_of = big[2]
        lines.append(f"Ratio within 10 % of the development table's (the prediction): **{held} of {n_dev}** passes; "
                     f"the largest change {_pct(big[1])} (step {step} `{variant}` {pass_of}).")
    lines.append(f"`model` gives the times the run computed before its timing (the tour's `model_ms` columns): largest "
                 f"relative difference {worst_in_run:.2g}.")
    return text + "\n\n" + "\n".join(lines)


def model_latval_inputs():
    """What the validation run's term was computed from, beside what the development table's was: the latencies
    (model_latval_latencies_h200.csv against latencies_h200.csv) and the listings (the two sass_profile files:
    the same loops with the same instructions, or not; the chains per trip, which follow the latencies)."""
    new, old = common.rows("model_latval_latencies_h200.csv"), common.rows("latencies_h200.csv")
    if not new or not old:
        return provenance([], LATVAL_HOW)
    waits = ("hbm-latency", "l2-latency", "barrier-latency", "smem-latency", "mma-latency", "ex2-latency", "fma-latency")
    o = {r["peak"]: r for r in old if r["unit"] == "ns"}
    n = {r["peak"]: r for r in new if r["unit"] == "ns"}
    body = [[f"`{p}`", f"{float(o[p]['value']):.3g}", f"{float(n[p]['value']):.3g}",
             _pct(float(n[p]['value']) / float(o[p]['value']) - 1)] for p in waits if p in o and p in n]
    pa, pb = common.rows("sass_profile_h200.csv"), common.rows("model_latval_sass_profile_h200.csv")
    chains = {"chain_cycles", "chain_cycles_hbm"}
    ka = {(r["step"], r["function"], r["loop"]): r for r in pa}
    kb = {(r["step"], r["function"], r["loop"]): r for r in pb}
    cols = [c for c in (pa[0] if pa else {}) if c not in chains]
    same_keys = set(ka) == set(kb)
    differ = sum(any(ka[k][c] != kb[k].get(c) for c in cols) for k in ka if k in kb)
    kernels = len({(st, f) for st, f, _ in kb})

    def span(col):
        xs = [float(kb[k][col]) / float(ka[k][col]) for k in ka if k in kb and float(ka[k][col]) > 0]
        return f"{min(xs):.3f}–{max(xs):.3f}" if xs else "–"
    text = provenance(old + new, "bench --peaks") + (
        " _Latencies: `bench --peaks`, one warp alone (the committed file, which the development table's profile "
        "used, and the validation run's). Listings: `scripts/sass_profile.py` over `cuobjdump -sass` of steps 01–12, "
        "the committed profile against the run's._\n\n") + table(
        ["latency", "committed ns", "validation run ns", "change"], body)
    return text + (f"\n\nThe listings: {len(kb)} loops in {kernels} kernels in the run's profile, {len(ka)} in the "
                   f"committed one, {'the same' if same_keys else '**not** the same'} (step, kernel, loop) triples; loops whose "
                   f"registers, trips or instructions by class differ: **{differ}**. One trip's chain, the run's over the "
                   f"committed: {span('chain_cycles')} (a load from L2), {span('chain_cycles_hbm')} (from HBM).")


# [queue] Latency under load (docs/model.md, "Latency under load"): the model with the queueing bound on its
# global waits, over the validation run's recorded inputs — a development result on times already seen.

REFINED_HOW = ("FA_SASS_PROFILE=plots/data/model_latval_sass_profile_h200.csv model --peaks "
               "plots/data/model_latval_peaks_h200.csv --runs plots/data/model_latval_tour_h200.csv "
               "--out plots/data/model_refined_h200.csv --paths plots/data/model_refined_paths_h200.csv")


def model_refined():
    """The validation tour re-modelled with the queueing bound (model_refined_h200.csv) beside the model the run
    computed (model_latval_h200.csv): each pass with a latency term, its term both ways and the two ratios, and
    the warps resident at once and the cycles their queue adds to one warp's path (model_refined_paths_h200.csv).
    Closing lines, computed over every pass: those within 1.5× both ways, those outside, and the passes whose
    model moved without a latency term (the tree's other changes since the run, not the refinement)."""
    rs = model_rows("model_refined_h200.csv")
    src = common.rows("model_latval_tour_h200.csv")
    if not rs or not src:
        return provenance([], REFINED_HOW)
    old = {(r["step"], r["variant"], r["pass_of"]): r for r in model_rows("model_latval_h200.csv")}
    queue, path = {}, {}
    for p in common.rows("model_refined_paths_h200.csv"):
        key = (p["step"], p["variant"], p["pass_of"])
        queue[key] = queue.get(key, 0.0) + float(p.get("queue_cycles") or 0)
        path.setdefault(key, {})[p["kernel"]] = float(p["path_cycles"])
    body, inside, inside_old, outside, other = [], 0, 0, [], []
    for r in rs:
        key = (r["step"], r["variant"], r["pass_of"])
        o = old.get(key)
        ratio = float(r["ratio"])
        ok = _within(ratio)
        inside += ok
        inside_old += bool(o) and _within(float(o["ratio"]))
        if not ok:
            outside.append(f"{r['step']} `{r['variant']}` {r['pass_of']} {ratio:.3f}")
        lat, lat_old = float(r.get("latency_ms") or 0), float(o.get("latency_ms") or 0) if o else 0.0
        if lat <= 0:
            if o and abs(float(o["model_ms"]) / float(r["model_ms"]) - 1) > 1e-9:
                other.append(f"{r['step']} `{r['variant']}` {r['pass_of']}")
            continue
        q, total = queue.get(key, 0.0), sum(path.get(key, {}).values())
        body.append([r["step"], r["variant"], r["pass_of"], f"{float(r['measured_ms']):.3g}",
                     f"{lat_old:.3g}" if o else "–", f"{lat:.3g}", f"{100 * q / total:.1f} %" if total > 0 else "–",
                     f"{float(o['ratio']):.3f}" if o else "–", f"{ratio:.3f}", "yes" if ok else "**no**", r["bound_by"]])
    text = provenance(src, LATVAL_HOW) + (
        " _The validation run's tour (fa39398) re-modelled with the queueing bound on each global wait: `model` with "
        "the run's own profile and ceilings (`model_refined_h200.csv`), beside the model as the run computed it "
        "(`model_latval_h200.csv`). The passes with a latency term (steps 01–12); queue share: the cycles the "
        "queue adds to the kernels' warp paths over those paths (`model_refined_paths_h200.csv`). A development "
        "result: these times were known when the bound was written. Ratio = measured / model._\n\n") + table(
        ["step", "variant", "pass", "measured ms", "latency term ms (idle)", "latency term ms (queued)",
         "queue share of the path", "ratio (idle)", "ratio (queued)", "within 1.5×", "bound by"], body)
    lines = [f"Within 1.5× of the measurement, every pass of the tour: **{inside} of {len(rs)}** with the queueing "
             f"bound (the model as the run computed it: {inside_old} of {len(rs)})."]
    if outside:
        lines.append("Outside: " + "; ".join(outside) + ".")
    if other:
        lines.append("Passes without a latency term whose model differs from the run's (the tree's other changes "
                     "since fa39398, not the bound): " + "; ".join(other) + ".")
    return text + "\n\n" + "\n".join(lines)


H100_TOUR = "logs/0d32704/tour_h100_80gb_hbm3.csv"


def model_h100_tour():
    """The latency tour an H100 ran at 0d32704 (`FA_LAT_SWEEP=0 FA_LAT_NCU=0 scripts/latency_check.sh`, the model
    computed in the run with that GPU's own latencies, listings and ceilings), each pass beside the H200's ratio
    with the queueing bound (model_refined_h200.csv), which the prediction for the next validation run names. Not
    that validation (the prediction names an H200): a second GPU read against the same expectations. Closing lines:
    passes within 1.5× over the prediction's 44 and outside it, and the passes of steps 01–12 within 10 % of the
    H200's queued ratio."""
    rs = [r for r in common.rows(H100_TOUR) if r.get("model_ms")]
    h200 = {(r["step"], r["variant"], r["pass_of"]): float(r["ratio"]) for r in model_rows("model_refined_h200.csv")}
    if not rs or not h200:
        return provenance([], LATVAL_HOW)
    body, named, inside, outside, extra, near, early = [], 0, 0, [], [], 0, 0
    for r in rs:
        for pre, name in (("", "fwd"), ("bwd_", "bwd")):
            ms, model = r.get(pre + "ms"), r.get(pre + "model_ms")
            if not (ms and model):
                continue
            ratio = float(ms) / float(model)
            key = (r["step"], r["variant"], name)
            ref = h200.get(key)
            ok = _within(ratio)
            if ref is None:
                extra.append(f"{r['step']} `{r['variant']}` {name} {ratio:.3f} ({'within' if ok else 'outside'} 1.5×)")
            else:
                named += 1
                inside += ok
                if not ok:
                    outside.append(f"{r['step']} `{r['variant']}` {name} {ratio:.3f}")
                if int(r["step"]) <= 12:
                    early += 1
                    near += abs(ratio / ref - 1) <= 0.10
            body.append([r["step"], r["variant"], name, f"{float(ms):.3g}", f"{float(model):.3g}", f"{ratio:.3f}",
                         f"{ref:.3f}" if ref is not None else "–", _pct(ratio / ref - 1) if ref is not None else "–",
                         "yes" if ok else "**no**", r.get(pre + "bound_by") or "–"])
    text = provenance(rs, LATVAL_HOW) + (
        " _The H100's tour at 0d32704, the model as that run computed it (its own `bench --peaks` latencies and "
        "ceilings, its own `cuobjdump` listings through `scripts/sass_profile.py`, the queueing bound in the tree), "
        "beside the H200's ratio with the queueing bound (`model_refined_h200.csv`, fa39398's tour). Ratio = "
        "measured / model; change = the H100's ratio over the H200's._\n\n") + table(
        ["step", "variant", "pass", "H100 measured ms", "H100 model ms", "H100 ratio", "H200 ratio (queued)", "change",
         "within 1.5× (H100)", "bound by (H100)"], body)
    lines = [f"Within 1.5× on the H100, over the {named} passes the prediction names: **{inside} of {named}**."]
    if outside:
        lines.append("Outside: " + "; ".join(outside) + ".")
    if extra:
        lines.append("Passes the prediction does not name: " + "; ".join(extra) + ".")
    lines.append(f"Passes of steps 01–12 within 10 % of the H200's queued ratio: **{near} of {early}**.")
    return text + "\n\n" + "\n".join(lines)


# [latval-queued] The validation of the queueing bound (docs/model.md, "The prediction for the next validation
# run"): an H200's tour with the model computed in the run, its files kept in the run's log folder.
H200_QUEUED_TOUR = "logs/0ff8dbe/tour_h200.csv"
# The six passes the prediction expects outside 1.5×, and step 09, "on the line" (held inside QUEUED_LINE).
QUEUED_OUTSIDE = {("01", "gemm=wmma", "fwd"), ("02", "-", "fwd"), ("04", "grid=bh", "fwd"), ("10", "-", "fwd"),
                  ("11", "-", "fwd"), ("21", "v=kernel", "fwd")}
QUEUED_LINE = ("09", "-", "fwd"), (1.45, 1.55)


def model_h200_queued():
    """The next validation run the queueing bound's prediction names: an H200's latency tour (latency_check.sh
    without the sweep and Nsight, the model computed in the run with the bound), each pass beside the H200's ratio
    with the idle latency term (model_latval_h200.csv) and with the bound (model_refined_h200.csv). Closing lines,
    the prediction's parts: within 1.5× over the 44 passes it names (the six expected outside, step 09 on the line);
    each pass of steps 01–12 within 10 % of its queued ratio; the two refuters (step 01 `gemm=wmma` more than 10 %
    from its queued ratio; a pass the bound moved, its ratio now above its idle ratio)."""
    rs = [r for r in common.rows(H200_QUEUED_TOUR) if r.get("model_ms")]
    queued = {(r["step"], r["variant"], r["pass_of"]): float(r["ratio"]) for r in model_rows("model_refined_h200.csv")}
    idle = {(r["step"], r["variant"], r["pass_of"]): float(r["ratio"]) for r in model_rows("model_latval_h200.csv")}
    if not rs or not queued:
        return provenance([], LATVAL_HOW)
    moved = {}
    for p in common.rows("model_refined_paths_h200.csv"):
        key = (p["step"], p["variant"], p["pass_of"])
        moved[key] = moved.get(key, False) or float(p.get("queue_cycles") or 0) > 0
    body, got = [], {}
    for r in rs:
        for pre, name in (("", "fwd"), ("bwd_", "bwd")):
            ms, model = r.get(pre + "ms"), r.get(pre + "model_ms")
            if not (ms and model):
                continue
            key = (r["step"], r["variant"], name)
            ratio = got[key] = float(ms) / float(model)
            q, i = queued.get(key), idle.get(key)
            body.append([r["step"], r["variant"], name, f"{float(ms):.3g}", f"{float(model):.3g}", f"{ratio:.3f}",
                         f"{i:.3f}" if i is not None else "–", f"{q:.3f}" if q is not None else "–",
                         _pct(ratio / q - 1) if q is not None else "–", "yes" if _within(ratio) else "**no**",
                         r.get(pre + "bound_by") or "–"])
    named = [k for k in got if k in queued]
    outside = {k for k in named if not _within(got[k])}
    line_key, (lo, hi) = QUEUED_LINE
    on_line = got.get(line_key)
    held = (outside - {line_key}) == QUEUED_OUTSIDE and on_line is not None and lo <= on_line <= hi
    name = lambda k: f"{k[0]} `{k[1]}` {k[2]}"  # noqa: E731
    lines = [f"Within 1.5×, over the {len(named)} passes the prediction names: **{len(named) - len(outside)} of "
             f"{len(named)}** (predicted {len(named) - len(QUEUED_OUTSIDE)}, with the six it names outside and step 09 "
             f"in {lo}–{hi}: **{'held' if held else 'missed'}**)."]
    if outside:
        lines.append("Outside: " + "; ".join(f"{name(k)} {got[k]:.3f}" for k in sorted(outside)) + ".")
    surprises = sorted((outside ^ QUEUED_OUTSIDE) - {line_key})
    if surprises:
        lines.append("Not as predicted: " + "; ".join(
            f"{name(k)} ({'outside' if k in outside else 'inside'}, predicted {'inside' if k in outside else 'outside'})"
            for k in surprises) + ".")
    lines.append(f"Step 09 on the line: {on_line:.3f} (predicted {lo}–{hi}: **{'held' if on_line is not None and lo <= on_line <= hi else 'missed'}**)."
                 if on_line is not None else "Step 09: not in the tour.")
    early = [k for k in named if int(k[0]) <= 12]
    near = [k for k in early if abs(got[k] / queued[k] - 1) <= 0.10]
    lines.append(f"Passes of steps 01–12 within 10 % of their queued ratio: **{len(near)} of {len(early)}** (predicted "
                 f"all: **{'held' if len(near) == len(early) else 'missed'}**)"
                 + ("; outside: " + "; ".join(f"{name(k)} {_pct(got[k] / queued[k] - 1)}" for k in early if k not in near)
                    if len(near) < len(early) else "") + ".")
    wmma = ("01", "gemm=wmma", "fwd")
    if wmma in got and wmma in queued:
        off = got[wmma] / queued[wmma] - 1
        lines.append(f"Refuter 1, step 01 `gemm=wmma` more than 10 % from its queued ratio: {_pct(off)}: "
                     f"**{'fired' if abs(off) > 0.10 else 'did not fire'}**.")
    bound = [k for k in named if moved.get(k) and k in idle]
    wrong = [k for k in bound if got[k] > idle[k]]
    lines.append(f"Refuter 2, a pass the bound moved ({len(bound)}) with its ratio now above its idle ratio: "
                 f"**{'fired' if wrong else 'did not fire'}**" + (" (" + "; ".join(name(k) for k in wrong) + ")" if wrong else "") + ".")
    still = [got[k] / idle[k] - 1 for k in named if int(k[0]) <= 12 and k in idle and not moved.get(k)]
    if wrong and still:
        lines.append(f"For scale, the passes of steps 01–12 the bound did not move changed by {_pct(min(still))} to "
                     f"{_pct(max(still))} between the two runs; the passes above moved " + "; ".join(
                         f"{name(k)} {_pct(got[k] / idle[k] - 1)} (the bound: {_pct(queued[k] / idle[k] - 1)})" for k in wrong) + ".")
    extra = [k for k in got if k not in queued]
    if extra:
        lines.append("Passes the prediction does not name (outside its count): " + "; ".join(
            f"{name(k)} {got[k]:.3f}" for k in extra) + ".")
    text = provenance(rs, LATVAL_HOW) + (
        " _An H200's tour, the model as the run computed it (its own `bench --peaks` latencies and ceilings, its own "
        "`cuobjdump` listings through `scripts/sass_profile.py`, the queueing bound in the tree), beside the earlier "
        "H200 tour's ratios (fa39398) with the idle latency term (`model_latval_h200.csv`) and with the bound "
        "(`model_refined_h200.csv`). Ratio = measured / model; change = this run's ratio over the queued one._\n\n") + table(
        ["step", "variant", "pass", "measured ms", "model ms", "ratio", "ratio (idle, fa39398)", "ratio (queued, fa39398)",
         "change", "within 1.5×", "bound by"], body)
    return text + "\n\n" + " ".join(lines)


STEP02_HOW = ("FA_SASS_PROFILE=plots/data/model_step02_sass_profile_h200.csv model --peaks plots/data/peaks_h200.csv "
              "--runs plots/data/tour_h200.csv,plots/data/model_sweep_h200.csv,plots/data/model_dev_sweep_h200.csv "
              "--out plots/data/model_step02_h200.csv --paths plots/data/model_step02_paths_h200.csv")


def _hot_trips(paths_name):
    """(file, step, variant, pass, B, H, N, d, causal) -> the hot loop's runs per warp of step 02's kernel."""
    out = {}
    for p in common.rows(paths_name):
        if p["step"] == "02" and p["hot_loop"] not in ("", "-1") and p["loop"] == p["hot_loop"]:
            out[(os.path.basename(p["file"]), p["pass_of"], p["B"], p["H"], p["N"], p["d"], p["causal"])] = (
                float(p["executions"]), p["marker"])
    return out


def model_step02_loop():
    """Step 02's passes in the committed runs (the validation tour and sweep of 097d19c, the development sweep of
    1588b44), the model before (model_step02_before_h200.csv: the tree before the change, 0ff8dbe's profile) and
    after (model_step02_h200.csv: the fallbacks' returns closing no loop, the marker's order, the hot-loop rule;
    the d = 64 listing re-read from the committed fixture, d = 128's as 0ff8dbe's profile has it), with the hot
    loop's runs per warp and the marker that set them (the paths files). Closing lines: within 1.5× before and
    after, by d; and the passes of other steps whose model moved."""
    before = {(os.path.basename(r["file"]), r["step"], r["variant"], r["pass_of"], r["B"], r["H"], r["N"], r["d"],
               r["causal"]): r for r in model_rows("model_step02_before_h200.csv")}
    after = model_rows("model_step02_h200.csv")
    if not after or not before:
        return provenance([], STEP02_HOW)
    trips_b, trips_a = _hot_trips("model_step02_before_paths_h200.csv"), _hot_trips("model_step02_paths_h200.csv")
    srcs = [os.path.basename(f) for f in sorted({r["file"] for r in after})]
    src = [r for f in srcs for r in common.rows(f)]
    body, counts, moved = [], {}, []
    for r in after:
        key = (os.path.basename(r["file"]), r["step"], r["variant"], r["pass_of"], r["B"], r["H"], r["N"], r["d"],
               r["causal"])
        b = before.get(key)
        if b is None:
            continue
        if r["step"] != "02":
            if abs(float(r["model_ms"]) / float(b["model_ms"]) - 1) > 1e-9:
                moved.append(f"{r['step']} `{r['variant']}` {r['pass_of']} {key[0]} "
                             f"({_pct(float(r['model_ms']) / float(b['model_ms']) - 1)} in the model, ratio "
                             f"{float(b['ratio']):.3f} → {float(r['ratio']):.3f})")
            continue
        tk = (key[0], r["pass_of"]) + key[4:]
        tb, ta = trips_b.get(tk), trips_a.get(tk)
        rb, ra = float(b["ratio"]), float(r["ratio"])
        c = counts.setdefault(r["d"], [0, 0, 0])
        c[0] += 1
        c[1] += _within(rb)
        c[2] += _within(ra)
        shape = f"B{r['B']} H{r['H']} N{r['N']}" + (" causal" if r["causal"] == "1" else "")
        body.append([key[0].replace("_h200.csv", ""), shape, r["d"], f"{float(r['measured_ms']):.4g}",
                     f"{float(b['model_ms']):.4g}", f"{rb:.2f}", b["bound_by"],
                     f"{tb[0]:.0f} ({tb[1]})" if tb else "–", f"{float(r['model_ms']):.4g}", f"{ra:.2f}",
                     "yes" if _within(ra) else "**no**", r["bound_by"], f"{ta[0]:.0f} ({ta[1]})" if ta else "–"])
    body.sort(key=lambda x: (int(x[2]), x[0], x[1]))
    text = provenance(src) + (
        " _Step 02's passes in the committed runs, re-modelled (no GPU): before, the tree before this change with "
        "0ff8dbe's profile (`model_step02_before_h200.csv`); after, with the divergent fallbacks' returns closing no "
        "loop, the exponentials last among the markers and the hot-loop rule over the loops' work alone "
        "(`model_step02_h200.csv`), the d = 64 listing re-read from the committed fixture and d = 128's as 0ff8dbe's "
        "profile has it (`model_step02_sass_profile_h200.csv`). Hot loop: its runs per warp and the class that "
        "set them (the paths files). A development result: these times were known. Ratio = measured / model._\n\n"
    ) + table(["run", "shape", "d", "measured ms", "model ms (before)", "ratio (before)", "bound by (before)",
               "hot loop (before)", "model ms (after)", "ratio (after)", "within 1.5×", "bound by (after)",
               "hot loop (after)"], body)
    lines = [f"Within 1.5×, d = {d}: **{c[2]} of {c[0]}** after, {c[1]} of {c[0]} before."
             for d, c in sorted(counts.items(), key=lambda x: int(x[0]))]
    lines.append("Passes of other steps whose model moved: " + ("; ".join(moved) if moved else "none") + ".")
    return text + "\n\n" + "\n".join(lines)
