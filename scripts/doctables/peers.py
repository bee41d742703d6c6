"""The tables that set a step beside PyTorch's SDPA backends (scripts/peer_tables.sh, scripts/peers.py):
the WMMA steps, the forward and backward target matrices, step 16 at d = 256. Each carries the one
clock's caption (common.clock_caption through peers_note)."""
from . import common
from .common import clock_caption, geomean, kms, ktf, plain_variant, point, provenance, table, target_axis, target_points
from .steps import step13_rows


def versus_peers():
    """Our fastest WMMA forward (step 07) and backward (step 08, fused) against PyTorch's SDPA backends
    (scripts/peer_tables.sh early), fp16, by kernel time on both sides: times and the ratio to flash (FA2)."""
    ours = {}
    early = [r for r in common.rows("clock_*_early.csv") if r["dtype"] == "fp16" and r.get("kernel_ms")]
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


# Step 13's FlashAttention-2 target matrix (scripts/targets.txt, "bwd"), as scripts/bwd_target.sh runs it:
# every point the table should have, so that a point the run did not reach shows as a row that says so.
BWD_TARGET_POINTS = target_points("bwd")


def peer_rows(kind, gpu=None, commit=None):
    """The peers' rows of one phase of scripts/peer_tables.sh (peers_*_clock_KIND.csv), status ok, by
    (backend, dtype, d, causal, N); with `gpu`, that GPU's rows alone (a phase run on two GPUs); with
    `commit`, one run's alone (a GPU's file holding two runs)."""
    out = {}
    for r in common.rows(f"peers_*_clock_{kind}.csv"):
        if r["status"] == "ok" and (gpu is None or r.get("gpu") == gpu) and (commit is None or r.get("commit") == commit):
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


def bwd_target(step="13", ours=None, kind="bwd", flash_goal=(1.0, 0.85), cudnn_goal=None,
               how="scripts/peer_tables.sh OUTDIR bwd"):
    """A backward step against PyTorch's flash (FlashAttention-2) and cuDNN backends, per point of the
    backward target matrix, by kernel time on both sides: TFLOP/s on FlashAttention's convention (2.5 ×
    the forward's 4·B·H·N²·d, halved with the mask) and the ratios. `ours`: the step's rows (default:
    step 13's of clock_*_bwd.csv), `kind`: the peers' file (peers_*_clock_KIND.csv). The closing lines:
    geometric mean and minimum of step / flash and of step / cuDNN against the goals given as
    (geometric mean, no point below), and the points of the matrix that have no row."""
    ours = step13_rows(pattern="clock_*_bwd.csv") if ours is None else ours
    if not ours:
        return provenance([], how)
    peers = peer_rows(kind)
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
    head = provenance(ours, how)
    head += peers_note(used_peers, ours) if used_peers else " _No peer run covers these points: no ratios._"
    table_ = table(["dtype", "d", "causal", "N", "B×H", f"step {step} bwd TFLOP/s", "flash (FA2) bwd TFLOP/s",
                    f"step {step} / flash", "cuDNN bwd TFLOP/s", f"step {step} / cuDNN"], body)
    lines = []
    for name, acc, goal in (("flash", vs_flash, flash_goal), ("cuDNN", vs_cudnn, cudnn_goal)):
        if not acc:
            continue
        xs = [x for x, _ in acc]
        low, (dt, d, c, n) = min(acc)
        text = (f"Over the {len(acc)} points with both: geometric mean of step {step} / {name} **{geomean(xs):.3f}**"
                + (f" (target ≥ {goal[0]})" if goal else "") + f"; minimum **{low:.3f}** ({dt}, d = {d}, "
                f"{'causal' if c else 'no mask'}, N = {n}" + (f"; target: none below {goal[1]}" if goal and goal[1] else "")
                + f"); range {min(xs):.3f}–{max(xs):.3f}")
        if goal and goal[1]:
            text += f"; {sum(x < goal[1] for x in xs)} below {goal[1]}, {sum(x < goal[0] for x in xs)} below {goal[0]}"
        lines.append(text + ".")
    if missing:
        names = "; ".join(f"{dt} d = {d} {'causal' if c else 'no mask'} N = {n}" for dt, d, c, n in missing)
        lines.append(f"**Not measured: {len(missing)} of the {len(BWD_TARGET_POINTS)} points** ({names}).")
    fails = sum(r["bwd_pass"] != "1" for r in ours)
    lines.append(f"{fails} row(s) FAILED the gradient check." if fails else
                 "Every measured row passed its gradient check (dQ, dK, dV by FlashAttention's rule).")
    return head + "\n\n" + table_ + "\n\n" + " ".join(lines)


