#!/usr/bin/env python3
"""What the compiler emitted, read for the model's latency term (docs/model.md, "The latency term").

A kernel's time can be set by one warp waiting on its own previous instruction: a shared-memory load
whose value the next instruction needs, an MMA whose accumulator the next MMA adds to. No throughput
term sees that. This reads the SASS (`cuobjdump -sass PROGRAM`) and, for each kernel, finds its loops
and, per trip of each loop:

  * the instructions by class: gmem (global loads, stores, atomics, bulk copies), smem (shared loads
    and stores, ldmatrix), mma (HMMA, HGMMA, ...), sfu (MUFU), barrier (BAR, DEPBAR, SYNCS, ...),
    control (branches, convergence barriers), alu (everything else);
  * the chain: the cycles one warp alone needs for one trip. The compiler writes, beside every
    instruction, how many cycles the next one must wait (the stall count, for results of fixed
    latency) and which of six scoreboards the instruction sets and which it waits on (for results of
    variable latency: memory, MUFU, MMA). Replaying those in order, with each variable-latency class
    given its latency measured by `bench --peaks` (smem-latency, l2-latency, ex2-latency, mma-latency,
    barrier-latency), gives the trip's length. No register is traced: the control codes are the
    compiler's own account of the dependences.

  scripts/sass_profile.py --sass FILE[,FILE...] --peaks PEAKS_CSV --out CSV [--clock-mhz 1980]
  scripts/sass_profile.py --sass FILE --dump KERNEL_SUBSTR     (print one kernel's instructions, decoded)

Each FILE is one program's listing, named stepNN.sass (the step's id from the name). One CSV row per
kernel instantiation and loop (loop -1: the kernel's code outside every loop, once per warp): step,
kernel (the ledger's name: the function's name without its stepNN_ prefix), dtype, d (the template's
arguments), loop, first and last address, instructions by class, chain cycles, and `marker`, `marker_per_trip` and `marker_work`: the class the model counts trips by (mma where the loop
has MMAs, else sfu, else smem, else alu), how many such instructions one trip of one warp issues, and
their work in the ledger's units (FLOPs, exponentials, bytes, lane operations). The model
(common/perf/model.cpp) divides the ledger's count of that work per warp by marker_work to get the
trips: the schedule's trip counts, through the ledger, never fitted.
"""
import argparse
import collections
import csv
import os
import re
import sys

CLASSES = ["gmem", "smem", "mma", "sfu", "barrier", "control", "alu"]
GMEM = {"LDG", "STG", "LD", "ST", "ATOMG", "ATOM", "RED", "REDG", "LDGSTS", "UBLKCP", "UTMALDG", "UTMASTG", "UBLKRED",
        "UTMAREDG", "UTMAPF", "CCTL", "LDC"}
SMEM = {"LDS", "STS", "LDSM", "STSM", "ATOMS", "LDGDEPBAR"}
MMA = {"HMMA", "HGMMA", "IMMA", "IGMMA", "QGMMA", "DMMA", "BMMA", "HFMA2.MMA"}
SFU = {"MUFU"}
BARRIER = {"BAR", "DEPBAR", "SYNCS", "MEMBAR", "ERRBAR", "WARPGROUP", "ARRIVES", "FENCE", "UCGABAR_ARV", "UCGABAR_WAIT"}
CONTROL = {"BRA", "BRX", "JMP", "EXIT", "BSSY", "BSYNC", "CALL", "RET", "NOP", "YIELD", "WARPSYNC", "BPT", "KILL"}

