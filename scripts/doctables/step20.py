"""Step 20's tables (docs/20_persistent.md): the units the exponentials can run on, the target run beside
step 16 and the peers, --exp2's three ways, the ablations."""
from . import common
from .common import geomean, ktf, kms, point, provenance, table
from .peers import FWD_TARGET_POINTS, fwd_rows, fwd_rows_on, peer_cells, peers_note
from .steps import ablation

TARGET_HOW = "scripts/peer_tables.sh OUTDIR fwd20 (docs/20_persistent.md, 'Measured')"
# The ledger's operations per entry of S besides its exponential (common/blueprint/wgmma_forward.cpp: 5 per
# entry, the exponential one of them): the scale, the max, the sum, the conversion of P.
OTHER_OPS = 4
POLY_OPS = 9  # kPolyOps when this prediction was written (10 since [exp2-noconv] split the floor in two adds)


def step20_units():
    """Per head dimension, from the measured ceilings (peaks_<gpu>.csv, bench --peaks): the time of the two
    products per exponential (4d FLOPs at the wgmma rate), of one exponential on MUFU (the ex2 rate), and of
    the FMA pipe's other work per entry; their ratio; and the share φ of exponentials on the FMA units
    (POLY_OPS each) that loads both pipes equally: (1 − φ)/E = (OTHER_OPS + POLY_OPS·φ)/F."""
    rs = {r["peak"]: r for r in common.rows("peaks_*.csv")}
    need = ("wgmma-f16", "ex2", "fp32-fma")
    if not all(k in rs for k in need):
        return provenance([], "build/bench --peaks (docs/profiling.md)")
    W, E, F = float(rs["wgmma-f16"]["value"]), float(rs["ex2"]["value"]), float(rs["fp32-fma"]["value"]) / 2
    body = []
    for d in (64, 128, 256):
        t_mma, t_exp = 4 * d / W, 1 / E
        t_fma = OTHER_OPS / F
        phi = (F - OTHER_OPS * E) / (F + POLY_OPS * E)
        body.append([d, 4 * d, f"{t_mma * 1e12:.3f}", f"{t_exp * 1e12:.3f}", f"{t_fma * 1e12:.3f}",
                     f"{t_exp / t_mma:.2f}", f"{phi:.2f}"])
    used = [rs[k] for k in need]
    return (provenance(used, "build/bench --peaks") + " _Per SM it is the same ratio: every rate is the whole GPU's._\n\n"
            + table(["d", "FLOPs per exponential (4d)", "products ps per exponential", "MUFU ps per exponential",
                     f"FMA pipe ps per entry (other {OTHER_OPS} ops)", "exponentials / products",
                     "share φ on the FMA units that balances the pipes"], body)
            + f"\n\nThe rates: `wgmma-f16` {W / 1e12:.0f} TFLOP/s, `ex2` {E / 1e12:.2f} T/s, `fp32-fma` {2 * F / 1e12:.1f} "
              "TFLOP/s (two FLOPs an FMA); the polynomial costs "
              f"{POLY_OPS} FMA-pipe operations (`kPolyOps`), an entry {OTHER_OPS} besides its exponential.")


def _variant(r, default=("exp2=mixed",)):
    """A step 20 row's variant without the --exp2 named in default ("-" for the plain step). bench writes every
    flag into a row, so a row says which --exp2 it ran whatever the default was: mixed until 2026-12-06, mufu
    since. step20-target reads mixed's rows (the run of the old default, which its prose reads); the ablation
    table drops either, since an ablation runs with the default of its commit."""
    parts = [x for x in r["variant"].split(";") if x not in default + ("-",)]
    return ";".join(parts) or "-"


