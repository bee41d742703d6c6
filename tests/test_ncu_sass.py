"""scripts/ncu_sass.py on a committed Nsight source page (plots/data/logs/b7bd197/, no ncu, no GPU): the
rows it writes add up to the page they came from.

Run: python3 tests/test_ncu_sass.py   (ctest runs it; exit status 0 when every check holds)."""
import csv
import gzip
import os
import subprocess
import sys
import tempfile
import unittest

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import ncu_sass  # noqa: E402

PAGES = sorted(os.path.join(ROOT, "plots", "data", "logs", "b7bd197", f)
               for f in os.listdir(os.path.join(ROOT, "plots", "data", "logs", "b7bd197")) if f.startswith("ncu_source_"))


class Sums(unittest.TestCase):
    def run_script(self, page):
        out = os.path.join(tempfile.mkdtemp(), "s.csv")
        p = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "ncu_sass.py"), "--source-csv", page, "--out", out,
                            "--label", "fixture", "--gpu", "g", "--commit", "c", "--date", "d"], capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(out, newline="") as f:
            return list(csv.DictReader(f))

    def test_pages_exist(self):
        self.assertTrue(PAGES, "no committed source page to test on")

    def test_rows_add_up_to_the_page(self):
        for page in PAGES:
            with self.subTest(page=os.path.basename(page)):
                with gzip.open(page, "rt", encoding="utf-8") as f:
                    kernel, header, rows = ncu_sass.pages(f.read())[0]
                ix = {h: i for i, h in enumerate(header)}
                want_exec = sum(int(r[ix["Instructions Executed"]] or 0) for r in rows)
                out = self.run_script(page)
                ops = [r for r in out if r["kind"] == "opcode"]
                reasons = [r for r in out if r["kind"] == "reason"]
                self.assertTrue(ops and reasons)
                self.assertEqual(sum(int(r["static"]) for r in ops), len(rows))      # every instruction counted once
                self.assertEqual(sum(int(r["executed"]) for r in ops), want_exec)    # and its executions
                self.assertAlmostEqual(sum(float(r["samples_pct"]) for r in ops), 100.0, delta=0.05 * len(ops))
                # Nsight's reasons partition its samples: their shares add up to the whole as well.
                self.assertAlmostEqual(sum(float(r["samples_pct"]) for r in reasons), 100.0, delta=0.05 * len(reasons) + 0.5)
                self.assertEqual(len({r["name"] for r in ops}), len(ops))             # one row per opcode
                want_samples = sum(int(float(r[ix["Warp Stall Sampling (All Samples)"]].replace(",", "") or 0)) for r in rows)
                self.assertEqual(sum(int(r["samples"]) for r in ops), want_samples)  # the counts themselves, every sample once
                self.assertTrue(all(r["kernel"] == kernel for r in out))

    def test_opcode_drops_predicate_and_modifiers(self):
        self.assertEqual(ncu_sass.opcode("@!P0  BRA 0x7f35c37c00e0"), "BRA")
        self.assertEqual(ncu_sass.opcode("HGMMA.64x64x16.F32 R56, gdesc[UR16], RZ, !UPT"), "HGMMA")
        self.assertEqual(ncu_sass.opcode(""), "")


if __name__ == "__main__":
    unittest.main()
