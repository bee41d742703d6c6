#!/usr/bin/env python3
"""Set Nsight Compute's per-kernel byte counts beside a step's ledger, as CSV rows.

  ncu_ledger.py NCU_CSV LEDGER_CSV PREFIX [key=value ...]  >> out.csv

NCU_CSV is `ncu --csv --print-units base --log-file NCU_CSV ...` output (one row per kernel and
metric); LEDGER_CSV is the step program's `--ledger-csv` output (the forward's kernels, then the
backward's for a step that has one). A kernel whose name contains stepNN_NAME (e.g. step01_scores,
or step07_causal_skip launched by step 08 for its forward) is matched with the ledger's kernel
NAME, whichever step NN is; any other kernel (cuBLAS's) is reported under its own short name with
an empty ledger. PREFIX (e.g. step08_) is still accepted, for the scripts that pass it, but no
longer used: a step may launch another step's kernels. The key=value pairs become leading columns
(gpu, commit, N, ...). Prints a header when the environment sets HEADER=1.
"""
import csv
import os
import re
import sys

METRICS = {
    "l1tex__t_bytes_pipe_lsu_mem_global_op_ld.sum": "req_read",     # bytes requested by global loads (sectors x 32)
    "l1tex__t_bytes_pipe_lsu_mem_global_op_st.sum": "req_write",    # bytes requested by global stores
    "lts__t_sectors_srcunit_tex_op_read.sum": "l2_read_sectors",
    "lts__t_sectors_srcunit_tex_op_write.sum": "l2_write_sectors",
    "dram__bytes_read.sum": "dram_read",
    "dram__bytes_write.sum": "dram_write",
    "gpu__time_duration.sum": "ncu_ns",
    # Also collected by gpu_session.sh (empty columns when a profile lacks them):
    "l1tex__t_bytes_pipe_lsu_mem_global_op_red.sum": "red_bytes",            # atomic reductions (atomicAdd)
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum": "bank_conflicts",  # extra shared-memory wavefronts
    "sm__warps_active.avg.pct_of_peak_sustained_active": "occupancy_pct",    # achieved occupancy
    "launch__registers_per_thread": "registers",
    "launch__shared_mem_per_block_static": "smem_static",
    "launch__shared_mem_per_block_dynamic": "smem_dynamic",
}
# Properties of a launch, not counts: take the largest over a kernel's launches instead of the sum.
PER_LAUNCH = {"occupancy_pct", "registers", "smem_static", "smem_dynamic"}
OPTIONAL = ["red_bytes", "bank_conflicts", "occupancy_pct", "registers", "smem_static", "smem_dynamic"]


# A step's kernel: stepNN_NAME, NAME up to the first character that is not a word character
# (the template arguments' '<' or the parameters' '('). The ledger names it NAME.
KERNEL = re.compile(r"step\d\d_(\w+)")


def number(s):
    s = s.replace(",", "").strip()
    try:
        return float(s)
    except ValueError:
        return None


def main():
    ncu_path, ledger_path, _prefix = sys.argv[1:4]  # PREFIX: accepted, unused (see above)
    extra = [kv.split("=", 1) for kv in sys.argv[4:]]
    with open(ncu_path, newline="") as f:
        lines = f.read().splitlines()
    start = next((i for i, l in enumerate(lines) if l.startswith('"ID"')), None)
    if start is None:
        sys.exit(f"{ncu_path}: no ncu CSV table found")
    rows = list(csv.DictReader(lines[start:]))
    # Sum per kernel name (one launch each with --reps 0, but cuBLAS may launch a kernel per batch).
    kernels = {}
    order = []
    for r in rows:
        name = r["Kernel Name"]
        m = KERNEL.search(name)
        key = m.group(1) if m else re.sub(r"\W+", "_", name.split("(")[0].split("<")[0].replace("void ", "")).strip("_")[:60]
        if key not in kernels:
            kernels[key] = {v: 0.0 for v in METRICS.values()}
            kernels[key]["seen"] = set()
            kernels[key]["launches"] = set()
            order.append(key)
        metric = METRICS.get(r["Metric Name"])
        val = number(r["Metric Value"])
        if metric and val is not None:
            k = kernels[key]
            k[metric] = max(k[metric], val) if metric in PER_LAUNCH else k[metric] + val
            k["seen"].add(metric)
        kernels[key]["launches"].add(r["ID"])
    ledger = {}
    with open(ledger_path, newline="") as f:
        for r in csv.DictReader(f):
            ledger[r["kernel"]] = r
    cols = [k for k, _ in extra] + ["kernel", "launches", "ledger_read", "ledger_write", "req_read", "req_write",
                                    "l2_read", "l2_write", "dram_read", "dram_write", "ncu_ms", "ledger_atomic"] + OPTIONAL
    out = csv.writer(sys.stdout, lineterminator="\n")
    if os.environ.get("HEADER") == "1":
        out.writerow(cols)
    for key in order:
        k = kernels[key]
        led = ledger.get(key, {})
        out.writerow([v for _, v in extra] + [
            key, len(k["launches"]), led.get("hbm_read", ""), led.get("hbm_write", ""),
            int(k["req_read"]), int(k["req_write"]), int(k["l2_read_sectors"] * 32), int(k["l2_write_sectors"] * 32),
            int(k["dram_read"]), int(k["dram_write"]), f'{k["ncu_ns"] / 1e6:.4f}', led.get("hbm_atomic", "")] +
            [(f'{k[m]:.1f}' if m == "occupancy_pct" else int(k[m])) if m in k["seen"] else "" for m in OPTIONAL])


if __name__ == "__main__":
    main()
