"""Step 21's tables (docs/21_fp8.md): the FP8 forward beside step 16 in bf16 in one run (fp8_<gpu>.csv,
scripts/fp8_target.sh), its accuracy on FlashAttention-3's inputs beside the CPU emulation's
(fp8acc_<gpu>.csv and fp8_accuracy.csv)."""
import os
import re

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


def _call_row(r, s16):
    """One step 21 row against step 16's at the same (d, causal, N): (key, call TFLOP/s, the forward alone's
    TFLOP/s, the quantize kernels' share of the call in %, step 21 / step 16), None where a part is missing."""
    k = (int(r["d"]), int(r["causal"]), int(r["N"]))
    parts = _parts(r)
    alone = _tf(r, parts[ATTENTION_KERNEL]) if ATTENTION_KERNEL in parts else None
    total = sum(parts.values())
    share = 100.0 * (total - parts[ATTENTION_KERNEL]) / total if ATTENTION_KERNEL in parts and total > 0 else None
    base = ktf(s16[k]) if k in s16 else None
    return k, base, alone, share, (ktf(r) / base if base else None)


def _call_cells(r, base, alone, share, ratio):
    """The cells both step 21 call tables share, from step 16's column to the check."""
    return [f"{base:.0f}" if base else "–", f"{ktf(r):.0f}", f"{alone:.0f}" if alone else "–",
            f"{share:.0f} %" if share is not None else "–", f"{ratio:.2f}" if ratio else "–",
            "PASS" if r["pass"] == "1" else "**FAIL**"]


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
        k, base, alone, share, ratio = _call_row(r, s16)
        ratios[(k, r["variant"])] = (ktf(r), alone, ratio)
        body.append([k[0], "yes" if k[1] else "no", k[2], r["variant"].replace("v=", "")] + _call_cells(r, base, alone, share, ratio))
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


def step21_accuracy(pattern="fp8acc_*.csv", how=HOW):
    """O's RMSE against float64 attention on the unquantized bf16 inputs (raw_rmse), per input protocol, d,
    N and mask: step 16 in bf16 and step 21 with each way of quantizing, beside the CPU emulation's same
    variant (fp8_accuracy.csv). Closing lines: FlashAttention-3's 9.1e-3 for block scales with the transform
    on the outlier inputs, and the prediction of docs/21 (the kernel within 1.5× of the emulation, above it)."""
    rs = common.rows(pattern)
    if not rs:
        return provenance([], how)
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
    return (provenance(rs, how) + " _RMSE of O against float64 attention on the bf16 inputs before quantization; in "
            "brackets, over the CPU emulation's RMSE for the same variant and point (docs/fp8_accuracy.md)._\n\n"
            + table(["inputs", "d", "causal", "N"] + [f"`{v}`" for v in variants], body) + "\n\n" + " ".join(lines))


BANKS_BEFORE = "logs/6e1cd7f/fp8_*.csv"  # the run before [transpose-banks] (an H100, 6e1cd7f)
BANKS_AFTER = "logs/4febcd0/fp8_*.csv"  # the run after it (an H100, 4febcd0; plots/data/fp8_*.csv is a later run)


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


# The staged writes' before and after are the same two runs as [transpose-banks]'s: 6e1cd7f (an H100, Vᵀ a
# byte at a time) and fp8_target.sh's current file.
STAGED_BEFORE, STAGED_AFTER = BANKS_BEFORE, BANKS_AFTER


def step21_staged():
    """The staged Vᵀ writes' prediction (docs/21, "Vᵀ", --v pretransposed): the quantize kernels' share of the
    call below 10 % at N = 16k and below half at N = 1k; the forward alone unchanged; step 21 / step 16 at
    d = 128, N = 16k without the mask at least 1.0. Per point, the quantize kernel's own time (the 'quantize'
    entry of kernels_ms) and the share of the call that is not the forward, before and after."""
    runs = {label: [r for r in common.rows(pat) if r.get("step") == "21" and r.get("variant") == "v=pretransposed" and kms(r)]
            for label, pat in (("before", STAGED_BEFORE), ("after", STAGED_AFTER))}
    if not all(runs.values()):
        return provenance([], HOW)
    s16 = {(int(r["d"]), int(r["causal"]), int(r["N"])): r for r in common.rows(STAGED_AFTER)
           if r.get("step") == "16" and r.get("dtype") == "bf16" and kms(r)}
    at = {label: {(int(r["d"]), int(r["causal"]), int(r["N"])): r for r in rs} for label, rs in runs.items()}

    def share(r):
        p = _parts(r)
        total = sum(p.values())
        return (total - p[ATTENTION_KERNEL]) / total if ATTENTION_KERNEL in p and total > 0 else None

    body, held, points, fwd = [], {1024: 0, 16384: 0}, {1024: 0, 16384: 0}, []
    for k in sorted(set(at["before"]) & set(at["after"])):
        b, a = at["before"][k], at["after"][k]
        qb, qa = _parts(b).get("quantize"), _parts(a).get("quantize")
        sb, sa = share(b), share(a)
        fb, fa = _parts(b).get(ATTENTION_KERNEL), _parts(a).get(ATTENTION_KERNEL)
        if fb and fa:
            fwd.append(fb / fa)
        if k[2] in held and sa is not None:
            points[k[2]] += 1
            held[k[2]] += sa < (0.10 if k[2] == 16384 else 0.5)
        body.append([k[0], "yes" if k[1] else "no", k[2], f"{qb * 1e3:.0f}" if qb else "–", f"{qa * 1e3:.0f}" if qa else "–",
                     f"{qb / qa:.1f}" if qb and qa else "–", f"{100 * sb:.0f} %" if sb is not None else "–",
                     f"{100 * sa:.0f} %" if sa is not None else "–"])
    lines = [f"Prediction: the share below 10 % at N = 16k held at **{held[16384]} of {points[16384]}** points, below half at "
             f"N = 1k at **{held[1024]} of {points[1024]}**."]
    if fwd:
        lines.append(f"The forward alone, before over after (geometric mean): **{geomean(fwd):.3f}** (predicted unchanged).")
    a = at["after"].get((128, 0, 16384))
    if a and (128, 0, 16384) in s16:
        ratio = ktf(a) / ktf(s16[(128, 0, 16384)])
        lines.append(f"Step 21 (pretransposed) / step 16 at d = 128, N = 16k, no mask: **{ratio:.2f}** "
                     f"(predicted at least 1.0: **{'held' if ratio >= 1.0 else 'missed'}**).")
    both = runs["before"] + runs["after"]
    return (provenance(both, HOW) + " _Kernel time (CUPTI, cold L2), `--v pretransposed`: the quantize kernel alone "
            "in µs (it writes Q, K and Vᵀ's codes), and the share of the call that is not the forward (amax, quantize, "
            "the memset), before the staged writes and after._\n\n"
            + table(["d", "causal", "N", "before: quantize µs", "after: quantize µs", "speed-up", "before: share",
                     "after: share"], body) + "\n\n" + " ".join(lines))


INT_ALU = ("IMAD", "LOP3", "LEA", "SHF", "IADD3", "VIADD", "ISETP", "SEL", "IABS", "MOV")  # integer and address work