# Variable-latency producers: which measured latency each waits out (bench --peaks names).
LATENCY_OF = {"LDS": "smem-latency", "LDSM": "smem-latency", "ATOMS": "smem-latency", "SHFL": "smem-latency",
              "LDG": "l2-latency", "LD": "l2-latency", "ATOMG": "l2-latency", "ATOM": "l2-latency",
              "LDC": "smem-latency", "S2R": "smem-latency", "S2UR": "smem-latency", "CS2R": "smem-latency",
              "MUFU": "ex2-latency", "HMMA": "mma-latency", "HGMMA": "mma-latency", "QGMMA": "mma-latency",
              "IMMA": "mma-latency", "BAR": "barrier-latency", "I2F": "fma-latency", "F2I": "fma-latency",
              "F2F": "fma-latency", "POPC": "fma-latency", "FLO": "fma-latency", "BREV": "fma-latency",
              "DEPBAR": "smem-latency", "VOTE": "fma-latency", "MATCH": "smem-latency", "REDUX": "smem-latency"}
READ_RELEASE = "fma-latency"  # a store's (or an MMA's) source registers are free again after about this long

INSTR = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;?\s*/\*\s*(0x[0-9a-f]{16})\s*\*/")
HIGH = re.compile(r"^\s*/\*\s*(0x[0-9a-f]{16})\s*\*/\s*$")
LABEL = re.compile(r"^\s*(\.L_[A-Za-z0-9_]+):")
FUNC = re.compile(r"Function\s*:\s*(\S+)")
TARGET = re.compile(r"`\((\.L_[A-Za-z0-9_]+)\)")  # a label (older cuobjdump, nvdisasm)
TARGET_ADDR = re.compile(r"\b(?:BRA|JMP|BRX)(?:\.[A-Z.]+)?\s+(?:!?U?P\d,\s*|UR\d+,\s*)?(0x[0-9a-f]+)")  # an address (cuobjdump 13; BRA.DIV names a uniform register first)


class Instr:
    __slots__ = ("addr", "text", "pred", "op", "base", "stall", "yld", "wbar", "rbar", "wait", "reuse", "target")

    def __init__(self, addr, text, high):
        self.addr, self.text = addr, text
        words = text.split()
        self.pred = words[0] if words and words[0].startswith("@") else ""
        body = words[1:] if self.pred else words
        self.op = body[0] if body else ""
        self.base = self.op.split(".")[0]
        ctrl = high >> 41  # Volta and later: 23 bits of scheduling control at the top of the second word
        self.stall = ctrl & 0xF
        self.yld = (ctrl >> 4) & 1
        self.wbar = (ctrl >> 5) & 7    # scoreboard set when the result is written (7: none)
        self.rbar = (ctrl >> 8) & 7    # scoreboard set when the sources have been read (7: none)
        self.wait = (ctrl >> 11) & 0x3F  # scoreboards to wait for before issuing
        self.reuse = (ctrl >> 17) & 0xF
        m = TARGET.search(text)
        a = TARGET_ADDR.search(text)
        self.target = m.group(1) if m else int(a.group(1), 16) if a else None

    def klass(self):
        if self.op.startswith("HFMA2.MMA"):
            return "alu"
        for name, ops in (("gmem", GMEM), ("smem", SMEM), ("mma", MMA), ("sfu", SFU), ("barrier", BARRIER),
                          ("control", CONTROL)):
            if self.base in ops:
                return name
        return "alu"


class Function:
    def __init__(self, name):
        self.name, self.instrs, self.labels = name, [], {}
        self._at = {}  # address -> index, rebuilt when instructions were added since

    def index_of(self, target):
        """The index of a branch target (a label or an address); None outside the function."""
        if isinstance(target, str):
            return self.labels.get(target)
        if len(self._at) != len(self.instrs):
            self._at = {ins.addr: k for k, ins in enumerate(self.instrs)}
        return self._at.get(target)

    def divergent_returns(self):
        """Indices of the branches that end a divergent-warp fallback. A warp-wide shuffle compiles to
        `BRA.DIV` (taken only when the warp's lanes have split) around the fast shuffle; its target is an
        out-of-line copy, placed after the kernel's EXIT, that ends in a plain `BRA` back to the
        instruction after the fast path. That branch points backwards but closes no loop: it returns
        into the code the warp left."""
        out = set()
        for ins in self.instrs:
            if ins.base != "BRA" or ".DIV" not in ins.op:
                continue
            k = self.index_of(ins.target)
            while k is not None and k < len(self.instrs):
                x = self.instrs[k]
                if x.base in ("BRA", "JMP") and not x.pred and ".DIV" not in x.op:
                    out.add(k)
                    break
                if x.base in ("EXIT", "RET"):
                    break
                k += 1
        return out

    def loops(self):
        """(first index, last index) of each backward branch's span: the branch and the label it jumps
        back to. Structured code's loops; the innermost first. A divergent fallback's return
        (`divergent_returns`) is no loop: read as one, it would stretch the loop it returns into over
        everything between that loop and the fallback (the kernel's tail, the other fallbacks)."""
        out, ret = [], self.divergent_returns()
        for i, ins in enumerate(self.instrs):
            j = self.index_of(ins.target)
            if ins.base in ("BRA", "JMP") and j is not None and j <= i and i not in ret:
                out.append((j, i))
        return sorted(set(out), key=lambda s: (s[1] - s[0], s[0]))


