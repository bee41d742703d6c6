"""The Python package's tables (docs/python.md): the small GPT trained with both attention backends, and
the package's kernel time beside the step programs' and SDPA's."""
import statistics
from collections import defaultdict

from . import common
from .common import clock_caption, geomean, kms, point, provenance, table, plain_variant
from .peers import peers_note

GPT_HOW = "python/examples/gpt.py (docs/python.md, 'A small GPT')"
PEERS_HOW = "scripts/peers.py OUT.csv --backends package,flash,cudnn (docs/python.md)"
SMOOTH = 20  # steps: the loss curves are compared as trailing means over this many steps, as plot_gpt draws them


def _smoothed(losses):
    out, acc = [], 0.0
    for i, x in enumerate(losses):
        acc += x
        if i >= SMOOTH:
            acc -= losses[i - SMOOTH]
        out.append(acc / min(i + 1, SMOOTH))
    return out


def gpt_agreement(steps_rows):
    """Per step, each backend's smoothed loss over its seeds: the steps where the two backends' means differ
    by no more than the larger of their seed-to-seed spreads (lowest to highest seed), of all steps both
    have. Returns (agreeing steps, steps, the largest difference over the spread)."""
    curves = defaultdict(dict)  # backend -> seed -> [loss by step]
    for r in sorted(steps_rows, key=lambda r: int(r["step"])):
        curves[r["backend"]].setdefault(r["seed"], []).append(float(r["loss"]))
    if len(curves) != 2:
        return 0, 0, None
    smooth = {b: [_smoothed(v) for v in seeds.values()] for b, seeds in curves.items()}
    n = min(len(c) for runs in smooth.values() for c in runs)
    agree, worst = 0, 0.0
    for i in range(n):
        means, spreads = [], []
        for runs in smooth.values():
            xs = [c[i] for c in runs]
            means.append(statistics.mean(xs))
            spreads.append(max(xs) - min(xs))
        gap, room = abs(means[0] - means[1]), max(spreads)
        agree += gap <= room
        worst = max(worst, gap / room if room > 0 else float("inf") if gap > 0 else 0.0)
    return agree, n, worst


def python_gpt():
    """The small GPT (python/examples/gpt.py) trained with SDPA and with the package, per backend over its
    seeds: the final training and validation loss (mean, and lowest–highest), the median training step
    (CUDA events around a whole step), the median host time per step (the CPU's clock until the step is queued;
    rows from before gpt.py wrote it show "–") and the attention kernels' GPU time per step (Kineto). Closing lines:
    whether the curves agree within the seed-to-seed spread, the package's attention time over SDPA's, and its
    training step over SDPA's."""
    runs = common.rows("gpt_runs_*.csv")
    steps = common.rows("gpt_steps_*.csv")
    if not runs:
        return provenance([], GPT_HOW)
    by = defaultdict(list)
    for r in runs:
        by[r["backend"]].append(r)
    body, attn, step = [], {}, {}
    for backend in sorted(by):
        rs = by[backend]
        fl = [float(r["final_loss"]) for r in rs]
        fv = [float(r["final_val_loss"]) for r in rs if r["final_val_loss"]]
        sm = step[backend] = statistics.mean(float(r["step_ms_median"]) for r in rs)
        hm = [float(r["host_ms_median"]) for r in rs if r.get("host_ms_median")]
        am = [float(r["attn_kernel_ms_per_step"]) for r in rs if r["attn_kernel_ms_per_step"]]
        attn[backend] = statistics.mean(am) if am else None
        body.append([backend, len(rs), rs[0]["steps"], f"{statistics.mean(fl):.4f} ({min(fl):.4f}–{max(fl):.4f})",
                     f"{statistics.mean(fv):.4f} ({min(fv):.4f}–{max(fv):.4f})" if fv else "–", f"{sm:.1f}",
                     f"{statistics.mean(hm):.1f}" if hm else "–", f"{attn[backend]:.3f}" if attn[backend] is not None else "–"])
    r0 = runs[0]
    text = (provenance(runs) + f" _Model: {r0['layers']} layers, d_model {r0['d_model']}, {r0['heads']} heads, context "
            f"{r0['context']}, batch {r0['batch']}; training step by CUDA events, its host time by the CPU's clock, attention by Kineto's kernel records "
            f"({r0['attn_clock'] or 'not measured'})._\n\n")
    text += table(["backend", "seeds", "steps", "final loss", "final validation loss", "step ms (median)", "host ms (median)",
                   "attention fwd+bwd kernel ms per step"], body)
    agree, n, worst = gpt_agreement(steps)
    if n:
        text += (f"\n\nLoss curves (trailing means over {SMOOTH} steps): the backends' means differ by no more than the "
                 f"larger seed-to-seed spread at **{agree} of {n}** steps (largest difference over the spread "
                 f"{worst:.2f}).")
    if attn.get("steps") and attn.get("sdpa"):
        text += f" Attention kernel time per step, package / SDPA: **{attn['steps'] / attn['sdpa']:.2f}**."
    if step.get("steps") and step.get("sdpa"):
        text += f" Training step (the seeds' mean of each run's median), package / SDPA: **{step['steps'] / step['sdpa']:.2f}**."
    return text