def data_ops():
    """What one unit's data movement takes, read from [transpose4] in steps/21_fp8/schedule.hpp: a shared load per
    row it takes, a byte shuffle per byte_perm it calls, a shared store per column it gives."""
    src = open(os.path.join(common.ROOT, "steps", "21_fp8", "schedule.hpp")).read()
    m = re.search(r"void transpose4\(const uint32_t \(&r\)\[(\d+)\], uint32_t \(&out\)\[(\d+)\]\) \{(.*?)\n\}", src, re.S)
    return {"LDS": int(m.group(1)), "PRMT": m.group(3).count("byte_perm("), "STS": int(m.group(2))}


def step21_sass_units():
    """Where the in-kernel transpose's instructions go (sass_*_step21.csv, scripts/ncu_sass.py): the warp
    instructions each opcode executed in the forward kernel with --v kernel and with --v pretransposed (same
    shape, same commit), per transposer unit: a warp's 32 units of 16 bytes, counted by the unit's four shared
    loads (pretransposed has none). The difference is what the transposers add, unit by unit, beside the unit's
    own data instructions (DATA_OPS). Rows: opcodes whose difference is at least one instruction a unit."""
    rs = [r for r in common.rows("sass_*_step21.csv") if r["kind"] == "opcode"]
    DATA_OPS = data_ops()
    pairs = {}
    for r in rs:
        head, _, shape = r["label"].partition(",")
        if head.startswith("v=") and shape:  # "v=<--v's choice>, <shape>"
            pairs.setdefault((r["commit"], shape.strip()), {}).setdefault(head[2:].strip(), {})[r["name"]] = r
    out = []
    for (commit, shape), ways in sorted(pairs.items()):
        if "pretransposed" not in ways:
            continue
        for way in sorted(w for w in ways if w != "pretransposed"):
            out += _sass_units_table(commit, shape, way, {way: ways[way], "pretransposed": ways["pretransposed"]}, rs, DATA_OPS)
    return "\n\n".join(out) if out else provenance([], "scripts/ncu_sass.py (docs/21_fp8.md, 'What the run says')")


def _added_integer(way, pre, units):
    """Integer and address instructions a unit adds (opcodes that differ by at least one a unit, as the table shows)."""
    return sum((way.get(n, 0) - pre.get(n, 0)) / units for n in INT_ALU
               if abs(way.get(n, 0) - pre.get(n, 0)) / units >= 1.0)


def _sass_units_table(commit, shape, way, both, rs, DATA_OPS):
    """One way of transposing in the kernel (--v WAY) against --v pretransposed: step21_sass_units' table."""
    ex = {v: {n: int(r["executed"]) for n, r in both[v].items()} for v in both}
    units = (ex[way].get("LDS", 0) - ex["pretransposed"].get("LDS", 0)) / DATA_OPS["LDS"]
    if units <= 0:
        return []
    names = sorted(set(ex[way]) | set(ex["pretransposed"]),
                   key=lambda n: (-(ex[way].get(n, 0) - ex["pretransposed"].get(n, 0)), n))
    body, ints = [], _added_integer(ex[way], ex["pretransposed"], units)
    for n in names:
        a, b = ex[way].get(n, 0) / units, ex["pretransposed"].get(n, 0) / units
        if abs(a - b) < 1.0:
            continue
        kind = ("integer / address" if n in INT_ALU else "data" if n in DATA_OPS
                else "waiting (barrier polls)" if n in ("BRA", "SYNCS", "YIELD") else "other")
        body.append([f"`{n}`", kind, f"{a:.1f}", f"{b:.1f}", f"{a - b:.1f}"])
    tot = {v: sum(ex[v].values()) for v in ex}
    data = sum(DATA_OPS.values())
    return [f"_Nsight Compute's executed warp instructions by opcode in the step21_fp8 kernel, commit `{commit}`, "
            f"{shape}, on {both[way][names[0]]['gpu'] if names[0] in both[way] else rs[0]['gpu']} "
            f"(`plots/data/sass_*_step21.csv`), over the units the transposers moved: {units:,.0f} (a warp's 32 units "
            f"of 16 bytes, each {DATA_OPS['LDS']} shared loads)._\n\n"
            + table(["opcode", "what", f"per unit, `--v {way}`", "per unit, `--v pretransposed`", "added by the transpose"], body)
            + f"\n\nAdded per unit: **{ints:.0f}** integer and address instructions, against the unit's own "
              f"{data} data instructions ({DATA_OPS['LDS']} loads, {DATA_OPS['PRMT']} byte shuffles, {DATA_OPS['STS']} "
              f"stores: `transpose4`). The whole kernel executed "
              f"{tot[way] / tot['pretransposed']:.2f}× the warp instructions of `--v pretransposed`."]


def step21_stepped():
    """[transpose-addr]'s prediction (docs/21, end of "What the run says"): with --v kernel-stepped, under 30
    added integer and address instructions a unit (sass_*_step21.csv against --v pretransposed), the forward alone
    at d = 128, N = 16k at least 0.8 of pretransposed's in the same run, and the consumers' BRA share below 20 %.
    Per point at N = 16k, the forward alone of each way of bringing Vᵀ, from the same run (fp8_target.sh)."""
    rs = [r for r in common.rows("fp8_*.csv") if r.get("step") == "21" and r.get("N") == "16384" and kms(r)
          and ATTENTION_KERNEL in _parts(r)]
    ways = ("kernel", "kernel-stepped", "pretransposed")
    fwd = {(r["variant"].replace("v=", ""), int(r["d"]), int(r["causal"])): _parts(r)[ATTENTION_KERNEL] for r in rs}
    if not any(k[0] == "kernel-stepped" for k in fwd):
        return provenance([], HOW)
    used = [r for r in rs if r["variant"].replace("v=", "") in ways]
    body, lines = [], []
    for d, c in sorted({(k[1], k[2]) for k in fwd}):
        t = {w: fwd.get((w, d, c)) for w in ways}
        pre = t["pretransposed"]
        sh = {w: pre / t[w] if pre and t[w] else None for w in ("kernel", "kernel-stepped")}
        body.append([d, "yes" if c else "no"] + [f"{t[w]:.3f}" if t[w] else "–" for w in ways]
                    + [f"{sh[w]:.2f}" if sh[w] else "–" for w in ("kernel", "kernel-stepped")]
                    + [f"{t['kernel'] / t['kernel-stepped']:.2f}" if t["kernel"] and t["kernel-stepped"] else "–"])
        if d == 128 and sh["kernel-stepped"]:
            lines.append(f"Forward alone, `kernel-stepped` / `pretransposed` share at d = 128, N = 16k, "
                         f"{'with' if c else 'without'} the mask: **{sh['kernel-stepped']:.2f}** (predicted at least 0.8: "
                         f"**{'held' if sh['kernel-stepped'] >= 0.8 else 'missed'}**).")
    sass = [r for r in common.rows("sass_*_step21.csv") if r["kind"] == "opcode"]
    by = {}
    for r in sass:
        head, _, shape = r["label"].partition(",")
        by.setdefault((r["commit"], shape.strip()), {}).setdefault(head[2:].strip(), {})[r["name"]] = r
    for (commit, shape), w in sorted(by.items()):
        if "kernel-stepped" not in w or "pretransposed" not in w:
            continue
        ex = {v: {n: int(r["executed"]) for n, r in w[v].items()} for v in ("kernel-stepped", "pretransposed")}
        units = (ex["kernel-stepped"].get("LDS", 0) - ex["pretransposed"].get("LDS", 0)) / data_ops()["LDS"]
        if units > 0:
            ints = _added_integer(ex["kernel-stepped"], ex["pretransposed"], units)
            lines.append(f"Nsight, `{commit}`, {shape}: **{ints:.0f}** integer and address instructions added a unit "
                         f"(predicted under 30: **{'held' if ints < 30 else 'missed'}**).")
        bra = float(w["kernel-stepped"]["BRA"]["samples_pct"]) if "BRA" in w["kernel-stepped"] else None
        if bra is not None:
            lines.append(f"`BRA`'s share of the samples: **{bra:.1f} %** (predicted under 20 %: "
                         f"**{'held' if bra < 20 else 'missed'}**).")
    return (provenance(used, HOW) + " _Kernel time (CUPTI, cold L2) of the step21_fp8 kernel alone, in ms, N = 16k "
            "(B·N = 16k), each way of bringing Vᵀ in the same run; 'share' is pretransposed's time over that way's "
            "(1 = as fast); the last column is `kernel` over `kernel-stepped` (above 1: stepping is faster)._\n\n"
            + table(["d", "causal", "kernel ms", "kernel-stepped ms", "pretransposed ms", "share: kernel",
                     "share: kernel-stepped", "kernel / kernel-stepped"], body)
            + ("\n\n" + " ".join(lines) if lines else ""))


