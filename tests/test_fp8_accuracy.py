"""scripts/fp8_accuracy.py's emulation: e4m3 rounding on every one of its values and midpoints, the
randomized Hadamard transform orthogonal and QKᵀ unchanged by it, the quantization's error bound, the
tiled loop exact without roundings, and outliers costing per-tensor scales more than incoherent ones.

Run: python3 tests/test_fp8_accuracy.py   (ctest runs it with a Python that has PyTorch; exits 77 without)."""
import math
import os
import sys
import unittest

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
import fp8_accuracy as fp  # noqa: E402

torch = fp.torch


def e4m3_values():
    """Every finite e4m3 value (OCP E4M3: 0.1111.111 is NaN), from its bits, ascending, non-negative."""
    vals = []
    for bits in range(0x7F):  # sign 0; 0x7F is NaN
        e, m = bits >> 3, bits & 7
        vals.append(m / 8 * 2.0 ** -6 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7))
    return vals


class E4m3(unittest.TestCase):
    def test_every_value_is_its_own_rounding_and_the_largest_is_448(self):
        vals = e4m3_values()
        self.assertEqual(len(vals), 127)
        self.assertEqual(max(vals), fp.E4M3_MAX)
        x = torch.tensor(vals + [-v for v in vals], dtype=torch.float64)
        self.assertTrue(torch.equal(fp.e4m3(x), x))

    def test_midpoints_round_to_the_even_code_and_beyond_448_saturates(self):
        vals = e4m3_values()
        for i in range(len(vals) - 1):
            mid = (vals[i] + vals[i + 1]) / 2
            want = vals[i] if i % 2 == 0 else vals[i + 1]  # code i even: its mantissa's last bit is 0
            self.assertEqual(fp.e4m3(torch.tensor([mid], dtype=torch.float64)).item(), want, f"between {vals[i]} and {vals[i+1]}")
        big = torch.tensor([449.0, 1e6, -500.0], dtype=torch.float64)
        self.assertEqual(fp.e4m3(big).tolist(), [448.0, 448.0, -448.0])

    def test_the_relative_error_is_at_most_2_to_the_minus_4_in_the_normal_range(self):
        g = torch.Generator().manual_seed(1)
        x = torch.exp(torch.empty(100000, dtype=torch.float64).uniform_(math.log(2 ** -6), math.log(448), generator=g))
        rel = ((fp.e4m3(x) - x).abs() / x).max().item()
        self.assertLessEqual(rel, 2 ** -4)
        self.assertGreater(rel, 0.9 * 2 ** -4)  # and it is reached: 3 mantissa bits, half an ulp


class Incoherent(unittest.TestCase):
    def test_the_transform_is_orthogonal_and_leaves_qk_alone(self):
        for d in (64, 128, 256):
            M = fp.hadamard(d, seed=d)
            self.assertLess((M @ M.T - torch.eye(d, dtype=torch.float64)).abs().max().item(), 1e-12)
            g = torch.Generator().manual_seed(d)
            q, k = torch.randn(5, d, generator=g, dtype=torch.float64), torch.randn(7, d, generator=g, dtype=torch.float64)
            self.assertLess(((q @ M) @ (k @ M).T - q @ k.T).abs().max().item(), 1e-10)
        with self.assertRaises(ValueError):
            fp.hadamard(96, 0)

    def test_it_spreads_an_outlier_over_every_column(self):
        d = 128
        x = torch.zeros(1, d, dtype=torch.float64)
        x[0, 5] = 10.0
        y = x @ fp.hadamard(d, 3)
        self.assertAlmostEqual(y.abs().max().item(), 10.0 / math.sqrt(d), places=12)


class Quantize(unittest.TestCase):
    def test_each_element_within_half_an_ulp_of_its_scale(self):
        g = torch.Generator().manual_seed(2)
        x = torch.randn(3, 300, 64, generator=g, dtype=torch.float64)
        for block in (0, fp.TILE):
            codes, scale = fp.quantize(x, block)
            self.assertLessEqual(codes.abs().max().item(), fp.E4M3_MAX)
            back = codes * scale.unsqueeze(2)
            err = (back - x).abs()
            # normal range: 2^-4 relative; below it, the subnormal spacing 2^-9 of the scale, halved
            bound = torch.maximum(x.abs() * 2 ** -4, scale.unsqueeze(2) * 2 ** -10)
            self.assertTrue(bool((err <= bound * (1 + 1e-12)).all()), f"block {block}")


class Loop(unittest.TestCase):
    def test_without_roundings_the_tiled_loop_is_attention(self):
        g = torch.Generator().manual_seed(4)
        H, N, Nk, d = 2, 200, 333, 32
        q, k, v = (torch.randn(H, n, d, generator=g, dtype=torch.float64) for n in (N, Nk, Nk))
        for causal in (False, True):
            ref = fp.reference(q, k, v, causal, 0.2)
            out = fp.flash(q, k, v, torch.ones(H, N, dtype=torch.float64), torch.ones(H, Nk, dtype=torch.float64),
                           torch.ones(H, Nk, dtype=torch.float64), causal, lambda p: p, 0.2)
            self.assertLess((out - ref).abs().max().item(), 1e-5, f"causal={causal}")  # float32 arithmetic

    def test_outliers_cost_per_tensor_scales_more_than_incoherent_processing(self):
        q, k, v = fp.inputs(2, 512, 128, True, seed=7)
        ref = fp.reference(q, k, v, False, 128 ** -0.5)
        rmse = {var: (fp.run_variant(var, q, k, v, False, 128 ** -0.5, 0) - ref).pow(2).mean().sqrt().item()
                for var in ("bf16", "fp8-tensor", "fp8-block-incoherent")}
        self.assertLess(rmse["bf16"], rmse["fp8-block-incoherent"])
        self.assertLess(rmse["fp8-block-incoherent"], rmse["fp8-tensor"])


if __name__ == "__main__":
    if torch is None:
        sys.exit(77)
    unittest.main()