HOST_HOW = "scripts/python_gpu.sh OUTDIR with FA_PYTEST=0 FA_PEERS=0, its gpt_runs_<gpu>.csv kept as gpthost_<gpu>.csv (docs/python.md)"
STEP_GOAL = 1.10  # docs/python.md's prediction after [spec-cache]: the package's step at most this × SDPA's


def python_gpt_host():
    """The host check of the small GPT (gpthost_*.csv: gpt.py's run rows, kept apart from the loss-curve runs of
    python-gpt because they are shorter and on one seed): per GPU, commit and backend the median step and host
    time and the attention kernels' time per step. Closing lines, per GPU and commit: the package's step over
    SDPA's against the prediction (at most 1.10×), and whether each backend's host time is below its step time
    (below: the GPU did not wait for the host)."""
    runs = common.rows("gpthost_*.csv")
    if not runs:
        return provenance([], HOST_HOW)
    by = defaultdict(list)
    for r in runs:
        by[(r["device"], r["commit"], r["backend"])].append(r)
    body, lines = [], []
    mean = lambda rs, k: statistics.mean(float(r[k]) for r in rs)  # noqa: E731
    for (dev, commit, backend), rs in sorted(by.items()):
        attn = [float(r["attn_kernel_ms_per_step"]) for r in rs if r.get("attn_kernel_ms_per_step")]
        body.append([dev, f"`{commit}`", backend, len(rs), rs[0]["steps"], f"{mean(rs, 'step_ms_median'):.2f}",
                     f"{mean(rs, 'host_ms_median'):.2f}", f"{statistics.mean(attn):.3f}" if attn else "–"])
    for dev, commit in sorted({k[:2] for k in by}):
        got = {b: by.get((dev, commit, b)) for b in ("sdpa", "steps")}
        if not all(got.values()):
            continue
        ratio = mean(got["steps"], "step_ms_median") / mean(got["sdpa"], "step_ms_median")
        waits = [b for b in ("sdpa", "steps") if mean(got[b], "host_ms_median") >= 0.95 * mean(got[b], "step_ms_median")]
        lines.append(f"{dev} at `{commit}`: the package's step / SDPA's **{ratio:.2f}** (prediction ≤ {STEP_GOAL:.2f}: "
                     f"**{'met' if ratio <= STEP_GOAL else 'missed'}**); host time within 5 % of the step time (the GPU "
                     f"waits for the host) for: {', '.join(waits) if waits else 'neither backend'}.")
    return (provenance(runs, HOST_HOW, many_gpus=True) + " _Median over the steps after the first tenth: step by CUDA events, host time by "
            "the CPU's clock until the step is queued; attention by Kineto's kernel records._\n\n"
            + table(["GPU", "commit", "backend", "seeds", "steps", "step ms", "host ms", "attention kernel ms per step"], body)
            + "\n\n" + " ".join(lines))