def _flags(r):
    """A row's variant as a dict: "v=pretransposed;pv=serial" -> {"v": "pretransposed", "pv": "serial"}."""
    return dict(kv.split("=", 1) for kv in (r.get("variant") or "").split(";") if "=" in kv)


def step21_pv_order():
    """[pv-order]'s prediction (docs/21, "Registers and shared memory"): at d = 256, N = 16k, no mask, the forward
    alone with --pv serial at least 10 % faster than with overlap (its spills gone), with --v kernel and pretransposed;
    at d = 128, where neither spills, serial at least 5 % slower (the overlap it gives up). fp8order_<gpu>.csv:
    bench's rows with --set pv=overlap and pv=serial, every --v, in the same run."""
    rs = [r for r in common.rows("fp8order_*.csv") if kms(r) and ATTENTION_KERNEL in _parts(r)]
    if not rs:
        return provenance([], HOW)
    fwd = {}
    for r in rs:
        f = _flags(r)
        fwd[(int(r["d"]), f.get("v", "kernel"), f.get("pv", "overlap"))] = (_parts(r)[ATTENTION_KERNEL], r)
    body, lines = [], []
    for d, v in sorted({(k[0], k[1]) for k in fwd}):
        a, b = fwd.get((d, v, "overlap")), fwd.get((d, v, "serial"))
        if not (a and b):
            continue
        up = a[0] / b[0]  # above 1: serial is faster
        tf = [ktf(x[1]) * kms(x[1]) / x[0] for x in (a, b)]  # the forward alone's TFLOP/s
        body.append([d, f"`{v}`", f"{a[0]:.3f}", f"{b[0]:.3f}", f"{tf[0]:.0f}", f"{tf[1]:.0f}", f"{up:.2f}"])
        if v not in ("kernel", "pretransposed"):  # the prediction names these two
            continue
        goal, held = (1.10, up >= 1.10) if d == 256 else (1 / 1.05, up <= 1 / 1.05)
        lines.append(f"d = {d}, `{v}`: overlap / serial **{up:.2f}** (predicted {'at least' if d == 256 else 'at most'} "
                     f"{goal:.2f}: **{'held' if held else 'missed'}**).")
    return (provenance(rs, HOW) + " _Kernel time (CUPTI, cold L2) of the step21_fp8 kernel alone, N = 16k, B·N = 16k, "
            "H·d = 2048, no mask; TFLOP/s of that kernel alone on FlashAttention's count; the last column is overlap's "
            "time over serial's (above 1: serial is faster)._\n\n"
            + table(["d", "Vᵀ", "overlap ms", "serial ms", "overlap TFLOP/s", "serial TFLOP/s", "overlap / serial"], body)
            + ("\n\n" + " ".join(lines) if lines else ""))


