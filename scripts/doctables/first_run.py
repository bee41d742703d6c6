"""The README's first-run table: how long the two commands take on a fresh machine (plots/data/first_run*.csv,
written by the lead's timing of scripts/run.sh and scripts/test.sh; columns date, commit, machine, cores,
gpu, command, build_s, run_s, total_s)."""
from . import common
from .common import table

COLUMNS = ("date", "commit", "machine", "cores", "gpu", "command", "build_s", "run_s", "total_s")


def seconds(x):
    """A duration in seconds as minutes and seconds ("7 min 32 s", "41 s"); "–" where the cell is empty."""
    if x in ("", None):
        return "–"
    s = round(float(x))
    return f"{s // 60} min {s % 60:02d} s" if s >= 60 else f"{s} s"


def first_run():
    rs = common.rows("first_run*.csv")
    if not rs:
        return "_Not measured yet: no `plots/data/first_run*.csv` holds a timed first run of these two commands._"
    lacking = [c for c in COLUMNS if c not in rs[0]]
    if lacking:
        return f"_Not measured yet: `plots/data/first_run*.csv` lacks the columns {', '.join(lacking)}._"
    body = [[f"`{r['command']}`", r["machine"], r["cores"], r["gpu"] or "none", seconds(r["build_s"]),
             seconds(r["run_s"]), seconds(r["total_s"]), f"`{r['commit']}`", r["date"]]
            for r in sorted(rs, key=lambda r: (r["date"], r["command"]))]
    return ("_`scripts/time_first_run.sh` on a fresh clone of the commit shown: the first call builds and runs, "
            "a second call right after runs alone, and build is the first less the second; `scripts/test.sh` is "
            "timed whole (how each file was made: `plots/data/README.md`)._\n\n" + table(["command", "machine", "cores", "GPU", "build", "run", "total", "commit", "date"], body))