def step20_target():
    """Step 20 beside step 16 and PyTorch's flash and cuDNN backends of the same run (the fwd phase of
    peer_tables.sh's fwd20 phase: clock_*_fwd20.csv, peers_*_clock_fwd20.csv) over the target matrix and d = 256: TFLOP/s and ratios by kernel time. Closing lines:
    the goals of docs/20 (step 20 / cuDNN geometric mean ≥ 1.1, no point below 0.9; ≥ 740 TFLOP/s in bf16 at
    d = 128, N = 16k, no mask) and step 20 / step 16."""
    return _target("-")


def _target(variant, lines_for=None, device=None):
    """step20-target's table over step 20's rows of one variant ("-": exp2=mixed, the default until 2026-12-06; "exp2=mufu": the
    rows a run with FA_FWD20_SET=exp2=mufu wrote beside them); lines_for(by, vs16, vsc) adds closing lines."""
    ours, by, peers = fwd_rows("fwd20")
    mine = [r for r in ours if r["step"] == "20" and _variant(r) == variant and device in (None, r["device"])]
    if mine:  # the newest such run alone: its GPU and commit (the phase ran on an H200, then on an H100)
        newest = max(mine, key=lambda r: r["date"])
        ours, by, peers = fwd_rows_on("fwd20", newest["device"], newest["commit"])
        mine = [r for r in ours if r["step"] == "20" and _variant(r) == variant]
    by = {k: r for k, r in by.items() if k[0] != "20"}
    by.update({("20",) + point(r): r for r in mine})
    if not mine:
        return provenance([], TARGET_HOW + (f" with FA_FWD20_SET={variant}" if variant != "-" else ""))
    points = list(FWD_TARGET_POINTS) + [(dt, 256, c, n) for dt in sorted({k[0] for k in FWD_TARGET_POINTS})
                                        for c in sorted({k[2] for k in FWD_TARGET_POINTS})
                                        for n in sorted({k[3] for k in FWD_TARGET_POINTS})]
    body, vs16, vsc, vsf, used, missing = [], [], [], [], [], []
    for key in points:
        dt, d, c, n = key
        r, r16 = by.get(("20",) + key), by.get(("16",) + key)
        if not r:
            missing.append(key)
            body.append([dt, d, "yes" if c else "no", n, "not measured"] + ["–"] * 5)
            continue
        row = [dt, d, "yes" if c else "no", n, f"{ktf(r):.1f}" + ("" if r["pass"] == "1" else " (FAIL)")]
        if r16 and kms(r16):
            x = kms(r16) / kms(r)
            vs16.append((x, key))
            row.append(f"{x:.3f}")
        else:
            row.append("–")
        for peer, acc in ((peers.get(("flash",) + key), vsf), (peers.get(("cudnn",) + key), vsc)):
            row += peer_cells(peer, r, acc, key, used, "fwd")
        body.append(row)
    head = provenance(mine, TARGET_HOW) + (peers_note(used, mine) if used else "")
    if variant != "-":
        head += f" _Step 20 at `--{variant.replace('=', ' ')}`._"
    head += " _TFLOP/s: 4·B·H·N²·d, halved with the mask, on both sides._"
    t = table(["dtype", "d", "causal", "N", "step 20 TFLOP/s", "step 20 / step 16", "flash (FA2) TFLOP/s",
               "step 20 / flash", "cuDNN TFLOP/s", "step 20 / cuDNN"], body)
    name = lambda k: f"{k[0]} d = {k[1]} {'causal' if k[2] else 'no mask'} N = {k[3]}"  # noqa: E731
    lines = []
    if vsc:
        xs = [x for x, _ in vsc]
        low = sorted((x, k) for x, k in vsc if x < 0.9)
        lines.append(f"Over the {len(xs)} points: step 20 / cuDNN geometric mean **{geomean(xs):.3f}** (goal ≥ 1.1), "
                     f"minimum {min(xs):.3f}; points below 0.9 (goal: none): **{len(low)}**"
                     + (" — " + "; ".join(f"{name(k)}: {x:.3f}" for x, k in low) + "." if low else "."))
    if vs16:
        xs = [x for x, _ in vs16]
        lines.append(f"Step 20 / step 16: geometric mean **{geomean(xs):.3f}**, range {min(xs):.3f}–{max(xs):.3f}.")
    head_pt = by.get(("20", "bf16", 128, 0, 16384))
    if head_pt:
        lines.append(f"bf16, d = 128, N = 16384, no mask: **{ktf(head_pt):.1f}** TFLOP/s (goal ≥ 740).")
    if lines_for:
        lines += lines_for(by, vs16, vsc)
    if missing:
        lines.append(f"**Not measured: {len(missing)} of the {len(points)} points.**")
    fails = sum(r["pass"] != "1" for r in mine)
    lines.append(f"{fails} row(s) FAILED the check." if fails else "Every step 20 row passed its check against the reference.")
    return head + "\n\n" + t + "\n\n" + " ".join(lines)


