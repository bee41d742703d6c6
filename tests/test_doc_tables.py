"""The one clock in the generated tables (scripts/doc_tables.py, the package scripts/doctables/): a table that
sets a step beside PyTorch's backends says how both sides were timed, and refuses to be written from rows
timed two ways; the target matrices come from scripts/targets.txt; the first-run table says when nothing
was measured.

Run: python3 tests/test_doc_tables.py   (ctest runs it; no GPU, no torch)."""
import os
import re
import sys
import unittest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import doctables as dt  # noqa: E402
from doctables import common, first_run  # noqa: E402

OURS = {"clock": "cupti;l2-read-256MiB", "commit": "abc1234", "date": "2026-01-01T00:00Z"}
PEER = {"clock": "kineto;l2-read-256MiB", "commit": "abc1234", "date": "2026-01-01T00:00Z"}


def with_rows(table, files):
    """A table's text with common.rows answering from `files` (a prefix of the pattern -> its rows)."""
    real = common.rows
    try:
        common.rows = lambda pat: next((rs for prefix, rs in files.items() if pat.startswith(prefix)), [])
        return dt.TABLES[table]()
    finally:
        common.rows = real


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
        real = common.rows  # every module of the package reads the CSVs through common.rows
        try:  # the committed rows, with the peers' clock column taken away: an event-timed run
            common.rows = lambda pat: [dict(r, clock="") if "peers_" in pat else r for r in real(pat)]
            with self.assertRaises(dt.ClockError):
                dt.TABLES["step12-target"]()
        finally:
            common.rows = real


class Captions(unittest.TestCase):
    def test_every_peer_table_in_the_docs_names_its_clock(self):
        found, names = 0, set()
        for path in dt.doc_files():  # README.md, docs/*.md, docs/labs/*.md, docs/labs/instructor/*.md
            text = open(path, encoding="utf-8").read()
            for m in dt.BLOCK.finditer(text):
                names.add(m.group(2))
                if m.group(2) in dt.PEER_TABLES:
                    found += 1
                    with self.subTest(file=os.path.relpath(path, ROOT), table=m.group(2)):
                        self.assertIn("_Timing (both sides): kernel time", m.group(3))
        # every table of PEER_TABLES appears somewhere (a renamed block would escape the check)
        self.assertEqual(set(dt.PEER_TABLES) - names, set())
        self.assertGreaterEqual(found, len(dt.PEER_TABLES))

    def test_every_block_names_a_registered_table(self):
        for path in dt.doc_files():
            for m in dt.BLOCK.finditer(open(path, encoding="utf-8").read()):
                with self.subTest(file=os.path.relpath(path, ROOT)):
                    self.assertIn(m.group(2), dt.TABLES)


class Targets(unittest.TestCase):
    def test_the_matrices_come_from_the_targets_file(self):
        t = common.read_targets()
        for matrix in ("fwd", "bwd", "early"):
            for axis in ("dtypes", "ds", "causal", "ns"):
                self.assertIn((matrix, axis), t)
        for axis in ("bs", "caches", "pages"):
            self.assertIn(("decode", axis), t)
        pts = common.target_points("bwd")
        self.assertEqual(len(pts), len(set(pts)))
        self.assertEqual(len(pts), len(t[("bwd", "dtypes")]) * len(t[("bwd", "ds")]) * len(t[("bwd", "causal")])
                         * len(t[("bwd", "ns")]))
        self.assertEqual(dt.peers.FWD_TARGET_POINTS, common.target_points("fwd"))

    def test_a_malformed_line_is_refused(self):
        import tempfile
        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
            f.write("fwd ns 1024, 2048\n")
        try:
            with self.assertRaises(ValueError):
                common.read_targets(f.name)
        finally:
            os.remove(f.name)

    def test_bash_reads_the_same_values(self):
        import shutil
        import subprocess
        if not shutil.which("bash"):
            self.skipTest("no bash")
        sh = os.path.join(ROOT, "scripts", "targets.sh")
        for (matrix, axis), values in common.read_targets().items():
            out = subprocess.run(["bash", "-c", f'source "{sh}" && target {matrix} {axis}'], capture_output=True, text=True)
            self.assertEqual(out.returncode, 0, out.stderr)
            self.assertEqual(out.stdout.strip().split(","), list(values))


class FirstRun(unittest.TestCase):
    def table_from(self, rs):
        real = common.rows
        try:
            common.rows = lambda pat: rs if pat.startswith("first_run") else real(pat)
            return dt.TABLES["first-run"]()
        finally:
            common.rows = real

    def test_no_csv_gives_one_sentence(self):
        text = self.table_from([])
        self.assertTrue(text.startswith("_Not measured yet"))
        self.assertNotIn("\n", text)

    def test_rows_give_a_table(self):
        row = {"date": "2026-01-01", "commit": "abc1234", "machine": "a laptop", "cores": "2", "gpu": "",
               "command": "scripts/run.sh", "build_s": "452", "run_s": "3.2", "total_s": "455.2"}
        self.assertIn("| `scripts/run.sh` | a laptop | 2 | none | 7 min 32 s | 3 s | 7 min 35 s |", self.table_from([row]))
        self.assertTrue(self.table_from([{"date": "x"}]).startswith("_Not measured yet"))