def step21_lean_ops(pattern="fp8ops_h200.csv"):
    """[lean-ops]' prediction (docs/21, "The consumers' instructions"): at N = 16k, no mask, the forward alone with
    --ops lean against plain (time ratio plain / lean, above 1: lean is faster) — 1.05–1.20 at d = 128 with
    pretransposed and the overlap order; at least 1.05 at d = 256 in the overlap order with the in-kernel
    transposes; 0.95–1.05 at d = 256 pretransposed in the serial order; and within 3 % with --v kernel at d = 128.
    fp8ops_<gpu>.csv: step 16 in bf16, then bench's rows with --set pv=…,ops=…, every --v, in the same run. The
    closing lines read issue 37's targets on the run's fastest configuration, the quantize kernels counted. A run with
    --ops fold rows adds a plain / fold column and fold's prediction: 1.00–1.05 at d = 256 pretransposed serial, and
    between 0.99 and lean's own ratio (+ 0.01) at the other d = 256 configurations. One GPU per table (pattern):
    step21-lean-ops reads the H200's run, step21-lean-ops-h100 the H100's."""
    rs = [r for r in common.rows(pattern) if kms(r)]
    s21 = [r for r in rs if r["step"] == "21" and ATTENTION_KERNEL in _parts(r)]
    if not s21:
        return provenance([], HOW)
    s16 = {int(r["d"]): r for r in rs if r["step"] == "16" and r["dtype"] == "bf16"}
    fwd = {}
    for r in s21:
        f = _flags(r)
        fwd[(int(r["d"]), f.get("v", "kernel"), f.get("pv", "overlap"), f.get("ops", "plain"))] = (_parts(r)[ATTENTION_KERNEL], r)
    body, up, upf = [], {}, {}
    has_fold = any(k[3] == "fold" for k in fwd)  # --ops fold (the + 8 alone): a column of its own once a run has it
    for d, v, pv in sorted({k[:3] for k in fwd}):
        a, b, c = fwd.get((d, v, pv, "plain")), fwd.get((d, v, pv, "lean")), fwd.get((d, v, pv, "fold"))
        if not (a and b):
            continue
        up[(d, v, pv)] = a[0] / b[0]
        tf = [ktf(x[1]) * kms(x[1]) / x[0] for x in (a, b)]  # the forward alone's TFLOP/s
        row = [d, f"`{v}`", f"`{pv}`", f"{a[0]:.3f}", f"{b[0]:.3f}", f"{tf[0]:.0f}", f"{tf[1]:.0f}", f"{up[(d, v, pv)]:.2f}"]
        if has_fold:
            if c:
                upf[(d, v, pv)] = a[0] / c[0]
            row.append(f"{upf[(d, v, pv)]:.2f}" if c else "–")
        ok = all(x[1]["pass"] == "1" for x in (a, b, c) if x)
        body.append(row + [f"{ktf(a[1]):.0f}", f"{ktf(b[1]):.0f}", "PASS" if ok else "**FAIL**"])
    lines = []

    def verdict(text, keys, lo, hi):
        got = [(k, up[k]) for k in keys if k in up]
        if not got:
            return
        held = sum(lo <= x <= hi for _, x in got)
        rng = f"between {lo:.2f} and {hi:.2f}" if hi < 9 else f"at least {lo:.2f}"
        lines.append(f"{text}: " + ", ".join(f"{x:.2f} (`{k[1]}`, `{k[2]}`)" for k, x in got)
                     + f" (predicted {rng}: **{'held' if held == len(got) else 'missed'}**, {held} of {len(got)}).")
    verdict("d = 128, pretransposed, overlap", [(128, "pretransposed", "overlap")], 1.05, 1.20)
    verdict("d = 256, in-kernel transposes, overlap", [(256, "kernel", "overlap"), (256, "kernel-stepped", "overlap")], 1.05, 99)
    verdict("d = 256, pretransposed, serial", [(256, "pretransposed", "serial")], 0.95, 1.05)
    verdict("d = 128, `kernel`, overlap", [(128, "kernel", "overlap")], 0.97, 1.03)
    if any(x < 1.0 for k, x in up.items() if k[0] == 128 and k[1] == "pretransposed" and k[2] == "overlap"):
        lines.append("The falsifier fired: lean is slower than plain at d = 128 pretransposed.")
    if upf:  # --ops fold's prediction (docs/21, "Which half of lean spills"), written before it was built
        k = (256, "pretransposed", "serial")
        if k in upf:
            x = upf[k]
            lines.append(f"Fold at d = 256, pretransposed, serial: plain / fold {x:.2f} (predicted between 1.00 and 1.05: "
                         f"**{'held' if 1.0 <= x <= 1.05 else 'missed'}**)" + ("; slower than plain, so the spill is not "
                         "the whole story" if x < 1.0 else "") + ".")
        rest = [(kk, x) for kk, x in upf.items() if kk[0] == 256 and kk != k and kk in up]
        if rest:
            held = sum(0.99 <= x <= up[kk] + 0.01 for kk, x in rest)
            lines.append(f"Fold at the other d = 256 configurations, between 0.99 and lean's own ratio (+ 0.01): "
                         f"**{'held' if held == len(rest) else 'missed'}**, {held} of {len(rest)}.")
    for d, goal in ((128, 1000), (256, 1150)):
        best = max((r for r in s21 if int(r["d"]) == d), key=ktf, default=None)
        if best is None:
            continue
        ratio = ktf(best) / ktf(s16[d]) if d in s16 else None
        lines.append(f"Fastest at d = {d}: `{best['variant']}`, **{ktf(best):.0f}** TFLOP/s with the quantize kernels "
                     f"(issue 37's target ≥ {goal}: **{'met' if ktf(best) >= goal else 'missed'}**)"
                     + (f"; step 16 in bf16 {ktf(s16[d]):.0f}, ratio **{ratio:.2f}**"
                        + (f" (target ≥ 1.6: **{'met' if ratio >= 1.6 else 'missed'}**)" if d == 128 else "") if ratio else "") + ".")
    return (provenance(rs, HOW) + " _Kernel time (CUPTI, cold L2), N = 16k, B·N = 16k, H·d = 2048, no mask. 'ms' and "
            "the first TFLOP/s pair: the step21_fp8 kernel alone; plain / lean: plain's time over lean's (above 1: lean is "
            "faster); the last TFLOP/s pair: the whole call, the quantize kernels counted (issue 37's count)._\n\n"
            + table(["d", "Vᵀ", "--pv", "plain ms", "lean ms", "plain TFLOP/s", "lean TFLOP/s", "plain / lean"]
                    + (["plain / fold"] if has_fold else []) + ["call TFLOP/s, plain", "call TFLOP/s, lean", "check"], body)
            + ("\n\n" + " ".join(lines) if lines else ""))


def _default_rows(pattern):
    """Step 21's rows at its defaults in the files `pattern` names, each against step 16's of the same run: (the
    rows, the table's body, {(d, causal, N): (call TFLOP/s, the forward alone's, step 21 / step 16)})."""
    rs = [r for r in common.rows(pattern) if r.get("pass") in ("1", "0") and kms(r)]
    s21 = [r for r in rs if r["step"] == "21" and r["variant"] in ("-", "v=pretransposed")]
    s16 = {(int(r["d"]), int(r["causal"]), int(r["N"])): r for r in rs if r["step"] == "16" and r["dtype"] == "bf16"}
    body, got = [], {}
    for r in sorted(s21, key=lambda x: (int(x["d"]), int(x["causal"]), int(x["N"]))):
        k, base, alone, share, ratio = _call_row(r, s16)
        got[k] = (ktf(r), alone, ratio)
        body.append([k[0], "yes" if k[1] else "no", k[2]] + _call_cells(r, base, alone, share, ratio))
    return s21, body, got


def step21_defaults(pattern="fp8defaults_*.csv"):
    """[per-d-defaults] Step 21 at its defaults alone (--v pretransposed, --pv and --ops auto: the pair each head
    dimension measured fastest) beside step 16 in bf16 in the same run, by kernel time (fp8_target.sh's defaults
    phase). Closing lines: issue 37's targets, and docs/21's prediction written before the run — at N = 16k without
    the mask step 21 / step 16 in 1.03–1.20 at d = 128 and 1.30–1.50 at d = 256, the call at 720–830 and 930–1060
    TFLOP/s; above 1 at N = 16k (both masks, both d) and below 1 at N = 1k (both); falsified at d = 256 below
    1.25."""
    s21, body, got = _default_rows(pattern)
    if not s21:
        return provenance([], "FA_PHASES=defaults " + HOW)
    lines = []

    def band(x, lo, hi):
        return "held" if lo <= x <= hi else "missed"
    for d, goal, rlo, rhi, tlo, thi in ((128, 1000, 1.03, 1.20, 720, 830), (256, 1150, 1.30, 1.50, 930, 1060)):
        g = got.get((d, 0, 16384))
        if not g:
            continue
        lines.append(f"d = {d}, N = 16k, no mask: **{g[0]:.0f}** TFLOP/s with the quantize kernels, {g[1]:.0f} without "
                     f"(predicted {tlo}–{thi}: **{band(g[0], tlo, thi)}**; issue 37's target ≥ {goal}: "
                     f"**{'met' if g[0] >= goal else 'missed'}**); step 21 / step 16 **{g[2]:.2f}** "
                     f"(predicted {rlo:.2f}–{rhi:.2f}: **{band(g[2], rlo, rhi)}**"
                     + ("; target ≥ 1.6: **" + ("met" if g[2] >= 1.6 else "missed") + "**" if d == 128 else "")
                     + (f"; the falsifier, below 1.25: **{'fired' if g[2] < 1.25 else 'did not fire'}**" if d == 256 else "")
                     + ").")
    above = [k for k in got if k[2] == 16384 and got[k][2]]
    below = [k for k in got if k[2] == 1024 and got[k][2]]
    if above:
        n = sum(got[k][2] > 1 for k in above)
        lines.append(f"Above step 16 at N = 16k: **{n} of {len(above)}** points (predicted all: "
                     f"**{'held' if n == len(above) else 'missed'}**).")
    if below:
        n = sum(got[k][2] < 1 for k in below)
        lines.append(f"Below step 16 at N = 1k: **{n} of {len(below)}** points (predicted all: "
                     f"**{'held' if n == len(below) else 'missed'}**).")
    return (provenance(s21, "FA_PHASES=defaults " + HOW) + " _Kernel time (CUPTI, cold L2), every kernel of a call "
            "summed; step 21 at its defaults (`--v pretransposed`, `--pv auto`, `--ops auto`); 'forward alone' is the "
            "step21_fp8 kernel's share of the same calls; 'quantize' the other kernels' share (amax, quantize, the "
            "memset)._\n\n"
            + table(["d", "causal", "N", "step 16 bf16 TFLOP/s", "step 21 TFLOP/s", "forward alone", "quantize",
                     "21 / 16", "check"], body) + "\n\n" + " ".join(lines))