def step20_exp2():
    """--exp2's three ways at the same points (exp2_<gpu>_step20.csv: bench --steps 20 --variants all), by
    kernel time: each one's time over mixed's (above 1: mixed is faster)."""
    rs = [r for r in common.rows("exp2_*_step20.csv") if r["step"] == "20" and r.get("kernel_ms")]
    if not rs:
        return provenance([], "scripts/step20_target.sh OUTDIR (docs/20_persistent.md, '2^x')")
    by = {(r["dtype"], int(r["d"]), int(r["causal"]), int(r["N"]), r["variant"].split(";")[0]): r for r in rs}
    keys = sorted({k[:4] for k in by}, key=lambda k: (k[0], -k[1], k[2], k[3]))
    body, ratios = [], {"mufu": [], "poly": []}
    for k in keys:
        mixed = by.get(k + ("exp2=mixed",))
        if not mixed:
            continue
        row = [k[0], k[1], "yes" if k[2] else "no", k[3], f"{kms(mixed):.3f}"]
        for v in ("mufu", "poly"):
            r = by.get(k + (f"exp2={v}",))
            if r and r["pass"] == "1":
                ratios[v].append(kms(r) / kms(mixed))
                row.append(f"{kms(r) / kms(mixed):.2f}")
            else:
                row.append("FAIL" if r else "–")
        body.append(row)
    summary = "; ".join(f"`{v}` / `mixed` geometric mean **{geomean(x):.2f}** ({min(x):.2f}–{max(x):.2f})"
                        for v, x in ratios.items() if x)
    return (provenance(rs) + "\n\n" + table(["dtype", "d", "causal", "N", "mixed ms (kernel)", "mufu / mixed",
                                             "poly / mixed"], body) + "\n\n" + summary + ".")


EXP2_BEFORE = "logs/fa39398/exp2_*_step20.csv"  # the cubic with floorf and two conversions (an H200, fa39398)
EXP2_AFTER = "exp2_*_step20.csv"  # the cubic after [exp2-noconv] (step20_target.sh's current file)