class LatencyTerm(unittest.TestCase):
    """docs/model.md's latency-term tables on made-up rows: what they compute, not what a GPU measured."""
    TOUR = {"date": "2026-01-01T00:00Z", "commit": "abc1234", "device": "a GPU", "cuda": "13.0", "step": "03"}

    def row(self, file, ratio, latency_ms="", model_ms="10"):
        return {"file": file, "step": "03", "variant": "-", "pass_of": "fwd", "N": "4096", "d": "128", "causal": "0",
                "measured_ms": str(float(model_ms) * ratio), "ms_min": "1", "ms_max": "1", "model_ms": model_ms,
                "ratio": str(ratio), "bound_by": "latency" if latency_ms else "smem+serial", "latency_ms": latency_ms}

    def test_the_tour_with_and_without_the_term(self):
        text = with_rows("model-latency", {
            "model_latency": [self.row("plots/data/tour_h200.csv", 1.2, latency_ms="20", model_ms="20")],
            "model_h200": [self.row("tour_h200.csv", 3.0)], "tour_": [self.TOUR]})
        self.assertIn("| 03 | - | fwd | 24 | 10 | 3.00 | 20 | 20 | 1.20 | yes | latency |", text)
        self.assertIn("**0 of 1** passes without the latency term, **1 of 1** with it", text)

    def test_a_step_doc_gets_the_term_only_where_the_profile_has_its_listing(self):
        files = {"model_latency": [self.row("plots/data/tour_h200.csv", 1.2, latency_ms="20", model_ms="20")],
                 "model_h200": [self.row("tour_h200.csv", 3.0)], "tour_": [self.TOUR]}
        self.assertIn("| 20 | 1.20 | latency |", with_rows("model-step03", files))
        files["model_latency"] = [self.row("plots/data/tour_h200.csv", 3.0)]  # no term: the old table alone
        self.assertNotIn("with the latency term", with_rows("model-step03", files))

    def test_nsight_counts_by_class_beside_the_model(self):
        kernel = "void fa::step05::step05_warp_split<__half, (int)128, (bool)1>(fa::AttnParams)"
        ncu = [{"gpu": "a GPU", "device": "a GPU", "commit": "abc1234", "date": "2026-01-01T00:00Z", "label": "step05 tour",
                "kernel": kernel, "kind": "opcode", "name": op, "executed": n}
               for op, n in (("HMMA", "600"), ("LDS", "100"), ("LDSM", "100"), ("BAR", "50"), ("IMAD", "900"))]
        base = {"file": "plots/data/tour_h200.csv", "step": "05", "variant": "split=q", "pass_of": "fwd", "kernel": "warp_split",
                "inst_gmem": "0", "inst_smem": "400", "inst_mma": "600", "inst_sfu": "0", "inst_barrier": "50",
                "inst_control": "0", "inst_alu": "1000"}
        model = [dict(base, function="_ZN2fa6step0517step05_warp_splitI6__halfLi128ELb1EEEvNS_10AttnParamsE"),
                 dict(base, variant="split=k", inst_mma="9",  # the other instantiation: not Nsight's kernel
                      function="_ZN2fa6step0517step05_warp_splitI6__halfLi128ELb0EEEvNS_10AttnParamsE")]
        text = with_rows("model-latency-counts", {"ncu_sass_": ncu, "model_counts": model})
        self.assertIn("| 05 | warp_split | mma | 600 | 600 | 1.00 |", text)
        self.assertIn("| 05 | warp_split | smem | 400 | 200 | 0.50 |", text)
        self.assertIn("| 05 | warp_split | alu | 1000 | 900 | 0.90 |", text)
        self.assertEqual(text.count("| 05 | warp_split | mma |"), 1)

    def test_a_path_shares_its_cycles_loop_by_loop(self):
        base = {"file": "plots/data/tour_h200.csv", "step": "03", "variant": "-", "pass_of": "fwd", "dtype": "fp16",
                "N": "4096", "d": "128", "kernel": "kv_outer", "function": "_Zf", "warps_per_scheduler": "1",
                "path_cycles": "1000", "path_instructions": "100", "latency_ms": "1", "latency_by": "chain",
                "marker": "bar", "hot_loop": "0"}
        paths = [dict(base, loop="-1", parent="", trip_kind="once", trips_per_entry="1", executions="1", cycles="250"),
                 dict(base, loop="0", parent="-1", trip_kind="runtime", trips_per_entry="75", executions="75", cycles="750")]
        prof = [{"function": "_Zf", "loop": "-1", "instructions": "40", "barrier": "0", "chain_cycles": "250.0"},
                {"function": "_Zf", "loop": "0", "instructions": "8", "barrier": "1", "chain_cycles": "10.0"}]
        text = with_rows("model-path-step03", {"model_paths": paths, "sass_profile": prof, "tour_": [self.TOUR]})
        self.assertIn("| -1 | – | once | 1 | 1 | 40 | 0 | 250.0 | 25.0 % |", text)
        self.assertIn("| 0 (hot) | -1 | the problem | 75 | 75 | 8 | 1 | 10.0 | 75.0 % |", text)

    def test_the_validation_tour_counts_its_passes_against_the_development_table(self):
        val = [self.row("plots/data/model_latval_tour_h200.csv", 1.2, latency_ms="20", model_ms="20"),
               dict(self.row("plots/data/model_latval_tour_h200.csv", 1.6, latency_ms="5", model_ms="5"), step="09"),
               dict(self.row("plots/data/model_latval_tour_h200.csv", 1.1), step="21", variant="v=kernel")]
        dev = [self.row("plots/data/tour_h200.csv", 1.0, latency_ms="20", model_ms="20"),  # 03: +20 %, outside 10 %
               dict(self.row("plots/data/tour_h200.csv", 1.55, latency_ms="5", model_ms="5"), step="09")]
        tour = [dict(self.TOUR, variant="-", model_ms="20"), dict(self.TOUR, step="09", variant="-", model_ms="5.1"),
                dict(self.TOUR, step="21", variant="v=kernel", model_ms="10")]
        text = with_rows("model-latval", {"model_latval_h200": val, "model_latval_tour": tour, "model_latency": dev})
        self.assertIn("| 03 | - | fwd | 24 (1–1) | 20 | 20 | 1.20 | yes | 1.00 | +20.0 % | latency |", text)
        self.assertIn("| 21 | v=kernel | fwd | 11 (1–1) | – | 10 | 1.10 | yes | – | – | smem+serial |", text)
        self.assertIn("**2 of 3** passes; of the 2 the development table has, **1 of 2** (the development table: 1 of 2)", text)
        self.assertIn("Outside: 09 `-` fwd 1.600.", text)
        self.assertIn("**1 of 2** passes; the largest change +20.0 % (step 03 `-` fwd)", text)
        self.assertIn("largest relative difference 0.02", text)  # 5.1 against 5

    def test_the_validation_inputs_count_the_loops_whose_listing_differs(self):
        lat = {"date": "2026-01-01T00:00Z", "commit": "abc1234", "device": "a GPU", "cuda": "13.0", "unit": "ns"}
        loop = {"step": "03", "function": "_Zf", "loop": "0", "regs_used": "64", "instructions": "8", "chain_cycles": "100",
                "chain_cycles_hbm": "200"}
        files = {"model_latval_latencies": [dict(lat, peak="l2-latency", value="160")],
                 "latencies_": [dict(lat, peak="l2-latency", value="150")],
                 "model_latval_sass_profile": [dict(loop, chain_cycles="110"), dict(loop, loop="1", instructions="9")],
                 "sass_profile": [loop, dict(loop, loop="1")]}
        text = with_rows("model-latval-inputs", files)
        self.assertIn("| `l2-latency` | 150 | 160 | +6.7 % |", text)
        self.assertIn("the same (step, kernel, loop) triples; loops whose registers, trips or instructions by class "
                      "differ: **1**", text)
        self.assertIn("1.000–1.100 (a load from L2)", text)

    def test_the_queueing_bound_beside_the_idle_latencies_counts_every_pass(self):
        old = [self.row("plots/data/model_latval_tour_h200.csv", 1.6, latency_ms="5", model_ms="5"),
               dict(self.row("plots/data/model_latval_tour_h200.csv", 1.0), step="20", variant="exp2=poly"),
               dict(self.row("plots/data/model_latval_tour_h200.csv", 1.0), step="21", variant="v=kernel")]
        new = [self.row("plots/data/model_latval_tour_h200.csv", 1.4, latency_ms="5.7", model_ms="5.7"),
               dict(self.row("plots/data/model_latval_tour_h200.csv", 1.1, model_ms="9"), step="20", variant="exp2=poly"),
               dict(self.row("plots/data/model_latval_tour_h200.csv", 1.0), step="21", variant="v=kernel")]
        path = {"step": "03", "variant": "-", "pass_of": "fwd", "path_cycles": "1000"}
        paths = [dict(path, kernel="a", loop="-1", queue_cycles="0"), dict(path, kernel="a", loop="0", queue_cycles="150")]
        text = with_rows("model-refined", {"model_refined_h200": new, "model_refined_paths": paths,
                                           "model_latval_h200": old, "model_latval_tour": [self.TOUR]})
        self.assertIn("| 03 | - | fwd | 7.98 | 5 | 5.7 | 15.0 % | 1.600 | 1.400 | yes | latency |", text)
        self.assertNotIn("| 21 |", text)  # no latency term: not a row, but counted below
        self.assertIn("**3 of 3** with the queueing bound (the model as the run computed it: 2 of 3)", text)
        self.assertIn("not the bound): 20 `exp2=poly` fwd.", text)


    def test_step02s_loop_before_and_after_counts_by_d_and_names_other_steps_that_moved(self):
        def r(ratio, d="64", step="02", model_ms="10", bound="latency"):
            return dict(self.row("plots/data/tour_h200.csv", ratio, model_ms=model_ms), step=step, d=d, B="4", H="16",
                        bound_by=bound)
        before = [r(3.0, bound="l2+serial"), r(1.6, d="128", bound="l2+serial"), r(1.3, step="08", model_ms="10")]
        after = [r(1.2, model_ms="25"), r(0.6, d="128", model_ms="80"), r(1.29, step="08", model_ms="10.1")]
        path = {"file": "plots/data/tour_h200.csv", "step": "02", "pass_of": "fwd", "B": "4", "H": "16", "N": "4096",
                "causal": "0", "loop": "0", "hot_loop": "0"}
        text = with_rows("model-step02-loop", {
            "model_step02_before_paths": [dict(path, d="64", executions="128", marker="sfu")],
            "model_step02_before_h200": before,
            "model_step02_paths": [dict(path, d="64", executions="2047", marker="gmem"),
                                   dict(path, d="64", loop="-1", executions="1", marker="gmem")],
            "model_step02_h200": after, "tour_h200": [self.TOUR]})
        self.assertIn("| tour | B4 H16 N4096 | 64 | 30 | 10 | 3.00 | l2+serial | 128 (sfu) | 25 | 1.20 | yes | latency "
                      "| 2047 (gmem) |", text)
        self.assertIn("| tour | B4 H16 N4096 | 128 | 48 | 10 | 1.60 | l2+serial | – | 80 | 0.60 | **no** |", text)
        self.assertIn("Within 1.5×, d = 64: **1 of 1** after, 0 of 1 before.", text)
        self.assertIn("Within 1.5×, d = 128: **0 of 1** after, 0 of 1 before.", text)
        self.assertIn("08 `-` fwd tour_h200.csv (+1.0 % in the model, ratio 1.300 → 1.290)", text)
        self.assertNotIn("| 08 |", text)

    def test_the_queued_validation_reads_each_part_of_its_prediction(self):
        import doctables.model as dm
        expected = sorted(dm.QUEUED_OUTSIDE) + [dm.QUEUED_LINE[0], ("03", "-", "fwd")]

        def model(ratios):
            return [dict(self.row("x", ratios.get(k, 1.0)), step=k[0], variant=k[1]) for k in expected]

        def tour(ratios):
            return [dict(self.TOUR, step=k[0], variant=k[1], ms=str(ratios.get(k, 1.0)), model_ms="1") for k in expected]

        queued = {k: 1.6 for k in dm.QUEUED_OUTSIDE}
        queued[("09", "-", "fwd")], queued[("03", "-", "fwd")] = 1.49, 1.30
        idle = dict(queued)
        idle[("03", "-", "fwd")] = 1.35  # the bound moved 03 from 1.35 to 1.30
        paths = [{"step": "03", "variant": "-", "pass_of": "fwd", "kernel": "a", "path_cycles": "1000", "queue_cycles": "50"}]
        files = {"logs/0ff8dbe/tour_h200": tour(queued), "model_refined_h200": model(queued), "model_latval_h200": model(idle),
                 "model_refined_paths_h200": paths}
        text = with_rows("model-h200-queued", files)
        self.assertIn(f"**{len(expected) - 6} of {len(expected)}** (predicted {len(expected) - 6}, with the six it names "
                      "outside and step 09 in 1.45–1.55: **held**)", text)
        self.assertIn(f"within 10 % of their queued ratio: **{sum(int(k[0]) <= 12 for k in expected)} of "
                      f"{sum(int(k[0]) <= 12 for k in expected)}** (predicted all: **held**)", text)
        self.assertIn("Refuter 2, a pass the bound moved (1) with its ratio now above its idle ratio: **did not fire**", text)
        moved = dict(queued)
        moved[("09", "-", "fwd")], moved[("03", "-", "fwd")], moved[("01", "gemm=wmma", "fwd")] = 1.40, 1.60, 1.3
        text = with_rows("model-h200-queued", dict(files, **{"logs/0ff8dbe/tour_h200": tour(moved)}))
        self.assertIn("step 09 in 1.45–1.55: **missed**", text)
        self.assertIn("Step 09 on the line: 1.400 (predicted 1.45–1.55: **missed**)", text)
        self.assertIn("Not as predicted: 01 `gemm=wmma` fwd (inside, predicted outside); 03 `-` fwd (outside, predicted inside)", text)
        self.assertIn("Refuter 1, step 01 `gemm=wmma` more than 10 % from its queued ratio: -18.8 %: **fired**", text)
        self.assertIn("**fired** (03 `-` fwd)", text)
        self.assertTrue(with_rows("model-h200-queued", {}).startswith("_no measurements yet"))

