#!/usr/bin/env python3
"""Step 17's target run (docs/17_decode.md): decoding on one GPU, every peer in the same run.

  scripts/decode_target.py OUT.csv [--build DIR] [--quick] [--bs LIST] [--caches LIST] [--pages LIST]
                           [--reps 20] [--graph 10] [--commit HASH] [--deadline EPOCH_S]

The arguments of its siblings (scripts/peers.py): the CSV first, then flags. --build is the build folder
(default: FA_BUILD, else build/); the older spelling `decode_target.py BUILD_DIR OUT.csv` still works.
The points' defaults are the decode matrix of scripts/targets.txt (bs, caches, pages).

On one GPU, in this order, one CSV row each:
  - the HBM read bandwidth, measured by `bench --peaks` (a streaming read of 4 GiB);
  - step 17 on every (B, cache length) point: bf16, d = 128, H = 32, HKV = 8, one new token per
    sequence attending to a cache of L tokens (L − 1 held plus the one appended), contiguous and
    paged (--pages), each checked against the reference (step17 --csv; pass = 1);
  - step 12 as a prefill kernel on the same shapes at B = 1 (one query row per head: its grid of
    B·H Q tiles);
  - PyTorch's scaled_dot_product_attention, every backend alone, with enable_gqa=True on the same
    contiguous shapes (q [B, 32, 1, 128], k and v [B, 8, L, 128]); one that refuses gets a row with
    its reason and no time.
Each row: kind, B, L, page size, the cache's bytes (K and V of every visible token), pass, and the
call's time by the course's one clock (scripts/clock.py; docs/profiling.md, "One clock") on both
sides: kernel_us (every kernel of one call summed, cold L2) with its bytes/s share of the measured
bandwidth (kernel_pct_of_measured_bw), graph_us (--graph calls in one CUDA graph, per call), and as a
third column `us`, CUDA events around one call (a C++ launch for the steps, a Python call for
PyTorch) with its share (pct_of_measured_bw). Points whose cache would not fit the GPU are left out
and named. Without a GPU it says why and exits 0.
"""
import argparse
import csv
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True  # clock.py imported from the source tree: no __pycache__ there
sys.path.insert(0, HERE)
from clock import KERNEL_CLOCK, Clock, first_line, load_torch, run_commit, utc_date  # noqa: E402
from doctables.common import read_targets  # noqa: E402  (scripts/targets.txt, the one definition)

H, HKV, D = 32, 8, 128
FIELDS = ["date", "commit", "device", "kind", "backend", "B", "cache_len", "page_size", "us", "cache_bytes",
          "bytes_per_s", "pct_of_measured_bw", "pass", "note", "kernel_us", "kernel_pct_of_measured_bw", "graph_us",
          "kernels", "kernels_us", "clock"]


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def step_row(build, step, args):
    """One step program run with --csv: a dict of its timing columns (ms, kernel_ms, graph_ms, kernels_ms,
    clock), pass and note; ms None when it did not run."""
    rc, out, err = run([os.path.join(build, step)] + args + ["--csv"])
    if rc == 2:
        return {"ms": None}, 0, "refused: " + (err.strip().splitlines() or ["?"])[-1]
    lines = [l for l in out.splitlines() if l.strip()]
    if len(lines) < 2:
        return {"ms": None}, 0, "no output (exit %d): %s" % (rc, err.strip()[-200:])
    row = dict(zip(next(csv.reader([lines[0]])), next(csv.reader([lines[1]]))))
    num = lambda k: float(row[k]) if row.get(k) not in ("", None) else None
    t = {"ms": num("ms"), "kernel_ms": num("kernel_ms"), "graph_ms": num("graph_ms"), "clock": row.get("clock", ""),
         "kernels_ms": row.get("kernels_ms", "")}
    return t, int(row["pass"]), "" if rc == 0 else "exit %d" % rc


