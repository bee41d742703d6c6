"""scripts/dq_precision.py's emulation: bf16 rounding is round-to-nearest-even, and at a long key range
with the course's inputs (mean 0.5) the error of D from the stored O is what spoils dQ — the formula
δD·scale·||Σ P k|| / ||dQ|| predicts it, D from the unrounded O removes most of it, and with zero-mean
inputs it is not there. Small Nk, so that it runs in seconds.

Run: python3 tests/test_dq_precision.py   (ctest runs it; exit status 0 when every check holds)."""
import os
import sys
import unittest

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
from dq_precision import bf16, run  # noqa: E402


class Rounding(unittest.TestCase):
    def test_bf16(self):
        self.assertEqual(bf16(1.0), 1.0)
        self.assertEqual(bf16(1.0 + 2 ** -8), 1.0)            # a tie: to the even neighbour
        self.assertEqual(bf16(1.0 + 3 * 2 ** -8), 1.0 + 2 ** -6)  # a tie the other way
        self.assertEqual(bf16(1.0 + 2 ** -7), 1.0 + 2 ** -7)  # representable: unchanged
        self.assertEqual(bf16(-3.0), -3.0)


class Mechanism(unittest.TestCase):
    def test_stored_o_spoils_dq(self):
        out, predicted, _ = run(2048, 64, 0.5, 3)
        fused, fixed = out["fused"][0], out["d-fp32o"][0]
        self.assertGreater(fused, 2 * fixed)             # D from the unrounded O removes most of it
        self.assertLess(abs(predicted - fused), 0.5 * fused)  # and δD's formula accounts for it
        self.assertLess(out["centered"][0], fused)      # the keys' mean taken out helps too
        self.assertLess(out["both"][0], 1e-6)            # with neither rounding, float64 against itself
        self.assertLess(out["shifted"][0], fused)       # the shifted keys take the common part out as well
        self.assertEqual(out["centered"][2], out["fused"][2])  # centering in the sum leaves dS (dK) alone
        self.assertNotEqual(out["shifted"][2], out["fused"][2])  # the shifted keys' rounding reaches P, so dS

    def test_zero_mean_keys(self):
        out, _, _ = run(2048, 64, 0.0, 3)
        # without a common part of the keys D's error hardly shows: dS's rounding is the floor
        self.assertLess(abs(out["fused"][0] - out["d-fp32o"][0]), 0.5 * out["fused"][0])


if __name__ == "__main__":
    unittest.main()