class PythonPackage(unittest.TestCase):
    """docs/python.md's tables on made-up rows: what they compute, not what a GPU measured."""

    def gpt(self, shift):
        ident = {"date": "2026-01-01T00:00Z", "commit": "abc1234", "device": "a GPU", "layers": "1", "d_model": "8",
                 "heads": "1", "context": "8", "batch": "1", "attn_clock": "kineto;in-situ (no L2 flush)"}
        steps, runs = [], []
        for backend, off in (("sdpa", 0.0), ("steps", shift)):
            for seed, noise in enumerate((-0.1, 0.0, 0.1)):
                for step in range(1, 41):
                    steps.append({"backend": backend, "seed": str(seed), "step": str(step),
                                  "loss": str(5 - step / 10 + noise + off)})
                runs.append(dict(ident, backend=backend, seed=str(seed), steps="40", final_loss=str(1 + noise + off),
                                 final_val_loss="", step_ms_median="10", attn_kernel_ms_per_step="2" if off else "1",
                                 **({"host_ms_median": "4"} if off else {})))
        return with_rows("python-gpt", {"gpt_steps": steps, "gpt_runs": runs})

    def test_curves_within_the_seed_spread_agree_at_every_step(self):
        text = self.gpt(0.05)  # inside the spread of 0.2
        self.assertIn("at **40 of 40** steps", text)
        self.assertIn("package / SDPA: **2.00**", text)
        # the host time where a run wrote it, a dash for rows from before the column existed
        self.assertIn("| sdpa | 3 | 40 |", text)
        self.assertRegex(text, r"\| sdpa \| 3 \| 40 \| [^\n]* \| 10\.0 \| – \| 1\.000 \|")
        self.assertRegex(text, r"\| steps \| 3 \| 40 \| [^\n]* \| 10\.0 \| 4\.0 \| 2\.000 \|")

    def test_a_curve_outside_the_spread_disagrees(self):
        self.assertIn("at **0 of 40** steps", self.gpt(0.5))

    def test_the_host_check_per_gpu(self):
        ident = {"date": "2026-01-01T00:00Z", "commit": "abc1234", "device": "a GPU", "seed": "0", "steps": "300"}
        runs = [dict(ident, backend="sdpa", step_ms_median="10", host_ms_median="9.9", attn_kernel_ms_per_step="1"),
                dict(ident, backend="steps", step_ms_median="12", host_ms_median="6", attn_kernel_ms_per_step="1.1")]
        text = with_rows("python-gpt-host", {"gpthost_": runs})
        self.assertIn("| a GPU | `abc1234` | steps | 1 | 300 | 12.00 | 6.00 | 1.100 |", text)
        self.assertIn("SDPA's **1.20** (prediction ≤ 1.10: **missed**)", text)
        self.assertIn("waits for the host) for: sdpa.", text)
        runs[1].update(step_ms_median="10.5")
        self.assertIn("**1.05** (prediction ≤ 1.10: **met**)", with_rows("python-gpt-host", {"gpthost_": runs}))

    def test_no_rows_give_one_sentence(self):
        for table in ("python-gpt", "python-gpt-host", "python-peers"):
            self.assertTrue(with_rows(table, {}).startswith("_no measurements yet"))

    def test_the_package_beside_the_step_programs(self):
        base = {"date": "2026-01-01T00:00Z", "commit": "abc1234", "dtype": "fp16", "d": "128", "causal": "0",
                "N": "1024", "B": "16", "H": "16"}
        peers = [dict(base, **PEER, backend="package", status="ok", kernel_ms="1.1", bwd_kernel_ms="2.2", device="a GPU"),
                 dict(base, **PEER, backend="cudnn", status="ok", kernel_ms="1", bwd_kernel_ms="4.4", torch="2.11")]
        step = [dict(base, **OURS, step="19", variant="-", kernel_ms="1.0", bwd_kernel_ms="2.0", bwd_ms="2.0",
                     device="a GPU", cuda="13.0")]
        text = with_rows("python-peers", {"pypeers": peers, "clock_": step})
        self.assertIn("| fp16 | 128 | no | 1024 | 1.100 | 1.000 | 1.100 | 2.200 | 2.000 | 1.100 | 2.000 |", text)
        self.assertIn("_Timing (both sides): kernel time", text)


