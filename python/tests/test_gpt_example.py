"""python/examples/gpt.py on the CPU, tiny: both backends train, their loss curves agree within the
seed-to-seed spread (the criterion the GPU run is held to), and plot_gpt draws them."""

import csv
import os
import pathlib
import statistics
import subprocess
import sys

import pytest

EXAMPLE = pathlib.Path(__file__).resolve().parents[1] / "examples"
sys.path.insert(0, str(EXAMPLE))

import gpt  # noqa: E402

TINY = ["--steps", "12", "--layers", "1", "--d-model", "32", "--heads", "2", "--context", "32", "--batch", "4",
        "--warmup", "3", "--eval-every", "6", "--log-every", "6", "--seeds", "0,1,2", "--device", "cpu"]


def test_both_backends_train_and_agree_within_the_seed_spread(tmp_path):
    out, summary = tmp_path / "gpt.csv", tmp_path / "summary.csv"
    for backend in ("steps", "sdpa"):
        assert gpt.main(["--backend", backend, "--out", str(out), "--summary", str(summary)] + TINY) == 0
    rows = list(csv.DictReader(open(out)))
    by = {}
    for r in rows:
        by.setdefault((r["backend"], int(r["step"])), []).append(float(r["loss"]))
    steps = sorted({s for _, s in by})
    assert steps == list(range(1, 13)) and all(len(by[(b, s)]) == 3 for b in ("steps", "sdpa") for s in steps)
    for s in steps:
        a, b = by[("steps", s)], by[("sdpa", s)]
        spread = max(max(a) - min(a), max(b) - min(b))
        assert abs(statistics.mean(a) - statistics.mean(b)) <= spread, f"step {s}: {a} against {b}"
    assert all(float(r["host_ms"]) > 0 for r in rows), "every step has its host time"
    sums = list(csv.DictReader(open(summary)))
    assert all(float(r["host_ms_median"]) > 0 for r in sums)
    assert sorted((r["backend"], r["seed"]) for r in sums) == sorted((b, str(s)) for b in ("steps", "sdpa")
                                                                      for s in (0, 1, 2))
    plot = os.environ.get("FA_PLOT_GPT")
    if plot:  # ctest names the program where the plots are built
        subprocess.run([plot, "--csv", str(out), "--out", str(tmp_path), "--window", "3"], check=True)
        assert (tmp_path / "gpt_loss.png").stat().st_size > 1000


def test_a_file_with_other_columns_is_not_appended_to(tmp_path):
    old = tmp_path / "old.csv"
    old.write_text("date,commit,step_ms\n2026-01-01T00:00Z,abc1234,1.0\n")
    with pytest.raises(SystemExit) as e:
        gpt.main(["--backend", "steps", "--out", str(old)] + TINY)
    assert e.value.code == 2
    assert old.read_text().count("\n") == 2, "the old file is left as it was"


def test_bad_arguments_exit_2(tmp_path):
    for bad in (["--heads", "5", "--d-model", "32"], ["--steps", "0"], ["--seeds", "a,b"]):
        with pytest.raises(SystemExit) as e:
            gpt.main(["--backend", "steps", "--out", str(tmp_path / "x.csv"), "--device", "cpu"] + bad)
        assert e.value.code == 2


def test_the_host_profile_names_the_package_s_calls(tmp_path):
    # --host-profile: where a step's host time goes, by function; with the package, its call path shows in it
    prof = tmp_path / "host.txt"
    args = TINY[:TINY.index("--seeds")] + ["--seeds", "0", "--device", "cpu", "--profile-steps", "2"]
    assert gpt.main(["--backend", "steps", "--out", str(tmp_path / "g.csv"), "--host-profile", str(prof)] + args) == 0
    text = prof.read_text()
    assert "backend steps, seed 0, 2 steps on cpu" in text
    assert "flash_attn_func" in text and "cumulative" in text
