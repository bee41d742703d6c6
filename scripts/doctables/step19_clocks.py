"""Step 19's 550 TFLOP/s point on an H100 with the SM clock and power sampled beside it (docs/19, "fp16, bf16
and the clock"): bench's rows (plots/data/logs/4febcd0/point_*_bwd19*.csv) and nvidia-smi's samples every
100 ms (clocks_bwd19.csv), paired burst by burst.

How a burst is found: nvidia-smi's power.draw is a one-second average on this GPU (NVML's power usage is
"averaged over 1 sec interval" from Ampere on), so while the GPU works the reading climbs, and it climbs
only then. A sample is *busy* when the reading rose by more than RISE_W since the sample before; a burst is
a run of busy samples. The runner works in a fixed order within each bench run (harness/runner.cpp): the
forward's timing, then the backward's, with host work (the reference, the checks) between them. So the
bursts pair with bench's rows by order, two per row: forward, then backward."""
import statistics

from . import common
from .common import kms, ktf, plain_variant, provenance, table

LOGS = "logs/4febcd0/"
POINT = LOGS + "point_*_bwd19.csv"  # the run with nvidia-smi beside it
EARLIER = LOGS + "point_*_bwd19_call2_partial.csv"  # the same command earlier, no clocks (3 of its 4 rows)
CLOCKS = LOGS + "clocks_bwd19.csv"
GPU = LOGS + "gpu.txt"
RISE_W = 20.0  # the host-side steps between bursts lift the average by 10 W at most


def _clean(rs):
    """nvidia-smi's CSV: names and values padded with spaces, values with their unit ("1980 MHz")."""
    return [{k.strip(): (v or "").strip() for k, v in r.items() if k} for r in rs]


def _num(v):
    return float(v.split()[0])


def samples():
    """(clock MHz, power W) per nvidia-smi sample, in time order."""
    out = []
    for r in _clean(common.rows(CLOCKS)):
        clock = next((v for k, v in r.items() if k.startswith("clocks") and k.endswith("[MHz]")), None)
        power = next((v for k, v in r.items() if k.startswith("power.draw")), None)
        if clock and power:
            out.append((_num(clock), _num(power)))
    return out


def bursts(s):
    """Runs of busy samples: each a list of (clock, power)."""
    out, cur = [], []
    for prev, x in zip(s, s[1:]):
        if x[1] - prev[1] > RISE_W:
            cur.append(x)
        elif cur:
            out.append(cur)
            cur = []
    if cur:
        out.append(cur)
    return out


def peak_after(s, burst):
    """The highest one-second average from a burst's first sample until the reading is back near idle: a
    pulse shorter than the averaging window leaves a plateau of (its energy above idle) / 1 s."""
    i = s.index(burst[0])
    j = i
    while j + 1 < len(s) and s[j + 1][1] > s[i - 1][1] + RISE_W:
        j += 1
    return max(p for _, p in s[i:j + 1])


def _clock_cells(b):
    cl = [c for c, _ in b]
    return f"{len(cl)}", f"{min(cl):.0f} / {statistics.median(cl):.0f}"


