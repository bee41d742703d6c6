"""scripts/clock.py's attribution of GPU records to calls, on a hand-made Kineto trace (no GPU, no torch).

Run: python3 tests/test_clock.py   (ctest runs it; exit status 0 when every check holds)."""
import os
import sys
import unittest

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
from clock import REP, per_rep_device_ms  # noqa: E402


def ev(cat, name, ts, dur, corr=None, tid=1):
    e = {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "tid": tid, "args": {}}
    if corr is not None:
        e["args"]["correlation"] = corr
    return e


class Attribution(unittest.TestCase):
    def trace(self):
        return [
            # the L2 flush before rep 0: launched outside every rep, its kernel not counted
            ev("cuda_runtime", "cudaLaunchKernel", 5, 2, corr=1),
            ev("kernel", "reduce_kernel", 8, 50, corr=1),
            ev("user_annotation", REP + "0", 100, 400),
            ev("cuda_runtime", "cudaLaunchKernel", 110, 3, corr=2),
            ev("cuda_driver", "cuLaunchKernel", 120, 3, corr=3),        # cuDNN launches through the driver
            ev("cuda_runtime", "cudaMemsetAsync", 130, 2, corr=4, tid=7),  # autograd's thread
            ev("kernel", "main", 140, 30, corr=2),
            ev("kernel", "reduction", 175, 5, corr=3),
            ev("gpu_memset", "Memset", 135, 1, corr=4),
            ev("user_annotation", REP + "1", 600, 400),
            ev("cuda_runtime", "cudaLaunchKernel", 610, 3, corr=5),
            ev("kernel", "main", 640, 32, corr=5),
            # a record whose launch is not in the trace: placed by its own start
            ev("kernel", "orphan", 700, 4, corr=99),
            ev("cpu_op", "aten::sum", 10, 5),
        ]

    def test_each_rep_sums_what_it_launched(self):
        reps, fallbacks = per_rep_device_ms(self.trace())
        self.assertEqual(len(reps), 2)
        self.assertAlmostEqual(reps[0][0], (30 + 5 + 1) / 1000.0)
        self.assertEqual(reps[0][1], 3)
        self.assertAlmostEqual(reps[1][0], (32 + 4) / 1000.0)
        self.assertEqual(reps[1][1], 2)
        self.assertEqual(fallbacks, 1)

    def test_reps_come_in_their_order_whatever_the_trace_order(self):
        t = self.trace()
        reps, _ = per_rep_device_ms(list(reversed(t)))
        self.assertAlmostEqual(reps[0][0], 0.036)
        self.assertAlmostEqual(reps[1][0], 0.036)

    def test_a_rep_without_records_counts_none(self):
        reps, _ = per_rep_device_ms([ev("user_annotation", REP + "0", 0, 10)])
        self.assertEqual(reps, [(0.0, 0)])


if __name__ == "__main__":
    unittest.main()
