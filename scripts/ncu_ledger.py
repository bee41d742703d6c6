#!/usr/bin/env python3
"""Set Nsight Compute's per-kernel byte counts beside a step's ledger, as CSV rows.

  ncu_ledger.py NCU_CSV LEDGER_CSV PREFIX [key=value ...]  >> out.csv
  ncu_ledger.py --metrics     the metrics to ask ncu for, one column a line: "required NAME" for the
                              byte counts and time, "optional NAME|NAME..." for the rest (the first
                              name this ncu offers is used) — the one list scripts/gpu_session.sh reads

NCU_CSV is `ncu --csv --print-units base --log-file NCU_CSV ...` output (one row per kernel and
metric); LEDGER_CSV is the step program's `--ledger-csv` output (the forward's kernels, then the
backward's for a step that has one). A kernel whose name contains stepNN_NAME (e.g. step01_scores,
or step07_causal_skip launched by step 08 for its forward) is matched with the ledger's kernel
NAME, whichever step NN is; any other kernel (cuBLAS's) is reported under its own short name with
an empty ledger. PREFIX (e.g. step08_) is still accepted, for the scripts that pass it, but no
longer used: a step may launch another step's kernels. The key=value pairs become leading columns
(gpu, commit, N, ...). Prints a header when the environment sets HEADER=1.

Columns after the byte counts are empty where the profile lacks their metric (an older profile,
or an ncu that does not offer it: gpu_session.sh asks only for the names its ncu lists), so older
CSVs and newer ones share the leading columns in the same order.
"""
import csv
import os
import re
import sys

# Metric name -> column. Several names may feed one column (the same quantity under another name
# on another ncu or GPU): the first of them, in this order, that the profile holds is used.
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
    # Shared memory by operation: wavefronts beyond the minimum the access needs (bank conflicts),
    # and all wavefronts, for plain loads (LDS), stores (STS) and ldmatrix (LDSM).
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum": "bank_conflicts_ld",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum": "bank_conflicts_st",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ldsm.sum": "bank_conflicts_ldsm",
    "smsp__sass_l1tex_data_bank_conflicts_pipe_lsu_mem_shared_op_ldsm.sum": "bank_conflicts_ldsm",  # SASS-patched
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum": "wavefronts_ld",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ldsm.sum": "wavefronts_ldsm",
    "smsp__sass_l1tex_data_pipe_lsu_wavefronts_mem_shared_op_ldsm.sum": "wavefronts_ldsm",       # SASS-patched
    # cp.async (LDGSTS): its shared-memory writes' bank conflicts (steps 11+).
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ldgsts.sum": "bank_conflicts_cp_async",
    # Tensor pipe: % of the active cycles the HMMA (mma.sync, WMMA) pipe was busy.
    "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active": "tensor_pct",
    "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active": "tensor_pct",
    # The L2's side of the atomics (step 13's dQ): reduction requests and sectors it served, and how
    # busy its slices were over the kernel.
    "lts__t_requests_op_red.sum": "l2_red_requests",
    "lts__t_sectors_op_red.sum": "l2_red_sectors",
    "lts__t_sectors.avg.pct_of_peak_sustained_elapsed": "l2_pct",
    # Shared memory's data pipe: how busy over the kernel (all operations).
    "l1tex__data_pipe_lsu_wavefronts_mem_shared.avg.pct_of_peak_sustained_elapsed": "smem_pct",
}
STALLS = ["barrier", "long_scoreboard", "short_scoreboard", "mio_throttle", "math_pipe_throttle", "wait",
          "not_selected", "lg_throttle", "dispatch_stall", "no_instruction"]
# Warp stall reasons: warps in that state per issued instruction (summed over every reason, and
# "selected", they make the average cycles between two instructions of one warp).
for _r in STALLS:
    METRICS[f"smsp__average_warps_issue_stalled_{_r}_per_issue_active.ratio"] = f"stall_{_r}"