def python_peers():
    """The package's flash_attn_func by kernel time beside the step programs' own kernel time for the same
    kernels (clock_*_bwd19.csv: step 16's forward, step 19's backward) and beside SDPA's cuDNN and flash
    backends (the same peers.py run). Closing lines: package / step program per pass (the prediction: within
    3 % everywhere), and cuDNN's time over the package's."""
    rs = common.rows("pypeers_*.csv")
    pk = {point(r): r for r in rs if r["backend"] == "package" and r["status"] == "ok"}
    if not pk:
        return provenance([], PEERS_HOW)
    peer = {(r["backend"],) + point(r): r for r in rs if r["backend"] != "package" and r["status"] == "ok"}
    steps = {point(r): r for r in common.rows("clock_*_bwd19.csv")
             if r["step"] == "19" and plain_variant(r["variant"]) == "-" and r.get("bwd_kernel_ms")}
    keys = sorted(pk, key=lambda k: (k[0], -k[1], k[2], k[3]))
    body, fwd_r, bwd_r, cud_r, used_steps, used_peers = [], [], [], [], [], []
    f = lambda x: f"{x:.3f}" if x is not None else "–"  # noqa: E731
    for k in keys:
        p, s, c = pk[k], steps.get(k), peer.get(("cudnn",) + k)
        pf, pb = float(p["kernel_ms"]), float(p["bwd_kernel_ms"]) if p["bwd_kernel_ms"] else None
        sf, sb = (kms(s), kms(s, "bwd")) if s and (s["B"], s["H"]) == (p["B"], p["H"]) else (None, None)
        cb = float(c["bwd_kernel_ms"]) if c and c["bwd_kernel_ms"] else None
        if sf:
            fwd_r.append(pf / sf)
            used_steps.append(s)
        if sb and pb:
            bwd_r.append(pb / sb)
        if cb and pb:
            cud_r.append(cb / pb)
            used_peers.append(c)
        body.append([k[0], k[1], "yes" if k[2] else "no", k[3], f"{pf:.3f}", f(sf), f(pf / sf if sf else None),
                     f(pb), f(sb), f(pb / sb if sb and pb else None), f(cb / pb if cb and pb else None)])
    text = provenance(list(pk.values())) + (peers_note(used_peers, list(pk.values()), "scripts/peers.py")
                                            if used_peers else " " + clock_caption(list(pk.values()), list(pk.values())))
    if used_steps:
        text += " " + provenance(used_steps).replace("_Measured", "_The step programs' rows: measured")
    text += "\n\n" + table(["dtype", "d", "causal", "N", "package fwd ms", "step 16 fwd ms", "package / step 16",
                            "package bwd ms", "step 19 bwd ms", "package / step 19", "cuDNN / package (bwd)"], body)
    lines = []
    for name, xs in (("forward, package / step 16", fwd_r), ("backward, package / step 19", bwd_r),
                     ("backward, cuDNN / package", cud_r)):
        if xs:
            lines.append(f"{name}: geometric mean **{geomean(xs):.3f}**, range {min(xs):.3f}–{max(xs):.3f} "
                         f"over {len(xs)} points")
    return text + ("\n\n" + "; ".join(lines) + "." if lines else "")


COST_HOW = "python3 python/examples/host_cost.py --out plots/data/host_cost_<gpu>.csv (docs/python.md)"
COST_FWD_GAP = (100.0, 200.0)  # the prediction: the package's forward costs this many µs of host time more than SDPA's
DISPATCH_FWD_NEAR = 50.0  # [dispatch]'s prediction: the forward through autograd.Function within this many µs of SDPA's


