"""Step 17's tables: the decode target run (scripts/decode_target.py), its clocks, and the probes' logs
(plots/data/logs/<commit>/) the merge and --splits ablations come from."""
import os
import re

from . import common
from .common import DATA, geomean, provenance, table, target_axis
from .peers import peers_note


def decode_rows():
    """decode_*.csv (scripts/decode_target.py, the decode phase of scripts/peer_tables.sh): the rows,
    the measured read bandwidth, the (B, L) points, and a getter by kind, backend, B, L and page size."""
    rs = common.rows("decode_*.csv")
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
        for page in target_axis("decode", "pages", str):
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