def step19_clocks():
    ours = [r for r in common.rows(POINT) if r["step"] == "19" and kms(r, "bwd")]
    earlier = [r for r in common.rows(EARLIER) if r["step"] == "19" and kms(r, "bwd")]
    how = ("nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw --format=csv -lms 100 beside build/bench --steps 19 "
           "--ns 16384 --ds 128 --causal 0 --dtypes fp16,bf16 --check-heads 1 --reps 10")
    if not ours:
        return provenance([], how)
    s = samples()
    bs = bursts(s)
    cap = provenance(ours + earlier, how)
    if len(bs) != 2 * len(ours):
        return cap + (f"\n\n_{len(bs)} bursts in `{CLOCKS}` for {len(ours)} bench rows: the samples do not pair "
                      "with the runs (two bursts per run expected), so no clock is given._")
    # bench writes its rows in the order it ran them
    runs = [(r, bs[2 * i], bs[2 * i + 1]) for i, r in enumerate(ours)]

    def key(r):
        return r["dtype"], "on" if plain_variant(r["variant"]) == "deterministic=on" else "off"

    prev = {key(r): r for r in earlier}
    body, info = [], {}
    for order, (r, fwd, bwd) in enumerate(runs, 1):
        dt, det = key(r)
        e = prev.get((dt, det))
        n, cl = _clock_cells(bwd)
        fn, fcl = _clock_cells(fwd)
        peak = peak_after(s, bwd)
        info[(dt, det)] = dict(tf=ktf(r, "bwd"), med=statistics.median(c for c, _ in bwd), lo=min(c for c, _ in bwd),
                               peak=peak, order=order, row=r, early=ktf(e, "bwd") if e else None)
        body.append([order, dt, det, f"{ktf(r, 'bwd'):.1f}", f"{ktf(e, 'bwd'):.1f}" if e else "–", n, cl,
                     f"{peak:.0f}", f"{ktf(r, 'fwd'):.1f}", fn, fcl,
                     "PASS" if r["bwd_pass"] == "1" and r["pass"] == "1" else "**FAIL**"])
    head = ["run", "dtype", "deterministic", "bwd TFLOP/s", "bwd TFLOP/s, earlier run", "bwd busy samples",
            "bwd SM clock min / median (MHz)", "bwd highest 1-s power (W)", "fwd TFLOP/s", "fwd busy samples",
            "fwd SM clock min / median (MHz)", "check"]

    lines = []
    pairs = [d for d in ("off", "on") if ("fp16", d) in info and ("bf16", d) in info]
    if pairs:
        def f(d):
            return info[("fp16", d)]

        def b(d):
            return info[("bf16", d)]
        name = {"off": "plain", "on": "deterministic"}
        tput = ", ".join(f"{f(d)['tf'] / b(d)['tf']:.3f} {name[d]}" for d in pairs)
        early = [d for d in pairs if f(d)["early"] and b(d)["early"]]
        fwd = ", ".join(f"{ktf(f(d)['row'], 'fwd') / ktf(b(d)['row'], 'fwd'):.3f} (runs {f(d)['order']} and "
                        f"{b(d)['order']})" for d in pairs)
        before = ", ".join("%.3f %s" % (f(d)["early"] / b(d)["early"], name[d]) for d in early)
        lines.append(f"fp16 / bf16 backward throughput: {tput}" + (f" (earlier run: {before})" if early else "")
                     + f"; the forward's (step 16's kernel, timed in the same runs): {fwd}.")
        clk = ", ".join(f"{f(d)['med'] / b(d)['med']:.3f} {name[d]}" for d in pairs)
        lower = sum(f(d)["lo"] < b(d)["lo"] for d in pairs)
        hotter = sum(f(d)["peak"] > b(d)["peak"] for d in pairs)
        first = sum(f(d)["order"] < b(d)["order"] for d in pairs)
        lines.append(f"fp16 / bf16 median SM clock while busy: {clk}. fp16's lowest clock is the lower in {lower} of "
                     f"{len(pairs)} pairs, its highest 1-s power the higher in {hotter} of {len(pairs)}; fp16 ran "
                     f"first in {first} of {len(pairs)} pairs.")
    meds = [statistics.median(c for c, _ in bwd) for _, _, bwd in runs]
    rising = all(x < y for x, y in zip(meds, meds[1:]))
    lines.append(f"Backward median clocks in run order: {', '.join(f'{m:.0f}' for m in meds)} MHz "
                 f"({'rising at every run' if rising else 'not monotone in run order'}).")
    gpu = _clean(common.rows(GPU))
    if gpu:
        g = gpu[0]
        mx = next((v for k, v in g.items() if k.startswith("clocks.max.sm")), "")
        lim = next((v for k, v in g.items() if k.startswith("power.limit")), "")
        top = max(p for _, p in s)
        share = f" ({top / _num(lim):.0%} of the limit)" if lim else ""
        idle = ""
        if mx:
            base = statistics.median(p for _, p in s)  # most samples are idle ones
            start = next((i for i, (c, _) in enumerate(s) if c == _num(mx)), len(s))
            quiet = [c for c, p in s[start:] if p < base + RISE_W]
            at_max = sum(c == _num(mx) for c in quiet)
            idle = (f" Near idle (1-s mean under {base + RISE_W:.0f} W, from the first sample at the maximum on): "
                    f"{at_max} of {len(quiet)} samples read the maximum clock.")
        lines.append(f"This GPU's maximum SM clock: {mx}; its power limit: {lim}; the highest 1-s average in the "
                     f"samples: {top:.0f} W{share}.{idle}")
    if ("bf16", "off") in info:
        bo = info[("bf16", "off")]
        tfs = [bo["tf"]] + ([bo["early"]] if bo["early"] else [])
        again = (f" (the earlier run: **{bo['early']:.1f}**; the runs differ by "
                 f"{abs(bo['tf'] - bo['early']) / min(tfs):.1%})") if bo["early"] else ""
        verdict = "met" if min(tfs) >= 550 else ("missed" if max(tfs) < 550 else "met in one run of two")
        lines.append(f"The 550 TFLOP/s point **on this H100** (the goal names the H200): plain bf16 backward "
                     f"**{bo['tf']:.1f}** TFLOP/s{again}, goal ≥ 550: **{verdict}**.")
    return cap + "\n\n" + table(head, body) + "\n\n" + " ".join(lines)
