"""Step 21's tables (docs/21_fp8.md): the FP8 forward beside step 16 in bf16 in one run (fp8_<gpu>.csv,
scripts/fp8_target.sh), its accuracy on FlashAttention-3's inputs beside the CPU emulation's
(fp8acc_<gpu>.csv and fp8_accuracy.csv)."""
from . import common
from .common import geomean, kms, ktf, provenance, table

HOW = "scripts/fp8_target.sh OUTDIR (docs/21_fp8.md, 'Measured')"
ATTENTION_KERNEL = "fp8"  # the forward alone, without the quantize kernels (its ledger name)


def _parts(r):
    """A row's kernel time per kernel (kernels_ms: "name:ms;name:ms", each name the kernel's ledger name as
    bench writes it: memset, amax, quantize, fp8)."""
    out = {}
    for part in (r.get("kernels_ms") or "").split(";"):
        if ":" in part:
            name, ms = part.rsplit(":", 1)
            key = next((k for k in ("fp8", "amax", "quantize") if name == k), name)
            out[key] = out.get(key, 0.0) + float(ms)
    return out


def _tf(r, ms):
    """TFLOP/s of a row's shape (FlashAttention's convention) in `ms` milliseconds."""
    B, H, N, Nk, d = (int(r[k]) for k in ("B", "H", "N", "Nk", "d"))
    f = 4.0 * B * H * N * Nk * d / (2 if r["causal"] == "1" else 1)
    return f / (ms * 1e-3) / 1e12


def step21_target():
    """Step 21 (both ways of bringing Vᵀ) beside step 16 in bf16, by kernel time: TFLOP/s with the quantize
    kernels counted and without them (the forward kernel alone), and the ratio to step 16. Closing lines: the
    targets of issue 37 — at N = 16k without the mask, ≥ 1000 TFLOP/s at d = 128 and ≥ 1150 at d = 256, and
    ≥ 1.6× step 16 at d = 128 — and the prediction of docs/21."""
    rs = [r for r in common.rows("fp8_*.csv") if r.get("pass") == "1" or r.get("pass") == "0"]
    s21 = [r for r in rs if r["step"] == "21" and kms(r)]
    if not s21:
        return provenance([], HOW)
    s16 = {(int(r["d"]), int(r["causal"]), int(r["N"])): r for r in rs if r["step"] == "16" and r["dtype"] == "bf16" and kms(r)}
    body, ratios = [], {}
    for r in sorted(s21, key=lambda x: (int(x["d"]), int(x["causal"]), int(x["N"]), x["variant"])):
        k = (int(r["d"]), int(r["causal"]), int(r["N"]))
        parts = _parts(r)
        alone = _tf(r, parts[ATTENTION_KERNEL]) if ATTENTION_KERNEL in parts else None
        base = ktf(s16[k]) if k in s16 else None
        ratio = ktf(r) / base if base else None
        ratios[(k, r["variant"])] = (ktf(r), alone, ratio)
        total = sum(parts.values())
        share = 100.0 * (total - parts[ATTENTION_KERNEL]) / total if ATTENTION_KERNEL in parts and total > 0 else None
        body.append([k[0], "yes" if k[1] else "no", k[2], r["variant"].replace("v=", ""), f"{base:.0f}" if base else "–",
                     f"{ktf(r):.0f}", f"{alone:.0f}" if alone else "–", f"{share:.0f} %" if share is not None else "–",
                     f"{ratio:.2f}" if ratio else "–",
                     "PASS" if r["pass"] == "1" else "**FAIL**"])
    lines = []
    for d, goal in ((128, 1000), (256, 1150)):
        got = ratios.get(((d, 0, 16384), "v=kernel"))
        if got:
            lines.append(f"d = {d}, N = 16k, no mask: {got[0]:.0f} TFLOP/s with the quantize kernels, "
                         f"{got[1]:.0f} without (target ≥ {goal}: **{'met' if got[0] >= goal else 'missed'}** counted "
                         f"with them, **{'met' if (got[1] or 0) >= goal else 'missed'}** without).")
    got = ratios.get(((128, 0, 16384), "v=kernel"))
    if got and got[2]:
        lines.append(f"Step 21 / step 16 at d = 128, N = 16k: **{got[2]:.2f}** (target ≥ 1.6: "
                     f"**{'met' if got[2] >= 1.6 else 'missed'}**).")
    return (provenance(s21, HOW) + " _Kernel time (CUPTI, cold L2), every kernel of a call summed; 'forward alone' "
            "is the step21_fp8 kernel's share of the same calls; 'quantize' the other kernels' share of a call (amax, "
            "quantize, the memset)._\n\n"
            + table(["d", "causal", "N", "Vᵀ", "step 16 bf16 TFLOP/s", "step 21 TFLOP/s", "forward alone", "quantize",
                     "21 / 16",
                     "check"], body) + "\n\n" + " ".join(lines))


