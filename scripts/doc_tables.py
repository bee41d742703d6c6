#!/usr/bin/env python3
"""Write the measured tables into the docs and the README from the committed CSVs.

  scripts/doc_tables.py           rewrite every block between <!-- table:NAME --> and <!-- /table:NAME -->
                                  in README.md, docs/*.md, docs/labs/*.md and docs/labs/instructor/*.md
  scripts/doc_tables.py --check   exit 1 if any block is not what the CSVs give (a ctest runs this)

Tables come only from plots/data/*.csv, which the GPU scripts write (scripts/README.md): no measured
number in the docs is typed by hand. The tables themselves live in the package scripts/doctables/
(one module a job; TABLES in doctables/registry.py). Standard library only.
"""
import os
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from doctables import BLOCK, PEER_TABLES, TABLES, ClockError, clock_caption, kernel_clock, main  # noqa: E402,F401

if __name__ == "__main__":
    main()