def parse_args(argv=None):
    t = {axis: ",".join(v) for (m, axis), v in read_targets().items() if m == "decode"}
    ap = argparse.ArgumentParser(description="Step 17's target run: step 17, step 12 as prefill and every SDPA "
                                             "backend on the decode matrix, one CSV row each.")
    ap.add_argument("paths", nargs="+", metavar="OUT.csv", help="the CSV to write (older spelling: BUILD_DIR OUT.csv)")
    ap.add_argument("--build", default="", help="the build folder holding step17, step12 and bench "
                    "(default: FA_BUILD, else build/)")
    ap.add_argument("--quick", action="store_true", help="B = 1 and 16, L = 4k and 64k, one page size")
    ap.add_argument("--bs", default=t["bs"], help="comma-separated batch sizes (default: scripts/targets.txt)")
    ap.add_argument("--caches", default=t["caches"],
                    help="comma-separated cache lengths in tokens (default: scripts/targets.txt)")
    ap.add_argument("--pages", default=t["pages"],
                    help="comma-separated page sizes of the paged runs, empty for none (default: scripts/targets.txt)")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--graph", type=int, default=10, help="calls per CUDA graph (default 10)")
    ap.add_argument("--commit", default="", help="the rows' commit (default: FA_COMMIT, else git's)")
    ap.add_argument("--deadline", type=float, default=0.0, help="epoch seconds after which no new point starts "
                    "(its rows say so)")
    args = ap.parse_args(argv)
    if len(args.paths) == 2:  # the older spelling: BUILD_DIR OUT.csv
        if args.build:
            ap.error("a build folder twice: BUILD_DIR and --build")
        args.build, args.out = args.paths
    elif len(args.paths) == 1:
        args.out = args.paths[0]
    else:
        ap.error("one OUT.csv (or BUILD_DIR OUT.csv)")
    args.build = args.build or os.environ.get("FA_BUILD") or os.path.join(os.path.dirname(HERE), "build")
    return args


