"""What every table shares: the CSVs of plots/data, the provenance line, the table itself, the one clock's
caption (and its refusal of rows timed two ways), and the target matrices of scripts/targets.txt.

Another module reads the CSVs through `common.rows(...)` (not a copy of the name), so that a test can put
other rows in its place (tests/test_doc_tables.py)."""
import csv
import functools
import glob
import math
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(ROOT, "plots", "data")
TARGETS = os.path.join(ROOT, "scripts", "targets.txt")


def rows(pattern):
    out = []
    for path in sorted(glob.glob(os.path.join(DATA, pattern))):
        with open(path, newline="") as f:
            out.extend(csv.DictReader(f))
    return out


def plain_variant(v, defaults=("deterministic=off",)):
    """A run's variant with the parts that name a swept flag at its default taken out ("-" when nothing is
    left): step 19's runs say "-" in the CSVs written before it had --deterministic, and
    "deterministic=off" after; both are its plain backward."""
    parts = [x for x in v.split(";") if x not in defaults and x != "-"]
    return ";".join(parts) or "-"


def point(r):
    """A row's point of a target matrix: (dtype, d, causal, N)."""
    return (r["dtype"], int(r["d"]), int(r["causal"]), int(r["N"]))


def mb(x):
    return f"{float(x) / 1e6:,.0f}" if x not in ("", None) else "–"


def provenance(rs, how="scripts/gpu_session.sh", many_gpus=False):
    """The caption naming where and when a table's rows were measured. Rows from two GPUs are refused unless the
    table sets them apart itself (many_gpus): a glob such as clock_*_fwd20.csv reads every GPU's file, and a
    table that keys its rows by shape alone would mix them."""
    if not rs:
        return f"_no measurements yet: run `{how}` on a GPU machine_"
    return f"_Measured on {where(rs, many_gpus)}: {ROWS_FROM}_"


# What every measured table's caption says of where its rows come from.
ROWS_FROM = "the programs' own `--csv` rows (how each file was made: `plots/data/README.md`)."


def where(rs, many_gpus=False):
    """The GPU(s), CUDA version and each commit's first and last date of rows `rs` (not empty), as a caption
    names them: "an NVIDIA H200, CUDA 13.0, commit `abc1234`, 2026-…" (provenance's middle, for a table that
    sets several runs side by side)."""
    gpus = sorted({x.get("device") or x.get("gpu") or "" for x in rs})
    if len(gpus) > 1 and not many_gpus:
        raise ValueError(f"rows from {len(gpus)} GPUs in one table ({', '.join(gpus)}): keep one GPU's files, "
                         "or set the rows apart by GPU in the table")
    r = rs[0]
    gpu = r.get("device") or r.get("gpu")
    if many_gpus and len(gpus) > 1:
        gpu = " and an ".join(gpus)
    cuda = f", CUDA {r['cuda']}" if "cuda" in r else ""
    spans = {}
    for x in rs:  # a run writes a date per row: each commit's first and last
        lo, hi = spans.get(x["commit"], (x["date"], x["date"]))
        spans[x["commit"]] = (min(lo, x["date"]), max(hi, x["date"]))
    when = "; ".join(f"commit `{c}`, {lo}" + (f" – {hi}" if hi != lo else "")
                     for c, (lo, hi) in sorted(spans.items(), key=lambda kv: kv[1]))
    return f"an {gpu}{cuda}, {when}"


def geomean(xs):
    return math.exp(sum(map(math.log, xs)) / len(xs))


def table(header, body):
    for row in body:  # a row with more or fewer cells than the header renders as a broken table
        if len(row) != len(header):
            raise ValueError(f"table row has {len(row)} cells for {len(header)} columns: {row}")
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---:" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in body]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------
# One clock (docs/profiling.md): every table that sets a step beside PyTorch's backends takes both sides'
# times from the kernel clock — the GPU time of every kernel a call launches, summed, each rep on a cold
# L2 — and says so in its caption. clock_caption() refuses rows without that clock, or two sides whose
# L2 flush differs: a table that would mix methods is not written.