D64_HOW = "FA_PHASES=d64 " + HOW


def step21_d64():
    """[sw64] d = 64: step 16 in bf16 and step 21 at its defaults in one run, by kernel time (fp8_target.sh's d64
    phase). Closing lines: docs/21's prediction written before the run — at N = 16k without the mask the forward
    alone at 480–650 TFLOP/s, the call at 450–620, step 21 / step 16 in 0.85–1.15 and below d = 128's 1.13 (the
    falsifier: at or above it); below step 16 at every N = 1k point; with the mask below the ratio without it at
    every N."""
    s21, body, got = _default_rows("fp8d64_*.csv")
    if not s21:
        return provenance([], D64_HOW)

    def band(x, lo, hi):
        return "held" if x is not None and lo <= x <= hi else "missed"
    lines = []
    g = got.get((64, 0, 16384))
    if g:
        lines.append(f"d = 64, N = 16k, no mask: the forward alone at **{g[1]:.0f}** TFLOP/s (predicted 480–650: "
                     f"**{band(g[1], 480, 650)}**), the call at **{g[0]:.0f}** (predicted 450–620: **{band(g[0], 450, 620)}**); "
                     f"step 21 / step 16 **{g[2]:.2f}** (predicted 0.85–1.15: **{band(g[2], 0.85, 1.15)}**; the falsifier, "
                     f"at or above d = 128's 1.13: **{'fired' if g[2] >= 1.13 else 'did not fire'}**).")
    below = [k for k in got if k[2] == 1024 and got[k][2]]
    if below:
        n = sum(got[k][2] < 1 for k in below)
        lines.append(f"Below step 16 at N = 1k: **{n} of {len(below)}** points (predicted all: "
                     f"**{'held' if n == len(below) else 'missed'}**).")
    pairs = [(got[(64, 1, n)][2], got[(64, 0, n)][2]) for n in sorted({k[2] for k in got})
             if (64, 1, n) in got and (64, 0, n) in got and got[(64, 1, n)][2] and got[(64, 0, n)][2]]
    if pairs:
        n = sum(c < u for c, u in pairs)
        lines.append(f"With the mask below the ratio without it: **{n} of {len(pairs)}** N (predicted all: "
                     f"**{'held' if n == len(pairs) else 'missed'}**).")
    return (provenance(s21, D64_HOW) + " _Kernel time (CUPTI, cold L2), every kernel of a call summed; step 21 at its "
            "defaults (`--v pretransposed`, `--pv auto`, `--ops auto`: overlap and lean at d = 64); 'forward alone' is "
            "the step21_fp8 kernel's share of the same calls; 'quantize' the other kernels' share (amax, quantize, the "
            "memset)._\n\n"
            + table(["d", "causal", "N", "step 16 bf16 TFLOP/s", "step 21 TFLOP/s", "forward alone", "quantize",
                     "21 / 16", "check"], body) + "\n\n" + " ".join(lines))


def step21_d64_accuracy():
    """[sw64] step21-accuracy's protocol at d = 64 (fp8_target.sh's d64 phase): the same columns and closing lines."""
    return step21_accuracy("fp8d64acc_*.csv", D64_HOW)


def step21_d64_samples():
    """[sw64] Where the forward's warps are at d = 64 and at d = 128 (sass_*_step21_d64.csv, scripts/ncu_sass.py on the
    step21_fp8 kernel, one run each at N = 16k without the mask, the same commit): per opcode, its share of the warp
    samples and its lane instructions per entry of S (executed warp instructions · 32 / (B·H·N²)); then the stall
    reasons' shares. Rows: the eight largest opcodes at either d."""
    rs = common.rows("sass_*_step21_d64.csv")
    if not rs:
        return provenance([], "scripts/ncu_sass.py --profile step21_fp8 (docs/21_fp8.md, 'd = 64')")
    shapes = {}
    for r in rs:
        kv = dict(x.split("=") for x in r["label"].split())
        shapes.setdefault(int(kv["d"]), (kv, {}))[1].setdefault(r["kind"], {})[r["name"]] = r
    ds = sorted(shapes)

    def entries(kv):
        return int(kv["B"]) * int(kv["H"]) * int(kv["N"]) ** 2
    top = []
    for d in ds:
        ops = shapes[d][1].get("opcode", {})
        for name in sorted(ops, key=lambda n: -float(ops[n]["samples_pct"]))[:8]:
            if name not in top:
                top.append(name)
    body = []
    for name in top:
        cells = [name]
        for d in ds:
            r = shapes[d][1].get("opcode", {}).get(name)
            cells.append(f"{float(r['samples_pct']):.1f} %" if r else "–")
        for d in ds:
            r = shapes[d][1].get("opcode", {}).get(name)
            cells.append(f"{int(r['executed']) * 32 / entries(shapes[d][0]):.2f}" if r and r["executed"] else "–")
        body.append(cells)
    reasons = []
    for d in ds:
        rsn = shapes[d][1].get("reason", {})
        reasons.append(f"d = {d}: " + ", ".join(f"{n} {float(rsn[n]['samples_pct']):.0f} %"
                                                 for n in sorted(rsn, key=lambda n: -float(rsn[n]["samples_pct"]))[:4]))
    return (provenance(rs, "scripts/ncu_sass.py --profile step21_fp8 (docs/21_fp8.md, 'd = 64')")
            + " _Nsight Compute's warp samples of the step21_fp8 kernel (`--set full`, SourceCounters), one launch at each d, "
            "N = 16k, no mask, B·H·N² entries of S: d = 64 with H = 32, d = 128 with H = 16 (the same flops)._\n\n"
            + table(["opcode"] + [f"samples, d = {d}" for d in ds] + [f"per entry of S, d = {d}" for d in ds], body)
            + "\n\nThe largest stall reasons (share of all samples): " + "; ".join(reasons) + ".")