class Step21(unittest.TestCase):
    """docs/21_fp8.md's tables on made-up rows: the ratios, the verdicts, the emulation beside."""
    # A loads-style run's row (fp8_target.sh's loads phase) and a GPU's two streaming ceilings.
    LOADS = {"date": "2026-01-01T00:00Z", "commit": "abc1234", "device": "a GPU", "cuda": "13.0", "d": "128",
             "causal": "0", "N": "16384", "Nk": "16384", "B": "1", "H": "16", "pass": "1", "step": "21",
             "dtype": "e4m3", "variant": "-", "kernel_ms": "1", **OURS}
    PEAKS = [{"peak": "hbm-read", "unit": "bytes/s", "value": "4e12"}, {"peak": "hbm-write", "unit": "bytes/s", "value": "4e12"}]

    def test_the_target_counts_the_quantize_kernels_and_gives_the_forward_alone(self):
        base = {"date": "2026-01-01T00:00Z", "commit": "abc1234", "device": "a GPU", "cuda": "13.0", "d": "128",
                "causal": "0", "N": "16384", "Nk": "16384", "B": "1", "H": "16", "pass": "1", **OURS}
        flops = 4 * 16 * 16384 * 16384 * 128  # 1 ms is this many TFLOP/s / 1e9
        ms16, ms21 = flops / 600e12 * 1e3, flops / 1100e12 * 1e3  # 600 and 1100 TFLOP/s with the quantize kernels
        rows = [dict(base, step="16", dtype="bf16", variant="-", kernel_ms=str(ms16), kernel_tflops="600"),
                dict(base, step="21", dtype="e4m3", variant="v=kernel", kernel_ms=str(ms21), kernel_tflops="1100",
                     kernels_ms=f"memset:0.001;amax:{0.05 * ms21};quantize:{0.05 * ms21};fp8:{0.9 * ms21}")]  # names as bench writes them
        text = with_rows("step21-target", {"fp8_": rows})
        self.assertIn("| 128 | no | 16384 | kernel | 600 | 1100 | 1222 | 10 % | 1.83 | PASS |", text)
        self.assertIn("1100 TFLOP/s with the quantize kernels, 1222 without (target ≥ 1000: **met** counted with them", text)
        self.assertIn("Step 21 / step 16 at d = 128, N = 16k: **1.83** (target ≥ 1.6: **met**)", text)

    def test_the_accuracy_sits_beside_the_emulation(self):
        base = {"date": "2026-01-01T00:00Z", "commit": "abc1234", "device": "a GPU", "cuda": "13.0", "d": "128",
                "causal": "0", "N": "1024", "inputs": "outliers", "rmse": "1e-3"}
        rows = [dict(base, step="16", fp8_scales="", incoherent="", raw_rmse=""),
                dict(base, step="21", fp8_scales="block", incoherent="1", raw_rmse="1.2e-2")]
        emu = [{"protocol": "outliers", "d": "128", "causal": "0", "N": "1024", "variant": "fp8-block-incoherent", "rmse": "1e-2"}]
        text = with_rows("step21-accuracy", {"fp8acc_": rows, "fp8_accuracy": emu})
        self.assertIn("| outliers | 128 | no | 1024 | 1.00e-03 | – | – | – | 1.20e-02 (1.20×) |", text)
        self.assertIn("at most 9.1e-3 (FlashAttention-3's figure) at **0 of 1** points", text)
        self.assertIn("within 1.5× at **1 of 1** points, at or above it at 1", text)

    def test_the_loads_table_gives_each_kernel_its_share_of_the_ceilings_and_the_call_its_speed_up(self):
        base = self.LOADS
        # 3 · 16 · 16384 · 128 elements: amax's 2 bytes each take 50.33 µs at 4 TB/s, quantize's 3 bytes 75.50 µs
        before = [dict(base, kernels_ms="memset:0.001;amax:0.0719;quantize:0.1510;fp8:0.9")]
        after = [dict(base, kernels_ms="memset:0.001;amax:0.0559;quantize:0.0888;fp8:0.9")]
        peaks = [{"peak": "hbm-read", "unit": "bytes/s", "value": "4e12"}, {"peak": "hbm-write", "unit": "bytes/s", "value": "4e12"},
                 {"peak": "hbm-latency", "unit": "ns", "value": "300"}]
        text = with_rows("step21-quantize-loads", {"fp8loads_": after, "fp8peaks_a_gpu": peaks, "fp8defaults_a_gpu": before})
        self.assertIn("| 128 | 16384 | 72 | 56 | 0.70 | 0.90 | 151 | 89 | 0.50 | 0.85 | 1.07 | PASS |", text)
        self.assertIn("amax at or above 0.85 of the read ceiling: **1 of 1** points (predicted all: **held**)", text)
        self.assertIn("quantize at or above 0.80 of its bytes' time at the ceilings: **1 of 1**", text)
        self.assertIn("d = 128, N = 16384: 1.075 (0.99–1.02): inside at **0 of 1**", text)
        self.assertIn("The forward kernel (unchanged), after / before: 1.000–1.000 (predicted within 0.98–1.02: **held**)", text)
        self.assertIn("HBM read 4.00 TB/s, write 4.00 TB/s", text)
        slow = [dict(base, kernels_ms="memset:0.001;amax:0.0719;quantize:0.1510;fp8:0.9")]  # nothing changed
        text = with_rows("step21-quantize-loads", {"fp8loads_": slow, "fp8peaks_a_gpu": peaks, "fp8defaults_a_gpu": before})
        self.assertIn("amax at or above 0.85 of the read ceiling: **0 of 1** points (predicted all: **missed**)", text)
        two = after + [dict(base, device="another GPU", kernels_ms=after[0]["kernels_ms"])]
        with self.assertRaises(ValueError):
            with_rows("step21-quantize-loads", {"fp8loads_": two, "fp8peaks_a_gpu": peaks})

    def test_the_bursts_table_sets_amax_beside_the_run_without(self):
        base = self.LOADS
        peaks = self.PEAKS
        without = [dict(base, kernels_ms="memset:0.001;amax:0.0592;quantize:0.0888;fp8:0.9")]  # 50.33 µs of bytes: 0.85
        bursts = [dict(base, commit="abc1234+x", kernels_ms="memset:0.001;amax:0.0530;quantize:0.0888;fp8:0.9")]  # 0.95
        files = {"fp8bursts_": bursts, "fp8burstsbase_a_gpu": without, "fp8burstspeaks_a_gpu": peaks}
        text = with_rows("step21-amax-bursts", files)
        self.assertIn("| 128 | 16384 | 59 | 53 | 0.85 | 0.95 | 89 | 89 | 1.006 | PASS |", text)
        self.assertIn("at d = 128 and 256: **1 of 1** points (predicted all: **held**)", text)
        self.assertIn("1.000–1.000 (predicted within 0.98–1.02: **held**)", text)
        slow = [dict(bursts[0], kernels_ms="memset:0.001;amax:0.0592;quantize:0.0888;fp8:0.95")]
        text = with_rows("step21-amax-bursts", dict(files, fp8bursts_=slow))
        self.assertIn("at d = 128 and 256: **0 of 1** points (predicted all: **missed**)", text)
        self.assertIn("(predicted within 0.98–1.02: **missed**)", text)
        # the ceilings are the bursts run's own, not the loads phase's file
        self.assertIn("No `fp8burstspeaks` file", with_rows("step21-amax-bursts", {"fp8bursts_": bursts, "fp8burstsbase_a_gpu": without, "fp8peaks_a_gpu": peaks}))
        two = bursts + [dict(bursts[0], device="another GPU")]
        with self.assertRaises(ValueError):
            with_rows("step21-amax-bursts", dict(files, fp8bursts_=two))

    def test_the_slices_table_sets_both_builds_beside_the_run_without(self):
        base = dict(self.LOADS, d="64")
        peaks = self.PEAKS
        # d = 64: amax's bytes take 25.17 µs at 4 TB/s, quantize's 37.75 µs; d = 128 twice that
        d128 = dict(base, d="128", kernels_ms="memset:0.001;amax:0.0530;quantize:0.0888;fp8:0.9")
        without = [dict(base, kernels_ms="memset:0.001;amax:0.0296;quantize:0.0539;fp8:0.5"), d128]
        rolled = [dict(base, commit="abc1234+r", kernels_ms="memset:0.001;amax:0.0262;quantize:0.0420;fp8:0.5"), d128]
        unrolled = [dict(base, commit="abc1234+u", kernels_ms="memset:0.001;amax:0.0262;quantize:0.0440;fp8:0.5"), d128]
        files = {"fp8slicesrolled_": rolled, "fp8slicesunrolled_": unrolled, "fp8slicesbase_a_gpu": without,
                 "fp8slicespeaks_a_gpu": peaks}
        text = with_rows("step21-slices", files)
        self.assertIn("| 64 | 16384 | 0.85 | 0.96 | 0.96 | 54 | 42 | 44 | 0.70 | 0.90 | 0.86 |", text)
        self.assertIn("**Rolled** at d = 64: amax at or above 0.95 of the read ceiling at **1 of 1** points, quantize at or "
                      "above 0.88 at **1 of 1** (predicted all: **held**); the falsifier, quantize below 0.80: **did not fire**", text)
        self.assertIn("quantize at or above 0.88 at **0 of 1** (predicted all: **missed**)", text)
        self.assertIn("Rolled's controls (amax and quantize at d = 128 and 256, the forward kernel everywhere), with / "
                      "without: 1.000–1.000 (predicted within 0.98–1.02: **held**)", text)
        self.assertIn("Rolled at least as fast as unrolled in quantize at d = 64: **1 of 1** (predicted all: **held**)", text)
        slow = [dict(rolled[0], kernels_ms="memset:0.001;amax:0.0262;quantize:0.0500;fp8:0.5"),
                dict(d128, kernels_ms="memset:0.001;amax:0.0600;quantize:0.0888;fp8:0.9")]
        text = with_rows("step21-slices", dict(files, fp8slicesrolled_=slow))
        self.assertIn("the falsifier, quantize below 0.80: **fired**", text)
        self.assertIn("Rolled at least as fast as unrolled in quantize at d = 64: **0 of 1** (predicted all: **missed**)", text)
        self.assertIn("(predicted within 0.98–1.02: **missed**)", text)
        self.assertIn("No `fp8slicespeaks` file", with_rows("step21-slices", dict(files, fp8slicespeaks_a_gpu=[])))
        with self.assertRaises(ValueError):
            with_rows("step21-slices", dict(files, fp8slicesunrolled_=[dict(unrolled[0], device="another GPU")]))

    def test_the_half_rows_table_reads_its_prediction_and_names_its_baseline(self):
        base = dict(self.LOADS, d="64")
        peaks = self.PEAKS
        d128 = dict(base, d="128", kernels_ms="memset:0.001;amax:0.0530;quantize:0.0888;fp8:0.9")
        without = [dict(base, kernels_ms="memset:0.001;amax:0.0330;quantize:0.0680;fp8:0.5"), d128]
        half = [dict(base, commit="abc1234+h", kernels_ms="memset:0.001;amax:0.0300;quantize:0.0520;fp8:0.5"), d128]
        files = {"fp8halfrows_": half, "fp8halfrowspeaks_a_gpu": peaks, "fp8slicesbase_a_gpu": without}
        text = with_rows("step21-half-rows", files)
        self.assertIn("| 64 | 16384 | 0.76 | 0.84 | 68 | 52 | 0.56 | 0.73 |", text)
        self.assertIn("quantize at or above 0.70 of its bytes' time at the ceilings: **1 of 1**; amax at or above 0.80 "
                      "of the read ceiling: **1 of 1** (predicted all: **held**)", text)
        self.assertIn("gains 24 %: **did not fire**", text)
        self.assertIn("(predicted within 0.98–1.02: **held**)", text)
        self.assertIn("from `fp8slicesbase_a_gpu.csv`, an earlier run on another machine", text)
        small = [dict(half[0], kernels_ms="memset:0.001;amax:0.0300;quantize:0.0640;fp8:0.5"), d128]
        text = with_rows("step21-half-rows", dict(files, fp8halfrows_=small, fp8halfbase_a_gpu=without))
        self.assertIn("**0 of 1**; amax", text)
        self.assertIn("gains 6 %: **fired**", text)
        self.assertIn("the two runs minutes apart on one machine", text)
        with self.assertRaises(ValueError):
            with_rows("step21-half-rows", dict(files, fp8halfrows_=half + [dict(half[0], device="another GPU")]))

    def test_no_rows_give_one_sentence(self):
        for table in ("step21-target", "step21-accuracy", "step21-quantize-loads", "step21-amax-bursts", "step21-slices", "step21-half-rows"):
            self.assertTrue(with_rows(table, {}).startswith("_no measurements yet"))