def step21_accuracy():
    """O's RMSE against float64 attention on the unquantized bf16 inputs (raw_rmse), per input protocol, d,
    N and mask: step 16 in bf16 and step 21 with each way of quantizing, beside the CPU emulation's same
    variant (fp8_accuracy.csv). Closing lines: FlashAttention-3's 9.1e-3 for block scales with the transform
    on the outlier inputs, and the prediction of docs/21 (the kernel within 1.5× of the emulation, above it)."""
    rs = common.rows("fp8acc_*.csv")
    if not rs:
        return provenance([], HOW)
    emu = {(r["protocol"], int(r["d"]), int(r["causal"]), int(r["N"]), r["variant"]): float(r["rmse"])
           for r in common.rows("fp8_accuracy.csv")}

    def name(r):
        if r["step"] == "16":
            return "bf16"
        return f"fp8-{r['fp8_scales']}" + ("-incoherent" if r["incoherent"] == "1" else "")
    by = {(r["inputs"], int(r["d"]), int(r["causal"]), int(r["N"]), name(r)): float(r["raw_rmse"] or r["rmse"]) for r in rs}
    variants = ["bf16", "fp8-tensor", "fp8-block", "fp8-tensor-incoherent", "fp8-block-incoherent"]
    keys = sorted({k[:4] for k in by})
    body, within, above, total = [], 0, 0, 0
    for k in keys:
        cells = []
        for v in variants:
            x = by.get(k + (v,))
            e = emu.get(k + (v,))
            cells.append("–" if x is None else f"{x:.2e}" + (f" ({x / e:.2f}×)" if e else ""))
            if x is not None and e and v != "bf16":
                total += 1
                within += 1 / 1.5 <= x / e <= 1.5
                above += x >= e
        body.append([k[0], k[1], "yes" if k[2] else "no", k[3]] + cells)
    out = [k for k in keys if k[0] == "outliers" and k + ("fp8-block-incoherent",) in by]
    lines = []
    if out:
        met = sum(by[k + ("fp8-block-incoherent",)] <= 9.1e-3 for k in out)
        lines.append(f"Outliers, block scales and the transform: at most 9.1e-3 (FlashAttention-3's figure) at **{met} of "
                     f"{len(out)}** points.")
    if total:
        lines.append(f"Against the emulation: within 1.5× at **{within} of {total}** points, at or above it at {above}.")
    return (provenance(rs, HOW) + " _RMSE of O against float64 attention on the bf16 inputs before quantization; in "
            "brackets, over the CPU emulation's RMSE for the same variant and point (docs/fp8_accuracy.md)._\n\n"
            + table(["inputs", "d", "causal", "N"] + [f"`{v}`" for v in variants], body) + "\n\n" + " ".join(lines))


BANKS_BEFORE = "logs/6e1cd7f/fp8_*.csv"  # the run before [transpose-banks] (an H100, 6e1cd7f)
BANKS_AFTER = "fp8_*.csv"  # the run after it (fp8_target.sh's current file)


def step21_banks():
    """[transpose-banks]'s prediction (docs/21, "Vᵀ"): at N = 16k, with --v kernel, the forward alone at least
    two thirds of pretransposed's in the same run, at d = 128 and 256, both masks; and the forward alone's
    change from the run before the new order (6e1cd7f) to the run after, beside the change of the two kernels
    the order does not touch (step 16, the pretransposed forward), which say how far the two runs' GPUs and
    days differ. Rows are set apart by run (GPU and commit)."""
    runs = [(label, [r for r in common.rows(pat) if r.get("N") == "16384" and kms(r)])
            for label, pat in (("before", BANKS_BEFORE), ("after", BANKS_AFTER))]
    if not all(rs for _, rs in runs):
        return provenance([], HOW)
    ms = {}  # (run, kernel, d, causal) -> ms of the kernel that matters
    for label, rs in runs:
        for r in rs:
            k = (int(r["d"]), int(r["causal"]))
            if r["step"] == "16" and r["dtype"] == "bf16":
                ms[(label, "step 16", *k)] = kms(r)
            elif r["step"] == "21" and ATTENTION_KERNEL in _parts(r):
                ms[(label, r["variant"].replace("v=", ""), *k)] = _parts(r)[ATTENTION_KERNEL]
    body, held, points, change = [], 0, 0, {}
    for d, c in sorted({(key[2], key[3]) for key in ms}):
        row = [d, "yes" if c else "no"]
        for label, _ in runs:
            kern, pre = ms.get((label, "kernel", d, c)), ms.get((label, "pretransposed", d, c))
            share = pre / kern if kern and pre else None
            row += [f"{kern:.3f}" if kern else "–", f"{pre:.3f}" if pre else "–", f"{share:.2f}" if share else "–"]
            if label == "after" and share:
                points += 1
                held += share >= 2.0 / 3.0
        for what in ("kernel", "pretransposed", "step 16"):
            a, b = ms.get(("before", what, d, c)), ms.get(("after", what, d, c))
            change.setdefault(what, []).append(a / b if a and b else None)
        row.append(f"{change['kernel'][-1]:.2f}" if change["kernel"][-1] else "–")
        body.append(row)
    gm = {w: geomean([x for x in xs if x]) for w, xs in change.items() if any(xs)}
    both = runs[0][1] + runs[1][1]
    return (provenance(both, HOW, many_gpus=True)
            + " _Kernel time (CUPTI, cold L2) of the step21_fp8 kernel alone, in ms, N = 16k (B·N = 16k); "
            "'share' is pretransposed's time over the in-kernel transpose's (1 = as fast); 'speed-up' is the kernel's "
            "time before over after._\n\n"
            + table(["d", "causal", "before: kernel ms", "before: pretransposed ms", "before: share",
                     "after: kernel ms", "after: pretransposed ms", "after: share", "speed-up of `--v kernel`"], body)
            + f"\n\nPrediction (after: share ≥ 2/3 at every point): held at **{held} of {points}** points. "
            + "Geometric-mean speed-up from the run before to the run after: "
            + ", ".join(f"{w} **{g:.3f}**" for w, g in gm.items())
            + " (the last two kernels did not change between the runs).")