def parse(text):
    """cuobjdump -sass text -> [Function]. Functions of every embedded architecture, in order."""
    funcs, cur, pending, lines = [], None, [], text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        m = FUNC.search(line)
        if m:
            cur = Function(m.group(1))
            funcs.append(cur)
            pending = []
            i += 1
            continue
        if cur is None:
            i += 1
            continue
        m = LABEL.match(line)
        if m:
            pending.append(m.group(1))
            i += 1
            continue
        m = INSTR.search(line)
        if m:
            high = 0
            if i + 1 < len(lines):
                h = HIGH.match(lines[i + 1])
                if h:
                    high = int(h.group(1), 16)
                    i += 1
            for lab in pending:
                cur.labels[lab] = len(cur.instrs)
            pending = []
            cur.instrs.append(Instr(int(m.group(1), 16), m.group(2).strip(), high))
        i += 1
    return funcs


def latency_cycles(peaks_ns, clock_hz):
    """bench --peaks' latencies (ns) -> cycles at the SM clock."""
    return {k: v * 1e-9 * clock_hz for k, v in peaks_ns.items()}


def chain(instrs, lat, trips=2):
    """Cycles one warp alone needs per trip of `instrs` run `trips` times back to back: the last trip's
    length (a loop-carried wait, e.g. on a load issued near the end of the trip before, shows there).
    In order: an instruction issues when the previous one's stall count has passed and every scoreboard
    it waits on is free; one that sets a scoreboard frees it after its class's latency; a block barrier
    holds the warp for barrier-latency."""
    t, sb, ends = 0.0, [0.0] * 6, []
    for _ in range(trips):
        start_trip = t
        for ins in instrs:
            start = t
            for b in range(6):
                if ins.wait >> b & 1:
                    start = max(start, sb[b])
            if ins.wbar < 6:
                sb[ins.wbar] = start + lat.get(LATENCY_OF.get(ins.base, "fma-latency"), 0.0)
            if ins.rbar < 6:
                sb[ins.rbar] = start + lat.get(READ_RELEASE, 0.0)
            step = max(1, ins.stall)
            if ins.base == "BAR" and ".SYNC" in ins.op or ins.op == "BAR":
                step = max(step, lat.get("barrier-latency", 0.0))
            t = start + step
        ends.append(t - start_trip)
    return ends[-1]


def counts(instrs):
    c = collections.Counter(ins.klass() for ins in instrs)
    return {k: c.get(k, 0) for k in CLASSES}


def marker(c):
    for k in ("mma", "sfu", "smem", "alu"):
        if c[k]:
            return k
    return "alu"


WIDTH = re.compile(r"\.(8|16|32|64|128)\b")
HGMMA_SHAPE = re.compile(r"\.(\d+)x(\d+)x(\d+)")