class Step19(unittest.TestCase):
    """docs/19_hopper_backward.md's producer table on made-up rows: the kernel clock, the prediction's verdict."""
    ROW = {"device": "a GPU", "cuda": "13.0", "step": "19", "d": "128", "causal": "0", "N": "16384", "B": "1", "H": "16",
           "bwd_pass": "1", "bwd_ms": "9.0", **OURS}

    def rows(self, producer_ms, atomics_ms=10.5):
        base = [dict(self.ROW, variant="-", bwd_kernel_ms="10.0"), dict(self.ROW, variant="ablate=atomics", bwd_kernel_ms=str(atomics_ms))]
        other = dict(self.ROW, variant="dq=centered", bwd_kernel_ms="11.0")  # another flag's value: not an ablation
        return base + [other, dict(self.ROW, variant="ablate=producer", bwd_kernel_ms=str(producer_ms))]

    def test_the_producer_column_by_the_kernel_clock_and_its_verdict(self):
        text = with_rows("step19-producer", {"abl19_": self.rows(10.3)})
        self.assertIn("| 128 | no | 16384 | 10.000 | 1.05 | 1.03 |", text)  # bwd_kernel_ms, not bwd_ms; no `centered` column
        self.assertIn("Kernel time (CUPTI activity records, every kernel of the backward summed, cold L2)", text)
        self.assertIn("**1 of 1** (held); its falsifier, a point below 1.00 or above 1.10: **did not fire**", text)
        text = with_rows("step19-producer", {"abl19_": self.rows(9.9)})
        self.assertIn("**0 of 1** (missed); its falsifier, a point below 1.00 or above 1.10: **fired** (0.990)", text)
        text = with_rows("step19-producer", {"abl19_": self.rows(10.05)})
        self.assertIn("**0 of 1** (missed); its falsifier, a point below 1.00 or above 1.10: **did not fire**", text)
        failed = self.rows(10.3)
        failed[-1]["bwd_pass"] = "0"
        text = with_rows("step19-producer", {"abl19_": failed})
        self.assertIn("FAIL", text)
        self.assertNotIn("The prediction", text)  # a run that failed its check is not read

    def test_the_reading_tested_beside_consumer_0(self):
        row = dict(self.ROW, d="64")
        def rows(last_ms, cons0_ms=11.5):
            return [dict(row, variant="-", bwd_kernel_ms="10.0"), dict(row, variant="ablate=producer", bwd_kernel_ms=str(cons0_ms)),
                    dict(row, variant="ablate=producer-last", bwd_kernel_ms=str(last_ms))]
        text = with_rows("step19-producer-last", {"ablast_": rows(10.5)})
        self.assertIn("| 64 | no | 16384 | 10.000 | 1.15 | 1.05 |", text)
        self.assertIn("**1 of 1** (held); its falsifier, `producer-last` within 0.02 of `producer` at a point: **did not fire**", text)
        text = with_rows("step19-producer-last", {"ablast_": rows(11.0)})  # 0.05 below, but above 1.08
        self.assertIn("**0 of 1** (missed); its falsifier, `producer-last` within 0.02 of `producer` at a point: **did not fire**", text)
        text = with_rows("step19-producer-last", {"ablast_": rows(11.4)})
        self.assertIn("**0 of 1** (missed); its falsifier, `producer-last` within 0.02 of `producer` at a point: **fired**", text)

    def test_the_swapped_operands_beside_dq_keys(self):
        def rows(sw64, keys64, sw128):  # d = 64 and 128, no mask; the default at 10 ms
            out = []
            for d, sw, keys in (("64", sw64, keys64), ("128", sw128, 12.0)):
                r = dict(self.ROW, d=d)
                out += [dict(r, variant="-", bwd_kernel_ms="10.0"), dict(r, variant="ablate=dq-keys", bwd_kernel_ms=str(keys)),
                        dict(r, variant="ablate=swapped", bwd_kernel_ms=str(sw))]
            return out
        text = with_rows("step19-swapped", {"swap19a_": rows(12.6, 12.0, 11.0)})
        self.assertIn("| 64 | no | 16384 | 10.000 | 1.20 | 1.26 |", text)
        self.assertIn("Kernel time (CUPTI activity records", text)
        self.assertIn("d = 64, no mask, N = 16384: **1.050**", text)
        self.assertIn("**2 of 2** (held)", text)
        self.assertIn("**did not fire**", text)
        text = with_rows("step19-swapped", {"swap19a_": rows(13.5, 12.0, 10.2)})  # 1.125 over dq-keys; 1.02 over the default at d = 128
        self.assertIn("**0 of 2** (missed)", text)
        self.assertIn("**did not fire**", text)
        text = with_rows("step19-swapped", {"swap19a_": rows(11.5, 12.0, 11.0)})  # faster than dq-keys at d = 64
        self.assertIn("**1 of 2** (missed)", text)
        self.assertIn("**fired** (0.958)", text)
        text = with_rows("step19-swapped-again", {"swap19b_": rows(12.6, 12.0, 9.8)})  # faster than the default at d = 128
        self.assertIn("**fired** (0.980)", text)
        failed = rows(12.6, 12.0, 11.0)
        failed[2]["bwd_pass"] = "0"
        text = with_rows("step19-swapped", {"swap19a_": failed})
        self.assertIn("FAIL", text)
        self.assertIn("**1 of 1** (held)", text)  # the failed point is not read

    def test_the_tile_shape_against_the_default(self):
        row = dict(self.ROW, d="64")
        def rows(*tiles_ms):
            out = []
            for n, ms in zip(("4096", "16384"), tiles_ms):
                out += [dict(row, N=n, variant="-", bwd_kernel_ms="10.0"), dict(row, N=n, variant="ablate=tiles", bwd_kernel_ms=str(ms))]
            return out
        text = with_rows("step19-tiles", {"tiles19_": rows(9.5, 9.9)})
        self.assertIn("| 64 | no | 16384 | 10.000 | 0.99 |", text)
        self.assertIn("| with `tiles` |", text)
        self.assertIn("**2 of 2** (held); its falsifier, a point above 1.03: **did not fire**.", text)
        text = with_rows("step19-tiles", {"tiles19_": rows(8.5, 10.2)})  # one below the band, one above it but under the falsifier
        self.assertIn("**0 of 2** (missed); its falsifier, a point above 1.03: **did not fire**.", text)
        text = with_rows("step19-tiles", {"tiles19_": rows(9.5, 10.4)})
        self.assertIn("**1 of 2** (missed); its falsifier, a point above 1.03: **fired** (1.040).", text)
        failed = rows(9.5, 9.9)
        failed[-1]["bwd_pass"] = "0"
        text = with_rows("step19-tiles", {"tiles19_": failed})
        self.assertIn("FAIL", text)
        self.assertIn("**1 of 1** (held)", text)  # the failed point is not read

    def test_the_tile_shape_at_d128(self):
        # the same table over its own file (tiles19d_), with the d = 128 prediction's band and falsifier
        row = dict(self.ROW, d="128")
        rows = lambda *ms: [dict(row, N=n, variant=v, bwd_kernel_ms=str(x)) for n, t in zip(("4096", "16384"), ms)
                            for v, x in (("-", 10.0), ("ablate=tiles", t))]
        text = with_rows("step19-tiles-d128", {"tiles19d_": rows(9.5, 10.1)})
        self.assertIn("| 128 | no | 16384 | 10.000 | 1.01 |", text)
        self.assertIn("`tiles` between 0.94 and 1.01 of the default at every point): **2 of 2** (held); its falsifier, a point above 1.04: **did not fire**.", text)
        text = with_rows("step19-tiles-d128", {"tiles19d_": rows(9.3, 10.3)})  # both outside the band, under the falsifier
        self.assertIn("**0 of 2** (missed); its falsifier, a point above 1.04: **did not fire**.", text)
        text = with_rows("step19-tiles-d128", {"tiles19d_": rows(9.5, 10.5)})
        self.assertIn("**1 of 2** (missed); its falsifier, a point above 1.04: **fired** (1.050).", text)
        self.assertTrue(with_rows("step19-tiles-d128", {"tiles19_": rows(9.5, 10.1)}).startswith("_no measurements yet"))  # d = 64's file is not read

    def test_the_tile_fix_before_and_after(self):
        # two files, each with its own default: after / before is read through each file's default
        row = dict(self.ROW, d="128")
        def rows(default_ms, *tiles_ms):
            return [dict(row, N=n, variant=v, bwd_kernel_ms=str(x)) for n, t in zip(("4096", "16384"), tiles_ms)
                    for v, x in (("-", default_ms), ("ablate=tiles", t))]
        before = rows(10.0, 10.5, 11.0)
        text = with_rows("step19-tiles-d128-fix", {"tiles19f_": before, "tiles19g_": rows(20.0, 20.0, 21.0)})  # the second run twice as slow
        self.assertIn("| 128 | no | 16384 | 20.000 | 1.100 | 1.050 | 0.955 |", text)
        self.assertIn("| 128 | no | 4096 | 20.000 | 1.050 | 1.000 | 0.952 |", text)
        self.assertIn("(after / before between 0.94 and 0.99 at every point): **2 of 2** (held); its falsifier, a point above 1.01: **did not fire**.", text)
        text = with_rows("step19-tiles-d128-fix", {"tiles19f_": before, "tiles19g_": rows(10.0, 10.5, 11.2)})
        self.assertIn("**0 of 2** (missed); its falsifier, a point above 1.01: **fired** (1.018).", text)
        failed = rows(10.0, 10.0, 10.5)
        failed[-1]["bwd_pass"] = "0"
        text = with_rows("step19-tiles-d128-fix", {"tiles19f_": before, "tiles19g_": failed})
        self.assertIn("**1 run(s) FAIL their check**", text)
        self.assertIn("**1 of 1** (held)", text)  # the failed point is not read
        self.assertNotIn("| 128 |", with_rows("step19-tiles-d128-fix", {"tiles19f_": before}))  # no pair, no rows
        self.assertTrue(with_rows("step19-tiles-d128-fix", {}).startswith("_no measurements yet"))

    def test_the_tile_fix_spread_over_four_runs(self):
        row = dict(self.ROW, d="128", N="16384")
        run = lambda default_ms, tiles_ms: [dict(row, variant="-", bwd_kernel_ms=str(default_ms)),
                                            dict(row, variant="ablate=tiles", bwd_kernel_ms=str(tiles_ms))]
        files = {"tiles19f_": run(10.0, 10.5), "tiles19g_": run(10.4, 9.6), "tiles19h_": run(10.2, 10.6), "tiles19i_": run(10.1, 10.8)}
        text = with_rows("step19-tiles-d128-fix-spread", files)
        self.assertIn("| 128 | no | 16384 | 10.000–10.400 (4) | 10.500–10.600 (2) | 9.600–10.800 (2) | 1.125 |", text)
        failed = dict(files, tiles19i_=[dict(r, bwd_pass="0") for r in run(10.1, 10.8)])
        self.assertIn("| 10.000–10.400 (3) | 10.500–10.600 (2) | 9.600–9.600 (1) |",
                      with_rows("step19-tiles-d128-fix-spread", failed))  # a failed run is not read
        self.assertTrue(with_rows("step19-tiles-d128-fix-spread", {}).startswith("_no measurements yet"))

    def test_the_tile_guess_at_small_n(self):
        row = dict(self.ROW, d="64", N="1024")
        def rows(plain_ms, causal_ms):
            return [dict(row, causal=c, variant=v, bwd_kernel_ms=str(ms)) for c, ms in (("0", plain_ms), ("1", causal_ms))
                    for v, ms in (("-", 10.0), ("ablate=tiles", ms))]
        text = with_rows("step19-tiles-small", {"tiles19c_": rows(9.9, 9.7)})
        self.assertIn("**2 of 2** (held); its falsifier, a point without the mask above 1.02: **did not fire**.", text)
        text = with_rows("step19-tiles-small", {"tiles19c_": rows(9.9, 9.9)})  # the causal point over its 0.98
        self.assertIn("**1 of 2** (missed); its falsifier, a point without the mask above 1.02: **did not fire**.", text)
        text = with_rows("step19-tiles-small", {"tiles19c_": rows(10.3, 9.0)})
        self.assertIn("**1 of 2** (missed); its falsifier, a point without the mask above 1.02: **fired** (1.030).", text)

    def test_sample_counts_against_the_first_run(self):
        def run(label, bra, hgmma, wait):
            lead = {"gpu": "a GPU", "commit": "abc1234", "date": "2026-01-01T00:00Z", "label": label, "kernel": "k"}
            return [dict(lead, kind="opcode", name="BRA", samples_pct="x", static="1", executed="1", top_reason="long_sb",
                         top_reason_pct="50", samples=str(bra)),
                    dict(lead, kind="opcode", name="HGMMA", samples_pct="x", static="1", executed="1", top_reason="wait",
                         top_reason_pct="50", samples=str(hgmma)),
                    dict(lead, kind="reason", name="wait", samples_pct="x", static="", executed="", top_reason="",
                         top_reason_pct="", samples=str(wait))]
        text = with_rows("step19-where-samples", {"prodsass_": run("default", 600, 400, 300) + run("other", 500, 1000, 900)})
        self.assertIn("| all samples | **100** | **150** |", text)      # 1500 samples against 1000
        self.assertIn("| `HGMMA` | 40.0 (wait) | 100.0 (wait) |", text)  # counts over the first run's total, not shares
        self.assertIn("| stall `wait` | 30.0 | 90.0 |", text)
        old = [dict(r, samples="") for r in run("default", 600, 400, 300)]  # rows written before the counts were kept
        self.assertTrue(with_rows("step19-where-samples", {"prodsass_": old}).startswith("_no measurements yet"))

    def test_no_rows_give_one_sentence(self):
        for table in ("step19-producer", "step19-producer-last", "step19-tiles"):
            self.assertTrue(with_rows(table, {}).startswith("_no measurements yet"))