def main():
    args = parse_args()
    if args.graph < 1 or args.reps < 1:
        print("decode_target.py: --graph and --reps must be at least 1", file=sys.stderr)
        return 2
    torch = load_torch("decode_target.py")
    if torch is None:
        return 0
    try:
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError as e:
        print(f"decode_target.py: skipped: this PyTorch has no torch.nn.attention ({e})", file=sys.stderr)
        return 0
    args.commit = run_commit(args.commit)
    clock = Clock(torch, reps=args.reps, graph_calls=args.graph)
    bs = [int(x) for x in args.bs.split(",")]
    caches = [int(x) for x in args.caches.split(",")]
    pages = [int(x) for x in args.pages.split(",")] if args.pages else []
    if args.quick:
        bs, caches, pages = [1, 16], [4096, 65536], pages[:1]
    device = torch.cuda.get_device_name(0)
    date = utc_date()
    free = torch.cuda.mem_get_info()[0]
    f = open(args.out, "w", newline="")
    w = csv.DictWriter(f, fieldnames=FIELDS)
    w.writeheader()
    base = {"date": date, "commit": args.commit, "device": device}

    peaks = args.out + ".peaks.csv"
    if os.path.exists(peaks):
        os.remove(peaks)
    rc, _, err = run([os.path.join(args.build, "bench"), "--peaks", "--out", peaks, "--commit", args.commit])
    if rc != 0:
        print("decode_target.py: bench --peaks failed: " + err, file=sys.stderr)
        return 1
    with open(peaks) as pf:  # one row per ceiling (peak, unit, value, amount, reps, ms): the HBM read's
        peak = next((r for r in csv.DictReader(pf) if r["peak"] == "hbm-read"), None)
    if peak is None:
        print("decode_target.py: bench --peaks wrote no hbm-read row", file=sys.stderr)
        return 1
    bw = float(peak["value"])
    w.writerow({**base, "kind": "hbm-read", "backend": "bench --peaks", "us": float(peak["ms"]) * 1e3,
                "cache_bytes": peak["amount"], "bytes_per_s": bw, "pct_of_measured_bw": 100.0, "note": "streaming read"})
    f.flush()
    print(f"decode_target.py: HBM read {bw / 1e12:.3f} TB/s", file=sys.stderr)

    backends = [("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION),
                ("efficient", SDPBackend.EFFICIENT_ATTENTION), ("math", SDPBackend.MATH)]
    failed = 0
    points = [(b, L) for b in bs for L in caches]
    for n, (b, L) in enumerate(points):
        cache_bytes = 2 * b * HKV * L * D * 2
        point = {**base, "B": b, "cache_len": L, "cache_bytes": cache_bytes}
        # The step's paged run holds the cache twice (inputs and pool); PyTorch's once.
        if 2.5 * cache_bytes > free:
            w.writerow({**point, "kind": "skipped", "note": "the cache and its pool do not fit the GPU's free memory"})
            continue
        if args.deadline and time.time() > args.deadline:
            w.writerow({**point, "kind": "skipped", "note": "past the run's deadline"})
            continue
        t0 = time.time()

        def emit(kind, backend, page, t, ok, note=""):
            row = {**point, "kind": kind, "backend": backend, "page_size": page, "pass": ok, "note": note}
            ms, kern, graph = t.get("ms"), t.get("kernel_ms"), t.get("graph_ms")
            if ms is not None:
                row.update(us=ms * 1e3, bytes_per_s=cache_bytes / (ms * 1e-3), pct_of_measured_bw=100.0 * cache_bytes / (ms * 1e-3) / bw)
            if kern is not None:
                row.update(kernel_us=kern * 1e3, kernel_pct_of_measured_bw=100.0 * cache_bytes / (kern * 1e-3) / bw,
                           clock=t.get("clock", ""))
            if graph is not None:
                row.update(graph_us=graph * 1e3)
            for key in ("kernels", "kernels_us"):
                if t.get(key) not in (None, ""):
                    row[key] = t[key]
            w.writerow(row)
            f.flush()

        def us_parts(field):  # "name:ms;name:ms" -> "name:us;..." and the count
            parts = [p.rsplit(":", 1) for p in field.split(";") if p]
            return ";".join(f"{n}:{float(x) * 1e3:.2f}" for n, x in parts), len(parts)

        shape = ["--b", str(b), "--h", str(H), "--hkv", str(HKV), "--qlen", "1", "--nk", str(L), "--cache-lens", str(L - 1),
                 "--d", str(D), "--dtype", "bf16", "--reps", str(args.reps), "--graph", str(args.graph)]
        for page in [0] + pages:
            t, ok, note = step_row(args.build, "step17", shape + ["--page-size", str(page) if page else "none"])
            if t.get("kernels_ms"):
                t["kernels_us"], t["kernels"] = us_parts(t["kernels_ms"])
            emit("step17", "paged" if page else "contiguous", page or "", t, ok, note)
            failed += 0 if ok else 1
        if b == 1:
            t, ok, note = step_row(args.build, "step12", ["--b", "1", "--h", str(H), "--hkv", str(HKV), "--n", "1", "--nk", str(L),
                                                          "--d", str(D), "--dtype", "bf16", "--reps", str(args.reps),
                                                          "--graph", str(args.graph)])
            emit("step12", "prefill", "", t, ok, note)
        q = torch.randn(b, H, 1, D, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(b, HKV, L, D, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(b, HKV, L, D, device="cuda", dtype=torch.bfloat16)
        for name, be in backends:
            try:
                with sdpa_kernel(be):
                    fn = lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
                    fn()
                    notes = ["enable_gqa=True"]
                    c = clock.time_call(fn, notes, "the call")  # the same three clocks as scripts/peers.py
                    t = {"ms": c["event_ms"], "kernel_ms": c["kernel_ms"], "kernels": c["kernels"], "clock": KERNEL_CLOCK}
                    if c["graph_ms"] is not None:
                        t["graph_ms"] = c["graph_ms"]
                    if c["fallbacks"]:
                        notes.append(f"{c['fallbacks']} GPU records placed by their start")
                emit("sdpa", name, "", t, "", "; ".join(notes))
            except Exception as e:  # a backend that refuses the shape, or runs out of memory
                emit("sdpa", name, "", {}, "", "refused: " + first_line(e, 160))
                torch.cuda.empty_cache()
        del q, k, v
        torch.cuda.empty_cache()
        print(f"decode_target.py: [{n + 1}/{len(points)}] B={b} L={L} done in {time.time() - t0:.1f} s", file=sys.stderr)
    f.close()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
