"""The measured tables of the docs and the README, from the committed CSVs (plots/data/*.csv).

The package behind scripts/doc_tables.py, one module a job:
  common     the CSVs, provenance lines, the table, the one clock's caption, the target matrices
  steps      one step or a few: sweeps, Nsight, comparisons, ablations, step 13's experiments, the tour
  peers      a step beside PyTorch's SDPA backends: the target matrices of steps 07-16
  decode     step 17: the decode target, its clocks, the probes
  ring       step 18: ring_bench, the timeline, ring_nccl
  model      the closed-form traffic, the papers' fractions of peak, the ceilings, the per-resource model
  first_run  the README's first-run times
  registry   TABLES (name -> function) and PEER_TABLES
main() fills every block <!-- table:NAME --> ... <!-- /table:NAME --> of README.md, docs/*.md,
docs/labs/*.md and docs/labs/instructor/*.md. Standard library only.
"""
import glob
import os
import re
import sys

from . import common
from .common import ROOT, ClockError, clock_caption, kernel_clock, CLOCK_CAPTION
from .registry import PEER_TABLES, TABLES

BLOCK = re.compile(r"(<!-- table:([\w-]+) -->\n)(.*?)(<!-- /table:\2 -->)", re.S)
# The files main() scans, as globs under the repository's root.
DOC_GLOBS = ("README.md", "docs/*.md", "docs/labs/*.md", "docs/labs/instructor/*.md")


def doc_files():
    """Every file main() fills, sorted, as absolute paths."""
    return sorted({p for g in DOC_GLOBS for p in glob.glob(os.path.join(ROOT, g))})


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    check = "--check" in argv
    stale = []
    for path in doc_files():
        text = open(path, encoding="utf-8").read()

        def fill(m):
            name = m.group(2)
            if name not in TABLES:
                sys.exit(f"{path}: unknown table '{name}'")
            return m.group(1) + TABLES[name]() + "\n" + m.group(4)

        new = BLOCK.sub(fill, text)
        if new != text:
            stale.append(os.path.relpath(path, ROOT))
            if not check:
                open(path, "w", encoding="utf-8").write(new)
    if check and stale:
        print("stale tables (run scripts/doc_tables.py):", ", ".join(stale))
        sys.exit(1)
    print(("checked: " if check else "updated: ") + (", ".join(stale) if stale else "all tables current"))