class Tables(unittest.TestCase):
    def test_a_row_of_the_wrong_width_is_refused(self):
        # step20-target's "not measured" rows had one cell too many: Markdown shows such a row shifted
        self.assertIn("| 1 | 2 |", common.table(["a", "b"], [[1, 2]]))
        with self.assertRaises(ValueError):
            common.table(["a", "b"], [[1, 2, 3]])

    def test_rows_of_two_gpus_are_refused_unless_the_table_sets_them_apart(self):
        a = {"date": "2026-01-01T00:00Z", "commit": "abc1234", "device": "GPU A"}
        b = dict(a, device="GPU B")
        self.assertIn("on an GPU A", common.provenance([a, a]))
        with self.assertRaises(ValueError):
            common.provenance([a, b])
        self.assertIn("GPU A and an GPU B", common.provenance([a, b], many_gpus=True))

    def test_step20_target_with_points_missing_renders(self):
        row = {"date": "2026-01-01T00:00Z", "commit": "abc1234", "device": "a GPU", "cuda": "13.0", "step": "20",
               "dtype": "fp16", "d": "128", "causal": "0", "N": "1024", "Nk": "1024", "B": "16", "H": "16",
               "variant": "-", "pass": "1", "kernel_ms": "1.0", "kernel_tflops": "100", **OURS}
        text = with_rows("step20-target", {"clock_": [row]})
        self.assertIn("not measured | – | – | – | – | – |", text)
        self.assertIn("**Not measured:", text)


