"""TABLES: every generated block's name and the function that writes it. A plain dict: another module may
add its own (`from doctables import TABLES; TABLES["my-table"] = my_function`) before main() runs."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # scripts/, for step_diff
import step_diff  # noqa: E402  (each step's kernel diff, lines per anchor)

from .decode import decode_clocks, decode_merge, decode_probe, decode_splits, decode_target
from .first_run import first_run
from .model import (ceilings, io_complexity, model_latencies, model_latency, model_latency_counts, model_latval, model_h100_tour, model_h200_queued, model_latval_inputs, model_refined, model_latency_sweeps, model_path, model_step, model_summary, model_tour, paper_peaks, paper_peaks_line,
                    step08_stored)
from .python_pkg import python_gpt, python_gpt_host, python_host_cost, python_peers
from .step20 import fp8_accuracy, step20_ablation, step20_exp2, step20_exp2_noconv, step20_h200_default, step20_mufu, step20_target, step20_units
from .step19_clocks import step19_clocks
from .step21 import step21_accuracy, step21_amax_bursts, step21_half_rows, step21_slices, step21_banks, step21_d64, step21_d64_accuracy, step21_d64_samples, step21_defaults, step21_quantize_loads, step21_lean_ops, step21_pv_order, step21_sass_units, step21_staged, step21_stepped, step21_target
from .peers import bwd19_deterministic, bwd19_point, bwd19_target, bwd_target, fwd16_target, fwd16_wide, fwd_target, target, versus_peers
from .ring import ring_line, ring_nccl, ring_overlap, ring_table
from .steps import (ablation, bwd_dropout, bwd_first, dropout_why, bwd_model, dq_centered_cost, dq_centered_why, dq_kernels, dq_precision, sass_stalls, step19_desc, step19_dq_turns, step19_producer, step19_producer_last, step19_tiles, step19_tiles_small, sass_counts, step19_kernels, step19_turns, step19_hoist, bwd_ledger, bwd_tiles, bwd_variants, compare, loop_and_grid, ncu_extra,
                    ncu_on_chip, ncu_stalls, step12_dropout, step_backward, step_dtype, step_ncu, step_sweep, tour)


TABLES = {
    "step01-sweep": lambda: step_sweep("01"),
    "step01-dtype": lambda: step_dtype("01"),
    "step01-ncu": lambda: step_ncu("01"),
    "step02-sweep": lambda: step_sweep("02"),
    "step02-ncu": lambda: step_ncu("02"),
    "step02-vs-01": lambda: compare("01", "02", speedup=False),
    "step03-sweep": lambda: step_sweep("03"),
    "step03-ncu": lambda: step_ncu("03"),
    "step04-sweep": lambda: step_sweep("04"),
    "step04-ncu": lambda: step_ncu("04"),
    "step05-sweep": lambda: step_sweep("05"),
    "step05-ncu": lambda: step_ncu("05"),
    "step05-q-vs-k": lambda: compare("05", "05", ("split=k",), ("split=q",), "split-K", "split-Q"),
    "step06-sweep": lambda: step_sweep("06"),
    "step06-ncu": lambda: step_ncu("06"),
    "step06-vs-05": lambda: compare("05", "06", ("split=q",), ("-",), "step 05 (split-Q)", "step 06"),
    "step07-sweep": lambda: step_sweep("07"),
    "step07-ncu": lambda: step_ncu("07"),
    "step07-vs-06": lambda: compare("06", "07"),
    "step08-backward": lambda: step_backward("08"),
    "step09-sweep": lambda: step_sweep("09"),
    "step10-sweep": lambda: step_sweep("10"),
    "step11-sweep": lambda: step_sweep("11"),
    "step12-sweep": lambda: step_sweep("12"),
    "step09-vs-07": lambda: compare("07", "09", both=True),
    "step10-vs-09": lambda: compare("09", "10", ("-",), ("-",), speedup=False, both=True),
    "step09-10-ncu": lambda: ncu_on_chip(("07", "09", "10")),
    "step11-vs-10": lambda: compare("10", "11", ("-",), ("-",), both=True),
    "step10-11-ncu": lambda: ncu_stalls(("10", "11")),
    "step09-11-ncu": lambda: ncu_stalls(("09", "10", "11")),
    "step12-vs-11": lambda: compare("11", "12", ("-",), ("-",), both=True),
    "step11-12-ncu": lambda: ncu_stalls(("11", "12")),
    "step12-ablation": lambda: ablation("12"),
    "step12-target": lambda: target("12"),
    "step13-target": bwd_target,
    "step14-sweep": lambda: step_sweep("14"),
    "step15-sweep": lambda: step_sweep("15"),
    "step14-tiles": lambda: ablation("14", "--tiles"),
    "step15-tiles": lambda: ablation("15", "--tiles"),
    "step14-target": lambda: fwd_target("14"),
    "step15-target": lambda: fwd_target("15"),
    "step15-ncu": lambda: ncu_stalls(("14", "15")),
    "step16-target": fwd16_target,
    "step17-target": decode_target,
    "step17-clocks": decode_clocks,
    "step17-merge": decode_merge,
    "step17-probe": decode_probe,
    "step17-splits": decode_splits,
    "step18-ring": ring_table,
    "step18-ring-line": ring_line,
    "step18-overlap": ring_overlap,
    "step18-priority": lambda: ring_overlap("priority_timeline"),
    "step18-nccl": ring_nccl,
    "step16-d256": fwd16_wide,
    "step16-ablation": lambda: ablation("16", only="ablate"),
    "step16-tiles": lambda: ablation("16", "--tiles", only="tiles"),
    "step16-ncu": lambda: ncu_stalls(("15", "16"), pattern="ncu16_*.csv"),
    "step19-target": bwd19_target,
    "step19-deterministic": bwd19_deterministic,
    "step19-point": bwd19_point,
    "step19-clocks": step19_clocks,  # the point on an H100 with nvidia-smi's SM clock and power beside it
    "step19-dq-turns": step19_dq_turns,
    "step19-sass": lambda: sass_stalls("19"),
    "step19-hoist": step19_hoist,
    "step19-desc": step19_desc,
    "step19-sum-kernels": lambda: step19_kernels("preturns_*_bwd19.csv", "dqsum_*_bwd19.csv"),
    "step19-sum-ablation": lambda: ablation("19", pass_="bwd", pattern="dqsumabl_*_step19.csv"),
    "step19-turns": step19_turns,
    "step19-ablation": lambda: ablation("19", pass_="bwd"),
    "step19-producer": step19_producer,
    "step19-producer-last": step19_producer_last,
    "step19-tiles": step19_tiles,
    "step19-tiles-again": lambda: step19_tiles("tiles19b_*_step19.csv"),
    "step19-tiles-small": step19_tiles_small,
    "step19-tiles-d128": lambda: step19_tiles("tiles19d_*_step19.csv", lo=0.94, hi=1.01, ceiling=1.04),
    "step19-where-samples": lambda: sass_counts("prodsass_*_step19.csv", n_reasons=6),
    "step19-tiles-d128-again": lambda: step19_tiles("tiles19e_*_step19.csv", lo=0.94, hi=1.01, ceiling=1.04),
    "step19-tiles-d128-samples": lambda: sass_counts("tilessassnm_*_step19.csv", n_ops=10, n_reasons=6),
    "step19-tiles-d128-samples-causal": lambda: sass_counts("tilessass_*_step19.csv", n_ops=10, n_reasons=6),
    "step19-ncu": lambda: ncu_stalls(("19",)),
    "step19-model": lambda: bwd_model("19", "clock_*_bwd19.csv"),
    "step19-dq-precision": dq_precision,
    "step19-dq-kernels": dq_kernels,
    "step19-dq-centered-cost": dq_centered_cost,
    "step19-dq-centered-why": dq_centered_why,
    "step19-dq-blueprints": lambda: dq_kernels(on_gpu=False),
    "step19-dropout": bwd_dropout,
    "step19-dropout-why": dropout_why,
    "step13-ledger": bwd_ledger,
    "step13-first": bwd_first,
    "step13-ncu": lambda: ncu_stalls(("13",)),
    "step13-ncu-bytes": lambda: step_ncu("13"),
    "step12-dropout": step12_dropout,
    "step13-variants": bwd_variants,
    "step13-tiles": bwd_tiles,
    "all-steps-ncu": lambda: ncu_stalls(tuple(f"{i:02d}" for i in range(1, 13))),
    "step08-ncu": lambda: step_ncu("08"),
    "step08-ncu-extra": lambda: ncu_extra("08"),
    "versus-peers": versus_peers,
    "loop-and-grid": loop_and_grid,
    "tour": tour,
    # Step 20 (docs/20_persistent.md): the units of the exponentials, the target run, --exp2, the ablations.
    "step20-units": step20_units,
    "step20-target": step20_target,
    "step20-mufu": step20_mufu,
    "step20-h200-default": step20_h200_default,
    "step20-exp2": step20_exp2,
    "step20-exp2-noconv": step20_exp2_noconv,
    "step20-ablation": step20_ablation,
    "step20-ablation-h100": lambda: step20_ablation("ablation_h100_*_step20.csv"),
    # FP8's accuracy before its kernel (docs/fp8_accuracy.md): the CPU emulation.
    "fp8-accuracy": fp8_accuracy,
    # Step 21 (docs/21_fp8.md): beside step 16 in bf16, and its accuracy beside the emulation's.
    "step21-target": step21_target,
    "step21-accuracy": step21_accuracy,
    "step21-banks": step21_banks,
    "step21-staged": step21_staged,
    "step21-sass-units": step21_sass_units,
    "step21-stepped": step21_stepped,
    "step21-pv-order": step21_pv_order,
    "step21-lean-ops": step21_lean_ops,
    "step21-lean-ops-h100": lambda: step21_lean_ops("fp8ops_h100_*.csv"),
    "step21-defaults": step21_defaults,
    "step21-d64": step21_d64,
    "step21-d64-accuracy": step21_d64_accuracy,
    "step21-d64-samples": step21_d64_samples,
    "step21-quantize-loads": step21_quantize_loads,
    "step21-amax-bursts": step21_amax_bursts,
    "step21-slices": step21_slices,
    "step21-half-rows": step21_half_rows,
    "step21-sass": lambda: sass_stalls("21"),
    # The Python package (docs/python.md): the small GPT both ways, the package beside the steps and SDPA.
    "python-gpt": python_gpt,
    "python-gpt-host": python_gpt_host,
    "python-host-cost": python_host_cost,
    "python-peers": python_peers,
    # The README's first run: how long scripts/run.sh and scripts/test.sh take (plots/data/first_run*.csv).
    "first-run": first_run,
    # The theory: IO complexity (docs/03); the papers' fractions of peak beside the H200's (docs/12, README).
    "io-complexity": io_complexity,
    "peak-fraction": paper_peaks,
    "peak-fraction-line": paper_peaks_line,
    # The per-resource model (docs/model.md), and step 08's stored P (docs/08).
    "ceilings": ceilings,
    "model-tour": model_tour,
    "model-summary": model_summary,
    "model-dev-summary": lambda: model_summary("model_dev_h200.csv", "development"),
    "model-latency": model_latency,
    "model-latency-counts": model_latency_counts,
    "model-latencies": model_latencies,
    "model-latency-sweeps": model_latency_sweeps,
    "model-path-step03": lambda: model_path("03"),
    "model-latval": model_latval,
    "model-latval-inputs": model_latval_inputs,
    "model-refined": model_refined,
    "model-h100-tour": model_h100_tour,
    "model-h200-queued": model_h200_queued,
    "step08-stored": step08_stored,
    **{f"model-step{i:02d}": (lambda i=i: model_step(f"{i:02d}")) for i in range(1, 18)},
    # Each step's kernel diff against the step its doc is written against, lines per anchor (scripts/step_diff.py).
    **{f"changes-{i:02d}": (lambda i=i: step_diff.table(i)) for i in step_diff.PREV},
}


# The tables that set a step beside PyTorch's backends: each must carry CLOCK_CAPTION (tests/test_doc_tables.py).
PEER_TABLES = ("step12-target", "step13-target", "step14-target", "step15-target", "step16-target", "step16-d256",
               "step17-target", "step17-clocks", "versus-peers")
# python-peers (docs/python.md) and step20-target (docs/20) are ones too, but nothing measured them yet: their
# functions write the caption (clock_caption, which refuses mixed clocks) with their first rows; they join
# the list once those are in.