def step20_exp2_noconv():
    """[exp2-noconv]'s prediction (docs/20, the end of "Measured"): at d = 64, `mufu` / `mixed` at or above 1.00,
    and `poly` / `mufu` below its value in the run before. The two runs are on different GPUs, so the table
    compares ratios within each run; the `mufu` kernel, which the change does not touch, says how far the two
    runs' GPUs differ (its time after over before). Closing lines: the prediction point by point, its
    falsifier (`mufu` / `mixed` at 0.9 or below at d = 64), and the cubic's price per exponential it takes
    ((`mixed` − `mufu`) kernel time over the B·H·N²/4 exponentials `mixed` gives it, no mask)."""
    runs = {label: [r for r in common.rows(pat) if r["step"] == "20" and r.get("kernel_ms") and r["dtype"] == "bf16"]
            for label, pat in (("before", EXP2_BEFORE), ("after", EXP2_AFTER))}
    if not all(runs.values()):
        return provenance([], "scripts/step20_target.sh OUTDIR (docs/20_persistent.md, '2^x')")
    ms = {label: {(int(r["d"]), int(r["causal"]), int(r["N"]), r["variant"].split(";")[0].replace("exp2=", "")): r
                  for r in rs if r["pass"] == "1"} for label, rs in runs.items()}
    keys = sorted({k[:3] for k in ms["after"]} & {k[:3] for k in ms["before"]}, key=lambda k: (-k[0], k[1], k[2]))
    body, d64, price, control = [], {"before": {"mm": [], "pm": []}, "after": {"mm": [], "pm": []}}, {}, []
    every = {(label, v): [] for label in ("before", "after") for v in ("mufu", "poly")}  # over mixed, every point
    for k in keys:
        t = {(label, v): kms(ms[label][k + (v,)]) for label in ms for v in ("mufu", "mixed", "poly")
             if k + (v,) in ms[label]}
        if len(t) < 6:
            continue
        row = [k[0], "yes" if k[1] else "no", k[2]]
        for label in ("before", "after"):
            mm, pm = t[(label, "mufu")] / t[(label, "mixed")], t[(label, "poly")] / t[(label, "mufu")]
            every[(label, "mufu")].append(mm)
            every[(label, "poly")].append(t[(label, "poly")] / t[(label, "mixed")])
            row += [f"{mm:.2f}", f"{pm:.2f}"]
            if k[0] == 64:
                d64[label]["mm"].append(mm)
                d64[label]["pm"].append(pm)
            if not k[1]:
                r = ms[label][k + ("mixed",)]
                n_exp = int(r["B"]) * int(r["H"]) * int(r["N"]) * int(r["Nk"]) / 4
                price.setdefault((label, k[0]), []).append((t[(label, "mixed")] - t[(label, "mufu")]) * 1e-3 / n_exp * 1e12)
        for v in ("mufu", "mixed", "poly"):
            row.append(f"{t[('after', v)] / t[('before', v)]:.3f}")
        if k[2] == 16384:
            control.append(t[("after", "mufu")] / t[("before", "mufu")])
        body.append(row)
    rng = lambda xs: f"{min(xs):.2f}" + (f"–{max(xs):.2f}" if f"{max(xs):.2f}" != f"{min(xs):.2f}" else "")  # noqa: E731
    b, a = d64["before"], d64["after"]
    if not (a["mm"] and b["mm"] and every[("before", "mufu")]):
        return provenance([], "scripts/step20_target.sh OUTDIR (docs/20_persistent.md, '2^x')")
    lines = [
        f"At d = 64, `mufu` / `mixed` (predicted ≥ 1.00): at or above it at **{sum(x >= 1.0 for x in a['mm'])} of "
        f"{len(a['mm'])}** points, {rng(a['mm'])} after against {rng(b['mm'])} before; at 0.90 or below, the "
        f"falsifier, at **{sum(x <= 0.9 for x in a['mm'])} of {len(a['mm'])}**.",
        f"`poly` / `mufu` at d = 64 (predicted below its value before): below it at **"
        f"{sum(x < y for x, y in zip(a['pm'], b['pm']))} of {len(a['pm'])}** points, {rng(a['pm'])} after against "
        f"{rng(b['pm'])} before.",
        "The cubic's price per exponential it takes, (`mixed` − `mufu`) over B·H·N²/4, no mask, in ps: "
        + "; ".join(f"d = {d}: {rng(price[('before', d)])} before, {rng(price[('after', d)])} after"
                    for d in sorted({d for _, d in price}) if ('before', d) in price and ('after', d) in price) + ".",
        f"The `mufu` kernel, unchanged, at N = 16k: after / before {rng(control)}." if control else "",
        f"Over all {len(every[('after', 'mufu')])} points, `mufu` is faster than `mixed` at "
        f"**{sum(x < 1 for x in every[('after', 'mufu')])}** after and at "
        f"{sum(x < 1 for x in every[('before', 'mufu')])} before.",
        "The run before, as the `--exp2` table read it: " + "; ".join(
            f"`{v}` / `mixed` geometric mean {geomean(every[('before', v)]):.2f} ({rng(every[('before', v)])})"
            for v in ("mufu", "poly")) + ".",
    ]
    # each run's GPU beside its own commit
    before, after = (common.where(runs[label]) for label in ("before", "after"))
    return (f"_Before: measured on {before}; after: on {after}: {common.ROWS_FROM}_"
            + " _Kernel time (CUPTI, cold L2), bf16; each run's ratios are of its own kernels; the last three columns "
            "are a kernel's time after over before (below 1: faster after), across the two GPUs._\n\n"
            + table(["d", "causal", "N", "before: mufu / mixed", "before: poly / mufu", "after: mufu / mixed",
                     "after: poly / mufu", "mufu after / before", "mixed after / before", "poly after / before"], body)
            + "\n\n" + " ".join(x for x in lines if x))