LOADS_HOW = "FA_PHASES=loads " + HOW
# docs/21's prediction for [quantize-loads], written before the run: the call's speed-up over the run before (the
# same GPU's defaults and d64 files), per (d, N), no mask.
LOADS_BANDS = {(64, 1024): (1.12, 1.25), (128, 1024): (1.02, 1.07), (256, 1024): (1.00, 1.04),
               (64, 16384): (1.01, 1.04), (128, 16384): (0.99, 1.02), (256, 16384): (0.99, 1.02)}


def _ceilings(slug, prefix="fp8peaks"):
    """This GPU's streaming HBM read and write rates (bytes/s) from the loads phase's `bench --peaks` file."""
    got = {r["peak"]: float(r["value"]) for r in common.rows(f"{prefix}_{slug}.csv") if r.get("unit") == "bytes/s"}
    return got.get("hbm-read"), got.get("hbm-write")


def _shares(r, R, W):
    """The quantize kernels' shares of the bus: amax reads Q, K and V in bf16 (2 bytes an element); quantize reads
    them again and writes a byte an element. A share is the time those bytes take at the GPU's streaming rates
    over the kernel's own time (1: at the ceiling)."""
    B, H, N, Nk, d = (int(r[k]) for k in ("B", "H", "N", "Nk", "d"))
    hkv = int(r.get("Hkv") or H)
    el = B * d * (H * N + 2 * hkv * Nk)
    p = _parts(r)
    amax = (2 * el / R) / (p["amax"] * 1e-3) if R and p.get("amax") else None
    quant = (2 * el / R + el / W) / (p["quantize"] * 1e-3) if R and W and p.get("quantize") else None
    return p, amax, quant


def _f2(x):
    return f"{x:.2f}" if x is not None else "–"


def _us(p, k):
    return f"{1e3 * p[k]:.0f}" if k in p else "–"


def _loads_after(pattern):
    """A loads-style run's step 21 rows: checked (passed or failed) and with a kernel time."""
    return [r for r in common.rows(pattern) if r["step"] == "21" and r.get("pass") in ("1", "0") and kms(r)]


def _loads_before(name):
    """The run without a change: its step 21 rows with a kernel time, by (d, N)."""
    return {(int(r["d"]), int(r["N"])): r for r in common.rows(name) if r["step"] == "21" and kms(r)}


def _one_gpu(rows, name, what):
    """The one GPU slug of a loads-style table's rows; rows from two GPUs are refused."""
    slugs = sorted({re.sub(r"[^a-z0-9]+", "_", r["device"].lower().replace("nvidia ", "")).strip("_") for r in rows})
    if len(slugs) > 1:
        raise ValueError(f"{name}: {what} files from {len(slugs)} GPUs ({', '.join(slugs)}): keep one")
    return slugs[0]


def _pairs(after, before, R, W):
    """Each (d, N) of `after` in order with its row before: the key, the row, its parts and shares after, the
    same before (empty where there is no row before), and the whole call's speed-up (before over after)."""
    for r in sorted(after, key=lambda x: (int(x["d"]), int(x["N"]))):
        k = (int(r["d"]), int(r["N"]))
        b = before.get(k)
        p, a, q = _shares(r, R, W)
        pb, ab, qb = _shares(b, R, W) if b else ({}, None, None)
        yield k, r, (p, a, q), (pb, ab, qb), (sum(pb.values()) / sum(p.values()) if b else None)


def _control(what, ctrl):
    """The closing line on a run's controls: kernels the change left alone, their time after over before."""
    ok = all(0.98 <= x <= 1.02 for x in ctrl)
    return f"{what}: {min(ctrl):.3f}–{max(ctrl):.3f} (predicted within 0.98–1.02: **{'held' if ok else 'missed'}**)."


def _used_and_ceilings(after, before, R, W, where, missing):
    """The rows a loads-style table read (for its provenance), and its caption's sentence on the ceilings."""
    keys = {(int(r["d"]), int(r["N"])) for r in after}
    ceil = (f" Ceilings (`bench --peaks`, {where}): HBM read {R / 1e12:.2f} TB/s, write {W / 1e12:.2f} TB/s."
            if R and W else f" No {missing} file for this GPU: no shares.")
    return after + [before[k] for k in sorted(before) if k in keys], ceil


def step21_quantize_loads():
    """[quantize-loads] The quantize kernels with every row of a warp's share fetched first (fp8_target.sh's loads
    phase): each kernel's time and its share of this GPU's HBM ceilings (bench --peaks, the same call), beside the
    same GPU's run before the change (its defaults and d64 files), and the call's speed-up. Closing lines: docs/21's
    prediction written before the run — amax at ≥ 0.85 of the ceiling and quantize at ≥ 0.80 at every point; the
    falsifier, quantize below 0.60 at d = 64; the call's speed-up in LOADS_BANDS; the forward kernel (unchanged)
    within 2 % of its time before."""
    after = _loads_after("fp8loads_*.csv")
    if not after:
        return provenance([], LOADS_HOW)
    slug = _one_gpu(after, "step21-quantize-loads", "loads")
    R, W = _ceilings(slug)
    before = {(int(r["d"]), int(r["N"])): r for r in common.rows(f"fp8defaults_{slug}.csv") + common.rows(f"fp8d64_{slug}.csv")
              if r["step"] == "21" and r["causal"] == "0" and r["variant"] in ("-", "v=pretransposed") and kms(r)}
    body, lines = [], []
    got_a, got_q, speed, ctrl, d64q = [], [], {}, [], []
    for k, r, (p, a, q), (pb, ab, qb), up in _pairs(after, before, R, W):
        if ATTENTION_KERNEL in pb and ATTENTION_KERNEL in p:
            ctrl.append(p[ATTENTION_KERNEL] / pb[ATTENTION_KERNEL])
        got_a.append(a), got_q.append(q)
        if k[0] == 64:
            d64q.append(q)
        if up is not None:
            speed[k] = up
        body.append([k[0], k[1], _us(pb, "amax"), _us(p, "amax"), _f2(ab), _f2(a), _us(pb, "quantize"), _us(p, "quantize"),
                     _f2(qb), _f2(q), _f2(up), "PASS" if r["pass"] == "1" else "FAIL"])
    n_a = sum(x is not None and x >= 0.85 for x in got_a)
    n_q = sum(x is not None and x >= 0.80 for x in got_q)
    lines.append(f"amax at or above 0.85 of the read ceiling: **{n_a} of {len(got_a)}** points (predicted all: "
                 f"**{'held' if n_a == len(got_a) else 'missed'}**). quantize at or above 0.80 of its bytes' time at the "
                 f"ceilings: **{n_q} of {len(got_q)}** (predicted all: **{'held' if n_q == len(got_q) else 'missed'}**).")
    if d64q:
        fired = any(x is not None and x < 0.60 for x in d64q)
        lines.append(f"The falsifier, quantize below 0.60 at d = 64: **{'fired' if fired else 'did not fire'}** "
                     f"({', '.join(_f2(x) for x in d64q)}).")
    if speed:
        inb = [(k, x) for k, x in speed.items() if k in LOADS_BANDS]
        held = sum(LOADS_BANDS[k][0] <= x <= LOADS_BANDS[k][1] for k, x in inb)
        lines.append("The call's speed-up over the run before, against its band: " + "; ".join(
            f"d = {k[0]}, N = {k[1]}: {x:.3f} ({LOADS_BANDS[k][0]:.2f}–{LOADS_BANDS[k][1]:.2f})" for k, x in sorted(inb))
            + f": inside at **{held} of {len(inb)}**.")
    if ctrl:
        lines.append(_control("The forward kernel (unchanged), after / before", ctrl))
    rs, ceil = _used_and_ceilings(after, before, R, W, "the same call", "`bench --peaks`")
    return (provenance(rs, LOADS_HOW) + " _Kernel time (CUPTI, cold L2) of the quantize kernels, in µs, step 21 at its "
            "defaults, B·N = 16k, no mask; 'before' is an earlier call on the same GPU kind (its defaults and d64 "
            "phases), 'after' the loads phase, so the forward kernel, unchanged, is the control of the two runs; a share is the time the kernel's bytes take at the GPU's streaming rates over its own time; "
            "the speed-up is the whole call's, before over after._" + ceil + "\n\n"
            + table(["d", "N", "amax µs before", "amax µs after", "amax share before", "amax share after",
                     "quantize µs before", "quantize µs after", "quantize share before", "quantize share after",
                     "call speed-up", "check"], body) + "\n\n" + " ".join(lines))


