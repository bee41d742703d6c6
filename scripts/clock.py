"""The course's one clock, for PyTorch's side (docs/profiling.md, "One clock").

Our step programs time a call three ways (common/harness/gpu_harness.cu); this module times a PyTorch call
the same three ways, so that a ratio compares the same thing on both sides:

  kernel time   the GPU time of every kernel, memset and memcpy one call launches, summed, from the
                driver's activity records (CUPTI, read here through torch.profiler / Kineto), each rep
                after the L2 was flushed by reading a 256 MiB buffer; the median over the reps.
  graph time    K calls captured back to back in one CUDA graph, replayed; the median replay over K.
  event time    CUDA events around one Python call (Python's and ATen's dispatch included): kept as a
                third column, never used for a ratio.

KERNEL_CLOCK is what the rows say of their kernel clock: the tables check that our rows and the peers'
name the same L2 flush before they set one beside the other (scripts/doc_tables.py).

Also what the scripts that time PyTorch share (scripts/peers.py, scripts/decode_target.py): load_torch()
(skip cleanly without PyTorch or a GPU), run_commit() and utc_date() for the rows' leading columns, and
Clock.time_call(), the three clocks of one call in one go.
"""
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile

KERNEL_CLOCK = "kineto;l2-read-256MiB"
FLUSH_BYTES = 256 << 20
GPU_CATS = ("kernel", "gpu_memset", "gpu_memcpy")
LAUNCH_CATS = ("cuda_runtime", "cuda_driver")
REP = "fa_clock_rep_"


def per_rep_device_ms(events, prefix=REP):
    """From a Kineto (chrome) trace's events: for each annotated rep (a user annotation named prefix + i),
    the GPU time (ms) of the kernels, memsets and memcpys it launched, summed, and how many there were.

    A GPU record belongs to the rep whose annotation holds the CPU call that launched it (the runtime or
    driver call with the same correlation id), from whichever thread launched it (autograd runs the
    backward on a thread of its own). A record whose launch is not in the trace falls back to its own
    start on the GPU; the third value counts those. Returns [(ms, count)] in rep order, and fallbacks."""
    reps = sorted(((e["ts"], e["ts"] + e["dur"], int(e["name"][len(prefix):])) for e in events
                   if e.get("cat") == "user_annotation" and str(e.get("name", "")).startswith(prefix)),
                  key=lambda r: r[2])
    launches = {}
    for e in events:
        if e.get("cat") in LAUNCH_CATS and "correlation" in e.get("args", {}):
            launches[e["args"]["correlation"]] = e["ts"]
    out = [[0.0, 0] for _ in reps]
    fallbacks = 0

    def rep_of(t):
        for k, (t0, t1, _) in enumerate(reps):
            if t0 <= t <= t1:
                return k
        return None

    for e in events:
        if e.get("cat") not in GPU_CATS:
            continue
        t = launches.get(e.get("args", {}).get("correlation"))
        if t is None:
            t, fallbacks = e["ts"], fallbacks + 1
        k = rep_of(t)
        if k is not None:
            out[k][0] += e["dur"] / 1000.0
            out[k][1] += 1
    return [tuple(x) for x in out], fallbacks


def load_torch(me):
    """PyTorch, or None after saying why on stderr (not installed, or no CUDA device): the caller then
    exits 0, a skipped run rather than a failure."""
    try:
        import torch
    except ImportError as e:
        print(f"{me}: skipped: PyTorch is not installed ({e})", file=sys.stderr)
        return None
    if not torch.cuda.is_available():
        print(f"{me}: skipped: PyTorch sees no CUDA device", file=sys.stderr)
        return None
    return torch


def run_commit(given=""):
    """The commit a run's rows name: the one given (--commit), else FA_COMMIT, else git's, else "unknown"."""
    if given:
        return given
    if os.environ.get("FA_COMMIT"):
        return os.environ["FA_COMMIT"]
    try:
        return subprocess.check_output(["git", "rev-parse", "--short", "HEAD"], text=True,
                                       stderr=subprocess.DEVNULL,
                                       cwd=os.path.dirname(os.path.abspath(__file__))).strip() or "unknown"
    except Exception:  # noqa: BLE001 — no git, or not a work tree
        return "unknown"