def bwd19_target():
    """Step 19 beside flash and cuDNN (clock_*_bwd19.csv and peers_*_clock_bwd19.csv: one run of
    `bench --steps 19` and scripts/peers.py on the backward matrix), against the goals docs/19 sets: step 19 /
    cuDNN ≥ 1.0 as a geometric mean with no point below 0.85, step 19 / flash ≥ 1.6."""
    ours = [r for r in common.rows("clock_*_bwd19.csv") if r["step"] == "19" and plain_variant(r["variant"]) == "-" and r.get("bwd_ms")]
    return bwd_target("19", ours, "bwd19", flash_goal=(1.6, None), cudnn_goal=(1.0, 0.85),
                      how="build/bench --steps 19 and scripts/peers.py (docs/19_hopper_backward.md, 'Measured')")


def bwd19_deterministic():
    """Step 19 with --deterministic on against its plain backward, per point of the same run
    (clock_*_bwd19.csv: bench --steps 19 --variants all), by kernel time: both times, TFLOP/s on
    FlashAttention's convention, and the deterministic one's throughput as a fraction of the plain one's
    (plain time / deterministic time). Closing line: that fraction's geometric mean and range against
    the goal docs/19 sets (at least 0.8), and whether every deterministic row passed its gradient check."""
    rs = [r for r in common.rows("clock_*_bwd19.csv") if r["step"] == "19" and r.get("bwd_kernel_ms")]
    plain = {point(r): r for r in rs if plain_variant(r["variant"]) == "-"}
    det = {point(r): r for r in rs if plain_variant(r["variant"]) == "deterministic=on"}
    keys = sorted(set(plain) & set(det), key=lambda k: (k[0], -k[1], k[2], k[3]))
    if not keys:
        return provenance([], "build/bench --steps 19 --variants all (docs/19_hopper_backward.md, 'Deterministic')")
    body, fr, fails = [], [], 0
    for k in keys:
        a, b = plain[k], det[k]
        x = kms(a, "bwd") / kms(b, "bwd")
        fr.append(x)
        fails += b["bwd_pass"] != "1"
        body.append([k[0], k[1], "yes" if k[2] else "no", k[3], f"{kms(a, 'bwd'):.3f}", f"{kms(b, 'bwd'):.3f}",
                     f"{ktf(a, 'bwd'):.0f}", f"{ktf(b, 'bwd'):.0f}", f"{x:.2f}"])
    met = "met" if min(fr) >= 0.8 else "not met"
    return (provenance([plain[k] for k in keys] + [det[k] for k in keys]) + "\n\n" + table(
        ["dtype", "d", "causal", "N", "plain ms", "deterministic ms", "plain TFLOP/s", "deterministic TFLOP/s",
         "deterministic / plain (throughput)"], body)
        + f"\n\nKernel time (CUPTI, every kernel of the backward summed, cold L2). Deterministic / plain over the "
          f"{len(fr)} points: geometric mean **{geomean(fr):.2f}**, range {min(fr):.2f}–{max(fr):.2f} "
          f"(goal: at least 0.8 at every point — {met}); deterministic rows failing their gradient check: {fails}.")


# The Hopper steps' target matrix (scripts/targets.txt, "fwd"), as scripts/fwd_target.sh runs it (steps 12,
# 14 and 15 beside flash and cuDNN): every point the table should have.
FWD_TARGET_POINTS = target_points("fwd")


def fwd_rows(phase="fwd"):
    """A forward phase of scripts/peer_tables.sh (fwd, clock_*_fwd.csv: steps 12, 14, 15, 16 at d = 64, 128;
    14-16 at 256; fwd20, clock_*_fwd20.csv: steps 16 and 20) and its peers (peers_*_clock_PHASE.csv), by
    (step,) + point and (backend,) + point."""
    ours = [r for r in common.rows(f"clock_*_{phase}.csv") if r.get("kernel_ms")]
    return ours, {(r["step"],) + point(r): r for r in ours}, peer_rows(phase)