class ScriptsNamed(unittest.TestCase):
    def test_every_script_is_in_the_readme_layout_and_in_scripts_readme(self):
        readme = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
        layout = readme[readme.index("## Layout"):]
        guide = open(os.path.join(ROOT, "scripts", "README.md"), encoding="utf-8").read()
        names = [f for f in os.listdir(os.path.join(ROOT, "scripts"))
                 if f not in ("README.md", "__pycache__") and not f.startswith(".")]
        self.assertIn("doc_tables.py", names)
        for name in names:
            with self.subTest(script=name):
                self.assertIn(name, layout)
                self.assertIn(f"`{name}", guide)

    def test_every_script_with_a_shebang_is_executable(self):
        # step20_target.sh runs peer_tables.sh by its path: without the bit a GPU call lost a phase to
        # "Permission denied". A fresh clone's modes are git's, so the check on disk is the check on git.
        d = os.path.join(ROOT, "scripts")
        def shebang(f):
            with open(os.path.join(d, f), "rb") as fh:
                return fh.read(2) == b"#!"
        scripts = [f for f in sorted(os.listdir(d)) if os.path.isfile(os.path.join(d, f)) and shebang(f)]
        self.assertIn("peer_tables.sh", scripts)
        for name in scripts:
            with self.subTest(script=name):
                self.assertTrue(os.access(os.path.join(d, name), os.X_OK), f"scripts/{name} has a #! line but no x bit")


if __name__ == "__main__":
    unittest.main()
