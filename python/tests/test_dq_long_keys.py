"""python/examples/dq_long_keys.py on the CPU, small: a row per backend and point, the steps' blueprints and the
composite within bf16's errors of float64, a backend this PyTorch lacks reported as not run (never as a number),
and a wrong float64 reference caught."""

import csv
import math
import pathlib
import sys

import pytest
import torch

EXAMPLE = pathlib.Path(__file__).resolve().parents[1] / "examples"
sys.path.insert(0, str(EXAMPLE))

import dq_long_keys  # noqa: E402

BACKENDS = ["steps-13", "steps-19", "steps-19-centered", "composite"]
NKS, MEANS = [64, 300], [0.5, 0.0]


def run(tmp_path, backends, group=1):
    out = tmp_path / "dq.csv"
    rc = dq_long_keys.main(["--out", str(out), "--device", "cpu", "--nks", ",".join(map(str, NKS)), "--d", "64",
                            "--means", ",".join(map(str, MEANS)), "--group", str(group), "--backends", ",".join(backends)])
    return rc, list(csv.DictReader(open(out)))


@pytest.mark.parametrize("group", [1, 4])
def test_a_row_per_backend_and_point_within_bf16s_error(tmp_path, group):
    rc, rows = run(tmp_path, BACKENDS, group)
    assert rc == 0
    assert sorted((r["backend"], float(r["mean"]), int(r["Nk"])) for r in rows) == \
        sorted((b, m, n) for b in BACKENDS for m in MEANS for n in NKS)
    for r in rows:
        assert r["status"] == "ok", r
        assert (r["d"], r["H"], r["Hkv"]) == ("64", str(group), "1")
        for col in ("o_err", "dq_err", "dk_err", "dv_err"):
            x = float(r[col])
            # bf16 keeps 8 significant bits: every result differs from float64 (not 0), by percents at most here
            assert math.isfinite(x) and 1e-5 < x < 0.05, (col, r)


def test_a_backend_this_pytorch_lacks_is_a_row_without_numbers(tmp_path):
    rc, rows = run(tmp_path, ["sdpa-math"])
    assert rc == 0 and len(rows) == len(NKS) * len(MEANS)
    for r in rows:
        if hasattr(torch.nn.functional, "scaled_dot_product_attention"):
            assert r["status"] in ("ok",) or r["status"].startswith("not run"), r
        else:
            assert r["status"].startswith("not run") and r["dq_err"] == "", r


def test_a_wrong_reference_is_caught(tmp_path, monkeypatch):
    # The reference without its softmax scale: every backend is then far from it, and the errors say so.
    real = dq_long_keys.attention64

    def unscaled(q, k, v):
        return real(q * math.sqrt(q.shape[-1]), k, v)
    monkeypatch.setattr(dq_long_keys, "attention64", unscaled)
    rc, rows = run(tmp_path, ["composite"])
    assert rc == 0
    assert all(float(r["dq_err"]) > 0.05 for r in rows)


def test_refuses_an_unknown_backend(tmp_path):
    with pytest.raises(SystemExit) as e:
        dq_long_keys.main(["--out", str(tmp_path / "x.csv"), "--device", "cpu", "--backends", "steps-19,nope"])
    assert e.value.code == 2


def test_each_steps_backend_runs_its_own_backward_and_options(tmp_path, monkeypatch):
    # The package picks its backward's step when autograd calls it, after the forward has returned: the
    # tool's override must still hold then. Spy on the step each backward call is given.
    core = dq_long_keys.fas._core
    real, ran = core.backward, []

    def spy(step, dout, q, k, v, out, lse, shape, options, *args, **kwargs):
        ran.append((step, dict(options)))
        return real(step, dout, q, k, v, out, lse, shape, options, *args, **kwargs)
    monkeypatch.setattr(core, "backward", spy)
    backends = ["steps-13", "steps-19", "steps-19-centered"]
    rc, rows = run(tmp_path, backends)
    assert rc == 0 and all(r["status"] == "ok" for r in rows)
    points = len(NKS) * len(MEANS)
    assert [step for step, _ in ran] == [b.split("-")[1] for _ in range(points) for b in backends]
    assert [opts.get("dq") for _, opts in ran] == [("centered" if b.endswith("centered") else None)
                                                   for _ in range(points) for b in backends]
