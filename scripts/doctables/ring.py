"""Step 18's tables: ring_bench on one GPU and its projection to P GPUs, the timeline, ring_nccl."""
import csv
import glob
import os

from .common import DATA, provenance, table


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