def step20_ablation(pattern="ablation_h200_step20.csv"):
    """Each of step 20's changes taken out alone (bench --variants ablations): steps.ablation on rows whose
    variant names drop the default --exp2. One GPU per table: step20-ablation the H200's run (exp2 mixed, the
    default then), step20-ablation-h100 the H100's (exp2 mufu)."""
    real = common.rows
    try:
        common.rows = lambda pat: [dict(r, variant=_variant(r, ("exp2=mixed", "exp2=mufu"))) for r in real(pat)]
        return ablation("20", pattern=pattern)
    finally:
        common.rows = real


def fp8_accuracy():
    """scripts/fp8_accuracy.py's rows (fp8_accuracy.csv: a CPU emulation): RMSE of O against float64 attention
    on the bf16 inputs, per variant, at each point of its grid. Closing lines: per protocol, the geometric mean
    of each variant's RMSE over bf16's and over block + incoherent's; and FlashAttention-3's figure, at most
    9.1e-3 with block scales and incoherent processing on the outlier inputs, held against every outlier point."""
    rs = common.rows("fp8_accuracy.csv")
    if not rs:
        return ("_no rows yet: run `/usr/bin/python3 scripts/fp8_accuracy.py plots/data/fp8_accuracy.csv` "
                "(CPU only, PyTorch; about ten minutes)_")
    variants = []
    for r in rs:
        if r["variant"] not in variants:
            variants.append(r["variant"])
    by = {(r["protocol"], int(r["d"]), int(r["causal"]), int(r["N"]), r["variant"]): float(r["rmse"]) for r in rs}
    keys = sorted({k[:4] for k in by}, key=lambda k: (k[0], k[1], k[2], k[3]))
    body = [[p, d, "yes" if c else "no", n] + [f"{by[(p, d, c, n, v)]:.2e}" if (p, d, c, n, v) in by else "–"
                                              for v in variants] for p, d, c, n in keys]
    r0 = rs[0]
    head = (f"_Computed on the CPU by `scripts/fp8_accuracy.py` at commit `{r0['commit']}`, {r0['date']} (an emulation: "
            f"PyTorch in float32 and float64, every rounding where an FP8 kernel rounds; {r0['heads']} heads, seed "
            f"{r0['seed']}). RMSE of O against float64 attention on the bf16 inputs._")
    lines = []
    for p in sorted({k[0] for k in keys}):
        pts = [k for k in keys if k[0] == p]
        ratios = []
        for v in variants:
            if v == "bf16":
                continue
            xs = [by[k + (v,)] / by[k + ("bf16",)] for k in pts if k + (v,) in by and k + ("bf16",) in by]
            if xs:
                ratios.append(f"`{v}` {geomean(xs):.0f}×")
        lines.append(f"**{p}**: RMSE over bf16's, geometric mean: " + ", ".join(ratios) + ".")
    out = [k for k in keys if k[0] == "outliers" and k + ("fp8-block-incoherent",) in by]
    if out:
        met = sum(by[k + ("fp8-block-incoherent",)] <= 9.1e-3 for k in out)
        worst = max(by[k + ("fp8-block-incoherent",)] for k in out)
        tens = [by[k + ("fp8-tensor",)] / by[k + ("fp8-block-incoherent",)] for k in out if k + ("fp8-tensor",) in by]
        lines.append(f"Outliers, block scales and incoherent processing: at most 9.1e-3 (FlashAttention-3's figure) at "
                     f"**{met} of {len(out)}** points (largest {worst:.2e}); per-tensor over it, geometric mean "
                     f"**{geomean(tens):.2f}×**" + (" (FlashAttention-3 reports 2.6×)." if tens else "."))
    return (head + "\n\n" + table(["inputs", "d", "causal", "N"] + [f"`{v}`" for v in variants], body) + "\n\n" +
            " ".join(lines) + "\n\n" + fp8_verdicts(by, keys, variants))