def work(ins):
    """One instruction's work per warp in the ledger's units (common/blueprint/ledger.hpp): FLOPs for an MMA,
    exponentials for MUFU.EX2, bytes for a shared or global access, lane operations for the rest."""
    k = ins.klass()
    if k == "mma":
        m = HGMMA_SHAPE.search(ins.op)
        if ins.base in ("HGMMA", "QGMMA", "IGMMA") and m:  # a warpgroup's product: each of its 4 warps issues it
            return 2 * int(m.group(1)) * int(m.group(2)) * int(m.group(3)) / 4
        if ".16816" in ins.op or ".16832" in ins.op:
            return 2 * 16 * 8 * (16 if ".16816" in ins.op else 32)
        if ".1688" in ins.op:
            return 2 * 16 * 8 * 8
        return 2 * 16 * 8 * 16
    if k == "sfu":
        return 32 if ".EX2" in ins.op else 0
    if k in ("smem", "gmem"):
        if ins.base == "LDC":
            return 0  # the constant cache (kernel parameters): no bytes the ledger counts
        if ins.base in ("LDSM", "STSM"):
            return 128 * (4 if ".X4" in ins.op.upper() else 2 if ".X2" in ins.op.upper() else 1)
        m = WIDTH.findall(ins.op)
        bits = int(m[-1]) if m else 32
        return max(bits, 32) // 8 * 32
    return 32


MANGLED_INT = re.compile(r"Li(\d+)E")


def identity(name):
    """(kernel, dtype, d) from a mangled name: _ZN2fa6step0315step03_kv_outerI6__halfLi128EEEv... ->
    ('kv_outer', 'fp16', 128). The ledger names a kernel by its function's name without 'stepNN_'."""
    m = re.search(r"step\d\d_([A-Za-z0-9_]+?)I", name) or re.search(r"step\d\d_([A-Za-z0-9_]+)", name)
    kernel = m.group(1) if m else name
    dtype = "bf16" if "nv_bfloat16" in name else "fp16" if "__half" in name else ""
    ints = [int(x) for x in MANGLED_INT.findall(name)]
    d = next((x for x in ints if x in (16, 32, 64, 128, 256)), 0)
    return kernel, dtype, d


SETP = re.compile(r"^(?:@!?U?P\d\s+)?U?ISETP\S*\s+(U?P\d),\s*U?P[T\d],\s*([^,]+),\s*([^,]+)")
ADD = re.compile(r"^(?:@!?U?P\d\s+)?(VIADD|IADD3|IMAD\.IADD|IADD)(?:\.\S+)?\s+(R\d+),\s*(.+)$")
IMM = re.compile(r"^-?(?:0x[0-9a-f]+|\d+)$")


def _reg(x):
    return x.strip().replace(".reuse", "").lstrip("-").strip()


def _ntid_regs(f):
    """Registers and uniform registers that hold blockDim.x (c[0x0][0x0] on sm_90)."""
    out = set()
    for ins in f.instrs:
        m = re.match(r"(?:@!?U?P\d\s+)?(?:ULDC|LDC|MOV|IMAD\.MOV)(?:\.\S+)?\s+(U?R\d+),\s*(?:.*,\s*)?c\[0x0\]\[0x0\]$", ins.text)
        if m:
            out.add(m.group(1))
        if re.match(r"(?:@!?U?P\d\s+)?S2U?R\s+(U?R\d+),\s*SR_NTID\.X", ins.text):
            out.add(ins.text.split()[1].rstrip(","))
    return out