BURSTS_HOW = ("FA_PHASES=loads " + HOW + ", twice on one machine: at the commit before [amax-bursts] (its files renamed "
              "fp8burstsbase and fp8burstspeaks) and with it (its fp8loads file renamed fp8bursts)")


def step21_amax_bursts():
    """[amax-bursts] The amax kernel at 32 registers, its rows in bursts (fp8_target.sh's loads phase, its file renamed
    fp8bursts_<gpu>.csv), beside the same phase run just before it on the same machine without the change
    (fp8burstsbase_<gpu>.csv), with that run's ceilings (fp8burstspeaks_<gpu>.csv). Closing lines: docs/21's prediction
    written before the run — amax at ≥ 0.93 of the read ceiling at d = 128 and 256 and ≥ 0.84 at d = 64; quantize and
    the forward, unchanged, within 2 % (the controls)."""
    after = _loads_after("fp8bursts_*.csv")
    if not after:
        return provenance([], BURSTS_HOW)
    slug = _one_gpu(after, "step21-amax-bursts", "bursts")
    R, W = _ceilings(slug, "fp8burstspeaks")
    before = _loads_before(f"fp8burstsbase_{slug}.csv")
    body, hi, lo, ctrl = [], [], [], []
    for k, r, (p, a, q), (pb, ab, qb), up in _pairs(after, before, R, W):
        (lo if k[0] == 64 else hi).append(a)
        ctrl += [p[part] / pb[part] for part in ("quantize", ATTENTION_KERNEL) if part in p and part in pb]
        body.append([k[0], k[1], _us(pb, "amax"), _us(p, "amax"), _f2(ab), _f2(a), _us(pb, "quantize"), _us(p, "quantize"),
                     f"{up:.3f}" if up is not None else "–", "PASS" if r["pass"] == "1" else "FAIL"])
    lines = []
    if hi:
        n = sum(x is not None and x >= 0.93 for x in hi)
        lines.append(f"amax at or above 0.93 of the read ceiling at d = 128 and 256: **{n} of {len(hi)}** points "
                     f"(predicted all: **{'held' if n == len(hi) else 'missed'}**).")
    if lo:
        n = sum(x is not None and x >= 0.84 for x in lo)
        lines.append(f"At d = 64, at or above 0.84: **{n} of {len(lo)}** (predicted all: "
                     f"**{'held' if n == len(lo) else 'missed'}**).")
    if ctrl:
        lines.append(_control("The controls, quantize and the forward kernel (both unchanged), with / without", ctrl))
    rs, ceil = _used_and_ceilings(after, before, R, W, "the run without", "`fp8burstspeaks`")
    return (provenance(rs, BURSTS_HOW) + " _Kernel time (CUPTI, cold L2) in µs, step 21 at its defaults, B·N = 16k, no "
            "mask; 'without' is `[quantize-loads]`'s amax (eight rows fetched at once, up to 80 registers), 'with' the "
            "amax kernel at 32 registers with its rows in bursts, the two runs minutes apart on one machine; a share is "
            "the time amax's bytes take at the read ceiling over its own time; the speed-up is the whole call's, "
            "without over with._" + ceil + "\n\n"
            + table(["d", "N", "amax µs without", "amax µs with", "amax share without", "amax share with",
                     "quantize µs without", "quantize µs with", "call speed-up", "check"], body) + "\n\n" + " ".join(lines))


SLICES_HOW = ("FA_PHASES=loads " + HOW + ", three times on one machine: at the commit before [slices] (its files renamed "
              "fp8slicesbase and fp8slicespeaks), then with each of the two builds (fp8slicesrolled, fp8slicesunrolled)")
SLICES_BUILDS = ("rolled", "unrolled")  # docs/21's two builds of [slices], in the order the prediction names them


