#!/usr/bin/env python3
"""Nsight Compute's warp-state samples per SASS instruction, summed by opcode and by stall reason.

Where a kernel's warps wait, instruction by instruction: Nsight's "source" page (the SourceCounters
section) gives, for every SASS instruction, how many times the sampler found a warp there and why it
was not issuing. This sums those samples by opcode (BSYNC, HGMMA, MUFU, ...) and by stall reason over
the whole kernel, and writes one CSV row per opcode and per reason.

  scripts/ncu_sass.py --out CSV --label TEXT (--report R.ncu-rep | --source-csv F | --profile REGEX) [options] [-- PROGRAM ARGS]

  --profile REGEX  profile the first launch of the kernel matching REGEX in PROGRAM ARGS (given after --):
                   `ncu --clock-control none --set full --section SourceCounters -k regex:REGEX -c 1`
                   into a report in a temporary folder (kept: its path is printed), then read as --report
  --report R       an ncu report taken with `--section SourceCounters` (ncu is run to export its page)
  --source-csv F   that page already exported: `ncu -i R --page source --csv --print-source sass > F`
                   (gzipped if F ends in .gz)
  --label TEXT     what was profiled (the shape), written in every row
  --kernel SUBSTR  the kernel, when the page holds several (default: the first)
  --gpu, --commit, --date   the rows' leading columns (default: nvidia-smi's name, FA_COMMIT, now)
  --append         add to CSV (the header once) instead of writing it afresh

Columns: gpu, commit, date, label, kernel, kind (opcode | reason), name, samples_pct (share of all
the kernel's samples), static (instructions of that opcode in the SASS), executed (warp-level
executions; empty for a reason), top_reason and top_reason_pct (an opcode's most common reason, as a
share of that opcode's samples), samples (the warp-state samples themselves: at one sampling
interval, two runs' counts compare where their shares cannot). Exit status: 0 written, 1 no samples found, 2 a bad argument.
"""
import argparse
import collections
import csv
import datetime
import gzip
import io
import os
import subprocess
import sys
import tempfile

HEADER = ["gpu", "commit", "date", "label", "kernel", "kind", "name", "samples_pct", "static", "executed", "top_reason",
          "top_reason_pct", "samples"]


def opcode(sass):
    """The instruction's opcode without its predicate and modifiers: '@!P0 BRA 0x..' -> 'BRA'."""
    words = sass.split()
    if words and words[0].startswith("@"):
        words = words[1:]
    return words[0].split(".")[0] if words else ""


def pages(text):
    """Split the exported page into (kernel name, header, rows) blocks."""
    blocks, kernel, header, rows = [], None, None, []
    for rec in csv.reader(io.StringIO(text)):
        if not rec:
            continue
        if rec[0] == "Kernel Name":
            if header is not None:
                blocks.append((kernel, header, rows))
            kernel, header, rows = rec[1] if len(rec) > 1 else "", None, []
        elif header is None and "Source" in rec:
            header = rec
        elif header is not None:
            rows.append(rec)
    if header is not None:
        blocks.append((kernel, header, rows))
    return blocks