def trip_rule(f, lo, hi, ntid=None):
    """How many trips one entry of the loop [lo, hi] makes, read from its back edge: ('imm', bound, step) for a
    counter stepped by a constant up to a constant, ('ntid', bound, 0) for one stepped by blockDim.x (a strided
    loop over a tile: bound / threads trips), ('runtime', 0, 0) where the bound is a register (the problem's
    size: the schedule's tile counts) or the pattern is not one of these. The counter's start is taken as 0
    (or a thread's index, below the step): a trip count, not a lane's exact one."""
    br = f.instrs[hi]
    if not br.pred:
        return ("runtime", 0, 0)
    p = br.pred.lstrip("@!")
    setp = None
    for k in range(hi - 1, lo - 1, -1):
        m = SETP.match(f.instrs[k].text)
        if m and m.group(1) == p:
            setp = m
            break
    if setp is None:
        return ("runtime", 0, 0)
    a, b = _reg(setp.group(2)), _reg(setp.group(3))
    if IMM.match(a) and not IMM.match(b):
        a, b = b, a
    if not IMM.match(b) or not a.startswith("R"):
        return ("runtime", 0, 0)
    bound = int(b, 0)
    ntid = _ntid_regs(f) if ntid is None else ntid
    for k in range(lo, hi + 1):
        m = ADD.match(f.instrs[k].text)
        if not m or m.group(2) != a:
            continue
        ops = [o.strip() for o in m.group(3).split(",")]
        srcs = [_reg(o) for o in ops]
        if a not in srcs:
            continue
        others = [o for o, r in zip(ops, srcs) if r != a and r != "RZ" and not (m.group(1) == "IMAD.IADD" and r == "0x1")]
        if len(others) != 1:
            return ("runtime", 0, 0)
        step = others[0].replace(".reuse", "").strip()
        if IMM.match(step):
            v = int(step, 0)
            return ("imm", bound, v) if v > 0 and bound > 0 else ("runtime", 0, 0)
        if step in ntid or step == "c[0x0][0x0]":
            return ("ntid", bound, 0) if bound > 0 else ("runtime", 0, 0)
        return ("runtime", 0, 0)
    return ("runtime", 0, 0)


def nest(f):
    """The kernel's loops as a tree: [(lo, hi, parent index or -1)], outer before inner. Spans that cross
    (a loop the compiler rotated into another) are merged into one; the one-instruction branch to itself
    after EXIT (a trap, never run) is no loop."""
    spans = {(lo, hi) for lo, hi in f.loops() if not (lo == hi and not f.instrs[hi].pred)}
    merged = True
    while merged:
        merged = False
        for a in sorted(spans):
            for b in sorted(spans):
                if a[0] < b[0] <= a[1] < b[1]:
                    spans -= {a, b}
                    spans.add((a[0], b[1]))
                    merged = True
                    break
            if merged:
                break
    order = sorted(spans, key=lambda s: (s[0], -s[1]))
    out = []
    for k, (lo, hi) in enumerate(order):
        parent = -1
        for j in range(k - 1, -1, -1):
            plo, phi = order[j]
            if plo <= lo and hi <= phi:
                parent = j
                break
        out.append((lo, hi, parent))
    return out


WORK = ("bar", "mma", "sfu", "smem", "gmem")
REGISTER = re.compile(r"\bR(\d+)\b")  # RZ is not one


def is_block_barrier(ins):
    """__syncthreads (BAR.SYNC): every warp of the block passes it, whatever branch it took before."""
    return ins.base == "BAR" and (".SYNC" in ins.op or ins.op == "BAR") and ".ARV" not in ins.op


def work_by_class(instrs):
    """Work by the ledger's units: block barriers (count), MMA FLOPs, exponentials, shared and global bytes."""
    w = {k: 0.0 for k in WORK}
    for ins in instrs:
        k = ins.klass()
        if k in w:
            w[k] += work(ins)
        if is_block_barrier(ins):
            w["bar"] += 1
    return w