def fp8_verdicts(by, keys, variants):
    """The four predictions of docs/fp8_accuracy.md (written before the first run), held against the rows."""
    fp8 = [v for v in variants if v not in ("bf16", "fp8-qk-only")]  # the rows the predictions were written for
    scaled = [v for v in fp8 if v not in ("fp8-p1", "fp8-qk-only")]
    r = lambda k, v: by.get(k + (v,))  # noqa: E731
    out = []
    worst = min(r(k, v) / r(k, "bf16") for k in keys for v in fp8 if r(k, v) and r(k, "bf16"))
    out.append(f"(1) bf16 more than 10× more accurate than every FP8 row at every point: "
               f"{'**held**' if worst > 10 else '**missed**'} (the smallest ratio is {worst:.1f}×).")
    normal = [k for k in keys if k[0] == "normal"]
    spread = max(max(r(k, v) for v in scaled) / min(r(k, v) for v in scaled) for k in normal) if normal else 0
    out.append(f"(2) on normal inputs the scaled rows within 1.5× of each other: "
               f"{'**held**' if spread <= 1.5 else '**missed**'} (largest spread {spread:.2f}×).")
    outl = [k for k in keys if k[0] == "outliers"]
    if outl:
        top = sum(r(k, "fp8-tensor") >= max(r(k, v) for v in scaled) for k in outl)
        gain = geomean([r(k, "fp8-tensor") / r(k, "fp8-block-incoherent") for k in outl])
        out.append(f"(3) with outliers, per-tensor scales the least accurate scaled row ({top} of {len(outl)} points) and "
                   f"block scales with the transform at least 2× better: {'**held**' if top == len(outl) and gain >= 2 else '**missed**'} "
                   f"({gain:.2f}× as a geometric mean).")
    p1_worst = sum(r(k, "fp8-p1") >= max(r(k, v) for v in fp8) for k in keys)
    out.append(f"(4) `fp8-p1` the least accurate row: worst at {p1_worst} of {len(keys)} points, "
               f"{'**held**' if p1_worst == len(keys) else '**missed**'}.")
    text = "Predictions: " + " ".join(out)
    for p in ("normal", "outliers"):  # how much of block + incoherent's error S alone makes (P and V in bf16)
        xs = [r(k, "fp8-qk-only") / r(k, "fp8-block-incoherent") for k in keys if k[0] == p and r(k, "fp8-qk-only")]
        if xs:
            text += (f" {'Where the error comes from' if p == 'normal' else 'With outliers'}: `fp8-qk-only` over "
                     f"`fp8-block-incoherent`, geometric mean **{geomean(xs):.2f}** on {p} inputs.")
    return text