def utc_date():
    """The rows' date column: now, UTC, to the minute (as the step programs' rows)."""
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%MZ")


def first_line(e, n=120):
    """An exception's first line, at most n characters (its type's name where it has no message)."""
    return (str(e).strip().splitlines() or [type(e).__name__])[0][:n]


class Clock:
    """The three clocks over one CUDA device. `reps` timed calls per kernel time (after `warmup`
    untimed ones), `graph_calls` calls per graph, `graph_replays` timed replays."""

    def __init__(self, torch, reps=10, warmup=3, graph_calls=10, graph_replays=3):
        self.torch = torch
        self.reps, self.warmup = reps, warmup
        self.graph_calls, self.graph_replays = graph_calls, graph_replays
        self._flush = torch.empty(FLUSH_BYTES // 4, dtype=torch.int32, device="cuda").fill_(0x5A5A5A5A)

    def flush(self):
        """Read the 256 MiB buffer (a reduction): the L2 then holds clean lines of it, and none of the call's."""
        self._flush.sum()

    def event_ms(self, fn):
        """CUDA events around each Python call, the L2 flushed before each; the median."""
        torch = self.torch
        for _ in range(self.warmup):
            fn()
        ts = []
        for _ in range(self.reps):
            self.flush()
            torch.cuda.synchronize()
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            ts.append(a.elapsed_time(b))
        return statistics.median(ts)

    def kernel_ms(self, fn, before=None):
        """The kernel time of fn: per rep, `before` (untimed: e.g. the forward a backward needs), the L2
        flush, then fn inside an annotation; the records of what fn launched, summed. Returns
        (median ms, kernels per call, fallbacks)."""
        torch = self.torch
        from torch.profiler import ProfilerActivity, profile, record_function
        for _ in range(self.warmup):
            arg = before() if before else None
            fn(arg) if before else fn()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for i in range(self.reps):
                arg = before() if before else None
                self.flush()
                torch.cuda.synchronize()
                with record_function(f"{REP}{i}"):
                    fn(arg) if before else fn()
                    torch.cuda.synchronize()
        fd, path = tempfile.mkstemp(suffix=".json")
        os.close(fd)
        try:
            prof.export_chrome_trace(path)
            with open(path) as f:
                events = json.load(f)["traceEvents"]
        finally:
            os.remove(path)
        reps, fallbacks = per_rep_device_ms(events)
        if len(reps) != self.reps or any(n == 0 for _, n in reps):
            raise RuntimeError(f"the profiler's trace holds {len(reps)} of {self.reps} reps, "
                               f"{sum(n == 0 for _, n in reps)} of them without a GPU record")
        counts = sorted({n for _, n in reps})
        return statistics.median(ms for ms, _ in reps), counts[len(counts) // 2], fallbacks

    def graph_ms(self, fn):
        """graph_calls calls of fn captured in one CUDA graph (warmed up on a side stream first, as
        capture wants), replayed once, then graph_replays times timed; the median replay over the calls."""
        torch = self.torch
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(self.warmup):
                fn()
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(self.graph_calls):
                fn()
        g.replay()
        torch.cuda.synchronize()
        ts = []
        for _ in range(self.graph_replays):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            g.replay()
            b.record()
            b.synchronize()
            ts.append(a.elapsed_time(b) / self.graph_calls)
        del g
        return statistics.median(ts)

    def graph_or_none(self, fn, notes, what):
        """graph_ms(fn), or None with a note in notes where the backend cannot be captured."""
        try:
            return self.graph_ms(fn)
        except Exception as e:  # noqa: BLE001 — a capture a backend refuses is reported, not fatal
            notes.append(f"{what} not captured in a CUDA graph: {first_line(e)}")
            return None

    def time_call(self, fn, notes, what="forward"):
        """The three clocks of one call, fn already run once: a dict of event_ms, kernel_ms, kernels (per
        call), fallbacks (GPU records placed by their start) and graph_ms (None where capture failed, with
        a note in notes)."""
        t = {"event_ms": self.event_ms(fn)}
        t["kernel_ms"], t["kernels"], t["fallbacks"] = self.kernel_ms(fn)
        t["graph_ms"] = self.graph_or_none(fn, notes, what)
        return t