# How a kernel's several launches combine (one launch each with --reps 0, but cuBLAS may launch a
# kernel per batch): counts and bytes add up; properties of a launch (registers, shared memory per
# block) and the existing occupancy column take the largest; the other percentages and ratios take
# the plain mean over the launches that report them (not weighted: a launch's instruction or
# cycle counts are not collected).
PER_LAUNCH = {"occupancy_pct", "registers", "smem_static", "smem_dynamic"}
MEAN = {"tensor_pct", "l2_pct", "smem_pct"} | {f"stall_{r}" for r in STALLS}
OPTIONAL = ["red_bytes", "bank_conflicts", "occupancy_pct", "registers", "smem_static", "smem_dynamic",
            # new columns go at the end, so that older CSVs keep their columns' order
            "bank_conflicts_ld", "bank_conflicts_st", "bank_conflicts_ldsm", "wavefronts_ld", "wavefronts_ldsm",
            "tensor_pct"] + [f"stall_{r}" for r in STALLS] + ["bank_conflicts_cp_async",
                                                            "l2_red_requests", "l2_red_sectors", "l2_pct", "smem_pct"]
DIGITS = {"occupancy_pct": 1, "tensor_pct": 1, "l2_pct": 1, "smem_pct": 1,
          **{f"stall_{r}": 2 for r in STALLS}}  # the rest: integers


# A step's kernel: stepNN_NAME, NAME up to the first character that is not a word character
# (the template arguments' '<' or the parameters' '('). The ledger names it NAME.
KERNEL = re.compile(r"step\d\d_(\w+)")


def number(s):
    s = s.replace(",", "").strip()
    try:
        return float(s)
    except ValueError:
        return None


def combine(column, values):
    if column in PER_LAUNCH:
        return max(values)
    if column in MEAN:
        return sum(values) / len(values)
    return sum(values)


REQUIRED = {"req_read", "req_write", "l2_read_sectors", "l2_write_sectors", "dram_read", "dram_write", "ncu_ns"}


def print_metrics():
    by_column = {}
    for metric, column in METRICS.items():
        by_column.setdefault(column, []).append(metric)
    for column, names in by_column.items():
        print(("required " if column in REQUIRED else "optional ") + "|".join(names))


def main():
    if sys.argv[1:] == ["--metrics"]:
        return print_metrics()
    ncu_path, ledger_path, _prefix = sys.argv[1:4]  # PREFIX: accepted, unused (see above)
    extra = [kv.split("=", 1) for kv in sys.argv[4:]]
    with open(ncu_path, newline="") as f:
        lines = f.read().splitlines()
    start = next((i for i, l in enumerate(lines) if l.startswith('"ID"')), None)
    if start is None:
        sys.exit(f"{ncu_path}: no ncu CSV table found")
    rows = list(csv.DictReader(lines[start:]))
    # Per kernel name, every value of every metric (one per launch).
    kernels = {}
    order = []
    for r in rows:
        name = r["Kernel Name"]
        m = KERNEL.search(name)
        key = m.group(1) if m else re.sub(r"\W+", "_", name.split("(")[0].split("<")[0].replace("void ", "")).strip("_")[:60]
        if key not in kernels:
            kernels[key] = {"values": {}, "launches": set()}
            order.append(key)
        val = number(r["Metric Value"])
        if r["Metric Name"] in METRICS and val is not None:
            kernels[key]["values"].setdefault(r["Metric Name"], []).append(val)
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
        values = kernels[key]["values"]
        k = {}  # column -> combined value, from the first of its metric names the profile holds
        for metric, column in METRICS.items():
            if column not in k and metric in values:
                k[column] = combine(column, values[metric])
        led = ledger.get(key, {})
        get = lambda c: k.get(c, 0.0)  # the byte counts read 0 when missing, as before
        out.writerow([v for _, v in extra] + [
            key, len(kernels[key]["launches"]), led.get("gmem_read", ""), led.get("gmem_write", ""),
            int(get("req_read")), int(get("req_write")), int(get("l2_read_sectors") * 32), int(get("l2_write_sectors") * 32),
            int(get("dram_read")), int(get("dram_write")), f'{get("ncu_ns") / 1e6:.4f}', led.get("gmem_atomic", "")] +
            [(f'{k[c]:.{DIGITS[c]}f}' if c in DIGITS else int(k[c])) if c in k else "" for c in OPTIONAL])


if __name__ == "__main__":
    main()