def step21_slices():
    """[slices] At d = 64 a block of amax and quantize takes two 32-row slices (fp8_target.sh's loads phase with each
    build, its file renamed fp8slices<build>_<gpu>.csv), beside the same phase run just before on the same machine
    without the change (fp8slicesbase_<gpu>.csv), with that run's ceilings (fp8slicespeaks_<gpu>.csv). Closing lines:
    docs/21's prediction written before the run — at d = 64 amax at ≥ 0.95 of the read ceiling and quantize at ≥ 0.88
    of its bytes' time, each build; falsified if quantize stays below 0.80 there; d = 128 and 256 and the forward
    kernel unchanged within 2 % (the controls); the rolled build at least as fast as the unrolled one in quantize at
    d = 64."""
    got = {b: _loads_after(f"fp8slices{b}_*.csv") for b in SLICES_BUILDS}
    every = got["rolled"] + got["unrolled"]
    if not every:
        return provenance([], SLICES_HOW)
    slug = _one_gpu(every, "step21-slices", "slices")
    R, W = _ceilings(slug, "fp8slicespeaks")
    before = _loads_before(f"fp8slicesbase_{slug}.csv")
    per = {b: {k: (r, pa, pb, up) for k, r, pa, pb, up in _pairs(got[b], before, R, W)} for b in SLICES_BUILDS}
    keys = sorted(set(per["rolled"]) | set(per["unrolled"]))
    body, lines = [], []
    for k in keys:
        cells, ok = [], []
        for b in SLICES_BUILDS:
            r, (p, a, q), _, up = per[b].get(k, (None, ({}, None, None), None, None))
            cells.append((p, a, q, up))
            if r is not None:
                ok.append("PASS" if r["pass"] == "1" else "FAIL")
        pb, ab, qb = next((per[b][k][2] for b in SLICES_BUILDS if k in per[b]), ({}, None, None))
        body.append([k[0], k[1], _f2(ab)] + [_f2(c[1]) for c in cells] + [_us(pb, "quantize")] + [_us(c[0], "quantize") for c in cells]
                    + [_f2(qb)] + [_f2(c[2]) for c in cells] + [f"{c[3]:.3f}" if c[3] is not None else "–" for c in cells]
                    + [" / ".join(ok)])
    for b in SLICES_BUILDS:
        d64 = [(k, per[b][k][1]) for k in keys if k[0] == 64 and k in per[b]]
        if not d64:
            continue
        na = sum(a is not None and a >= 0.95 for _, (_, a, _) in d64)
        nq = sum(q is not None and q >= 0.88 for _, (_, _, q) in d64)
        fired = any(q is None or q < 0.80 for _, (_, _, q) in d64)
        lines.append(f"**{b.capitalize()}** at d = 64: amax at or above 0.95 of the read ceiling at **{na} of {len(d64)}** "
                     f"points, quantize at or above 0.88 at **{nq} of {len(d64)}** (predicted all: "
                     f"**{'held' if na == nq == len(d64) else 'missed'}**); the falsifier, quantize below 0.80: "
                     f"**{'fired' if fired else 'did not fire'}**.")
        ctrl = [per[b][k][1][0][part] / per[b][k][2][0][part] for k in keys if k in per[b] and per[b][k][2][0]
                for part in ("amax", "quantize", ATTENTION_KERNEL) if k[0] != 64 or part == ATTENTION_KERNEL
                if part in per[b][k][1][0] and part in per[b][k][2][0]]
        if ctrl:
            lines.append(_control(f"{b.capitalize()}'s controls (amax and quantize at d = 128 and 256, the forward kernel "
                                  "everywhere), with / without", ctrl))
    both = [k for k in keys if k[0] == 64 and k in per["rolled"] and k in per["unrolled"]]
    if both:
        n = sum(per["rolled"][k][1][0].get("quantize", 1e9) <= per["unrolled"][k][1][0].get("quantize", 0) for k in both)
        lines.append(f"Rolled at least as fast as unrolled in quantize at d = 64: **{n} of {len(both)}** "
                     f"(predicted all: **{'held' if n == len(both) else 'missed'}**).")
    rs, ceil = _used_and_ceilings(every, before, R, W, "the run without", "`fp8slicespeaks`")
    return (provenance(rs, SLICES_HOW) + " _Kernel time (CUPTI, cold L2), step 21 at its defaults, B·N = 16k, no mask; "
            "'without' is one 32-row slice a block (`[amax-bursts]`), 'rolled' and 'unrolled' the two builds of two "
            "slices a block at d = 64 (docs/21); the three runs minutes apart on one machine; a share is the time a "
            "kernel's bytes take at the GPU's streaming rates over its own time; the speed-up is the whole call's, "
            "without over with._" + ceil + "\n\n"
            + table(["d", "N", "amax share without", "rolled", "unrolled", "quantize µs without", "rolled", "unrolled",
                     "quantize share without", "rolled", "unrolled", "call speed-up rolled", "unrolled", "check"], body)
            + "\n\n" + " ".join(lines))


HALF_HOW = ("FA_PHASES=loads " + HOW + " with [half-rows] (its files renamed fp8halfrows and fp8halfrowspeaks), beside "
            "the same phase without it (fp8halfbase, or the [slices] run's fp8slicesbase where there is none)")


def step21_half_rows():
    """[half-rows] At d = 64 a warp takes two rows at once, 16 lanes each (fp8_target.sh's loads phase, its files
    renamed fp8halfrows_<gpu>.csv and fp8halfrowspeaks_<gpu>.csv), beside the phase without it: fp8halfbase_<gpu>.csv
    when a run on the same machine made one, else the [slices] run's fp8slicesbase_<gpu>.csv (an earlier machine of
    the same kind; the caption says which). Shares use the half-rows run's own ceilings. Closing lines: docs/21's
    prediction written before the run — at d = 64 quantize at ≥ 0.70 of its bytes' time and amax at ≥ 0.80;
    d = 128 and 256 and the forward within 2 % (the controls); falsified if quantize at d = 64 gains less than 10 %
    of its time."""
    after = _loads_after("fp8halfrows_*.csv")
    if not after:
        return provenance([], HALF_HOW)
    slug = _one_gpu(after, "step21-half-rows", "half-rows")
    R, W = _ceilings(slug, "fp8halfrowspeaks")
    base_file = f"fp8halfbase_{slug}.csv" if common.rows(f"fp8halfbase_{slug}.csv") else f"fp8slicesbase_{slug}.csv"
    before = _loads_before(base_file)
    body, qs, amaxs, gains, ctrl = [], [], [], [], []
    for k, r, (p, a, q), (pb, ab, qb), up in _pairs(after, before, R, W):
        if k[0] == 64:
            qs.append(q), amaxs.append(a)
            if "quantize" in p and "quantize" in pb:
                gains.append(1 - p["quantize"] / pb["quantize"])
        ctrl += [p[part] / pb[part] for part in ("amax", "quantize", ATTENTION_KERNEL)
                 if (k[0] != 64 or part == ATTENTION_KERNEL) and part in p and part in pb]
        body.append([k[0], k[1], _f2(ab), _f2(a), _us(pb, "quantize"), _us(p, "quantize"), _f2(qb), _f2(q),
                     f"{up:.3f}" if up is not None else "–", "PASS" if r["pass"] == "1" else "FAIL"])
    lines = []
    if qs:
        nq = sum(x is not None and x >= 0.70 for x in qs)
        na = sum(x is not None and x >= 0.80 for x in amaxs)
        lines.append(f"At d = 64, quantize at or above 0.70 of its bytes' time at the ceilings: **{nq} of {len(qs)}**; amax "
                     f"at or above 0.80 of the read ceiling: **{na} of {len(amaxs)}** (predicted all: "
                     f"**{'held' if nq == na == len(qs) else 'missed'}**).")
    if gains:
        fired = min(gains) < 0.10
        lines.append(f"The falsifier, quantize at d = 64 gaining less than 10 % of its time: gains "
                     f"{', '.join(f'{100 * g:.0f} %' for g in gains)}: **{'fired' if fired else 'did not fire'}**.")
    if ctrl:
        lines.append(_control("The controls (amax and quantize at d = 128 and 256, the forward kernel everywhere), "
                              "with / without", ctrl))
    same = base_file.startswith("fp8halfbase")
    rs, ceil = _used_and_ceilings(after, before, R, W, "the half-rows run", "`fp8halfrowspeaks`")
    return (provenance(rs, HALF_HOW) + " _Kernel time (CUPTI, cold L2), step 21 at its defaults, B·N = 16k, no mask; "
            "'with' is `[half-rows]` (two rows a warp at d = 64), 'without' one row a warp, "
            + ("the two runs minutes apart on one machine" if same else
               f"from `{base_file}`, an earlier run on another machine of the same kind, so the controls also hold "
               "the difference between two machines")
            + "; a share is the time a kernel's bytes take at the GPU's streaming rates over its own time; the speed-up "
            "is the whole call's, without over with._" + ceil + "\n\n"
            + table(["d", "N", "amax share without", "amax share with", "quantize µs without", "quantize µs with",
                     "quantize share without", "quantize share with", "call speed-up", "check"], body)
            + "\n\n" + " ".join(lines))