def python_host_cost():
    """The host time per attention call (host_cost_*.csv, python/examples/host_cost.py): per GPU and commit,
    each backend's forward alone and forward with backward, in µs of the CPU's clock per call. Closing lines
    against docs/python.md's prediction: the package's forward over SDPA's by 100-200 µs; its backward dearer
    than its forward; (forward + backward) × the GPT's layers (its rows' `layers`: one of each per layer and step) beside the GPT's step gap between the backends
    on the same GPU (gpthost_*.csv, the newest commit there); and where the package's extra lies (between
    flash_attn_func and its implementations called directly, or in them)."""
    rs = common.rows("host_cost_*.csv")
    if not rs:
        return provenance([], COST_HOW)
    by = {(r["device"], r["commit"], r["backend"], r["pass"]): float(r["host_us_per_call"]) for r in rs}
    body, lines = [], []
    for dev, commit in sorted({k[:2] for k in by}):
        for backend in ("steps", "steps-function", "steps-direct", "sdpa"):
            if not any((dev, commit, backend, p) in by for p in ("fwd", "fwd+bwd")):
                continue  # steps-function: runs before [dispatch] have none
            f, fb = by.get((dev, commit, backend, "fwd")), by.get((dev, commit, backend, "fwd+bwd"))
            body.append([dev, f"`{commit}`", backend, f"{f:.1f}" if f else "–", f"{fb:.1f}" if fb else "–",
                         f"{fb - f:.1f}" if f and fb else "–"])
        g = lambda b, p: by.get((dev, commit, b, p))  # noqa: E731
        if not all(g(b, p) for b in ("steps", "steps-direct", "sdpa") for p in ("fwd", "fwd+bwd")):
            continue
        gap_f = g("steps", "fwd") - g("sdpa", "fwd")
        bwd = g("steps", "fwd+bwd") - g("steps", "fwd")
        gap_fb = g("steps", "fwd+bwd") - g("sdpa", "fwd+bwd")
        lines.append(f"{dev} at `{commit}`: the package's forward costs **{gap_f:.0f} µs** more host time per call than "
                     f"SDPA's (predicted {COST_FWD_GAP[0]:.0f}–{COST_FWD_GAP[1]:.0f}: "
                     f"**{'held' if COST_FWD_GAP[0] <= gap_f <= COST_FWD_GAP[1] else 'missed'}**); its backward "
                     f"{bwd:.0f} µs against its forward's {g('steps', 'fwd'):.0f} (predicted dearer: "
                     f"**{'held' if bwd > g('steps', 'fwd') else 'missed'}**).")
        run_date = max(r["date"] for r in rs if r["device"] == dev and r["commit"] == commit)
        steps_gpt = [r for r in common.rows("gpthost_*.csv") if r["device"] == dev and r["date"] <= run_date]
        if steps_gpt:  # the GPT's newest run on this GPU up to this measurement
            newest = max(steps_gpt, key=lambda r: r["date"])["commit"]
            med = {b: statistics.mean(float(r["step_ms_median"]) for r in steps_gpt
                                      if r["commit"] == newest and r["backend"] == b) for b in ("sdpa", "steps")
                   if any(r["commit"] == newest and r["backend"] == b for r in steps_gpt)}
            layers = {int(r["layers"]) for r in steps_gpt if r["commit"] == newest}
            if len(med) == 2 and len(layers) == 1:
                calls = layers.pop()  # one forward and one backward per layer and step
                per_step = calls * gap_fb / 1e3
                lines.append(f"{calls} × (forward + backward) over SDPA's: **{per_step:.2f} ms** per step, against "
                             f"the GPT's step gap of {med['steps'] - med['sdpa']:.2f} ms on the same GPU (`{newest}`): "
                             f"**{100 * per_step / (med['steps'] - med['sdpa']):.0f} %** of it.")
        if g("steps-function", "fwd") and g("steps-function", "fwd+bwd"):
            half = g("steps-function", "fwd+bwd") <= 0.5 * g("steps", "fwd+bwd")
            near = abs(g("steps-function", "fwd") - g("sdpa", "fwd")) <= DISPATCH_FWD_NEAR
            lines.append(f"[dispatch] through torch.autograd.Function: forward with backward **{g('steps-function', 'fwd+bwd'):.0f} µs** "
                         f"against the operators' {g('steps', 'fwd+bwd'):.0f} (predicted at most half: **{'held' if half else 'missed'}**); "
                         f"forward {g('steps-function', 'fwd'):.0f} µs against SDPA's {g('sdpa', 'fwd'):.0f} (predicted within "
                         f"{DISPATCH_FWD_NEAR:.0f} µs: **{'held' if near else 'missed'}**).")
        disp = [r for r in common.rows("gptdispatch_*.csv") if r["device"] == dev and r["commit"] == commit]
        ms = {(r["backend"], r["dispatch"]): float(r["step_ms_median"]) for r in disp}
        if all(k in ms for k in (("sdpa", "op"), ("steps", "op"), ("steps", "auto"))):
            a, b = ms[("steps", "op")] / ms[("sdpa", "op")], ms[("steps", "auto")] / ms[("sdpa", "op")]
            lines.append(f"The GPT in the same call (one seed, 300 steps; `gptdispatch_*.csv`): the package's step over SDPA's "
                         f"**{a:.3f}** with the operators, **{b:.3f}** with `FLASH_ATTN_STEPS_DISPATCH=auto` (predicted to "
                         f"narrow by at least 0.1: **{'held' if a - b >= 0.1 else 'missed'}**, by {a - b:.3f}).")
        inside = g("steps", "fwd+bwd") - g("steps-direct", "fwd+bwd")
        lines.append(f"Between `flash_attn_func` and its implementations called directly: **{inside:.0f} µs** per forward and "
                     f"backward; the implementations alone cost {g('steps-direct', 'fwd+bwd'):.0f} µs, SDPA "
                     f"{g('sdpa', 'fwd+bwd'):.0f} µs (predicted: most of the package's extra between the two rows: "
                     f"**{'held' if inside > gap_fb / 2 else 'missed'}**).")
    return (provenance(rs, COST_HOW, many_gpus=True) + " _Host time per call by the CPU's clock in one thread (the "
            "median of the repeats), B = 1, N = 128, H = 6, d = 64, bf16: small enough that the GPU keeps up. "
            "`steps` is `flash_attn_func`; `steps-function` the same with `FLASH_ATTN_STEPS_DISPATCH=auto` (eager calls "
            "through torch.autograd.Function, where the run has it); `steps-direct` the package's forward and backward implementations called "
            "as plain functions (no interface checks, no operator dispatch, no autograd)._\n\n"
            + table(["GPU", "commit", "backend", "fwd µs", "fwd+bwd µs", "bwd µs (the difference)"], body)
            + "\n\n" + " ".join(lines))