def profile_rows(step, funcs, lat):
    """One row per kernel and loop of the nest (loop -1: the kernel's code outside every loop), each with its
    own instructions: those of its span that no inner loop holds. The model walks the tree: a loop's own
    code runs once per trip, its inner loops their trips per trip."""
    rows = []
    from_hbm = dict(lat, **{"l2-latency": lat.get("hbm-latency", lat.get("l2-latency", 0.0))})  # every load a miss
    for f in funcs:
        if not f.instrs:
            continue
        if not re.search(r"step\d\d_", f.name):
            continue  # the harness's own kernels (the L2 flush, the fills): no step's
        kernel, dtype, d = identity(f.name)
        regs = 1 + max([int(x) for ins in f.instrs for x in REGISTER.findall(ins.text)] + [-1])
        tree = nest(f)
        ntid = _ntid_regs(f)
        owner = [-1] * len(f.instrs)  # the innermost loop holding each instruction
        for k, (lo, hi, _) in enumerate(tree):  # outer first: an inner loop overwrites its parent
            for i in range(lo, hi + 1):
                owner[i] = k
        for k in [-1] + list(range(len(tree))):
            own = [ins for i, ins in enumerate(f.instrs) if owner[i] == k]
            if k < 0:
                first, last, parent, rule = f.instrs[0], f.instrs[-1], "", ("once", 1, 0)
            else:
                lo, hi, parent = tree[k]
                first, last, rule = f.instrs[lo], f.instrs[hi], trip_rule(f, lo, hi, ntid)
            c = counts(own)
            w = work_by_class(own)
            rows.append({
                "step": step, "kernel": kernel, "dtype": dtype, "d": d, "function": f.name, "regs_used": regs, "loop": k,
                "parent": parent, "first": f"{first.addr:#06x}", "last": f"{last.addr:#06x}",
                "trip_kind": rule[0], "trip_bound": rule[1], "trip_step": rule[2], "instructions": len(own), **c,
                "chain_cycles": f"{chain(own, lat, trips=1 if k < 0 else 2):.1f}" if own else "0.0",
                "chain_cycles_hbm": f"{chain(own, from_hbm, trips=1 if k < 0 else 2):.1f}" if own else "0.0",
                **{f"work_{x}": f"{w[x]:g}" for x in WORK}})
    return rows


def read_peaks(path):
    out = {}
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            if r.get("unit") == "ns":
                out[r["peak"]] = float(r["value"])
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sass", required=True, help="listings, comma-separated, each named stepNN.sass")
    ap.add_argument("--peaks", help="bench --peaks CSV (its ns rows)")
    ap.add_argument("--clock-mhz", type=float, default=1980.0, help="the SM clock the latencies convert at")
    ap.add_argument("--out", help="CSV to write")
    ap.add_argument("--dump", help="print the decoded instructions of the first kernel whose name has this")
    a = ap.parse_args(argv)
    files = [p for p in a.sass.split(",") if p]
    if a.dump:
        for p in files:
            for f in parse(open(p, encoding="utf-8", errors="replace").read()):
                if a.dump in f.name:
                    inv = {v: k for k, v in f.labels.items()}
                    for i, ins in enumerate(f.instrs):
                        print(f"{inv.get(i, ''):>8} {ins.addr:05x} {ins.klass():7} S{ins.stall:<2} "
                              f"W{ins.wbar if ins.wbar < 7 else '-'} R{ins.rbar if ins.rbar < 7 else '-'} "
                              f"wait {ins.wait:06b}  {ins.text}")
                    print("loops:", f.loops())
                    return 0
        print(f"sass_profile.py: no kernel has '{a.dump}'", file=sys.stderr)
        return 1
    if not a.peaks or not a.out:
        ap.error("--peaks and --out are needed (or --dump)")
    lat = latency_cycles(read_peaks(a.peaks), a.clock_mhz * 1e6)
    missing = [k for k in ("smem-latency", "l2-latency", "hbm-latency", "ex2-latency", "mma-latency", "fma-latency",
                           "barrier-latency")
               if k not in lat]
    if missing:
        print(f"sass_profile.py: {a.peaks} has no {', '.join(missing)} (bench --peaks measures them)", file=sys.stderr)
        return 2
    rows = []
    for p in files:
        m = re.search(r"step(\d\d)", os.path.basename(p))
        if not m:
            print(f"sass_profile.py: {p}: not named stepNN.sass", file=sys.stderr)
            return 2
        rows += profile_rows(m.group(1), parse(open(p, encoding="utf-8", errors="replace").read()), lat)
    if not rows:
        print("sass_profile.py: no instructions found (a cuobjdump -sass listing?)", file=sys.stderr)
        return 1
    with open(a.out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]), lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    print(f"sass_profile.py: {len(rows)} rows -> {a.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