def fwd_rows_on(phase, gpu, commit=None):
    """fwd_rows of one GPU's files alone (a phase measured on two GPUs: fwd20 on an H200, then on an H100);
    with `commit`, of one run on it (its file may hold two, appended: ours and the peers at one commit)."""
    ours = [r for r in common.rows(f"clock_*_{phase}.csv")
            if r.get("kernel_ms") and r.get("device") == gpu and (commit is None or r.get("commit") == commit)]
    return ours, {(r["step"],) + point(r): r for r in ours}, peer_rows(phase, gpu, commit)


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
    for dt in target_axis("fwd", "dtypes", str):
        for c in target_axis("fwd", "causal"):
            for n in target_axis("fwd", "ns"):
                key = (dt, 256, c, n)
                r16, r15, r14 = by.get(("16",) + key), by.get(("15",) + key), by.get(("14",) + key)
                if not r16:
                    body.append([dt, "yes" if c else "no", n, "not measured"] + ["–"] * 7)
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


def bwd19_point():
    """Issue 34's single point, rerun on its own (point_*_bwd19.csv: bench --steps 19 --variants all at fp16 and
    bf16, d = 128, N = 16k, no mask; pointpeers_*_bwd19.csv: scripts/peers.py's flash and cuDNN at the same
    shape, right after, in the same call): step 19's backward TFLOP/s by kernel time, plain and
    deterministic, beside cuDNN's. Closing line: the 550 TFLOP/s goal and deterministic ≥ 0.8 of plain."""
    ours = [r for r in common.rows("point_*_bwd19.csv") if r["step"] == "19" and kms(r, "bwd")]
    peers = [r for r in common.rows("pointpeers_*_bwd19.csv") if r.get("bwd_kernel_ms") and r["causal"] == "0"]
    how = "build/bench --steps 19 --ns 16384 --ds 128 --causal 0 --variants all, then scripts/peers.py (docs/19, 'Measured')"
    if not ours:
        return provenance([], how)
    cud = {r["dtype"]: r for r in peers if r["backend"] == "cudnn"}
    fl = {r["dtype"]: r for r in peers if r["backend"] == "flash"}
    body, best = [], {}
    for r in sorted(ours, key=lambda x: (x["dtype"], x["variant"])):
        dt, var = r["dtype"], plain_variant(r["variant"])
        tf = ktf(r, "bwd")
        c, f = cud.get(dt), fl.get(dt)
        best.setdefault(dt, {})[var] = kms(r, "bwd")
        body.append([dt, "on" if var == "deterministic=on" else "off", f"{kms(r, 'bwd'):.3f}", f"{tf:.1f}",
                     f"{float(c['bwd_kernel_tflops']):.1f}" if c else "–",
                     f"{float(c['bwd_kernel_ms']) / kms(r, 'bwd'):.3f}" if c else "–",
                     f"{float(f['bwd_kernel_ms']) / kms(r, 'bwd'):.3f}" if f else "–",
                     "PASS" if r["bwd_pass"] == "1" else "**FAIL**"])
    plain = [r for r in ours if plain_variant(r["variant"]) == "-"]
    top = max(ktf(r, "bwd") for r in plain) if plain else None
    dets = [v["-"] / v["deterministic=on"] for v in best.values() if "-" in v and "deterministic=on" in v]
    lines = []
    if top is not None:
        lines.append(f"Plain backward at its best dtype: **{top:.1f}** TFLOP/s (goal ≥ 550: "
                     f"**{'met' if top >= 550 else 'missed'}**).")
    if dets:
        lines.append(f"Deterministic / plain throughput: {', '.join(f'{x:.2f}' for x in dets)} (goal ≥ 0.8: "
                     f"**{'met' if min(dets) >= 0.8 else 'missed'}**).")
    return (provenance(ours, how) + " " + clock_caption(ours, peers) + "\n\n"
            + table(["dtype", "deterministic", "step 19 bwd ms", "step 19 bwd TFLOP/s", "cuDNN bwd TFLOP/s",
                     "step 19 / cuDNN", "step 19 / flash", "check"], body) + "\n\n" + " ".join(lines))