def step20_mufu():
    """docs/20's next experiment ("The next experiment: the exponentials back on MUFU"): step 20 at --exp2 mufu over
    the fwd20 matrix beside step 16 and the peers of the same run (peer_tables.sh fwd20 with FA_FWD20_SET=exp2=mufu),
    read against the prediction written before it: step 20 / step 16 in 0.96–1.07 at d = 64 and 128, N = 16k, both
    masks; in 1.10–1.20 at N = 1k with the mask; at least 1 at every d = 256 point; step 20 / cuDNN's geometric
    mean in 0.96–1.04; bf16 at d = 128, N = 16k, no mask in 660–700 TFLOP/s; falsified if step 20 / step 16 stays
    below 0.95 at d = 64, N = 16k."""
    def lines(by, vs16, vsc):
        r16 = {k: x for x, k in vs16}
        out = []

        def band(keys, lo, hi, what):
            xs = [r16[k] for k in keys if k in r16]
            if xs:
                inside = sum(lo <= x <= hi for x in xs)
                out.append(f"{what} (predicted {lo:.2f}–{hi:.2f}): inside at **{inside} of {len(xs)}** points "
                           f"({min(xs):.3f}–{max(xs):.3f}).")
        band([k for k in r16 if k[1] in (64, 128) and k[3] == 16384], 0.96, 1.07,
             "Step 20 / step 16 at d = 64 and 128, N = 16k")
        band([k for k in r16 if k[1] in (64, 128) and k[3] == 1024 and k[2]], 1.10, 1.20,
             "Step 20 / step 16 at N = 1k with the mask")
        wide = [r16[k] for k in r16 if k[1] == 256]
        if wide:
            out.append(f"At d = 256, step 20 / step 16 at or above 1 (predicted: every point) at **"
                       f"{sum(x >= 1.0 for x in wide)} of {len(wide)}**.")
        out += _goal_lines(by, vsc, "0.96–1.04", (0.96, 1.04), (660, 700))
        low = [r16[k] for k in r16 if k[1] == 64 and k[3] == 16384]
        if low:
            out.append(f"The falsifier, step 20 / step 16 below 0.95 at d = 64, N = 16k: at **{sum(x < 0.95 for x in low)} "
                       f"of {len(low)}** points.")
        return out
    return _target("exp2=mufu", lines, device="NVIDIA H100 80GB HBM3")


def step20_h200_default():
    """The new default (--exp2 mufu since e48f4c2) over the fwd20 matrix on an H200, beside step 16 and the peers
    of the same run (peer_tables.sh fwd20, appended to the H200's files), read against docs/20's prediction
    written before it: step 20 / cuDNN's geometric mean in 0.93–1.01, step 20 / step 16's in 0.98–1.06, bf16 at
    d = 128, N = 16k, no mask in 630–700 TFLOP/s; falsified if step 20 / step 16's geometric mean is below 0.97."""
    def lines(by, vs16, vsc):
        out = _goal_lines(by, vsc, "0.93–1.01", (0.93, 1.01), (630, 700))
        if vs16:
            g = geomean([x for x, _ in vs16])
            out.append(f"Step 20 / step 16 geometric mean **{g:.3f}** (predicted 0.98–1.06: "
                       f"**{'held' if 0.98 <= g <= 1.06 else 'missed'}**; the falsifier, below 0.97: "
                       f"**{'fired' if g < 0.97 else 'did not fire'}**).")
        return out
    return _target("exp2=mufu", lines, device="NVIDIA H200")


def _goal_lines(by, vsc, cudnn_text, cudnn, tflops):
    """A prediction's readings of step 20 / cuDNN's geometric mean (band cudnn, written cudnn_text) and of bf16 at
    d = 128, N = 16k without the mask (band tflops, TFLOP/s): the lines each step 20 target table closes with."""
    out = []
    if vsc:
        g = geomean([x for x, _ in vsc])
        out.append(f"Step 20 / cuDNN geometric mean **{g:.3f}** (predicted {cudnn_text}: "
                   f"**{'held' if cudnn[0] <= g <= cudnn[1] else 'missed'}**).")
    head = by.get(("20", "bf16", 128, 0, 16384))
    if head:
        t = ktf(head)
        out.append(f"bf16, d = 128, N = 16k, no mask: **{t:.1f}** TFLOP/s (predicted {tflops[0]}–{tflops[1]}: "
                   f"**{'held' if tflops[0] <= t <= tflops[1] else 'missed'}**).")
    return out