class ClockError(ValueError):
    pass


def kernel_clock(rs, what):
    """The L2 method every row of rs names in its `clock` column ("cupti;l2-read-256MiB" ->
    "l2-read-256MiB"); ClockError when a row has none or the rows name two."""
    if not rs:
        raise ClockError(f"{what}: no rows")
    methods = {r.get("clock") or "" for r in rs}
    if "" in methods:
        raise ClockError(f"{what}: {sum(1 for r in rs if not r.get('clock'))} row(s) without a kernel clock "
                         "(event-timed rows cannot stand beside kernel times)")
    l2 = {m.split(";", 1)[1] if ";" in m else "" for m in methods}
    if len(l2) != 1 or "" in l2:
        raise ClockError(f"{what}: the rows mix clocks {sorted(methods)}")
    return l2.pop()


CLOCK_CAPTION = ("_Timing (both sides): kernel time — every kernel a call launches, summed, from CUPTI's "
                 "activity records (ours: the step's runner; PyTorch's: `torch.profiler`), the median over "
                 "repeated calls, each after a 256 MiB read flushed the L2 (docs/profiling.md, \"One clock\"). "
                 "A ratio is the peer's kernel time over ours (above 1: ours is faster)._")


def clock_caption(ours, peers):
    """The caption every peer table carries, after checking that both sides were timed alike."""
    a, b = kernel_clock(ours, "our rows"), kernel_clock(peers, "the peers' rows")
    if a != b:
        raise ClockError(f"our rows flushed the L2 by {a}, the peers' by {b}: the table would mix methods")
    return CLOCK_CAPTION


def kms(r, pass_="fwd"):
    """Our kernel time (ms) of a pass, None where the row has none."""
    x = r.get("kernel_ms" if pass_ == "fwd" else "bwd_kernel_ms")
    return float(x) if x not in ("", None) else None


def ktf(r, pass_="fwd"):
    """TFLOP/s by kernel time, FlashAttention's convention (our rows and the peers' name it alike)."""
    x = r.get("kernel_tflops" if pass_ == "fwd" else "bwd_kernel_tflops")
    return float(x) if x not in ("", None) else None


def spread(r, key="ms"):
    """A measured time and, where the row has several timed runs ([noise]), their min–max."""
    ms = float(r[key])
    lo, hi = r.get(key + "_min") or r.get(key.replace("ms", "ms_min")), r.get(key + "_max") or r.get(key.replace("ms", "ms_max"))
    if r.get("runs", "1") not in ("", "1") and lo and hi:
        return f"{ms:.3g} ({float(lo):.3g}–{float(hi):.3g})"
    return f"{ms:.3g}"


# ------------------------------------------------------------------------------------------------
# The target matrices (scripts/targets.txt, which the GPU scripts read too): one axis a line,
# "MATRIX AXIS v1,v2,...".

@functools.lru_cache(maxsize=None)
def read_targets(path=TARGETS):
    """{(matrix, axis): [value, ...]} from the targets file, the values as written (strings)."""
    out = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            words = line.split("#", 1)[0].split()
            if not words:
                continue
            if len(words) != 3:
                raise ValueError(f"{path}: want 'MATRIX AXIS v1,v2,...', got {line.strip()!r}")
            out[(words[0], words[1])] = tuple(words[2].split(","))
    return out


def target_axis(matrix, axis, conv=int):
    """One axis of a target matrix, each value through conv (int by default; str for dtypes)."""
    t = read_targets()
    if (matrix, axis) not in t:
        raise KeyError(f"scripts/targets.txt has no axis '{axis}' of matrix '{matrix}'")
    return [conv(v) for v in t[(matrix, axis)]]


def target_points(matrix):
    """Every (dtype, d, causal, N) of a matrix, in the tables' order: dtype, then d, the mask, N."""
    return [(dt, d, c, n) for dt in target_axis(matrix, "dtypes", str) for d in target_axis(matrix, "ds")
            for c in target_axis(matrix, "causal") for n in target_axis(matrix, "ns")]
