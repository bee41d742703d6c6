"""The one clock in the generated tables (scripts/doc_tables.py): a table that sets a step beside PyTorch's
backends says how both sides were timed, and refuses to be written from rows timed two ways.

Run: python3 tests/test_doc_tables.py   (ctest runs it; no GPU, no torch)."""
import os
import re
import sys
import unittest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import doc_tables as dt  # noqa: E402

OURS = {"clock": "cupti;l2-read-256MiB", "commit": "abc1234", "date": "2026-01-01T00:00Z"}
PEER = {"clock": "kineto;l2-read-256MiB", "commit": "abc1234", "date": "2026-01-01T00:00Z"}


class Clock(unittest.TestCase):
    def test_both_sides_by_the_kernel_clock_with_the_same_flush(self):
        self.assertIn("kernel time", dt.clock_caption([OURS], [PEER]))

    def test_rows_without_a_kernel_clock_are_refused(self):
        with self.assertRaises(dt.ClockError):
            dt.clock_caption([OURS], [dict(PEER, clock="")])
        with self.assertRaises(dt.ClockError):
            dt.clock_caption([{"commit": "x"}], [PEER])

    def test_two_flushes_are_refused(self):
        with self.assertRaises(dt.ClockError):
            dt.clock_caption([OURS], [dict(PEER, clock="kineto;l2-warm")])

    def test_one_side_mixing_two_methods_is_refused(self):
        with self.assertRaises(dt.ClockError):
            dt.kernel_clock([OURS, dict(OURS, clock="cupti;l2-warm")], "ours")

    def test_a_peer_table_from_event_timed_peers_is_not_written(self):
        real = dt.rows
        try:  # the committed rows, with the peers' clock column taken away: an event-timed run
            dt.rows = lambda pat: [dict(r, clock="") if "peers_" in pat else r for r in real(pat)]
            with self.assertRaises(dt.ClockError):
                dt.TABLES["step12-target"]()
        finally:
            dt.rows = real


class Captions(unittest.TestCase):
    def test_every_peer_table_in_the_docs_names_its_clock(self):
        found = 0
        for name in ["README.md"] + [os.path.join("docs", f) for f in os.listdir(os.path.join(ROOT, "docs")) if f.endswith(".md")]:
            text = open(os.path.join(ROOT, name), encoding="utf-8").read()
            for m in dt.BLOCK.finditer(text):
                if m.group(2) in dt.PEER_TABLES:
                    found += 1
                    with self.subTest(file=name, table=m.group(2)):
                        self.assertIn("_Timing (both sides): kernel time", m.group(3))
        # every table of PEER_TABLES appears somewhere (a renamed block would escape the check)
        names = {m.group(2) for f in ["README.md"] + ["docs/" + x for x in os.listdir(os.path.join(ROOT, "docs"))
                                                      if x.endswith(".md")]
                 for m in dt.BLOCK.finditer(open(os.path.join(ROOT, f), encoding="utf-8").read())}
        self.assertEqual(set(dt.PEER_TABLES) - names, set())
        self.assertGreaterEqual(found, len(dt.PEER_TABLES))


if __name__ == "__main__":
    unittest.main()