def summarize(header, rows):
    ix = {h: i for i, h in enumerate(header)}
    total_col = "Warp Stall Sampling (All Samples)"
    if total_col not in ix:
        raise SystemExit(f"ncu_sass.py: the page has no '{total_col}' column (profile with --section SourceCounters)")
    reasons = [h for h in header if h.startswith("stall_") and "Not Issued" not in h]

    def num(r, col):
        v = r[ix[col]].replace(",", "") if col in ix and ix[col] < len(r) else ""
        try:
            return int(float(v))
        except ValueError:
            return 0

    total = sum(num(r, total_col) for r in rows)
    by_op = collections.defaultdict(lambda: {"samples": 0, "static": 0, "executed": 0, "reasons": collections.Counter()})
    by_reason = collections.Counter()
    for r in rows:
        op = opcode(r[ix["Source"]])
        if not op:
            continue
        e = by_op[op]
        e["samples"] += num(r, total_col)
        e["static"] += 1
        e["executed"] += num(r, "Instructions Executed")
        for s in reasons:
            n = num(r, s)
            e["reasons"][s[len("stall_"):]] += n
            by_reason[s[len("stall_"):]] += n
    return total, by_op, by_reason


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--label", required=True)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--report")
    src.add_argument("--source-csv")
    src.add_argument("--profile")
    ap.add_argument("--kernel", default="")
    ap.add_argument("--gpu", default="")
    ap.add_argument("--commit", default=os.environ.get("FA_COMMIT", ""))
    ap.add_argument("--date", default="")
    ap.add_argument("--append", action="store_true")
    argv = sys.argv[1:]
    prog = argv[argv.index("--") + 1:] if "--" in argv else []
    a = ap.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    if a.profile:
        if not prog:
            print("ncu_sass.py: --profile needs the program to run after --", file=sys.stderr)
            return 2
        a.report = os.path.join(tempfile.mkdtemp(prefix="ncu_sass."), "profile.ncu-rep")
        cmd = ["ncu", "--clock-control", "none", "--set", "full", "--import-source", "no", "--section", "SourceCounters",
               "-k", "regex:" + a.profile, "-c", "1", "-f", "-o", os.path.splitext(a.report)[0]] + prog
        print("ncu_sass.py: " + " ".join(cmd), file=sys.stderr)
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0 or not os.path.exists(a.report):
            print(f"ncu_sass.py: ncu failed (rc {p.returncode}): {(p.stdout + p.stderr)[-2000:]}", file=sys.stderr)
            return 1
        print(f"ncu_sass.py: report {a.report}", file=sys.stderr)
    if a.report:
        p = subprocess.run(["ncu", "-i", a.report, "--page", "source", "--csv", "--print-source", "sass"], capture_output=True,
                           text=True)
        if p.returncode != 0:
            print(f"ncu_sass.py: ncu could not export {a.report}: {p.stderr.strip()}", file=sys.stderr)
            return 2
        text = p.stdout
    else:
        opener = gzip.open if a.source_csv.endswith(".gz") else open
        with opener(a.source_csv, "rt", encoding="utf-8", errors="replace") as f:
            text = f.read()
    blocks = [b for b in pages(text) if a.kernel in (b[0] or "")]
    if not blocks:
        print("ncu_sass.py: no kernel" + (f" matching '{a.kernel}'" if a.kernel else "") + " on the page", file=sys.stderr)
        return 1
    kernel, header, rows = blocks[0]
    total, by_op, by_reason = summarize(header, rows)
    if total == 0:
        print("ncu_sass.py: the page has no warp-state samples", file=sys.stderr)
        return 1
    gpu = a.gpu
    if not gpu:
        try:
            gpu = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                                 text=True).stdout.splitlines()[0].strip()
        except (OSError, IndexError):
            gpu = "unknown"
    date = a.date or datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%MZ")
    lead = [gpu, a.commit or "unknown", date, a.label, kernel]
    out_rows = []
    for op, e in sorted(by_op.items(), key=lambda kv: -kv[1]["samples"]):
        top, n = (e["reasons"].most_common(1) or [("", 0)])[0]
        out_rows.append(lead + ["opcode", op, f"{100.0 * e['samples'] / total:.2f}", e["static"], e["executed"], top,
                                f"{100.0 * n / e['samples']:.1f}" if e["samples"] else "", e["samples"]])
    for reason, n in by_reason.most_common():
        out_rows.append(lead + ["reason", reason, f"{100.0 * n / total:.2f}", "", "", "", "", n])
    new = not a.append or not os.path.exists(a.out) or os.path.getsize(a.out) == 0
    with open(a.out, "a" if a.append else "w", newline="") as f:
        w = csv.writer(f)
        if new:
            w.writerow(HEADER)
        w.writerows(out_rows)
    print(f"ncu_sass.py: {len(out_rows)} rows for {kernel[:80]} ({total} samples) -> {a.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
